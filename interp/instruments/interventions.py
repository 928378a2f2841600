"""Interventions on a model's computation through TransformerLens hooks, and on the task it is given.

Each helper returns ``fwd_hooks`` for ``model.run_with_hooks(points, centroids, steps=T, fwd_hooks=hooks)`` (hook
names are matched by a filter, so one list serves any number of steps) or runs the model on a transformed task:

* ``retemper(model, attention, factor)``: multiplies the attention's ``hook_scores`` s (the scores *before* gamma,
  ``interp.model.attention``) by ``factor`` f, so its pattern becomes normaliser(gamma f s): the inverse temperature
  gamma becomes gamma f. For Euclidean scores s = -||Q z - K z'||^2 (/ sqrt(D)) this is the same as scaling every
  squared query-key distance by f. ``factor`` may be one number or one per task, (b,).
* ``compete(model, attention)``: renormalises the attention's pattern A (b, q, r) (rows: queries, summing to 1 over
  keys) over the *other* axis first and then over keys again, one round of Sinkhorn's iteration:

      A~_qr = A_qr / sum_q' A_q'r            (every key's weight shared out among the queries that read it)
      A'_qr = A~_qr / sum_r' A~_qr'          (each query's weights summing to 1 again)

  For attn_cx (queries: centroids, keys: points) this makes the centroids compete for each point, as the
  assignment step of soft k-means does, where the learned pattern alone is a per-centroid kernel average.
* ``robust_scale(points, target_spread)`` and ``rescaled_run(model, points, centroids, centre, scale)``: run the model
  on the task moved by the isotropic map x -> scale (x - centre) + 1/2 and map its centroids back,
  c = (c' - 1/2) / scale + centre. The k-means objective and Lloyd's algorithm are equivariant under this map
  (Phi scales by scale^2, the assignments are unchanged), a learned model is not: its attentions' temperatures
  are fixed in the units of its training tasks.

Inputs are checked at the call (``InvalidInput`` naming the argument); a per-task ``factor`` is checked against
the batch when the hook runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from interp._checks import (
    InvalidInput,
    InvalidInputType,
    check_float_tensor,
    check_points_centroids,
    check_positive_int,
)
from interp.model import KMeansTransformer

ATTENTIONS = ("attn_xc", "attn_xx", "attn_cx", "attn_cc")
TEMPERED_NORMALISERS = ("softmax", "sparsemax")  # normaliser(gamma * s): a factor on s is a factor on gamma
TINY = 1e-300  # denominators are clamped here: an all-zero column or row stays zero
CENTRE_OF_CUBE = 0.5  # the rescaled task is centred at the middle of the unit cube

Hook = tuple[Callable[[str], bool], Callable[[Tensor, object], Tensor]]  # (hook-name filter, hook function)


def _check_model(model: object) -> KMeansTransformer:
    if not isinstance(model, KMeansTransformer):
        raise InvalidInputType(f"model must be a KMeansTransformer, got {type(model).__name__}")
    return model


def _check_attention(model: KMeansTransformer, attention: object) -> str:
    if not isinstance(attention, str) or attention not in ATTENTIONS:
        raise InvalidInput(f"attention must be one of {ATTENTIONS}, got {attention!r}")
    if getattr(model.config, attention).identity:
        raise InvalidInput(f"attention {attention!r} is an identity self-attention (gamma = inf on distinct tokens): "
                           "it has no pattern to intervene on")
    return attention


def _check_steps(steps: object) -> frozenset[int] | None:
    """None (every step) or a non-empty collection of 0-based step indices."""
    if steps is None:
        return None
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence) or len(steps) == 0:
        raise InvalidInput(f"steps must be None or a non-empty sequence of 0-based step indices, got {steps!r}")
    return frozenset(check_positive_int(step, "steps", minimum=0) for step in steps)


def hook_filter(attention: str, point: str, steps: frozenset[int] | None) -> Callable[[str], bool]:
    """A filter on hook names selecting ``blocks.{l}.{attention}.{point}`` for l in ``steps`` (None: every l)."""

    def selected(name: str) -> bool:
        parts = name.split(".")
        if len(parts) != 4 or parts[0] != "blocks" or parts[2] != attention or parts[3] != point:
            return False
        return steps is None or int(parts[1]) in steps

    return selected


def _check_factor(factor: object) -> float | Tensor:
    """A positive finite number or a 1-D tensor of them (one per task)."""
    if isinstance(factor, Tensor):
        if factor.dim() != 1 or factor.numel() == 0 or not factor.is_floating_point():
            raise InvalidInput(f"factor must be a positive number or a (b,) float tensor, got a tensor of shape "
                               f"{tuple(factor.shape)} and dtype {factor.dtype}")
        if not bool((torch.isfinite(factor) & (factor > 0)).all()):
            raise InvalidInput("factor must be positive and finite for every task")
        return factor.detach()
    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise InvalidInputType(f"factor must be a positive number or a (b,) tensor, got {type(factor).__name__}")
    if not (math.isfinite(factor) and factor > 0):
        raise InvalidInput(f"factor must be a positive finite number, got {factor!r}")
    return float(factor)


def retemper(model: KMeansTransformer, attention: str, factor: float | Tensor,
             steps: Sequence[int] | None = None) -> list[Hook]:
    """fwd_hooks multiplying ``attention``'s scores s (b, q, r) by ``factor`` f at every step (or at the 0-based
    ``steps``): pattern = normaliser(gamma f s), the inverse temperature gamma -> gamma f (module docstring).

    ``factor``: a positive number, or a (b,) tensor of one factor per task. The attention must be a softmax or
    sparsemax attention at finite gamma (a factor changes nothing at gamma = inf, nor for linear attention)."""
    model = _check_model(model)
    attention = _check_attention(model, attention)
    config = getattr(model.config, attention)
    if config.normaliser not in TEMPERED_NORMALISERS or math.isinf(config.gamma):
        raise InvalidInput(f"attention {attention!r} has normaliser {config.normaliser!r} at gamma {config.gamma}: "
                           f"retemper needs one of {TEMPERED_NORMALISERS} at a finite gamma")
    factor = _check_factor(factor)
    selected = _check_steps(steps)

    def scale_scores(scores: Tensor, hook) -> Tensor:
        if isinstance(factor, float):
            return scores * factor
        if factor.shape[0] != scores.shape[0]:
            raise InvalidInput(f"factor has {factor.shape[0]} per-task values but the run has {scores.shape[0]} tasks")
        return scores * factor.to(scores)[:, None, None]  # (b, q, r)

    return [(hook_filter(attention, "hook_scores", selected), scale_scores)]


def compete_pattern(pattern: Tensor, iterations: int = 1) -> Tensor:
    """``iterations`` rounds of A <- A / sum_q A (over queries, axis -2), then A <- A / sum_r A (over keys, axis -1)
    for a pattern (..., q, r); denominators are clamped at 1e-300, so an all-zero column or row stays zero."""
    if not isinstance(pattern, Tensor) or pattern.dim() < 2 or not pattern.is_floating_point():
        raise InvalidInput("pattern must be a float tensor (..., queries, keys)")
    check_positive_int(iterations, "iterations")
    for _ in range(iterations):
        pattern = pattern / pattern.sum(-2, keepdim=True).clamp_min(TINY)
        pattern = pattern / pattern.sum(-1, keepdim=True).clamp_min(TINY)
    return pattern


def compete(model: KMeansTransformer, attention: str = "attn_cx", iterations: int = 1,
            steps: Sequence[int] | None = None) -> list[Hook]:
    """fwd_hooks replacing ``attention``'s pattern by ``compete_pattern`` of it (module docstring): the queries
    compete for every key before each query's weights are normalised again."""
    model = _check_model(model)
    attention = _check_attention(model, attention)
    check_positive_int(iterations, "iterations")
    selected = _check_steps(steps)

    def renormalise(pattern: Tensor, hook) -> Tensor:
        return compete_pattern(pattern, iterations)

    return [(hook_filter(attention, "hook_pattern", selected), renormalise)]


