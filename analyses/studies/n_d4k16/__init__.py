"""Does n matter at d = 4, k = 16? The one-hot rows of ``embedding_d4_k16`` (n = 128) and ``embedding_d4_k16_n512``
(n = 512), decided by the claims of study ``n_d4k16`` (paper 2 §3 / App. F: no significant effect of n)."""

import json
from pathlib import Path

from analyses import _studies as S
from analyses import claims as C
from analyses.framework.budgets import PAPER
from analyses.framework.study import MeasuredStudy
from interp.training.sweep import read_rows


def n_at_pair(out: Path, steps: int, seeds: list[int]) -> str:
    """Does n matter at d = 4, k = 16? Study ``n_d4k16`` of ``analyses.claims`` decided on the one-hot rows of
    embedding_d4_k16 (n = 128) and embedding_d4_k16_n512 (n = 512) at this budget and these seeds."""
    rows = []
    for table in C.STUDIES["n_d4k16"].tables:
        latest = {}
        for row in read_rows(out / f"{table}.csv"):
            config = json.loads(row["config"])
            if int(row["seed"]) in seeds and config["steps"] == steps and config["embedding"] == "onehot":
                latest[row["name"]] = row
        rows += latest.values()
    lines = [f"## Study `n_d4k16`: training length n at d = 4, k = 16, n = 128 vs 512 (`{S.program()}`)", "",
             f"Command: `{S.command_line()}`  ",
             f"Rows: the {len(rows)} one-hot rows of {', '.join(C.STUDIES['n_d4k16'].tables)} at {steps} steps and "
             f"seeds {', '.join(map(str, seeds))} (the same rows as the embedding sections: not independent evidence)."
             "  ", f"Equivalence margin: +-{C.EQUIVALENCE_MARGIN:g} in R1 (docs/claims.md).", "",
             C.RULES_LINE, "", *C.verdict_lines(C.decide_study("n_d4k16", rows))]
    return "\n".join(lines) + "\n"


STUDY = MeasuredStudy("Training length n at d = 4, k = 16", "", {"paper": ()},
                      {"n_d4k16": lambda: n_at_pair(S.HERE / "results" / "studies", PAPER.steps, list(PAPER.seeds))})
