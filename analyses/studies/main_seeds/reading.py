"""Section ``embedding_d32_k10`` of analyses/RESULTS.md in words: every figure looked up in the committed rows."""

from __future__ import annotations

import statistics

from analyses import claims as C
from analyses.framework import reading as R
from analyses.framework.reading import num, signed


def reading() -> str:
    s = R.study("embedding_d32_k10")
    lloyd = statistics.median(float(row["lloyd_log_objective"]) for row in s.rows)

    def after_twenty(name: str, label: str) -> str:
        below = s.below(label, "gap20", 0.0)
        return (f"{name} {num(s.median(label, 'model'))} (below Lloyd in {below} of {s.seeds(label)} seeds, median "
                f"gap {signed(s.median(label, 'gap20'))})")

    onehot, binary, none = (s.label(embedding=e) for e in ("onehot", "binary", "none"))
    at_paper = int(s.rows[0]["steps"]) >= C.PAPER_STEPS
    training = ("Training: each run was trained by `python -m analyses.main_seeds --embeddings E --seeds S` (one "
                "command per embedding and seed, queued by `python -m analyses.paper_budget`), which scored its "
                "checkpoint at once into the `multistep_seeds` and `generalisation` rows; this section is written from "
                "the training rows by the command above.\n") if at_paper else ""
    budget = "the papers' budget" if at_paper else "fewer than the papers' 10,000"
    return (
        training +
        f"Reading ({s.steps()} steps, {budget}; {s.seeds()} seeds, the papers: 10): after 20 re-embedded steps "
        f"against Lloyd's {num(lloyd)}, {after_twenty('one-hot', onehot)}, {after_twenty('binary', binary)}, "
        f"{after_twenty('d-only', none)}; d-only's best seed reaches {num(s.best(none))} of one-step Lloyd "
        f"(one-hot's median {num(s.median(onehot))}).\n")


READINGS = {"embedding_d32_k10": reading}
