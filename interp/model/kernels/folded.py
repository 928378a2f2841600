"""Attention with folded projections: the scores up to a per-query constant, laid out for the normaliser, and the
values mixed over the features W_V reads (the ``folded_scores`` kernel; ``kernels.dispatch.attention_kernel``).

The reference (``Attention.forward``) forms q = W_Q z + b_Q and k = W_K z' + b_K for every token and the scores
s_ij = -||q_i - k_j||^2 / sqrt(D)^[scale] (or q_i . k_j) in the (b, q, r) layout. This kernel computes the same
attention with less work:

* Every normaliser ignores a per-query constant, so a euclidean score drops -||q_i||^2: s~_ij = 2 q_i.k_j -
  ||k_j||^2, and adds it back only where the pattern is returned (``literal_scores``).
* With fewer keys than queries the work is laid out keys-major (b, r, q), so the normaliser reduces a strided axis,
  which vectorises, and W_Q is folded into the keys: q_i.k_j = z_i.(W_Q^T k_j) + b_Q.k_j, contracted over the
  features W_Q reads (the constructions' W_Q reads d of D). Dot scores with more keys fold W_K into the queries.
* With more keys than queries the values are mixed before projecting: (P Z'[:, S]) W_V[:, S]^T, S the features
  W_V reads, plus rowsum(P) b_V.

The same numbers as the reference up to the order of float additions (tests/test_literal_model.py). Attention
dropout is the reference's dense keep mask (``Attention.draw_dropout``, drawn in this layout).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from interp.model.attention import normalise
from interp.model.projections import as_layout, feature_support, folded_pair, project


def folded_attention(attention, queries: Tensor, keys: Tensor, weights, need_pattern: bool,
                     generator: torch.Generator | None) -> tuple[Tensor, Tensor | None]:
    """The attention of ``attention`` (an ``Attention``: config, width, training mode) on queries (b, q, D) and
    keys (b, r, D): output (b, q, D) before any output norm and, with ``need_pattern``, the pattern (b, q, r) of the
    literal scores (a view when laid out keys-major), else None."""
    n_queries, n_keys = queries.shape[-2], keys.shape[-2]
    keys_major = attention.keys_major(n_queries, n_keys)
    scores = shifted_scores(attention, queries, keys, weights, keys_major)  # (b, r, q) or (b, q, r)
    if need_pattern:
        scores = literal_scores(attention, scores, queries, weights, keys_major)
    pattern = normalise(scores, attention.config, dim=1 if keys_major else 2, generator=generator)
    pattern_used = pattern  # (b, r, q) or (b, q, r)
    if attention.dropping():  # the dense keep mask, drawn in this layout
        pattern_used = pattern * attention.draw_dropout(pattern.shape[:-2], n_queries, n_keys, pattern, generator,
                                                        need_pattern)
    out = mix(as_layout(pattern_used, keys_major), keys, weights)  # (b, q, D)
    return out, (as_layout(pattern, keys_major) if need_pattern else None)


def shifted_scores(attention, queries: Tensor, keys: Tensor, weights, keys_major: bool) -> Tensor:
    """Scores up to a per-query additive constant, (b, r, q) if ``keys_major`` else (b, q, r), with the
    projections folded onto the side with fewer tokens. Softmax, sparsemax and AHAT ignore a per-query
    constant; dot scores (linear attention) are exact."""
    euclidean = attention.config.score == "euclidean"
    if keys_major:  # fold W_Q into the keys: q.k = z.(W_Q^T k) + b_Q.k
        k = project(keys, weights.W_K, weights.b_K)  # (b, r, D)
        factor = 2.0 if euclidean else 1.0  # -||q - k||^2 = -||q||^2 + 2 q.k - ||k||^2
        key_term = -(k * k).sum(-1) if euclidean else torch.zeros_like(k[..., 0])  # (b, r)
        if weights.b_Q is not None:
            key_term = key_term + factor * (k @ weights.b_Q)
        W_Q = weights.W_Q  # (D, D): read once (slot-tied weights build it)
        folded = folded_pair(factor * k @ W_Q, queries, W_Q)  # (b, r, |S|), (b, |S|, q)
        scores = torch.baddbmm(key_term[..., None], *folded)  # (b, r, q)
    elif euclidean:
        q = project(queries, weights.W_Q, weights.b_Q)  # (b, q, D)
        k = project(keys, weights.W_K, weights.b_K)  # (b, r, D)
        scores = torch.baddbmm(-(k * k).sum(-1)[:, None, :], 2 * q, k.transpose(1, 2))  # (b, q, r)
    else:  # fold W_K into the queries: q.(W_K z' + b_K) = (W_K^T q).z' + q.b_K
        q = project(queries, weights.W_Q, weights.b_Q)  # (b, q, D)
        query_term = (q @ weights.b_K)[..., None] if weights.b_K is not None else q.new_zeros(q.shape[:2] + (1,))
        W_K = weights.W_K  # (D, D): read once (slot-tied weights build it)
        scores = torch.baddbmm(query_term, *folded_pair(q @ W_K, keys, W_K))  # (b, q, r)
    if attention.config.scale_by_sqrt_dim:
        scores = scores / math.sqrt(attention.d_model)
    return scores


def literal_scores(attention, shifted: Tensor, queries: Tensor, weights, keys_major: bool) -> Tensor:
    """``shifted`` (of ``shifted_scores``, laid out as ``keys_major`` says) with the per-query term it drops added
    back: -||q_i||^2 / sqrt(D)^[scale] for euclidean scores, clamped to <= 0 as -||q - k||^2 is exactly."""
    if attention.config.score == "dot":
        return shifted
    q = project(queries, weights.W_Q, weights.b_Q)  # (b, q, D)
    query_term = (q * q).sum(-1)  # (b, q)
    if attention.config.scale_by_sqrt_dim:
        query_term = query_term / math.sqrt(attention.d_model)
    query_term = query_term[:, None, :] if keys_major else query_term[..., None]
    # into the shifted scores' own fresh buffer where autograd does not track it (the same numbers)
    literal = shifted.sub_(query_term) if not shifted.requires_grad else shifted - query_term
    return literal.clamp_max_(0)  # -||q - k||^2 <= 0 exactly


def mix(pattern: Tensor, keys: Tensor, weights) -> Tensor:
    """sum_j pattern_ij (V z'_j + b_V), associated to touch the fewer tokens: pattern (b, q, r), keys (b, r, D) ->
    (b, q, D)."""
    n_queries, n_keys = pattern.shape[1], pattern.shape[2]
    if n_keys <= n_queries:
        return pattern @ project(keys, weights.W_V, weights.b_V)
    support = feature_support(weights.W_V)
    mixed = (pattern @ keys[..., support]) @ weights.W_V[:, support].T  # (b, q, D)
    if weights.b_V is not None:
        mixed = mixed + pattern.sum(-1, keepdim=True) * weights.b_V
    return mixed
