"""Hybrid inference (``interp.hybrid.hybrid``: T learned steps, then L Lloyd steps) against an independent reference:
the model's own T steps followed by Lloyd's iterations written here in NumPy; L = 0 is the model's output bit for bit;
the checkpoint's ``lloyd_steps`` recommendation stored, restored, refused when malformed; bad values one line."""

import numpy as np
import pytest
import torch
from conftest import make_tasks

from interp import KMeansTransformer
from interp._checks import InvalidInput, InvalidInputType
from interp.hybrid import hybrid
from interp.model.checkpoint import load_model, read_header, save_model
from interp.model.config import InferenceSettings, learned_model_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def numpy_lloyd(points: np.ndarray, centroids: np.ndarray, steps: int) -> np.ndarray:
    """Lloyd's iterations on one task, float64, written from the definition: each point to its nearest centre
    (ties to the lowest index); an empty cluster takes the point farthest from its centre (farthest first, to the
    lowest empty index: scikit-learn's relocation); each centre to its members' mean."""
    centres = centroids.astype(np.float64).copy()
    for _ in range(steps):
        distances = ((points[:, None, :] - centres[None, :, :]) ** 2).sum(-1)  # (n, k)
        labels = distances.argmin(axis=1)
        empties = np.flatnonzero(np.bincount(labels, minlength=len(centres)) == 0)
        if len(empties):
            far = np.argsort(-distances[np.arange(len(points)), labels], kind="stable")[: len(empties)]
            labels[far] = empties
        centres = np.stack([points[labels == j].mean(axis=0) for j in range(len(centres))])
    return centres


@pytest.fixture(scope="module")
def best():
    return load_model("best")


def tasks(batch: int = 4, n: int = 96, d: int = 32, seed: int = 3, dtype=torch.float32):
    points, init = make_tasks(batch=batch, n=n, d=d, k=10, seed=seed)
    return points.to(dtype), init.to(dtype)


@pytest.mark.parametrize("lloyd_steps", [1, 3])
def test_hybrid_is_the_models_steps_then_lloyds(best, lloyd_steps):
    points, init = tasks()
    with torch.no_grad():
        learned = best(points, init, steps=5, generator=7)
        out = hybrid(best, points, init, steps=5, lloyd_steps=lloyd_steps, generator=7)
    assert out.centroid_trajectory.shape[1] == 5 + lloyd_steps + 1
    assert out.assignment_trajectory.shape[1] == out.empty_clusters.shape[1] == 5 + lloyd_steps
    assert torch.equal(out.centroid_trajectory[:, :6], learned.centroid_trajectory)
    assert torch.equal(out.readout_trajectory, learned.readout_trajectory)
    for task in range(len(points)):
        expected = numpy_lloyd(points[task].double().numpy(), learned.centroids[task].double().numpy(), lloyd_steps)
        np.testing.assert_allclose(out.centroids[task].double().numpy(), expected, atol=2e-5)
        nearest = ((points[task, :, None, :] - out.centroids[task, None]) ** 2).sum(-1).argmin(1)
        assert torch.equal(out.assignments[task], nearest)


def test_no_lloyd_steps_is_the_models_output_bit_for_bit(best):
    points, init = tasks()
    with torch.no_grad():
        learned = best(points, init, steps=4, generator=5)
        out = hybrid(best, points, init, steps=4, lloyd_steps=0, generator=5)
    for field in ("centroids", "assignments", "centroid_trajectory", "assignment_trajectory", "empty_clusters",
                  "readout_trajectory"):
        assert torch.equal(getattr(out, field), getattr(learned, field)), field


def test_the_recommendation_is_the_default_and_the_forward_ignores_it(best):
    points, init = tasks(batch=2)
    model = load_model("best")
    model.inference = InferenceSettings(steps=3, slot_order="shuffle", lloyd_steps=2)
    with torch.no_grad():
        plain = model(points, init, generator=1)
        out = hybrid(model, points, init, generator=1)
        explicit = hybrid(model, points, init, steps=3, lloyd_steps=2, slot_order="shuffle", generator=1)
    assert plain.centroid_trajectory.shape[1] == 4  # the transformer alone: 3 steps
    assert out.centroid_trajectory.shape[1] == 6
    assert torch.equal(out.centroids, explicit.centroids)


def test_narrow_tasks_are_padded_for_the_model_and_lloyd_runs_on_their_own_coordinates(best):
    points, init = tasks(batch=3, d=5, seed=8, dtype=torch.float64)
    padded = torch.nn.functional.pad(points, (0, 27)).float()
    with torch.no_grad():
        learned = best(padded, torch.nn.functional.pad(init, (0, 27)).float(), steps=3, generator=2)
        out = hybrid(best, points, init, steps=3, lloyd_steps=2, generator=2)
    assert out.centroids.shape == (3, 10, 5) and out.centroids.dtype == torch.float64
    assert torch.equal(out.centroid_trajectory[:, 3], learned.centroids[..., :5].double())
    for task in range(3):
        expected = numpy_lloyd(points[task].numpy(), learned.centroids[task, :, :5].double().numpy(), 2)
        np.testing.assert_allclose(out.centroids[task].numpy(), expected, atol=1e-12)
    nearest = ((points[:, :, None, :] - out.centroid_trajectory[:, 1, None]) ** 2).sum(-1).argmin(-1)
    assert torch.equal(out.assignment_trajectory[:, 1], nearest)  # the E-step on the cut centroids


