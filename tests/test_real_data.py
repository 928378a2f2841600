"""The real-data study (analyses/studies/real_data/): its committed tables and verdicts follow from the per-start
rows of analyses/results/real_data.json (recomputed here with numpy alone), and its measurement's Lloyd agrees with a
numpy Lloyd written here, from the same start."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "analyses" / "results" / "real_data.json"
RESULTS_MD = ROOT / "analyses" / "RESULTS.md"
METHODS = ("learned", "learned_lloyd", "lloyd", "lloyd_converged", "sklearn_1", "sklearn_10")
GOAL = 1.02  # "inertia within 2 %" of model='lloyd' from the same starts


def _section() -> str:
    text = RESULTS_MD.read_text()
    return text.split("<!-- study:real_data -->\n", 1)[1].split("<!-- /study:real_data -->", 1)[0]


def _table_rows(section: str, first: str) -> dict[str, list[str]]:
    """The cells of the Markdown table whose header starts with ``first``, by the first cell's data-set name."""
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first}"))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0].split(" (")[0]] = cells[1:]
    return rows


def _money(value: float) -> str:
    return f"{round(value, 2) + 0.0:,.2f}"


def _recomputed(entry: dict) -> dict:
    """Mean ± SE of each method, and each learned method's mean per-start ratio to Lloyd, starts within 2 %, goal."""
    rows = entry["rows"]
    out = {}
    for method in METHODS:
        values = [row["inertia"][method] for row in rows]
        if None in values:
            out[method] = None
            continue
        values = np.array(values)
        out[method] = (values.mean(), values.std(ddof=1) / math.sqrt(len(values)))
    for method in ("learned", "learned_lloyd"):
        if out[method] is None:
            out[method + "/lloyd"] = None
            continue
        ratios = np.array([row["inertia"][method] for row in rows]) / np.array([row["inertia"]["lloyd"]
                                                                                  for row in rows])
        out[method + "/lloyd"] = (ratios.mean(), int((ratios <= GOAL).sum()), "met" if ratios.mean() <= GOAL
                                  else "missed")
    return out


def test_the_committed_tables_and_verdicts_follow_from_the_rows():
    record = json.loads(RECORD.read_text())
    section = _section()
    inertias = _table_rows(section, "data (n, d, k)")
    goals = _table_rows(section, "data |")
    names = ["iris", "wine", "breast_cancer", "digits_pca32", "digits04_pca16", "wine_raw"]
    assert list(record["datasets"]) == names and list(inertias) == names and list(goals) == names
    starts = record["starts"]
    assert starts == 10
    for name, entry in record["datasets"].items():
        rows = entry["rows"]
        assert [row["random_state"] for row in rows] == list(range(starts))
        for row in rows:  # the start: k distinct data points drawn from random_state
            assert row["start"] == list(np.random.RandomState(row["random_state"]).choice(entry["n"], entry["k"],
                                                                                          replace=False))
            assert row["lloyd_converged"]
            lloyd, converged = row["inertia"]["lloyd"], row["inertia"]["lloyd_converged"]
            assert converged <= lloyd * (1 + 1e-12)  # more Lloyd steps never raise the inertia
            assert row["inertia"]["sklearn_10"] <= row["inertia"]["sklearn_1"] * (1 + 1e-12)
        found = _recomputed(entry)
        for method, cell in zip(METHODS, inertias[name]):
            expected = ("refused" if found[method] is None
                        else f"{_money(found[method][0])} ± {_money(found[method][1])}")
            assert cell == expected, (name, method)
        for method, (ratio_cell, goal_cell) in zip(("learned", "learned_lloyd"), (goals[name][0:2], goals[name][2:4])):
            figures = found[method + "/lloyd"]
            if figures is None:
                assert entry["refused"] and ratio_cell == "refused" and goal_cell == "**missed (refused)**"
                assert record["summary"][name][method]["goal"] == "missed (refused)"
                continue
            mean, within, goal = figures
            assert ratio_cell == f"{mean:.3f} ({within} of {starts} within 2 %)", (name, method)
            assert goal_cell == f"**{goal}**", (name, method)
            assert record["summary"][name][method]["goal"] == goal
            assert record["summary"][name][method]["within"] == within
            assert record["summary"][name][method]["mean_ratio"] == pytest.approx(mean, rel=1e-12)
        if entry["refused"]:
            assert f"* {name}: {entry['refused']}" in section
    ratios = {name: _recomputed(record["datasets"][name])["learned/lloyd"] for name in names}
    met = [name for name in names if ratios[name] is not None and ratios[name][2] == "met"]
    assert f"the goal is met on {', '.join(met) or 'no data set'}," in section


def _numpy_lloyd(X: np.ndarray, centres: np.ndarray, steps: int) -> np.ndarray:
    """Lloyd's algorithm, written out: nearest centre, then each centre to its points' mean (an empty centre to the
    mean of all points, as the construction does)."""
    for _ in range(steps):
        distances = ((X[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2)
        labels = distances.argmin(axis=1)
        centres = np.array([X[labels == j].mean(axis=0) if (labels == j).any() else X.mean(axis=0)
                            for j in range(len(centres))])
    return centres


def _numpy_inertia(X: np.ndarray, centres: np.ndarray) -> float:
    return float(((X[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2).min(axis=1).sum())


def test_the_measurement_on_iris_matches_a_numpy_lloyd_from_the_same_start():
    import torch
    from sklearn.datasets import load_iris
    from sklearn.preprocessing import StandardScaler

    from analyses.studies.real_data.measure import measure_dataset

    torch.set_num_threads(1)
    X = StandardScaler().fit_transform(load_iris().data)
    measured = measure_dataset(X, 3, "best", 2)  # best serves k = 10 only: its refusal is recorded, not raised
    assert measured["refused"] and "n_clusters" in measured["refused"]
    assert [row["random_state"] for row in measured["rows"]] == [0, 1]
    for row in measured["rows"]:
        assert row["inertia"]["learned"] is None and row["inertia"]["learned_lloyd"] is None
        start = X[row["start"]]
        assert len(set(row["start"])) == 3
        expected = _numpy_inertia(X, _numpy_lloyd(X, start, 20))
        assert row["inertia"]["lloyd"] == pytest.approx(expected, rel=1e-9)
        converged = _numpy_lloyd(X, start, row["lloyd_converged_steps"])
        assert row["inertia"]["lloyd_converged"] == pytest.approx(_numpy_inertia(X, converged), rel=1e-9)


def test_the_learned_rows_are_the_estimators_fit_and_lloyd_from_its_centres():
    """Where the model serves the data (best: digits at k = 10), "learned" is InContextKMeans's fit from the start,
    and "learned + Lloyd" is Lloyd's steps from its centres."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA

    from analyses.studies.real_data.measure import measure_dataset
    from interp import InContextKMeans

    torch.set_num_threads(1)
    X = PCA(32, random_state=0).fit_transform(load_digits().data[:400])
    measured = measure_dataset(X, 10, "best", [3])
    assert measured["refused"] is None
    row = measured["rows"][0]
    fitted = InContextKMeans(10, model="best", steps=measured["model_steps"], init=X[row["start"]], random_state=3,
                             lloyd_steps=0)  # the model's steps alone
    fitted.fit(X)
    assert row["inertia"]["learned"] == pytest.approx(_numpy_inertia(X, fitted.cluster_centers_), rel=1e-9)
    polished = _numpy_lloyd(X, fitted.cluster_centers_, measured["lloyd_after"])
    assert row["inertia"]["learned_lloyd"] == pytest.approx(_numpy_inertia(X, polished), rel=1e-6)
