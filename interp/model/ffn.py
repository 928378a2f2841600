"""Residual ReLU^2 ("ReQU") feed-forward block (paper 1, Thm 2.2): FFN(z) = W_out ReLU(W_in z + b_in)^2 + b_out.

With weights stacked over S models (``StackedFFNWeights``) tokens carry a leading model axis, (S, b, t, D).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint


class FFNWeights(nn.Module):
    """W_in (H, D), b_in (H,), W_out (D, H), b_out (D,) in paper orientation."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.W_in = nn.Parameter(torch.empty(hidden, d_model))  # (H, D)
        self.b_in = nn.Parameter(torch.zeros(hidden))  # (H,)
        self.W_out = nn.Parameter(torch.empty(d_model, hidden))  # (D, H)
        self.b_out = nn.Parameter(torch.zeros(d_model))  # (D,)
        nn.init.kaiming_uniform_(self.W_in, a=math.sqrt(5))
        nn.init.kaiming_uniform_(self.W_out, a=math.sqrt(5))


@dataclass(frozen=True)
class StackedFFNWeights:
    """FFN weights of S models on a leading model axis: W_in (S, H, D), b_in (S, H), W_out (S, D, H), b_out (S, D)."""

    W_in: Tensor  # (S, H, D)
    b_in: Tensor  # (S, H)
    W_out: Tensor  # (S, D, H)
    b_out: Tensor  # (S, D)

    @classmethod
    def stack(cls, weights: Sequence[FFNWeights]) -> "StackedFFNWeights":
        """Every slot stacked over ``weights`` (differentiable)."""
        return cls(*(torch.stack([getattr(w, slot) for w in weights]) for slot in ("W_in", "b_in", "W_out", "b_out")))


def _affine(tokens: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """Z W^T + b: tokens (b, t, in), weight (out, in), bias (out,) -> (b, t, out); with a model axis tokens
    (S, b, t, in), weight (S, out, in), bias (S, out) -> (S, b, t, out), one product per model."""
    if weight.dim() == 2:
        return tokens @ weight.T + bias
    flat = tokens.flatten(1, 2)  # (S, b*t, in)
    out = torch.baddbmm(bias[:, None, :], flat, weight.transpose(-1, -2))  # (S, b*t, out)
    return out.view(tokens.shape[:-1] + (weight.shape[-2],))


class FFN(nn.Module):
    """Hook points and computation of one FFN application; returns what it adds to the stream."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_hidden = HookPoint()  # (b, tokens, H): ReLU(W_in z + b_in)^2
        self.hook_out = HookPoint()  # (b, tokens, D): added to the residual stream

    def forward(self, tokens: Tensor, weights: FFNWeights | StackedFFNWeights) -> Tensor:
        """FFN(z) for tokens (b, t, D) -> (b, t, D), or (S, b, t, D) with stacked weights."""
        hidden = self.hook_hidden(torch.relu(_affine(tokens, weights.W_in, weights.b_in)) ** 2)  # (..., b, t, H)
        return self.hook_out(_affine(hidden, weights.W_out, weights.b_out))  # (..., b, t, D)
