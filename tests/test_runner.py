"""The studies' runner (``python -m analyses``): the registry holds every section of RESULTS.md, ``render --check``
reproduces RESULTS.md and README.md byte for byte from the committed files (and fails on a stale one), a study
folder made from the template is found and runs, a run is resumable and locked, bad input gets one line."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from child_processes import run as run_child

from analyses import _studies as S
from analyses import readme
from analyses.framework import budgets, registry, runner
from analyses.framework.grid import GridStudy
from analyses.framework.study import MeasuredStudy

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--set", "d=2", "k=3", "n=24", "batch=4", "val_tasks=8", "eval_every=5", "--steps", "10", "--seeds", "0",
        "1", "--eval-tasks", "4", "--eval-steps", "3", "--workers", "1"]


def analyses(*args: str, timeout: float = 600):
    return run_child([sys.executable, "-m", "analyses", *args], cwd=ROOT, capture_output=True, text=True,
                     timeout=timeout)


# ----- the registry ------------------------------------------------------------------------------------------------
def test_every_section_of_results_md_is_written_by_one_registered_study():
    in_results = list(readme.study_sections(S.RESULTS_MD.read_text()))
    owned = registry.sections()
    assert sorted(owned) == sorted(in_results), "sections without a study, or studies whose section is missing"
    for name in registry.names():  # every folder declares a study of a known kind
        assert isinstance(registry.get(name), (GridStudy, MeasuredStudy)), name


def test_the_campaign_names_registered_studies_at_budgets_they_have():
    names = registry.names()
    for study, budget in budgets.CAMPAIGN:
        assert study in names and budget in budgets.NAMES
        declared = registry.get(study)
        assert isinstance(declared, GridStudy) or budget in declared.arguments, (study, budget)
    assert len(set(budgets.CAMPAIGN)) == len(budgets.CAMPAIGN)


def test_the_stability_cells_count_ten_seeds_at_the_papers_budget():
    assert budgets.budget("stability_d32_k25", "paper").seeds == budgets.SEEDS + budgets.MORE_SEEDS
    assert budgets.budget("lr", "paper").seeds == budgets.SEEDS and budgets.budget("lr", "paper").steps == 10_000


def test_the_guide_shows_a_whole_study_of_at_most_40_lines():
    """analyses/README.md shows embedding_d8_k8 whole: every line of its files' code (after the module docstring) is
    in the guide, and they are at most 40 lines together."""
    folder = registry.FOLDER / "embedding_d8_k8"
    guide = (ROOT / "analyses" / "README.md").read_text()
    total = 0
    files = sorted(folder.glob("*.py"))
    assert [path.name for path in files] == ["__init__.py", "claims.py", "reading.py"]
    for path in files:
        text = path.read_text()
        total += len(text.splitlines())
        code = text.split('"""', 2)[2]  # after the module docstring
        for line in code.splitlines():
            assert line.split("  #")[0] in guide, f"{path.name}: {line!r} is not in analyses/README.md"
    assert total <= 40


def test_the_template_declares_a_valid_grid_study(tmp_path):
    """A copy of the template is a study the runner can plan: its fields make valid TrainConfigs."""
    from analyses.framework.grid import arguments, check_study

    template = registry.FOLDER / "_template"
    assert "_template" not in registry.names()  # the template itself is not a study
    namespace: dict = {}
    exec(compile((template / "__init__.py").read_text(), str(template / "__init__.py"), "exec"), namespace)
    study = namespace["STUDY"]
    assert isinstance(study, GridStudy)
    check_study("copy", study, arguments(budgets.QUICK, tmp_path), {}, ("STUDY",))


# ----- render ------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_render_check_reproduces_the_documents_byte_for_byte():
    result = analyses("render", "--check")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "RESULTS.md: as the committed files give it" in result.stdout
    assert "README.md: as the committed files give it" in result.stdout
    assert "claims.md: as the committed files give it" in result.stdout


@pytest.mark.slow
def test_render_check_fails_on_a_stale_document_and_render_rewrites_it(tmp_path, monkeypatch, capsys):
    results_md = tmp_path / "RESULTS.md"
    readme_md = tmp_path / "README.md"
    shutil.copyfile(S.RESULTS_MD, results_md)
    shutil.copyfile(runner.README, readme_md)
    committed = results_md.read_text()
    stale = committed.replace("| embedding=onehot | 5 (0) | 0.881 [0.871, 0.882]",
                              "| embedding=onehot | 5 (0) | 0.811 [0.871, 0.882]")
    assert stale != committed
    results_md.write_text(stale)
    monkeypatch.setattr(S, "RESULTS_MD", results_md)
    monkeypatch.setattr(runner, "README", readme_md)
    monkeypatch.setattr(runner, "CLAIMS_MD", tmp_path / "claims.md")
    shutil.copyfile(ROOT / "docs" / "claims.md", tmp_path / "claims.md")
    assert runner.render(check=True) == 1
    assert "-| embedding=onehot | 5 (0) | 0.811" in capsys.readouterr().out and results_md.read_text() == stale
    assert runner.render(check=False) == 0
    assert results_md.read_text() == committed and readme_md.read_text() == runner.README.read_text()


