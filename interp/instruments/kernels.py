"""Effective kernels: each attention's Q^T K summarised as a metric and an inverse temperature in the units of the
tasks' coordinates (the unit cube [0, 1]^d of the training tasks).

A Euclidean attention scores a query token z against a key token z' by s = -||Q z + b_Q - K z' - b_K||^2 * scale
(scale = 1 / sqrt(D) when the attention scales, else 1) and weighs keys by normaliser(gamma s). When Q and K agree
on the data features (Q_d = K_d = M) the score of data x against data x' is -(x - x')^T G (x - x') * scale + ..., with
G = M^T M = Q_d^T K_d: the cross term of the score is 2 x^T (Q^T K)_{data} x' * scale. So

* ``metric_eigenvalues``: eigenvalues of gamma * scale * sym((Q^T K)_{data}), the inverse temperature along each
  eigen-direction of the data block (per unit of squared distance); the construction's attn_xc has G = I and gamma
  = inf. ``metric_anisotropy`` = largest / smallest positive eigenvalue.
* ``code_diagonal``, ``code_off_diagonal``: mean diagonal and off-diagonal entries of gamma * scale * (Q^T K) on the
  code features (query code rows x key code columns): how much more a query with code j scores a key holding code j.

Measured on tasks (``measure_kernels``), per attention: the slope beta of the scores (per query, minus their mean
over keys) regressed on minus the squared distance between the query's and the key's data (points: the input
coordinates; centroids: their coordinates), times gamma: the *effective inverse temperature*. ``fit_r2`` says how
much of the scores' variation the distance explains. From beta: the temperature T = 1 / beta (a soft k-means
temperature, squared-distance units) and the half-weight distance r_1/2 = sqrt(ln 2 / beta), at which a key's weight
falls to half that of a key at the query's own position. gamma = inf (hard attention, identity self-attentions) gives
beta = inf, T = 0, r_1/2 = 0. For a normaliser that is not a softmax of gamma s (linear attention) beta is reported
but T and r_1/2 are NaN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from interp._checks import InvalidInputType, check_points_centroids
from interp.model import KMeansTransformer

ATTENTIONS = ("attn_xc", "attn_xx", "attn_cx", "attn_cc")
STREAMS = {"attn_xc": ("points", "centroids"), "attn_xx": ("points", "points"), "attn_cx": ("centroids", "points"),
           "attn_cc": ("centroids", "centroids")}  # (queries, keys)


@dataclass(frozen=True)
class WeightKernel:
    """What an attention's weights say about its kernel (module docstring)."""

    attention: str
    metric_eigenvalues: tuple[float, ...]  # ascending, gamma * scale * eig(sym(Q^T K)[:d, :d])
    metric_mean: float  # mean eigenvalue: the isotropic inverse temperature of the cross term
    metric_anisotropy: float  # largest / smallest positive eigenvalue (NaN if fewer than two are positive)
    code_diagonal: float  # mean diagonal of gamma * scale * (Q^T K)[codes, codes] (NaN without codes)
    code_off_diagonal: float  # mean off-diagonal of the same block


@dataclass(frozen=True)
class MeasuredKernel:
    """An attention's scores on tasks regressed on minus the squared distance (module docstring)."""

    attention: str
    inverse_temperature: float  # gamma * slope of the per-query centred scores on -||query data - key data||^2
    fit_r2: float  # share of the centred scores' variance the distance explains
    temperature: float  # 1 / inverse_temperature (squared-distance units)
    half_weight_distance: float  # sqrt(ln 2 / inverse_temperature)


def _check_model(model: object) -> KMeansTransformer:
    if not isinstance(model, KMeansTransformer):
        raise InvalidInputType(f"model must be a KMeansTransformer, got {type(model).__name__}")
    return model


def _scale(model: KMeansTransformer, attention: str) -> float:
    config = getattr(model.config, attention)
    return 1.0 / math.sqrt(model.config.d_model) if config.scale_by_sqrt_dim else 1.0


