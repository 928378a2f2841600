"""The hooked k-means transformer and its parts (public names imported on first use, as in ``interp``)."""

from interp._lazy import lazy_exports

_EXPORTS = {
    "AttentionConfig": "interp.model.config",
    "ModelConfig": "interp.model.config",
    "InferenceSettings": "interp.model.config",
    "KMeansTransformer": "interp.model.transformer",
    "KMeansActivationCache": "interp.model.cache",
    "TLConfig": "interp.model.tl_config",
    "OutOfTrainingRange": "interp.model.transformer",
    "DenseIdentityPattern": "interp.model.attention",
    "centroid_codes": "interp.model.embedding",
    "decode_assignments": "interp.model.embedding",
    "reference_only": "interp.model.kernels.dispatch",
    "LiteralModel": "interp.model.literal",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
