"""Public alias of :mod:`interp.model.constructions` (the hand-set weights live beside the model they set)."""

from interp.model.constructions import (  # noqa: F401
    kmedoids_transformer,
    lloyd_transformer,
    robust_kmeans_transformer,
    soft_kmeans_transformer,
    spherical_kmeans_transformer,
    trimmed_kmeans_transformer,
)
