"""Predictions were in git before their results.

A results file under analyses/results/ that tests predictions records the commit holding them
(``"prediction_commit"``: a hash, or ``{"commit": hash, ...}``, beside ``"predictions_file"``; or a record
``{"file": "analyses/predictions/...", "commit": hash}``). For each record:

* the measured record it belongs to (the object holding the reference when it holds more than the reference, else
  the nearest object above it: the whole file for a list of references at its top) is looked up in every committed
  version of the results file, and the first commit holding it is where the results were added;
* the prediction commit is a strict ancestor (``git merge-base --is-ancestor``, and not the same commit) of that
  first results commit, so the predictions were committed before the results, not merely before the hash was
  written into them;
* the predictions file is as in that commit (``git diff --quiet``) and no later commit touched it
  (``git log COMMIT..HEAD`` empty), so the predictions read today are the ones fixed first.

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


REFERENCE_KEYS = {"file", "commit", "modified_since", "prediction_commit", "predictions_file"}


def measured_path(value, where: str) -> list[str]:
    """The keys leading to the measured record a reference at ``where`` (as ``_records`` names it) belongs to: the
    object holding the reference when it holds anything besides the reference (results, hypotheses, models), else
    the nearest object above it (a list of references at the top of a file belongs to the whole file)."""
    keys = [key for key in where.split("/") if key]
    while keys:
        node = _at(value, keys)
        if isinstance(node, dict) and set(node) - REFERENCE_KEYS:
            return keys
        keys = keys[:-1]
    return keys


def _at(value, keys: list[str]):
    """The value under ``keys`` (dict keys, list indices as text), or KeyError."""
    for key in keys:
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            raise KeyError(key)
    return value


def first_results_commit(root: Path, results: str, keys: list[str]) -> str | None:
    """The first commit in which the results file holds a value under ``keys`` (the whole file: ``[]``)."""
    for commit in _git("log", "--reverse", "--format=%H", "--", results, root=root).stdout.split():
        shown = _git("show", f"{commit}:{results}", root=root)
        if shown.returncode != 0:  # deleted in this commit
            continue
        try:
            _at(json.loads(shown.stdout), keys)
        except (KeyError, ValueError):
            continue
        return commit
    return None


def order_problem(root: Path, results: str, commit: str, predictions: str, keys: list[str] = ()) -> str | None:
    """Why the record (results file, prediction commit, predictions file) in the repository ``root`` breaks
    "predictions first", or None when it holds. ``keys`` lead to the measured record in the results file
    (``measured_path``); the first commit holding it is where the results were added."""
    keys = list(keys)
    where = "/" + "/".join(keys)
    first = first_results_commit(root, results, keys)
    if first is None:
        return f"{results}{where} is in no commit: commit the results"
    if first == commit:
        return f"{results}{where}: the predictions and their results are in one commit ({commit})"
    if _git("merge-base", "--is-ancestor", commit, first, root=root).returncode != 0:
        return (f"{commit} (predictions {predictions}) is not an ancestor of {first}, the first commit holding "
                f"{results}{where}")
    if _git("diff", "--quiet", commit, "--", predictions, root=root).returncode != 0:
        return f"{predictions} differs from its commit {commit}"
    later = _git("log", "--format=%H", f"{commit}..HEAD", "--", predictions, root=root).stdout.split()
    if later:
        return f"{predictions} changed after its commit {commit}, in {', '.join(later)}"
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
    keys = measured_path(json.loads(path.read_text()), where)
    problem = order_problem(ROOT, path.relative_to(ROOT).as_posix(), commit, predictions, keys)
    assert problem is None, problem


def test_the_measured_record_is_the_object_around_the_reference():
    value = {"predictions": [{"file": "analyses/predictions/a.json", "commit": "0" * 40}],
             "cases": {"one": {"prediction_commit": {"commit": "1" * 40}, "predictions_file": "p", "models": {}},
                       "two": {"whole": {"predictions": {"file": "p", "commit": "2" * 40, "results": {}}}}}}
    assert measured_path(value, "/predictions/0") == []
    assert measured_path(value, "/cases/one") == ["cases", "one"]
    assert measured_path(value, "/cases/two/whole/predictions") == ["cases", "two", "whole", "predictions"]
    assert _records(value)[0][0] == "/predictions/0"


def test_the_order_check_fails_when_results_come_with_or_before_their_predictions(tmp_path):
    """The check on a repository of its own: predictions committed before their results pass; results committed
    before their predictions (the hash written in later), in the predictions' own commit, or predictions edited
    after their results (even when edited back), fail."""
    def commit_files(files: dict[str, str], message: str) -> str:
        for name, text in files.items():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text(text)
        assert _git("add", *files, root=tmp_path).returncode == 0
        done = _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message, root=tmp_path)
        assert done.returncode == 0, done.stderr
        return _git("rev-parse", "HEAD", root=tmp_path).stdout.strip()

    def results(commit: str, measured: float) -> str:
        return json.dumps({"cases": {"c": {"prediction_commit": {"commit": commit}, "measured": measured}}})

    def problem(name: str, commit: str) -> str | None:
        text = (tmp_path / f"r/{name}.json").read_text()
        keys = measured_path(json.loads(text), _records(json.loads(text))[0][0])
        assert keys == ["cases", "c"]
        return order_problem(tmp_path, f"r/{name}.json", commit, f"p/{name}.json", keys)

    assert _git("init", "-q", root=tmp_path).returncode == 0
    # good: predictions, then the results naming them
    good = commit_files({"p/good.json": "[1]"}, "predictions")
    commit_files({"r/good.json": results(good, 0.5)}, "results")
    assert problem("good", good) is None
    # good too: the results file existed before with other records; the measured record came after the predictions
    commit_files({"r/grown.json": json.dumps({"cases": {"other": {"measured": 1}}})}, "other results")
    grown = commit_files({"p/grown.json": "[1]"}, "predictions")
    commit_files({"r/grown.json": json.dumps({"cases": {"other": {"measured": 1},
                                                         "c": {"prediction_commit": {"commit": grown},
                                                               "measured": 0.5}}})}, "results")
    assert problem("grown", grown) is None
    # results first, predictions after, the hash written into the results later
    commit_files({"r/early.json": json.dumps({"cases": {"c": {"measured": 0.5}}})}, "results")
    early = commit_files({"p/early.json": "[2]"}, "predictions after the fact")
    commit_files({"r/early.json": results(early, 0.5)}, "the hash recorded")
    assert "is not an ancestor of" in problem("early", early)
    # predictions and results in one commit, the hash recorded in a later one
    together = commit_files({"p/together.json": "[3]", "r/together.json": results("", 0.5)}, "both")
    commit_files({"r/together.json": results(together, 0.5)}, "the hash recorded")
    assert "in one commit" in problem("together", together)
    # results never committed
    pending = commit_files({"p/pending.json": "[4]"}, "predictions")
    (tmp_path / "r/pending.json").write_text(results(pending, 0.5))
    assert "in no commit" in problem("pending", pending)
    # predictions edited after their results: in the working tree, committed, committed and edited back
    edited = commit_files({"p/edited.json": "[5]"}, "predictions")
    commit_files({"r/edited.json": results(edited, 0.5)}, "results")
    assert problem("edited", edited) is None
    (tmp_path / "p/edited.json").write_text("[6]")
    assert "differs from its commit" in problem("edited", edited)
    changed = commit_files({"p/edited.json": "[6]"}, "a prediction edited after its results")
    assert "differs from its commit" in problem("edited", edited)
    commit_files({"p/edited.json": "[5]"}, "and edited back")
    found = problem("edited", edited)
    assert "changed after its commit" in found and changed in found
    assert problem("good", good) is None  # the others' edits leave it alone