def weight_kernels(model: KMeansTransformer) -> list[WeightKernel]:
    """``WeightKernel`` of every attention of ``model`` (its first layer's weights)."""
    model = _check_model(model)
    config, weights = model.config, model.layers[0]
    d, e = config.d, config.scratch_width
    rows = []
    for name in ATTENTIONS:
        attention = getattr(weights, name)
        gamma = getattr(config, name).gamma
        factor = gamma * _scale(model, name)
        query_key = attention.W_Q.detach().double().T @ attention.W_K.detach().double()  # (D, D)
        block = query_key[:d, :d]
        eigenvalues = torch.linalg.eigvalsh((block + block.T) / 2)  # (d,) ascending
        scaled = [_times(factor, value) for value in eigenvalues.tolist()]
        positive = [value for value in eigenvalues.tolist() if value > 0]
        anisotropy = max(positive) / min(positive) if len(positive) >= 2 else math.nan
        if e >= 2:
            codes = query_key[d:d + e, d:d + e]  # (e, e)
            diagonal = float(codes.diagonal().mean())
            off_diagonal = float((codes.sum() - codes.diagonal().sum()) / (e * e - e))
            code_diagonal, code_off_diagonal = _times(factor, diagonal), _times(factor, off_diagonal)
        elif e == 1:
            code_diagonal, code_off_diagonal = _times(factor, float(query_key[d, d])), math.nan
        else:
            code_diagonal = code_off_diagonal = math.nan
        rows.append(WeightKernel(name, tuple(scaled), _times(factor, float(eigenvalues.mean())), anisotropy,
                                 code_diagonal, code_off_diagonal))
    return rows


def _times(factor: float, value: float) -> float:
    """factor * value with inf * 0 = 0 (an infinite gamma on a zero entry)."""
    return 0.0 if value == 0 else factor * value


def _centred_regression(scores: Tensor, distances: Tensor) -> tuple[float, float]:
    """Slope and R^2 of scores (b, q, r) on -distances (b, q, r), both centred over keys per query (finite entries)."""
    x = -distances.double()
    y = scores.double()
    x = x - x.mean(-1, keepdim=True)
    y = y - y.mean(-1, keepdim=True)
    denominator = (x * x).sum()
    if denominator == 0:
        return math.nan, math.nan
    slope = (x * y).sum() / denominator
    total = (y * y).sum()
    r2 = 1 - ((y - slope * x) ** 2).sum() / total if total > 0 else torch.tensor(math.nan)
    return float(slope), float(r2)


def _measured(name: str, gamma: float, slope: float, r2: float, softmax: bool) -> MeasuredKernel:
    """beta = gamma * slope (inf for gamma = inf); without a softmax-type normaliser, beta = the slope, T = r = NaN."""
    if not softmax:
        return MeasuredKernel(name, slope, r2, math.nan, math.nan)
    beta = math.inf if math.isinf(gamma) else gamma * slope
    if not beta > 0:
        return MeasuredKernel(name, beta, r2, math.nan, math.nan)
    if math.isinf(beta):
        return MeasuredKernel(name, beta, r2, 0.0, 0.0)
    return MeasuredKernel(name, beta, r2, 1 / beta, math.sqrt(math.log(2) / beta))


@torch.no_grad()
def measure_kernels(model: KMeansTransformer, points: Tensor, centroids: Tensor) -> list[MeasuredKernel]:
    """``MeasuredKernel`` of every attention of the first step of ``model`` on points (b, n, d) from centroids
    (b, k, d), in eval mode. attn_xx forms (b, n, n) scores: keep b n^2 moderate."""
    model = _check_model(model)
    points, centroids = check_points_centroids(points, centroids, d=model.config.d)
    config = model.config
    names = [f"blocks.0.{name}.hook_scores" for name in ATTENTIONS if not getattr(config, name).identity]
    was_training = model.training
    model.eval()
    try:
        _, cache = model.run_with_cache(points, centroids, steps=1, names_filter=names, slot_order="fixed")
    finally:
        model.train(was_training)
    coordinates = {"points": points.double(), "centroids": centroids.double()}
    rows = []
    for name in ATTENTIONS:
        attention = getattr(config, name)
        softmax = attention.normaliser in ("softmax", "sparsemax")
        if attention.identity:  # the gamma = inf self-attention: each token keeps itself
            rows.append(_measured(name, math.inf, math.nan, math.nan, True))
            continue
        queries, keys = (coordinates[stream] for stream in STREAMS[name])
        distances = torch.cdist(queries, keys) ** 2  # (b, q, r)
        slope, r2 = _centred_regression(cache[f"blocks.0.{name}.hook_scores"], distances)
        rows.append(_measured(name, attention.gamma, slope, r2, softmax))
    return rows