@torch.no_grad()
def robust_scale(points: Tensor, target_spread: float, quantiles: tuple[float, float] = (0.25, 0.75)
                 ) -> tuple[Tensor, Tensor]:
    """Per task: the centre (b, 1, d), each coordinate's median, and one isotropic scale (b,) that maps the median
    over coordinates of the inter-quantile range q_hi - q_lo of the points (b, n, d) to ``target_spread``. Quantiles
    and medians interpolate linearly between order statistics (``torch.quantile``, numpy's default)."""
    points = check_float_tensor(points, "points", 3, "(batch, n, d)")
    if isinstance(target_spread, bool) or not isinstance(target_spread, (int, float)) or not (
            math.isfinite(target_spread) and target_spread > 0):
        raise InvalidInput(f"target_spread must be a positive finite number, got {target_spread!r}")
    low, high = quantiles if isinstance(quantiles, (tuple, list)) and len(quantiles) == 2 else (None, None)
    if not (isinstance(low, float) and isinstance(high, float) and 0.0 <= low < high <= 1.0):
        raise InvalidInput(f"quantiles must be two floats 0 <= low < high <= 1, got {quantiles!r}")
    levels = torch.tensor([low, 0.5, high], dtype=points.dtype)
    bounds = torch.quantile(points, levels, dim=1)  # (3, b, d): low quantile, median, high quantile per coordinate
    spread = torch.quantile(bounds[2] - bounds[0], 0.5, dim=-1)  # (b,): median over coordinates
    if not bool((spread > 0).all()):
        raise InvalidInput("points: a task has a zero inter-quantile range in most coordinates; it cannot be rescaled")
    return bounds[1][:, None, :], target_spread / spread  # (b, 1, d), (b,)


