"""Token projections Z W^T + b, contracted over the features a weight matrix reads (the reference model and its
kernels share them).

Tokens are rows; a paper matrix W acts on a token z as W z, so projections are Z W^T. Hand-set weights read few
features (the constructions' W_Q reads d of D), so a contraction skips the features outside the matrix's support:
exact (it multiplies zeros) and free for dense learned weights.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import Tensor

from interp.primitives import random_device

# supports already computed for some weight matrices (``known_supports``): id -> (the matrix itself, its support)
_KNOWN_SUPPORTS: ContextVar[Mapping[int, tuple[Tensor, slice]] | None] = ContextVar("interp_known_supports",
                                                                                     default=None)


@contextmanager
def known_supports(supports: Mapping[int, tuple[Tensor, slice]]) -> Iterator[None]:
    """Within the block, ``feature_support`` of a matrix in ``supports`` (id -> (matrix, its support), as
    ``supports_of`` makes it) is read from it instead of computed (a sync and a few small ops each time). Only the
    very tensor is matched (``is``), and the mapping keeps it alive, so an id cannot stand for another tensor."""
    token = _KNOWN_SUPPORTS.set(supports)
    try:
        yield
    finally:
        _KNOWN_SUPPORTS.reset(token)


def supports_of(matrices) -> dict[int, tuple[Tensor, slice]]:
    """``feature_support`` of each of ``matrices`` (None entries skipped), for ``known_supports``: the nonzero
    features of every matrix that needs no grad read in one sync (one ``tolist``), not one per matrix."""
    present = [matrix for matrix in matrices if matrix is not None]
    frozen = [matrix for matrix in present if not matrix.requires_grad and matrix.numel() > 0]  # read together
    together = bool(frozen) and len({(matrix.shape[-1], matrix.device) for matrix in frozen}) == 1
    supports = {id(matrix): (matrix, feature_support(matrix)) for matrix in present
                if not (together and any(matrix is other for other in frozen))}
    if together:
        read = torch.stack([(matrix != 0).reshape(-1, matrix.shape[-1]).any(dim=0) for matrix in frozen])  # (m, D)
        for matrix, features in zip(frozen, read.tolist()):
            supports[id(matrix)] = (matrix, _support_slice(features))
    return supports


def feature_support(matrix: Tensor) -> slice:
    """The smallest contiguous range of features (last axis) that holds every nonzero of ``matrix``; the whole
    range for a tensor that requires grad."""
    known = _KNOWN_SUPPORTS.get()
    if known is not None:
        entry = known.get(id(matrix))
        if entry is not None and entry[0] is matrix:
            return entry[1]
    if matrix.requires_grad:
        return slice(None)
    return _support_slice((matrix != 0).reshape(-1, matrix.shape[-1]).any(dim=0).tolist())


def _support_slice(features: list[bool]) -> slice:
    """The smallest slice holding every True of ``features`` (whether each feature is read); slice(None) for the
    whole range, slice(0, 1) when none is read (an all-zero matrix contracts one zero feature)."""
    read = [index for index, used in enumerate(features) if used]
    if not read:
        return slice(0, 1)
    low, high = read[0], read[-1] + 1
    return slice(None) if (low, high) == (0, len(features)) else slice(low, high)


def contract(tokens: Tensor, matrix: Tensor) -> Tensor:
    """tokens (b, t, D) times matrix^T, matrix (m, D) -> (b, t, m), over the features ``matrix`` reads."""
    support = feature_support(matrix)
    return tokens[..., support] @ matrix[..., support].transpose(-1, -2)


def project(tokens: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """Z W^T + b: tokens (b, t, D), weight (D, D), bias (D,) or None -> (b, t, D)."""
    projected = contract(tokens, weight)
    return projected if bias is None else projected + bias


def as_layout(tensor: Tensor, keys_major: bool) -> Tensor:
    """Swap (b, r, q) <-> (b, q, r) when the work is laid out keys-major (a view)."""
    return tensor.transpose(1, 2) if keys_major else tensor


def folded_pair(folded: Tensor, tokens: Tensor, matrix: Tensor) -> tuple[Tensor, Tensor]:
    """(folded[..., S], tokens[..., S]^T) for ``folded`` = Y ``matrix`` (b, q, D), S the features ``matrix`` reads
    (``feature_support``; folded is zero outside them, and the support of a layer's weights is known once per
    forward where the labelled step runs, while folded's own would cost a sync at every call)."""
    support = feature_support(matrix)
    return folded[..., support], tokens[..., support].transpose(1, 2)


def keep_mask(shape: tuple[int, ...], like: Tensor, p: float, generator: torch.Generator | None) -> Tensor:
    """Dropout's keep mask of ``shape``, i.i.d. Bernoulli(1 - p) / (1 - p), drawn as F.dropout draws it."""
    draws = torch.empty(shape, dtype=like.dtype, device=random_device(generator, like.device))
    return draws.bernoulli_(1 - p, generator=generator).div_(1 - p).to(like.device)
