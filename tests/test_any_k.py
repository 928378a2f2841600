"""One model for every k up to its own and every d up to its own: the forward on k' <= k centroids, training on many
task sizes (``TrainConfig.k_least`` / ``d_least`` / ``n_least``), and the estimator and evaluation serving the
range a checkpoint was trained for. Known answers: Lloyd's algorithm written here in numpy (the constructions run it
exactly on any k' of their k codes), the sampling distributions' own definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from interp import InContextKMeans
from interp._checks import InvalidInput
from interp.evaluate import EvalConfig, evaluate
from interp.model import KMeansTransformer
from interp.model.checkpoint import load_checkpoint, load_model, save_checkpoint, save_model
from interp.model.config import learned_model_config
from interp.model.constructions import lloyd_transformer
from interp.task_config import TaskConfig
from interp.tasks import pad_dimensions, tile_dimensions, untile, widen_task
from interp.training.config import TrainConfig
from interp.training.state import make_validation_set
from interp.training.task_mix import draw_task_config
from interp.training.train import train


def numpy_lloyd(points: np.ndarray, centroids: np.ndarray, steps: int) -> np.ndarray:
    """Lloyd's algorithm on one task (n, d) from (k, d); an empty cluster keeps its centroid (none occur here)."""
    c = centroids.copy()
    for _ in range(steps):
        labels = ((points[:, None, :] - c[None]) ** 2).sum(-1).argmin(1)
        for j in range(len(c)):
            if (labels == j).any():
                c[j] = points[labels == j].mean(0)
    return c


@pytest.mark.parametrize("embedding", ["onehot", "binary"])
@pytest.mark.parametrize("slot_order", ["fixed", "shuffle"])
@pytest.mark.parametrize("k_task", [1, 3, 16])
def test_a_construction_for_16_codes_runs_lloyd_on_fewer_centroids(embedding, slot_order, k_task):
    generator = torch.Generator().manual_seed(k_task)
    points = torch.rand(3, 120, 2, generator=generator, dtype=torch.float64)  # (b, n, d)
    start = points[:, :k_task].clone()  # (b, k', d): distinct data points
    model = lloyd_transformer(2, 16, n_layers=3, embedding=embedding)
    out = model(points, start, slot_order=slot_order, generator=5)
    assert out.centroids.shape == (3, k_task, 2) and out.assignments.shape == (3, 120)
    for task in range(3):
        expected = numpy_lloyd(points[task].numpy(), start[task].numpy(), 3)
        np.testing.assert_allclose(out.centroids[task].numpy(), expected, atol=1e-12)


def test_shuffled_slots_of_fewer_centroids_are_distinct_codes_drawn_uniformly():
    """With k' = 3 of k = 8 slots, each task's 3 centroid tokens carry 3 distinct one-hot codes, each code is used
    with frequency k'/k = 3/8 over many tasks (binomial bound, 5 standard deviations), and the stream holds the
    caller's centroids in the order the slots give (the hook's slot order)."""
    torch.manual_seed(0)
    model = KMeansTransformer(learned_model_config(2, 8, "onehot")).eval()
    points = torch.rand(2000, 16, 2)
    start = points[:, :3].clone()
    _, cache = model.run_with_cache(points, start, steps=1, slot_order="shuffle", generator=3)
    codes = cache["hook_centroids_embed"][..., 2:]  # (b, 3, 8)
    assert torch.equal(codes.sum(-1), torch.ones(2000, 3)) and set(codes.unique().tolist()) == {0.0, 1.0}
    slots = codes.argmax(-1)  # (b, 3)
    assert (slots.sort(-1).values.diff(dim=-1) > 0).all()  # distinct, in slot order
    share = torch.bincount(slots.flatten(), minlength=8) / 2000  # (8,)
    bound = 5 * math.sqrt(3 / 8 * 5 / 8 / 2000)
    assert (share - 3 / 8).abs().max() < bound, share
    order = cache["blocks.0.hook_slot_order"]  # (b, 8): slot j holds centroid order[:, j] (>= 3: empty)
    held = torch.stack([row[row < 3] for row in order])  # (b, 3): the centroids of the occupied slots, slot order
    assert torch.equal(cache["hook_centroids_embed"][..., :2], start.gather(1, held[..., None].expand(-1, -1, 2)))


def test_more_centroids_than_codes_are_refused():
    model = KMeansTransformer(learned_model_config(2, 4, "onehot"))
    with pytest.raises(InvalidInput, match="built for k=4 centroid codes: it serves 1 to 4"):
        model(torch.rand(1, 10, 2), torch.rand(1, 5, 2))


