"""Linear probes (interp.instruments.probes): the exact construction's slots are linearly readable, a d-only model's
are not."""

import math

import pytest
import torch

from interp.algorithms import lloyd
from interp.instruments.probes import (
    ProbeConfig,
    ProbeResult,
    format_probe_table,
    probe_table,
    probe_targets,
    run_probes,
)
from interp.model import KMeansTransformer
from interp.model.config import learned_model_config
from interp.model.constructions import lloyd_transformer
from interp.report.plots import MAX_WIDTH, probe_figure
from interp.tasks import TaskConfig, init_centroids, sample_tasks

D, K, N, BATCH = 3, 4, 100, 40


def _tasks(dtype=torch.float64):
    tasks = sample_tasks(TaskConfig(n=N, d=D, k=K), BATCH, 7, dtype=dtype)
    return tasks.points, init_centroids(tasks.points, K, "random", 8)  # (b, n, d), (b, k, d)


def _row(results, hook, target):
    (row,) = [r for r in results if r.hook == hook and r.target == target]
    return row


@pytest.fixture(scope="module")
def construction_results():
    points, init = _tasks()
    return run_probes(lloyd_transformer(D, K, n_layers=2), points, init, steps=2)


@pytest.fixture(scope="module")
def d_only_results():
    torch.manual_seed(0)
    model = KMeansTransformer(learned_model_config(D, K, "none"))  # random learnable d-only model, float32
    points, init = _tasks(torch.float32)
    return run_probes(model, points, init, steps=1)


def test_rows_cover_every_hook_step_and_target(construction_results):
    rows = construction_results
    assert len(rows) == 2 * (3 * 2 + 2 * 1)  # steps x (3 point hooks x 2 targets + 2 centroid hooks x 1 target)
    assert {r.hook for r in rows if r.step == 1} == {
        "blocks.1.hook_points_resid_pre", "blocks.1.attn_xc.hook_out", "blocks.1.hook_points_resid_post",
        "blocks.1.hook_centroids_resid_pre", "blocks.1.hook_centroids_resid_post"}
    for r in rows:
        assert isinstance(r, ProbeResult)
        assert (r.stream, r.metric) == {"assignment": ("points", "accuracy"), "distance": ("points", "r2"),
                                        "centroid": ("centroids", "r2")}[r.target]
        assert r.baseline_hook == ("hook_points_embed" if r.stream == "points" else "hook_centroids_embed")
        assert math.isfinite(r.value) and math.isfinite(r.baseline)
        # split by task: 12 of 40 tasks held out (test_fraction 0.3), every row of a task on one side
        if r.stream == "points":
            assert (r.n_train, r.n_test) == (28 * N, 12 * N)
        else:  # tokens of empty clusters are left out
            assert 0.9 * 28 * K <= r.n_train <= 28 * K and 0.9 * 12 * K <= r.n_test <= 12 * K


def test_construction_assignment_slots_are_linearly_readable(construction_results):
    for step in (0, 1):
        post = _row(construction_results, f"blocks.{step}.hook_points_resid_post", "assignment")
        assert post.value >= 0.99  # the one-hot slots hold a_i by construction (paper 1 Thm 2.1)
        assert post.baseline <= 0.5  # x alone cannot name the centroid token: near chance (1/k = 0.25)
        assert post.gain >= 0.5
        assert _row(construction_results, f"blocks.{step}.attn_xc.hook_out", "assignment").value >= 0.99
    # step 0's input is the embedding itself: the probe equals the baseline
    pre = _row(construction_results, "blocks.0.hook_points_resid_pre", "assignment")
    assert pre.value == pre.baseline


def test_construction_centroid_stream_holds_lloyd_update(construction_results):
    for step in (0, 1):
        post = _row(construction_results, f"blocks.{step}.hook_centroids_resid_post", "centroid")
        assert post.value >= 0.99  # first d features = one Lloyd step of the input centroids
        assert post.baseline < 0.9  # the initial centroids alone do not give it
    pre = _row(construction_results, "blocks.0.hook_centroids_resid_pre", "centroid")
    assert pre.value == pre.baseline


def test_d_only_model_misses_the_assignment(construction_results, d_only_results):
    for hook in ("blocks.0.attn_xc.hook_out", "blocks.0.hook_points_resid_post"):
        none = _row(d_only_results, hook, "assignment").value
        exact = _row(construction_results, hook, "assignment").value
        assert none <= 0.6  # no slot for a_i: close to chance
        assert exact - none >= 0.4


def test_binary_construction_is_readable_too():
    points, init = _tasks()
    rows = run_probes(lloyd_transformer(D, K, n_layers=1, embedding="binary"), points, init, steps=1)
    assert _row(rows, "blocks.0.hook_points_resid_post", "assignment").value >= 0.99
    assert _row(rows, "blocks.0.hook_centroids_resid_post", "centroid").value >= 0.99


