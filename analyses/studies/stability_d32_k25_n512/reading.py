"""Section ``stability_d32_k25_n512`` of analyses/RESULTS.md in words: every figure looked up in the committed rows."""

from __future__ import annotations

from analyses import claims as C
from analyses.framework import cell_readings as cells
from analyses.framework import reading as R
from analyses.framework.reading import num


def reading() -> str:
    s, base = R.study("stability_d32_k25_n512"), R.study("stability_d32_k25")
    complete = s.complete(("onehot", "binary"), C.STABILITY_SEEDS)
    parts = []
    for embedding, (seeds, numeric, jumped) in cells.unstable_counts(s).items():
        label = f"embedding={embedding}"
        parts.append(f"{embedding}: {seeds} of {C.STABILITY_SEEDS} seeds, {numeric} numerically unstable, {jumped} "
                     f"other seed{'s' if jumped != 1 else ''} whose validation objective rose more than "
                     f"{100 * C.SPIKE:.0f}% above its best so far; median final "
                     f"{num(s.median(label))} of one-step Lloyd (at n = 128 "
                     f"{num(base.median(base.label(embedding=embedding)))})")
    head = (f"Reading (d = {s.config('d')}, k = {s.config('k')}, n = {s.config('n')}, no clipping, {s.steps()} "
            f"steps{'' if complete else ', the rows trained so far'}): " + "; ".join(parts))
    curves = cells.jumps(s) + cells.stalled(s)
    if not complete:
        return head + (f". Each claim needs {C.STABILITY_SEEDS} seeds of each embedding and is undecided until then; "
                       "`python -m analyses.paper_budget` trains the rest, one seed per command." + curves + "\n")
    outcomes = {claim: (s.outcome(f"stability_n512.{claim}"), base.outcome(f"stability.{claim}"))
                for claim in ("binary_stable", "onehot_unstable_in_some_seeds")}
    return head + (f". Binary trains stably: {outcomes['binary_stable'][0]} (at n = 128 "
                   f"{outcomes['binary_stable'][1]}); one-hot is unstable in some seeds: "
                   f"{outcomes['onehot_unstable_in_some_seeds'][0]} (at n = 128 "
                   f"{outcomes['onehot_unstable_in_some_seeds'][1]})." + curves + "\n")


READINGS = {"stability_d32_k25_n512": reading}
