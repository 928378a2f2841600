"""Weight comparison (interp/instruments/weights.py): learned vs construction Q^T K and OV; the heatmaps and attention
maps drawn from them (interp/report/plots.py)."""

import math

import plotly.graph_objects as go
import pytest
import torch
from conftest import make_tasks
from transformer_lens.FactoredMatrix import FactoredMatrix

from interp._checks import InvalidInput
from interp.instruments.weights import (
    ATTENTIONS,
    WeightSimilarity,
    attention_circuits,
    attention_matrices,
    block_shares,
    compare_weights,
    feature_labels,
    format_similarities,
    reference_construction,
)
from interp.model import KMeansTransformer, ModelConfig
from interp.model.config import learned_model_config
from interp.model.constructions import lloyd_transformer
from interp.report.plots import MAX_WIDTH, attention_maps, similarity_figure, weight_heatmaps
from interp.tasks import TaskConfig, init_centroids, sample_tasks

D_, K_ = 4, 3


def _random_model(embedding="onehot", seed=0):
    torch.manual_seed(seed)
    return KMeansTransformer(learned_model_config(D_, K_, embedding))


@pytest.mark.parametrize("embedding", ["onehot", "binary"])
def test_construction_against_itself_is_identical(embedding):
    model = lloyd_transformer(D_, K_, 1, embedding, centroid_update="hardmax")
    sims = compare_weights(model, matrices=("QK", "OV", "QQ", "KK"))
    assert len(sims) == 4 * 4 and all(isinstance(s, WeightSimilarity) for s in sims)
    for s in sims:
        assert s.cosine == pytest.approx(1.0, abs=1e-12) and s.scale == pytest.approx(1.0, abs=1e-12)
        assert s.outside_fraction == 0.0
    by_key = {(s.attention, s.matrix): s for s in sims}
    # the data blocks that the construction fills are identities; attn_xx's V only reads the point scratch,
    # which is zero at a re-embedded step's input
    assert by_key["attn_xc", "QK"].diagonal_dominance == 1.0 and by_key["attn_cc", "OV"].diagonal_dominance == 1.0
    assert math.isnan(by_key["attn_cx", "QK"].diagonal_dominance)  # zero data block
    assert by_key["attn_xx", "OV"].unused_fraction == 1.0 and by_key["attn_xc", "QK"].unused_fraction == 0.0
    # passing a construction with another centre update / literal self-attentions changes no weight
    other = compare_weights(model, reference=lloyd_transformer(D_, K_, 3, embedding))
    assert all(s.cosine == pytest.approx(1.0, abs=1e-12) for s in other)


def test_one_changed_entry_by_hand():
    """The construction's attn_cc OV is W_V = -I on the d = 4 data features (zero elsewhere). With one more entry,
    W_V[0, 1] = -1: <A, R> = 4, ||A|| = sqrt 5, ||R|| = 2, so cosine 2 / sqrt 5 and scale 4/4 = 1; the data block
    has 4 of its 5 units of squared weight on the diagonal (the reference 4 of 4), and 1 of 5 lies outside the
    reference's support."""
    model = lloyd_transformer(D_, K_, 1, "onehot", centroid_update="hardmax")
    with torch.no_grad():
        assert model.layers[0].attn_cc.W_V[0, 0] == -1 and model.layers[0].attn_cc.W_V[0, 1] == 0
        model.layers[0].attn_cc.W_V[0, 1] = -1.0
    sims = {(s.attention, s.matrix): s for s in compare_weights(model)}
    changed = sims["attn_cc", "OV"]
    assert changed.cosine == pytest.approx(2 / math.sqrt(5), abs=1e-15) and changed.scale == pytest.approx(1.0)
    assert changed.diagonal_dominance == pytest.approx(4 / 5, abs=1e-15)
    assert changed.reference_diagonal_dominance == 1.0  # the reference's own block, not the model's
    assert changed.outside_fraction == pytest.approx(1 / 5, abs=1e-15) and changed.unused_fraction == 0.0
    assert sims["attn_cx", "OV"].cosine == pytest.approx(1.0, abs=1e-12)  # the other attentions are untouched


