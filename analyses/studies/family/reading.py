"""Section ``family`` of analyses/RESULTS.md in words: every figure looked up in the committed rows."""

from __future__ import annotations

import statistics

from analyses import claims as C
from analyses.framework import reading as R
from analyses.framework.reading import num, signed, span


def reading() -> str:
    s = R.study("family")
    families = [label.split("=", 1)[1] for label in s.groups]
    others = [f for f in families if f != "cauchy"]
    own = [s.median(s.label(family=f), "gap20") for f in others]
    transfers = [statistics.median(C.transfer_gap(test)(s.evidence, row) for row in s.groups[s.label(family=train)])
                 for train in others for test in others if test != train]
    on_cauchy = [statistics.median(C.transfer_gap("cauchy")(s.evidence, row) for row in s.groups[s.label(family=f)])
                 for f in others]
    cauchy = s.label(family="cauchy")
    cauchy_elsewhere = [statistics.median(C.transfer_gap(f)(s.evidence, row) for row in s.groups[cauchy])
                        for f in others]
    normal = s.label(family="normal")
    diverged = sum(row["status"] != "ok" for row in s.rows)
    return (
        f"Reading (d = {s.config('d')}, k = {s.config('k')}, {s.steps()} steps, {s.seeds()} seeds): models trained on "
        f"{', '.join(others)} tasks beat Lloyd on their own family ({span(own, sign=True)}) and on each other's (all "
        f"{len(transfers)} pairs, {span(transfers, sign=True)}), and on Cauchy tasks end "
        f"{'above' if min(on_cauchy) > 0 else 'around'} Lloyd ({span(on_cauchy, sign=True)}), {diverged} of "
        f"{len(s.rows)} runs diverging. Models trained on Cauchy tasks reach {num(s.median(cauchy))} of one-step "
        f"Lloyd and end {signed(s.median(cauchy, 'gap20'))} from Lloyd on Cauchy tasks and "
        f"{span(cauchy_elsewhere, sign=True)} on the others. What a Cauchy task does to the main models' step, and "
        "which interventions close their gap, is in `explain` (section 5, cases cauchy and cauchy_held_out). The "
        "loss-gap claim fails "
        f"on its normal half: the largest gap on normal tasks has median {num(s.median(normal, 'loss_max'), 2)} "
        f"(mean gap {num(s.median(normal, 'loss'), 2)}) against the threshold the verdict table states; its Cauchy "
        f"half holds ({num(s.median(cauchy, 'loss_max'), 2)}).\n")


READINGS = {"family": reading}
