"""The papers' campaign: ``python -m analyses plan all`` says of each study what it would train now, from the
committed rows (nothing where every row is written); ``python -m analyses.paper_budget`` forwards to the runner."""

import re

from analyses import paper_budget
from analyses.framework import budgets, runner


def test_plan_all_names_every_study_of_the_campaign_in_order(capsys):
    assert runner.main(["plan", "all", "--budget", "paper"]) == 0
    lines = capsys.readouterr().out.splitlines()
    grid = [line for line in lines if re.match(r"\w+\.csv: ", line)]
    assert "embedding_d4_k16_n512.csv: nothing to train (every seed's row is written)" in grid
    assert "lr.csv: nothing to train (every seed's row is written)" in grid
    tables = [line.split(".csv")[0] for line in grid]
    campaign = [study for study, _ in budgets.CAMPAIGN if study in tables]
    assert tables == campaign  # in the campaign's order
    assert "main_seeds: python -m analyses.main_seeds --seeds " + " ".join(map(str, budgets.SEEDS)) + \
        " --results-md" in lines


def test_the_plan_of_a_seed_not_yet_trained_names_it(capsys):
    assert runner.main(["plan", "embedding_d4_k16_n512", "--budget", "paper", "--seeds", "7"]) == 0
    assert capsys.readouterr().out.strip() == ("embedding_d4_k16_n512.csv: 3 seed runs to train (embedding=onehot: 7; "
                                               "embedding=binary: 7; embedding=none: 7)")


def test_the_old_name_forwards_to_the_runner(capsys):
    assert paper_budget.main(["--dry-run", "--only", "lr", "n"]) == 0
    assert capsys.readouterr().out.splitlines() == ["lr.csv: nothing to train (every seed's row is written)",
                                                    "n.csv: nothing to train (every seed's row is written)"]
