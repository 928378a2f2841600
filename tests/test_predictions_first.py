"""Predictions were in git before their results.

A results file under analyses/results/ that tests predictions records the commit holding them
(``"prediction_commit"``: a hash, or ``{"commit": hash, ...}``, beside ``"predictions_file"``; or a record
``{"file": "analyses/predictions/...", "commit": hash}``). For each record:

* the prediction commit is a strict ancestor (``git merge-base --is-ancestor``) of the first commit in which the
  results file mentions it, and does not itself change the results file, so the predictions were committed before
  the results that name them;
* the predictions file is unchanged since that commit (``git diff --quiet``), so the predictions read today are the
  ones fixed first.

In a clone without history (a shallow clone, an exported tree) the commits cannot be looked up: those checks skip,
saying so; everything else still runs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from child_processes import run

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "analyses" / "results"
PREDICTIONS = ROOT / "analyses" / "predictions"


def _git(*args: str, root: Path = ROOT) -> subprocess.CompletedProcess:
    return run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)


def order_problem(root: Path, results: str, commit: str, predictions: str) -> str | None:
    """Why the record (results file, prediction commit, predictions file) in the repository ``root`` breaks
    "predictions first", or None when it holds."""
    first = _git("log", "--reverse", "--format=%H", f"-S{commit}", "--", results, root=root).stdout.split()
    if not first:
        return f"{results} mentions {commit} only in uncommitted changes: commit the results"
    changed = _git("diff-tree", "--no-commit-id", "--name-only", "-r", commit, root=root).stdout.split()
    if first[0] == commit or results in changed:
        return f"{results}: the predictions and their results are in one commit ({commit})"
    if _git("merge-base", "--is-ancestor", commit, first[0], root=root).returncode != 0:
        return f"{commit} (predictions) is not an ancestor of {first[0]} ({results})"
    if _git("diff", "--quiet", commit, "--", predictions, root=root).returncode != 0:
        return f"{predictions} changed after its commit {commit}"
    return None


def _records(value, path: str = "") -> list[tuple[str, str, str | None]]:
    """(where, prediction commit, predictions file or None) of every "prediction_commit" in a JSON value."""
    found = []
    if isinstance(value, dict):
        if "prediction_commit" in value:
            commit = value["prediction_commit"]
            commit = commit.get("commit") if isinstance(commit, dict) else commit
            found.append((path or "/", commit, value.get("predictions_file")))
        elif str(value.get("file", "")).startswith("analyses/predictions/") and "commit" in value:
            found.append((path or "/", value["commit"], value["file"]))  # {"file": ..., "commit": ...}
        for key, child in value.items():
            if key != "prediction_commit":
                found += _records(child, f"{path}/{key}")
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _records(child, f"{path}/{index}")
    return found


def _all_records() -> list[tuple[Path, str, str, str | None]]:
    return [(path, where, commit, predictions)
            for path in sorted(RESULTS.rglob("*.json"))
            for where, commit, predictions in _records(json.loads(path.read_text()))]


RECORDS = _all_records()


def _has_history() -> bool:
    shallow = _git("rev-parse", "--is-shallow-repository")
    return shallow.returncode == 0 and shallow.stdout.strip() == "false"


def test_records_name_a_commit_and_an_existing_predictions_file():
    assert RECORDS, "no results file records the commit of its predictions"
    for path, where, commit, predictions in RECORDS:
        assert isinstance(commit, str) and len(commit) == 40 and int(commit, 16) >= 0, (path, where, commit)
        assert predictions is not None and (ROOT / predictions).is_file(), (path, where, predictions)
        assert Path(predictions).parent == PREDICTIONS.relative_to(ROOT), predictions


def test_every_predictions_file_is_used_by_a_results_file():
    used = {predictions for _, _, _, predictions in RECORDS}
    unused = [p.relative_to(ROOT).as_posix() for p in PREDICTIONS.glob("*.json")
              if p.relative_to(ROOT).as_posix() not in used]
    assert not unused, f"predictions without results that name their commit: {unused}"


@pytest.mark.parametrize("record", RECORDS, ids=[f"{r[0].name}{r[1]}" for r in RECORDS])
def test_predictions_were_committed_before_their_results(record):
    path, where, commit, predictions = record
    if not _has_history():
        pytest.skip("a clone without history: commit order cannot be checked here")
    problem = order_problem(ROOT, path.relative_to(ROOT).as_posix(), commit, predictions)
    assert problem is None, problem


def test_the_order_check_fails_when_results_come_with_or_before_their_predictions(tmp_path):
    """The check on a repository of its own: predictions committed first pass; committed with their results, or
    edited afterwards, fail."""
    def commit_files(files: dict[str, str], message: str) -> str:
        for name, text in files.items():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text(text)
        _git("add", *files, root=tmp_path)
        _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message, root=tmp_path)
        return _git("rev-parse", "HEAD", root=tmp_path).stdout.strip()

    _git("init", "-q", root=tmp_path)
    first = commit_files({"p/first.json": "[1]"}, "predictions")
    commit_files({"r/first.json": json.dumps({"prediction_commit": first})}, "results")
    assert order_problem(tmp_path, "r/first.json", first, "p/first.json") is None
    together = commit_files({"p/together.json": "[2]", "r/together.json": "{}"}, "both")
    commit_files({"r/together.json": json.dumps({"prediction_commit": together})}, "the hash recorded")
    assert "in one commit" in order_problem(tmp_path, "r/together.json", together, "p/together.json")
    same = commit_files({"p/same.json": "[3]"}, "predictions")
    (tmp_path / "r/same.json").write_text(json.dumps({"prediction_commit": same}))
    assert "uncommitted" in order_problem(tmp_path, "r/same.json", same, "p/same.json")
    commit_files({"r/same.json": json.dumps({"prediction_commit": same})}, "results")
    commit_files({"p/same.json": "[4]"}, "a prediction edited after its results")
    assert "changed after its commit" in order_problem(tmp_path, "r/same.json", same, "p/same.json")
