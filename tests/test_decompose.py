"""The path decomposition of the centroid update is exact and names the right paths.

References are independent: Lloyd's update and the cluster means computed here from the points, and the one-layer
learned model's attentions re-derived here from its weights (softmax of Euclidean scores / sqrt(D))."""

import math

import pytest
import torch
from conftest import make_tasks

from interp import KMeansTransformer
from interp._checks import InvalidInput, InvalidInputType
from interp.constructions import lloyd_transformer, spherical_kmeans_transformer
from interp.instruments.decompose import decompose_update, path_statistics, pattern_patching, variance_share
from interp.model.checkpoint import load_model
from interp.model.config import learned_model_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def hard_means(points, centroids):
    """Cluster means of the nearest-centroid partition (b, k, d) and the member counts (b, k), from scratch."""
    labels = ((points[:, :, None, :] - centroids[:, None, :, :]) ** 2).sum(-1).argmin(-1)  # (b, n)
    one_hot = torch.nn.functional.one_hot(labels, centroids.shape[1]).double()  # (b, n, k)
    counts = one_hot.sum(1)  # (b, k)
    return (one_hot.transpose(1, 2) @ points) / counts.clamp_min(1)[..., None], counts


@pytest.mark.parametrize("update", ["linear", "hardmax"])
@pytest.mark.parametrize("k", [3, 5])
def test_construction_update_is_raw_points_through_the_scratch_pattern_plus_erase(update, k):
    points, init = make_tasks(n=128, d=4, k=k, batch=6, seed=3)
    means, counts = hard_means(points, init)
    assert bool((counts > 0).all())  # random-subset starts: every centroid has a member
    model = lloyd_transformer(4, k, 1, embedding="onehot", centroid_update=update)
    decomposition = decompose_update(model, points, init)
    parts = decomposition.parts
    assert set(parts) == {"attn_cx<-points", "attn_cx<-attn_xc", "attn_cx<-attn_xx", "attn_cc"}
    assert decomposition.residual < 1e-10
    assert float((decomposition.update - (means - init)).abs().max()) < 1e-10  # the update is Lloyd's
    assert float((parts["attn_cx<-points"] - means).abs().max()) < 1e-10  # raw data, averaged over the members
    assert float((parts["attn_cc"] + init).abs().max()) < 1e-10  # the erase
    for name in ("attn_cx<-attn_xc", "attn_cx<-attn_xx"):
        assert float(parts[name].abs().max()) == 0.0
    assert float((decomposition.lloyd_update - (means - init)).abs().max()) < 1e-10


def test_construction_pattern_is_read_from_what_attn_xc_wrote():
    points, init = make_tasks(n=96, d=4, k=4, batch=5, seed=8)
    model = lloyd_transformer(4, 4, 1, embedding="onehot")  # linear attention: an all-zero row is uniform
    rows = {row.keys: row for row in pattern_patching(model, points, init)}
    assert rows["points + attn_xc"].update_r2 == pytest.approx(1.0, abs=1e-10)
    assert rows["points + attn_xc + attn_xx"].update_r2 == pytest.approx(1.0, abs=1e-10)
    # without the scratch codes every score is 0: the pattern is uniform, the update the global mean minus c
    means, _ = hard_means(points, init)
    target = means - init
    global_move = points.mean(1, keepdim=True) - init
    expected = 1 - ((target - global_move) ** 2).sum() / ((target - target.mean()) ** 2).sum()
    assert rows["points"].update_r2 == pytest.approx(float(expected), abs=1e-10)
    assert rows["points"].update_r2 < 0.5


def test_stacked_construction_second_step_erases_in_the_scratch_only():
    points, init = make_tasks(n=100, d=4, k=3, batch=4, seed=5)
    model = lloyd_transformer(4, 3, 2, embedding="onehot")
    decomposition = decompose_update(model, points, init, step=1)
    assert decomposition.residual < 1e-10
    _, cache = model.run_with_cache(points, init, names_filter="blocks.1.attn_xx.hook_out")
    # attn_xx's output is minus the previous step's code (identity pattern, V = -scratch): nonzero, scratch only
    erase = cache["blocks.1.attn_xx.hook_out"]
    assert float(erase[..., 4:].abs().max()) == 1.0 and float(erase[..., :4].abs().max()) == 0.0
    assert float(decomposition.parts["attn_cx<-attn_xx"].abs().max()) == 0.0  # attn_cx's values read data only
    first = lloyd_transformer(4, 3, 1)(points, init).centroids
    means, _ = hard_means(points, first)
    assert float((decomposition.update - (means - first)).abs().max()) < 1e-10


def attention(queries, keys, weights, scale):
    """softmax_j(-||Q q_i + b_Q - K k_j - b_K||^2 * scale) and the values V k_j + b_V, from the weights."""
    q = queries @ weights.W_Q.T + weights.b_Q
    k = keys @ weights.W_K.T + weights.b_K
    scores = -((q[:, :, None, :] - k[:, None, :, :]) ** 2).sum(-1) * scale
    return torch.softmax(scores, dim=-1), keys @ weights.W_V.T + weights.b_V


