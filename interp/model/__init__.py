"""The hooked k-means transformer and its parts (public names imported on first use, as in ``interp``)."""

from importlib import import_module

_EXPORTS = {
    "AttentionConfig": "interp.model.config",
    "ModelConfig": "interp.model.config",
    "KMeansTransformer": "interp.model.transformer",
    "OutOfTrainingRange": "interp.model.transformer",
    "DenseIdentityPattern": "interp.model.attention",
    "centroid_codes": "interp.model.embedding",
    "decode_assignments": "interp.model.embedding",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    """The public name ``name``, imported from its module on first use."""
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'interp.model' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
