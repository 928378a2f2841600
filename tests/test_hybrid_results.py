"""The committed hybrid study (analyses/results/hybrid.json and its per-task rows hybrid_tasks.csv) recomputed from
the rows with NumPy and SciPy alone, never through the code that wrote them: the pilot's validation size, the
validation's choice by the registered rule, the test table (means ± SE, paired differences to k-means++ x1 and x10:
mean ± SE, median, shares won and tied), the times' medians, every prediction's verdict and both goals, and best's
shipped metadata; and the recomputation catches a changed row or figure."""

from __future__ import annotations

import copy
import csv
import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "analyses" / "results" / "hybrid.json"
PREDICTIONS = ROOT / "analyses" / "predictions" / "hybrid.json"
SHIPPED = ROOT / "interp" / "pretrained" / "best.safetensors"
REFERENCES = ("sklearn_x1", "sklearn_x10")
CLOSE = 1e-12


def read_rows(path: Path) -> dict[str, dict[str, np.ndarray]]:
    """stage -> algorithm -> ln Phi per task, ordered by (seed, task)."""
    found: dict[str, dict[str, list]] = {}
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            found.setdefault(row["stage"], {}).setdefault(row["algorithm"], []).append(
                (int(row["seed"]), int(row["task"]), float(row["ln_phi"])))
    return {stage: {name: np.array([value for _, _, value in sorted(entries)]) for name, entries in algorithms.items()}
            for stage, algorithms in found.items()}


def sem(values: np.ndarray) -> float:
    return float(stats.sem(values, ddof=1))


def close(a: float, b: float, tolerance: float = CLOSE) -> bool:
    return math.isclose(a, b, rel_tol=0, abs_tol=tolerance)


def pilot_problems(record: dict, rows: dict, design: dict) -> list[str]:
    problems = []
    candidates = design["candidates"]
    ordered = sorted(candidates, key=lambda name: sum(candidates[name]))
    pilot = rows["pilot"]
    needed = 0
    for a, b in zip(ordered, ordered[1:]):
        d = pilot[a] - pilot[b]
        sd, mean = float(np.std(d, ddof=1)), float(d.mean())
        gap = max(abs(mean), record["protocol"]["min_gap"])
        tasks = math.ceil((sd / (record["protocol"]["se_fraction"] * gap)) ** 2)
        needed = max(needed, tasks)
        stored = record["pilot"]["validation_size"]["pairs"][f"{a} - {b}"]
        registered = design["pilot_figures"][f"{a} - {b}"]
        if not (close(stored["mean"], mean) and close(stored["sd"], sd) and stored["tasks_needed"] == tasks):
            problems.append(f"pilot {a} - {b}: stored {stored}, recomputed mean {mean}, sd {sd}, tasks {tasks}")
        if not (round(mean, 5) == registered["mean"] and round(sd, 5) == registered["sd"]
                and tasks == registered["tasks_needed"]):
            problems.append(f"pilot {a} - {b}: registered {registered}, recomputed {mean:.5f}, {sd:.5f}, {tasks}")
    low, high = record["pilot"]["validation_size"]["bounds"]
    size = min(max(needed, low), high)
    if size != design["validation_tasks"] or size != record["validation"]["tasks"]:
        problems.append(f"validation size: registered {design['validation_tasks']}, run "
                        f"{record['validation']['tasks']}, recomputed {size}")
    if len(rows["validation"][ordered[0]]) != size:
        problems.append(f"validation rows: {len(rows['validation'][ordered[0]])} tasks, not {size}")
    return problems


def choice_of(values: dict[str, np.ndarray], candidates: dict, win_ses: float) -> dict:
    """The registered rule, written again: lowest mean; tied within one paired SE; fewest total steps."""
    means = {name: float(v.mean()) for name, v in values.items()}
    lowest = min(means, key=means.get)
    tied = [name for name in values
            if name == lowest or means[name] - means[lowest] <= sem(values[name] - values[lowest])]
    chosen = min(tied, key=lambda name: (sum(candidates[name]), means[name]))
    d = values[chosen] - values["T20+L0"]
    se = sem(d) if chosen != "T20+L0" else 0.0
    return {"means": means, "lowest": lowest, "tied": tied, "chosen": chosen, "mean": float(d.mean()), "se": se,
            "beats": chosen != "T20+L0" and float(d.mean()) < -win_ses * se}


