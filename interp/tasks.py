"""Clustering-task distributions and initialisations (paper 2 App. D; docs/learned_model.md "Task distribution",
docs/evaluation.md).

A task is a mixture of k components with locations l_j ~ U[0,1]^d and per-dimension scale s_j
(isotropic: ``scale``; anisotropic: ``scale`` * U(0,1)^d), equal or uniform random (normalised) weights,
drawn from one of the families normal, cauchy, gumbel, laplace, lognormal. Points are min-max scaled per
dimension to [0, 1] (a constant dimension becomes 0) and shuffled. Everything is batched and seeded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from interp._checks import (
    InvalidInput,
    check_choice,
    check_float_tensor,
    check_generator,
    check_positive_int,
)
from interp.task_config import FAMILIES, INITS, TaskConfig  # noqa: F401  (re-exported: interp.tasks.TaskConfig)


@dataclass(frozen=True)
class TaskBatch:
    """A batch of tasks: points (b, n, d) in [0,1]^d and the true mixture component of each point (b, n)."""

    points: Tensor  # (batch, n, d)
    labels: Tensor  # (batch, n) int64, generating component
    locations: Tensor  # (batch, k, d) component locations before scaling


def _standard_noise(family: str, shape: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype) -> Tensor:
    """Standard (location 0, scale 1) samples of ``family`` by inverse CDF from seeded uniforms."""
    if family in ("normal", "lognormal"):
        return torch.randn(shape, generator=generator, dtype=dtype)
    # open interval (0, 1): avoid log(0) and tan(+-pi/2)
    uniform = torch.rand(shape, generator=generator, dtype=dtype).clamp(1e-12, 1 - 1e-12)
    if family == "cauchy":
        return torch.tan(math.pi * (uniform - 0.5))
    if family == "gumbel":
        return -torch.log(-torch.log(uniform))
    if family == "laplace":
        return laplace_icdf(uniform)
    raise InvalidInput(f"family must be one of {FAMILIES}, got {family!r}")


def laplace_icdf(uniform: Tensor) -> Tensor:
    """Standard Laplace quantile -sign(u - 1/2) log(1 - 2|u - 1/2|) of uniforms (same shape and dtype).

    In float32 the clamped extreme draw u = 1e-12 rounds to |u - 1/2| = 1/2 and gives log(0) = -inf; such
    entries are recomputed in float64 (about -26.9), every other entry is left as float32 computes it."""
    centred = uniform - 0.5
    noise = -torch.sign(centred) * torch.log1p(-2 * centred.abs())
    extreme = ~torch.isfinite(noise)
    if extreme.any():
        exact = uniform.double() - 0.5
        noise = torch.where(extreme, (-torch.sign(exact) * torch.log1p(-2 * exact.abs())).to(noise.dtype), noise)
    return noise


def minmax_scale(points: Tensor) -> Tensor:
    """Scale every dimension of every task to [0, 1]; a constant dimension becomes 0 (the authors' NaN -> 0)."""
    low = points.amin(dim=1, keepdim=True)  # (batch, 1, d)
    span = points.amax(dim=1, keepdim=True) - low  # (batch, 1, d)
    scaled = (points - low) / torch.where(span > 0, span, torch.ones_like(span))  # (batch, n, d)
    return torch.where(span > 0, scaled, torch.zeros_like(scaled))


def sample_tasks(
    config: TaskConfig,
    batch: int,
    generator: torch.Generator | int,
    dtype: torch.dtype = torch.float32,
) -> TaskBatch:
    """Draw ``batch`` independent tasks of ``config``; each task has its own mixture (paper 2 App. D)."""
    check_positive_int(batch, "batch")
    gen = _as_generator(generator)
    n, d, k = config.n, config.d, config.k
    locations = torch.rand((batch, k, d), generator=gen, dtype=torch.float64)  # (batch, k, d)
    if config.anisotropic:
        scales = config.scale * torch.rand((batch, k, d), generator=gen, dtype=torch.float64)  # (batch, k, d)
    else:
        scales = torch.full((batch, k, d), float(config.scale), dtype=torch.float64)
    if config.equal_weights:
        weights = torch.full((batch, k), 1.0 / k, dtype=torch.float64)  # (batch, k)
    else:
        raw = torch.rand((batch, k), generator=gen, dtype=torch.float64)
        weights = raw / raw.sum(dim=1, keepdim=True)  # (batch, k)
    labels = torch.multinomial(weights, n, replacement=True, generator=gen)  # (batch, n)
    # noise in the requested precision (float32 draws are faster; the same seed gives the same tasks per dtype)
    noise = _standard_noise(config.family, (batch, n, d), gen, dtype).to(torch.float64)  # (batch, n, d)
    loc = torch.gather(locations, 1, labels[..., None].expand(batch, n, d))  # (batch, n, d)
    scale = torch.gather(scales, 1, labels[..., None].expand(batch, n, d))  # (batch, n, d)
    raw_points = loc + scale * noise
    if config.family == "lognormal":
        raw_points = torch.exp(raw_points)
    points = minmax_scale(raw_points)  # (batch, n, d)
    order = torch.argsort(torch.rand((batch, n), generator=gen), dim=1)  # (batch, n) shuffle
    points = torch.gather(points, 1, order[..., None].expand(batch, n, d))
    labels = torch.gather(labels, 1, order)
    return TaskBatch(points=points.to(dtype), labels=labels, locations=locations.to(dtype))


def pad_dimensions(points: Tensor, d: int) -> Tensor:
    """Points (b, n, d') with zeros appended to (b, n, d), d >= d'; the same tensor when d' = d."""
    missing = d - points.shape[-1]
    if missing == 0:
        return points
    return torch.cat([points, points.new_zeros(points.shape[:-1] + (missing,))], dim=-1)  # (b, n, d)


def tile_dimensions(points: Tensor, d: int) -> Tensor:
    """Points (b, n, d') with their coordinates repeated cyclically to (b, n, d), d >= d': coordinate i is x_{i mod d'}.

    Every coordinate stays in the task's range (the unit interval for sampled tasks) and squared distances grow by
    about d / d' (exactly, when d' divides d), so a narrow task looks to a model of width d like one of its own width
    whose coordinates come in equal copies; ``untile`` reads centroids back. Lloyd's steps on the tiled task are
    Lloyd's steps on the task when d' divides d (every coordinate weighted d / d')."""
    return points.repeat(1, 1, -(-d // points.shape[-1]))[..., :d]


def untile(centroids: Tensor, width: int) -> Tensor:
    """Centroids (b, k, d) of a tiled task back to its ``width`` = d' coordinates: the mean of each coordinate's
    copies (``tile_dimensions``), (b, k, d')."""
    d = centroids.shape[-1]
    source = torch.arange(d, device=centroids.device) % width  # (d,): the task coordinate of each model coordinate
    sums = centroids.new_zeros(centroids.shape[:-1] + (width,)).index_add_(-1, source, centroids)  # (b, k, d')
    return sums / torch.bincount(source, minlength=width).to(centroids)


def widen_task(points: Tensor, d: int, narrow: str = "pad") -> Tensor:
    """Points (b, n, d') filled to a model's width d: zero-padded (``narrow="pad"``) or tiled ("tile")."""
    return tile_dimensions(points, d) if narrow == "tile" else pad_dimensions(points, d)


def _as_generator(seed_or_generator: torch.Generator | int) -> torch.Generator:
    return check_generator(seed_or_generator, allow_none=False)


def _gather_points(points: Tensor, index: Tensor) -> Tensor:
    """points (b, n, d), index (b, m) -> (b, m, d)."""
    return torch.gather(points, 1, index[..., None].expand(-1, -1, points.shape[2]))


def init_centroids(
    points: Tensor, k: int, method: str = "random", generator: torch.Generator | int | None = None
) -> Tensor:
    """Initial centroids (b, k, d) from points (b, n, d) (docs/evaluation.md, "Initial centres").

    ``random``: a uniform random k-subset; ``first``: the first k points (the authors' choice on shuffled
    data); ``kmeans++``: first centre uniform, then sampled proportional to D(x)^2 (Arthur & Vassilvitskii);
    ``gonzalez``: first centre uniform, then farthest-first.
    """
    points = check_float_tensor(points, "points", 3, "(batch, n, d)")
    check_positive_int(k, "k")
    check_choice(method, "method", INITS)
    batch, n, _ = points.shape
    if k > n:
        raise InvalidInput(f"k={k} must not exceed n={n}")
    if method == "first":
        return points[:, :k].clone()
    gen = _as_generator(0 if generator is None else generator)
    if method == "random":
        subset = torch.argsort(torch.rand((batch, n), generator=gen), dim=1)[:, :k].to(points.device)  # (batch, k)
        return _gather_points(points, subset)
    first = torch.randint(n, (batch, 1), generator=gen).to(points.device)  # (batch, 1)
    chosen = [first]
    min_sqdist = ((points - _gather_points(points, first)) ** 2).sum(-1)  # (batch, n)
    for _ in range(1, k):
        if method == "kmeans++":
            weights = min_sqdist.double()
            # all points coincide with chosen centres: fall back to uniform
            weights = torch.where(weights.sum(1, keepdim=True) > 0, weights, torch.ones_like(weights))
            nxt = torch.multinomial(weights.to(gen.device), 1, generator=gen).to(points.device)  # (batch, 1)
        else:
            nxt = min_sqdist.argmax(dim=1, keepdim=True)  # (batch, 1)
        chosen.append(nxt)
        new_sqdist = ((points - _gather_points(points, nxt)) ** 2).sum(-1)  # (batch, n)
        min_sqdist = torch.minimum(min_sqdist, new_sqdist)
    return _gather_points(points, torch.cat(chosen, dim=1))
