"""interp: look inside transformers that run clustering algorithms in context.

The public names below are imported on first use (PEP 562), so ``import interp`` and the ``interp`` command's
argument checks do not pay for torch and TransformerLens until something needs them.
"""

from interp._lazy import lazy_exports

_EXPORTS = {
    "__version__": "interp._version",  # imported on first use too: the command line starts with nothing else
    "KMeansTransformer": "interp.model.transformer",
    "ModelConfig": "interp.model.config",
    "ClusteringOutput": "interp.result",
    "load_model": "interp.model.checkpoint",
    "lloyd": "interp.algorithms",
    "kmeans_objective": "interp.algorithms",
    "log_objective": "interp.algorithms",
    "InContextKMeans": "interp.estimator",
    "TransformerKMeans": "interp.estimator",  # the old name of InContextKMeans (FutureWarning when constructed)
    "LearnedWorseThanLloyd": "interp.estimator",  # warned when a learned model ends worse than Lloyd's algorithm
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