def validation_problems(record: dict, rows: dict, design: dict) -> list[str]:
    choice = record["validation"]["choice"]
    found = choice_of(rows["validation"], design["candidates"], record["protocol"]["win_ses"])
    problems = [f"validation mean {name}: {choice['means'][name]}, recomputed {mean}"
                for name, mean in found["means"].items() if not close(choice["means"][name], mean)]
    for key, value in (("lowest", found["lowest"]), ("tied", found["tied"]), ("chosen", found["chosen"]),
                       ("beats_baseline", found["beats"])):
        if choice[key] != value:
            problems.append(f"validation {key}: {choice[key]}, recomputed {value}")
    stored = choice["chosen_minus_baseline"]
    if not (close(stored["mean"], found["mean"]) and close(stored["se"], found["se"])):
        problems.append(f"validation chosen - T20+L0: {stored}, recomputed {found['mean']} ± {found['se']}")
    if [choice["steps"], choice["lloyd_steps"]] != design["candidates"][found["chosen"]]:
        problems.append(f"validation steps of {found['chosen']}: {choice['steps']}, {choice['lloyd_steps']}")
    return problems


def recomputed_table(rows: dict, record: dict) -> dict[str, dict]:
    """name -> the recomputed test figures."""
    test, tie = rows["test"], record["protocol"]["tie"]
    table = {}
    for name, f in test.items():
        entry = {"mean": float(f.mean()), "se": sem(f), "time_s": statistics.median(record["test"]["times"][name])}
        for reference in REFERENCES:
            d = f - test[reference]
            entry[f"minus_{reference}"] = float(d.mean())
            entry[f"minus_{reference}_se"] = sem(d)
            entry[f"minus_{reference}_median"] = float(np.median(d))
            entry[f"won_vs_{reference}"] = float(np.mean(d < -tie))
            entry[f"tied_with_{reference}"] = float(np.mean(np.abs(d) <= tie))
        table[name] = entry
    return table


def held_out_problems(record: dict, rows: dict) -> list[str]:
    problems = []
    table = recomputed_table(rows, record)
    summary = {row["name"]: row for row in record["test"]["summary"]}
    if list(summary) != list(table):
        problems.append(f"test algorithms: {list(summary)}, rows {list(table)}")
    expected_tasks = record["test"]["tasks_per_seed"] * len(record["test"]["seeds"])
    for name, entry in table.items():
        if len(rows["test"][name]) != expected_tasks or summary[name]["tasks"] != expected_tasks:
            problems.append(f"test {name}: {len(rows['test'][name])} rows, {summary[name]['tasks']} tasks stored")
        for key, value in entry.items():
            if not close(summary[name][key], value):
                problems.append(f"test {name} {key}: stored {summary[name][key]}, recomputed {value}")
    return problems


def figures_of(record: dict, rows: dict) -> dict:
    table = recomputed_table(rows, record)
    chosen, x1, x10, best = (table[name] for name in (record["test"]["chosen"], "sklearn_x1", "sklearn_x10",
                                                       "best_20"))
    validation = choice_of(rows["validation"], json.loads(PREDICTIONS.read_text())["design"]["candidates"],
                           record["protocol"]["win_ses"])
    return {"chosen": validation["chosen"], "chosen_beats_no_lloyd_on_validation": validation["beats"],
            "chosen_minus_no_lloyd_validation": validation["mean"],
            "test_chosen_minus_x1": chosen["minus_sklearn_x1"], "test_chosen_minus_x10": chosen["minus_sklearn_x10"],
            "test_chosen_won_vs_x1": chosen["won_vs_sklearn_x1"],
            "test_chosen_tied_with_x1": chosen["tied_with_sklearn_x1"],
            "test_best20_minus_x1": best["minus_sklearn_x1"], "test_best20_won_vs_x1": best["won_vs_sklearn_x1"],
            "test_chosen_time_over_x1": chosen["time_s"] / x1["time_s"],
            "test_chosen_time_over_x10": chosen["time_s"] / x10["time_s"],
            "goal_best20_below_x1": best["minus_sklearn_x1"] < 0 and best["won_vs_sklearn_x1"] > 0.5,
            "goal_chosen_within_001_of_x10": chosen["minus_sklearn_x10"] <= 0.01}