MIXED = dict(d=6, k=5, n=96, k_least=2, d_least=1, n_least=16, batch=4, val_tasks=10, eval_every=2, seed=11,
             slot_order="shuffle", attn_xx_identity=True)


def test_each_batch_draws_its_size_within_the_bounds_and_n_log_uniformly():
    config = TrainConfig(**MIXED, steps=4)
    generator = torch.Generator().manual_seed(0)
    sizes = [draw_task_config(config, generator) for _ in range(4000)]
    assert {s.k for s in sizes} == set(range(2, 6)) and {s.d for s in sizes} == set(range(1, 7))
    ns = np.array([s.n for s in sizes])
    assert ns.min() >= 16 and ns.max() <= 96
    # log-uniform on [16, 96]: P(n <= 39) = ln(39.5/16) / ln(96/16) (rounding to the nearest integer)
    expected = math.log(39.5 / 16) / math.log(96 / 16)
    assert abs((ns <= 39).mean() - expected) < 5 * math.sqrt(expected * (1 - expected) / 4000)
    assert draw_task_config(TrainConfig(d=6, k=5, n=96), generator) == TaskConfig(n=96, d=6, k=5)  # one size: itself


def test_the_validation_set_of_many_sizes_is_groups_of_one_size_padded_to_d():
    validation = make_validation_set(TrainConfig(**MIXED, steps=4), torch.Generator().manual_seed(1))
    assert [len(part.points) for part in validation.parts] == [4, 4, 2]
    for part in validation.parts:
        assert part.points.shape[-1] == 6 and part.init.shape[1] in range(2, 6)
        used = int((part.points.abs().sum((0, 1)) > 0).sum())  # the task's own dimensions come first, then zeros
        assert torch.equal(part.points[..., used:], torch.zeros_like(part.points[..., used:]))


@pytest.mark.parametrize("field,value,message", [("k_least", 6, "k_least must be at most 5"),
                                                 ("d_least", 0, "d_least"), ("n_least", 5, "less than n_least=5"),
                                                 ("n_least", 97, "n_least must be at most 96")])
def test_size_bounds_are_checked(field, value, message):
    with pytest.raises(InvalidInput, match=message):
        TrainConfig(**{**MIXED, field: value})


def test_a_run_of_many_sizes_resumes_to_the_same_weights_and_is_served_over_its_range(tmp_path):
    config = TrainConfig(**MIXED, steps=6)
    whole = tmp_path / "whole.safetensors"
    train(config, whole, progress=False)
    parts = tmp_path / "parts.safetensors"
    train(config, parts, progress=False, stop_after=3)
    train(config, parts, progress=False)
    a, b = load_checkpoint(whole)[0], load_checkpoint(parts)[0]
    assert all(torch.equal(a[name], b[name]) for name in a if name.startswith("model."))
    model = load_model(whole)
    assert model.served_k == (2, 5)
    X = np.random.default_rng(0).random((60, 3))
    fitted = InContextKMeans(3, model=str(whole), steps=2, random_state=0).fit(X)  # d = 3 < 6: zero-padded
    assert fitted.cluster_centers_.shape == (3, 3)
    with pytest.raises(InvalidInput, match="serves n_clusters from 2 to 5, got n_clusters=1"):
        InContextKMeans(1, model=str(whole), steps=2).fit(X)
    rows = evaluate({"m": model}, TaskConfig(n=40, d=2, k=3), EvalConfig(n_tasks=4, steps=2, protocols=("main",),
                                                                      inits=("random",), baselines=False))
    assert {row["step"] for row in rows} == {0, 1, 2}
    with pytest.raises(InvalidInput, match="k from 2 to 5, but the tasks have d=2, k=1"):
        evaluate({"m": model}, TaskConfig(n=40, d=2, k=1), EvalConfig(n_tasks=4, steps=2, baselines=False))


def test_a_model_of_one_k_serves_only_it(tmp_path):
    torch.manual_seed(0)
    path = save_model(tmp_path / "one.safetensors", KMeansTransformer(learned_model_config(2, 4, "onehot")))
    assert load_model(path).served_k == (4, 4)
    with pytest.raises(InvalidInput, match="serves only n_clusters=4, got n_clusters=3"):
        InContextKMeans(3, model=str(path), steps=1).fit(np.random.default_rng(0).random((30, 2)))


