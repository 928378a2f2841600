"""AHAT attention from its exact arg-max sets, without normalising a pattern (the assignment step's kernel).

AHAT (gamma = inf) weights each query's keys 1 / |A_i| on the exact arg-max set A_i of its scores. With W the
(b, q, r) indicator of the sets, out_i = sum_j W_ij (V z'_j + b_V) / |A_i|. When every set is one key (no ties: the
assignment step of Lloyd's algorithm) that is a row gather of the values, not a (q x r) product. Exact: the same
arg-max sets and weights as ``interp.model.attention.normalise``, so the same output up to the order of float
additions (tests/test_hardmax_fast_path.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

from interp.model.kernels.folded import mix
from interp.model.projections import as_layout, project
from interp.primitives import argmax_sets


def winners(scores: Tensor, keys_major: bool, in_place: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """The exact arg-max sets W of ``scores`` ((b, r, q) if ``keys_major`` else (b, q, r): 1 on each query's maximum
    over the keys), each set's size |set| (b, q) and, where |set| = 1, its key (b, q) (float: the sum of the set's
    indices, from one small product [1; 0, 1, ..., r - 1] W). ``in_place``: W overwrites ``scores``."""
    key_axis = 1 if keys_major else 2
    n_keys = scores.shape[key_axis]
    sets = argmax_sets(scores, key_axis, in_place)  # W: 1 on the arg-max sets, 0 elsewhere
    tally = torch.stack([torch.ones(n_keys, dtype=scores.dtype, device=scores.device),
                         torch.arange(n_keys, dtype=scores.dtype, device=scores.device)])  # (2, r)
    stats = tally @ sets if keys_major else (sets @ tally.T).transpose(1, 2)  # (b, 2, q): |set|, index sum
    return sets, stats[:, 0], stats[:, 1]


def single_winner(counts: Tensor, index_sums: Tensor, n_keys: int) -> Tensor | None:
    """Each query's winning key (b, q) int64 when every arg-max set is one key (no ties), else None."""
    exact_index = n_keys * torch.finfo(counts.dtype).eps <= 1  # indices < r are exact in the dtype
    if exact_index and bool((counts == 1).all()):
        return index_sums.long()
    return None


def hardmax_attention(scores: Tensor, keys: Tensor, weights, keys_major: bool) -> Tensor:
    """AHAT's output (b, q, D) for ``scores`` (b, r, q) if ``keys_major`` else (b, q, r), up to a per-query constant
    (``kernels.folded.shifted_scores``), over keys (b, r, D) with values V z' + b_V of ``weights``; ``scores`` is
    overwritten by W outside autograd."""
    n_keys = keys.shape[1]
    sets, counts, index_sums = winners(scores, keys_major, not scores.requires_grad)  # W, (b, q), (b, q)
    winner = single_winner(counts, index_sums, n_keys)  # (b, q) or None
    if winner is not None:
        values = project(keys, weights.W_V, weights.b_V)  # (b, r, D)
        batch, width = values.shape[0], values.shape[-1]
        rows = winner + n_keys * torch.arange(batch, device=scores.device)[:, None]  # (b, q) flat
        return values.reshape(batch * n_keys, width).index_select(0, rows.flatten()).view(batch, -1, width)
    pattern = sets.div_(counts[:, None, :] if keys_major else counts[..., None])  # AHAT's weights
    return mix(as_layout(pattern, keys_major), keys, weights)  # (b, q, D)
