"""Softmax attention without the reference's pattern: torch's fused CPU flash kernel or a formed-pattern kernel,
with exact attention dropout (docs/decisions.md). ``softmax_attention`` is the entry the attention module calls
(when ``interp.model.kernels.dispatch.fused_softmax`` says so).

The fused kernels refuse dropout, and the unfused path forms the (b, q, r) pattern and a dense Bernoulli mask
(the slow part of the authors' training step). With drop probability p only a fraction p of the pattern is
dropped, so

    out_i = (1/(1-p)) (sum_j P_ij v_j - sum_{j in Drop_i} P_ij v_j),    P_ij = exp(s_ij - lse_i),

is the fused output minus a sparse correction over the dropped pairs, drawn as an exact Bernoulli(p) process
(geometric gaps). The backward pass reuses the fused backward with the *kept* output, which accounts for every
dense term, and adds the sparse remainder -P_ij (g_i . v_j) on the dropped pairs (derivation in
``_DroppedFlashAttention.backward``). The sparse terms are sparse-matrix products over the dropped pairs
(``DroppedPairs``: a sampled product for the P_ij, CSR times dense for the sums), not row gathers. Gradients equal
those of the dense masked computation (tested).

Up to ``DENSE_MAX_PAIRS`` query x key pairs per task (the studies' n = 128 self-attention) the flash kernel's
blocking does not pay: ``_DroppedDenseAttention`` forms the (b, q, r) pattern once, zeroes the same sparse dropped
pairs in it and keeps it, with their weights, for the backward pass: five products and one softmax in all. Its
products with a narrow factor (E = D + 1 columns) are taken transposed, (v^T P^T)^T, which torch's CPU kernels run
3x faster than P v at E ~ 10. Same dropped pairs, same gradients (tested against the dense mask).
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from interp.model.projections import project
from interp.primitives import random_device

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
_flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default
_softmax_backward = torch.ops.aten._softmax_backward_data.default
DENSE_MAX_PAIRS = 1 << 16  # query x key pairs per task up to which the dense pattern beats the flash kernel


def sample_dropped_pairs(batch: int, n_queries: int, n_keys: int, p: float, device=None,
                         generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Positions (b, i, j) of an exact i.i.d. Bernoulli(p) mask over (batch, n_queries, n_keys), via geometric
    gaps between successive dropped positions; draws from ``generator`` or the global torch RNG (as F.dropout)."""
    total = batch * n_queries * n_keys
    if p <= 0:
        empty = torch.zeros(0, dtype=torch.long, device=device)
        return empty, empty, empty
    log_keep = math.log1p(-p)
    draws = random_device(generator, device)  # the positions are computed where they are drawn, then moved
    positions, last = [], -1
    while True:
        mean = (total - last) * p
        count = int(mean + 8 * math.sqrt(mean + 1) + 16)
        uniform = 1.0 - torch.rand(count, dtype=torch.float64, device=draws, generator=generator)  # (0, 1]
        gaps = torch.floor(torch.log(uniform) / log_keep).long() + 1  # Geometric(p) on {1, 2, ...}
        chunk = last + torch.cumsum(gaps, dim=0)
        inside = chunk[chunk < total]
        positions.append(inside)
        if len(inside) < len(chunk):
            break
        last = int(chunk[-1])
    flat = torch.cat(positions).to(device)
    per_batch = n_queries * n_keys
    return flat // per_batch, (flat % per_batch) // n_keys, flat % n_keys


