"""Euclidean / dot-product attention with one normaliser argument (paper 2, Def. 2.2; docs/constructions.md).

Tokens are rows. A paper matrix W acts on a token z as W z, so projections are Z W^T. For queries Z (b, q, D)
and keys Z' (b, r, D):

    scores  s_ij = -||Q z_i - K z'_j||^2 / sqrt(D)^[scale]     (euclidean)
                 =  (Q z_i + b_Q)^T (K z'_j + b_K) / sqrt(D)^[scale]   (dot)
    pattern      = normaliser(gamma * s) over keys j; gamma = inf: AHAT (uniform on the exact arg-max set)
    out_i        = sum_j pattern_ij (V z'_j + b_V)

This module is that computation (``Attention._reference``): ``hook_scores`` holds s before gamma, ``hook_pattern``
the weights, ``hook_out`` the output. The scores are computed up to a per-query constant that every normaliser
ignores (``shifted_scores``: the -||q||^2 of a euclidean score is added back only where the scores are hooked or
returned), with the projections folded onto the side with fewer tokens. When nothing is hooked on scores or pattern
two kernels of ``interp.model.kernels`` may replace the reference, as ``kernels.dispatch`` decides (``fused``:
softmax attention without forming the pattern; ``hardmax``: AHAT's arg-max sets directly); hooking either, or
``kernels.reference_only()``, keeps the reference, so patches always take effect. The identity self-attention's
(b, n, n) scores and pattern are built only for a run that hooks them, and dropped with it
(``KMeansTransformer.run_with_cache`` leaves them out unless ``names_filter`` asks for them).

Random draws (Gumbel noise; attention dropout in training mode) come from the forward's ``generator``, or torch's
global RNG without one. Dropout multiplies the pattern by an i.i.d. Bernoulli(1 - p) / (1 - p) keep mask; the fused
kernel drops the same distribution of (query, key) pairs sparsely.
"""

from __future__ import annotations

import math
import warnings

import torch
from entmax import normmax_bisect, sparsemax
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from interp._checks import InvalidInputType
from interp.model.config import AttentionConfig
from interp.model.kernels import dispatch, fused, hardmax
from interp.model.projections import as_layout, feature_support, folded_pair, keep_mask, project
from interp.primitives import ahat, gumbel_noise, normmax_limit

DENSE_IDENTITY_WARN_BYTES = 1 << 28  # 256 MiB: a hooked identity self-attention warns above this


class DenseIdentityPattern(UserWarning):
    """A hook on an identity self-attention's scores or pattern makes it form large (b, n, n) tensors."""


