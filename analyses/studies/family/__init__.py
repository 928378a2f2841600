"""Training family, the 5 x 5 transfer grid and the loss gap per family (paper 2 Figs. 4, 5, 8, 16, 18)."""

from __future__ import annotations

import json

from analyses import _studies as S
from analyses.framework.grid import GridStudy
from interp.task_config import FAMILIES


def transfer_grid(groups: dict) -> dict[tuple[str, str], float]:
    """(training family, test family) -> median over seeds of model - Lloyd final log objective."""
    grid = {}
    for label, rows in groups.items():
        train_family = label.split("=")[1]
        transfers = [json.loads(r["transfer"]) for r in rows]
        for test_family in transfers[0]:
            grid[(train_family, test_family)] = S.quantile(
                [t[test_family]["model"] - t[test_family]["lloyd"] for t in transfers], 0.5)
    return grid


def transfer_table(groups: dict) -> str:
    grid = transfer_grid(groups)
    if not grid:
        return ""
    tests = list(dict.fromkeys(test for _, test in grid))
    trains = list(dict.fromkeys(train for train, _ in grid))
    lines = ["Transfer grid: median (model - Lloyd) final log objective, rows = training family, columns = test "
             "family (< 0 beats Lloyd):", "", "| trained on \\ tested on | " + " | ".join(tests) + " |",
             "|---|" + "---|" * len(tests)]
    for train in trains:
        lines.append(f"| {train} | " + " | ".join(f"{grid[(train, test)]:+.3f}" for test in tests) + " |")
    return "\n".join(lines)


STUDY = GridStudy("Training family, transfer grid and loss gap", {"d": 32, "k": 10, "n": 128},
                  {"family": list(FAMILIES)},
                  "paper 2 Figs. 4, 5, 8, 16, 18 (d = 32, k = 10, n = 512, 10 seeds)", "family",
                  eval_families=tuple(FAMILIES), extra=transfer_table)
