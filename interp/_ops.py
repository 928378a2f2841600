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
