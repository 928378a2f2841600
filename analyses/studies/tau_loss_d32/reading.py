"""Section ``tau_loss_d32`` of analyses/RESULTS.md in words: every figure looked up in the committed rows."""

from __future__ import annotations

from analyses import claims as C
from analyses.framework import reading as R
from analyses.framework.reading import num, span


def reading() -> str:
    s = R.study("tau_loss_d32")
    ne = [label for label in s.groups if "softmin" in label]
    l2 = [label for label in s.groups if "sparsemax" in label]

    def tau(label: str) -> str:
        return dict(part.split("=") for part in label.split("_"))["tau"]

    def name(label: str) -> str:  # loss=softmin_tau=0.25 -> NE tau = 0.25
        return f"{'NE' if 'softmin' in label else 'L2'} tau = {tau(label)}"

    def listed(metric: str, below: float) -> str:
        return ", ".join(f"{name(label)} {num(s.median(label, metric))} ({s.below(label, metric, below)}/"
                         f"{s.seeds(label)})" for label in s.groups)

    pairs = [(a, b) for a in ne for b in l2 if tau(a) == tau(b)]  # the taus trained with both losses
    tighter = all(s.median(b, "loss") < s.median(a, "loss") for a, b in pairs)
    steps = int(s.rows[0]["steps"])
    budget = "the papers' budget" if steps >= C.PAPER_STEPS else "a shorter budget than the papers'"
    return (
        f"Reading (d = {s.config('d')}, {s.steps()} steps, {budget}, {s.seeds()} seeds): one step against one-step "
        f"Lloyd, median (seeds below 1): {listed('rel', 1.0)}. After 20 re-embedded steps, the gap to Lloyd, median "
        f"(seeds below 0): {listed('gap20', 0.0)}. " + (
            f"L2's median loss gap is below NE's {'at' if tighter else 'not at'} every tau trained with both losses "
            f"({len(pairs)}; L2 {span([s.median(b, 'loss') for _, b in pairs], 2)}, NE "
            f"{span([s.median(a, 'loss') for a, _ in pairs], 2)}).\n" if pairs else
            "No tau is trained with both losses yet, so their loss gaps are not compared.\n"))


READINGS = {"tau_loss_d32": reading}
