"""Every study's budget in one place: training steps, seeds, evaluation tasks; and the papers' campaign.

``quick`` is a smoke budget for a laptop (minutes); ``paper`` is the papers' (paper 2 §3 and App. F: 10,000 steps,
the authors' first five seeds, 320 evaluation tasks; ten seeds where a claim counts unstable seeds). A study folder
declares what it varies; how long it trains is decided here, so one line changes a budget everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

SEEDS = (153476998, 235510766, 205084180, 129959864, 149896109)  # the authors' first five (paper 2's code)
MORE_SEEDS = (140439608, 145017219, 162518970, 245293503, 152674004)  # their other five: the stability study
NAMES = ("quick", "paper")


@dataclass(frozen=True)
class Budget:
    """How much a grid study trains and scores: ``steps`` per run, one run per seed and grid point, validation on
    ``eval_tasks`` tasks, scoring after ``eval_steps`` re-embedded steps."""

    name: str
    steps: int
    seeds: tuple[int, ...]
    eval_tasks: int
    eval_steps: int = 20


QUICK = Budget("quick", steps=1000, seeds=(0, 1, 2, 3, 4), eval_tasks=64)
PAPER = Budget("paper", steps=10_000, seeds=SEEDS, eval_tasks=320)
TEN_SEEDS = {"stability_d32_k25", "stability_d32_k25_n512"}  # paper 2 §3.5 counts unstable seeds out of ten


def budget(study: str, name: str) -> Budget:
    """The budget ``name`` (one of NAMES) of ``study``."""
    chosen = {"quick": QUICK, "paper": PAPER}[name]
    if study in TEN_SEEDS and name == "paper":
        return replace(chosen, seeds=SEEDS + MORE_SEEDS)
    return chosen


# The papers' campaign, in order of priority: the cells whose verdicts go against the paper at n = 128 first (at the
# papers' n = 512), the main configuration's seeds, then every learning study; the explanations and benchmarks read
# their checkpoints and tables. ``python -m analyses run all`` runs them in this order (each resumable).
CAMPAIGN: tuple[tuple[str, str], ...] = (
    ("embedding_d4_k16_n512", "paper"), ("stability_d32_k25_n512", "paper"), ("main_seeds", "paper"),
    ("embedding_d4_k6", "paper"), ("embedding_d4_k16", "paper"), ("embedding_d32_k6", "paper"),
    ("embedding_d8_k8", "paper"), ("tau_loss", "paper"), ("d", "paper"), ("k", "paper"), ("family", "paper"),
    ("stability_d32_k25", "paper"), ("n", "paper"), ("lr", "paper"), ("tau_loss_d32", "paper"),
    ("embedding_across_pairs", "paper"), ("n_d4k16", "paper"),
)
