"""The output every clustering algorithm and model returns (one call shape)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class ClusteringOutput:
    """Centroids and assignments after T steps, with the per-step trajectories.

    ``assignment_trajectory[:, t]`` are the labels used to compute ``centroid_trajectory[:, t + 1]``
    (the assignment step of iteration t+1); ``empty_clusters[:, t, j]`` is True when cluster j had no
    member at that step and the empty-cluster rule decided its centre.
    """

    centroids: Tensor  # (batch, k, d) after the last step
    assignments: Tensor  # (batch, n) int64, labels of the last step
    centroid_trajectory: Tensor  # (batch, T + 1, k, d), index 0 = initial centroids
    assignment_trajectory: Tensor  # (batch, T, n) int64
    empty_clusters: Tensor  # (batch, T, k) bool

    @property
    def any_empty(self) -> bool:
        """True when some cluster emptied at some step of some task."""
        return bool(self.empty_clusters.any())