def test_learned_model_parts_match_an_independent_forward():
    torch.manual_seed(0)
    d, k = 4, 3
    model = KMeansTransformer(learned_model_config(d, k)).double().eval()
    points, init = make_tasks(n=40, d=d, k=k, batch=3, seed=1)
    decomposition = decompose_update(model, points, init)
    layer, scale = model.layers[0], 1 / math.sqrt(model.config.d_model)
    with torch.no_grad():
        P = torch.cat([points, torch.zeros(3, 40, k, dtype=torch.float64)], -1)  # (b, n, D)
        Z = torch.cat([init, torch.eye(k, dtype=torch.float64).expand(3, k, k)], -1)  # (b, k, D)
        xc_pattern, xc_values = attention(P, Z, layer.attn_xc, scale)
        xx_pattern, xx_values = attention(P, P, layer.attn_xx, scale)
        XC, XX = xc_pattern @ xc_values, xx_pattern @ xx_values
        cx_pattern, _ = attention(Z, P + XC + XX, layer.attn_cx, scale)
        cc_pattern, cc_values = attention(Z, Z, layer.attn_cc, scale)
        V, b = layer.attn_cx.W_V.detach()[:d], layer.attn_cx.b_V.detach()[:d]
        expected = {"attn_cx<-points": cx_pattern @ P @ V.T, "attn_cx<-attn_xc": cx_pattern @ XC @ V.T,
                    "attn_cx<-attn_xx": cx_pattern @ XX @ V.T, "attn_cx<-bias": b.expand(3, k, d),
                    "attn_cc": (cc_pattern @ cc_values)[..., :d]}
        scratch_read = cx_pattern @ XC[..., d:] @ V[:, d:].T  # attn_cx's values reading attn_xc's scratch writes
    assert set(decomposition.parts) == set(expected)
    for name, value in expected.items():
        assert float((decomposition.parts[name] - value).abs().max()) < 1e-10, name
    assert decomposition.residual < 1e-10
    fine = decomposition.fine_parts
    assert float((fine["attn_cx<-attn_xc[data]"] + fine["attn_cx<-attn_xc[scratch]"]
                  - expected["attn_cx<-attn_xc"]).abs().max()) < 1e-10
    assert float((fine["attn_cx<-attn_xc[scratch]"] - scratch_read).abs().max()) < 1e-10


def test_shipped_model_parts_sum_in_float32():
    model = load_model("main-onehot")
    points, init = make_tasks(n=128, d=32, k=10, batch=4, seed=2, dtype=torch.float32)
    decomposition = decompose_update(model, points, init)
    assert decomposition.residual < 1e-5
    shares = path_statistics(decomposition.parts, decomposition.update, decomposition.lloyd_update)
    assert sum(row.variance_share for row in shares) == pytest.approx(1.0, abs=1e-6)  # the float32 sum error


def test_path_statistics_by_hand():
    """total t = (4, 0, 0, 0) (mean 1, centred (3, -1, -1, -1), squared norm 12) split into a = (3, 1, 0, 0) (mean 1,
    centred (2, 0, -1, -1)) and b = t - a = (1, -1, 0, 0); Lloyd's direction L = (1, 0, 0, 0):
    share(a) = <(2, 0, -1, -1), (3, -1, -1, -1)> / 12 = 8/12, share(b) = 4/12, own(a) = 6/12, own(b) = 2/12,
    cos(a, L) = 3 / sqrt(10) and cos(b, L) = 1 / sqrt(2) (cosines of the raw vectors); a constant part has share 0."""
    as_tensor = lambda *values: torch.tensor(values, dtype=torch.float64).reshape(1, 2, 2)  # noqa: E731 (b, k, d)
    total, a, b = as_tensor(4, 0, 0, 0), as_tensor(3, 1, 0, 0), as_tensor(1, -1, 0, 0)
    lloyd_direction = as_tensor(1, 0, 0, 0)
    assert variance_share(a, total) == pytest.approx(2 / 3, abs=1e-15)
    assert variance_share(b, total) == pytest.approx(1 / 3, abs=1e-15)
    assert variance_share(as_tensor(5, 5, 5, 5), total) == 0.0
    first, second = path_statistics({"a": a, "b": b}, total, lloyd_direction)
    assert (first.variance_share, first.own_variance, first.cosine_lloyd) == pytest.approx(
        (2 / 3, 1 / 2, 3 / 10 ** 0.5), abs=1e-15)
    assert (second.variance_share, second.own_variance, second.cosine_lloyd) == pytest.approx(
        (1 / 3, 1 / 6, 1 / 2 ** 0.5), abs=1e-15)


def test_refuses_what_has_no_exact_decomposition():
    points, init = make_tasks(n=30, d=3, k=3, batch=2, seed=1)
    with pytest.raises(InvalidInput, match="not linear"):
        decompose_update(spherical_kmeans_transformer(3, 3, 1), points, init)
    with pytest.raises(InvalidInputType):
        decompose_update("lloyd", points, init)
    with pytest.raises(InvalidInput):
        decompose_update(lloyd_transformer(3, 3, 1), points, init, step=-1)
