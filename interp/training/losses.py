"""Smoothed upper bounds of the k-means objective (paper 2, Eq. 5-6, 24-28; docs/learned_model.md#smoothed-losses).

With r_ij = ||x_i - c_j||^2 and weights w_i = P(-r_i / tau) over the k centroids,

    L~(X, C) = sum_i sum_j w_ij r_ij   >=   sum_i min_j r_ij = Phi(C),

where P is softmax ("softmin", the negative-entropy regulariser, NE) or sparsemax (the L2 regulariser).
Both equal Phi(C) as tau -> 0. Per task the sum runs over points; the batch loss is the mean over tasks.
"""

from __future__ import annotations

import math

import torch
from entmax import sparsemax
from torch import Tensor

from interp._checks import InvalidInput, check_choice, check_points_centroids
from interp.training.config import LOSSES


def pairwise_sq_distances(points: Tensor, centroids: Tensor) -> Tensor:
    """r (b, n, k) = ||x_i - c_j||^2 by the expansion, clamped at 0 (differentiable)."""
    cross = points @ centroids.transpose(1, 2)  # (b, n, k)
    r = (points * points).sum(-1, keepdim=True) - 2 * cross + (centroids * centroids).sum(-1)[:, None, :]
    return r.clamp_min(0)


def smoothed_objective(points: Tensor, centroids: Tensor, tau: float, kind: str = "softmin",
                       validate: bool = True) -> Tensor:
    """Per-task smoothed objective (b,): sum_i sum_j w_ij r_ij with w_i = softmax or sparsemax of -r_i/tau.

    ``validate=False`` (the trainers) lets non-finite centroids through, so a diverging run is reported as such."""
    if validate:
        points, centroids = check_points_centroids(points, centroids, k_at_most_n=False)
    check_choice(kind, "kind", LOSSES)
    if not (isinstance(tau, (int, float)) and tau > 0 and math.isfinite(tau)):
        raise InvalidInput(f"tau must be a positive finite number, got {tau!r}")
    r = pairwise_sq_distances(points, centroids)  # (b, n, k)
    logits = -r / tau
    weights = torch.softmax(logits, dim=-1) if kind == "softmin" else sparsemax(logits, dim=-1)  # (b, n, k)
    return (weights * r).sum(dim=(1, 2))


def smoothed_loss(points: Tensor, centroids: Tensor, tau: float, kind: str = "softmin",
                  validate: bool = True, reference: Tensor | None = None) -> Tensor:
    """The training loss: mean over tasks of the per-task smoothed objective (no log, no 1/n; docs/learned_model.md),
    each divided by ``reference`` (b,) when given (``TrainConfig.relative_loss``: a constant per task, so that tasks
    of every size weigh alike)."""
    objective = smoothed_objective(points, centroids, tau, kind, validate)  # (b,)
    return (objective if reference is None else objective / reference).mean()
