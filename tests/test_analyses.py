"""The benchmark scripts run end to end at tiny sizes, print their tables and store them as JSON that prints back
the same text; the variants study writes its CSV, from which its figure is drawn."""

import json
import re
import sys
from pathlib import Path

import child_processes
import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # each test runs a script end to end in a subprocess


def run(script: str, *args: str) -> str:
    module = "analyses." + script.removesuffix(".py").replace("/", ".")
    result = child_processes.run([sys.executable, "-m", module, *args],
                                 cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


INFERENCE, TRAINING = "analyses.studies.inference_embedding.measure", "analyses.studies.bench_training.measure"


def _printed_back(out: str, folder, module: str, *names: str) -> None:
    """Each stored table prints back as printed, with the command that ran (``python -m <module> ...``)."""
    from analyses._timing import printed

    for name in names:
        data = json.loads((folder / f"{name}.json").read_text())
        assert data["command"].startswith(f"python -m {module} ") and "--quick" in data["command"]
        assert printed(data) in out, name  # the stored cells give back exactly the printed table


def test_bench_inference_quick(tmp_path):
    out = run("bench_inference.py", "--quick", "--rounds", "1", "--embedding-rounds", "1", "--results-md",
              str(tmp_path / "R.md"), "--json", str(tmp_path))  # the old name: it runs the moved module
    _printed_back(out, tmp_path, INFERENCE, "inference_lloyd", "inference_embeddings", "inference_evaluation")
    assert "trajectories of both forwards identical: yes" in out
    for name in ("interp forward (attn_xx once)", "forward recomputing attn_xx"):
        assert len(re.findall(rf"{re.escape(name)}\s+[\d.]+\s+[\d.]+", out)) == 2, name  # 1 and 2 threads
    for name in ("transformer forward", "reference Lloyd", "transformer run_with_cache", "sklearn KMeans loop"):
        assert len(re.findall(rf"{name}\s+[\d.]+\s+[\d.]+", out)) == 2, name  # 1 and 2 threads
    assert re.search(r"^\s*25\s+25/5\s", out, re.M)
    section = (tmp_path / "R.md").read_text()
    assert "<!-- study:inference_embedding -->" in section
    assert re.search(r"^\| 25 \| 25/5 \| [\d.]+/[\d.]+ \| [\d.]+x \| .* \| 5.24/4.99 \[1.05x\] \| 4.0% \|$",
                     section, re.M)


def test_bench_inference_profile_quick(tmp_path, capsys, monkeypatch):
    """The profile table: three competitors at 1 and 2 threads, their operator counts per call, and the cache's size
    as the sum of the bytes of the tensors run_with_cache returns at the same sizes (run in this process: the
    subprocess runs of the other benchmarks already cover the command line)."""
    import torch

    from analyses.studies.inference_embedding import measure as bench_inference
    from interp.model.constructions import lloyd_transformer
    from interp.tasks import TaskConfig, init_centroids, sample_tasks

    argv = ["--quick", "--profile", "--rounds", "2", "--json", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", [str(ROOT / "analyses" / "bench_inference.py"), *argv])  # the stored command
    bench_inference.main(argv)  # under pytest (no __main__ of analyses) the command is named from argv[0]
    out = capsys.readouterr().out
    _printed_back(out, tmp_path, "analyses.bench_inference", "inference_profile")
    rows = json.loads((tmp_path / "inference_profile.json").read_text())["rows"]
    assert [(row[0], row[1]) for row in rows] == [(threads, name) for threads in ("1", "2") for name in
                                                  ("transformer forward", "reference Lloyd",
                                                   "transformer run_with_cache")]
    points = sample_tasks(TaskConfig(n=64, d=4, k=5), 4, 0).points  # the --quick sizes
    model = lloyd_transformer(4, 5, n_layers=3, dtype=torch.float32)
    _, cache = model.run_with_cache(points, init_centroids(points, 5, "random", 1))
    megabytes = sum(tensor.numel() * tensor.element_size() for tensor in cache.values()) / 2**20
    for threads in ("1", "2"):
        forward, lloyd, cached = (row for row in rows if row[0] == threads)
        assert int(lloyd[3]) < int(forward[3])  # the construction dispatches more operators than Lloyd
        assert cached[5] == f"{len(cache)} entries, {megabytes:.1f} MB" and forward[5] == lloyd[5] == ""
        assert all(re.fullmatch(r"\w+ [\d.]+", top) for top in forward[4].split(", "))


def test_bench_training_quick(tmp_path):
    out = run("studies/bench_training/measure.py", "--quick", "--rounds", "1", "--loop-steps", "10", "--json",
              str(tmp_path))
    _printed_back(out, tmp_path, TRAINING, "training")
    assert re.search(r"interp\s+[\d.]+\s+1\.00", out) and re.search(r"reference\s+[\d.]+\s+[\d.]+", out)
    assert "projected 10,000 steps" in out


def test_bench_training_profile_quick(tmp_path):
    """The profile splits a step into its four phases. Their profiled time per step is the same step as the
    unprofiled median timed beside it, plus the profiler's own cost per operator: within a factor of a few of it,
    whatever the machine's load (a total over all profiled steps, or in the wrong unit, is 10x or 1000x off)."""
    out = run("bench_training.py", "--quick", "--profile", "--json", str(tmp_path))
    _printed_back(out, tmp_path, TRAINING, "training_profile")
    data = json.loads((tmp_path / "training_profile.json").read_text())
    (row,) = data["rows"]
    shares = [float(cell.rstrip("%")) for cell in row[3:7]]
    assert all(share >= 0 for share in shares) and shares[0] > 0 and shares[2] > 0, shares  # forward, backward
    plain_ms, profiled_ms = float(row[1]), float(row[2])
    assert 0.25 < profiled_ms / plain_ms < 6, (plain_ms, profiled_ms)
    assert int(row[7]) > 100  # a step dispatches hundreds of aten operators


def test_bench_training_unroll_quick(tmp_path):
    """Unrolled training: one row per T; each ratio is the measured figure over T x the T = 1 figure (so the T = 1
    row's ratios are 1), and a step's peak memory is positive."""
    out = run("bench_training.py", "--quick", "--unroll", "--rounds", "1", "--json", str(tmp_path))
    _printed_back(out, tmp_path, TRAINING, "training_unroll")
    rows = json.loads((tmp_path / "training_unroll.json").read_text())["rows"]
    assert [row[0] for row in rows] == ["1", "2", "4", "8"]
    assert float(rows[0][2]) == 1.0 and float(rows[0][4]) == 1.0
    for row in rows:
        assert float(row[1]) > 0 and float(row[3]) > 0
        # the columns are printed to 2 decimals: the ratio recomputed from them is exact to that rounding
        ms, one_ms, ratio = float(row[1]), float(rows[0][1]), float(row[2])
        rounding = ms / one_ms / int(row[0]) * (0.005 / ms + 0.005 / one_ms) + 0.005
        assert ms / one_ms / int(row[0]) == pytest.approx(ratio, abs=rounding + 1e-9)


def test_variants_study_tiny(tmp_path):
    import csv
    import math

    out = run("variants.py", "--tasks", "2", "--n", "60", "--out", str(tmp_path))
    assert "| Lloyd (reference) |" in out
    with open(tmp_path / "variants.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 6 * 13
    assert all(math.isfinite(float(r["log_inlier_objective"])) and -1 <= float(r["ari"]) <= 1 for r in rows)
    by = {(r["setting"], r["method"]): r for r in rows}
    for setting in {r["setting"] for r in rows}:  # exact constructions reproduce their references
        for reference, transformer in [("Lloyd (reference)", "Lloyd transformer"),
                                       ("trimmed normmax gamma=10 (reference)", "trimmed normmax gamma=10 transformer"),
                                       ("robust gamma=50 (reference)", "robust gamma=50 transformer"),
                                       ("k-medoids (reference)", "k-medoids transformer")]:
            a, b = by[(setting, reference)], by[(setting, transformer)]
            assert abs(float(a["log_inlier_objective"]) - float(b["log_inlier_objective"])) < 1e-9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["variants.csv"]  # data only; figures.py draws
    from analyses.figures import variants_figure

    bars = variants_figure(tmp_path / "variants.csv").data
    assert len(bars) == 2 * 13 and all(len(bar.x) == 6 for bar in bars)


def test_sweep_cli_is_resumable(tmp_path):
    import csv
    import math

    args = ["--study", "lr", "--field", "lr=0.01,0.1", "--steps", "20", "--set", "d=3", "k=2", "n=32",
            "batch=8", "val_tasks=16", "eval_every=10", "--eval-tasks", "8", "--eval-steps", "3", "--seeds", "0", "1",
            "--out", str(tmp_path)]
    first = run("sweep.py", *args)
    assert "4 rows in" in first
    with open(tmp_path / "lr.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(r["name"] for r in rows) == ["lr=0.01_seed=0", "lr=0.01_seed=1", "lr=0.1_seed=0", "lr=0.1_seed=1"]
    assert all(r["steps"] == "20" and math.isfinite(float(r["relative_objective"])) for r in rows)
    assert all(float(r["model_log_objective"]) > 0 and float(r["lloyd_log_objective"]) > 0 for r in rows)
    second = run("sweep.py", *args)  # finished rows are skipped, nothing is appended
    assert "4 rows in" in second and "relative" not in second.split("4 rows in")[0]
