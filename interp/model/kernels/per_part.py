"""An unhooked step whose parts each take their own kernel (``kernels.dispatch.PER_PART``).

``block_step`` computes ``Block.forward``'s two lines,

    X' = X + A(X, C; attn_xc) + A(X, X; attn_xx),      C' = C + A(C, X'; attn_cx) + A(C, C; attn_cc),

with every attention through the kernel ``dispatch.attention_kernel`` picks (``attend``: fused softmax, hardmax
sets, folded scores, or the reference) and the points' sum accumulated in place where ``dispatch.in_place_sum``
allows. The step is unhooked (the dispatch rule), so its hook points, identities, are not called.
"""

from __future__ import annotations

import torch
from torch import Tensor

from interp.model.kernels import dispatch, folded, fused, hardmax


def attend(attention, queries: Tensor, keys: Tensor, weights, need_pattern: bool, generator: torch.Generator | None,
           step: int | None, part: str) -> tuple[Tensor, Tensor | None]:
    """``attention`` (an ``Attention``) on queries (b, q, D) and keys (b, r, D) in an unhooked step, through the
    kernel ``dispatch.attention_kernel`` picks (recorded as ``part`` of ``step``): output (b, q, D) and, with
    ``need_pattern``, the pattern (b, q, r)."""
    n_queries, n_keys = queries.shape[-2], keys.shape[-2]
    kernel = dispatch.attention_kernel(attention.config, n_queries, n_keys, queries.device.type, need_pattern,
                                       attention.dropping())
    dispatch.record(step, part, kernel)
    if kernel == "fused_softmax":
        dropped = attention.draw_dropout(queries.shape[:-2], n_queries, n_keys, queries, generator)  # sparse
        out, pattern = fused.softmax_attention(attention, queries, keys, weights, dropped), None  # (b, q, D)
    elif kernel == "hardmax_sets":
        keys_major = attention.keys_major(n_queries, n_keys)
        scores = folded.shifted_scores(attention, queries, keys, weights, keys_major)  # (b, r, q) or (b, q, r)
        out, pattern = hardmax.hardmax_attention(scores, keys, weights, keys_major), None  # (b, q, D)
    elif kernel == "folded_scores":
        out, pattern = folded.folded_attention(attention, queries, keys, weights, need_pattern, generator)
    else:
        return attention(queries, keys, weights, need_pattern, generator)
    return attention.output_norm(out), pattern


def points_sum(points: Tensor, attn_xc_out: Tensor, attn_xx_out: Tensor, step: int | None) -> Tensor:
    """X + A_xc + A_xx (b, n, D) as (X + A_xc) + A_xx, accumulated into attn_xc's fresh output where
    ``dispatch.in_place_sum`` allows (no new (b, n, D) buffer; the same numbers, float addition commutes)."""
    if dispatch.in_place_sum(attn_xc_out, points):
        dispatch.record(step, "points_sum", "in_place_sum")
        return attn_xc_out.add_(points).add_(attn_xx_out)
    dispatch.record(step, "points_sum", dispatch.REFERENCE)
    return torch.add(points, attn_xc_out).add_(attn_xx_out)  # the second sum into the first's fresh buffer


def block_step(block, step: int | None, points: Tensor, centroids: Tensor, weights, need_pattern: bool,
               generator: torch.Generator | None, attn_xx_out: Tensor | None = None,
               ) -> tuple[Tensor, Tensor, Tensor | None]:
    """The step of ``block`` (a ``Block``) on streams (b, n, D), (b, k, D): the updated streams and, with
    ``need_pattern``, attn_xc's pattern (b, n, k), as ``Block.forward`` returns them. ``attn_xx_out`` (b, n, D):
    attn_xx's output on these ``points`` where the forward reuses it (``dispatch.reused_points_attention``)."""
    attn_xc_out, pattern = attend(block.attn_xc, points, centroids, weights.attn_xc, need_pattern, generator, step,
                                  "attn_xc")
    if attn_xx_out is None:
        attn_xx_out, _ = attend(block.attn_xx, points, points, weights.attn_xx, False, generator, step, "attn_xx")
    points_post = points_sum(points, attn_xc_out, attn_xx_out, step)  # (b, n, D)
    if block.ffn:
        points_post = points_post + block.ffn_points(points_post, weights.ffn_points)
    attn_cx_out, _ = attend(block.attn_cx, centroids, points_post, weights.attn_cx, False, generator, step, "attn_cx")
    attn_cc_out, _ = attend(block.attn_cc, centroids, centroids, weights.attn_cc, False, generator, step, "attn_cc")
    centroids_post = torch.add(centroids, attn_cx_out).add_(attn_cc_out)  # (b, k, D)
    if block.ffn:
        centroids_post = centroids_post + block.ffn_centroids(centroids_post, weights.ffn_centroids)
    return points_post, centroids_post, pattern
