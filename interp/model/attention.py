"""Euclidean / dot-product attention with one normaliser argument (SPEC §2.3 "Attention", §2.6, §5).

Tokens are rows. A paper matrix W acts on a token z as W z, so projections are Z W^T. For queries Z (b, q, D)
and keys Z' (b, r, D):

    scores  s_ij = -||Q z_i - K z'_j||^2 / sqrt(D)^[scale]     (euclidean)
                 =  (Q z_i + b_Q)^T (K z'_j + b_K) / sqrt(D)^[scale]   (dot)
    pattern      = normaliser(gamma * s) over keys j; gamma = inf: AHAT (uniform on the exact arg-max set)
    out_i        = sum_j pattern_ij (V z'_j + b_V)

``hook_scores`` holds s before gamma, ``hook_pattern`` the weights. When nothing is hooked on them the
module takes a fused path that never forms what it does not need (the identity self-attention skips its
(n, n) pattern entirely); hooking either forces the literal path, so patches always take effect.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from entmax import sparsemax
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from interp.model.config import AttentionConfig


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
        """PyTorch's nn.Linear default initialisation, as the authors' code (SPEC §2.7.1)."""
        bound = 1.0 / math.sqrt(self.W_Q.shape[1])
        for weight in (self.W_Q, self.W_K, self.W_V):
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
        for b in (self.b_Q, self.b_K, self.b_V):
            if b is not None:
                nn.init.uniform_(b, -bound, bound)

    @property
    def W_QK(self) -> Tensor:
        """Q^T K (D, D): the bilinear form of the dot score, compared with the constructions' (SPEC §2.7.5)."""
        return self.W_Q.T @ self.W_K


def _project(tokens: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """Z W^T + b for tokens (b, t, D) -> (b, t, D)."""
    projected = tokens @ weight.T
    return projected if bias is None else projected + bias


def ahat(scores: Tensor) -> Tensor:
    """Averaging hardmax over the last axis: 1/|argmax set| on the exact arg-max set, 0 elsewhere."""
    is_max = scores == scores.amax(dim=-1, keepdim=True)
    is_max = is_max.to(scores.dtype)
    return is_max / is_max.sum(dim=-1, keepdim=True)


def normalise(scores: Tensor, config: AttentionConfig) -> Tensor:
    """Attention weights from scores (..., keys) under ``config``'s normaliser and gamma."""
    if config.normaliser == "linear":
        total = scores.sum(dim=-1, keepdim=True)
        uniform = torch.full_like(scores, 1.0 / scores.shape[-1])
        return torch.where(total != 0, scores / torch.where(total != 0, total, 1.0), uniform)
    if config.hard:
        return ahat(scores)
    if config.normaliser == "softmax":
        return torch.softmax(config.gamma * scores, dim=-1)  # subtracts the row max internally
    return sparsemax(config.gamma * scores, dim=-1)


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

    def scores(self, queries: Tensor, keys: Tensor, weights: AttentionWeights) -> Tensor:
        """Literal scores (b, q, r) before gamma."""
        q = _project(queries, weights.W_Q, weights.b_Q)  # (b, q, D)
        k = _project(keys, weights.W_K, weights.b_K)  # (b, r, D)
        if self.config.score == "dot":
            scores = q @ k.transpose(1, 2)  # (b, q, r)
        else:
            cross = q @ k.transpose(1, 2)  # (b, q, r)
            sq = (q * q).sum(-1)[..., None] - 2 * cross + (k * k).sum(-1)[:, None, :]
            scores = -sq.clamp_min(0)
        if self.config.scale_by_sqrt_dim:
            scores = scores / math.sqrt(self.d_model)
        return scores

    def forward(self, queries: Tensor, keys: Tensor, weights: AttentionWeights, need_pattern: bool = False):
        """Attention output (b, q, D); with ``need_pattern`` also the pattern (b, q, r), else None."""
        config = self.config
        if config.identity:
            return self._identity(queries, weights, need_pattern)
        scores = self.hook_scores(self.scores(queries, keys, weights))  # (b, q, r)
        pattern = self.hook_pattern(normalise(scores, config))  # (b, q, r)
        if config.dropout > 0:
            pattern_used = F.dropout(pattern, p=config.dropout, training=self.training)
        else:
            pattern_used = pattern
        out = self._mix(pattern_used, keys, weights)  # (b, q, D)
        return self.hook_out(out), pattern

    def _mix(self, pattern: Tensor, keys: Tensor, weights: AttentionWeights) -> Tensor:
        """sum_j pattern_ij (V z'_j + b_V), associated to touch the fewer tokens: (b, q, r) x (b, r, D)."""
        n_queries, n_keys = pattern.shape[1], pattern.shape[2]
        if n_keys <= n_queries:
            return pattern @ _project(keys, weights.W_V, weights.b_V)
        mixed = (pattern @ keys) @ weights.W_V.T  # (b, q, D)
        if weights.b_V is not None:
            mixed = mixed + pattern.sum(-1, keepdim=True) * weights.b_V
        return mixed

    def _identity(self, tokens: Tensor, weights: AttentionWeights, need_pattern: bool):
        """Self-attention at its gamma = inf value on distinct tokens: pattern I, out_i = V z_i + b_V."""
        values = _project(tokens, weights.W_V, weights.b_V)  # (b, n, D)
        if not (self._hooked() or need_pattern):
            return self.hook_out(values), None
        batch, n = tokens.shape[:2]
        eye = torch.eye(n, dtype=tokens.dtype, device=tokens.device)  # (n, n)
        scores_2d = torch.where(eye > 0, 0.0, float("-inf")).to(tokens.dtype)  # (n, n): 0 on the diagonal
        self.hook_scores(scores_2d.expand(batch, n, n))  # (b, n, n) view, no copy
        identity_pattern = eye.expand(batch, n, n)  # (b, n, n) view, no copy
        pattern = self.hook_pattern(identity_pattern)
        out = values if pattern is identity_pattern else pattern @ values
        return self.hook_out(out), pattern
