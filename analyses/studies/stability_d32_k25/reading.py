"""Section ``stability_d32_k25`` of analyses/RESULTS.md in words: every figure looked up in the committed rows."""

from __future__ import annotations

from analyses import claims as C
from analyses.framework import cell_readings as cells
from analyses.framework import reading as R
from analyses.framework.reading import num


def reading() -> str:
    s, paper = R.study("stability_d32_k25"), cells.study_if_stored("stability_d32_k25_n512")
    onehot, binary = s.label(embedding="onehot"), s.label(embedding="binary")
    counts = cells.unstable_counts(s)
    text = (
        f"Reading (d = {s.config('d')}, k = {s.config('k')}, n = {s.config('n')}, no clipping, {s.steps()} steps): "
        f"{counts['onehot'][1]} of {counts['onehot'][0]} one-hot and {counts['binary'][1]} of {counts['binary'][0]} "
        f"binary seeds were numerically unstable: \"binary trains stably\" {s.outcome('stability.binary_stable')}, "
        "\"one-hot is unstable in some seeds\" (3 of 10 in the paper, at n = 512) "
        f"{s.outcome('stability.onehot_unstable_in_some_seeds')} at n = {s.config('n')}. The one-hot seeds spread "
        "more instead: upper quartile "
        f"{num(s.quartile(onehot, 'rel', 0.75))} against the median {num(s.median(onehot))} (binary interquartile "
        f"range {num(s.quartile(binary, 'rel', 0.25))}–{num(s.quartile(binary, 'rel', 0.75))}), a worse final value in "
        f"some seeds rather than a blow-up ({sum(jumped for _, _, jumped in counts.values())} of the "
        f"{sum(seeds - numeric for seeds, numeric, _ in counts.values())} seeds that ended cleanly with a validation "
        f"objective that rose more than {100 * C.SPIKE:.0f}% above its best so far).")
    if paper is None or not paper.complete(("onehot", "binary"), C.STABILITY_SEEDS):
        trained = len(paper.rows) if paper is not None else 0
        return text + (f" The same study at the papers' n = {C.PAPER_N} (`stability_d32_k25_n512`) has {trained} of "
                       f"{2 * C.STABILITY_SEEDS} seeds trained.\n")
    claim = "onehot_unstable_in_some_seeds"
    return text + (f" At the papers' n = {C.PAPER_N} (`stability_d32_k25_n512`) the one-hot half is "
                   f"{paper.outcome('stability_n512.' + claim)}.\n")


READINGS = {"stability_d32_k25": reading}
