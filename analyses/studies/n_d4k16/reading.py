"""Section ``n_d4k16`` of analyses/RESULTS.md in words: every figure looked up in the committed rows."""

from __future__ import annotations

import statistics

from analyses import claims as C
from analyses.framework import reading as R
from analyses.framework.reading import num
from analyses.framework.statistics import beyond_margin_p, equivalence_p


def reading() -> str:
    small, paper = R.study("embedding_d4_k16"), R.study("embedding_d4_k16_n512")
    at_128 = small.values(small.label(embedding="onehot"), "rel")
    at_512 = paper.values(paper.label(embedding="onehot"), "rel")
    margin = C.EQUIVALENCE_MARGIN
    equivalent, beyond = equivalence_p(at_128, at_512, margin), beyond_margin_p(at_128, at_512, margin)
    if min(len(at_128), len(at_512)) < C.MIN_SEEDS:
        verdict = f"the claim waits for {C.MIN_SEEDS} seeds at each n"
    elif equivalent <= C.ALPHA:
        verdict = "equivalence is shown: n has no effect beyond the margin here"
    elif beyond <= C.ALPHA:
        verdict = "a difference beyond the margin is shown: n matters here"
    else:
        gap = abs(statistics.median(at_128) - statistics.median(at_512))
        verdict = (f"with {C.MIN_SEEDS} seeds at each n the rule decides neither way (undecided); the medians differ "
                   f"by {num(gap)}, against a margin of {num(margin)}")
    return (f"Reading (one-hot, d = 4, k = 16, {paper.steps()} steps): one-step Lloyd's objective times "
            f"{num(statistics.median(at_128))} at n = 128 ({len(at_128)} seeds) and {num(statistics.median(at_512))} "
            f"at n = 512 ({len(at_512)} seeds, {sum(v < 1 for v in at_512)} below 1). Equivalence within "
            f"+-{num(margin)} is {'' if equivalent <= C.ALPHA else 'not '}shown (TOST p = {num(equivalent)}), a "
            f"difference beyond it {'is' if beyond <= C.ALPHA else 'is not'} (p = {num(beyond)}): {verdict}.\n")


READINGS = {"n_d4k16": reading}
