"""The committed any-k record (analyses/results/any_k.json) recomputed from its raw per-task values with numpy alone:
the choice by the committed rule, every cell's figures and goal, the main-configuration comparison, the counted
predictions and their verdicts (the rule written out here), and the section as RESULTS.md holds it. Nothing of the
study's code is imported but its section writer, for the last check."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "analyses" / "results" / "any_k.json"
ROUND2 = ROOT / "analyses" / "results" / "any_k_round2.json"
WITHIN_X1, WIN_SES = 0.02, 2.0


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(RECORD.read_text())


@pytest.fixture(scope="module")
def round2() -> dict:
    return json.loads(ROUND2.read_text())


def paired(a, b) -> tuple[float, float]:
    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(len(diff)))


def rule(kind: str, value: float, tolerance: float, measured: float) -> str:
    if kind == "within":
        held = abs(measured - value) <= tolerance
    elif kind == "at_most":
        held = measured <= value + tolerance
    else:
        held = measured >= value - tolerance
    return "confirmed" if held else "refuted"


def test_the_choice_follows_the_committed_rule(record):
    values = {name: np.asarray(v) for name, v in record["validation"]["values"].items()}
    lowest = min(values, key=lambda name: values[name].mean())
    tied = [name for name in values if paired(values[name], values[lowest])[0] <= paired(values[name],
                                                                                       values[lowest])[1]]
    order = {"pad": 0, "tile": 1}
    chosen = min(tied, key=lambda name: (int(name.split("+L")[1]), order[name.split("+")[0]]))
    assert record["validation"]["chosen"] == chosen
    assert record["predictions"]["predictions"]  # the record carries the predictions it was judged by


@pytest.mark.parametrize("path", [RECORD, ROUND2], ids=["round1", "round2"])
def test_every_cell_and_the_main_comparison_recomputed(path):
    record = json.loads(path.read_text())
    cells = record["figures"]["cells"]
    assert len(cells) == len(record["test"]["grid"])
    for cell, raw in zip(cells, record["test"]["grid"]):
        v = {name: np.asarray(x) for name, x in raw["values"].items()}
        assert (cell["k"], cell["d"]) == (raw["k"], raw["d"])
        assert cell["learned"] == pytest.approx(v["learned"].mean(), abs=1e-12)
        assert cell["lloyd"] == pytest.approx(v["lloyd"].mean(), abs=1e-12)
        mean_lloyd, se_lloyd = paired(v["learned"], v["lloyd"])
        mean_x1, _ = paired(v["learned"], v["kmeanspp_x1"])
        assert cell["minus_lloyd"]["mean"] == pytest.approx(mean_lloyd, abs=1e-12)
        assert cell["minus_lloyd"]["se"] == pytest.approx(se_lloyd, abs=1e-12)
        assert cell["minus_lloyd"]["won"] == pytest.approx(float((v["learned"] < v["lloyd"]).mean()))
        assert cell["goal_met"] == (mean_lloyd < 0 and mean_x1 <= WITHIN_X1)
    main = {name: np.asarray(x) for name, x in record["test"]["main"].items()}
    for reference in ("best", "lloyd", "kmeanspp_x1", "kmeanspp_x10"):
        mean, se = paired(main["any_k"], main[reference])
        found = record["figures"]["main"]["any_k"][f"minus_{reference}"]
        assert (found["mean"], found["se"]) == pytest.approx((mean, se), abs=1e-12)
    if path == RECORD:
        versus = record["validation"]["main_any_k_minus_best"]
        assert record["validation"]["ships_as_best"] == (versus["mean"] < -WIN_SES * versus["se"])


def test_the_predictions_are_judged_by_their_rule(record):
    cells = record["test"]["grid"]
    below = sum(paired(c["values"]["learned"], c["values"]["lloyd"])[0] < 0 for c in cells)
    within = sum(paired(c["values"]["learned"], c["values"]["kmeanspp_x1"])[0] <= WITHIN_X1 for c in cells)
    narrow, lloyd_steps = record["validation"]["chosen"].split("+L")
    measured = {"chosen_narrow_tasks_is_tile": float(narrow == "tile"), "chosen_lloyd_steps": float(lloyd_steps),
                "cells_below_lloyd": float(below), "cells_within_x1": float(within),
                "main_minus_best": paired(record["test"]["main"]["any_k"], record["test"]["main"]["best"])[0],
                "ships_as_best": float(record["validation"]["ships_as_best"])}
    for key, entry in record["predictions"]["predictions"].items():
        assert record["verdicts"][key]["measured"] == pytest.approx(measured[key], abs=1e-12), key
        assert record["verdicts"][key]["verdict"] == rule(entry["kind"], entry["value"], entry["tolerance"],
                                                          measured[key]), key


def test_the_second_round_chose_and_judged_by_its_rules(round2):
    values = {name: np.asarray(v) for name, v in round2["validation"]["values"].items()}
    lowest = min(values, key=lambda name: values[name].mean())
    tied = [name for name in values if paired(values[name], values[lowest])[0] <= paired(values[name],
                                                                                       values[lowest])[1]]
    models = ["any-k", "any-k-ft"]
    chosen = min(tied, key=lambda name: (models.index(name.split("+L")[0]), int(name.split("+L")[1])))
    assert round2["validation"]["chosen"] == chosen
    cells = round2["test"]["grid"]
    diffs = [(paired(c["values"]["learned"], c["values"]["lloyd"])[0],
              paired(c["values"]["learned"], c["values"]["kmeanspp_x1"])[0]) for c in cells]
    name, lloyd_steps = chosen.split("+L")
    measured = {"chosen_is_ft": float(name == "any-k-ft"), "chosen_lloyd_steps": float(lloyd_steps),
                "cells_below_lloyd": float(sum(a < 0 for a, _ in diffs)),
                "cells_within_x1": float(sum(b <= WITHIN_X1 for _, b in diffs)),
                "grid_goal_cells": float(sum(a < 0 and b <= WITHIN_X1 for a, b in diffs)),
                "main_minus_best": paired(round2["test"]["main"]["any_k"], round2["test"]["main"]["best"])[0]}
    for key, entry in round2["predictions"]["predictions"].items():
        assert round2["verdicts"][key]["measured"] == pytest.approx(measured[key], abs=1e-12), key
        assert round2["verdicts"][key]["verdict"] == rule(entry["kind"], entry["value"], entry["tolerance"],
                                                          measured[key]), key


def test_the_sections_in_results_md_are_the_records():
    from analyses.studies.any_k import measure, round2

    text = (ROOT / "analyses" / "RESULTS.md").read_text()
    assert measure.section() in text and round2.section() in text
