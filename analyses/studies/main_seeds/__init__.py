"""The main configuration's seeds (d = 32, k = 10, n = 512, 10,000 steps), each trained and then scored at once into
the multi-step and generalisation rows (paper 2 Figs. 2, 6, 7): sections ``embedding_d32_k10``, ``multistep_seeds``,
``generalisation``."""

import shutil
import tempfile
from pathlib import Path

from analyses.framework.budgets import SEEDS
from analyses.framework.study import MeasuredStudy, section_written


def training_section() -> str:
    from analyses import _studies as S
    from analyses.framework.grid import embedding_cell, section_from_files

    folder = S.HERE / "results" / "studies"
    return section_from_files("embedding_d32_k10", embedding_cell(32, 10, n=512), folder, S.command_line())


def scored_section(key: str) -> str:
    """``multistep_seeds`` or ``generalisation`` written by its scoring module from copies of the committed rows."""
    from analyses import _studies as S
    from analyses.studies.main_seeds import generalisation
    from analyses.studies.multistep import measure as multistep

    committed = S.HERE / "results" / "studies" / f"{key}.csv"
    with tempfile.TemporaryDirectory() as folder:
        rows = Path(folder) / committed.name
        shutil.copyfile(committed, rows)
        if key == "multistep_seeds":
            def write(path):
                return multistep.main(["--keep-rows", "--seed-rows", str(rows), "--name", key, "--out", folder,
                                       "--results-md", str(path)])
        else:
            def write(path):
                return generalisation.main(["--keep-rows", "--out", str(rows), "--results-md", str(path)])
        return section_written(key, write)


# the module by its old name (the same module object) while tests/test_paper_budget_plan.py checks the plan line
STUDY = MeasuredStudy("The main configuration's seeds, trained and scored", "analyses.main_seeds",
                      {"quick": ("--seeds", "0", "--steps", "300", "--eval-tasks", "32", "--tasks", "16", "--n", "128",
                                 "--out", "runs/analyses/quick", "--checkpoints",
                                 "runs/analyses/quick/checkpoints/main"),
                       "paper": ("--seeds", *map(str, SEEDS), "--results-md")},
                      {"embedding_d32_k10": training_section,
                       "multistep_seeds": lambda: scored_section("multistep_seeds"),
                       "generalisation": lambda: scored_section("generalisation")},
                      writes=("studies/embedding_d32_k10.csv", "studies/multistep_seeds.csv",
                              "studies/generalisation.csv"))
