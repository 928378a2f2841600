"""The claims across the embedding cells (d, k) in C.PAIRS: one-hot converges faster than binary at d = 4, the gap
vanishes by d = 32 and binary's deficit grows with k (study ``embedding``, paper 2 §3, Thm 3.1, Figs. 10, 15; the
rules are in docs/claims.md). Each cell's own claims are in its folder (embedding_d4_k6, ...)."""

import math

from analyses import claims as C
from analyses.framework.statistics import median as _median
from analyses.framework.statistics import rank_sum_p


def _paired_deficits(ev: C.Evidence, onehot: C.Cell, binary: C.Cell) -> list[float]:
    """Per seed (rows paired by their seed, a pairing fixed by the seed list): A(binary) / A(onehot) - 1."""
    by_seed = {str(row["seed"]): C.curve_area(ev, row) for row in ev.cell(**onehot[1])}
    out = []
    for row in ev.cell(**binary[1]):
        base = by_seed.get(str(row["seed"]), math.inf)
        out.append(C.curve_area(ev, row) / base - 1 if math.isfinite(base) else math.inf)
    return out


def _same_seeds_clean(ev: C.Evidence, onehot: C.Cell, binary: C.Cell) -> C.Finding:
    onehot_rows, binary_rows = ev.cell(**onehot[1]), ev.cell(**binary[1])
    same = sorted(str(r["seed"]) for r in onehot_rows) == sorted(str(r["seed"]) for r in binary_rows)
    clean = sum(C._clean(row) for row in onehot_rows)
    return C.Finding(same and clean == len(onehot_rows), f"{onehot[0]} and binary share their seeds: "
                     f"{'yes' if same else 'no'}; {clean}/{len(onehot_rows)} one-hot seeds ended cleanly")


def _embedding_across_claims() -> list[C.Claim]:
    (oh6, bn6), (oh16, bn16), (oh32, bn32) = (C._pair_cells(d, k, ("onehot", "binary")) for d, k in C.PAIRS)

    def faster(ev: C.Evidence) -> C.Finding:
        return C._all([C._ranks(oh[0], C._values(ev, oh, C.curve_area), "binary", C._values(ev, bn, C.curve_area),
                                "less") for oh, bn in ((oh6, bn6), (oh16, bn16))])

    def no_gap(ev: C.Evidence) -> C.Finding:
        a, b = C._values(ev, oh32, C.curve_area), C._values(ev, bn32, C.curve_area)
        p = rank_sum_p(a, b, "two-sided")
        gap = _median(b) / _median(a) - 1 if a and b else math.nan
        return C.Finding(p > C.ALPHA and abs(gap) < C.NO_GAP,
                         f"{oh32[0]} median {_median(a):.3f} vs binary median {_median(b):.3f} (binary {gap:+.1%}), "
                         f"two-sided p = {p:.3f}")

    def grows(ev: C.Evidence) -> C.Finding:
        return C._ranks("d=4 binary deficit at k=16", _paired_deficits(ev, oh16, bn16), "at k=6",
                        _paired_deficits(ev, oh6, bn6), "greater", fmt="+.1%")

    return [
        C.Claim("embedding.onehot_faster_at_small_d", "embedding", "paper 2 §3, Thm 3.1, Figs. 10, 15",
                "At small d (d = 4; k = 6 and k = 16) one-hot converges faster than binary",
                C.AREA_METRIC,
                C._check("at each of (4, 6) and (4, 16): one-sided rank test of A(onehot) < A(binary) (both must pass)",
                         (), faster, history=True),
                C._check(f"at least {C.MIN_SEEDS} seeds of one-hot and binary at both pairs, and one-hot reaches "
                         "one-step Lloyd at both (median final R1 < 1): the curves cover the convergence the paper "
                         "plots",
                         C.R1_COLUMNS, lambda ev: C._all([C._enough(ev, (oh6, bn6, oh16, bn16)), C._reaches(ev, oh6),
                                                          C._reaches(ev, oh16)]))),
        C.Claim("embedding.no_gap_at_d32", "embedding", "paper 2 §3, Thm 3.1, Figs. 10, 15",
                "By d = 32 (k = 6) the one-hot/binary difference in convergence vanishes",
                C.AREA_METRIC,
                C._check(f"two-sided rank test of A(onehot) vs A(binary) not significant (p > {C.ALPHA}) and the "
                         f"median A of binary within {C.NO_GAP:.0%} of one-hot's", (), no_gap, history=True),
                C._check(f"at least {C.MIN_SEEDS} seeds of each, and both reach one-step Lloyd (median final R1 < 1): "
                         "'no gap' is judged between converged models only", C.R1_COLUMNS,
                         lambda ev: C._all([C._enough(ev, (oh32, bn32)), C._reaches(ev, oh32), C._reaches(ev, bn32)]))),
        C.Claim("embedding.binary_deficit_grows_with_k", "embedding", "paper 2 §3, Thm 3.1, Figs. 10, 15",
                "At d = 4 the binary model's deficit against one-hot grows with k (k = 16 vs k = 6)",
                "binary deficit per seed = A(binary) / A(onehot) - 1, the rows of one seed paired (a pairing fixed by "
                "the seed list, not by the data); " + C.AREA_METRIC,
                C._check("one-sided rank test of deficit(k = 16) > deficit(k = 6)", ("seed",), grows, history=True),
                C._check(f"at least {C.MIN_SEEDS} seeds of one-hot and binary at both pairs, the same seeds in both "
                         "cells of a pair, every one-hot seed ended cleanly (the deficit's denominator), and one-hot "
                         "reaches one-step Lloyd at both pairs", ("seed", "relative_objective"),
                         lambda ev: C._all([C._enough(ev, (oh6, bn6, oh16, bn16)), _same_seeds_clean(ev, oh6, bn6),
                                            _same_seeds_clean(ev, oh16, bn16), C._reaches(ev, oh6),
                                            C._reaches(ev, oh16)]))),
    ]


CLAIMS = tuple(_embedding_across_claims())

# The design of the study these claims decide (docs/claims.md): its grid, the tables its claims read, the seeds a cell
# needs.
DESIGNS = (
    C.StudyDesign("embedding", "Embedding width: one-hot (D = d + k) vs binary (D = d + ceil(log2 k)) vs none (D = d)",
                  "(d, k) in {(4, 6), (4, 16), (32, 6), (8, 8)} x embedding in {onehot, binary, none}; n = 128, "
                  "tau = 0.1, NE loss; 10,000 steps, 5 seeds",
                  ("embedding_d4_k6", "embedding_d4_k16", "embedding_d32_k6", "embedding_d8_k8")),
)