def test_float64_tasks_get_lloyd_steps_in_float64(best):
    points, init = tasks(batch=2, dtype=torch.float64)
    with torch.no_grad():
        learned = best(points.float(), init.float(), steps=2, generator=4)
        out = hybrid(best, points, init, steps=2, lloyd_steps=1, generator=4)
        none = hybrid(best, points, init, steps=2, lloyd_steps=0, generator=4)
    assert out.centroids.dtype == none.centroids.dtype == torch.float64
    assert torch.equal(none.centroids, learned.centroids.double())
    for task in range(2):
        expected = numpy_lloyd(points[task].numpy(), learned.centroids[task].double().numpy(), 1)
        np.testing.assert_allclose(out.centroids[task].numpy(), expected, atol=1e-12)


@pytest.mark.parametrize("value, error, needle", [
    (-1, InvalidInput, "lloyd_steps must be >= 0, got -1"),
    (10_001, InvalidInput, "lloyd_steps must be at most 10,000"),
    (1.5, InvalidInputType, "lloyd_steps must be an int, got float"),
    (True, InvalidInputType, "lloyd_steps must be an int, got bool"),
])
def test_bad_lloyd_steps_get_one_line_naming_them(best, value, error, needle):
    points, init = tasks(batch=1)
    with pytest.raises(error, match=needle) as raised:
        hybrid(best, points, init, steps=1, lloyd_steps=value)
    assert "\n" not in str(raised.value)
    with pytest.raises(error, match=needle):
        InferenceSettings(lloyd_steps=value)


def test_hybrid_refuses_what_is_not_a_model_and_wider_tasks(best):
    points, init = tasks(batch=1)
    with pytest.raises(InvalidInputType, match="model must be a KMeansTransformer"):
        hybrid("best", points, init)
    wide, wide_init = tasks(batch=1, d=33)
    with pytest.raises(InvalidInput, match="points have d=33 but the model was built for d=32"):
        hybrid(best, wide, wide_init)


def test_lloyd_steps_are_stored_restored_and_old_files_load_unchanged(tmp_path):
    model = KMeansTransformer(learned_model_config(2, 3)).eval()
    model.inference = InferenceSettings(steps=4, slot_order="shuffle", lloyd_steps=2)
    save_model(tmp_path / "m.safetensors", model)
    assert read_header(tmp_path / "m.safetensors")[0]["inference"] == {"steps": 4, "slot_order": "shuffle",
                                                                        "lloyd_steps": 2}
    assert load_model(tmp_path / "m.safetensors").inference.lloyd_steps == 2
    model.inference = InferenceSettings(steps=4, slot_order="shuffle")  # no Lloyd steps: written as before
    save_model(tmp_path / "old.safetensors", model)
    assert read_header(tmp_path / "old.safetensors")[0]["inference"] == {"steps": 4, "slot_order": "shuffle"}
    assert load_model(tmp_path / "old.safetensors").inference == InferenceSettings(steps=4, slot_order="shuffle")
    assert InferenceSettings.from_dict({"steps": 20}, "x").lloyd_steps == 0


@pytest.mark.parametrize("value, needle", [(-2, "lloyd_steps must be >= 0"), ("1", "lloyd_steps must be an int")])
def test_malformed_lloyd_steps_in_a_checkpoint_are_refused(tmp_path, value, needle):
    path = tmp_path / "bad.safetensors"
    save_model(path, KMeansTransformer(learned_model_config(2, 3)).eval(), inference={"lloyd_steps": value})
    with pytest.raises(InvalidInput, match=needle):
        load_model(path)


# ----- InContextKMeans(lloyd_steps=...) ---------------------------------------------------------------------------
def blobs(n: int = 300, d: int = 32, seed: int = 0, k: int = 10) -> np.ndarray:
    """k Gaussian blobs like the training tasks' (locations in the unit cube, scale 0.1), scaled by 3 and moved off
    the unit cube (the estimator maps them back)."""
    rng = np.random.default_rng(seed)
    locations = rng.random((k, d))
    return (locations[rng.integers(0, k, size=n)] + 0.1 * rng.normal(size=(n, d))) * 3.0 + 10.0


def test_the_estimators_lloyd_steps_continue_from_its_learned_centres():
    from interp.estimator import InContextKMeans

    X = blobs()
    learned = InContextKMeans(10, model="best", lloyd_steps=0, random_state=3).fit(X)
    refined = InContextKMeans(10, model="best", lloyd_steps=2, random_state=3).fit(X)
    np.testing.assert_allclose(refined.cluster_centers_, numpy_lloyd(X, learned.cluster_centers_, 2), atol=1e-9)
    assert (learned.n_iter_, refined.n_iter_) == (20, 22)
    assert refined.inertia_ <= learned.inertia_


