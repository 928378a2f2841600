"""One-hot vs binary convergence across (d, k) (paper 2 §3.5): one-hot faster than binary at small d, no gap by
d = 32, the binary deficit growing with k at small d; decided on the rows of the embedding cells (4, 6), (4, 16),
(32, 6)."""

import statistics
from pathlib import Path

from analyses import _studies as S
from analyses import claims as C
from analyses.framework.budgets import PAPER
from analyses.framework.grid import tables_evidence
from analyses.framework.study import MeasuredStudy

TABLES = tuple(f"embedding_d{d}_k{k}" for d, k in C.PAIRS)  # the three cells of the design the claims compare


def design_rows(out: Path, steps: int, seeds: list[int], checkpoints: str | None,
                single_pair: bool = False) -> tuple[list[dict], dict | None]:
    """The rows of the embedding study's tables in ``out`` at this budget and these seeds (the latest row of each
    name), and their training curves keyed as ``analyses.claims`` reads them (None if some were not kept). Rows
    without a kept curve fall back to their checkpoints in ``checkpoints`` (itself when the command named a single
    pair, else its per-table subfolder, as ``main`` gives ``run_study``)."""
    def folder_of(table: str) -> Path:  # the folders run_study used
        if checkpoints:
            return Path(checkpoints) if single_pair else Path(checkpoints) / table
        return Path("runs") / "studies" / table

    return tables_evidence(out, TABLES, steps, seeds, folder_of)


def across_pairs(out: Path, steps: int, seeds: list[int], checkpoints: str | None = None,
                 single_pair: bool = False) -> str:
    """Paper 2 §3.5 across (d, k): one-hot converges faster than binary at small d, no gap by d = 32, the binary
    deficit grows with k at small d; decided by ``analyses.claims`` on the rows of the three design pairs."""
    rows, histories = design_rows(out, steps, seeds, checkpoints, single_pair)
    evidence = C.Evidence(tuple(rows), histories)
    lines = [f"## Study `embedding_across_pairs`: one-hot vs binary convergence across (d, k) (`{S.program()}`)",
             "",
             f"Command: `{S.command_line()}`  ",
             f"Rows: the {len(rows)} rows of {', '.join(TABLES)} at {steps} steps and seeds "
             f"{', '.join(map(str, seeds))}.  ",
             "Speed of convergence A = mean relative validation objective over the training curve after step 0 (lower "
             "is faster); median over seeds.", ""]
    if histories is not None:
        lines += ["| d | k | seeds | A one-hot | A binary | binary / one-hot - 1 |", "|---|---|---|---|---|---|"]
        for d, k in C.PAIRS:
            areas = {name: [C.curve_area(evidence, row) for row in evidence.cell(d=d, k=k, embedding=name)]
                     for name in ("onehot", "binary")}
            if areas["onehot"] and areas["binary"]:
                onehot, binary = statistics.median(areas["onehot"]), statistics.median(areas["binary"])
                lines.append(f"| {d} | {k} | {len(areas['onehot'])} | {onehot:.3f} | {binary:.3f} | "
                             f"{binary / onehot - 1:+.1%} |")
        lines.append("")
    results = []
    for claim in C.claims_of("embedding"):
        if claim.id.startswith("embedding.d"):
            continue  # a pair's own claims are in its section
        if histories is None:
            results.append((claim, C.Verdict(C.UNDECIDED, "reads the training curves, which were not kept for these "
                                             "rows", "not evaluated")))
        else:
            results.append((claim, C.decide(claim, rows, histories)))
    lines += [C.RULES_LINE, "", *C.verdict_lines(results)]
    return "\n".join(lines) + "\n"


STUDY = MeasuredStudy("One-hot vs binary convergence across (d, k)", "", {"paper": ()},
                      {"embedding_across_pairs": lambda: across_pairs(S.HERE / "results" / "studies", PAPER.steps,
                                                                      list(PAPER.seeds))})
