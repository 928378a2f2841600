"""Token embeddings (paper 1, Thm 2.1, 2.2; paper 2, Def. 2.1; docs/constructions.md#embeddings).

Points become [x_i; 0_e] and centroids [c_j; code_j], code_j = e_j (one-hot, e = k), the LSB-first binary code
of j (e = ceil(log2 k)) or nothing (e = 0). With a norm slot both get one more feature, ||x||^2 or ||c||^2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from interp._checks import InvalidInput
from interp.primitives import first_argmin


def centroid_codes(k: int, embedding: str, dtype: torch.dtype = torch.float64) -> Tensor:
    """The scratch codes of the k centroids, (k, e): I_k, B_k^T (LSB first) or an empty (k, 0)."""
    if embedding == "onehot":
        return torch.eye(k, dtype=dtype)
    if embedding == "binary":
        width = max(1, math.ceil(math.log2(k)))
        index = torch.arange(k)[:, None]  # (k, 1)
        bits = (index >> torch.arange(width)[None, :]) & 1  # (k, width), bit b of j, LSB first
        return bits.to(dtype)
    if embedding == "none":
        return torch.zeros((k, 0), dtype=dtype)
    raise InvalidInput(f"embedding must be 'onehot', 'binary' or 'none', got {embedding!r}")


def embed_points(points: Tensor, scratch_width: int, norm_slot: bool) -> Tensor:
    """[x; 0_e; (||x||^2)] for points (b, n, d) -> (b, n, D)."""
    parts = [points, points.new_zeros(points.shape[:2] + (scratch_width,))]
    if norm_slot:
        parts.append((points * points).sum(-1, keepdim=True))
    return torch.cat(parts, dim=-1)


def embed_centroids(centroids: Tensor, codes: Tensor, norm_slot: bool) -> Tensor:
    """[c; code; (||c||^2)] for centroids (b, k, d) and codes (k, e) -> (b, k, D)."""
    parts = [centroids, codes.to(centroids).expand(centroids.shape[0], -1, -1)]
    if norm_slot:
        parts.append((centroids * centroids).sum(-1, keepdim=True))
    return torch.cat(parts, dim=-1)


def decode_assignments(scratch: Tensor, codes: Tensor) -> Tensor:
    """Labels (b, n) from the points' scratch features (b, n, e): the nearest centroid code, ties to the
    lowest index. One-hot: argmax y_i; binary: the integer whose LSB-first code is y_i."""
    codes = codes.to(scratch)  # (k, e)
    # ||y - code_j||^2 up to the per-point ||y||^2, laid out (b, k, n) so the reduction vectorises
    gap = (codes * codes).sum(-1)[None, :, None] - 2 * codes @ scratch.transpose(1, 2)  # (b, k, n)
    return first_argmin(gap, dim=1)


@dataclass(frozen=True)
class LabelledTokens:
    """A token stream held factored, never formed as (b, n, D): token i is z_i = [x_i on ``base_columns``] +
    table[labels_i], where the table (b, t, D) is zero on ``base_columns`` and x_i is the row i of ``base``.

    The points stream of an exact construction has this form at every layer: [x_i; code of i's centre]
    (``interp.model.block``, the labelled step). Every consumer reads only what it needs: a range of columns
    (``tokens[..., columns]``), per-label sums (``label_sums``), decoded labels (``decode``), or the whole stream
    (``materialise``, the same numbers as the literal (b, n, D) stream).

    base (b, n, |B|), table (b, t, D), labels (b, n) int64 in [0, t)."""

    base: Tensor  # (b, n, |B|)
    base_columns: slice  # B, a contiguous range of the D features
    table: Tensor  # (b, t, D), zero on B
    labels: Tensor  # (b, n) int64

    @classmethod
    def embedded(cls, points: Tensor, width: int) -> "LabelledTokens":
        """``embed_points`` without a norm slot, [x; 0_e] (b, n, width), as one zero table row for every point."""
        batch, n, d = points.shape
        table = points.new_zeros((batch, 1, width))  # (b, 1, D)
        labels = torch.zeros((batch, n), dtype=torch.int64, device=points.device)  # (b, n)
        return cls(points, slice(0, d), table, labels)

    @property
    def shape(self) -> torch.Size:
        """(b, n, D)"""
        return torch.Size((*self.labels.shape, self.table.shape[-1]))

    @property
    def dtype(self) -> torch.dtype:
        return self.base.dtype

    @property
    def device(self) -> torch.device:
        return self.base.device

    def _gather(self, table: Tensor) -> Tensor:
        """table[labels_i] per task: table (b, t, m) -> (b, n, m), one row gather."""
        batch, rows, width = table.shape
        flat = (self.labels + rows * torch.arange(batch, device=table.device)[:, None]).flatten()  # (b n,)
        return table.reshape(batch * rows, width).index_select(0, flat).view(batch, -1, width)

    def columns(self, columns: slice) -> Tensor:
        """The stream's features ``columns`` (b, n, m): a view of ``base`` inside B, a gather of the table outside."""
        width = self.table.shape[-1]
        start, stop, step = columns.indices(width)
        base_start, base_stop, _ = self.base_columns.indices(width)
        if step == 1 and base_start <= start and stop <= base_stop:
            return self.base[..., start - base_start : stop - base_start]
        if step == 1 and (stop <= base_start or start >= base_stop):
            return self._gather(self.table[..., start:stop])
        return self.materialise()[..., columns]

    def __getitem__(self, index) -> Tensor:
        """``tokens[..., columns]`` for a slice of columns (the only indexing the attention uses)."""
        if not (isinstance(index, tuple) and len(index) == 2 and index[0] is Ellipsis and isinstance(index[1], slice)):
            raise TypeError(f"LabelledTokens takes [..., columns], got {index!r}")
        return self.columns(index[1])

    def materialise(self) -> Tensor:
        """The stream (b, n, D): z_i = table[labels_i] with x_i written into B (the table is zero there)."""
        tokens = self._gather(self.table)  # (b, n, D)
        tokens[..., self.base_columns] = self.base
        return tokens

    def label_sums(self) -> tuple[Tensor, Tensor]:
        """Per label m: the sum of its tokens, sum_{i: labels_i = m} z_i (b, t, D) = [sum of x_i on B; c_m table_m],
        and the count c_m (b, t), by one scatter-add over the points (a segment sum, no (t x n) product)."""
        batch, rows, width = self.table.shape
        counts = torch.zeros((batch, rows), dtype=self.dtype, device=self.device)  # (b, t)
        counts.scatter_add_(1, self.labels, torch.ones_like(self.labels, dtype=self.dtype))
        sums = self.table * counts[..., None]  # (b, t, D): c_m table_m, zero on B
        base_sums = torch.zeros((batch, rows, self.base.shape[-1]), dtype=self.dtype, device=self.device)  # (b, t, |B|)
        base_sums.scatter_add_(1, self.labels[..., None].expand(-1, -1, self.base.shape[-1]), self.base)
        sums[..., self.base_columns] = base_sums
        return sums, counts

    def decode(self, scratch: slice, codes: Tensor) -> Tensor:
        """``decode_assignments`` of the features ``scratch`` (outside B), per table row then gathered: (b, n)."""
        per_row = decode_assignments(self.table[..., scratch], codes)  # (b, t)
        return torch.gather(per_row, 1, self.labels)
