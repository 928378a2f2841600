"""The output every clustering algorithm and model returns (one call shape)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class ClusteringOutput:
    """Centroids and assignments after T steps, with the per-step trajectories. Every field means the same for
    Lloyd, its variants, the exact constructions and the learned models.

    ``assignments[b, i]`` is the cluster point i belongs to given the returned centroids: argmin_j ||x_i - c_j||^2
    over ``centroids``, ties to the lowest index (scikit-learn's final E-step, ``KMeans.labels_``). For Lloyd at a
    fixed point these are also the labels of its last step. ``assignment_trajectory[:, t]`` is the same E-step on
    the centroids step t received, ``centroid_trajectory[:, t]``: for Lloyd and the exact constructions the labels
    that computed ``centroid_trajectory[:, t + 1]``; for a learned model what Lloyd's assignment step would be from
    the model's centroids at that step. ``empty_clusters[:, t, j]`` is True when no point is nearest to centroid j
    at step t (for Lloyd: the empty-cluster rule decided its next centre). A variant with its own assignment rule
    (spherical k-means: the largest cosine) uses that rule in all three fields.

    ``readout_trajectory`` (transformers only; None for the reference algorithms) is the model's own read-out of
    the assignment at step t, not a clustering: the scratch slots of the points stream after step t decoded as the
    nearest centroid code (one-hot, binary), or the arg-max of attn_xc's pattern (d-only). The exact constructions
    write the codes, so there it equals ``assignment_trajectory`` (ties aside, where the construction splits a
    point between its nearest centres); a learned model need not write them at all (docs/hooks.md, "Read-outs").
    """

    centroids: Tensor  # (batch, k, d) after the last step
    assignments: Tensor  # (batch, n) int64: nearest of ``centroids``
    centroid_trajectory: Tensor  # (batch, T + 1, k, d), index 0 = initial centroids
    assignment_trajectory: Tensor  # (batch, T, n) int64: [:, t] nearest of centroid_trajectory[:, t]
    empty_clusters: Tensor  # (batch, T, k) bool: no member in assignment_trajectory[:, t]
    readout_trajectory: Tensor | None = None  # (batch, T, n) int64: the model's decoded labels (transformers only)

    @property
    def any_empty(self) -> bool:
        """True when some cluster emptied at some step of some task."""
        return bool(self.empty_clusters.any())
