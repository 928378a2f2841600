"""Section ``n`` of analyses/RESULTS.md in words: every figure looked up in the committed rows."""

from __future__ import annotations

from analyses import claims as C
from analyses.framework import reading as R
from analyses.framework.reading import num, span
from analyses.framework.statistics import equivalence_p, rank_sum_p, smallest_rank_sum_p


def reading() -> str:
    s = R.study("n")
    labels = list(s.groups)
    pairs = [(a, b) for i, a in enumerate(labels) for b in labels[i + 1:]]
    smallest = min(rank_sum_p(s.values(a, "rel"), s.values(b, "rel"), "two-sided") for a, b in pairs)
    largest = max(equivalence_p(s.values(a, "rel"), s.values(b, "rel"), C.EQUIVALENCE_MARGIN) for a, b in pairs)
    losses = [s.median(x, "loss") for x in labels]
    return (
        f"Reading (d = {s.config('d')}, k = {s.config('k')}, {s.steps()} steps, {s.seeds()} seeds): the step's "
        "relative objective is " + ", ".join(f"{num(s.median(x))} at {x.replace('=', ' = ')}" for x in labels) +
        f". Every pair of lengths is shown equivalent within +-{num(C.EQUIVALENCE_MARGIN)} (largest TOST p = "
        f"{num(largest)}, at most {num(C.ALPHA, 2)} needed), narrowly: with {s.seeds()} seeds against {s.seeds()} the "
        "test passes only when the seeds of two lengths lie almost wholly within the margin of each other. (The rule "
        f"it replaced, no pair rejected by a rank test, found smallest p = {num(smallest)} but could reject only at "
        f"complete separation, p = {num(smallest_rank_sum_p(s.seeds(), s.seeds()), 4)}.) Every length beats Lloyd "
        f"after 20 steps on tasks of its own n ({span([s.median(x, 'gap20') for x in labels], sign=True)}). The loss "
        f"gap grows with n ({span(losses, 2)}) because the loss is a sum over the points. The check covers "
        f"d = {s.config('d')}, k = {s.config('k')}; study `n_d4k16` asks the same at k = 16, where the n = 128 "
        "models miss one-step Lloyd.\n")


READINGS = {"n": reading}