@pytest.mark.parametrize("embedding", ["onehot", "binary"])
def test_random_model_is_clearly_less_similar(embedding):
    sims = compare_weights(_random_model(embedding))
    cosines = torch.tensor([s.cosine for s in sims])
    assert cosines.abs().mean() < 0.3 and cosines.abs().max() < 0.6
    assert min(s.outside_fraction for s in sims) > 0.5  # dense weights: most of the mass off the blocks


def test_qk_is_the_cross_term_of_the_scores_and_rotation_invariant():
    """Q^T K is the bilinear form of the scores' cross term: for every query z and key z' the model's own scores
    (before gamma, with 1/sqrt(D)) satisfy s(z, z') - s(z, 0) - s(0, z') + s(0, 0) = 2 z^T (Q^T K) z' / sqrt(D), the
    query-only, key-only and bias terms cancelling."""
    model = _random_model().double()
    width = model.config.d_model
    generator = torch.Generator().manual_seed(5)
    queries = torch.randn(6, width, generator=generator, dtype=torch.float64)  # (q, D)
    keys = torch.randn(5, width, generator=generator, dtype=torch.float64)  # (r, D)
    zero = torch.zeros(1, width, dtype=torch.float64)
    matrices = attention_matrices(model)
    for name in ATTENTIONS:
        with torch.no_grad():  # row / column 0: the zero token
            scores = getattr(model.blocks[0], name).scores(torch.cat([zero, queries])[None],
                                                           torch.cat([zero, keys])[None],
                                                           getattr(model.layers[0], name))[0]  # (1 + q, 1 + r)
        cross = scores[1:, 1:] - scores[1:, :1] - scores[:1, 1:] + scores[0, 0]  # (q, r)
        torch.testing.assert_close(cross, 2 * queries @ matrices[name]["QK"] @ keys.T / math.sqrt(width),
                                   rtol=0, atol=1e-12, msg=name)
    before = compare_weights(model)
    rotation, _ = torch.linalg.qr(torch.randn(width, width, dtype=torch.float64))  # (D, D) orthogonal
    with torch.no_grad():
        for name in ATTENTIONS:
            weights = getattr(model.layers[0], name)
            weights.W_Q.copy_(rotation @ weights.W_Q)
            weights.W_K.copy_(rotation @ weights.W_K)
    after = compare_weights(model)
    for a, b in zip(before, after):
        assert a.cosine == pytest.approx(b.cosine, abs=1e-5)


def test_attention_circuits_are_factored_matrices_in_transformerlens_orientation():
    """QK = W_Q^T W_K, QQ = W_Q^T W_Q, KK = W_K^T W_K and OV = W_V^T (tokens are rows) as FactoredMatrix objects,
    detached float64, of the layer each step uses; attention_matrices are their products with OV back to W_V."""
    torch.manual_seed(2)
    model = KMeansTransformer(ModelConfig(d=D_, k=K_, n_layers=2, shared_weights=False))  # float32
    for step in range(2):
        circuits = attention_circuits(model, step)
        for name in ATTENTIONS:
            weights = getattr(model.layers[step], name)
            W_Q, W_K, W_V = (w.detach().double() for w in (weights.W_Q, weights.W_K, weights.W_V))
            per = circuits[name]
            assert all(isinstance(per[key], FactoredMatrix) for key in ("QK", "QQ", "KK", "OV"))
            assert per["QK"].AB.dtype == torch.float64 and not per["QK"].AB.requires_grad
            for key, expected in {"QK": W_Q.T @ W_K, "QQ": W_Q.T @ W_Q, "KK": W_K.T @ W_K, "OV": W_V.T}.items():
                torch.testing.assert_close(per[key].AB, expected, rtol=0, atol=1e-12, msg=f"{step} {name} {key}")
    matrices, circuits = attention_matrices(model), attention_circuits(model)
    for name in ATTENTIONS:
        assert torch.equal(matrices[name]["QK"], circuits[name]["QK"].AB)
        assert torch.equal(matrices[name]["OV"], getattr(model.layers[0], name).W_V.detach().double())
    with pytest.raises(InvalidInput, match="step"):
        attention_circuits(model, 2)


