"""Every study script runs end to end at a tiny size; its CSV, training curves, figure and RESULTS section are checked
for content."""

import csv
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import child_processes
import pytest
from child_processes import running

from analyses import figures

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--steps", "10", "--seeds", "0", "1", "--eval-tasks", "4", "--eval-steps", "3", "--workers", "1"]
TINY_SET = ["batch=4", "val_tasks=8", "eval_every=5"]


def run(script, *args):
    result = child_processes.run([sys.executable, "-m", "analyses." + script.removesuffix(".py"), *args],
                                 cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def runner(study, *args):
    """``python -m analyses run STUDY --budget quick --backend local ...`` (the runner; its output)."""
    return run("__main__", "run", study, "--budget", "quick", "--backend", "local", *args)


def rows_of(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def check_section(text, study, n_rows):
    assert f"## Study `{study}`" in text and "Command: `python -m analyses" in text and "Budget:" in text
    numeric_rows = [line for line in text.splitlines()
                    if line.startswith("| ") and "**" not in line and re.search(r"\d\.\d{3}", line)]
    assert len(numeric_rows) >= n_rows
    verdicts = re.findall(r"\*\*(reproduced|not reproduced|undecided at this budget)\*\*", text)
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
    out = runner(study, *args, "--out", str(tmp_path), "--checkpoints", str(tmp_path / "ck"),
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
    runner(study, *args, "--out", str(tmp_path), "--checkpoints", str(tmp_path / "ck"),
           "--results-md", str(results_md))  # a re-run (all rows done) replaces its section, never duplicates it
    assert results_md.read_text().count(f"<!-- study:{study} -->") == 1
    assert len(rows_of(tmp_path / f"{study}.csv")) == grid_size * 2


@pytest.mark.slow
def test_score_only_trains_nothing_and_reproduces_the_section(tmp_path):
    """--score-only scores the rows already written (no checkpoint is needed: the curves are in the
    _histories.jsonl); on a table without rows it stops with a clear message."""
    args = ["--set", "k=3", "n=24", *TINY_SET, *TINY, "--out", str(tmp_path), "--checkpoints",
            str(tmp_path / "ck")]
    first = run("studies.py", "--study", "d", *args)
    for path in (tmp_path / "ck").iterdir():
        path.unlink()
    again = run("studies.py", "--study", "d", *args, "--score-only")
    assert not list((tmp_path / "ck").iterdir())  # nothing trained
    def strip(text):  # the section, without the command line (which differs by --score-only)
        section = text[text.index("## Study `d`"):]
        return [line for line in section.splitlines() if not line.startswith("Command:")]

    assert strip(again) == strip(first)
    lr_args = ["--set", "d=2", *args[1:]]  # args[0] is "--set": d joins the fixed fields
    result = child_processes.run([sys.executable, "-m", "analyses.studies", "--study", "lr", *lr_args,
                                  "--score-only"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode != 0 and "has no rows of this grid" in result.stderr


@pytest.mark.slow
def test_only_grid_trains_a_subset_and_a_later_run_completes_the_grid(tmp_path):
    """--only-grid trains only the named values of a grid field (two runs can share a study's grid points); the
    section is scored over the whole grid, and a later run without it trains only what is missing."""
    args = ["--set", "k=3", "n=24", *TINY_SET, *TINY, "--out", str(tmp_path), "--checkpoints", str(tmp_path / "ck")]
    run("studies.py", "--study", "d", *args, "--only-grid", "d=4,16")
    assert sorted({row["label"] for row in rows_of(tmp_path / "d.csv")}) == ["d=16", "d=4"]
    assert len(rows_of(tmp_path / "d.csv")) == 4  # two grid points x two seeds
    run("studies.py", "--study", "d", *args)
    rows = rows_of(tmp_path / "d.csv")
    assert len(rows) == 8 and sorted({row["label"] for row in rows}) == ["d=16", "d=32", "d=4", "d=8"]
    for bad, message in ((["k=6"], "'k' is not a grid field"), (["d=5"], "d values [5] are not in the study's grid"),
                         (["d=4", "d=8"], "names a field twice")):
        result = child_processes.run([sys.executable, "-m", "analyses.studies", "--study", "d", *args, "--only-grid",
                                      *bad], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert result.returncode != 0 and "--only-grid" in result.stderr and message in result.stderr, result.stderr


@pytest.mark.slow
def test_train_only_writes_the_rows_and_leaves_summary_and_section_to_a_score_only_run(tmp_path):
    args = ["--set", "k=3", "n=24", *TINY_SET, *TINY, "--out", str(tmp_path), "--checkpoints", str(tmp_path / "ck"),
            "--only-grid", "d=4"]
    out = run("studies.py", "--study", "d", *args, "--train-only")
    assert len(rows_of(tmp_path / "d.csv")) == 2 and len((tmp_path / "d_histories.jsonl").read_text().splitlines()) == 2
    assert not (tmp_path / "d_training.json").exists() and "## Study" not in out
    assert out.strip().splitlines()[-1] == "d.csv: 2 rows of this run; summary and section not written"
    check_section(run("studies.py", "--study", "d", *args[:-2], "--score-only"), "d", 1)  # the whole grid scored
    assert (tmp_path / "d_training.json").exists()


@pytest.mark.slow
def test_embedding_ablation_tiny(tmp_path):
    out = run("ablate_embedding.py", "--pairs", "4x6", "4x16", "--n", "24", "--set", *TINY_SET, *TINY,
              "--out", str(tmp_path), "--checkpoints", str(tmp_path / "ck"))
    for d, k in ((4, 6), (4, 16)):
        rows = rows_of(tmp_path / f"embedding_d{d}_k{k}.csv")
        assert sorted({r["label"] for r in rows}) == ["embedding=binary", "embedding=none", "embedding=onehot"]
        assert len(rows) == 6 and all(json.loads(r["config"])["d"] == d and json.loads(r["config"])["k"] == k
                                      for r in rows)
        assert all(math.isfinite(float(r["model_log_objective"])) for r in rows)
        check_section(out, f"embedding_d{d}_k{k}", 3)
        assert f"(`embedding.d{d}k{k}.twenty_step_order`)" in out
        assert len((tmp_path / f"embedding_d{d}_k{k}_histories.jsonl").read_text().splitlines()) == 6
    across = out.split("## Study `embedding_across_pairs`")[1]
    assert re.search(r"^\| 4 \| 6 \| 2 \| [\d.]+ \| [\d.]+ \| [+-][\d.]+% \|$", across, re.M)
    # two seeds and no (32, 6) rows: every across-pairs claim is undecided by its control
    assert len(re.findall(r"\*\*undecided at this budget\*\*", across)) == 3
    assert "(`embedding.onehot_faster_at_small_d`)" in across


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
    moved = "python -m analyses.studies.multistep.measure"  # what the old name runs, and names
    assert out.startswith(f"## Study `multistep`: re-embedding vs naive stacking (`{moved}`)")
    assert f"Command: `{moved} --tasks 3" in out and "Budget:" in out
    assert len([line for line in out.splitlines() if re.match(r"\| \w+ \(1\) \| (reembedded|stacked|lloyd) \|", line)
                and re.search(r"\d\.\d{3}", line)]) == 9  # 3 embeddings x (re-embedded, stacked, Lloyd)
    # one checkpoint per embedding: the paper's findings are described on them, never given a verdict
    described = [line for line in out.splitlines() if line.endswith((" | yes |", " | no |"))]
    assert len(described) == 3 and "| holds on these checkpoints |" in out
    assert not re.search(r"\*\*(reproduced|not reproduced|undecided at this budget)\*\*", out)
    lines = figures.multistep_figure(tmp_path / "multistep.json").data  # 3 embeddings x 2 modes, then Lloyd
    assert [trace.name for trace in lines][-1] == "Lloyd" and len(lines) == 7


# ----- the sections decide claims through analyses.claims -------------------------------------------------------
def _rows(field, values, seeds, relative):
    return [{"study": field, "name": f"{field}={value}_seed={seed}", "label": f"{field}={value}", "seed": str(seed),
             "status": "ok", "relative_objective": str(relative(value, seed)),
             "config": json.dumps({field: value, "tau": 0.1, "steps": 10000})} for value in values for seed in seeds]


def test_sections_decide_the_registry_claims_of_their_study():
    """The d study's section decides exactly analyses.claims' d claim: reproduced when every seed at every d beats
    one-step Lloyd, not reproduced when one d misses, undecided with fewer than five seeds (the control)."""
    from analyses import _studies as S
    from analyses import claims as C
    from analyses.framework import grid, registry

    study = registry.get("d")
    seeds = range(5)
    rows = _rows("d", (4, 8, 16, 32), seeds, lambda d, seed: 0.9)
    histories = S.by_label(rows)  # any curves: this claim reads none
    histories = {label: [[{"step": 0, "relative_objective": 1.0}]] * len(group) for label, group in histories.items()}
    [(claim, verdict)] = grid.decided(study, rows, histories)
    assert claim.id == "d.beats_one_step_lloyd_at_every_d" and verdict.outcome == C.REPRODUCED
    missed = _rows("d", (4, 8, 16, 32), seeds, lambda d, seed: 1.1 if d == 32 else 0.9)
    assert grid.decided(study, missed, histories)[0][1].outcome == C.NOT_REPRODUCED
    few = [row for row in rows if row["seed"] != "4"]
    few_histories = {label: curves[:4] for label, curves in histories.items()}
    assert grid.decided(study, few, few_histories)[0][1].outcome == C.UNDECIDED
    assert grid.decided(study, rows, None)[0][1].outcome == C.REPRODUCED  # no curves needed: still decided


def test_claims_that_read_curves_are_undecided_when_the_curves_were_not_kept():
    from analyses import claims as C
    from analyses.framework import grid, registry

    study = registry.get("tau_loss")
    results = grid.decided(study, [], None)
    assert [claim.id for claim, _ in results] == [claim.id for claim in C.claims_of("tau_loss")]
    for claim, verdict in results:
        reads_curves = bool(claim.rule.history_keys or claim.control.history_keys)
        if reads_curves:
            assert verdict.outcome == C.UNDECIDED and "not kept" in verdict.figure
    assert any(claim.rule.history_keys or claim.control.history_keys for claim, _ in results)


def test_rewriting_a_section_leaves_the_file_as_writing_it_first(tmp_path):
    """A section written, then rewritten with the same text, gives the same file, whether it is the last section
    or followed by another (a fresh clone re-scoring RESULTS.md must reproduce it byte for byte)."""
    from analyses._studies import write_section

    path = tmp_path / "R.md"
    write_section("a", "## A\nfirst\n", path)
    once = path.read_text()
    write_section("a", "## A\nfirst\n", path)
    assert path.read_text() == once == "# Results of the analyses\n\n<!-- study:a -->\n## A\nfirst\n<!-- /study:a -->\n"
    write_section("b", "## B\n", path)
    both = path.read_text()
    write_section("a", "## A\nfirst\n", path)
    write_section("b", "## B\n", path)
    assert path.read_text() == both and both.startswith(once + "\n<!-- study:b -->")


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_stops_a_study_at_once_with_its_workers(tmp_path, workers):
    """Ctrl-C (SIGINT to the process group) ends a study within seconds, whether it trains in this process (one
    worker) or in a pool (its workers are terminated, queued grid points included): a run of 10^6 steps, stopped once
    its first checkpoint is written."""
    import os
    import signal
    import time

    checkpoints = tmp_path / "ck"
    command = [sys.executable, "-m", "analyses.studies", "--study", "lr", "--set", "d=2", "k=3", "n=24", *TINY_SET,
               "--steps", "1000000", "--seeds", "0", "--eval-tasks", "2", "--eval-steps", "2", "--workers", workers,
               "--out", str(tmp_path), "--checkpoints", str(checkpoints)]
    # through the tests' helper: its own session, and SIGINT at its default even when this suite runs with it ignored
    with running(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as study:
        deadline = time.monotonic() + 120
        while not list(checkpoints.glob("*.safetensors")) and study.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list(checkpoints.glob("*.safetensors")), "no checkpoint written: training never started"
        interrupted = time.monotonic()
        os.killpg(study.pid, signal.SIGINT)
        _, stderr = study.communicate(timeout=60)
        took = time.monotonic() - interrupted
        assert study.returncode == 130, stderr[-2000:]
        assert "interrupted; finished rows stay in the CSV and checkpoints resume" in stderr and took < 20
        with pytest.raises(ProcessLookupError):  # no worker of the group is left running (before the block kills it)
            os.killpg(study.pid, 0)
