"""The claims of paper 2 Table 1, one-hot vs binary forward time and peak memory (study ``table1``, decided on one
benchmark run of this folder; docs/claims.md)."""

import math
import re
from collections.abc import Sequence

from analyses import claims as C

MIN_ROUNDS = 3  # interleaved timing rounds a median needs
TABLE1_THREADS = 2
TABLE1_METRIC = ("one benchmark run (`python -m analyses.bench_inference`, analyses/results/bench/"
                 "inference_embeddings.json; rows of `analyses.bench_inference.table1_rows`, one per k): a single "
                 "measurement per k, not seeds, so each rule is a plain comparison of the run's medians, without a "
                 "test. ")
SPEEDUP = ("speed-up = one-hot forward time / binary forward time of the one-layer learnable model (column speedup, "
           "the JSON's 'speed-up' as printed, 2 decimals; medians over interleaved rounds, CPU)")
MEMORY = ("memory saved = 1 - binary / one-hot peak memory of one forward, in % (column memory_saved, as printed; "
          "peak-RSS growth of a fresh process, CPU; the paper's is GPU memory)")
TABLE1_COLUMNS_READ = ("title", "command")
BACKWARD = " Table 1 also reports backward time, which is not measured here."


def _bench_value(ev: C.Evidence, k: int, column: str) -> float:
    """A Table 1 row's number at ``k``; NaN when the run has no row at k or the value is not finite (never on the
    claimed side of a comparison)."""
    rows = ev.cell(k=k)
    value = float(rows[0][column]) if len(rows) == 1 else math.nan
    return value if math.isfinite(value) else math.nan


def _table1_control(ev: C.Evidence) -> C.Finding:
    runs = {(str(row["title"]), str(row["command"])) for row in ev.rows}
    if len(runs) != 1:
        return C.Finding(False, f"rows of {len(runs)} benchmark runs (1 needed)")
    title, command = runs.pop()
    rounds = C.table1_rounds(title, command)
    threads = re.search(r"\b(\d+) threads?\b", title)
    present = [k for k in C.TABLE1_KS if len(ev.cell(k=k)) == 1]
    return C._all([
        C.Finding(rounds is not None and rounds >= MIN_ROUNDS,
                  f"both embeddings timed interleaved in one process, median of {rounds} rounds (>= {MIN_ROUNDS} "
                  "needed)" if rounds is not None
                  else f"interleaved rounds not stated in the title or command (>= {MIN_ROUNDS} needed)"),
        C.Finding(bool(threads) and int(threads.group(1)) == TABLE1_THREADS,
                  f"threads stated: {threads.group(1) if threads else 'none'} ({TABLE1_THREADS} needed)"),
        C.Finding(len(present) == len(C.TABLE1_KS), f"k of the paper's grid {{{', '.join(map(str, C.TABLE1_KS))}}} "
                                                    f"present: {len(present)}/{len(C.TABLE1_KS)}"),
    ])


def _table1_claims() -> list[C.Claim]:
    def listed(values: Sequence[float], ks: Sequence[int], unit: str) -> str:
        return ", ".join(f"k={k} {value:.2f}{unit}" if unit == "x" else f"k={k} {value:.1f}{unit}"
                         for k, value in zip(ks, values))

    def non_decreasing(values: Sequence[float]) -> bool:
        return all(b >= a for a, b in zip(values, values[1:]))  # False with a NaN

    def faster(ev: C.Evidence) -> C.Finding:
        ks = [k for k in C.TABLE1_KS if k >= 25]
        values = [_bench_value(ev, k, "speedup") for k in ks]
        return C.Finding(all(v > 1 for v in values), f"speed-up {listed(values, ks, 'x')} (> 1 at each needed)")

    def grows(ev: C.Evidence) -> C.Finding:
        values = [_bench_value(ev, k, "speedup") for k in C.TABLE1_KS]
        return C.Finding(non_decreasing(values), f"speed-up {listed(values, C.TABLE1_KS, 'x')} (non-decreasing in k "
                                                 "needed)")

    def saves(ev: C.Evidence) -> C.Finding:
        values = [_bench_value(ev, k, "memory_saved") for k in C.TABLE1_KS]
        return C.Finding(all(v > 0 for v in values) and non_decreasing(values),
                         f"memory saved {listed(values, C.TABLE1_KS, '%')} (> 0 at every k and non-decreasing needed)")

    control = C._check(f"one benchmark run that timed both embeddings interleaved in one process with at least "
                       f"{MIN_ROUNDS} rounds (medians; the rounds stated in the title, or --embedding-rounds of the "
                       f"bench_inference command), at the {TABLE1_THREADS} threads its title states, with a row for "
                       f"every k of the paper's grid {{{', '.join(map(str, C.TABLE1_KS))}}}", TABLE1_COLUMNS_READ,
                       _table1_control)
    paper = "paper 2 Table 1"
    return [
        C.Claim("table1.binary_faster_from_k25", "table1", paper,
                "The binary embedding's forward pass is faster than one-hot's at every k >= 25 (the paper, GPU: 1.05x "
                "at k = 25 to 12.14x at k = 1000; 0.88x at k = 6)." + BACKWARD, TABLE1_METRIC + SPEEDUP,
                C._check("speed-up > 1 at each k in {25, 100, 400, 1000}", ("speedup",), faster), control),
        C.Claim("table1.speedup_grows_with_k", "table1", paper,
                "The binary embedding's forward speed-up over one-hot grows with k." + BACKWARD,
                TABLE1_METRIC + SPEEDUP,
                C._check("speed-up non-decreasing over k = 6, 25, 100, 400, 1000", ("speedup",), grows), control),
        C.Claim("table1.binary_saves_memory_growing_with_k", "table1", paper,
                "The binary embedding saves memory against one-hot at every k, and the saving grows with k (the "
                "paper, GPU: 0.9% at k = 6 to 69.3% at k = 1000)." + BACKWARD, TABLE1_METRIC + MEMORY,
                C._check("memory saved > 0 at each k in {6, 25, 100, 400, 1000} and non-decreasing over them",
                         ("memory_saved",), saves), control),
    ]


CLAIMS = tuple(_table1_claims())

# The design of the study these claims decide (docs/claims.md): its grid, the tables its claims read, the seeds a cell
# needs.
DESIGNS = (
    C.StudyDesign("table1", "Paper 2 Table 1: one-hot vs binary forward time and peak memory",
                  "one-layer learnable model, d = 32, n = 1024, 32 tasks, k in {6, 25, 100, 400, 1000}, 2 threads, "
                  "both embeddings timed in interleaved rounds in one process (medians); one benchmark run, no seeds",
                  ("inference_embeddings",), seeds=1,
                  source="`analyses/results/bench/inference_embeddings.json`, one row per k "
                  "(`analyses.bench_inference.table1_rows`)"),
)
