"""Euclidean / dot-product attention with one normaliser argument (paper 2, Def. 2.2; docs/constructions.md).

Tokens are rows. A paper matrix W acts on a token z as W z, so projections are Z W^T. For queries Z (b, q, D)
and keys Z' (b, r, D):

    scores  s_ij = -||Q z_i - K z'_j||^2 / sqrt(D)^[scale]     (euclidean)
                 =  (Q z_i + b_Q)^T (K z'_j + b_K) / sqrt(D)^[scale]   (dot)
    pattern      = normaliser(gamma * s) over keys j; gamma = inf: AHAT (uniform on the exact arg-max set)
    out_i        = sum_j pattern_ij (V z'_j + b_V)

``hook_scores`` holds s before gamma, ``hook_pattern`` the weights. When nothing is hooked on them the
module may take a fused path (``interp.model.dispatch`` decides; ``dispatch.reference_only()`` turns it off)
that never forms what it does not need (the identity self-attention skips its (n, n) pattern entirely); hooking
either forces the literal path, so patches always take effect. The identity self-attention's (b, n, n) scores and
pattern are built only for a run that hooks them, and dropped with it (``KMeansTransformer.run_with_cache`` leaves
them out unless ``names_filter`` asks for them).

Random draws (Gumbel noise; attention dropout in training mode) come from the forward's ``generator``, or torch's
global RNG without one. Dropout multiplies the pattern by an i.i.d. Bernoulli(1 - p) / (1 - p) keep mask; the fused
path drops the same distribution of (query, key) pairs sparsely (``fused_attention``).

**Seed axis.** The same module runs S independent models at once when their weights are stacked
(``StackedAttentionWeights``: W (S, D, D), b (S, D)) and the tokens carry a leading model axis, (S, b, t, D).
Model s reads only its own weights and tokens and draws from its own generator in the order and layout of its
single-model forward, so it gets the same dropout masks and noise; the fused-path choice is the same. The
unfused scores are computed queries-major without folding, (2 q.k - ||k||^2) / sqrt(D) (euclidean, the per-query
-||q||^2 dropped) or q.k / sqrt(D) (dot), so the two paths agree up to float rounding. Stacked weights take no
hooks on scores or pattern.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from entmax import normmax_bisect, sparsemax
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from interp._checks import InvalidInput, InvalidInputType
from interp.model import dispatch
from interp.model.config import AttentionConfig
from interp.model.embedding import LabelledTokens
from interp.model.fused_attention import flash_attention, sample_dropped_pairs
from interp.primitives import ahat, argmax_sets, gumbel_noise, normmax_limit

Generators = torch.Generator | Sequence[torch.Generator | None] | None  # one generator, one per model, or None
SLOTS = ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V")
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


@dataclass(frozen=True)
class StackedAttentionWeights:
    """Q, K, V of S models on a leading model axis (paper orientation): W_* (S, D, D), b_* (S, D) or None."""

    W_Q: Tensor  # (S, D, D)
    W_K: Tensor  # (S, D, D)
    W_V: Tensor  # (S, D, D)
    b_Q: Tensor | None  # (S, D)
    b_K: Tensor | None  # (S, D)
    b_V: Tensor | None  # (S, D)

    @classmethod
    def stack(cls, weights: Sequence[AttentionWeights]) -> "StackedAttentionWeights":
        """Every slot stacked over ``weights`` (differentiable: each model's parameters get their own gradient)."""
        if len(weights) == 0:
            raise InvalidInput("stacking needs at least one model's attention weights")
        shapes = {tuple(tuple(w.shape) if w is not None else None for w in (getattr(m, s) for s in SLOTS))
                  for m in weights}
        if len(shapes) != 1:
            raise InvalidInput("stacked attentions must have the same widths and biases, got "
                               f"{sorted(shapes, key=str)}")
        return cls(**{slot: None if getattr(weights[0], slot) is None
                      else torch.stack([getattr(w, slot) for w in weights]) for slot in SLOTS})


def _feature_support(matrix: Tensor) -> slice:
    """The smallest contiguous range of features (last axis) that holds every nonzero of ``matrix``.

    Contractions skip the features outside it: exact (they multiply zeros) and free for dense learned
    weights, while hand-set weights, which read few features, contract over d or e instead of D. Tensors
    that require grad are used whole.
    """
    if matrix.requires_grad:
        return slice(None)
    nonzero = (matrix != 0).reshape(-1, matrix.shape[-1]).any(dim=0).nonzero()  # (m, 1)
    if len(nonzero) == 0:
        return slice(0, 1)  # an all-zero matrix: contract one (zero) feature
    low, high = int(nonzero[0]), int(nonzero[-1]) + 1
    return slice(None) if (low, high) == (0, matrix.shape[-1]) else slice(low, high)


def _contract(tokens: Tensor, matrix: Tensor) -> Tensor:
    """tokens (b, t, D) times matrix^T, matrix (..., m, D) -> (b, t, m), over the features ``matrix`` reads."""
    support = _feature_support(matrix)
    return tokens[..., support] @ matrix[..., support].transpose(-1, -2)


def _project(tokens: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """Z W^T + b for tokens (b, t, D) -> (b, t, D); with a model axis, tokens (S, b, t, D), weight (S, D, D) and
    bias (S, D) -> (S, b, t, D), one (b t, D) x (D, D) product per model."""
    if weight.dim() == 3:
        flat = tokens.flatten(1, 2)  # (S, b*t, D)
        transposed = weight.transpose(-1, -2)  # (S, D, D)
        projected = flat @ transposed if bias is None else torch.baddbmm(bias[:, None, :], flat, transposed)
        return projected.view(tokens.shape[:-1] + (weight.shape[-2],))  # (S, b, t, D)
    projected = _contract(tokens, weight)
    return projected if bias is None else projected + bias


def _keep_mask(shape: tuple[int, ...], like: Tensor, p: float, generator: torch.Generator | None) -> Tensor:
    """Dropout's keep mask of ``shape``, i.i.d. Bernoulli(1 - p) / (1 - p), drawn as F.dropout draws it."""
    return torch.empty(shape, dtype=like.dtype, device=like.device).bernoulli_(1 - p, generator=generator).div_(1 - p)


def _dropped_pairs(tasks: int, n_queries: int, n_keys: int, p: float, generators: list, device) -> tuple:
    """Dropped (task, query, key) positions for the fused kernel over len(generators) * tasks flattened tasks:
    model s's ``tasks`` tasks from generator s (as its single-model forward draws them), offset by s * tasks."""
    parts = [sample_dropped_pairs(tasks, n_queries, n_keys, p, device, generator) for generator in generators]
    offset = [(index * tasks + task, query, key) for index, (task, query, key) in enumerate(parts)]
    return tuple(torch.cat(axis) for axis in zip(*offset))


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




def _as_layout(tensor: Tensor, keys_major: bool) -> Tensor:
    """Swap (b, r, q) <-> (b, q, r) when the work is laid out keys-major (a view)."""
    return tensor.transpose(1, 2) if keys_major else tensor


def _folded_pair(folded: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor]:
    """(folded[..., S], tokens[..., S]^T) for the features S that ``folded`` (b, q, D) reads."""
    support = _feature_support(folded)
    return folded[..., support], tokens[..., support].transpose(1, 2)


class Attention(nn.Module):
    """One attention of a block: the hook points and the computation; weights come from ``AttentionWeights``."""

    def __init__(self, config: AttentionConfig, d_model: int):
        super().__init__()
        self.config = config
        self.d_model = d_model
        self.hook_scores = HookPoint()  # (b, queries, keys): s before gamma
        self.hook_pattern = HookPoint()  # (b, queries, keys): attention weights
        self.hook_out = HookPoint()  # (b, queries, D): what the attention adds to the residual stream

    def _hooked(self) -> bool:
        return bool(self.hook_scores.fwd_hooks or self.hook_pattern.fwd_hooks)

    def _dropping(self) -> bool:
        """Attention dropout is drawn in training mode only."""
        return self.training and self.config.dropout > 0

    def uses_fused(self, n_queries: int, n_keys: int) -> bool:
        """Whether a forward that needs no pattern (and has no scores/pattern hook) takes the fused softmax kernel
        (``interp.model.dispatch.fused_softmax``)."""
        return dispatch.fused_softmax(self.config, n_queries, n_keys)

    def keys_major(self, n_queries: int, n_keys: int) -> bool:
        """Whether the unfused work (and its dropout mask) is laid out keys-major, (b, r, q): fewer keys than queries,
        except for Gumbel noise, always drawn in the (b, q, r) layout so hooked and plain runs draw the same numbers."""
        return n_keys < n_queries and self.config.normaliser != "gumbel"

    def _generators(self, queries: Tensor, keys: Tensor, weights, generator: Generators) -> list:
        """One generator (or None: the global RNG) per model: [generator] for single-model weights; for stacked
        weights, checked against the tokens' model axis, a sequence of S or one shared by all S."""
        if weights.W_Q.dim() == 2:
            if generator is not None and not isinstance(generator, torch.Generator):
                raise InvalidInputType(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
            return [generator]
        models = weights.W_Q.shape[0]
        if queries.dim() != 4 or keys.dim() != 4 or queries.shape[0] != models or keys.shape[0] != models:
            raise InvalidInput(f"stacked weights of S={models} models take tokens (S, b, t, D), got queries "
                               f"{tuple(queries.shape)} and keys {tuple(keys.shape)}")
        if self._hooked():
            raise InvalidInput("hooks on hook_scores or hook_pattern need single-model weights, not stacked ones")
        if generator is None or isinstance(generator, torch.Generator):
            return [generator] * models
        generators = list(generator)
        if len(generators) != models:
            raise InvalidInput(f"stacked weights of S={models} models need {models} generators, got {len(generators)}")
        return generators

    def scores(self, queries: Tensor, keys: Tensor, weights: AttentionWeights) -> Tensor:
        """Literal scores (b, q, r) before gamma (a view when computed keys-major)."""
        keys_major = keys.shape[1] < queries.shape[1]
        scores = self._literal(self._shifted_scores(queries, keys, weights, keys_major), queries, weights, keys_major)
        return scores.transpose(1, 2) if keys_major else scores

    def forward(self, queries: Tensor, keys: Tensor, weights: AttentionWeights | StackedAttentionWeights,
                need_pattern: bool = False, generator: Generators = None):
        """Attention output (b, q, D); with ``need_pattern`` (or a hook on scores/pattern) also the pattern
        (b, q, r), else None. With fewer keys than queries the work is laid out keys-major (b, r, q), so the
        normaliser reduces a strided axis, which vectorises; hooks see (b, q, r) views of it.

        ``generator`` drives the Gumbel noise and the dropout masks (None: torch's global RNG). With
        ``StackedAttentionWeights`` of S models: tokens (S, b, t, D) -> (S, b, q, D) and (S, b, q, r), and
        ``generator`` a sequence of S generators (model s draws from the s-th) or one generator / None for all."""
        config = self.config
        generators = self._generators(queries, keys, weights, generator)  # one per model
        if config.identity:
            return self._identity(queries, weights, need_pattern)
        literal = need_pattern or self._hooked()
        n_queries, n_keys = queries.shape[-2], keys.shape[-2]
        if not literal and self.uses_fused(n_queries, n_keys):
            return self.hook_out(self._fused_softmax(queries, keys, weights, generators)), None
        keys_major = self.keys_major(n_queries, n_keys)
        if weights.W_Q.dim() == 3:
            out, pattern = self._stacked(queries, keys, weights, keys_major, generators)  # (S, b, q, D), (S, b, q, r)
            pattern = pattern if need_pattern else None
        else:
            out, pattern = self._single(queries, keys, weights, literal, keys_major, generator)  # (b, q, D), (b, q, r)
        if config.output_norm == "unit":  # RMSNorm(eps 0, gain 1/sqrt(D)) = out / ||out||
            norm = out.norm(dim=-1, keepdim=True)
            out = out / torch.where(norm > 0, norm, torch.ones_like(norm))
        return self.hook_out(out), pattern

    def _single(self, queries: Tensor, keys: Tensor, weights: AttentionWeights, literal: bool, keys_major: bool,
                generator: torch.Generator | None) -> tuple[Tensor, Tensor | None]:
        """One model's unfused attention: output (b, q, D) and, when ``literal``, the hooked pattern (b, q, r)."""
        config = self.config
        key_axis = 1 if keys_major else 2
        scores = self._shifted_scores(queries, keys, weights, keys_major)  # (b, r, q) or (b, q, r)
        if not literal and dispatch.hardmax_shortcut(config, self._dropping()):
            return self._hardmax(scores, keys, weights, keys_major), None
        if literal:
            scores = self._literal(scores, queries, weights, keys_major)
            scores = _as_layout(self.hook_scores(_as_layout(scores, keys_major)), keys_major)
        pattern = normalise(scores, config, dim=key_axis, generator=generator)
        if literal:
            pattern = _as_layout(self.hook_pattern(_as_layout(pattern, keys_major)), keys_major)
        pattern_used = pattern  # (b, r, q) or (b, q, r)
        if self._dropping():
            pattern_used = pattern * _keep_mask(pattern.shape, pattern, config.dropout, generator)
        out = self._mix(_as_layout(pattern_used, keys_major), keys, weights)  # (b, q, D)
        return out, (_as_layout(pattern, keys_major) if literal else None)

    def _stacked(self, queries: Tensor, keys: Tensor, weights: StackedAttentionWeights, keys_major: bool,
                 generators: list) -> tuple[Tensor, Tensor]:
        """S models' unfused attention, queries-major: output (S, b, q, D) and pattern (S, b, q, r). Model s's
        dropout mask is drawn from generators[s] in the layout its single-model forward draws it."""
        config = self.config
        q = _project(queries, weights.W_Q, weights.b_Q)  # (S, b, q, D)
        k = _project(keys, weights.W_K, weights.b_K)  # (S, b, r, D)
        v = _project(keys, weights.W_V, weights.b_V)  # (S, b, r, D)
        if config.score == "euclidean":  # -||q - k||^2 up to the per-query -||q||^2, which the normalisers ignore
            scores = 2 * q @ k.transpose(-1, -2) - (k * k).sum(-1)[..., None, :]  # (S, b, q, r)
        else:
            scores = q @ k.transpose(-1, -2)  # (S, b, q, r)
        if config.scale_by_sqrt_dim:
            scores = scores * (1.0 / math.sqrt(self.d_model))
        if config.normaliser == "gumbel":  # each model's noise from its own generator
            pattern = torch.stack([normalise(s, config, dim=-1, generator=g) for s, g in zip(scores, generators)])
        else:
            pattern = normalise(scores, config, dim=-1)  # (S, b, q, r)
        if not self._dropping():
            return pattern @ v, pattern
        batch, n_queries, n_keys = pattern.shape[1:]
        layout = (batch, n_keys, n_queries) if keys_major else (batch, n_queries, n_keys)
        keep = torch.stack([_as_layout(_keep_mask(layout, pattern, config.dropout, g), keys_major)
                            for g in generators])  # (S, b, q, r)
        return (pattern * keep) @ v, pattern

    def _fused_softmax(self, queries: Tensor, keys: Tensor, weights: AttentionWeights | StackedAttentionWeights,
                       generators: list) -> Tensor:
        """Softmax attention through ``fused_attention`` (its formed-pattern kernel up to DENSE_MAX_PAIRS pairs per
        task, torch's flash kernel, which never forms the pattern, above): (b, q, D), or (S, b, q, D) for stacked
        weights, whose models' tasks are folded into one task axis.

        Euclidean scores become a dot product of augmented vectors: -||q - k||^2 = [q, 1].[2k, -||k||^2] - ||q||^2,
        and softmax ignores the per-query -||q||^2. Dropout (training mode only) drops pattern entries, as the
        authors' attention dropout does (theirs also stays on in eval mode, docs/decisions.md)."""
        q = _project(queries, weights.W_Q, weights.b_Q)  # (..., b, q, D)
        k = _project(keys, weights.W_K, weights.b_K)  # (..., b, r, D)
        v = _project(keys, weights.W_V, weights.b_V)  # (..., b, r, D)
        if self.config.score == "euclidean":
            q = torch.cat([q, torch.ones_like(q[..., :1])], dim=-1)  # (..., b, q, D + 1)
            k = torch.cat([2 * k, -(k * k).sum(-1, keepdim=True)], dim=-1)  # (..., b, r, D + 1)
        scale = self.config.gamma / (math.sqrt(self.d_model) if self.config.scale_by_sqrt_dim else 1.0)
        lead = q.shape[:-2]  # (b,) or (S, b)
        q, k, v = (t.flatten(0, -3) for t in (q, k, v))  # (tasks, L, E)
        dropout = self.config.dropout if self.training else 0.0
        dropped = (_dropped_pairs(lead[-1], q.shape[1], k.shape[1], dropout, generators, q.device) if dropout > 0
                   else None)
        return flash_attention(q, k, v, scale, dropout, dropped).unflatten(0, lead)  # (..., b, q, D)

    def _literal(self, shifted: Tensor, queries: Tensor, weights: AttentionWeights, keys_major: bool) -> Tensor:
        """Add back the per-query term that ``_shifted_scores`` drops: -||q||^2 for euclidean scores."""
        if self.config.score == "dot":
            return shifted
        q = _project(queries, weights.W_Q, weights.b_Q)  # (b, q, D)
        query_term = (q * q).sum(-1)  # (b, q)
        if self.config.scale_by_sqrt_dim:
            query_term = query_term / math.sqrt(self.d_model)
        query_term = query_term[:, None, :] if keys_major else query_term[..., None]
        return (shifted - query_term).clamp_max_(0)  # -||q - k||^2 <= 0 exactly

    def _shifted_scores(self, queries: Tensor, keys: Tensor, weights: AttentionWeights, keys_major: bool) -> Tensor:
        """Scores up to a per-query additive constant, (b, r, q) if ``keys_major`` else (b, q, r), with the
        projections folded onto the side with fewer tokens. Softmax, sparsemax and AHAT ignore a per-query
        constant; dot scores (linear attention) are exact."""
        euclidean = self.config.score == "euclidean"
        if keys_major:  # fold W_Q into the keys: q.k = z.(W_Q^T k) + b_Q.k
            k = _project(keys, weights.W_K, weights.b_K)  # (b, r, D)
            factor = 2.0 if euclidean else 1.0  # -||q - k||^2 = -||q||^2 + 2 q.k - ||k||^2
            key_term = -(k * k).sum(-1) if euclidean else torch.zeros_like(k[..., 0])  # (b, r)
            if weights.b_Q is not None:
                key_term = key_term + factor * (k @ weights.b_Q)
            scores = torch.baddbmm(key_term[..., None], *_folded_pair(factor * k @ weights.W_Q, queries))  # (b, r, q)
        elif euclidean:
            q = _project(queries, weights.W_Q, weights.b_Q)  # (b, q, D)
            k = _project(keys, weights.W_K, weights.b_K)  # (b, r, D)
            scores = torch.baddbmm(-(k * k).sum(-1)[:, None, :], 2 * q, k.transpose(1, 2))  # (b, q, r)
        else:  # fold W_K into the queries: q.(W_K z' + b_K) = (W_K^T q).z' + q.b_K
            q = _project(queries, weights.W_Q, weights.b_Q)  # (b, q, D)
            query_term = (q @ weights.b_K)[..., None] if weights.b_K is not None else q.new_zeros(q.shape[:2] + (1,))
            scores = torch.baddbmm(query_term, *_folded_pair(q @ weights.W_K, keys))  # (b, q, r)
        if self.config.scale_by_sqrt_dim:
            scores = scores / math.sqrt(self.d_model)
        return scores

    @staticmethod
    def _winners(scores: Tensor, keys_major: bool, in_place: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """The exact arg-max sets W of ``scores`` ((b, r, q) if ``keys_major`` else (b, q, r): 1 on each query's
        maximum over the keys), each set's size |set| (b, q) and, where |set| = 1, its key (b, q) (float: the sum of
        the set's indices, from one small product [1; 0, 1, ..., r - 1] W). ``in_place``: W overwrites ``scores``."""
        key_axis = 1 if keys_major else 2
        n_keys = scores.shape[key_axis]
        winners = argmax_sets(scores, key_axis, in_place)  # W: 1 on the arg-max sets, 0 elsewhere
        tally = torch.stack([torch.ones(n_keys, dtype=scores.dtype, device=scores.device),
                             torch.arange(n_keys, dtype=scores.dtype, device=scores.device)])  # (2, r)
        stats = tally @ winners if keys_major else (winners @ tally.T).transpose(1, 2)  # (b, 2, q): |set|, index sum
        return winners, stats[:, 0], stats[:, 1]

    @staticmethod
    def _single_winner(counts: Tensor, index_sums: Tensor, n_keys: int) -> Tensor | None:
        """Each query's winning key (b, q) int64 when every arg-max set is one key (no ties), else None."""
        exact_index = n_keys * torch.finfo(counts.dtype).eps <= 1  # indices < r are exact in the dtype
        if exact_index and bool((counts == 1).all()):
            return index_sums.long()
        return None

    def _hardmax(self, scores: Tensor, keys: Tensor, weights: AttentionWeights, keys_major: bool) -> Tensor:
        """AHAT's output, out_i = mean of (V z'_j + b_V) over the exact arg-max set of row i, with fewer passes than
        forming ``normalise``'s pattern (``_winners``). When every set is a single key (no ties: the assignment
        step) the output is a row gather of the values, not a (q x r) product; otherwise the pattern is W / |set|,
        AHAT's exact weights. Exact: the same arg-max sets and weights as ``normalise``, so the same output up to
        the order of float additions.

        ``scores`` (b, r, q) if ``keys_major`` else (b, q, r), overwritten by W outside autograd."""
        n_keys = scores.shape[1 if keys_major else 2]
        winners, counts, index_sums = self._winners(scores, keys_major, not scores.requires_grad)  # W, (b, q), (b, q)
        winner = self._single_winner(counts, index_sums, n_keys)  # (b, q) or None
        if winner is not None:
            values = _project(keys, weights.W_V, weights.b_V)  # (b, r, D)
            batch, width = values.shape[0], values.shape[-1]
            rows = winner + n_keys * torch.arange(batch, device=scores.device)[:, None]  # (b, q) flat
            return values.reshape(batch * n_keys, width).index_select(0, rows.flatten()).view(batch, -1, width)
        pattern = winners.div_(counts[:, None, :] if keys_major else counts[..., None])  # AHAT's weights
        return self._mix(_as_layout(pattern, keys_major), keys, weights)

    # ----- the labelled stream (``embedding.LabelledTokens``): exact inference without (b, n, D) buffers --------
    def labels_ready(self, weights) -> bool:
        """Whether this attention may run on a labelled stream: single-model weights, no hook on scores or pattern,
        no dropout drawn, no output norm, and the normaliser one of AHAT (gamma = inf) or linear (centre update)."""
        config = self.config
        return (weights.W_Q.dim() == 2 and not self._hooked() and not self._dropping()
                and config.output_norm == "none" and (config.hard or config.normaliser == "linear"))

    def assign(self, queries: LabelledTokens, keys: Tensor, weights: AttentionWeights) -> tuple[Tensor, Tensor]:
        """Hard (AHAT) attention of labelled queries (b, q, D) over keys (b, r, D), as a table and labels:
        out_i = table[labels_i]. The table (b, r + u, D) holds the values V z'_j + b_V, then per task one row per
        distinct tied arg-max set A (several keys), AHAT's mean of the values over A; labels_i is the winning key or
        the row of its tied set. The same scores, arg-max sets and weights as ``forward``'s hard path."""
        n_queries, n_keys = queries.shape[-2], keys.shape[-2]
        keys_major = self.keys_major(n_queries, n_keys)
        scores = self._shifted_scores(queries, keys, weights, keys_major)  # (b, r, q) or (b, q, r)
        winners, counts, index_sums = self._winners(scores, keys_major, not scores.requires_grad)  # W, (b, q), (b, q)
        values = _project(keys, weights.W_V, weights.b_V)  # (b, r, D)
        labels = self._single_winner(counts, index_sums, n_keys)  # (b, q) or None
        if labels is not None:
            return values, labels
        if n_keys * torch.finfo(counts.dtype).eps > 1:  # key indices not exact in the dtype: recover them
            labels = _as_layout(winners, keys_major).argmax(dim=-1)  # (b, q), right where |set| = 1
        else:
            labels = index_sums.long()  # (b, q), right where |set| = 1
        task, query = (counts > 1).nonzero(as_tuple=True)  # (T,), (T,): the tied queries
        sets = winners[task, :, query] if keys_major else winners[task, query, :]  # (T, r): 1 on each tied set
        distinct, row_of = torch.unique(torch.cat([task[:, None].to(sets.dtype), sets], dim=1), dim=0,
                                        return_inverse=True)  # (u, 1 + r) sorted by task, (T,)
        set_task = distinct[:, 0].long()  # (u,)
        per_task = torch.bincount(set_task, minlength=values.shape[0])  # (b,)
        first = torch.cumsum(per_task, 0) - per_task  # (b,): index of each task's first distinct set
        slot = torch.arange(len(distinct), device=values.device) - first[set_task]  # (u,): row among its task's sets
        weights_of_set = distinct[:, 1:] / distinct[:, 1:].sum(dim=1, keepdim=True)  # (u, r): AHAT's 1 / |set|
        means = (weights_of_set[:, None, :] @ values[set_task])[:, 0]  # (u, D)
        tied_rows = values.new_zeros((values.shape[0], int(per_task.max()), values.shape[-1]))  # (b, u_max, D)
        tied_rows[set_task, slot] = means
        labels[task, query] = n_keys + slot[row_of]
        return torch.cat([values, tied_rows], dim=1), labels  # (b, r + u_max, D), (b, q)

    def identity_table(self, tokens: LabelledTokens, weights: AttentionWeights) -> Tensor | None:
        """The identity self-attention's output on a labelled stream, out_i = V z_i + b_V, as a table (b, t, D)
        indexed by the stream's labels: exact when V reads no column of the stream's base (W_V[:, B] = 0), else None."""
        if bool(weights.W_V[:, tokens.base_columns].any()):
            return None
        return _project(tokens.table, weights.W_V, weights.b_V)  # (b, t, D)

    def mean_over_labels(self, queries: Tensor, keys: LabelledTokens, weights: AttentionWeights) -> Tensor | None:
        """Attention of queries (b, q, D) over a labelled stream (b, n, D) whose keys are scored by their labels
        only (W_K[:, B] = 0, so s_ij = G_{i, labels_j}, G (b, q, t)), as segment sums over the labels:

            linear  out_i = sum_m (G_im + e_i) / (sum_m' c_m' G_im' + e_i n) S_m     (e_i = 1 on an all-zero row)
            AHAT    out_i = sum_{m in A_i} S_m / sum_{m in A_i} c_m,  A_i = arg-max of G_i. over labels with c_m > 0

        with S_m = sum_{labels_j = m} (V z_j + b_V) = V (sum of the label's tokens) + c_m b_V and counts c_m: the
        normaliser's exact weights (AHAT's ties included) summed per label, no (q x n) pattern. (b, q, D), or None
        when the scores read the base (W_K[:, B] != 0)."""
        if bool(weights.W_K[:, keys.base_columns].any()):
            return None
        table_scores = self._shifted_scores(queries, keys.table, weights, keys_major=False)  # (b, q, t): G
        sums, counts = keys.label_sums()  # (b, t, D), (b, t)
        label_values = _project(sums, weights.W_V, None)  # (b, t, D): V sum_j z_j
        if weights.b_V is not None:
            label_values = label_values + counts[..., None] * weights.b_V
        if self.config.normaliser == "linear":
            total = table_scores @ counts[..., None]  # (b, q, 1): sum_j s_ij
            empty_row = (total == 0).to(total.dtype)  # an all-zero row becomes uniform (``normalise``)
            out = ((table_scores + empty_row) / (total + empty_row * keys.shape[1])) @ label_values  # (b, q, D)
        else:
            present = torch.where(counts[:, None, :] > 0, table_scores, torch.full_like(table_scores, -math.inf))
            members = argmax_sets(present, dim=-1)  # (b, q, t): 1 on A_i
            out = (members @ label_values) / (members @ counts[..., None])  # (b, q, D)
        return self.hook_out(out)

    def _mix(self, pattern: Tensor, keys: Tensor, weights: AttentionWeights) -> Tensor:
        """sum_j pattern_ij (V z'_j + b_V), associated to touch the fewer tokens: (b, q, r) x (b, r, D)."""
        n_queries, n_keys = pattern.shape[1], pattern.shape[2]
        if n_keys <= n_queries:
            return pattern @ _project(keys, weights.W_V, weights.b_V)
        support = _feature_support(weights.W_V)
        mixed = (pattern @ keys[..., support]) @ weights.W_V[:, support].T  # (b, q, D)
        if weights.b_V is not None:
            mixed = mixed + pattern.sum(-1, keepdim=True) * weights.b_V
        return mixed

    def _identity(self, tokens: Tensor, weights: AttentionWeights | StackedAttentionWeights, need_pattern: bool):
        """Self-attention at its gamma = inf value on distinct tokens: pattern I, out_i = V z_i + b_V.

        Nothing (n, n) is formed unless a hook sits on hook_scores or hook_pattern (or ``need_pattern``): then the
        scores S (0 on the diagonal, -inf elsewhere) go through hook_scores, the pattern is the gamma = inf pattern
        of the (possibly patched) scores, AHAT(S) = I, it goes through hook_pattern, and out = pattern V z: the
        literal computation, so patches of either (returned or in place) take effect. The (b, n, n) tensors are
        built for this call only (2 b n^2 entries; ``DenseIdentityPattern`` warns above 256 MiB)."""
        values = _project(tokens, weights.W_V, weights.b_V)  # (..., b, n, D)
        if not (self._hooked() or need_pattern):
            return self.hook_out(values), None
        lead, n = tokens.shape[:-2], tokens.shape[-2]
        size = 2 * math.prod(lead) * n * n * tokens.element_size()
        if size > DENSE_IDENTITY_WARN_BYTES:
            warnings.warn(f"a hook on an identity self-attention's scores or pattern materialises 2 x {tuple(lead)} x "
                          f"({n}, {n}) entries, {size / 2**30:.2f} GiB; hook only the hook points you need",
                          DenseIdentityPattern, stacklevel=2)
        identity_scores = torch.full((*lead, n, n), float("-inf"), dtype=tokens.dtype, device=tokens.device)
        identity_scores.diagonal(dim1=-2, dim2=-1).zero_()  # (..., b, n, n): 0 on the diagonal, -inf elsewhere
        scores = self.hook_scores(identity_scores)  # (..., b, n, n)
        pattern = self.hook_pattern(ahat(scores, dim=-1))  # (..., b, n, n): I unless the scores were patched
        return self.hook_out(pattern @ values), pattern
