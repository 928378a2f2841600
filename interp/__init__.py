"""interp: look inside transformers that run clustering algorithms in context."""

from interp.algorithms import kmeans_objective, lloyd, log_objective
from interp.model import KMeansTransformer, ModelConfig
from interp.model.checkpoint import load_model
from interp.result import ClusteringOutput

__all__ = ["KMeansTransformer", "ModelConfig", "ClusteringOutput", "load_model", "lloyd", "kmeans_objective",
           "log_objective", "TransformerKMeans"]


def __getattr__(name: str):
    """``interp.TransformerKMeans`` on first use: scikit-learn is imported only by who needs it (not the CLI)."""
    if name == "TransformerKMeans":
        from interp.estimator import TransformerKMeans

        return TransformerKMeans
    raise AttributeError(f"module 'interp' has no attribute {name!r}")