def test_targets_match_lloyd():
    points, init = _tasks()
    targets = probe_targets(points, init)
    step = lloyd(points, init, 1)
    nearest = torch.cdist(points, init).argmin(dim=2)  # (b, n): the assignment to the input centroids
    assert torch.equal(targets["assignment"], nearest)
    assert torch.allclose(targets["centroid"], step.centroids)
    assert torch.equal(targets["empty"], step.empty_clusters[:, 0])
    direct = ((points[:, :, None, :] - init[:, None, :, :]) ** 2).sum(-1).amin(-1)  # (b, n)
    assert torch.allclose(targets["distance"], direct, atol=1e-12)


def test_seeded_subsample_and_mode_restored():
    points, init = _tasks()
    model = lloyd_transformer(D, K, n_layers=1)
    model.train()
    config = ProbeConfig(max_points=500, seed=3)
    first = run_probes(model, points, init, config=config)
    assert model.training  # run_probes evaluates in eval mode and restores the mode
    assert first == run_probes(model, points, init, config=config)
    point_rows = [r for r in first if r.stream == "points"]
    assert all(r.n_train == 500 and r.n_test == 500 for r in point_rows)


def test_table_and_figure(construction_results):
    table = probe_table(construction_results)
    assert len(table) == len(construction_results)
    assert set(table[0]) >= {"hook", "step", "stream", "target", "metric", "value", "baseline", "gain"}
    by_hook = {(row["hook"], row["target"]): row for row in table}
    # the input embedding adds nothing over itself; the construction's slots add the assignment (0.99 vs <= 0.5)
    assert by_hook["blocks.0.hook_points_resid_pre", "assignment"]["gain"] == 0.0
    assert by_hook["blocks.0.hook_points_resid_post", "assignment"]["gain"] >= 0.49
    # by hand: a probe at 0.900 over a baseline of 0.250 gains +0.650; one at 0.200 below 0.500 loses 0.300
    made_up = [ProbeResult("h.up", 0, "points", "assignment", "accuracy", 0.9, 0.25, "hook_points_embed", 10, 5),
               ProbeResult("h.down", 0, "points", "distance", "r2", 0.2, 0.5, "hook_points_embed", 10, 5)]
    assert [row["gain"] for row in probe_table(made_up)] == pytest.approx([0.65, -0.3], abs=1e-15)
    lines = format_probe_table(made_up).splitlines()
    assert lines[1].split()[-3:] == ["0.900", "0.250", "+0.650"]
    assert lines[2].split()[-3:] == ["0.200", "0.500", "-0.300"]
    text = format_probe_table(construction_results)
    assert "blocks.1.hook_centroids_resid_post" in text and "baseline" in text
    fig = probe_figure(construction_results)
    assert len(fig.data) == 2 * 3  # probe + baseline bars per target panel
    assert fig.layout.title.text
    assert fig.layout.yaxis.title.text == "held-out accuracy" and fig.layout.yaxis2.title.text == "held-out R²"
    assert all(fig.layout[f"xaxis{i}"].title.text for i in ("", "2", "3"))
    assert fig.layout.width <= MAX_WIDTH


def test_bad_input_raises():
    points, init = _tasks()
    model = lloyd_transformer(D, K, n_layers=1)
    with pytest.raises(TypeError, match="model"):
        run_probes("model", points, init)
    with pytest.raises(TypeError, match="points"):
        run_probes(model, points.numpy(), init)
    with pytest.raises(ValueError, match="steps"):
        run_probes(model, points, init, steps=0)
    with pytest.raises(TypeError, match="steps"):
        run_probes(model, points, init, steps=1.5)
    with pytest.raises(ValueError, match="points have d=2"):
        run_probes(model, points[..., :2], init[..., :2])
    with pytest.raises(ValueError, match="init has k=3"):
        run_probes(model, points, init[:, :3])
    with pytest.raises(ValueError, match="at least 2 tasks"):
        run_probes(model, points[:1], init[:1])
    with pytest.raises(TypeError, match="points dtype"):
        run_probes(model, points.float(), init.float())
    with pytest.raises(TypeError, match="config"):
        run_probes(model, points, init, config={"seed": 0})
    with pytest.raises(ValueError, match="test_fraction"):
        ProbeConfig(test_fraction=1.0)
    with pytest.raises(ValueError, match="logistic_c"):
        ProbeConfig(logistic_c=0.0)
    with pytest.raises(ValueError, match="max_points"):
        ProbeConfig(max_points=1)
    with pytest.raises(TypeError, match="results"):
        probe_table("rows")
    with pytest.raises(ValueError, match="results"):
        probe_figure([])
