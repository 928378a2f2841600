"""Section ``embedding_d4_k16_n512`` of analyses/RESULTS.md in words: every figure looked up in the committed rows."""

from __future__ import annotations

from analyses import claims as C
from analyses.framework import cell_readings as cells
from analyses.framework import reading as R
from analyses.framework.reading import num
from interp.model.config import EMBEDDINGS


def reading() -> str:
    s, base = R.study("embedding_d4_k16_n512"), R.study("embedding_d4_k16")
    parts = []
    for embedding in ("onehot", "binary", "none"):
        if f"embedding={embedding}" not in s.groups:
            parts.append(f"{embedding}: no seed yet")
            continue
        label = s.label(embedding=embedding)
        plural = "s" if s.seeds(label) != 1 else ""
        each = ", ".join(num(value) for value in sorted(s.values(label, "rel")))
        parts.append(f"{embedding}: {s.seeds(label)} seed{plural}, median {num(s.median(label))} of one-step Lloyd "
                     f"(seeds {each}; {s.below(label)} below 1; at n = 128 "
                     f"{num(base.median(base.label(embedding=embedding)))})")
    if not s.complete(EMBEDDINGS):
        return (f"Reading (d = 4, k = 16, n = {s.config('n')}, {s.steps()} steps, the rows trained so far): "
                + "; ".join(parts) + f". Each claim needs {C.MIN_SEEDS} seeds of each embedding it reads and is "
                "undecided until then; `python -m analyses.paper_budget` trains the rest, one seed per command.\n")
    verdicts = [f"\"{words}\": {s.outcome('embedding_n512.d4k16.' + claim)} at n = {s.config('n')}, "
                f"{base.outcome('embedding.d4k16.' + claim)} at n = {base.config('n')}"
                for claim, words in cells.D4K16_CLAIMS.items()]
    return (f"Reading (d = 4, k = 16, n = {s.config('n')}, {s.steps()} steps, {s.seeds()} seeds): "
            + "; ".join(parts) + ". Verdicts at the two n: " + "; ".join(verdicts) + ". Whether n changes the "
            "one-hot model's figure beyond a stated margin is the `n_d4k16` claim below." + cells.stalled(s) + "\n")


READINGS = {"embedding_d4_k16_n512": reading}
