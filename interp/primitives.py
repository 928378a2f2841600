"""Small tensor primitives with exact tie rules, written to vectorise over the reduced axis.

``torch.argmin``/``argmax`` and boolean masks over a short axis are slow on CPU; these use sign() of the gap
to the extreme, which is 0 exactly on the extreme set, so ties are detected exactly (no tolerance).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from interp._checks import InvalidInput


def argmax_sets(scores: Tensor, dim: int = -1, in_place: bool = False) -> Tensor:
    """1 on the exact arg-max set along ``dim``, 0 elsewhere, in the dtype of ``scores`` (same shape):
    1 + sign(s - max). ``in_place`` overwrites ``scores`` with it (one buffer fewer)."""
    top = scores.amax(dim=dim, keepdim=True)
    if in_place:
        return scores.sub_(top).sign_().add_(1)
    return torch.sub(top, scores).sign_().neg_().add_(1)


def ahat(scores: Tensor, dim: int = -1) -> Tensor:
    """Averaging hardmax (docs/constructions.md): 1/|argmax set| on the exact arg-max set along ``dim``, else 0."""
    is_max = argmax_sets(scores, dim)
    return is_max.div_(is_max.sum(dim=dim, keepdim=True))


def first_argmin(values: Tensor, dim: int) -> Tensor:
    """Index of the minimum along ``dim``, ties to the lowest index (as torch.argmin / scikit-learn), int64."""
    size = values.shape[dim]
    shape = [1] * values.ndim
    shape[dim] = size
    index = torch.arange(size, dtype=values.dtype, device=values.device).reshape(shape)
    not_min = torch.sub(values, values.amin(dim=dim, keepdim=True)).sign_()  # 0 on the minimum, 1 elsewhere
    return not_min.mul_(size).add_(index).amin(dim=dim).long()


def normmax_limit(logits: Tensor, dim: int = -1) -> Tensor:
    """alpha -> inf limit of alpha-normmax: max_p <z, p> - max_i p_i over the simplex is uniform on the top m
    entries, m = argmax_m (z_(1) + ... + z_(m) - 1) / m (derived here); ties go to the earlier index."""
    ordered, order = logits.sort(dim=dim, descending=True, stable=True)
    shape = [1] * logits.ndim
    shape[dim] = logits.shape[dim]
    sizes = torch.arange(1, logits.shape[dim] + 1, dtype=logits.dtype, device=logits.device).reshape(shape)
    value = (ordered.cumsum(dim=dim) - 1) / sizes
    best = value.argmax(dim=dim, keepdim=True)  # m* - 1
    in_top = (sizes <= best + 1).to(logits.dtype) / (best + 1).to(logits.dtype)  # uniform on the top m*, sorted
    return torch.zeros_like(logits).scatter(dim, order, in_top)


def random_device(generator: torch.Generator | None, device: torch.device | str | None) -> torch.device | str | None:
    """Where a random draw for a tensor on ``device`` is made: on ``generator``'s device when one is given, else on
    ``device`` (torch's global RNG there). A CPU generator thus drives the draws of tensors on any device: they are
    drawn on the CPU and moved (``uniform``), so a seeded run draws the same numbers on every device, and on the
    CPU nothing changes."""
    return device if generator is None else generator.device


def uniform(shape: tuple[int, ...] | torch.Size, generator: torch.Generator | None, dtype: torch.dtype | None,
            device: torch.device | str | None) -> Tensor:
    """U[0, 1) of ``shape`` and ``dtype`` on ``device``, drawn where ``random_device`` says (then moved)."""
    return torch.rand(shape, generator=generator, dtype=dtype, device=random_device(generator, device)).to(device)


def gumbel_noise(shape: torch.Size, like: Tensor, generator: torch.Generator | None) -> Tensor:
    """i.i.d. Gumbel(0, 1) = -log(-log U), U ~ U(0, 1), from ``generator`` (docs/variants.md#reference-algorithms)."""
    uniform_draws = uniform(shape, generator, like.dtype, like.device)  # [0, 1)
    exponential = -torch.log(uniform_draws.clamp_min(torch.finfo(like.dtype).tiny))  # Exp(1), > 0 since U < 1
    return -torch.log(exponential)


def task_anchor(points: Tensor) -> Tensor:
    """Per task the translation a (b, 1, d) the translation-invariant algorithms subtract before computing
    distances: a_m = G * round(min_i x_im / G) per coordinate m, G the power of two in (4R, 8R], R the task's
    largest coordinate range max_m (max_i x_im - min_i x_im); a = the minimum when R = 0 (all points equal).

    Why this anchor and not the mean (docs/decisions.md, "Translation"):

    * x - a is exact for every point (no rounding): if a_m > 0 then a_m >= G and a_m - G/2 <= min <= x_m <= min + R
      < a_m + 3G/4, so a_m/2 <= x_m <= 2 a_m and Sterbenz's lemma applies (a_m < 0 alike). The centred task is an
      exact translate of the input.
    * a = 0 when every coordinate's minimum lies in [-G/2, G/2), G/2 > 2R: tasks near the origin (every task
      min-max scaled to [0, 1]^d) are computed on unchanged coordinates.
    * translating a task by t whose coordinates are multiples of G (1e3 and 1e8 are multiples of 8, and G <= 8 for
      every task inside the unit cube) moves a by exactly t, so the centred task, and every number computed from it,
      is bitwise the same.
    * after centring every coordinate has |x_m - a_m| <= 3G/4 < 6R: distances are computed on numbers of the
      task's own spread, whatever its offset (no cancellation in ||x||^2 - 2 x.c + ||c||^2).
    """
    low = points.amin(dim=1, keepdim=True)  # (b, 1, d)
    largest_range = (points.amax(dim=1, keepdim=True) - low).amax(dim=2, keepdim=True)  # (b, 1, 1) R
    _, exponent = torch.frexp(largest_range)  # R = mantissa * 2^exponent, mantissa in [0.5, 1)
    grid = torch.ldexp(torch.ones_like(largest_range), exponent + 2)  # (b, 1, 1) G in (4R, 8R]
    scaled = low / grid  # (b, 1, d), exact (a power-of-two division)
    index = scaled.floor()
    index = index + (scaled - index >= 0.5).to(points.dtype)  # round half up: commutes with adding integers
    snapped = index * grid  # (b, 1, d)
    # |min| >= G 2^p (p mantissa bits): the minimum is a multiple of G already (its ulp is >= G)
    already_on_grid = low.abs() >= grid / torch.finfo(points.dtype).eps
    anchor = torch.where(already_on_grid, low, snapped)
    anchor = torch.where(torch.isfinite(grid), anchor, torch.zeros_like(anchor))  # R beyond finfo.max / 8
    return torch.where(largest_range > 0, anchor, low)


def distance_limit(dtype: torch.dtype, d: int) -> float:
    """The largest coordinate magnitude M with 4 d M^2 <= finfo(dtype).max: every term of
    ||x||^2 - 2 x.c + ||c||^2 (and ||x - c||^2 itself) of coordinates |x_m|, |c_m| <= M is then finite."""
    return math.sqrt(torch.finfo(dtype).max / (4 * d))


def refuse_overflowing(largest: float, name: str, dtype: torch.dtype, d: int, where: str = "from the origin") -> None:
    """Raise ``InvalidInput`` naming ``name`` when its largest coordinate magnitude ``largest`` exceeds
    ``distance_limit(dtype, d)`` (float32 about 9e18 / sqrt(d), float64 about 6.7e153 / sqrt(d)), or is NaN."""
    limit = distance_limit(dtype, d)
    if not largest <= limit:
        raise InvalidInput(f"{name} lie up to {largest:.3g} {where}: squared distances would overflow {dtype} "
                           f"(needs d * M^2 <= finfo.max / 4, M <= {limit:.3g} at d={d}); rescale the data")


def check_distance_range(points: Tensor, centroids: Tensor, where: str = "from the origin") -> None:
    """Refuse points (b, n, d) or centroids (b, k, d) whose squared distances overflow (``refuse_overflowing``)."""
    for name, values in (("points", points), ("centroids", centroids)):
        refuse_overflowing(float(values.detach().abs().amax()), name, points.dtype, points.shape[-1], where)


def centre_tasks(points: Tensor, centroids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(points - a, centroids - a, a) with a = ``task_anchor(points)`` (b, 1, d), after refusing tasks whose
    spread makes squared distances overflow (``check_distance_range``, ``InvalidInput`` naming points/centroids).

    k-means is translation invariant: run on the centred task and add a back to the centroids."""
    limit = distance_limit(points.dtype, points.shape[-1])
    spread = float((points.amax(dim=1) - points.amin(dim=1)).detach().amax())  # may be inf (max - min overflows)
    if not spread <= 2 * limit:  # some |x - a| >= spread / 2 > limit whatever a is
        raise InvalidInput(
            f"points of a task spread over {spread:.3g}: squared distances would overflow {points.dtype} "
            f"(needs d * M^2 <= finfo.max / 4 for the coordinates M about the task's anchor, M <= {limit:.3g} "
            f"at d={points.shape[-1]}); rescale the points")
    anchor = task_anchor(points)  # (b, 1, d)
    centred_points, centred_centroids = points - anchor, centroids - anchor
    check_distance_range(centred_points, centred_centroids, where="from the task's anchor")
    return centred_points, centred_centroids, anchor
