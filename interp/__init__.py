"""interp: look inside transformers that run clustering algorithms in context.

The public names below are imported on first use (PEP 562), so ``import interp`` and the ``interp`` command's
argument checks do not pay for torch and TransformerLens until something needs them.
"""

from importlib import import_module

_EXPORTS = {
    "KMeansTransformer": "interp.model.transformer",
    "ModelConfig": "interp.model.config",
    "ClusteringOutput": "interp.result",
    "load_model": "interp.model.checkpoint",
    "lloyd": "interp.algorithms",
    "kmeans_objective": "interp.algorithms",
    "log_objective": "interp.algorithms",
    "TransformerKMeans": "interp.estimator",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    """The public name ``name``, imported from its module on first use."""
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'interp' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