def test_scaled_construction_keeps_cosine_and_reports_scale():
    model = lloyd_transformer(D_, K_, 1, "onehot", centroid_update="hardmax")
    with torch.no_grad():
        model.layers[0].attn_xc.W_Q.mul_(3.0)  # Q^T K scales by 3
    sims = {(s.attention, s.matrix): s for s in compare_weights(model)}
    assert sims["attn_xc", "QK"].cosine == pytest.approx(1.0) and sims["attn_xc", "QK"].scale == pytest.approx(3.0)


def test_block_shares_locate_the_weight():
    matrices = attention_matrices(lloyd_transformer(D_, K_, 1, "onehot", centroid_update="hardmax"))
    assert block_shares(matrices["attn_xc"]["OV"], D_) == {
        "data|data": 0.0, "data|scratch": 0.0, "scratch|data": 0.0, "scratch|scratch": 1.0}
    assert block_shares(matrices["attn_cx"]["OV"], D_)["data|data"] == 1.0
    with pytest.raises(ValueError, match="d must be"):
        block_shares(matrices["attn_cx"]["OV"], 0)


def test_none_embedding_is_compared_with_the_onehot_data_block():
    model = _random_model("none")
    assert reference_construction(model).config.embedding == "onehot"
    sims = {(s.attention, s.matrix): s for s in compare_weights(model)}
    assert not math.isnan(sims["attn_xc", "QK"].cosine)  # I_d block of the construction
    assert math.isnan(sims["attn_xc", "OV"].cosine)  # the construction's V writes only scratch: zero block
    assert sims["attn_xc", "OV"].outside_fraction == 1.0
    assert all(s.unused_fraction == 0.0 for s in sims.values())  # no scratch features


def test_weight_heatmaps_have_titles_labels_and_block_lines():
    model = _random_model()
    fig = weight_heatmaps(model)
    heatmaps = [t for t in fig.data if isinstance(t, go.Heatmap)]
    assert len(heatmaps) == 16  # 4 attentions x (learned, construction) x (QK, OV)
    layout = fig.layout.to_plotly_json()
    x_axes = [key for key in layout if key.startswith("xaxis")]
    y_axes = [key for key in layout if key.startswith("yaxis")]
    assert len(x_axes) == len(y_axes) == 16
    titles = {layout[key]["title"]["text"] for key in x_axes + y_axes}
    assert titles == {"key-side feature", "query-side feature", "input feature", "output feature"}
    assert list(heatmaps[0].x) == feature_labels(model) == ["x0", "x1", "x2", "x3", "y0", "y1", "y2"]
    # one vertical and one horizontal line at the data | scratch boundary per subplot
    assert len(fig.layout.shapes) == 2 * 16
    assert {s.x0 for s in fig.layout.shapes if s.x0 == s.x1} == {D_ - 0.5}
    assert {s.y0 for s in fig.layout.shapes if s.y0 == s.y1} == {D_ - 0.5}
    for trace in heatmaps:
        assert trace.zmin == -trace.zmax and trace.zmid == 0  # symmetric colour scale per matrix
    assert fig.layout.width <= MAX_WIDTH == 1350  # four columns fit the report's 1400-px column


