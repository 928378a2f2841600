"""Residual ReLU^2 ("ReQU") feed-forward block (paper 1, Thm 2.2): FFN(z) = W_out ReLU(W_in z + b_in)^2 + b_out."""

from __future__ import annotations

import math

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


class FFN(nn.Module):
    """Hook points and computation of one FFN application; returns what it adds to the stream."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_hidden = HookPoint()  # (b, tokens, H): ReLU(W_in z + b_in)^2
        self.hook_out = HookPoint()  # (b, tokens, D): added to the residual stream

    def forward(self, tokens: Tensor, weights: FFNWeights) -> Tensor:
        """FFN(z) for tokens (b, t, D) -> (b, t, D)."""
        hidden = self.hook_hidden(torch.relu(tokens @ weights.W_in.T + weights.b_in) ** 2)  # (b, t, H)
        return self.hook_out(hidden @ weights.W_out.T + weights.b_out)  # (b, t, D)
