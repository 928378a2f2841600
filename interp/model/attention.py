"""Euclidean / dot-product attention with one normaliser argument (paper 2, Def. 2.2; docs/constructions.md).

Tokens are rows. A paper matrix W acts on a token z as W z, so projections are Z W^T. For queries Z (b, q, D)
and keys Z' (b, r, D):

    scores  s_ij = -||Q z_i - K z'_j||^2 / sqrt(D)^[scale]     (euclidean)
                 =  (Q z_i + b_Q)^T (K z'_j + b_K) / sqrt(D)^[scale]   (dot)
    pattern      = normaliser(gamma * s) over keys j; gamma = inf: AHAT (uniform on the exact arg-max set)
    out_i        = sum_j pattern_ij (V z'_j + b_V)

This module is that computation, literally (``Attention.forward``): ``hook_scores`` holds s before gamma,
``hook_pattern`` the weights, ``hook_out`` the output, each a (b, q, r) tensor (with fewer keys than queries the
scores are stored keys-major, so the normaliser's reduction over the keys vectorises). It is what a hooked step
runs; an unhooked one may replace an attention by a kernel (``interp.model.kernels.dispatch``: ``fused_softmax``,
``hardmax_sets``, ``folded_scores``; ``kernels.per_part.attend``), so hooks always observe and patch this
computation. The identity self-attention (``AttentionConfig.identity``) is its gamma = inf value on distinct tokens,
out_i = V z_i + b_V; its (b, n, n) scores and pattern are built only for a run that hooks them, and dropped with it
(``KMeansTransformer.run_with_cache`` leaves them out unless ``names_filter`` asks for them).

Random draws (Gumbel noise; attention dropout in training mode) come from the forward's ``generator``, or torch's
global RNG without one. Dropout multiplies the pattern by an i.i.d. Bernoulli(1 - p) / (1 - p) keep mask, drawn by
``Attention.draw_dropout`` as every path draws it: sparse dropped pairs where an unhooked step takes the fused kernel,
a dense mask elsewhere, so a step draws the same numbers hooked or not.
"""

from __future__ import annotations

import math
import warnings

import torch
from entmax import normmax_bisect, sparsemax
from torch import Tensor, nn
from transformer_lens.FactoredMatrix import FactoredMatrix
from transformer_lens.hook_points import HookPoint

from interp._checks import InvalidInput, InvalidInputType
from interp.model.config import AttentionConfig
from interp.model.kernels import dispatch, fused
from interp.model.projections import as_layout, keep_mask, project
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


def _pair_terms(q: Tensor, k: Tensor, key_term: Tensor, alpha: float) -> Tensor:
    """key_term_j + alpha q_i . k_j for q (b, q, D), k (b, r, D), key_term (b, r) -> (b, q, r); with fewer keys than
    queries stored keys-major (the (b, q, r) view of a (b, r, q) tensor), so a reduction over the keys vectorises."""
    if k.shape[1] < q.shape[1]:
        return torch.baddbmm(key_term[..., None], k, q.transpose(1, 2), alpha=alpha).transpose(1, 2)
    return torch.baddbmm(key_term[:, None, :], q, k.transpose(1, 2), alpha=alpha)