class DroppedPairs:
    """The dropped pairs as the sparsity structure of a (b*Lq) x (b*Lr) matrix (block diagonal over tasks), in CSR
    order by query row and, for the transposed products, by key row. The flat positions of ``sample_dropped_pairs``
    are increasing, so query rows and, within a row, key rows are already sorted."""

    def __init__(self, query_rows: Tensor, key_rows: Tensor, n_query_rows: int, n_key_rows: int):
        self.query_rows, self.key_rows = query_rows, key_rows  # (N,), (N,)
        self.shape = (n_query_rows, n_key_rows)
        self.crow = _compressed(query_rows, n_query_rows)  # (b*Lq + 1,)
        self.by_key = torch.sort(key_rows, stable=True).indices  # (N,): pair order sorted by key row
        self.crow_by_key = _compressed(key_rows, n_key_rows)  # (b*Lr + 1,)
        self.query_rows_by_key = query_rows.index_select(0, self.by_key)  # (N,)

    def matrix(self, values: Tensor) -> Tensor:
        """The sparse (b*Lq, b*Lr) matrix with ``values`` (N,) at the dropped pairs."""
        return _csr(self.crow, self.key_rows, values, self.shape)

    def transposed(self, values: Tensor) -> Tensor:
        """The sparse (b*Lr, b*Lq) transpose of ``matrix(values)``."""
        return _csr(self.crow_by_key, self.query_rows_by_key, values.index_select(0, self.by_key), self.shape[::-1])

    def products(self, left: Tensor, right: Tensor) -> Tensor:
        """(N,) left_i . right_j at every dropped pair (i, j): left (b*Lq, E), right (b*Lr, E)."""
        structure = self.matrix(left.new_zeros(len(self.key_rows)))
        return torch.sparse.sampled_addmm(structure, left, right.T, beta=0.0).values()


