"""Small tensor primitives with exact tie rules, written to vectorise over the reduced axis.

``torch.argmin``/``argmax`` and boolean masks over a short axis are slow on CPU; these use sign() of the gap
to the extreme, which is 0 exactly on the extreme set, so ties are detected exactly (no tolerance).
"""

from __future__ import annotations

import torch
from torch import Tensor


def ahat(scores: Tensor, dim: int = -1) -> Tensor:
    """Averaging hardmax (SPEC §4 "AHAT"): 1/|argmax set| on the exact arg-max set along ``dim``, else 0."""
    is_max = torch.sub(scores.amax(dim=dim, keepdim=True), scores).sign_().neg_().add_(1)  # 1 at the max
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
    entries, m = argmax_m (z_(1) + ... + z_(m) - 1) / m (SPEC §2.8, DERIVED); ties go to the earlier index."""
    ordered, order = logits.sort(dim=dim, descending=True, stable=True)
    shape = [1] * logits.ndim
    shape[dim] = logits.shape[dim]
    sizes = torch.arange(1, logits.shape[dim] + 1, dtype=logits.dtype, device=logits.device).reshape(shape)
    value = (ordered.cumsum(dim=dim) - 1) / sizes
    best = value.argmax(dim=dim, keepdim=True)  # m* - 1
    in_top = (sizes <= best + 1).to(logits.dtype) / (best + 1).to(logits.dtype)  # uniform on the top m*, sorted
    return torch.zeros_like(logits).scatter(dim, order, in_top)


def gumbel_noise(shape: torch.Size, like: Tensor, generator: torch.Generator | None) -> Tensor:
    """i.i.d. Gumbel(0, 1) = -log(-log U), U ~ U(0, 1), from ``generator`` (SPEC §4)."""
    uniform = torch.rand(shape, generator=generator, dtype=like.dtype, device=like.device)  # [0, 1)
    exponential = -torch.log(uniform.clamp_min(torch.finfo(like.dtype).tiny))  # Exp(1), > 0 since U < 1
    return -torch.log(exponential)