class Attention(nn.Module):
    """One attention of a block: the hook points and the computation; weights come from ``AttentionWeights``."""

    def __init__(self, config: AttentionConfig, d_model: int):
        super().__init__()
        self.config = config
        self.d_model = d_model
        self.hook_scores = HookPoint()  # (b, queries, keys): s before gamma
        self.hook_pattern = HookPoint()  # (b, queries, keys): attention weights
        self.hook_out = HookPoint()  # (b, queries, D): what the attention adds to the residual stream

    @property
    def weights(self) -> AttentionWeights:
        """The ``AttentionWeights`` this attention uses at its step: ``model.layers[i]``'s (i = 0 for shared weights,
        the step otherwise), bound by the model (``Block.bind_weights``), read there on every access (slot-tied
        weights are built from their free parameters each time). Not a submodule: the model owns the weights."""
        source = self.__dict__.get("_weights_source")  # (the model's layers, index, attention name)
        if source is None:
            raise InvalidInput("this attention is not bound to a KMeansTransformer's weights (the model binds its "
                               "blocks in setup()): read QK / OV through model.blocks[l]")
        layers, index, name = source
        return getattr(layers[index], name)

    @property
    def QK(self) -> FactoredMatrix:
        """The bilinear form of the scores, (1, D, D) = (n_heads, d_model, d_model), in TransformerLens's orientation:
        tokens are rows x, and QK = W_Q^T W_K (``FactoredMatrix(W_Q^T, W_K)``, the paper's q = W_Q z + b_Q), so
        x QK x'^T = (W_Q z)^T (W_K z'), as TransformerLens's x W_Q W_K^T x'^T. The scores hold it as
        s = x QK x'^T (dot) or s = 2 x QK x'^T - ||W_Q z||^2 - ||W_K z'||^2 (euclidean, -||Q z - K z'||^2), plus the
        bias terms, divided by sqrt(D) when the attention scales, before gamma; QK holds neither 2, nor sqrt(D), nor
        gamma, nor the biases (as TransformerLens's QK holds no 1/sqrt(d_head)). Differentiable in the weights."""
        weights = self.weights
        return FactoredMatrix(weights.W_Q.T[None], weights.W_K[None])  # (1, D, D)

    @property
    def OV(self) -> FactoredMatrix:
        """What a key token adds, (1, D, D) in TransformerLens's orientation: a key row x' adds x' OV = (W_V z')^T times
        its pattern weight, so OV = W_V^T (``FactoredMatrix(W_V^T, I)``: there is no output matrix, W_O = I). b_V and
        an ``output_norm="unit"`` rescaling are not in it (as TransformerLens's OV holds no b_V, b_O)."""
        W_V = self.weights.W_V  # (D, D): read once (slot-tied weights build it)
        identity = torch.eye(W_V.shape[0], dtype=W_V.dtype, device=W_V.device)  # (D, D)
        return FactoredMatrix(W_V.T[None], identity[None])  # (1, D, D)

    def dropping(self) -> bool:
        """Attention dropout is drawn in training mode only."""
        return self.training and self.config.dropout > 0

    def keys_major(self, n_queries: int, n_keys: int) -> bool:
        """Whether a dense dropout mask is drawn (and the ``folded_scores`` kernel works) keys-major, (b, r, q): fewer
        keys than queries, except for Gumbel noise, always drawn (b, q, r), so every path draws the same numbers."""
        return n_keys < n_queries and self.config.normaliser != "gumbel"

    def draw_dropout(self, batch: tuple[int, ...], n_queries: int, n_keys: int, like: Tensor,
                     generator: torch.Generator | None, need_pattern: bool = False,
                     ) -> Tensor | tuple[Tensor, ...] | None:
        """This attention's dropout draw, the one rule every path follows, so a step draws the same numbers hooked
        or not, through a kernel or not: None unless ``dropping()``; where an unhooked step takes the fused kernel
        (``dispatch.attention_kernel``, with ``need_pattern``) the dropped pairs (batch, query, key) of
        ``fused.sample_dropped_pairs`` over (batch[0], q, r); else the dense keep mask of ``keep_mask``,
        Bernoulli(1 - p) / (1 - p), laid out (*batch, r, q) if ``keys_major`` else (*batch, q, r), of ``like``'s
        dtype and device."""
        if not self.dropping():
            return None
        p = self.config.dropout
        kernel = dispatch.attention_kernel(self.config, n_queries, n_keys, like.device.type, need_pattern, True)
        if kernel == "fused_softmax":
            return fused.sample_dropped_pairs(batch[0], n_queries, n_keys, p, like.device, generator)
        layout = (n_keys, n_queries) if self.keys_major(n_queries, n_keys) else (n_queries, n_keys)
        return keep_mask((*batch, *layout), like, p, generator)

    def forward(self, queries: Tensor, keys: Tensor, weights: AttentionWeights, need_pattern: bool = False,
                generator: torch.Generator | None = None) -> tuple[Tensor, Tensor | None]:
        """A(Z, Z') as the papers write it: s = scores(Z, Z'), P = normaliser(gamma s) over the keys, dropout,
        out_i = sum_j P_ij (V z'_j + b_V), each through its hook point. Queries (b, q, D), keys (b, r, D) -> the
        output (b, q, D) and the pattern (b, q, r) (an identity attention: None unless hooked or ``need_pattern``).
        ``generator`` drives the Gumbel noise and the dropout mask (None: torch's global RNG)."""
        if generator is not None and not isinstance(generator, torch.Generator):
            raise InvalidInputType(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        if self.config.identity:
            return self._identity(queries, weights, need_pattern)
        scores = self.hook_scores(self.scores(queries, keys, weights))  # (b, q, r)
        pattern = self.hook_pattern(normalise(scores, self.config, dim=-1, generator=generator))  # (b, q, r)
        out = self.mix(self.dropout(pattern, generator, need_pattern), keys, weights)  # (b, q, D)
        return self.hook_out(self.output_norm(out)), pattern

    def scores(self, queries: Tensor, keys: Tensor, weights: AttentionWeights) -> Tensor:
        """s_ij = -||q_i - k_j||^2 (euclidean, clamped to <= 0 as it is exactly) or q_i . k_j (dot), divided by
        sqrt(D) when the config scales, with q = Z W_Q^T + b_Q, k = Z' W_K^T + b_K: queries (b, q, D), keys (b, r, D)
        -> (b, q, r), before gamma."""
        q = project(queries, weights.W_Q, weights.b_Q)  # (b, q, D)
        k = project(keys, weights.W_K, weights.b_K)  # (b, r, D)
        if self.config.score == "dot":
            scores = _pair_terms(q, k, k.new_zeros(k.shape[:2]), 1.0)  # (b, q, r): q_i . k_j
        else:  # -||q_i - k_j||^2 = 2 q_i . k_j - ||k_j||^2 - ||q_i||^2
            scores = _pair_terms(q, k, -(k * k).sum(-1), 2.0).sub_((q * q).sum(-1)[..., None]).clamp_max_(0)
        return scores / math.sqrt(self.d_model) if self.config.scale_by_sqrt_dim else scores

    def dropout(self, pattern: Tensor, generator: torch.Generator | None, need_pattern: bool = False) -> Tensor:
        """In training mode, the pattern (b, q, r) times this attention's keep mask M (``draw_dropout``):
        M_ij = 0 on the dropped pairs, 1 / (1 - p) elsewhere."""
        if not self.dropping():
            return pattern
        n_queries, n_keys = pattern.shape[-2:]
        draw = self.draw_dropout(pattern.shape[:-2], n_queries, n_keys, pattern, generator, need_pattern)
        if isinstance(draw, tuple):  # the fused kernel's dropped pairs (batch, query, key), as the dense mask
            mask = torch.full_like(pattern, 1.0 / (1.0 - self.config.dropout))  # (b, q, r)
            mask[draw] = 0.0
            return pattern * mask
        return pattern * as_layout(draw, self.keys_major(n_queries, n_keys))  # (b, q, r)

    def mix(self, pattern: Tensor, keys: Tensor, weights: AttentionWeights) -> Tensor:
        """out_i = sum_j pattern_ij (V z'_j + b_V): pattern (b, q, r), keys (b, r, D) -> (b, q, D). With more keys
        than queries the same sum as V (sum_j pattern_ij z'_j) + (sum_j pattern_ij) b_V, which projects q tokens, not
        r."""
        if pattern.shape[2] <= pattern.shape[1]:
            return pattern @ project(keys, weights.W_V, weights.b_V)  # (b, q, D)
        mixed = project(pattern @ keys, weights.W_V, None)  # (b, q, D)
        return mixed if weights.b_V is None else mixed + pattern.sum(-1, keepdim=True) * weights.b_V

    def output_norm(self, out: Tensor) -> Tensor:
        """The output (b, q, D), scaled to unit length with ``output_norm="unit"`` (RMSNorm, eps 0, gain 1/sqrt(D))."""
        if self.config.output_norm != "unit":
            return out
        norm = out.norm(dim=-1, keepdim=True)  # (b, q, 1)
        return out / torch.where(norm > 0, norm, torch.ones_like(norm))

    def _identity(self, tokens: Tensor, weights: AttentionWeights, need_pattern: bool):
        """Self-attention at its gamma = inf value on distinct tokens: pattern I, out_i = V z_i + b_V.

        Nothing (n, n) is formed unless a hook sits on hook_scores or hook_pattern (or ``need_pattern``): then the
        scores S (0 on the diagonal, -inf elsewhere) go through hook_scores, the pattern is the gamma = inf pattern
        of the (possibly patched) scores, AHAT(S) = I, it goes through hook_pattern, and out = pattern V z: the
        literal computation, so patches of either (returned or in place) take effect. The (b, n, n) tensors are
        built for this call only (2 b n^2 entries; ``DenseIdentityPattern`` warns above 256 MiB)."""
        values = project(tokens, weights.W_V, weights.b_V)  # (b, n, D)
        if not (need_pattern or dispatch.hooked((self.hook_scores, self.hook_pattern))):
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
