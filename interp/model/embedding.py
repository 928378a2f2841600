"""Token embeddings (paper 1, Thm 2.1, 2.2; paper 2, Def. 2.1; docs/constructions.md#embeddings).

Points become [x_i; 0_e] and centroids [c_j; code_j], code_j = e_j (one-hot, e = k), the LSB-first binary code
of j (e = ceil(log2 k)) or nothing (e = 0). With a norm slot both get one more feature, ||x||^2 or ||c||^2.
"""

from __future__ import annotations

import math

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
    """[c; code; (||c||^2)] for centroids (b, k, d) and codes (k, e), or per task (b, k, e) -> (b, k, D)."""
    parts = [centroids, codes.to(centroids).expand(centroids.shape[0], -1, -1)]
    if norm_slot:
        parts.append((centroids * centroids).sum(-1, keepdim=True))
    return torch.cat(parts, dim=-1)


def decode_assignments(scratch: Tensor, codes: Tensor) -> Tensor:
    """Labels (b, n) from the points' scratch features (b, n, e): the nearest centroid code (codes (k, e), or per
    task (b, k, e)), ties to the lowest index. One-hot: argmax y_i; binary: the integer whose LSB-first code is y_i."""
    codes = codes.to(scratch)  # (k, e) or (b, k, e)
    # ||y - code_j||^2 up to the per-point ||y||^2, laid out (b, k, n) so the reduction vectorises
    gap = (codes * codes).sum(-1)[..., :, None] - 2 * codes @ scratch.transpose(1, 2)  # (b, k, n)
    return first_argmin(gap, dim=1)
