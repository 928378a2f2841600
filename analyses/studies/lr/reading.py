"""Section ``lr`` of analyses/RESULTS.md in words: every figure looked up in the committed rows."""

from __future__ import annotations

import statistics

from analyses import claims as C
from analyses.framework import reading as R
from analyses.framework.reading import num


def reading() -> str:
    s = R.study("lr")
    rates = list(s.groups)  # lr=0.001 ... lr=1.0

    def at_step(label: str, step: int) -> float:
        """The median over seeds of the relative validation objective logged at ``step`` (the training curves)."""
        return statistics.median({entry["step"]: entry for entry in s.evidence.history(row)}[step]
                                 ["relative_objective"] for row in s.groups[label])

    def named(label: str) -> str:  # lr=0.01 -> lr = 0.01
        return label.replace("=", " = ")

    final = ", ".join(f"{named(label)} {num(s.median(label))} ({s.below(label)}/{s.seeds(label)})" for label in rates)
    halfway = ", ".join(f"{named(label)} {num(at_step(label, C.PAPER_STEPS // 2))}" for label in rates)
    unstable = ", ".join(f"{named(label)} {sum(C.unstable(s.evidence, row) for row in s.groups[label])}"
                         f"/{s.seeds(label)}" for label in rates)
    best = named(min(rates, key=s.median))
    return (
        f"Reading (d = {s.config('d')}, k = {s.config('k')}, n = {s.config('n')}, {s.steps()} steps, {s.seeds()} "
        "seeds; the paper's lr study: 5,000 steps at n = 512): one step against one-step Lloyd, median (seeds below "
        f"1): {final}; the lowest median is at {best}. The paper's finding that lr = 0.01 gives the best final "
        f"objective (`lr.lr001_best`): {s.outcome('lr.lr001_best')}. At step {C.PAPER_STEPS // 2:,}, the paper's "
        f"budget for this study, the medians on the committed training curves were {halfway} (a description of the "
        f"curves, not a registered claim). Unstable seeds (diverged, or a validation objective that rose more than "
        f"{100 * C.SPIKE:.0f}% above its best so far): {unstable}; that lr = 0.1 and lr = 1.0 are unstable "
        f"(`lr.high_lr_unstable`): {s.outcome('lr.high_lr_unstable')}.\n")


READINGS = {"lr": reading}