def test_the_estimator_takes_the_checkpoints_recommendation(tmp_path):
    from interp.estimator import InContextKMeans

    model = load_model("best")
    model.inference = InferenceSettings(steps=20, slot_order="shuffle", lloyd_steps=1)
    save_model(tmp_path / "hybrid.safetensors", model)
    X = blobs(seed=1)
    recommended = InContextKMeans(10, model=str(tmp_path / "hybrid.safetensors"), random_state=2).fit(X)
    explicit = InContextKMeans(10, model="best", lloyd_steps=1, random_state=2).fit(X)
    assert np.array_equal(recommended.cluster_centers_, explicit.cluster_centers_) and recommended.n_iter_ == 21


def test_lloyd_after_the_construction_is_more_lloyd():
    from interp.estimator import InContextKMeans

    X = blobs(d=3, seed=2, k=4)
    first = InContextKMeans(4, model="lloyd", steps=3, random_state=0).fit(X)
    more = InContextKMeans(4, model="lloyd", steps=3, lloyd_steps=2, random_state=0).fit(X)
    np.testing.assert_allclose(more.cluster_centers_, numpy_lloyd(X, first.cluster_centers_, 2), atol=1e-9)
    assert more.n_iter_ == 5


@pytest.mark.parametrize("value", [-1, 10_001, 1.5, True, "2"])
def test_the_estimator_refuses_bad_lloyd_steps_in_one_line(value):
    from interp.estimator import InContextKMeans

    with pytest.raises(InvalidInput, match=r"lloyd_steps must be None or an integer from 0 to 10,000") as raised:
        InContextKMeans(10, model="best", lloyd_steps=value).fit(blobs())
    assert "\n" not in str(raised.value)


# ----- interp evaluate / interp compare --lloyd-steps -----------------------------------------------------------------
def test_evaluate_curves_run_the_lloyd_steps_after_the_models(best):
    from interp.algorithms import log_objective
    from interp.evaluate import EvalConfig, evaluation_tasks, objective_curves
    from interp.tasks import TaskConfig, init_centroids

    task_config = TaskConfig(n=64, d=32, k=10)
    plain = objective_curves(best, task_config, EvalConfig(n_tasks=6, steps=3, chunk=4, lloyd_steps=0), "random")
    config = EvalConfig(n_tasks=6, steps=3, chunk=4, lloyd_steps=2)
    curves = objective_curves(best, task_config, config, "random")
    assert len(plain["model"]) == 4 and len(curves["model"]) == len(curves["lloyd"]) == 6
    assert curves["model"][:4] == plain["model"]
    points = evaluation_tasks(task_config, config)
    start = init_centroids(points, 10, "random", torch.Generator().manual_seed(config.seed + 1))
    orders = torch.Generator().manual_seed(config.seed + 2)
    with torch.no_grad():
        found = torch.cat([hybrid(best, points[i : i + 4], start[i : i + 4], steps=3, lloyd_steps=2,
                                  generator=orders).centroids for i in (0, 4)])
    assert curves["model"][-1] == pytest.approx(log_objective(points, found).double().mean().item(), abs=1e-12)


def test_compare_values_are_the_hybrids_and_lloyd_runs_as_many_steps(best, tmp_path, capsys):
    from interp import compare as C
    from interp.algorithms import lloyd, log_objective
    from interp.cli import main
    from interp.evaluate import EvalConfig, evaluation_tasks
    from interp.tasks import TaskConfig, init_centroids

    base, config = TaskConfig(n=64, d=32, k=10), EvalConfig(n_tasks=5, steps=2, inits=("random",), lloyd_steps=1)
    values = C.task_values({"best": [best]}, config, base)[("main", "in-distribution", "random")]
    points = evaluation_tasks(base, config)
    start = init_centroids(points, 10, "random", torch.Generator().manual_seed(config.seed + 1))
    with torch.no_grad():
        found = hybrid(best, points, start, steps=2, lloyd_steps=1, generator=config.seed + 2).centroids
    np.testing.assert_allclose(values["best"][0], log_objective(points, found).double().numpy(), atol=1e-12)
    np.testing.assert_allclose(values[C.LLOYD][0], log_objective(points, lloyd(points, start, 3).centroids).numpy(),
                               atol=1e-12)
    assert main(["compare", "--model", "b=best", "--out", str(tmp_path / "c"), "--tasks", "2", "--steps", "1",
                 "--lloyd-steps", "1", "--n", "32", "--threads", "1", "--no-progress"]) == 0
    assert "then Lloyd steps (b 1; Lloyd's row 2 iterations)" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["evaluate", "compare"])
def test_a_bad_lloyd_steps_option_is_one_line(command, tmp_path, capsys):
    from interp.cli import main

    model = ["--checkpoint", "best"] if command == "evaluate" else ["--model", "b=best"]
    with pytest.raises(SystemExit) as raised:
        main([command, *model, "--out", str(tmp_path / "o"), "--lloyd-steps", "-1"])
    assert raised.value.code == 2
    assert "argument --lloyd-steps: expected an integer >= 0, got -1" in capsys.readouterr().err
