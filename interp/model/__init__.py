"""The hooked k-means transformer and its parts."""

from interp.model.attention import DenseIdentityPattern
from interp.model.config import AttentionConfig, ModelConfig
from interp.model.embedding import centroid_codes, decode_assignments
from interp.model.transformer import KMeansTransformer, OutOfTrainingRange

__all__ = ["AttentionConfig", "ModelConfig", "KMeansTransformer", "centroid_codes", "decode_assignments",
           "OutOfTrainingRange", "DenseIdentityPattern"]
