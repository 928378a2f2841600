"""Effective kernels: the inverse temperature of known kernels (soft k-means, a hand-set Gaussian smoother, the exact
construction), the half-weight distance read back from the model's own attention pattern, and the metric's spectrum."""

import math

import pytest
import torch
from conftest import make_tasks

from interp import KMeansTransformer, ModelConfig
from interp.constructions import lloyd_transformer, soft_kmeans_transformer
from interp.instruments.kernels import measure_kernels, weight_kernels
from interp.model.config import AttentionConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def by_attention(rows):
    return {row.attention: row for row in rows}


def smoother(diagonal: list[float]) -> KMeansTransformer:
    """d = 3 without codes, softmax gamma = 1 with 1/sqrt(D): attn_xx and attn_xc have Q = K = diag(diagonal), every
    other weight 0."""
    attention = AttentionConfig(score="euclidean", normaliser="softmax", gamma=1.0, scale_by_sqrt_dim=True, bias=False)
    config = ModelConfig(d=3, k=2, embedding="none", attn_xc=attention, attn_xx=attention, attn_cx=attention,
                         attn_cc=attention)
    model = KMeansTransformer(config).double().eval()
    with torch.no_grad():
        for name in ("attn_xc", "attn_xx", "attn_cx", "attn_cc"):
            weights = getattr(model.layers[0], name)
            for matrix in (weights.W_Q, weights.W_K, weights.W_V):
                matrix.zero_()
        for name in ("attn_xc", "attn_xx"):
            weights = getattr(model.layers[0], name)
            weights.W_Q.copy_(torch.diag(torch.tensor(diagonal, dtype=torch.float64)))
            weights.W_K.copy_(torch.diag(torch.tensor(diagonal, dtype=torch.float64)))
    return model


def test_soft_kmeans_construction_has_its_temperature():
    beta = 7.0
    model = soft_kmeans_transformer(4, 3, 1, beta=beta)
    points, init = make_tasks(n=60, d=4, k=3, batch=3, seed=1)
    measured = by_attention(measure_kernels(model, points, init))["attn_xc"]
    assert measured.inverse_temperature == pytest.approx(beta, rel=1e-9)
    assert measured.fit_r2 == pytest.approx(1.0, abs=1e-9)
    assert measured.temperature == pytest.approx(1 / beta, rel=1e-9)
    assert measured.half_weight_distance == pytest.approx(math.sqrt(math.log(2) / beta), rel=1e-9)
    weights = by_attention(weight_kernels(model))["attn_xc"]
    assert weights.metric_eigenvalues == pytest.approx((beta,) * 4, rel=1e-12) and weights.metric_anisotropy == 1.0


def test_half_weight_distance_is_where_the_models_weight_halves():
    scale = 1.5
    model = smoother([scale] * 3)
    points, init = make_tasks(n=50, d=3, k=2, batch=2, seed=2)
    rows = by_attention(measure_kernels(model, points, init))
    beta = scale ** 2 / math.sqrt(3)  # -||s x - s x'||^2 / sqrt(D)
    assert rows["attn_xx"].inverse_temperature == pytest.approx(beta, rel=1e-9)
    assert rows["attn_xx"].fit_r2 == pytest.approx(1.0, abs=1e-9)
    radius = rows["attn_xx"].half_weight_distance
    # three points: the query, a copy of it, and one at the half-weight distance; the model's own pattern
    probe = torch.tensor([[[0.2, 0.3, 0.4], [0.2, 0.3, 0.4], [0.2 + radius, 0.3, 0.4]]], dtype=torch.float64)
    _, cache = model.run_with_cache(probe, probe[:, :2].clone(), steps=1, names_filter="blocks.0.attn_xx.hook_pattern")
    pattern = cache["blocks.0.attn_xx.hook_pattern"][0, 0]  # weights of the first query over the three keys
    assert float(pattern[2] / pattern[1]) == pytest.approx(0.5, rel=1e-9)


def test_metric_spectrum_of_an_anisotropic_kernel():
    model = smoother([1.0, 2.0, 3.0])
    weights = by_attention(weight_kernels(model))
    expected = tuple(value / math.sqrt(3) for value in (1.0, 4.0, 9.0))
    assert weights["attn_xx"].metric_eigenvalues == pytest.approx(expected, rel=1e-12)
    assert weights["attn_xx"].metric_anisotropy == pytest.approx(9.0, rel=1e-12)
    assert weights["attn_xx"].metric_mean == pytest.approx(sum(expected) / 3, rel=1e-12)
    assert weights["attn_cx"].metric_eigenvalues == (0.0, 0.0, 0.0) and math.isnan(weights["attn_cx"].code_diagonal)


def test_construction_is_hard_where_it_assigns():
    model = lloyd_transformer(4, 3, 1)
    points, init = make_tasks(n=60, d=4, k=3, batch=3, seed=3)
    rows = by_attention(measure_kernels(model, points, init))
    assert math.isinf(rows["attn_xc"].inverse_temperature) and rows["attn_xc"].temperature == 0.0
    assert rows["attn_xc"].fit_r2 == pytest.approx(1.0, abs=1e-12)  # its scores are -||x - c||^2
    assert math.isinf(rows["attn_xx"].inverse_temperature) and rows["attn_xx"].half_weight_distance == 0.0
    assert math.isnan(rows["attn_cx"].temperature)  # linear attention on the codes: no softmax temperature
    weights = by_attention(weight_kernels(model))
    assert weights["attn_xc"].metric_eigenvalues == (math.inf,) * 4
    assert math.isinf(weights["attn_cx"].code_diagonal) and weights["attn_cx"].code_off_diagonal == 0.0
