"""The evaluation protocol and ``interp evaluate`` (paper 2 App. C): content of rows, CSV and figure."""

import csv
import math
import subprocess
import sys

import pytest

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
    for r in rows:
        if r["step"] == 0:  # same tasks, same initial centroids
            assert r["model"] == pytest.approx(r["lloyd"], rel=1e-6)
    summary = summarise(rows)
    assert all(s["seeds"] == 2 and s["model_low"] <= s["model_median"] <= s["model_high"] for s in summary)


@pytest.mark.slow  # the command line in a subprocess
def test_evaluate_command_writes_csv_and_html(checkpoint, tmp_path):
    result = subprocess.run([sys.executable, "-m", "interp.cli", "evaluate", "--checkpoint", str(checkpoint),
                             "--out", str(tmp_path), "--tasks", "8", "--steps", "2", "--n", "64",
                             "--inits", "random", "--protocols", "main", "shift"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "summary.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == (1 + 4) * 3 and {"model_median", "lloyd_median"} <= set(rows[0])
    page = (tmp_path / "evaluation.html").read_text()
    assert "plotly" in page.lower() and "mean log objective" in page
    bad = subprocess.run([sys.executable, "-m", "interp.cli", "evaluate", "--checkpoint", "nope.safetensors",
                          "--out", str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "no checkpoint" in bad.stderr