def test_similarity_figure_and_table():
    sims = compare_weights(_random_model())
    fig = similarity_figure(sims)
    assert len(fig.data) == 4 * 2  # 4 metric panels x (QK, OV) bars
    assert all(list(bar.x) == list(ATTENTIONS) for bar in fig.data)
    assert fig.layout.width <= MAX_WIDTH
    table = format_similarities(sims)
    assert len(table.splitlines()) == 2 + 8 and "attn_cc" in table


def test_attention_maps_sort_points_and_show_eight_patterns():
    tasks = sample_tasks(TaskConfig(n=60, d=D_, k=K_), 1, 3)  # float32, like the learned model
    init = init_centroids(tasks.points, K_, "random", 4)
    model = _random_model().train()
    fig = attention_maps(model, tasks.points, init, tasks.labels, max_points=40)
    assert model.training  # evaluated without dropout, mode restored
    heatmaps = [t for t in fig.data if isinstance(t, go.Heatmap)]
    assert len(heatmaps) == 8
    construction_xc, _, _, _, learned_xc, learned_xx, learned_cx, _ = (torch.tensor(t.z) for t in heatmaps)
    assert construction_xc.shape == (40, K_) and learned_xx.shape == (40, 40) and learned_cx.shape == (K_, 40)
    assert set(construction_xc.flatten().tolist()) <= {0.0, 1.0}  # sigma_inf: one nearest centroid per point
    torch.testing.assert_close(learned_xc.sum(-1), torch.ones(40, dtype=torch.float64))  # full rows: sum 1
    assert all(len(fig.layout[f"xaxis{i}"].title.text) > 0 for i in ["", *range(2, 9)])
    assert fig.layout.width <= MAX_WIDTH


def test_bad_inputs_raise_clear_errors():
    model = _random_model()
    with pytest.raises(TypeError, match="model must be a KMeansTransformer"):
        compare_weights(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="reference must be a KMeansTransformer"):
        weight_heatmaps(model, reference="construction")
    with pytest.raises(ValueError, match="reference has k=4"):
        compare_weights(model, reference=lloyd_transformer(D_, 4, 1))
    with pytest.raises(ValueError, match="reference has width"):
        compare_weights(model, reference=lloyd_transformer(D_, K_, 1, "binary"))
    with pytest.raises(ValueError, match="matrices"):
        compare_weights(model, matrices=("QKV",))
    with pytest.raises(ValueError, match="similarities"):
        similarity_figure([])
    points, init = make_tasks(n=30, d=D_, k=K_, batch=1, seed=1, dtype=torch.float32)
    labels = torch.zeros(30, dtype=torch.int64)
    with pytest.raises(ValueError, match="points have d=5"):
        attention_maps(model, torch.rand(30, 5), init, labels)
    with pytest.raises(ValueError, match="labels must be an integer tensor of shape"):
        attention_maps(model, points, init, labels[:10])
    with pytest.raises(ValueError, match="one task"):
        attention_maps(model, points.expand(2, -1, -1), init, labels)
    with pytest.raises(ValueError, match="max_points"):
        attention_maps(model, points, init, labels, max_points=0)


def test_attention_maps_of_a_model_with_an_identity_points_attention():
    """A learned model whose attn_xx takes its identity pattern (``TrainConfig.attn_xx_identity``) draws that
    pattern: one 1 per row, on the diagonal (in the maps' sorted point order)."""
    from dataclasses import replace

    config = learned_model_config(D_, K_)
    torch.manual_seed(0)
    model = KMeansTransformer(replace(config, attn_xx=replace(config.attn_xx, identity=True))).eval()
    tasks = sample_tasks(TaskConfig(n=60, d=D_, k=K_), 1, 3)
    init = init_centroids(tasks.points, K_, "random", 4)
    fig = attention_maps(model, tasks.points, init, tasks.labels, max_points=40)
    learned_xx = torch.tensor([t for t in fig.data if isinstance(t, go.Heatmap)][5].z)
    torch.testing.assert_close(learned_xx, torch.eye(40, dtype=learned_xx.dtype))
