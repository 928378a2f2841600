"""Instruments for heavy-tailed tasks: the bulk and the far points of a task, starts drawn from the bulk, runs that
move chosen centroids by Lloyd's step, centroid offsets from the means of their own cells, and an intervention that
makes chosen tokens of a self-attention attend to themselves alone.

* ``radial_distances(points)``: every point's Euclidean distance from its task's coordinate-wise median (the
  centre of the bulk; a min-max scaled Cauchy sample has its bulk there and a few points far out).
* ``far_from_bulk(values, points, quantile)``: (b, m) bool, the rows of ``values`` (points or centroids) that lie
  farther from the median than the ``quantile`` of the task's radial distances (``torch.quantile``, linear
  interpolation).
* ``bulk_starts(points, k, quantile, generator)``: a uniformly random k-subset of the points that are not far.
* ``mixed_run(step, points, centroids, selected, steps)``: ``steps`` iterations in which the centroids marked in
  ``selected`` (b, k) take Lloyd's step (``interp.algorithms.lloyd``, one iteration from all current centroids) and
  the others the step function's.
* ``cell_offsets(points, centroids)``: each centroid's hard cell (nearest-centroid assignment), the cell's size and
  mean, and the centroid's offset from that mean (0 at a fixed point of Lloyd's algorithm).
* ``attend_to_self(model, attention, rows, steps)``: fwd_hooks replacing the rows of a self-attention's pattern
  (attn_xx: points, attn_cc: centroids) marked in ``rows`` (b, t) by attention to the token itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from interp._checks import (
    InvalidInput,
    check_float_tensor,
    check_generator,
    check_points_centroids,
    check_positive_int,
)
from interp.instruments.interventions import Hook, _check_attention, _check_model, _check_steps, hook_filter

SELF_ATTENTIONS = ("attn_xx", "attn_cc")
StepFunction = Callable[[Tensor, Tensor], Tensor]


def _check_quantile(quantile: object) -> float:
    if isinstance(quantile, bool) or not isinstance(quantile, (int, float)) or not 0.0 <= float(quantile) <= 1.0:
        raise InvalidInput(f"quantile must be a number in [0, 1], got {quantile!r}")
    return float(quantile)


def bulk_centre(points: Tensor) -> Tensor:
    """The coordinate-wise median (b, 1, d) of every task's points (b, n, d) (``torch.quantile`` at 0.5: the mean of
    the two middle values when n is even)."""
    points = check_float_tensor(points, "points", 3, "(batch, n, d)")
    return torch.quantile(points, 0.5, dim=1, keepdim=True)


def radial_distances(points: Tensor, values: Tensor | None = None) -> Tensor:
    """Euclidean distance (b, m) of every row of ``values`` (b, m, d) (default: the points) from the coordinate-wise
    median of its task's points (b, n, d)."""
    centre = bulk_centre(points)
    values = points if values is None else check_points_centroids(points, values, k_at_most_n=False)[1]
    return (values - centre).norm(dim=-1)


def far_from_bulk(values: Tensor, points: Tensor, quantile: float = 0.9) -> Tensor:
    """(b, m) bool: rows of ``values`` (b, m, d) farther from the median of their task's points (b, n, d) than the
    ``quantile`` of the points' own radial distances (``torch.quantile``, linear interpolation)."""
    quantile = _check_quantile(quantile)
    radius = torch.quantile(radial_distances(points), quantile, dim=1, keepdim=True)  # (b, 1)
    return radial_distances(points, values) > radius


def bulk_starts(points: Tensor, k: int, quantile: float = 0.9, generator: torch.Generator | int = 0) -> Tensor:
    """Starts (b, k, d): in every task a uniformly random k-subset of the points that are not ``far_from_bulk``."""
    points = check_float_tensor(points, "points", 3, "(batch, n, d)")
    check_positive_int(k, "k")
    generator = check_generator(generator, allow_none=False)
    inside = ~far_from_bulk(points, points, quantile)  # (b, n)
    if int(inside.sum(1).min()) < k:
        raise InvalidInput(f"a task has fewer than k={k} points within its {quantile} radius")
    scores = torch.rand(inside.shape, generator=generator, dtype=torch.float64)  # (b, n)
    chosen = torch.where(inside, scores, -1.0).topk(k, dim=1).indices  # (b, k): k random points of the bulk
    return torch.gather(points, 1, chosen[..., None].expand(-1, -1, points.shape[2]))