def _check_affine(points: Tensor, centre: object, scale: object) -> tuple[Tensor, Tensor]:
    batch, _, d = points.shape
    if not isinstance(centre, Tensor) or centre.shape != (batch, 1, d):
        raise InvalidInput(f"centre must be a ({batch}, 1, {d}) tensor, got "
                           f"{tuple(centre.shape) if isinstance(centre, Tensor) else type(centre).__name__}")
    if not isinstance(scale, Tensor) or scale.shape != (batch,):
        raise InvalidInput(f"scale must be a ({batch},) tensor of positive scales, got "
                           f"{tuple(scale.shape) if isinstance(scale, Tensor) else type(scale).__name__}")
    if not bool(torch.isfinite(centre).all()):
        raise InvalidInput("centre must be finite")
    if not bool((torch.isfinite(scale) & (scale > 0)).all()):
        raise InvalidInput("scale must be positive and finite for every task")
    return centre.to(points.dtype), scale.to(points.dtype)


def to_scaled(values: Tensor, centre: Tensor, scale: Tensor) -> Tensor:
    """scale (x - centre) + 1/2 for values (b, m, d), centre (b, 1, d), scale (b,)."""
    return (values - centre) * scale[:, None, None] + CENTRE_OF_CUBE


def from_scaled(values: Tensor, centre: Tensor, scale: Tensor) -> Tensor:
    """The inverse of ``to_scaled``: (x' - 1/2) / scale + centre, for values (b, ..., d)."""
    shape = (-1,) + (1,) * (values.dim() - 1)
    return (values - CENTRE_OF_CUBE) / scale.view(shape) + centre.view((centre.shape[0],) + (1,) * (values.dim() - 2)
                                                                      + (centre.shape[-1],))


@torch.no_grad()
def rescaled_run(model: KMeansTransformer, points: Tensor, centroids: Tensor, centre: Tensor, scale: Tensor,
                 steps: int = 20, fwd_hooks: list | None = None) -> Tensor:
    """The centroid trajectory (b, steps + 1, k, d) of ``model`` run (eval mode) on the task mapped by x ->
    scale (x - centre) + 1/2 from the equally mapped ``centroids``, mapped back to the original coordinates.

    points (b, n, d), centroids (b, k, d), centre (b, 1, d), scale (b,) > 0; ``fwd_hooks`` are applied to the run."""
    model = _check_model(model)
    points, centroids = check_points_centroids(points, centroids, d=model.config.d)
    centre, scale = _check_affine(points, centre, scale)
    check_positive_int(steps, "steps")
    was_training = model.training
    model.eval()
    try:
        out = model.run_with_hooks(to_scaled(points, centre, scale), to_scaled(centroids, centre, scale),
                                   steps=steps, fwd_hooks=list(fwd_hooks or []), slot_order="fixed")
    finally:
        model.train(was_training)
    return from_scaled(out.centroid_trajectory, centre, scale)  # (b, steps + 1, k, d)
