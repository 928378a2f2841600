"""Every study script runs end to end at a tiny size; its CSV, training curves, figure and RESULTS section are checked
for content."""

import csv
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from analyses import figures

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--steps", "10", "--seeds", "0", "1", "--eval-tasks", "4", "--eval-steps", "3", "--workers", "1"]
TINY_SET = ["batch=4", "val_tasks=8", "eval_every=5"]


def run(script, *args):
    result = subprocess.run([sys.executable, "-m", "analyses." + script.removesuffix(".py"), *args], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def rows_of(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def check_section(text, study, n_rows):
    assert f"## Study `{study}`" in text and "Command: `python -m analyses." in text and "Budget:" in text
    numeric_rows = [line for line in text.splitlines()
                    if line.startswith("| ") and "**" not in line and re.search(r"\d\.\d{3}", line)]
    assert len(numeric_rows) >= n_rows
    verdicts = re.findall(r"\*\*(reproduced|not reproduced)\*\*", text)
    assert verdicts  # every study states at least one claim with a computed verdict


# (study, grid size, fixed-field overrides that make it tiny)
STUDIES = [("tau_loss", 8, ["d=2", "k=3", "n=24"]), ("lr", 4, ["d=3", "k=3", "n=24"]), ("n", 4, ["d=2", "k=3"]),
           ("k", 4, ["d=2", "n=32"]), ("d", 4, ["k=3", "n=24"]), ("family", 5, ["d=2", "k=3", "n=24"])]


@pytest.mark.slow
@pytest.mark.parametrize("study,grid_size,overrides", STUDIES, ids=[s[0] for s in STUDIES])
def test_study_runs_at_tiny_size(tmp_path, study, grid_size, overrides):
    if study == "n":  # the n study's grid is n itself: shrink the model and steps instead
        args = ["--set", *overrides, *TINY_SET, "--steps", "4", "--seeds", "0", "1", "--eval-tasks", "2",
                "--eval-steps", "2", "--workers", "1"]
    else:
        args = ["--set", *overrides, *TINY_SET, *TINY]
    results_md = tmp_path / "RESULTS.md"
    out = run("studies.py", "--study", study, *args, "--out", str(tmp_path), "--checkpoints", str(tmp_path / "ck"),
              "--results-md", str(results_md))
    rows = rows_of(tmp_path / f"{study}.csv")
    assert len(rows) == grid_size * 2 and len({r["label"] for r in rows}) == grid_size
    for row in rows:
        assert row["status"] in ("ok", "diverged")
        for name in ("relative_objective", "model_log_objective", "lloyd_log_objective", "loss_gap_mean"):
            assert math.isfinite(float(row[name])), (name, row)
        assert len(json.loads(row["model_curve"])) == len(json.loads(row["lloyd_curve"]))
    if study == "family":  # the 5 x 5 transfer grid
        assert all(len(json.loads(r["transfer"])) == 5 for r in rows)
        assert "Transfer grid" in out and out.count("| cauchy |") >= 1
    assert not list(tmp_path.glob("*.html")) and not (tmp_path / "plotly.min.js").exists()  # data only
    training = json.loads((tmp_path / f"{study}_training.json").read_text())
    assert list(training["curves"]) == list(dict.fromkeys(r["label"] for r in rows))
    assert sorted(tuple(key) for key in training["rows"]) == sorted((r["name"], int(r["steps"])) for r in rows)
    for curve in training["curves"].values():  # median and band of the seeds' relative validation objective
        assert len(curve["steps"]) == len(curve["median"]) and curve["steps"][0] == 0
        assert all(lo <= med <= hi for lo, med, hi in zip(curve["q25"], curve["median"], curve["q75"]))
    check_section(out, study, grid_size)
    assert f"Figure: `python -m analyses.figures --only {study}`" in out
    figure = figures.study_figure(tmp_path, study)  # drawn from the CSV and the training curves alone
    assert {trace.name for trace in figure.data if trace.name and trace.showlegend} == set(training["curves"])
    assert results_md.read_text().count(f"<!-- study:{study} -->") == 1
    run("studies.py", "--study", study, *args, "--out", str(tmp_path), "--checkpoints", str(tmp_path / "ck"),
        "--results-md", str(results_md))  # a re-run (all rows done) replaces its section, never duplicates it
    assert results_md.read_text().count(f"<!-- study:{study} -->") == 1
    assert len(rows_of(tmp_path / f"{study}.csv")) == grid_size * 2


@pytest.mark.slow
def test_embedding_ablation_tiny(tmp_path):
    out = run("ablate_embedding.py", "--pairs", "3x4", "2x3", "--n", "24", "--set", *TINY_SET, *TINY,
              "--out", str(tmp_path), "--checkpoints", str(tmp_path / "ck"))
    for d, k in ((3, 4), (2, 3)):
        rows = rows_of(tmp_path / f"embedding_d{d}_k{k}.csv")
        assert sorted({r["label"] for r in rows}) == ["embedding=binary", "embedding=none", "embedding=onehot"]
        assert len(rows) == 6 and all(json.loads(r["config"])["d"] == d and json.loads(r["config"])["k"] == k
                                      for r in rows)
        assert all(math.isfinite(float(r["model_log_objective"])) for r in rows)
        check_section(out, f"embedding_d{d}_k{k}", 3)
    assert "onehot, binary < Lloyd < none" in out
    across = out.split("## Study `embedding_across_pairs`")[1]
    assert re.search(r"^\| 2 \| 3 \| [\d.]+ \| [\d.]+ \| [+-][\d.]+% \|$", across, re.M)
    assert re.search(r"one-hot converges faster than binary at small d .* \*\*(not )?reproduced\*\*", across)


@pytest.mark.slow
def test_multistep_tiny_on_the_shipped_models(tmp_path):
    out = run("multistep.py", "--tasks", "3", "--steps", "3", "--out", str(tmp_path), "--threads", "1")
    data = json.loads((tmp_path / "multistep.json").read_text())
    assert set(data["curves"]) == {"onehot", "binary", "none"}
    for runs in data["curves"].values():
        for curve in runs:
            assert len(curve["reembedded"]) == len(curve["stacked"]) == len(curve["lloyd"]) == 4
            assert curve["reembedded"][0] == pytest.approx(curve["lloyd"][0])  # the same start
            assert curve["reembedded"][1] == pytest.approx(curve["stacked"][1])  # step 1 is the same layer
            assert all(math.isfinite(v) for v in curve["reembedded"] + curve["lloyd"])
    check_section(out, "multistep", 3)
    lines = figures.multistep_figure(tmp_path / "multistep.json").data  # 3 embeddings x 2 modes, then Lloyd
    assert [trace.name for trace in lines][-1] == "Lloyd" and len(lines) == 7


@pytest.mark.slow
def test_seed_benchmark_quick():
    out = run("bench_seeds.py", "--quick", "--seeds", "2", "--steps", "5", "--rounds", "1", "--threads", "1",
              "--n", "24", "--no-json")
    row = re.search(r"d=4 k=6 n=24\s+1\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)x\s+([\d.e+-]+)", out)
    assert row, out
    assert float(row.group(4)) < 1e-3  # both ways computed the same runs


# ----- the verdict rules, on made-up rows whose answer is known ----------------------------------------------
def _rows(label, finals, lloyd=5.0, relative=0.9, gap=0.1, n=128, tau=0.1, status="ok"):
    return [{"label": label, "status": status, "model_log_objective": str(v), "lloyd_log_objective": str(lloyd),
             "relative_objective": str(relative), "loss_gap_mean": str(gap), "loss_gap_max": str(gap),
             "config": json.dumps({"n": n, "tau": tau}), "transfer": "{}"} for v in finals]


def _studies():
    from analyses import studies

    return studies


def test_tau_rule_reads_higher_tau_worse_the_right_way_round():
    studies = _studies()
    history = [[{"step": 0, "loss": None, "relative_objective": 2.0},
                {"step": 50, "loss": 1.0, "relative_objective": 1.0}]]
    groups, histories = {}, {}
    for loss in ("softmin", "sparsemax"):
        for tau, final in ((0.1, 4.0), (1.0, 4.5)):  # higher tau ends worse: the claim holds
            label = f"loss={loss}_tau={tau}"
            groups[label] = _rows(label, [final] * 3, tau=tau)
            histories[label] = history * 3
    claims = {c[0][:20]: c for c in studies.check_tau_loss(groups, histories)}
    assert claims["higher tau converges"][2] is True
    for loss in ("softmin", "sparsemax"):  # now lower tau ends worse: the claim fails
        groups[f"loss={loss}_tau=0.1"] = _rows(f"loss={loss}_tau=0.1", [5.0] * 3, tau=0.1)
    claims = {c[0][:20]: c for c in studies.check_tau_loss(groups, histories)}
    assert claims["higher tau converges"][2] is False


def test_n_rule_compares_with_lloyd_not_raw_objectives():
    studies = _studies()
    # raw objectives grow with log n; model - Lloyd is the same at every n: no effect of n
    groups = {f"n={n}": _rows(f"n={n}", [4.9 + math.log(n), 4.8 + math.log(n), 5.0 + math.log(n)],
                              lloyd=5.0 + math.log(n), n=n) for n in (128, 1024)}
    assert studies.check_n(groups, {})[0][2] is True
    groups["n=1024"] = _rows("n=1024", [7.0, 7.1, 7.2], lloyd=5.0, n=1024)  # far worse than Lloyd at n = 1024
    assert studies.check_n(groups, {})[0][2] is False


def test_lr_rule_needs_a_stable_baseline():
    studies = _studies()
    calm = [{"step": s, "loss": 1.0, "relative_objective": 2.0 - s / 100} for s in range(0, 100, 10)]
    jumpy = calm[:3] + [{"step": 30, "loss": 1.0, "relative_objective": 9.0}] + calm[4:]
    groups = {label: _rows(label, [f] * 3) for label, f in (("lr=0.001", 5.5), ("lr=0.01", 4.0), ("lr=0.1", 6.0),
                                                            ("lr=1.0", 9.0))}
    histories = {"lr=0.001": [calm] * 3, "lr=0.01": [calm] * 3, "lr=0.1": [jumpy] * 3, "lr=1.0": [jumpy] * 3}
    best, unstable = studies.check_lr(groups, histories)
    assert best[2] is True and unstable[2] is True
    histories["lr=0.01"] = [jumpy] * 3  # the baseline jumps as much: the verdict must not say reproduced
    assert studies.check_lr(groups, histories)[1][2] is False