# ----- run ---------------------------------------------------------------------------------------------------------
def test_list_names_every_study_and_plan_reads_the_committed_rows():
    listed = analyses("list")
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == registry.names()
    planned = analyses("plan", "lr", "--budget", "paper")
    assert planned.returncode == 0
    assert planned.stdout.strip() == "lr.csv: nothing to train (every seed's row is written)"
    quick = analyses("plan", "lr", "--budget", "quick", "--out", str(ROOT / "analyses" / "results" / "studies"))
    assert re.fullmatch(r"lr\.csv: 20 seed runs to train \(lr=0\.001: 0 1 2 3 4; .*\)", quick.stdout.strip())


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "ray"])
def test_a_tiny_grid_study_runs_resumes_and_names_its_command(tmp_path, backend):
    out = tmp_path / "out"
    first = analyses("run", "lr", "--budget", "quick", "--backend", backend, *TINY, "--out", str(out),
                     "--checkpoints", str(tmp_path / "ck"))
    assert first.returncode == 0, first.stderr[-3000:]
    rows = (out / "lr.csv").read_text().splitlines()
    assert len(rows) == 1 + 4 * 2  # header, 4 learning rates x 2 seeds
    section = readme.study_sections((out / "RESULTS.md").read_text())["lr"]
    command = ("python -m analyses run lr --budget quick --set d=2 k=3 n=24 batch=4 val_tasks=8 eval_every=5 "
               "--steps 10 --eval-tasks 4 --eval-steps 3 --seeds 0 1")
    assert f"Command: `{command}`" in section and "(`python -m analyses run lr`)" in section
    assert "Budget: d=2, k=3, n=24, steps=10, batch=4, val_tasks=8, eval_every=5; 2 seeds (0, 1)" in section
    again = analyses("plan", "lr", "--budget", "quick", *TINY, "--out", str(out))
    assert again.stdout.strip() == "lr.csv: nothing to train (every seed's row is written)"
    assert json.loads((out / "lr_training.json").read_text())["rows"]


def test_a_second_run_of_a_study_is_refused_while_one_holds_its_lock(tmp_path):
    from interp.training.lock import checkpoint_lock

    out = tmp_path / "out"
    out.mkdir()
    with checkpoint_lock(out / "lr"):  # as a running `python -m analyses run lr` holds it
        result = analyses("run", "lr", "--budget", "quick", "--backend", "local", *TINY, "--out", str(out),
                          "--checkpoints", str(tmp_path / "ck"))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "is being written by" in result.stderr or "busy" in result.stderr.lower(), result.stderr
    assert not (out / "lr.csv").exists()


@pytest.mark.parametrize("args,message", [
    (["run", "nope"], "STUDY: no study 'nope'; known: "),
    (["plan", "best_model", "--budget", "quick"], "--budget: best_model runs at paper, not quick"),
    (["run", "explain", "--steps", "5"], "--steps: explain is a measurement"),
    (["run", "lr", "--steps", "0"], "argument --steps: expected an integer >= 1, got 0"),
    (["run", "lr", "--set", "nope=1"], "unknown training config field 'nope'"),
    (["plan", "lr", "--budget", "huge"], "argument --budget: invalid choice: 'huge'"),
    (["render", "--check", "extra"], "unrecognized arguments: extra"),
])
def test_bad_input_gets_one_line_naming_the_argument(args, message):
    result = analyses(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


def _results_state() -> dict[str, bytes]:
    """Every file under analyses/results/ and the two documents, with its bytes."""
    paths = [*sorted((ROOT / "analyses" / "results").rglob("*")), S.RESULTS_MD, runner.README]
    return {str(path): path.read_bytes() for path in paths if path.is_file() and not path.name.endswith(".lock")}


@pytest.mark.slow
@pytest.mark.parametrize("study", ["variants", "multistep", "slots", "bench_training", "inference_embedding"])
def test_a_measurement_runs_at_the_quick_budget_without_touching_the_committed_results(study):
    """The quick budget of a measurement writes under runs/analyses/quick/, never over the committed results."""
    before = _results_state()
    result = analyses("run", study, "--budget", "quick")
    assert result.returncode == 0, result.stderr[-3000:]
    after = _results_state()
    changed = [path for path in before.keys() | after.keys() if before.get(path) != after.get(path)]
    assert changed == [], f"the quick run of {study} changed {changed}"