class AttentionWeights(nn.Module):
    """Learnable Q, K, V (paper orientation: (D_out, D_in), q = W_Q z + b_Q) of one attention."""

    def __init__(self, d_model: int, bias: bool):
        super().__init__()
        self.W_Q = nn.Parameter(torch.empty(d_model, d_model))  # (D, D)
        self.W_K = nn.Parameter(torch.empty(d_model, d_model))  # (D, D)
        self.W_V = nn.Parameter(torch.empty(d_model, d_model))  # (D, D)
        if bias:
            self.b_Q = nn.Parameter(torch.empty(d_model))  # (D,)
            self.b_K = nn.Parameter(torch.empty(d_model))  # (D,)
            self.b_V = nn.Parameter(torch.empty(d_model))  # (D,)
        else:
            self.register_parameter("b_Q", None)
            self.register_parameter("b_K", None)
            self.register_parameter("b_V", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's nn.Linear default initialisation, as the authors' code (docs/learned_model.md)."""
        bound = 1.0 / math.sqrt(self.W_Q.shape[1])
        for weight in (self.W_Q, self.W_K, self.W_V):
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
        for b in (self.b_Q, self.b_K, self.b_V):
            if b is not None:
                nn.init.uniform_(b, -bound, bound)

    @property
    def W_QK(self) -> Tensor:
        """Q^T K (D, D): the bilinear form of the dot score, compared with the constructions' (paper 1, Figs. 5-6)."""
        return self.W_Q.T @ self.W_K

def normalise(scores: Tensor, config: AttentionConfig, dim: int = -1,
              generator: torch.Generator | None = None) -> Tensor:
    """Attention weights from scores under ``config``'s normaliser and gamma, normalised along ``dim`` (keys)."""
    if config.normaliser == "normmax":
        logits = config.gamma * scores
        return normmax_limit(logits, dim) if math.isinf(config.alpha) else normmax_bisect(logits, config.alpha, dim=dim)
    if config.normaliser == "gumbel":
        logits = config.gamma * scores + gumbel_noise(scores.shape, scores, generator)
        if config.gumbel_tau == 0:
            return ahat(logits, dim=dim)  # a single arg-max: ties have probability 0
        return torch.softmax(logits / config.gumbel_tau, dim=dim)
    if config.normaliser == "linear":
        total = scores.sum(dim=dim, keepdim=True)
        empty_row = (total == 0).to(scores.dtype)  # an all-zero row becomes uniform (the eps -> 0 limit)
        return (scores + empty_row) / (total + empty_row * scores.shape[dim])
    if config.hard:
        return ahat(scores, dim=dim)
    if config.normaliser == "softmax":
        return torch.softmax(config.gamma * scores, dim=dim)  # subtracts the max internally
    return sparsemax(config.gamma * scores, dim=dim)


class Attention(nn.Module):
    """One attention of a block: the hook points and the computation; weights come from ``AttentionWeights``."""

    def __init__(self, config: AttentionConfig, d_model: int):
        super().__init__()
        self.config = config
        self.d_model = d_model
        self.hook_scores = HookPoint()  # (b, queries, keys): s before gamma
        self.hook_pattern = HookPoint()  # (b, queries, keys): attention weights
        self.hook_out = HookPoint()  # (b, queries, D): what the attention adds to the residual stream

    def hooked(self) -> bool:
        """Whether a hook sits on the scores or the pattern (then no kernel replaces the reference)."""
        return bool(self.hook_scores.fwd_hooks or self.hook_pattern.fwd_hooks)

    def dropping(self) -> bool:
        """Attention dropout is drawn in training mode only."""
        return self.training and self.config.dropout > 0

    def keys_major(self, n_queries: int, n_keys: int) -> bool:
        """Whether the work (and its dropout mask) is laid out keys-major, (b, r, q): fewer keys than queries,
        except for Gumbel noise, always drawn in the (b, q, r) layout so hooked and plain runs draw the same numbers."""
        return n_keys < n_queries and self.config.normaliser != "gumbel"

    def draw_dropout(self, batch: tuple[int, ...], n_queries: int, n_keys: int, like: Tensor,
                     generator: torch.Generator | None, literal: bool = False) -> Tensor | tuple[Tensor, ...] | None:
        """This attention's dropout draw, as its forward makes it (the one rule, also used by
        ``kernels.training_step``): None unless ``dropping()``; where the fused kernel runs (nothing ``literal``,
        ``dispatch.fused_softmax``) the dropped pairs (batch, query, key) of ``fused.sample_dropped_pairs`` over
        (batch[0], q, r); else the dense keep mask of ``keep_mask`` in the work's layout, (*batch, r, q) keys-major
        or (*batch, q, r), of ``like``'s dtype and device."""
        if not self.dropping():
            return None
        p = self.config.dropout
        if not literal and dispatch.fused_softmax(self.config, n_queries, n_keys, like.device.type):
            return fused.sample_dropped_pairs(batch[0], n_queries, n_keys, p, like.device, generator)
        layout = (n_keys, n_queries) if self.keys_major(n_queries, n_keys) else (n_queries, n_keys)
        return keep_mask((*batch, *layout), like, p, generator)

    def scores(self, queries: Tensor, keys: Tensor, weights: AttentionWeights) -> Tensor:
        """Literal scores (b, q, r) before gamma (a view when computed keys-major)."""
        keys_major = keys.shape[1] < queries.shape[1]
        scores = self._literal(self.shifted_scores(queries, keys, weights, keys_major), queries, weights, keys_major)
        return scores.transpose(1, 2) if keys_major else scores

    def forward(self, queries: Tensor, keys: Tensor, weights: AttentionWeights, need_pattern: bool = False,
                generator: torch.Generator | None = None) -> tuple[Tensor, Tensor | None]:
        """Attention output (b, q, D); with ``need_pattern`` (or a hook on scores/pattern) also the pattern
        (b, q, r), else None. With fewer keys than queries the work is laid out keys-major (b, r, q), so the
        normaliser reduces a strided axis, which vectorises; hooks see (b, q, r) views of it. ``generator`` drives
        the Gumbel noise and the dropout masks (None: torch's global RNG)."""
        if generator is not None and not isinstance(generator, torch.Generator):
            raise InvalidInputType(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        config = self.config
        if config.identity:
            return self._identity(queries, weights, need_pattern)
        literal = need_pattern or self.hooked()
        n_queries, n_keys = queries.shape[-2], keys.shape[-2]
        keys_major = self.keys_major(n_queries, n_keys)
        if literal:
            out, pattern = self._reference(queries, keys, weights, keys_major, generator)  # (b, q, D), (b, q, r)
        elif dispatch.fused_softmax(config, n_queries, n_keys, queries.device.type):
            dropped = self.draw_dropout(queries.shape[:-2], n_queries, n_keys, queries, generator)
            out, pattern = fused.softmax_attention(self, queries, keys, weights, dropped), None  # (b, q, D)
        elif dispatch.hardmax_shortcut(config, self.dropping()):
            scores = self.shifted_scores(queries, keys, weights, keys_major)  # (b, r, q) or (b, q, r)
            out, pattern = hardmax.hardmax_attention(self, scores, keys, weights, keys_major), None  # (b, q, D)
        else:
            out, pattern = self._reference(queries, keys, weights, keys_major, generator, literal=False)
        if config.output_norm == "unit":  # RMSNorm(eps 0, gain 1/sqrt(D)) = out / ||out||
            norm = out.norm(dim=-1, keepdim=True)
            out = out / torch.where(norm > 0, norm, torch.ones_like(norm))
        return self.hook_out(out), pattern

    def _reference(self, queries: Tensor, keys: Tensor, weights: AttentionWeights, keys_major: bool,
                   generator: torch.Generator | None, literal: bool = True) -> tuple[Tensor, Tensor | None]:
        """The attention as the papers write it: scores, pattern = normaliser(gamma s), dropout, pattern-weighted
        values; output (b, q, D) and the pattern (b, q, r). ``literal=False`` (nothing hooked or asked for) skips
        the per-query score term every normaliser ignores and returns no pattern."""
        config = self.config
        key_axis = 1 if keys_major else 2
        scores = self.shifted_scores(queries, keys, weights, keys_major)  # (b, r, q) or (b, q, r)
        if literal:
            scores = self._literal(scores, queries, weights, keys_major)
            scores = as_layout(self.hook_scores(as_layout(scores, keys_major)), keys_major)
        pattern = normalise(scores, config, dim=key_axis, generator=generator)
        if literal:
            pattern = as_layout(self.hook_pattern(as_layout(pattern, keys_major)), keys_major)
        pattern_used = pattern  # (b, r, q) or (b, q, r)
        if self.dropping():  # the dense keep mask (the reference path is taken literal or where no fused kernel is)
            n_queries, n_keys = queries.shape[-2], keys.shape[-2]
            pattern_used = pattern * self.draw_dropout(pattern.shape[:-2], n_queries, n_keys, pattern, generator,
                                                       literal=True)
        out = self.mix(as_layout(pattern_used, keys_major), keys, weights)  # (b, q, D)
        return out, (as_layout(pattern, keys_major) if literal else None)

    def _literal(self, shifted: Tensor, queries: Tensor, weights: AttentionWeights, keys_major: bool) -> Tensor:
        """Add back the per-query term that ``shifted_scores`` drops: -||q||^2 for euclidean scores."""
        if self.config.score == "dot":
            return shifted
        q = project(queries, weights.W_Q, weights.b_Q)  # (b, q, D)
        query_term = (q * q).sum(-1)  # (b, q)
        if self.config.scale_by_sqrt_dim:
            query_term = query_term / math.sqrt(self.d_model)
        query_term = query_term[:, None, :] if keys_major else query_term[..., None]
        # into the shifted scores' own fresh buffer where autograd does not track it (the same numbers)
        literal = shifted.sub_(query_term) if not shifted.requires_grad else shifted - query_term
        return literal.clamp_max_(0)  # -||q - k||^2 <= 0 exactly

    def shifted_scores(self, queries: Tensor, keys: Tensor, weights: AttentionWeights, keys_major: bool) -> Tensor:
        """Scores up to a per-query additive constant, (b, r, q) if ``keys_major`` else (b, q, r), with the
        projections folded onto the side with fewer tokens. Softmax, sparsemax and AHAT ignore a per-query
        constant; dot scores (linear attention) are exact."""
        euclidean = self.config.score == "euclidean"
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
        if self.config.scale_by_sqrt_dim:
            scores = scores / math.sqrt(self.d_model)
        return scores

    def mix(self, pattern: Tensor, keys: Tensor, weights: AttentionWeights) -> Tensor:
        """sum_j pattern_ij (V z'_j + b_V), associated to touch the fewer tokens: (b, q, r) x (b, r, D)."""
        n_queries, n_keys = pattern.shape[1], pattern.shape[2]
        if n_keys <= n_queries:
            return pattern @ project(keys, weights.W_V, weights.b_V)
        support = feature_support(weights.W_V)
        mixed = (pattern @ keys[..., support]) @ weights.W_V[:, support].T  # (b, q, D)
        if weights.b_V is not None:
            mixed = mixed + pattern.sum(-1, keepdim=True) * weights.b_V
        return mixed

    def _identity(self, tokens: Tensor, weights: AttentionWeights, need_pattern: bool):
        """Self-attention at its gamma = inf value on distinct tokens: pattern I, out_i = V z_i + b_V.

        Nothing (n, n) is formed unless a hook sits on hook_scores or hook_pattern (or ``need_pattern``): then the
        scores S (0 on the diagonal, -inf elsewhere) go through hook_scores, the pattern is the gamma = inf pattern
        of the (possibly patched) scores, AHAT(S) = I, it goes through hook_pattern, and out = pattern V z: the
        literal computation, so patches of either (returned or in place) take effect. The (b, n, n) tensors are
        built for this call only (2 b n^2 entries; ``DenseIdentityPattern`` warns above 256 MiB)."""
        values = project(tokens, weights.W_V, weights.b_V)  # (b, n, D)
        if not (self.hooked() or need_pattern):
            return self.hook_out(values), None
        lead, n = tokens.shape[:-2], tokens.shape[-2]
        size = 2 * math.prod(lead) * n * n * tokens.element_size()
        if size > DENSE_IDENTITY_WARN_BYTES:
            warnings.warn(f"a hook on an identity self-attention's scores or pattern materialises 2 x {tuple(lead)} x "
                          f"({n}, {n}) entries, {size / 2**30:.2f} GiB; hook only the hook points you need",
                          DenseIdentityPattern, stacklevel=2)
        identity_scores = torch.full((*lead, n, n), float("-inf"), dtype=tokens.dtype, device=tokens.device)
        identity_scores.diagonal(dim1=-2, dim2=-1).zero_()  # (b, n, n): 0 on the diagonal, -inf elsewhere
        scores = self.hook_scores(identity_scores)  # (b, n, n)
        pattern = self.hook_pattern(ahat(scores, dim=-1))  # (b, n, n): I unless the scores were patched
        return self.hook_out(pattern @ values), pattern