def _csr(crow: Tensor, columns: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    """A CSR matrix from sorted, valid indices (built here; torch's one-time "beta" notice is not the user's)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
        return torch.sparse_csr_tensor(crow, columns, values, shape, check_invariants=False)


def _compressed(rows: Tensor, n_rows: int) -> Tensor:
    """CSR row pointers of sorted ``rows``: (n_rows + 1,)."""
    pointers = torch.zeros(n_rows + 1, dtype=torch.long, device=rows.device)
    pointers[1:] = torch.cumsum(torch.bincount(rows, minlength=n_rows), dim=0)
    return pointers


class _DroppedFlashAttention(torch.autograd.Function):
    """q, k, v: (b, 1, L, E) contiguous; the dropped pairs a ``DroppedPairs`` over (b*Lq, b*Lr). The sparse terms
    are sparse-matrix products: P_ij at the pairs by a sampled product q_i . k_j, then W v with W sparse."""

    @staticmethod
    def forward(ctx, q, k, v, scale, p, pairs):
        out_full, lse = _flash(q, k, v, 0.0, False, scale=scale)  # (b, 1, Lq, E), (b, 1, Lq)
        width = q.shape[-1]
        q2, k2, v2 = (t.reshape(-1, width) for t in (q, k, v))  # (b*L, E)
        lse_drop = lse.reshape(-1).index_select(0, pairs.query_rows)  # (N,)
        weight = torch.exp(scale * pairs.products(q2, k2) - lse_drop)  # (N,) P_ij
        kept = (out_full.reshape(-1, width) - pairs.matrix(weight) @ v2).reshape(out_full.shape)  # kept pairs only
        ctx.save_for_backward(q, k, v, kept, lse, weight)
        ctx.scale, ctx.keep, ctx.pairs = scale, 1.0 - p, pairs
        return kept / ctx.keep

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        """y_i = sum_j m_ij P_ij v_j: dS_ij = P_ij (g.v_j - g.y_i) - (1 - m_ij) P_ij g.v_j. The fused backward,
        given out = y, returns the first term's gradients; the second lives on the dropped pairs only."""
        q, k, v, kept, lse, weight = ctx.saved_tensors
        pairs, width = ctx.pairs, q.shape[-1]
        grad = (grad_out / ctx.keep).contiguous()
        grad_q, grad_k, grad_v = _flash_backward(grad, q, k, v, kept, lse, 0.0, False, scale=ctx.scale)
        q2, k2, v2, grad2 = (t.reshape(-1, width) for t in (q, k, v, grad))  # (b*L, E)
        coeff = -ctx.scale * weight * pairs.products(grad2, v2)  # (N,): scale * dS_ij on the dropped pairs
        grad_q = (grad_q.reshape(-1, width) + pairs.matrix(coeff) @ k2).reshape(q.shape)
        grad_k = (grad_k.reshape(-1, width) + pairs.transposed(coeff) @ q2).reshape(k.shape)
        grad_v = (grad_v.reshape(-1, width) - pairs.transposed(weight) @ grad2).reshape(v.shape)
        return grad_q, grad_k, grad_v, None, None, None


def _narrow_product(wide: Tensor, narrow: Tensor) -> Tensor:
    """wide @ narrow for wide (b, m, r) and narrow (b, r, E) with small E, computed as (narrow^T wide^T)^T:
    (b, m, E), a transposed view."""
    return torch.bmm(narrow.mT, wide.mT).mT


class _DroppedDenseAttention(torch.autograd.Function):
    """softmax(scale q k^T) v with the dropped pairs zeroed and 1/(1-p) rescaling, the pattern formed once.

    q, k (b, Lq/Lr, E), v (b, Lr, Ev); ``dropped`` the flat positions of the dropped pairs in (b, Lq, Lr)."""

    @staticmethod
    def forward(ctx, q, k, v, scale, p, dropped):
        scores = torch.baddbmm(q.new_zeros(()), q, k.mT, beta=0, alpha=scale)  # (b, Lq, Lr)
        kept = torch.softmax(scores, dim=-1)  # (b, Lq, Lr) P, then M . P in place
        weight = kept.view(-1).index_select(0, dropped)  # (N,) P_ij of the dropped pairs, to restore P
        kept.view(-1).index_fill_(0, dropped, 0.0)
        ctx.save_for_backward(q, k, v, weight, dropped)
        ctx.kept = kept  # not saved_tensors: backward restores P in it and zeroes M again (no version check)
        ctx.scale, ctx.keep = scale, 1.0 - p
        return _narrow_product(kept, v) / ctx.keep  # (b, Lq, Ev)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        """y = (M . P) v / (1-p): dP = M . (g v^T) / (1-p), dS = P . (dP - rowsum(dP . P)) (softmax's backward),
        dq = scale dS k, dk = scale dS^T q, dv = (M . P)^T g / (1-p). P is M . P with the dropped weights put back
        for the softmax backward and zeroed again after it (the saved tensor is unchanged when backward returns)."""
        q, k, v, weight, dropped = ctx.saved_tensors
        kept = ctx.kept  # (b, Lq, Lr) M . P
        grad = grad_out / ctx.keep  # (b, Lq, Ev)
        grad_q = grad_k = grad_v = None
        if ctx.needs_input_grad[2]:
            grad_v = _narrow_product(kept.mT, grad)  # (b, Lr, Ev)
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            grad_pattern = torch.bmm(grad, v.mT)  # (b, Lq, Lr)
            grad_pattern.view(-1).index_fill_(0, dropped, 0.0)  # dropped pairs do not reach the output
            pattern = kept.view(-1).index_copy_(0, dropped, weight).view(kept.shape)  # P, in place
            grad_scores = _softmax_backward(grad_pattern, pattern, -1, pattern.dtype)  # (b, Lq, Lr)
            kept.view(-1).index_fill_(0, dropped, 0.0)  # M . P again
            if ctx.needs_input_grad[0]:
                grad_q = _narrow_product(grad_scores, k) * ctx.scale  # (b, Lq, E)
            if ctx.needs_input_grad[1]:
                grad_k = _narrow_product(grad_scores.mT, q) * ctx.scale  # (b, Lr, E)
        return grad_q, grad_k, grad_v, None, None, None


def flash_attention(q: Tensor, k: Tensor, v: Tensor, scale: float, dropout: float = 0.0,
                    dropped: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
    """softmax(scale q k^T) v with attention dropout ``dropout``; q, k (b, Lq/Lr, E), v (b, Lr, Ev) -> (b, Lq, Ev).

    ``dropped`` fixes the dropped pairs (tests; a pair given twice is dropped once); by default they are drawn with
    ``sample_dropped_pairs``. Up to
    ``DENSE_MAX_PAIRS`` pairs per task the pattern is formed (``_DroppedDenseAttention``), above it never is."""
    n_queries, n_keys = q.shape[1], k.shape[1]
    if dropout > 0:
        if dropped is None:
            dropped = sample_dropped_pairs(q.shape[0], n_queries, n_keys, dropout, q.device)
        else:  # given pairs: each pair once, in the increasing order both kernels' sparse structures assume
            flat = torch.unique((dropped[0] * n_queries + dropped[1]) * n_keys + dropped[2])  # sorted
            dropped = (flat // (n_queries * n_keys), (flat // n_keys) % n_queries, flat % n_keys)
        batch_index, query_index, key_index = dropped
        query_rows = batch_index * n_queries + query_index  # rows of (b * Lq, E)
        key_rows = batch_index * n_keys + key_index  # rows of (b * Lr, E)
    if n_queries * n_keys <= DENSE_MAX_PAIRS:
        flat = (query_rows * n_keys + key_index if dropout > 0
                else torch.zeros(0, dtype=torch.long, device=q.device))  # dropped positions in (b, Lq, Lr)
        return _DroppedDenseAttention.apply(q, k, v, scale, max(dropout, 0.0), flat)
    width, value_width = q.shape[-1], v.shape[-1]
    if value_width < width:  # the fused kernel wants one head width for q, k and v
        v = torch.cat([v, v.new_zeros(v.shape[:-1] + (width - value_width,))], dim=-1)
    elif value_width > width:
        pad = value_width - width
        q = torch.cat([q, q.new_zeros(q.shape[:-1] + (pad,))], dim=-1)
        k = torch.cat([k, k.new_zeros(k.shape[:-1] + (pad,))], dim=-1)
    q4, k4, v4 = (t.unsqueeze(1).contiguous() for t in (q, k, v))  # (b, 1, L, E)
    if dropout > 0:
        pairs = DroppedPairs(query_rows, key_rows, q.shape[0] * n_queries, k.shape[0] * n_keys)
        out = _DroppedFlashAttention.apply(q4, k4, v4, scale, dropout, pairs)
    else:
        out = torch.nn.functional.scaled_dot_product_attention(q4, k4, v4, scale=scale)
    return out[:, 0, :, :value_width]


def softmax_attention(attention, queries: Tensor, keys: Tensor, weights,
                      dropped: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
    """The softmax attention of ``attention`` (an ``Attention``: its config, width and training mode) through
    ``flash_attention``: queries (b, q, D), keys (b, r, D) -> (b, q, D).

    Euclidean scores become a dot product of augmented vectors: -||q - k||^2 = [q, 1].[2k, -||k||^2] - ||q||^2, and
    softmax ignores the per-query -||q||^2. Dropout (training mode only) drops the pattern entries ``dropped``, the
    draw of ``attention.draw_dropout`` (``sample_dropped_pairs``), as the authors' attention dropout does (theirs
    also stays on in eval mode, docs/decisions.md)."""
    config = attention.config
    q = project(queries, weights.W_Q, weights.b_Q)  # (b, q, D)
    k = project(keys, weights.W_K, weights.b_K)  # (b, r, D)
    v = project(keys, weights.W_V, weights.b_V)  # (b, r, D)
    if config.score == "euclidean":
        q = torch.cat([q, torch.ones_like(q[..., :1])], dim=-1)  # (b, q, D + 1)
        k = torch.cat([2 * k, -(k * k).sum(-1, keepdim=True)], dim=-1)  # (b, r, D + 1)
    scale = config.gamma / (math.sqrt(attention.d_model) if config.scale_by_sqrt_dim else 1.0)
    dropout = config.dropout if dropped is not None else 0.0
    return flash_attention(q, k, v, scale, dropout, dropped)  # (b, q, D)
