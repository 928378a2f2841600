"""Slot-tied attention weights: a one-hot model that is exactly equivariant to the order of the centroid slots.

A one-hot model gives centroid slot j the code e_j. Permuting the slots by pi is the same as keeping the slots and
conjugating every weight by R = diag(I_d, P_pi) (P_pi permuting the k code features). A weight with R W R^T = W for
every pi, i.e. of the form

    W = [[A,      u 1^T          ],      A (d, d) data -> data,   u (d,) code -> data (equal columns),
         [1 v^T,  a I + b 1 1^T  ]]      v (d,) data -> code (equal rows),  a, b: code -> code,

with biases [beta; c 1] (beta (d,), one code bias c), makes every attention, and so the whole step, commute with slot
permutations: the output for permuted initial centroids is the permuted output, exactly. Learned one-hot models
(paper 2, §3) are not of this form and depend on slot identity (docs/learned_model.md, "Slot dependence");
``ModelConfig.slot_equivariant`` trains this form from the start.

The free parameters are A, u, v, a, b (+ beta, c) per matrix: for d = 32, k = 10, 1,092 numbers per matrix instead of
1,764. Initialisation draws the untied matrices exactly as ``AttentionWeights`` does (same random numbers) and
keeps their projection onto this form (the mean of each tied group), so a tied model started from a seed is the
projection of the untied model started from that seed.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from interp.model.attention import AttentionWeights

MATRICES = ("W_Q", "W_K", "W_V")
BIASES = ("b_Q", "b_K", "b_V")


def tie_matrix(data: Tensor, code_to_data: Tensor, data_to_code: Tensor, diagonal: Tensor,
               off_diagonal: Tensor, e: int) -> Tensor:
    """The (d + e, d + e) matrix [[A, u 1^T], [1 v^T, a I + b 1 1^T]] from A (d, d), u (d,), v (d,), a, b (scalars)."""
    ones = data.new_ones(e)  # (e,)
    code = off_diagonal * torch.outer(ones, ones) + (diagonal - off_diagonal) * torch.eye(e, dtype=data.dtype,
                                                                                           device=data.device)
    top = torch.cat([data, torch.outer(code_to_data, ones)], dim=1)  # (d, d + e)
    bottom = torch.cat([torch.outer(ones, data_to_code), code], dim=1)  # (e, d + e)
    return torch.cat([top, bottom], dim=0)  # (d + e, d + e)


def tie_bias(data: Tensor, code: Tensor, e: int) -> Tensor:
    """The (d + e,) bias [beta; c 1]."""
    return torch.cat([data, code.expand(e)])


class SlotTiedAttentionWeights(nn.Module):
    """Q, K, V (+ biases) of one attention of width d + k in the slot-tied form (module docstring).

    ``W_Q``, ``W_K``, ``W_V`` (D, D) and ``b_Q``, ``b_K``, ``b_V`` (D,) are assembled from the free parameters on each
    access (differentiable), so every reader of ``AttentionWeights`` reads these unchanged."""

    def __init__(self, d: int, e: int, bias: bool):
        super().__init__()
        self.d, self.e = d, e
        untied = AttentionWeights(d + e, bias)  # the same random draws as an untied model
        with torch.no_grad():
            for name in MATRICES:
                full = getattr(untied, name)  # (D, D)
                square = full[d:, d:]  # (e, e)
                diagonal = square.diagonal().mean()
                off_diagonal = (square.sum() - square.diagonal().sum()) / max(e * e - e, 1)
                self.register_parameter(f"{name}_data", nn.Parameter(full[:d, :d].clone()))  # (d, d)
                self.register_parameter(f"{name}_code_to_data", nn.Parameter(full[:d, d:].mean(dim=1)))  # (d,)
                self.register_parameter(f"{name}_data_to_code", nn.Parameter(full[d:, :d].mean(dim=0)))  # (d,)
                self.register_parameter(f"{name}_code_diagonal", nn.Parameter(diagonal.reshape(1)))  # (1,)
                self.register_parameter(f"{name}_code_off_diagonal", nn.Parameter(off_diagonal.reshape(1)))  # (1,)
            for name in BIASES:
                full = getattr(untied, name)  # (D,) or None
                if full is None:
                    self.register_parameter(f"{name}_data", None)
                    self.register_parameter(f"{name}_code", None)
                else:
                    self.register_parameter(f"{name}_data", nn.Parameter(full[:d].clone()))  # (d,)
                    self.register_parameter(f"{name}_code", nn.Parameter(full[d:].mean().reshape(1)))  # (1,)

    def _matrix(self, name: str) -> Tensor:
        return tie_matrix(getattr(self, f"{name}_data"), getattr(self, f"{name}_code_to_data"),
                          getattr(self, f"{name}_data_to_code"), getattr(self, f"{name}_code_diagonal")[0],
                          getattr(self, f"{name}_code_off_diagonal")[0], self.e)

    def _bias(self, name: str) -> Tensor | None:
        data = getattr(self, f"{name}_data")
        return None if data is None else tie_bias(data, getattr(self, f"{name}_code"), self.e)

    @property
    def W_Q(self) -> Tensor:  # (D, D)
        return self._matrix("W_Q")

    @property
    def W_K(self) -> Tensor:  # (D, D)
        return self._matrix("W_K")

    @property
    def W_V(self) -> Tensor:  # (D, D)
        return self._matrix("W_V")

    @property
    def b_Q(self) -> Tensor | None:  # (D,)
        return self._bias("b_Q")

    @property
    def b_K(self) -> Tensor | None:  # (D,)
        return self._bias("b_K")

    @property
    def b_V(self) -> Tensor | None:  # (D,)
        return self._bias("b_V")

    @property
    def W_QK(self) -> Tensor:
        """Q^T K (D, D), as ``AttentionWeights.W_QK``."""
        return self.W_Q.T @ self.W_K
