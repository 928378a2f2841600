"""The evaluation protocol and ``interp evaluate`` (paper 2 App. C): content of rows, CSV and figure."""

import csv
import math
import sys

import pytest
from child_processes import run

from interp.evaluate import EvalConfig, evaluate, summarise
from interp.model.checkpoint import load_model
from interp.tasks import FAMILIES, TaskConfig
from interp.training.train import TrainConfig, train


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("eval") / "tiny.safetensors"
    train(TrainConfig(d=4, k=3, n=64, steps=60, batch=16, val_tasks=32, eval_every=30), path, progress=False)
    return path


def test_all_protocols_rows(checkpoint):
    model = load_model(checkpoint)
    config = EvalConfig(n_tasks=12, steps=3, protocols=("main", "length", "shift", "family"), lengths=(32, 128))
    rows = evaluate({"a": model, "b": model}, TaskConfig(n=64, d=4, k=3), config)
    settings = {(r["protocol"], r["setting"], r["init"]) for r in rows}
    assert len(settings) == 3 + 2 + 4 + len(FAMILIES)
    assert len(rows) == 2 * len(settings) * 4
    assert all(math.isfinite(r["model"]) and math.isfinite(r["lloyd"]) for r in rows)
    curves = {}
    for r in rows:
        if r["step"] == 0:  # same tasks, same initial centroids
            assert r["model"] == pytest.approx(r["lloyd"], rel=1e-6)
        curves.setdefault((r["checkpoint"], r["protocol"], r["setting"], r["init"]), []).append(r["lloyd"])
    for lloyd_curve in curves.values():  # a Lloyd iteration never raises any task's objective, so neither the mean log
        assert all(later <= earlier + 1e-5 for earlier, later in zip(lloyd_curve, lloyd_curve[1:])), lloyd_curve
    assert all(s["seeds"] == 2 for s in summarise(rows))  # "a" and "b" at every (protocol, setting, init, step)


def test_summary_by_hand():
    """Three checkpoints at one step: model 3, 1, 2 and Lloyd 5, 4, 4 (given unsorted): medians 2 and 4; with the
    default band (0, 1) the extremes; with (0.25, 0.75) the linear interpolation between order statistics, positions
    0.5 and 1.5 of (1, 2, 3): 1.5 and 2.5, and of (4, 4, 5): 4 and 4.5. Another step is summarised on its own."""
    rows = [{"checkpoint": name, "protocol": "main", "setting": "in-distribution", "init": "random", "step": step,
             "model": model, "lloyd": lloyd}
            for name, model, lloyd in (("a", 3.0, 5.0), ("b", 1.0, 4.0), ("c", 2.0, 4.0)) for step in (0, 1)]
    rows[-1] = {**rows[-1], "model": 10.0}  # checkpoint c at step 1
    first, second = summarise(rows)
    assert (first["step"], first["seeds"], first["model_median"], first["model_low"], first["model_high"]) == (
        0, 3, 2.0, 1.0, 3.0)
    assert (first["lloyd_median"], first["lloyd_low"], first["lloyd_high"]) == (4.0, 4.0, 5.0)
    assert (second["step"], second["model_median"], second["model_high"]) == (1, 3.0, 10.0)
    banded = summarise(rows, quantiles=(0.25, 0.75))[0]
    assert (banded["model_low"], banded["model_high"], banded["lloyd_low"], banded["lloyd_high"]) == pytest.approx(
        (1.5, 2.5, 4.0, 4.5), abs=1e-15)


@pytest.mark.slow  # the command line in a subprocess
def test_evaluate_command_writes_csv_and_html(checkpoint, tmp_path):
    result = run([sys.executable, "-m", "interp.cli", "evaluate", "--checkpoint", str(checkpoint), "--out",
                  str(tmp_path), "--tasks", "8", "--steps", "2", "--n", "64", "--inits", "random", "--protocols",
                  "main", "shift"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "summary.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == (1 + 4) * 3 and {"model_median", "lloyd_median", "kmeanspp_1", "kmeanspp_10"} <= set(rows[0])
    page = (tmp_path / "evaluation.html").read_text()
    assert "plotly" in page.lower() and "mean log objective" in page
    bad = run([sys.executable, "-m", "interp.cli", "evaluate", "--checkpoint", "nope.safetensors", "--out",
               str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "no checkpoint" in bad.stderr


def test_scikit_learn_columns_match_an_independent_run(checkpoint):
    """kmeanspp_1 / kmeanspp_10: the mean log inertia of scikit-learn's KMeans on the same tasks, recomputed here from
    the task sampler and KMeans' own inertia_."""
    import numpy as np
    import torch
    from sklearn.cluster import KMeans

    from interp.tasks import sample_tasks

    config = EvalConfig(n_tasks=6, steps=2, inits=("random", "kmeans++"))
    base = TaskConfig(n=64, d=4, k=3)
    rows = evaluate({"a": load_model(checkpoint)}, base, config)
    tasks = sample_tasks(base, 6, torch.Generator().manual_seed(config.seed)).points.double().numpy()
    for n_init in (1, 10):
        expected = np.mean([np.log(KMeans(3, n_init=n_init, random_state=config.seed + i).fit(task).inertia_)
                            for i, task in enumerate(tasks)])
        assert {round(row[f"kmeanspp_{n_init}"], 6) for row in rows} == {round(float(expected), 6)}
    assert rows[0]["kmeanspp_10"] <= rows[0]["kmeanspp_1"] + 1e-9  # ten restarts keep the best of ten
    summary = summarise(rows)
    assert summary[0]["kmeanspp_10"] == rows[0]["kmeanspp_10"]
    assert "kmeanspp_1" not in evaluate({"a": load_model(checkpoint)}, base,
                                        EvalConfig(n_tasks=2, steps=1, inits=("random",), baselines=False))[0]


def test_slot_order_of_the_evaluation(checkpoint):
    model = load_model(checkpoint)
    base = TaskConfig(n=64, d=4, k=3)

    def final(slot_order):
        config = EvalConfig(n_tasks=8, steps=3, inits=("random",), slot_order=slot_order, baselines=False)
        return evaluate({"a": model}, base, config)[-1]["model"]

    assert final(None) == final("fixed")  # the tiny checkpoint recommends nothing: the fixed order
    assert final("shuffle") == final("shuffle") != final("fixed")  # seeded, and the order matters to this model
    with pytest.raises(ValueError, match="slot_order"):
        EvalConfig(slot_order="sorted")
    with pytest.raises(ValueError, match="baselines must be a bool"):
        EvalConfig(baselines="yes")