def verdict_problems(record: dict, rows: dict, predictions: dict) -> list[str]:
    problems = []
    figures = figures_of(record, rows)
    for key, entry in predictions["predictions"].items():
        value, stored = figures[key], record["verdicts"][key]
        if "kind" not in entry:
            expected = "confirmed" if value == entry["value"] else "refuted"
            same = stored["measured"] == value
        else:
            low, high = entry["value"] - entry["tolerance"], entry["value"] + entry["tolerance"]
            holds = {"within": low <= value <= high, "at_most": value <= high, "at_least": value >= low}[entry["kind"]]
            expected = "confirmed" if holds else "refuted"
            same = close(stored["measured"], value, 1e-9)
        if not same or stored["verdict"] != expected:
            problems.append(f"prediction {key}: stored {stored}, recomputed {value} {expected}")
    goals = record["goals"]
    if goals["best20_below_x1"]["met"] != figures["goal_best20_below_x1"]:
        problems.append(f"goal best20_below_x1: {goals['best20_below_x1']}")
    if goals["chosen_within_001_of_x10"]["met"] != figures["goal_chosen_within_001_of_x10"]:
        problems.append(f"goal chosen_within_001_of_x10: {goals['chosen_within_001_of_x10']}")
    return problems


def all_problems(record: dict, rows: dict, predictions: dict) -> list[str]:
    design = predictions["design"]
    return (pilot_problems(record, rows, design) + validation_problems(record, rows, design)
            + held_out_problems(record, rows) + verdict_problems(record, rows, predictions))


@pytest.fixture(scope="module")
def committed():
    record = json.loads(RECORD.read_text())
    return record, read_rows(RECORD.with_name(record["protocol"]["rows"])), json.loads(PREDICTIONS.read_text())


def test_the_record_follows_from_its_rows(committed):
    problems = all_problems(*committed)
    assert not problems, "\n".join(problems)


def test_the_record_names_its_predictions_and_every_competitor(committed):
    record, rows, predictions = committed
    assert record["predictions"] == predictions and record["predictions_file"] == "analyses/predictions/hybrid.json"
    assert record["budget"] == "paper" and record["test"]["tasks_per_seed"] * len(record["test"]["seeds"]) >= 640
    names = list(rows["test"])
    assert {"best_20", record["test"]["chosen"], "main_onehot_20", "lloyd_20", "torch_kmeanspp_lloyd", "sklearn_x1",
            "sklearn_x10"} <= set(names)
    assert all(not run["torch_imported"] for run in record["test"]["sklearn"].values())
    assert all(pool["num_threads"] == 1 for run in record["test"]["sklearn"].values() for pool in run["threadpools"])
    assert record["test"]["threads"] == 1 and len(record["test"]["times"]["sklearn_x10"]) == record["test"]["rounds"]
    seeds = {record["pilot"]["seed"], record["validation"]["seed"], *record["test"]["seeds"]}
    assert len(seeds) == 4  # pilot, validation and the two test seeds apart


def test_best_recommends_what_the_study_chose(committed):
    from safetensors import safe_open

    record = committed[0]
    choice = record["validation"]["choice"]
    with safe_open(str(SHIPPED), framework="np") as handle:
        inference = json.loads(handle.metadata()["inference"])
    if choice["beats_baseline"]:
        assert (inference["steps"], inference.get("lloyd_steps", 0)) == (choice["steps"], choice["lloyd_steps"])
    else:
        assert inference.get("lloyd_steps", 0) == 0


def test_the_recomputation_catches_a_changed_row_or_figure(committed):
    record, rows, predictions = committed
    changed_rows = copy.deepcopy(rows)
    changed_rows["test"]["sklearn_x1"][3] += 0.01
    assert any("minus_sklearn_x1" in p for p in all_problems(record, changed_rows, predictions))
    changed = copy.deepcopy(record)
    changed["validation"]["choice"]["chosen"] = "T10+L1"
    assert any("validation chosen" in p for p in all_problems(changed, rows, predictions))
    changed = copy.deepcopy(record)
    key = next(iter(changed["verdicts"]))
    changed["verdicts"][key]["verdict"] = "confirmed" if changed["verdicts"][key]["verdict"] == "refuted" else "refuted"
    assert any(f"prediction {key}" in p for p in all_problems(changed, rows, predictions))
    changed = copy.deepcopy(record)
    changed["test"]["times"]["sklearn_x10"] = [t * 10 for t in record["test"]["times"]["sklearn_x10"]]
    assert any("sklearn_x10 time_s" in p for p in all_problems(changed, rows, predictions))
