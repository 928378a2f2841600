"""interp: look inside transformers that run clustering algorithms in context."""

from interp.algorithms import kmeans_objective, lloyd, log_objective
from interp.checkpoint import load_model
from interp.estimator import TransformerKMeans
from interp.model import KMeansTransformer, ModelConfig
from interp.result import ClusteringOutput

__all__ = ["KMeansTransformer", "ModelConfig", "ClusteringOutput", "load_model", "lloyd", "kmeans_objective",
           "log_objective", "TransformerKMeans"]