@torch.no_grad()
def mixed_run(step: StepFunction, points: Tensor, centroids: Tensor, selected: Tensor, steps: int = 20) -> Tensor:
    """The centroid trajectory (b, steps + 1, k, d) of ``steps`` iterations in which the centroids marked in
    ``selected`` (b, k) bool move by one iteration of ``interp.algorithms.lloyd`` from all current centroids (its
    default empty-cluster rule) and the others by ``step(points, centroids)``."""
    from interp.algorithms import lloyd

    points, centroids = check_points_centroids(points, centroids)
    check_positive_int(steps, "steps")
    if not isinstance(selected, Tensor) or selected.dtype != torch.bool or selected.shape != centroids.shape[:2]:
        raise InvalidInput(f"selected must be a bool tensor of shape {tuple(centroids.shape[:2])}")
    current, trajectory = centroids, [centroids]
    for _ in range(steps):
        by_lloyd = lloyd(points, current, 1).centroids
        current = torch.where(selected[..., None], by_lloyd, step(points, current).to(current.dtype))
        trajectory.append(current)
    return torch.stack(trajectory, dim=1)


@dataclass(frozen=True)
class CellOffsets:
    """Every centroid's hard cell (``cell_offsets``)."""

    labels: Tensor  # (b, n): the nearest centroid of every point (ties to the lowest index)
    sizes: Tensor  # (b, k): points per cell
    means: Tensor  # (b, k, d) float64: the cell's mean; an empty cell's is the centroid itself
    offsets: Tensor  # (b, k, d) float64: centroid - cell mean (0 for an empty cell)


@torch.no_grad()
def cell_offsets(points: Tensor, centroids: Tensor) -> CellOffsets:
    """The hard cells of ``centroids`` (b, k, d) on ``points`` (b, n, d) (``interp.algorithms.assign`` on centred
    coordinates), their sizes and means, and each centroid's offset from its cell's mean."""
    from interp.algorithms import assign
    from interp.primitives import centre_tasks

    points, centroids = check_points_centroids(points, centroids, k_at_most_n=False)
    centred_points, centred_centroids, _ = centre_tasks(points.double(), centroids.double())
    labels = assign(centred_points, centred_centroids)  # (b, n)
    onehot = torch.nn.functional.one_hot(labels, centroids.shape[1]).double()  # (b, n, k)
    sizes = onehot.sum(1)  # (b, k)
    sums = onehot.transpose(1, 2) @ points.double()  # (b, k, d)
    means = torch.where(sizes[..., None] > 0, sums / sizes.clamp_min(1)[..., None], centroids.double())
    return CellOffsets(labels, sizes.long(), means, centroids.double() - means)


def attend_to_self(model, attention: str, rows: Tensor, steps=None) -> list[Hook]:
    """fwd_hooks replacing, at every step (or the 0-based ``steps``), the rows of the self-attention ``attention``'s
    pattern (b, t, t) marked in ``rows`` (b, t) bool by attention to the token itself (weight 1 on the diagonal);
    the other rows keep their weights. ``rows`` must match the run's batch and token count."""
    model = _check_model(model)
    if attention not in SELF_ATTENTIONS:
        raise InvalidInput(f"attention must be one of {SELF_ATTENTIONS} (a self-attention), got {attention!r}")
    attention = _check_attention(model, attention)
    if not isinstance(rows, Tensor) or rows.dtype != torch.bool or rows.dim() != 2:
        raise InvalidInput("rows must be a (batch, tokens) bool tensor")
    selected = _check_steps(steps)
    rows = rows.detach()

    def replace(pattern: Tensor, hook) -> Tensor:
        if pattern.shape[:2] != rows.shape or pattern.shape[1] != pattern.shape[2]:
            raise InvalidInput(f"rows has shape {tuple(rows.shape)} but the pattern has shape {tuple(pattern.shape)}")
        eye = torch.eye(pattern.shape[-1], dtype=pattern.dtype, device=pattern.device)[None]  # (1, t, t)
        return torch.where(rows.to(pattern.device)[..., None], eye, pattern)

    return [(hook_filter(attention, "hook_pattern", selected), replace)]