@pytest.mark.parametrize("value", [0, 9, "2", True, 2.5])
def test_a_file_with_a_bad_k_least_is_refused_naming_it(tmp_path, value):
    config = TrainConfig(**MIXED, steps=2)
    path = tmp_path / "run.safetensors"
    train(config, path, progress=False)
    tensors, meta = load_checkpoint(path)
    meta["train_config"]["k_least"] = value
    save_checkpoint(path, tensors, meta)
    with pytest.raises(InvalidInput, match="k_least"):
        load_model(path)


def test_pad_dimensions_appends_zeros():
    points = torch.rand(2, 5, 3)
    padded = pad_dimensions(points, 7)
    assert padded.shape == (2, 5, 7) and torch.equal(padded[..., :3], points) and not padded[..., 3:].any()
    assert pad_dimensions(points, 3) is points


def test_tiling_repeats_coordinates_and_untile_averages_the_copies():
    points = torch.tensor([[[1.0, 2.0, 3.0]]])  # (1, 1, 3)
    tiled = tile_dimensions(points, 7)
    assert tiled.tolist() == [[[1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0]]]
    centroids = torch.tensor([[[1.0, 2.0, 3.0, 3.0, 4.0, 5.0, 5.0]]])  # copies of x0: 1, 3, 5; x1: 2, 4; x2: 3, 5
    assert untile(centroids, 3).tolist() == [[[3.0, 3.0, 4.0]]]
    assert torch.equal(widen_task(points, 5, "pad"), pad_dimensions(points, 5))


@pytest.mark.parametrize("narrow", ["pad", "tile"])
def test_the_hybrid_serves_a_narrower_task_tiled_or_padded_as_lloyd_would(narrow):
    """A construction of width 4 on 2-dimensional tasks: tiled (each coordinate twice, every squared distance doubled)
    or padded, its steps are Lloyd's on the task itself."""
    import dataclasses

    from interp.hybrid import hybrid

    generator = torch.Generator().manual_seed(3)
    points = torch.rand(2, 80, 2, generator=generator, dtype=torch.float64)
    start = points[:, :4].clone()
    model = lloyd_transformer(4, 4, n_layers=3)
    model.inference = dataclasses.replace(model.inference, narrow_tasks=narrow)
    out = hybrid(model, points, start, steps=3, lloyd_steps=1)
    assert out.centroids.shape == (2, 4, 2)
    for task in range(2):
        np.testing.assert_allclose(out.centroids[task].numpy(), numpy_lloyd(points[task].numpy(),
                                                                            start[task].numpy(), 4), atol=1e-12)


def test_narrow_tasks_is_a_checked_inference_setting_and_round_trips(tmp_path):
    from interp.model.config import InferenceSettings

    with pytest.raises(InvalidInput, match="narrow_tasks"):
        InferenceSettings(narrow_tasks="stretch")
    with pytest.raises(InvalidInput, match="narrow_tasks"):
        TrainConfig(narrow_tasks="stretch")
    assert "narrow_tasks" not in InferenceSettings().to_dict()  # the default is written as before it existed
    torch.manual_seed(0)
    model = KMeansTransformer(learned_model_config(2, 4, "onehot"))
    model.inference = InferenceSettings(steps=3, slot_order="shuffle", narrow_tasks="tile")
    assert load_model(save_model(tmp_path / "m.safetensors", model)).inference == model.inference


def test_the_relative_loss_divides_each_task_by_its_reference():
    from interp.training.losses import smoothed_loss, smoothed_objective

    generator = torch.Generator().manual_seed(0)
    points, centroids = torch.rand(3, 20, 2, generator=generator), torch.rand(3, 4, 2, generator=generator)
    reference = torch.tensor([2.0, 4.0, 8.0])
    per_task = smoothed_objective(points, centroids, 0.1)
    expected = (per_task[0] / 2 + per_task[1] / 4 + per_task[2] / 8) / 3
    assert smoothed_loss(points, centroids, 0.1, reference=reference).item() == pytest.approx(expected.item(), rel=1e-6)


def test_interp_evaluate_takes_k_and_d_in_the_served_range(tmp_path, capsys):
    from interp.cli import main

    path = tmp_path / "run.safetensors"
    train(TrainConfig(**MIXED, steps=2), path, progress=False)
    common = ["evaluate", "--checkpoint", str(path), "--tasks", "2", "--steps", "1", "--protocols", "main",
              "--inits", "random", "--no-baselines", "--threads", "1", "--n", "30"]
    assert main([*common, "--out", str(tmp_path / "ok"), "--k", "3", "--d", "2"]) == 0
    assert (tmp_path / "ok" / "summary.csv").is_file()
    capsys.readouterr()
    assert main([*common, "--out", str(tmp_path / "refused"), "--k", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "k from 2 to 5, but the tasks have d=6, k=1" in err[0]
