"""Every claim of paper 2 that the studies here decide, as a rule with a control, fixed before the runs.

Each :class:`Claim` names one metric (columns of the study rows that ``interp.training.sweep``
writes, or of the seeds' training histories), a **rule** (a pure function of the rows: does the claim hold?) and a
**control** (a pure function of the rows that must hold for the verdict to count). :func:`decide` turns a claim and
a study's rows into a :class:`Verdict`: "reproduced" or "not reproduced" by the rule when the control holds, and
"undecided at this budget" whenever it does not.

Conventions (every rule and control; ``python -m analyses.claims --markdown`` writes them into docs/claims.md;
the exact tests are ``analyses._stats``):

* A *cell* is one grid point of a study (the rows whose ``config`` has the given field values); a *seed* is one row.
* A seed whose run did not end cleanly (``status`` ``diverged`` or ``unscorable``; ``unfinished``: a checkpoint
  scored before its configured steps) takes the worst value of every metric (+inf; lower is better for every metric
  here), as does a non-finite value: a failed run never counts as a success.
* Sign test: exact one-sided binomial test of "more seeds on the claimed side than chance" (success probability
  1/2), P(X >= hits) <= 0.05. With 5 seeds it needs all 5 (p = 1/32); with 10 seeds, 9 (p = 11/1024).
* Rank test: exact Mann-Whitney (Wilcoxon rank-sum) permutation test on the per-seed values, midranks for ties,
  one-sided at 0.05 (two-sided p = twice the smaller one-sided p, at most 1). With 5 vs 5 seeds and no ties it
  needs U <= 4 (p = 12/252).
* Fisher test: exact one-sided Fisher test of "a higher rate of unstable seeds" at 0.05.
* A claim made of several tests ("at every tau") holds when every test does (an intersection-union test, level 0.05
  without a multiplicity correction).
* A claim of *no* effect is an equivalence claim: every pair of cells within +-EQUIVALENCE_MARGIN by the exact
  rank-sum TOST (``_stats.equivalence_p``) at 0.05 (intersection-union: no correction); it is "not reproduced" only
  when some pair differs by more than the margin (``_stats.beyond_margin_p`` at the Bonferroni level 0.05 / m over m
  pairs), and undecided when neither is shown (too few seeds for the margin).
* "Reaches one-step Lloyd": the median over seeds of the final relative objective is below 1.

The study rows are the CSV rows of one run (``interp.training.sweep.study_rows``: one row per (grid point, seed)),
for the embedding study those of its three tables together; histories map a row's :func:`row_key` ("<study>/<name>":
row names repeat across the embedding tables) to its checkpoint's training history (``[{"step", "loss",
"relative_objective", "lr"}, ...]``; :func:`histories_by_key` converts the label-keyed lists of
``analyses.studies.histories_by_label``). The studies ``multistep`` and ``generalisation`` read rows of their own,
one per checkpoint (and evaluation setting) with per-step curves (``analyses.multistep --seed-rows``,
``analyses.generalisation``); ``table1`` reads one row per k of one benchmark run
(``analyses.bench_inference.table1_rows``).

Run: python -m analyses.claims --markdown > docs/claims.md
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields

from analyses.framework.preregistration import NOT_REPRODUCED, OUTCOMES, REPRODUCED, UNDECIDED, Verdict  # noqa: F401
from analyses.framework.statistics import beyond_margin_p, equivalence_p, fisher_greater_p, rank_sum_p, sign_test_p
from analyses.framework.statistics import median as _median
from interp import _arguments as arguments
from interp._checks import InvalidInput, InvalidInputType
from interp.model.config import EMBEDDINGS
from interp.task_config import FAMILIES
from interp.training.config import TrainConfig

PROG = "python -m analyses.claims"
ALPHA = 0.05  # every test's level
MIN_SEEDS = 5  # seeds per cell a verdict needs (the authors' first five)
STABILITY_SEEDS = 10  # seeds per cell of the stability study (paper 2: 3 of 10 one-hot seeds unstable)
PAPER_STEPS = 10_000  # the papers' training budget
SPIKE = 0.25  # unstable: the relative objective jumps more than 25% above its best value so far
SETTLE = 0.05  # settled: every later relative objective within 5% of the run's final one
SETTLED_BY = 0.8  # the tau = 0.1 runs must settle within 80% of the logged steps
NO_GAP = 0.05  # no gap: the medians differ by less than 5%
PAPER_N = 512  # the papers' training length; the loss-gap thresholds are stated at this n
EQUIVALENCE_MARGIN = 0.025  # "no effect" of n: every pair of n within +-0.025 in R1 (docs/claims.md: why this size)
RULES_LINE = ("Verdicts: each claim's metric, rule and control are in docs/claims.md (`analyses/claims.py`, committed "
              "before the 10,000-step runs); reproduced / not reproduced by the rule when the control holds, undecided "
              "at this budget when it does not.")
NON_CAUCHY = ("normal", "gumbel", "laplace", "lognormal")
TAUS = (1.0, 0.25, 0.14, 0.1)
LOSS_NAMES = {"softmin": "NE", "sparsemax": "L2"}
PAIRS = ((4, 6), (4, 16), (32, 6))

BASE_COLUMNS = ("study", "name", "status", "config")  # read by every rule: cells, histories, worst values
CURVE_KEYS = ("step", "relative_objective")  # what the history-based rules read of a training history


def row_key(row: Mapping[str, object]) -> str:
    """A row's key in ``histories``: "<study>/<name>" (the sweep's table and the row's name)."""
    return f"{row['study']}/{row['name']}"


# ----- the registry's types -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Finding:
    """What a rule or control found: whether it holds and the figure that decides it, as text."""

    holds: bool
    figure: str


@dataclass(frozen=True)
class Evidence:
    """One study's rows (one per seed and grid point) and, where rules read them, the seeds' training histories
    (row_key -> history)."""

    rows: tuple[Mapping[str, object], ...]
    histories: Mapping[str, Sequence[Mapping[str, object]]] | None = None  # row_key(row) -> history

    def cell(self, **fields: object) -> list[Mapping[str, object]]:
        """The rows whose training config has these field values (a grid point), in the given order."""
        return [row for row in self.rows
                if all(json.loads(str(row["config"])).get(name) == value for name, value in fields.items())]

    def history(self, row: Mapping[str, object]) -> Sequence[Mapping[str, object]]:
        """The training history of ``row`` (its ``[{"step", "relative_objective", ...}, ...]``)."""
        key = row_key(row)
        if self.histories is None or key not in self.histories:
            raise InvalidInput(f"histories lacks the training history of row {key!r}: this claim reads the training "
                               "curves; pass {row_key(row): checkpoint history} for every row")
        history = self.histories[key]
        if not history:
            raise InvalidInput(f"histories[{key!r}] is empty")
        return history


@dataclass(frozen=True)
class Check:
    """A rule or a control: its statement in words, the row columns and history keys it reads, and the function."""

    text: str
    columns: tuple[str, ...]
    history_keys: tuple[str, ...]
    evaluate: Callable[[Evidence], Finding]


@dataclass(frozen=True)
class Claim:
    """One finding of paper 2, decided by ``rule`` on one ``metric`` when ``control`` holds."""

    id: str
    study: str
    paper: str
    claim: str
    metric: str
    rule: Check
    control: Check


@dataclass(frozen=True)
class StudyDesign:
    """A study: its grid, the sweep tables whose rows its claims read and the seeds a cell needs."""

    name: str
    title: str
    design: str
    tables: tuple[str, ...]
    seeds: int = MIN_SEEDS
    source: str = ""  # where the rows come from, when not the sweep's CSVs analyses/results/studies/<table>.csv


# ----- metrics (lower is better for all; a seed that did not end cleanly gets +inf) ----------------------------------
def _number(value: object) -> float:
    number = float(value)
    return number if math.isfinite(number) else math.inf


def _clean(row: Mapping[str, object]) -> bool:
    return row["status"] == "ok"


def final_relative(ev: Evidence, row: Mapping[str, object]) -> float:
    """R1: the final relative objective (one model step / one Lloyd iteration, paper 2 Eq. 20)."""
    return _number(row["relative_objective"]) if _clean(row) else math.inf


def twenty_step_gap(ev: Evidence, row: Mapping[str, object]) -> float:
    """G20: mean log objective after 20 re-embedded model steps minus after 20 Lloyd iterations (same tasks, start)."""
    if not _clean(row):
        return math.inf
    return _number(_number(row["model_log_objective"]) - _number(row["lloyd_log_objective"]))


def transfer_gap(family: str) -> Callable[[Evidence, Mapping[str, object]], float]:
    """G20 of a row's model on ``family`` tasks (its ``transfer`` column); +inf where it is missing."""

    def gap(ev: Evidence, row: Mapping[str, object]) -> float:
        scores = json.loads(str(row["transfer"])).get(family)
        if not _clean(row) or scores is None:
            return math.inf
        return _number(_number(scores["model"]) - _number(scores["lloyd"]))

    return gap


def loss_gap(column: str) -> Callable[[Evidence, Mapping[str, object]], float]:
    """The smoothed loss minus the k-means objective after one step (``loss_gap_mean`` or ``loss_gap_max``)."""
    return lambda ev, row: _number(row[column]) if _clean(row) else math.inf


def _curve(ev: Evidence, row: Mapping[str, object]) -> list[tuple[float, float]]:
    return [(float(h["step"]), float(h["relative_objective"])) for h in ev.history(row)]


def curve_area(ev: Evidence, row: Mapping[str, object]) -> float:
    """A: mean relative objective over the logged evaluations after step 0 (lower: low objectives reached sooner)."""
    values = [value for step, value in _curve(ev, row) if step > 0]
    if not _clean(row) or not values:
        return math.inf
    return _number(sum(values) / len(values))


def settling_step(ev: Evidence, row: Mapping[str, object]) -> float:
    """The first logged step from which every logged relative objective stays within SETTLE of the final one."""
    curve = _curve(ev, row)
    final = curve[-1][1]
    if not _clean(row) or not all(math.isfinite(value) for _, value in curve) or final <= 0:
        return math.inf
    settled = curve[-1][0]
    for step, value in reversed(curve):
        if abs(value / final - 1) > SETTLE:
            break
        settled = step
    return settled


def largest_jump_at(ev: Evidence, row: Mapping[str, object]) -> tuple[float, float, float, float]:
    """The largest rise of the relative objective above the lowest value logged before it: (the rise as a fraction of
    that lowest value, the step it was logged at, the lowest value, the value). (inf, step, nan, value) at the first
    non-finite value; (0.0, nan, nan, nan) when the curve never rises."""
    best, found = math.inf, (0.0, math.nan, math.nan, math.nan)
    for step, value in _curve(ev, row):
        if not math.isfinite(value):
            return math.inf, step, math.nan, value
        if best < math.inf and value / best - 1 > found[0]:
            found = (value / best - 1, step, best, value)
        best = min(best, value)
    return found


def largest_jump(ev: Evidence, row: Mapping[str, object]) -> float:
    """Largest rise of the relative objective above the lowest value logged before it, as a fraction of that value."""
    return largest_jump_at(ev, row)[0]


def unstable(ev: Evidence, row: Mapping[str, object]) -> bool:
    """The run diverged or was unscorable, or its relative objective jumped more than SPIKE above its best so far."""
    return not _clean(row) or largest_jump(ev, row) > SPIKE


# ----- building blocks of rules and controls ------------------------------------------------------------------------
Cell = tuple[str, dict]  # (name in figures, config field values)
Metric = Callable[[Evidence, Mapping[str, object]], float]


def _values(ev: Evidence, cell: Cell, metric: Metric) -> list[float]:
    return [metric(ev, row) for row in ev.cell(**cell[1])]


def _all(findings: Sequence[Finding]) -> Finding:
    return Finding(all(f.holds for f in findings), "; ".join(f.figure for f in findings))


def _sign(name: str, values: Sequence[float], op: str, threshold: float, fmt: str = ".3f") -> Finding:
    """Sign test of "values lie on the ``op`` side of ``threshold``" (op: "<", "<=" or ">")."""
    side = {"<": lambda v: v < threshold, "<=": lambda v: v <= threshold, ">": lambda v: v > threshold}[op]
    hits = sum(side(v) for v in values)
    p = sign_test_p(hits, len(values))
    return Finding(bool(values) and p <= ALPHA, f"{name}: {hits}/{len(values)} seeds {op} {threshold:g}, "
                                                f"median {_median(values):{fmt}}, p = {p:.3f}")


def _flags(name: str, flags: Sequence[bool], what: str) -> Finding:
    """Sign test of "the seeds have property ``what``"."""
    hits = sum(flags)
    p = sign_test_p(hits, len(flags))
    return Finding(bool(flags) and p <= ALPHA, f"{name}: {hits}/{len(flags)} seeds {what}, p = {p:.3f}")


def _ranks(name_a: str, a: Sequence[float], name_b: str, b: Sequence[float], alternative: str,
           fmt: str = ".3f") -> Finding:
    """One-sided rank test of "a lower (``less``) / higher (``greater``) than b"."""
    p = rank_sum_p(a, b, alternative)
    return Finding(bool(a) and bool(b) and p <= ALPHA, f"{name_a} median {_median(a):{fmt}} vs {name_b} median "
                                                       f"{_median(b):{fmt}}, one-sided p = {p:.3f}")


def _enough(ev: Evidence, cells: Sequence[Cell], minimum: int = MIN_SEEDS) -> Finding:
    counts = [(name, len(ev.cell(**fields))) for name, fields in cells]
    return Finding(all(count >= minimum for _, count in counts),
                   "seeds " + ", ".join(f"{name} {count}" for name, count in counts) + f" (>= {minimum} each)")


def _reaches(ev: Evidence, cell: Cell) -> Finding:
    median = _median(_values(ev, cell, final_relative))
    return Finding(median < 1, f"{cell[0]} median relative objective {median:.3f} (< 1 needed)")


def _beats_lloyd_20(ev: Evidence, cell: Cell) -> Finding:
    median = _median(_values(ev, cell, twenty_step_gap))
    return Finding(median < 0, f"{cell[0]} median 20-step gap {median:+.3f} (< 0 needed)")


def _lloyd_finite(ev: Evidence, cells: Sequence[Cell]) -> Finding:
    rows = [row for _, fields in cells for row in ev.cell(**fields) if row["status"] != "unscorable"]
    finite = sum(math.isfinite(float(row["lloyd_log_objective"])) for row in rows)
    return Finding(finite == len(rows), f"Lloyd's 20-step log objective finite in {finite}/{len(rows)} scored rows")


def _transfer_complete(ev: Evidence, cells: Sequence[Cell]) -> Finding:
    rows = [row for _, fields in cells for row in ev.cell(**fields) if row["status"] != "unscorable"]
    complete = 0
    for row in rows:
        scores = json.loads(str(row["transfer"]))
        complete += all(family in scores and math.isfinite(float(scores[family]["lloyd"])) for family in FAMILIES)
    return Finding(complete == len(rows), f"all 5 test families scored with finite Lloyd objectives in "
                                          f"{complete}/{len(rows)} scored rows")


def _unclipped_full_budget(ev: Evidence, cells: Sequence[Cell]) -> Finding:
    rows = [row for _, fields in cells for row in ev.cell(**fields)]
    configs = [json.loads(str(row["config"])) for row in rows]
    good = sum(config.get("grad_clip") is None and config["steps"] >= PAPER_STEPS for config in configs)
    return Finding(good == len(rows), f"no gradient clipping and >= {PAPER_STEPS} configured steps in "
                                      f"{good}/{len(rows)} rows")


def _check(text: str, extra_columns: tuple[str, ...], evaluate: Callable[[Evidence], Finding],
           history: bool = False) -> Check:
    return Check(text, BASE_COLUMNS + extra_columns, CURVE_KEYS if history else (), evaluate)


R1_COLUMNS = ("relative_objective",)
G20_COLUMNS = ("model_log_objective", "lloyd_log_objective")

# ----- metric texts -------------------------------------------------------------------------------------------------
R1_METRIC = ("R1 = final relative objective (column relative_objective): mean over the run's validation tasks of the "
             "k-means objective after one model step over that after one Lloyd iteration from the same start "
             "(paper 2 Eq. 20; < 1 beats one-step Lloyd)")
G20_METRIC = ("G20 = model_log_objective - lloyd_log_objective: mean log k-means objective after 20 re-embedded "
              "model steps minus after 20 Lloyd iterations, same unseen tasks and random starts (paper 2 App. C; "
              "< 0 beats Lloyd)")
AREA_METRIC = ("A = curve area: mean relative objective over the logged training evaluations after step 0 (history "
               "relative_objective; lower = low objectives reached sooner). Chosen over 'steps until R1 < 1' because "
               "it is defined for every seed (also one that never reaches Lloyd), has no ties from the 50-step "
               "logging grid, and is the definition the studies used before these runs")
WHY_R1 = ("; the paper's convergence figures plot this quantity, so the claim is tested on what the paper shows")
WHY_FAMILY_AGAIN = "; the one metric of every family verdict (why: `family.cauchy_fails`)"
WHY_FAMILY = ("; the one metric of every family verdict (RESULTS.md and README alike): the transfer grid can only be "
              "scored this way (its rows keep the 20-step model and Lloyd objectives per test family, no one-step "
              "values), the same-family verdict is the grid's diagonal so the two can never disagree, and it is the "
              "papers' evaluation protocol on unseen tasks")


# ----- study a: embedding width -------------------------------------------------------------------------------------
def _pair_cells(d: int, k: int, names: Sequence[str] = ("onehot", "binary", "none")) -> list[Cell]:
    return [(f"d={d},k={k} {name}", {"d": d, "k": k, "embedding": name}) for name in names]


def embedding_pair_claims(d: int, k: int, study: str = "embedding") -> list[Claim]:
    """The claims of one embedding cell (d, k), the same rules at every cell: one-hot and binary beat one-step
    Lloyd, d-only never matches it, and after 20 steps one-hot, binary < Lloyd < none (paper 2 §3, Figs. 2, 6, 14)."""
    onehot, binary, none = _pair_cells(d, k)
    key = f"{study}.d{d}k{k}"

    def beat(ev: Evidence) -> Finding:
        return _all([_sign(cell[0], _values(ev, cell, final_relative), "<", 1) for cell in (onehot, binary)])

    def never_matches(ev: Evidence) -> Finding:
        flags, bests = [], []
        for row in ev.cell(**none[1]):
            values = [value for _, value in _curve(ev, row)]
            best = min(values) if values and all(math.isfinite(v) for v in values) else math.inf
            bests.append(best)
            flags.append(best > 1 and final_relative(ev, row) < values[0])
        return _flags(none[0], flags, f"improve on step 0 and never reach 1 (median best {_median(bests):.3f})")

    def order(ev: Evidence) -> Finding:
        return _all([_sign(onehot[0], _values(ev, onehot, twenty_step_gap), "<", 0, fmt="+.3f"),
                     _sign(binary[0], _values(ev, binary, twenty_step_gap), "<", 0, fmt="+.3f"),
                     _sign(none[0], _values(ev, none, twenty_step_gap), ">", 0, fmt="+.3f")])

    return [
        Claim(f"{key}.onehot_binary_beat_one_step_lloyd", study, "paper 2 §3, Figs. 2, 14",
              f"At d = {d}, k = {k}, tau = 0.1 the one-hot and the binary model beat one-step Lloyd",
              R1_METRIC + WHY_R1,
              _check("sign test of R1 < 1 for one-hot and for binary (both must pass)", R1_COLUMNS, beat),
              _check(f"at least {MIN_SEEDS} seeds of one-hot and of binary",
                     (), lambda ev: _enough(ev, (onehot, binary)))),
        Claim(f"{key}.none_never_matches", study, "paper 2 §3, Figs. 2, 14",
              f"At d = {d}, k = {k} the d-only model (none) improves during training but never matches one-step "
              "Lloyd",
              "R1 over the training curve (history relative_objective): per seed, its lowest logged value and its "
              "step-0 value, with the final R1" + WHY_R1,
              _check("sign test of the seeds whose lowest logged R1 is above 1 and whose final R1 is below their "
                     "step-0 R1", R1_COLUMNS, never_matches, history=True),
              _check(f"at least {MIN_SEEDS} seeds of none and of one-hot, and one-hot reaches one-step Lloyd at this "
                     "(d, k) (median final R1 < 1): the budget trains an embedding that can, so a miss is the "
                     "embedding's", R1_COLUMNS,
                     lambda ev: _all([_enough(ev, (none, onehot)), _reaches(ev, onehot)]))),
        Claim(f"{key}.twenty_step_order", study,
              "paper 2 Fig. 6 (stated at d = 32, k = 10; tested here at each (d, k))",
              f"At d = {d}, k = {k}, after 20 re-embedded steps one-hot and binary beat Lloyd's 20 iterations and "
              "none does not (onehot, binary < Lloyd < none)",
              G20_METRIC + "; the paper's multi-step comparison with Lloyd's iterations",
              _check("sign tests of G20 < 0 for one-hot and for binary and of G20 > 0 for none (all three must pass)",
                     G20_COLUMNS, order),
              _check(f"at least {MIN_SEEDS} seeds of each embedding, and Lloyd's 20-step log objective finite in "
                     "every scored row", ("lloyd_log_objective",),
                     lambda ev: _all([_enough(ev, (onehot, binary, none)),
                                      _lloyd_finite(ev, (onehot, binary, none))]))),
    ]


def _paired_deficits(ev: Evidence, onehot: Cell, binary: Cell) -> list[float]:
    """Per seed (rows paired by their seed, a pairing fixed by the seed list): A(binary) / A(onehot) - 1."""
    by_seed = {str(row["seed"]): curve_area(ev, row) for row in ev.cell(**onehot[1])}
    out = []
    for row in ev.cell(**binary[1]):
        base = by_seed.get(str(row["seed"]), math.inf)
        out.append(curve_area(ev, row) / base - 1 if math.isfinite(base) else math.inf)
    return out


def _same_seeds_clean(ev: Evidence, onehot: Cell, binary: Cell) -> Finding:
    onehot_rows, binary_rows = ev.cell(**onehot[1]), ev.cell(**binary[1])
    same = sorted(str(r["seed"]) for r in onehot_rows) == sorted(str(r["seed"]) for r in binary_rows)
    clean = sum(_clean(row) for row in onehot_rows)
    return Finding(same and clean == len(onehot_rows), f"{onehot[0]} and binary share their seeds: "
                   f"{'yes' if same else 'no'}; {clean}/{len(onehot_rows)} one-hot seeds ended cleanly")


def _embedding_across_claims() -> list[Claim]:
    (oh6, bn6), (oh16, bn16), (oh32, bn32) = (_pair_cells(d, k, ("onehot", "binary")) for d, k in PAIRS)

    def faster(ev: Evidence) -> Finding:
        return _all([_ranks(oh[0], _values(ev, oh, curve_area), "binary", _values(ev, bn, curve_area), "less")
                     for oh, bn in ((oh6, bn6), (oh16, bn16))])

    def no_gap(ev: Evidence) -> Finding:
        a, b = _values(ev, oh32, curve_area), _values(ev, bn32, curve_area)
        p = rank_sum_p(a, b, "two-sided")
        gap = _median(b) / _median(a) - 1 if a and b else math.nan
        return Finding(p > ALPHA and abs(gap) < NO_GAP,
                       f"{oh32[0]} median {_median(a):.3f} vs binary median {_median(b):.3f} (binary {gap:+.1%}), "
                       f"two-sided p = {p:.3f}")

    def grows(ev: Evidence) -> Finding:
        return _ranks("d=4 binary deficit at k=16", _paired_deficits(ev, oh16, bn16), "at k=6",
                      _paired_deficits(ev, oh6, bn6), "greater", fmt="+.1%")

    return [
        Claim("embedding.onehot_faster_at_small_d", "embedding", "paper 2 §3, Thm 3.1, Figs. 10, 15",
              "At small d (d = 4; k = 6 and k = 16) one-hot converges faster than binary",
              AREA_METRIC,
              _check("at each of (4, 6) and (4, 16): one-sided rank test of A(onehot) < A(binary) (both must pass)",
                     (), faster, history=True),
              _check(f"at least {MIN_SEEDS} seeds of one-hot and binary at both pairs, and one-hot reaches one-step "
                     "Lloyd at both (median final R1 < 1): the curves cover the convergence the paper plots",
                     R1_COLUMNS, lambda ev: _all([_enough(ev, (oh6, bn6, oh16, bn16)), _reaches(ev, oh6),
                                                  _reaches(ev, oh16)]))),
        Claim("embedding.no_gap_at_d32", "embedding", "paper 2 §3, Thm 3.1, Figs. 10, 15",
              "By d = 32 (k = 6) the one-hot/binary difference in convergence vanishes",
              AREA_METRIC,
              _check(f"two-sided rank test of A(onehot) vs A(binary) not significant (p > {ALPHA}) and the median "
                     f"A of binary within {NO_GAP:.0%} of one-hot's", (), no_gap, history=True),
              _check(f"at least {MIN_SEEDS} seeds of each, and both reach one-step Lloyd (median final R1 < 1): "
                     "'no gap' is judged between converged models only", R1_COLUMNS,
                     lambda ev: _all([_enough(ev, (oh32, bn32)), _reaches(ev, oh32), _reaches(ev, bn32)]))),
        Claim("embedding.binary_deficit_grows_with_k", "embedding", "paper 2 §3, Thm 3.1, Figs. 10, 15",
              "At d = 4 the binary model's deficit against one-hot grows with k (k = 16 vs k = 6)",
              "binary deficit per seed = A(binary) / A(onehot) - 1, the rows of one seed paired (a pairing fixed by "
              "the seed list, not by the data); " + AREA_METRIC,
              _check("one-sided rank test of deficit(k = 16) > deficit(k = 6)", ("seed",), grows, history=True),
              _check(f"at least {MIN_SEEDS} seeds of one-hot and binary at both pairs, the same seeds in both cells of "
                     "a pair, every one-hot seed ended cleanly (the deficit's denominator), and one-hot reaches "
                     "one-step Lloyd at both pairs", ("seed", "relative_objective"),
                     lambda ev: _all([_enough(ev, (oh6, bn6, oh16, bn16)), _same_seeds_clean(ev, oh6, bn6),
                                      _same_seeds_clean(ev, oh16, bn16), _reaches(ev, oh6), _reaches(ev, oh16)]))),
    ]


# ----- study b: tau x loss at d = 4, k = 6 --------------------------------------------------------------------------
def _tau_cell(loss: str, tau: float) -> Cell:
    return (f"{LOSS_NAMES[loss]} tau={tau:g}", {"loss": loss, "tau": tau})


def _tau_claims() -> list[Claim]:
    every = [_tau_cell(loss, tau) for loss in LOSS_NAMES for tau in TAUS]
    ne = {tau: _tau_cell("softmin", tau) for tau in TAUS}
    l2 = {tau: _tau_cell("sparsemax", tau) for tau in TAUS}
    gap = loss_gap("loss_gap_mean")

    def tighter(ev: Evidence) -> Finding:
        return _all([_ranks(l2[tau][0], _values(ev, l2[tau], gap), "NE", _values(ev, ne[tau], gap), "less",
                            fmt=".2f") for tau in TAUS])

    def both_beat(ev: Evidence) -> Finding:
        return _all([_sign(cell[0], _values(ev, cell, final_relative), "<", 1) for cell in (ne[0.1], l2[0.1])])

    def ne_misses(ev: Evidence) -> Finding:
        return _sign(ne[1.0][0], _values(ev, ne[1.0], final_relative), ">", 1)

    def l2_improves_misses(ev: Evidence) -> Finding:
        flags, finals = [], []
        for row in ev.cell(**l2[1.0][1]):
            final = final_relative(ev, row)
            finals.append(final)
            flags.append(1 < final < float(ev.history(row)[0]["relative_objective"]))
        return _flags(l2[1.0][0], flags, f"improve on step 0 but stay above 1 (median final {_median(finals):.3f})")

    def worse(ev: Evidence) -> Finding:
        return _all([_ranks(cells[1.0][0], _values(ev, cells[1.0], final_relative), "tau=0.1",
                            _values(ev, cells[0.1], final_relative), "greater") for cells in (ne, l2)])

    def faster(ev: Evidence) -> Finding:
        return _all([_ranks(cells[1.0][0], _values(ev, cells[1.0], settling_step), "tau=0.1",
                            _values(ev, cells[0.1], settling_step), "less", fmt=".0f") for cells in (ne, l2)])

    def settles(ev: Evidence, cell: Cell) -> Finding:
        rows = ev.cell(**cell[1])
        last = max((float(ev.history(row)[-1]["step"]) for row in rows), default=math.nan)
        median = _median([settling_step(ev, row) for row in rows])
        return Finding(median <= SETTLED_BY * last, f"{cell[0]} median settling step {median:.0f} of {last:.0f} "
                                                    f"(<= {SETTLED_BY:.0%} needed)")

    def enough_and_reach(cells: Sequence[Cell], reference: Sequence[Cell]) -> Callable[[Evidence], Finding]:
        return lambda ev: _all([_enough(ev, cells), *(_reaches(ev, cell) for cell in reference)])

    paper = "paper 2 Figs. 2, 9, 14"
    return [
        Claim("tau_loss.l2_tighter_than_ne", "tau_loss", paper + ", Fig. 5, Prop. H.1",
              "The L2 (sparsemax) loss is tighter than the NE (softmax) loss at every tau",
              "loss gap = loss_gap_mean: smoothed loss minus k-means objective after one step, mean over the "
              "evaluation tasks, with each run's own tau and loss. Chosen over the logged batch losses because every "
              "run is scored on the same tasks (a batch loss is one noisy batch of 32 tasks) and tightness is what "
              "the paper's bound (Prop. H.1) is about",
              _check("at each tau: one-sided rank test of gap(L2) < gap(NE) (all four must pass)", ("loss_gap_mean",),
                     tighter),
              _check(f"at least {MIN_SEEDS} seeds in each of the 8 cells", (), lambda ev: _enough(ev, every))),
        Claim("tau_loss.tau01_both_beat_one_step_lloyd", "tau_loss", paper,
              "At tau = 0.1 the models trained with either loss beat one-step Lloyd", R1_METRIC + WHY_R1,
              _check("sign test of R1 < 1 for NE and for L2 at tau = 0.1 (both must pass)", R1_COLUMNS, both_beat),
              _check(f"at least {MIN_SEEDS} seeds of NE and L2 at tau = 0.1", (),
                     lambda ev: _enough(ev, (ne[0.1], l2[0.1])))),
        Claim("tau_loss.tau1_ne_misses_lloyd", "tau_loss", paper,
              "At tau = 1 the NE-trained model does not generalise: it misses one-step Lloyd (the paper: its "
              "validation objective rises)", R1_METRIC + WHY_R1,
              _check("sign test of R1 > 1 for NE at tau = 1", R1_COLUMNS, ne_misses),
              _check(f"at least {MIN_SEEDS} seeds of NE at tau = 1 and 0.1, and NE at tau = 0.1 reaches one-step Lloyd "
                     "(median final R1 < 1): the miss is tau's, not the budget's", R1_COLUMNS,
                     enough_and_reach((ne[1.0], ne[0.1]), (ne[0.1],)))),
        Claim("tau_loss.tau1_l2_improves_but_misses_lloyd", "tau_loss", paper,
              "At tau = 1 the L2-trained model improves but misses one-step Lloyd",
              "R1, final and at step 0 (history relative_objective)" + WHY_R1,
              _check("sign test of the seeds with 1 < final R1 < step-0 R1 (L2, tau = 1)", R1_COLUMNS,
                     l2_improves_misses, history=True),
              _check(f"at least {MIN_SEEDS} seeds of L2 at tau = 1 and 0.1, and L2 at tau = 0.1 reaches one-step Lloyd "
                     "(median final R1 < 1)", R1_COLUMNS, enough_and_reach((l2[1.0], l2[0.1]), (l2[0.1],)))),
        Claim("tau_loss.higher_tau_worse", "tau_loss", paper,
              "Higher tau converges to worse solutions (tau = 1 against tau = 0.1, for each loss)",
              R1_METRIC + WHY_R1,
              _check("for NE and for L2: one-sided rank test of R1(tau = 1) > R1(tau = 0.1) (both must pass)",
                     R1_COLUMNS, worse),
              _check(f"at least {MIN_SEEDS} seeds in the 4 cells, and both losses reach one-step Lloyd at tau = 0.1 "
                     "(median final R1 < 1): at a budget where tau = 0.1 has not converged, a high tau can look "
                     "better only because it is faster", R1_COLUMNS,
                     enough_and_reach((ne[1.0], ne[0.1], l2[1.0], l2[0.1]), (ne[0.1], l2[0.1])))),
        Claim("tau_loss.higher_tau_faster", "tau_loss", paper,
              "Higher tau converges faster (tau = 1 against tau = 0.1, for each loss)",
              f"settling step S: the first logged step from which every logged R1 stays within {SETTLE:.0%} of the "
              "run's final R1 (history step, relative_objective); it measures when a run stops moving, whatever "
              "level it stops at, which is what 'faster' means next to 'worse'",
              _check("for NE and for L2: one-sided rank test of S(tau = 1) < S(tau = 0.1) (both must pass)", (),
                     faster, history=True),
              _check(f"at least {MIN_SEEDS} seeds in the 4 cells, and at tau = 0.1 both losses settle within "
                     f"{SETTLED_BY:.0%} of the logged steps (median S): a run still moving at the end has no settling "
                     "step to compare", (),
                     lambda ev: _all([_enough(ev, (ne[1.0], ne[0.1], l2[1.0], l2[0.1])), settles(ev, ne[0.1]),
                                      settles(ev, l2[0.1])]), history=True)),
    ]


# ----- study c: d at k = 6, k at d = 32 -----------------------------------------------------------------------------
def _grid_claim(study: str, field: str, values: Sequence[int], fixed: str, paper: str) -> Claim:
    cells = [(f"{field}={value}", {field: value}) for value in values]

    def beat(ev: Evidence) -> Finding:
        return _all([_sign(cell[0], _values(ev, cell, final_relative), "<", 1) for cell in cells])

    return Claim(f"{study}.beats_one_step_lloyd_at_every_{field}", study, paper,
                 f"At tau = 0.1 ({fixed}) the one-hot model beats one-step Lloyd at every {field} in "
                 f"{{{', '.join(map(str, values))}}}", R1_METRIC + WHY_R1,
                 _check(f"sign test of R1 < 1 at each {field} (all must pass)", R1_COLUMNS, beat),
                 _check(f"at least {MIN_SEEDS} seeds at each {field}", (), lambda ev: _enough(ev, cells)))


# ----- study d: training family and the 5 x 5 transfer grid ---------------------------------------------------------
def _family_claims() -> list[Claim]:
    cell = {family: (family, {"family": family}) for family in FAMILIES}
    others = [cell[family] for family in NON_CAUCHY]

    def cauchy_fails(ev: Evidence) -> Finding:
        return _sign("cauchy", _values(ev, cell["cauchy"], twenty_step_gap), ">", 0, fmt="+.3f")

    def others_beat(ev: Evidence) -> Finding:
        return _all([_sign(c[0], _values(ev, c, twenty_step_gap), "<", 0, fmt="+.3f") for c in others])

    def transfer(ev: Evidence) -> Finding:
        return _all([_sign(f"{train}->{test}", _values(ev, cell[train], transfer_gap(test)), "<", 0, fmt="+.3f")
                     for train in NON_CAUCHY for test in NON_CAUCHY])

    def cauchy_everywhere(ev: Evidence) -> Finding:
        return _all([_sign(f"cauchy->{test}", _values(ev, cell["cauchy"], transfer_gap(test)), ">", 0, fmt="+.3f")
                     for test in FAMILIES])

    def on_cauchy(ev: Evidence) -> Finding:
        findings = []
        for train in NON_CAUCHY:
            rows = ev.cell(**cell[train][1])
            gaps = [transfer_gap("cauchy")(ev, row) for row in rows]
            flags = [math.isfinite(g) and g > 0 for g in gaps]
            findings.append(_flags(f"{train}->cauchy", flags,
                                   f"finite and worse than Lloyd (median {_median(gaps):+.3f})"))
        return _all(findings)

    def loss_gaps(ev: Evidence) -> Finding:
        rows = ev.cell(**cell["normal"][1]) + ev.cell(**cell["cauchy"][1])
        n = json.loads(str(rows[0]["config"]))["n"] if rows else PAPER_N
        scale = n / PAPER_N
        gap = loss_gap("loss_gap_max")
        return _all([_sign("normal", _values(ev, cell["normal"], gap), "<=", 0.5 * scale, fmt=".2f"),
                     _sign("cauchy", _values(ev, cell["cauchy"], gap), ">", 5 * scale, fmt=".2f")])

    paper = "paper 2 Figs. 4, 16"
    grid = "paper 2 Figs. 8, 18"
    return [
        Claim("family.cauchy_fails", "family", paper,
              "Models trained on cauchy tasks fail: on cauchy tasks they end worse than Lloyd", G20_METRIC + WHY_FAMILY,
              _check("sign test of G20 > 0 for the cauchy-trained models", G20_COLUMNS, cauchy_fails),
              _check(f"at least {MIN_SEEDS} seeds trained on cauchy and on normal, and the normal-trained models beat "
                     "Lloyd on normal tasks (median G20 < 0): the budget trains a family that can",
                     G20_COLUMNS, lambda ev: _all([_enough(ev, (cell["cauchy"], cell["normal"])),
                                                   _beats_lloyd_20(ev, cell["normal"])]))),
        Claim("family.others_beat_lloyd", "family", paper,
              "Models trained on normal, gumbel, laplace and lognormal tasks beat Lloyd on their own family",
              G20_METRIC + WHY_FAMILY_AGAIN,
              _check("sign test of G20 < 0 for each of the four families (all must pass)", G20_COLUMNS, others_beat),
              _check(f"at least {MIN_SEEDS} seeds per family, and Lloyd's 20-step log objective finite in every scored "
                     "row", ("lloyd_log_objective",),
                     lambda ev: _all([_enough(ev, others), _lloyd_finite(ev, others)]))),
        Claim("family.transfer_among_non_cauchy", "family", grid,
              "Among normal, gumbel, laplace and lognormal, every (training family, test family) pair beats Lloyd",
              "G20 on each test family (column transfer: 20-step model and Lloyd objectives per test family)"
              + WHY_FAMILY_AGAIN,
              _check("sign test of G20 < 0 for each of the 16 pairs (all must pass)", ("transfer",), transfer),
              _check(f"at least {MIN_SEEDS} seeds per training family, and every scored row holds all 5 test families "
                     "with finite Lloyd objectives", ("transfer",),
                     lambda ev: _all([_enough(ev, others), _transfer_complete(ev, others)]))),
        Claim("family.cauchy_trained_fail_everywhere", "family", grid,
              "Models trained on cauchy tasks are worse than Lloyd on every test family",
              "G20 on each test family (column transfer)" + WHY_FAMILY_AGAIN,
              _check("sign test of G20 > 0 on each of the 5 test families (all must pass)", ("transfer",),
                     cauchy_everywhere),
              _check(f"at least {MIN_SEEDS} seeds trained on cauchy and on normal, the normal-trained models beat "
                     "Lloyd on normal tasks (median G20 < 0), and every cauchy row holds all 5 test families",
                     G20_COLUMNS + ("transfer",),
                     lambda ev: _all([_enough(ev, (cell["cauchy"], cell["normal"])),
                                      _beats_lloyd_20(ev, cell["normal"]),
                                      _transfer_complete(ev, (cell["cauchy"],))]))),
        Claim("family.others_on_cauchy_not_competitive", "family", grid,
              "Models trained on the other four families, tested on cauchy tasks, do not diverge but do not beat Lloyd",
              "G20 on cauchy tasks (column transfer), finite = did not diverge" + WHY_FAMILY_AGAIN,
              _check("for each of the four families: sign test of the seeds with a finite G20 > 0 on cauchy (all must "
                     "pass)", ("transfer",), on_cauchy),
              _check(f"at least {MIN_SEEDS} seeds per family, each family beats Lloyd on its own tasks (median G20 "
                     "< 0): the models are trained, so the cauchy result is about cauchy; every scored row holds all "
                     "5 test families", G20_COLUMNS + ("transfer",),
                     lambda ev: _all([_enough(ev, others), *(_beats_lloyd_20(ev, c) for c in others),
                                      _transfer_complete(ev, others)]))),
        Claim("family.loss_gap_normal_small_cauchy_large", "family", "paper 2 Fig. 5",
              "The smoothed-vs-true loss gap is at most about 0.5 for normal and can exceed 5 for cauchy (at n = 512; "
              "here scaled by n / 512, the gap being a sum over the n points)",
              "loss_gap_max: the largest over the evaluation tasks of the smoothed loss minus the k-means objective "
              "after one step; the paper's statement is about the largest gaps ('can exceed')",
              _check("sign tests of gap <= 0.5 n/512 (normal) and of gap > 5 n/512 (cauchy) (both must pass)",
                     ("loss_gap_max",), loss_gaps),
              _check(f"at least {MIN_SEEDS} seeds trained on normal and on cauchy", (),
                     lambda ev: _enough(ev, (cell["normal"], cell["cauchy"])))),
    ]


# ----- study e: one-hot vs binary stability at d = 32, k = 25 -------------------------------------------------------
UNSTABLE_METRIC = (f"unstable seeds: a seed is unstable when its run diverged or was unscorable (status not ok) or its "
                   f"relative objective rose more than {SPIKE:.0%} above the lowest value logged before it (history "
                   "relative_objective; the definition the lr study used before these runs)")
NUMERIC_METRIC = ("numerically unstable seeds: runs stopped by a non-finite loss or non-finite weights (status "
                  "diverged) or whose model gives non-finite outputs (status unscorable), the paper's 'numerically "
                  "unstable'; a finite jump of the validation objective does not count. A count, not a test: at 10 "
                  "against 10 "
                  "seeds Fisher's exact test cannot reach 0.05 even at the paper's own counts (3/10 against 0/10: "
                  "one-sided p = 0.105)")


def _stability_claims(study: str = "stability") -> list[Claim]:
    cells = [(name, {"embedding": name}) for name in ("onehot", "binary")]

    def count(name: str, holds: Callable[[int], bool], need: str) -> Callable[[Evidence], Finding]:
        def evaluate(ev: Evidence) -> Finding:
            flags = [not _clean(row) for row in ev.cell(embedding=name)]
            return Finding(bool(flags) and holds(sum(flags)), f"{name}: {sum(flags)}/{len(flags)} seeds numerically "
                                                              f"unstable ({need})")
        return evaluate

    control = _check(f"at least {STABILITY_SEEDS} seeds of each embedding, trained without gradient clipping for at "
                     f"least {PAPER_STEPS} steps (instability may appear late)", (),
                     lambda ev: _all([_enough(ev, cells, STABILITY_SEEDS), _unclipped_full_budget(ev, cells)]))
    paper = "paper 2 §3 (convergence at d = 32, k = 25, tau = 0.1)"
    return [
        Claim(f"{study}.binary_stable", study, paper,
              "At d = 32, k = 25 the binary model trains stably without gradient clipping", NUMERIC_METRIC,
              _check("no binary seed is numerically unstable", (), count("binary", lambda c: c == 0, "0 needed")),
              control),
        Claim(f"{study}.onehot_unstable_in_some_seeds", study, paper,
              "At d = 32, k = 25 the one-hot model is numerically unstable in some seeds without clipping (3 of 10 in "
              "the paper)", NUMERIC_METRIC,
              _check("at least one one-hot seed is numerically unstable", (),
                     count("onehot", lambda c: c >= 1, ">= 1 needed")),
              control),
    ]


# ----- today's lr and n studies -------------------------------------------------------------------------------------
def _lr_claims() -> list[Claim]:
    rates = (0.001, 0.01, 0.1, 1.0)
    cell = {lr: (f"lr={lr:g}", {"lr": lr}) for lr in rates}

    def best(ev: Evidence) -> Finding:
        return _all([_ranks(cell[0.01][0], _values(ev, cell[0.01], final_relative), cell[lr][0],
                            _values(ev, cell[lr], final_relative), "less") for lr in (0.001, 0.1, 1.0)])

    def high_unstable(ev: Evidence) -> Finding:
        base = [unstable(ev, row) for row in ev.cell(**cell[0.01][1])]
        findings = []
        for lr in (0.1, 1.0):
            flags = [unstable(ev, row) for row in ev.cell(**cell[lr][1])]
            p = fisher_greater_p(sum(flags), len(flags), sum(base), len(base))
            findings.append(Finding(p <= ALPHA, f"{cell[lr][0]}: {sum(flags)}/{len(flags)} seeds unstable vs "
                                                f"{sum(base)}/{len(base)} at lr=0.01, one-sided p = {p:.3f}"))
        return _all(findings)

    def stable_base(ev: Evidence) -> Finding:
        flags = [unstable(ev, row) for row in ev.cell(**cell[0.01][1])]
        return Finding(not any(flags), f"lr=0.01: {sum(flags)}/{len(flags)} seeds unstable (0 needed)")

    paper = "paper 2 App. F"
    return [
        Claim("lr.lr001_best", "lr", paper, "At d = 32, lr 0.01 gives the best final objective",
              R1_METRIC + WHY_R1,
              _check("one-sided rank test of R1(lr 0.01) < R1(lr) for each lr in {0.001, 0.1, 1} (all must pass)",
                     R1_COLUMNS, best),
              _check(f"at least {MIN_SEEDS} seeds at each lr", (), lambda ev: _enough(ev, list(cell.values())))),
        Claim("lr.high_lr_unstable", "lr", paper, "At d = 32, lr 0.1 and 1.0 are unstable", UNSTABLE_METRIC,
              _check("for lr 0.1 and for lr 1.0: one-sided Fisher test of a higher rate of unstable seeds than at lr "
                     "0.01 (both must pass)", (), high_unstable, history=True),
              _check(f"at least {MIN_SEEDS} seeds at each lr, no gradient clipping, and no seed unstable at lr 0.01 "
                     "(a stable baseline: instability of every lr would say nothing about high lr)", (),
                     lambda ev: _all([_enough(ev, list(cell.values())), stable_base(ev), _no_clipping(ev)]),
                     history=True)),
    ]


def _no_clipping(ev: Evidence) -> Finding:
    clipped = sum(json.loads(str(row["config"])).get("grad_clip") is not None for row in ev.rows)
    return Finding(clipped == 0, f"{clipped}/{len(ev.rows)} rows trained with gradient clipping (0 needed)")


def _no_effect_claim(claim_id: str, study: str, cells: Sequence[Cell], claim: str,
                     reaches: Cell | None = None) -> Claim:
    """"The training length n has no effect": every pair of ``cells`` equivalent within +-EQUIVALENCE_MARGIN in R1
    (TOST at ALPHA, all pairs); decided only when the rows show either that or a pair beyond the margin (at the
    Bonferroni level); ``reaches``: a cell that must reach one-step Lloyd for the verdict to count."""
    pairs = [(a, b) for i, a in enumerate(cells) for b in cells[i + 1:]]
    level = ALPHA / len(pairs)
    margin = EQUIVALENCE_MARGIN

    def tests(ev: Evidence, test: Callable) -> list[tuple[float, str, str]]:
        values = {cell[0]: _values(ev, cell, final_relative) for cell in cells}
        return [(test(values[a[0]], values[b[0]], margin), a[0], b[0]) for a, b in pairs]

    def equivalent(ev: Evidence) -> Finding:
        p, a, b = max(tests(ev, equivalence_p), key=lambda test: test[0])  # the first such pair in grid order
        medians = ", ".join(f"{cell[0]} {_median(_values(ev, cell, final_relative)):.3f}" for cell in cells)
        return Finding(p <= ALPHA, f"medians {medians}; largest equivalence (TOST, +-{margin:g}) p = {p:.3f} ({a} vs "
                                   f"{b}; <= {ALPHA} needed)")

    def decisive(ev: Evidence) -> Finding:
        shown = equivalent(ev).holds
        p, a, b = min(tests(ev, beyond_margin_p), key=lambda test: test[0])
        return Finding(shown or p <= level, f"equivalence {'shown' if shown else 'not shown'}; smallest p of a "
                                            f"difference beyond +-{margin:g} = {p:.3f} ({a} vs {b}; <= {level:.4g} "
                                            "decides against)")

    def control(ev: Evidence) -> Finding:
        return _all([_enough(ev, cells), *([_reaches(ev, reaches)] if reaches else []), decisive(ev)])

    needs = (f", and {reaches[0]} reaches one-step Lloyd (median final R1 < 1): no effect among models that learned "
             "nothing would say nothing") if reaches else ""
    return Claim(claim_id, study, "paper 2 §3, App. F", claim,
                 R1_METRIC + "; a ratio on each run's own tasks, so runs of different n compare directly" + WHY_R1,
                 _check(f"equivalence: for every one of the {len(pairs)} pair(s) of n, the exact rank-sum TOST of a "
                        f"shift within +-{margin:g} in R1 has p <= {ALPHA} (intersection-union: all must pass)",
                        R1_COLUMNS, equivalent),
                 _check(f"at least {MIN_SEEDS} seeds at each n{needs}; and the rows decide: equivalence shown, or "
                        f"some pair differs by more than +-{margin:g} (two-sided rank test of the shifted samples, p "
                        f"<= 0.05 / {len(pairs)}, Bonferroni); neither: too few seeds for the margin",
                        R1_COLUMNS, control))


def _n_claims() -> list[Claim]:
    lengths = (128, 256, 512, 1024)
    cells = [(f"n={n}", {"n": n}) for n in lengths]
    pair_cells = [(f"d=4,k=16 onehot n={n}", {"d": 4, "k": 16, "embedding": "onehot", "n": n}) for n in (128, 512)]
    return [
        _no_effect_claim("n.no_effect", "n", cells, "The training length n has no significant effect",
                         reaches=cells[2]),
        _no_effect_claim("n_d4k16.no_effect", "n_d4k16", pair_cells,
                         "At d = 4, k = 16 (one-hot) the training length n (128 vs the papers' 512) has no effect"),
    ]


# ----- multi-step inference, length and shift: per-step curves of the evaluation protocol ---------------------------
MULTISTEP_T = 20  # the papers' T: re-embedded model steps, stacked steps and Lloyd iterations (paper 2 Fig. 6)
GENERALISATION_LENGTHS = (128, 256, 1024, 2048)  # interp.evaluate's ``length`` protocol
SHIFTS = ("unequal weights", "anisotropic", "half scale", "double scale")  # interp.evaluate's ``shift`` protocol
CURVE_COLUMNS = ("model_curve", "lloyd_curve")
STEP_T_METRIC = ("G_T = model_curve[T] - lloyd_curve[T]: mean log k-means objective over the unseen tasks after T "
                 "re-embedded model steps minus after T Lloyd iterations from the same random starts (T = 20; < 0 "
                 "beats Lloyd)")


def _curve_values(row: Mapping[str, object], column: str) -> list[float]:
    """A curve column (a JSON list: mean log objective after steps 0..T) as floats."""
    return [float(value) for value in json.loads(str(row[column]))]


def curve_at(row: Mapping[str, object], column: str, step: int) -> float:
    """The value of a row's curve ``column`` after ``step`` (-1: its last step, T); +inf for a seed that did not end
    cleanly, a step the curve lacks or a non-finite value."""
    values = _curve_values(row, column)
    if not _clean(row) or not -len(values) <= step < len(values):
        return math.inf
    return _number(values[step])


def step_t_gap(ev: Evidence, row: Mapping[str, object]) -> float:
    """G_T: model_curve[T] - lloyd_curve[T] (T: the curves' last step); +inf for a seed that did not end cleanly."""
    return _number(curve_at(row, "model_curve", -1) - curve_at(row, "lloyd_curve", -1))


def _full_budget(ev: Evidence, cells: Sequence[Cell]) -> Finding:
    rows = [row for _, fields in cells for row in ev.cell(**fields)]
    good = sum(json.loads(str(row["config"]))["steps"] >= PAPER_STEPS for row in rows)
    return Finding(good == len(rows), f">= {PAPER_STEPS} configured training steps in {good}/{len(rows)} rows")


def _scored(ev: Evidence, cells: Sequence[Cell]) -> list[Mapping[str, object]]:
    return [row for _, fields in cells for row in ev.cell(**fields) if row["status"] != "unscorable"]


def _t_steps(ev: Evidence, cells: Sequence[Cell], columns: Sequence[str]) -> Finding:
    rows = _scored(ev, cells)
    good = sum(all(len(_curve_values(row, column)) == MULTISTEP_T + 1 for column in columns) for row in rows)
    return Finding(good == len(rows), f"T = {MULTISTEP_T} steps in {good}/{len(rows)} scored rows")


def _lloyd_t_finite(ev: Evidence, cells: Sequence[Cell]) -> Finding:
    rows = _scored(ev, cells)
    finite = sum(bool(values) and math.isfinite(values[-1]) for values in
                 (_curve_values(row, "lloyd_curve") for row in rows))
    return Finding(finite == len(rows), f"Lloyd's step-T log objective finite in {finite}/{len(rows)} scored rows")


def _beats_lloyd_t(ev: Evidence, cell: Cell) -> Finding:
    median = _median(_values(ev, cell, step_t_gap))
    return Finding(median < 0, f"{cell[0]} median step-T gap {median:+.3f} (< 0 needed)")


def _curve_control(cells: Sequence[Cell], columns: Sequence[str],
                   positive: Cell | None = None) -> Callable[[Evidence], Finding]:
    """Over ``cells`` and the ``positive`` control's cell: enough seeds, the papers' training budget, T = 20 steps in
    ``columns`` and Lloyd finite at step T; and ``positive`` beats Lloyd at step T in the median."""
    def evaluate(ev: Evidence) -> Finding:
        every = [*cells, *([positive] if positive else [])]
        return _all([_enough(ev, every), *([_beats_lloyd_t(ev, positive)] if positive else []),
                     _full_budget(ev, every), _t_steps(ev, every, columns), _lloyd_t_finite(ev, every)])
    return evaluate


MULTISTEP_METRIC = ("mean log k-means objective after steps 0..T (T = 20) over the unseen tasks (n = 512, random "
                    "starts), per seed: model_curve (the layer applied T times, re-embedding [X; 0], [C; codes] "
                    "before every step), stacked_curve (the residual streams flow on: naive stacking), lloyd_curve (T "
                    "Lloyd iterations from the same starts); one row per checkpoint (seed) of the embedding ablation "
                    "at d = 32, k = 10, n = 512, tau = 0.1")
MULTISTEP_COLUMNS = ("model_curve", "stacked_curve", "lloyd_curve")


def _multistep_claims() -> list[Claim]:
    cell = {name: (name, {"embedding": name}) for name in EMBEDDINGS}
    every = list(cell.values())

    def diverges(ev: Evidence) -> Finding:
        findings = []
        for name in EMBEDDINGS:
            flags, rises = [], []
            for row in ev.cell(**cell[name][1]):
                first, last = curve_at(row, "stacked_curve", 1), curve_at(row, "stacked_curve", -1)
                rise = last - first if math.isfinite(first) and math.isfinite(last) else math.nan
                flags.append(rise > 0)
                rises += [rise] if math.isfinite(rise) else []
            findings.append(_flags(name, flags, f"with stacked[T] > stacked[1] (median rise {_median(rises):+.3f})"))
        return _all(findings)

    def beat(ev: Evidence) -> Finding:
        return _all([_sign(cell[name][0], _values(ev, cell[name], step_t_gap), "<", 0, fmt="+.3f")
                     for name in ("onehot", "binary")])

    def none_between(ev: Evidence) -> Finding:
        flags = [curve_at(row, "model_curve", -1) < curve_at(row, "model_curve", 0)
                 and step_t_gap(ev, row) > 0 for row in ev.cell(**cell["none"][1])]
        gaps = _values(ev, cell["none"], step_t_gap)
        return _flags("none", flags, f"with model[T] < model[0] and model[T] > Lloyd[T] (median step-T gap "
                                     f"{_median(gaps):+.3f})")

    paper = "paper 2 Fig. 6, §3"
    control = (f"at least {MIN_SEEDS} seeds of {{}}, trained for at least {PAPER_STEPS} configured steps, T = "
               f"{MULTISTEP_T} in every scored row and Lloyd's step-T objective finite in every scored row")
    return [
        Claim("multistep.stacking_diverges", "multistep", paper,
              "Naive stacking (applying the trained layer T times without re-embedding) diverges after step 1, for "
              "every embedding", MULTISTEP_METRIC + "; here the stacked curve at step 1 and at step T",
              _check("for each of one-hot, binary and none: sign test of the seeds whose stacked objective at step T "
                     "is above its step-1 value (a seed that did not end cleanly, or whose values are not finite, is "
                     "not counted as diverging; all three must pass)", ("stacked_curve",), diverges),
              _check(control.format("each embedding"), MULTISTEP_COLUMNS,
                     _curve_control(every, MULTISTEP_COLUMNS))),
        Claim("multistep.reembedded_onehot_binary_beat_lloyd", "multistep", paper,
              "Re-embedded for T = 20 steps, the one-hot and the binary model beat Lloyd's 20 iterations",
              STEP_T_METRIC + "; " + MULTISTEP_METRIC,
              _check("sign test of G_T < 0 for one-hot and for binary (both must pass)", CURVE_COLUMNS, beat),
              _check(control.format("one-hot and of binary"), CURVE_COLUMNS,
                     _curve_control((cell["onehot"], cell["binary"]), CURVE_COLUMNS))),
        Claim("multistep.reembedded_none_improves_but_misses_lloyd", "multistep", paper,
              "Re-embedded for T = 20 steps, the d-only model (none) improves on its start but stays worse than "
              "Lloyd's 20 iterations", MULTISTEP_METRIC + "; here model_curve at steps 0 and T and G_T",
              _check("sign test of the none seeds with model_curve[T] < model_curve[0] and G_T > 0", CURVE_COLUMNS,
                     none_between),
              _check(control.format("none and of one-hot") + ", and one-hot beats Lloyd at step T (median G_T < 0): "
                     "the budget trains an embedding that can, so a miss is the embedding's", CURVE_COLUMNS,
                     _curve_control((cell["none"],), CURVE_COLUMNS, positive=cell["onehot"]))),
    ]


GENERALISATION_METRIC = ("the one-hot model's checkpoints (seeds) scored by `interp evaluate` (320 unseen tasks per "
                         "setting, random starts, T = 20): per seed and setting the mean log objective after steps "
                         "0..T of the re-embedded model (model_curve) and of Lloyd (lloyd_curve)")


def _generalisation_claims() -> list[Claim]:
    def onehot(name: str, protocol: str, setting: str) -> Cell:
        return (name, {"embedding": "onehot", "protocol": protocol, "setting": setting})

    lengths = [onehot(f"n={n}", "length", f"n={n}") for n in GENERALISATION_LENGTHS]
    shifts = [onehot(shift, "shift", shift) for shift in SHIFTS]
    double = shifts[-1]
    home = ("in-distribution n=512", {"embedding": "onehot", "protocol": "main", "setting": "in-distribution",
                                      "eval_n": PAPER_N})

    def every(cells: Sequence[Cell]) -> Callable[[Evidence], Finding]:
        return lambda ev: _all([_sign(c[0], _values(ev, c, step_t_gap), "<", 0, fmt="+.3f") for c in cells])

    def overtakes(ev: Evidence) -> Finding:
        rows = ev.cell(**double[1])
        first = [_number(curve_at(row, "model_curve", 1) - curve_at(row, "lloyd_curve", 1)) for row in rows]
        last = [step_t_gap(ev, row) for row in rows]
        flags = [math.isfinite(a) and a > 0 and b < 0 for a, b in zip(first, last)]
        return _flags(double[0], flags, f"worse than Lloyd after step 1 and better after step T (median gaps "
                                        f"{_median(first):+.3f} at step 1, {_median(last):+.3f} at step T)")

    control = (f"at least {MIN_SEEDS} seeds in every setting read and in-distribution (protocol main, n = 512); the "
               "in-distribution model beats Lloyd at step T (median G_T < 0): the checkpoints are trained, so a miss "
               f"is the setting's; at least {PAPER_STEPS} configured training steps, T = {MULTISTEP_T} and Lloyd's "
               "step-T objective finite in every scored row")
    paper = "paper 2 Fig. 7"
    return [
        Claim("generalisation.length_beats_lloyd_at_every_n", "generalisation", paper,
              "Length generalisation: trained at n = 512, the one-hot model beats Lloyd after 20 steps at every n in "
              f"{{{', '.join(map(str, GENERALISATION_LENGTHS))}}}", STEP_T_METRIC + "; " + GENERALISATION_METRIC,
              _check("sign test of G_T < 0 at each n (all four must pass)", CURVE_COLUMNS, every(lengths)),
              _check(control, CURVE_COLUMNS, _curve_control(lengths, CURVE_COLUMNS, positive=home))),
        Claim("generalisation.shift_beats_lloyd_at_every_shift", "generalisation", paper,
              "Shift generalisation: the one-hot model beats Lloyd after 20 steps under every distribution shift "
              "(unequal weights, anisotropic, half scale, double scale)", STEP_T_METRIC + "; " + GENERALISATION_METRIC,
              _check("sign test of G_T < 0 in each shift setting (all four must pass)", CURVE_COLUMNS, every(shifts)),
              _check(control, CURVE_COLUMNS, _curve_control(shifts, CURVE_COLUMNS, positive=home))),
        Claim("generalisation.double_scale_starts_worse_then_overtakes", "generalisation", paper,
              "At double scale the one-hot model starts slightly worse than Lloyd and overtakes it later",
              "model_curve - lloyd_curve after step 1 and after step T (T = 20); " + GENERALISATION_METRIC,
              _check("sign test of the double-scale seeds with model_curve[1] > lloyd_curve[1] and model_curve[T] < "
                     "lloyd_curve[T]", CURVE_COLUMNS, overtakes),
              _check(control, CURVE_COLUMNS, _curve_control((double,), CURVE_COLUMNS, positive=home))),
    ]


# ----- paper 2 Table 1: one-hot vs binary forward time and memory ---------------------------------------------------
TABLE1_KS = (6, 25, 100, 400, 1000)  # the paper's k grid (d = 32, n = 1024, 32 tasks)
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


def _bench_value(ev: Evidence, k: int, column: str) -> float:
    """A Table 1 row's number at ``k``; NaN when the run has no row at k or the value is not finite (never on the
    claimed side of a comparison)."""
    rows = ev.cell(k=k)
    value = float(rows[0][column]) if len(rows) == 1 else math.nan
    return value if math.isfinite(value) else math.nan


def table1_rounds(title: str, command: str) -> int | None:
    """The interleaved rounds behind the medians of a Table 1 run: stated in its title ("median of R interleaved
    rounds"), else ``--embedding-rounds R`` of a ``python -m analyses.bench_inference`` command (which times both
    embeddings interleaved in one process); None when neither says. (Its ``--rounds`` is another table's.)"""
    stated = re.search(r"median of (\d+) interleaved rounds", title)
    if stated:
        return int(stated.group(1))
    option = re.search(r"--embedding-rounds[= ](\d+)(?:\s|$)", command)
    if command.startswith("python -m analyses.bench_inference") and option:
        return int(option.group(1))
    return None


def _table1_control(ev: Evidence) -> Finding:
    runs = {(str(row["title"]), str(row["command"])) for row in ev.rows}
    if len(runs) != 1:
        return Finding(False, f"rows of {len(runs)} benchmark runs (1 needed)")
    title, command = runs.pop()
    rounds = table1_rounds(title, command)
    threads = re.search(r"\b(\d+) threads?\b", title)
    present = [k for k in TABLE1_KS if len(ev.cell(k=k)) == 1]
    return _all([
        Finding(rounds is not None and rounds >= MIN_ROUNDS,
                f"both embeddings timed interleaved in one process, median of {rounds} rounds (>= {MIN_ROUNDS} needed)"
                if rounds is not None else f"interleaved rounds not stated in the title or command (>= {MIN_ROUNDS} "
                "needed)"),
        Finding(bool(threads) and int(threads.group(1)) == TABLE1_THREADS,
                f"threads stated: {threads.group(1) if threads else 'none'} ({TABLE1_THREADS} needed)"),
        Finding(len(present) == len(TABLE1_KS), f"k of the paper's grid {{{', '.join(map(str, TABLE1_KS))}}} "
                                                f"present: {len(present)}/{len(TABLE1_KS)}"),
    ])


def _table1_claims() -> list[Claim]:
    def listed(values: Sequence[float], ks: Sequence[int], unit: str) -> str:
        return ", ".join(f"k={k} {value:.2f}{unit}" if unit == "x" else f"k={k} {value:.1f}{unit}"
                         for k, value in zip(ks, values))

    def non_decreasing(values: Sequence[float]) -> bool:
        return all(b >= a for a, b in zip(values, values[1:]))  # False with a NaN

    def faster(ev: Evidence) -> Finding:
        ks = [k for k in TABLE1_KS if k >= 25]
        values = [_bench_value(ev, k, "speedup") for k in ks]
        return Finding(all(v > 1 for v in values), f"speed-up {listed(values, ks, 'x')} (> 1 at each needed)")

    def grows(ev: Evidence) -> Finding:
        values = [_bench_value(ev, k, "speedup") for k in TABLE1_KS]
        return Finding(non_decreasing(values), f"speed-up {listed(values, TABLE1_KS, 'x')} (non-decreasing in k "
                                               "needed)")

    def saves(ev: Evidence) -> Finding:
        values = [_bench_value(ev, k, "memory_saved") for k in TABLE1_KS]
        return Finding(all(v > 0 for v in values) and non_decreasing(values),
                       f"memory saved {listed(values, TABLE1_KS, '%')} (> 0 at every k and non-decreasing needed)")

    control = _check(f"one benchmark run that timed both embeddings interleaved in one process with at least "
                     f"{MIN_ROUNDS} rounds (medians; the rounds stated in the title, or --embedding-rounds of the "
                     f"bench_inference command), at the {TABLE1_THREADS} threads its title states, with a row for "
                     f"every k of the paper's grid {{{', '.join(map(str, TABLE1_KS))}}}", TABLE1_COLUMNS_READ,
                     _table1_control)
    paper = "paper 2 Table 1"
    return [
        Claim("table1.binary_faster_from_k25", "table1", paper,
              "The binary embedding's forward pass is faster than one-hot's at every k >= 25 (the paper, GPU: 1.05x "
              "at k = 25 to 12.14x at k = 1000; 0.88x at k = 6)." + BACKWARD, TABLE1_METRIC + SPEEDUP,
              _check("speed-up > 1 at each k in {25, 100, 400, 1000}", ("speedup",), faster), control),
        Claim("table1.speedup_grows_with_k", "table1", paper,
              "The binary embedding's forward speed-up over one-hot grows with k." + BACKWARD,
              TABLE1_METRIC + SPEEDUP,
              _check("speed-up non-decreasing over k = 6, 25, 100, 400, 1000", ("speedup",), grows), control),
        Claim("table1.binary_saves_memory_growing_with_k", "table1", paper,
              "The binary embedding saves memory against one-hot at every k, and the saving grows with k (the "
              "paper, GPU: 0.9% at k = 6 to 69.3% at k = 1000)." + BACKWARD, TABLE1_METRIC + MEMORY,
              _check("memory saved > 0 at each k in {6, 25, 100, 400, 1000} and non-decreasing over them",
                     ("memory_saved",), saves), control),
    ]

# ----- the registry -------------------------------------------------------------------------------------------------
STUDIES: dict[str, StudyDesign] = {design.name: design for design in (
    StudyDesign("embedding", "Embedding width: one-hot (D = d + k) vs binary (D = d + ceil(log2 k)) vs none (D = d)",
                "(d, k) in {(4, 6), (4, 16), (32, 6), (8, 8)} x embedding in {onehot, binary, none}; n = 128, "
                "tau = 0.1, NE loss; 10,000 steps, 5 seeds",
                ("embedding_d4_k6", "embedding_d4_k16", "embedding_d32_k6", "embedding_d8_k8")),
    StudyDesign("tau_loss", "Loss (NE softmax vs L2 sparsemax) x temperature tau",
                "d = 4, k = 6, one-hot, n = 128; tau in {1, 0.25, 0.14, 0.1} x loss in {softmin (NE), sparsemax "
                "(L2)}; 10,000 steps, 5 seeds. The same rules decide the same grid at d = 32 (paper 2 shows both d), "
                "on the rows of `analyses/results/studies/tau_loss_d32.csv` (section `tau_loss_d32` of "
                "analyses/RESULTS.md)", ("tau_loss",)),
    StudyDesign("d", "Dimension d", "k = 6, one-hot, n = 128, tau = 0.1; d in {4, 8, 16, 32}; 10,000 steps, 5 seeds",
                ("d",)),
    StudyDesign("k", "Number of clusters k", "d = 32, one-hot, n = 128, tau = 0.1; k in {6, 10, 16, 25}; 10,000 "
                "steps, 5 seeds", ("k",)),
    StudyDesign("family", "Training family and the 5 x 5 transfer grid",
                "d = 32, k = 10, one-hot, n = 128, tau = 0.1; training family in {normal, cauchy, gumbel, laplace, "
                "lognormal}, each model scored on all five; 10,000 steps, 5 seeds", ("family",)),
    StudyDesign("stability", "One-hot vs binary stability without gradient clipping",
                "d = 32, k = 25, n = 128, tau = 0.1, no clipping; embedding in {onehot, binary}; 10,000 steps, "
                "10 seeds", ("stability_d32_k25",), STABILITY_SEEDS),
    StudyDesign("lr", "Learning rate at d = 32", "d = 32, k = 6, one-hot, n = 128; lr in {0.001, 0.01, 0.1, 1}; "
                "5 seeds (the paper: 5,000 steps)", ("lr",)),
    StudyDesign("n", "Training length n", "d = 4, k = 6, one-hot; n in {128, 256, 512, 1024}; 5 seeds", ("n",)),
    StudyDesign("embedding_n512", "Embedding width at the papers' n = 512, d = 4, k = 16",
                "(d, k) = (4, 16) x embedding in {onehot, binary, none}; n = 512, tau = 0.1, NE loss; 10,000 steps, "
                "5 seeds; the rules of the n = 128 study", ("embedding_d4_k16_n512",)),
    StudyDesign("stability_n512", "One-hot vs binary stability without gradient clipping at the papers' n = 512",
                "d = 32, k = 25, n = 512, tau = 0.1, no clipping; embedding in {onehot, binary}; 10,000 steps, "
                "10 seeds; the rules of the n = 128 study", ("stability_d32_k25_n512",), STABILITY_SEEDS),
    StudyDesign("n_d4k16", "Training length n at d = 4, k = 16, where one-hot misses one-step Lloyd at n = 128",
                "d = 4, k = 16, one-hot; n in {128, 512}; 10,000 steps, 5 seeds; the rows are the one-hot rows of "
                "embedding (n = 128) and embedding_n512 (n = 512), not runs of their own",
                ("embedding_d4_k16", "embedding_d4_k16_n512")),
    StudyDesign("multistep", "Multi-step inference over seeds: re-embedding vs naive stacking vs Lloyd",
                "the 10,000-step checkpoints of the embedding ablation at d = 32, k = 10, n = 512, tau = 0.1 "
                "(embedding in {onehot, binary, none}, 5 seeds each), each applied T = 20 times re-embedded and "
                "stacked, against 20 Lloyd iterations; 320 unseen tasks, n = 512, random starts",
                ("multistep_seeds",), source="`analyses/results/studies/multistep_seeds.csv`, one row per checkpoint "
                "(`python -m analyses.main_seeds`: each seed trained, then scored by `analyses.multistep --seed-rows "
                "--keep-rows`)"),
    StudyDesign("generalisation", "Length and shift generalisation of the one-hot model over seeds",
                "the 5 one-hot checkpoints of the multistep study (d = 32, k = 10, trained at n = 512, 10,000 steps) "
                "scored by `interp evaluate`: protocols main (n = 512), length (n in {128, 256, 1024, 2048}) and "
                "shift (unequal weights, anisotropic, half scale, double scale); 320 tasks per setting, random "
                "starts, T = 20", ("generalisation",),
                source="`analyses/results/studies/generalisation.csv`, one row per checkpoint and setting (`python -m "
                "analyses.main_seeds`: each one-hot seed trained, then scored by `analyses.generalisation "
                "--keep-rows`)"),
    StudyDesign("table1", "Paper 2 Table 1: one-hot vs binary forward time and peak memory",
                "one-layer learnable model, d = 32, n = 1024, 32 tasks, k in {6, 25, 100, 400, 1000}, 2 threads, "
                "both embeddings timed in interleaved rounds in one process (medians); one benchmark run, no seeds",
                ("inference_embeddings",), seeds=1,
                source="`analyses/results/bench/inference_embeddings.json`, one row per k "
                "(`analyses.bench_inference.table1_rows`)"),
)}

BUILT_IN: tuple[Claim, ...] = (  # the claims written here; a study folder's claims.py adds its own
    *(claim for d, k in PAIRS for claim in embedding_pair_claims(d, k)),
    *_embedding_across_claims(),
    *_tau_claims(),
    _grid_claim("d", "d", (4, 8, 16, 32), "k = 6", "paper 2 Figs. 10b, 15"),
    _grid_claim("k", "k", (6, 10, 16, 25), "d = 32", "paper 2 Fig. 10a"),
    *_family_claims(),
    *_stability_claims(),
    *_lr_claims(),
    *_n_claims(),
    *embedding_pair_claims(4, 16, "embedding_n512"),
    *_stability_claims("stability_n512"),
    *_multistep_claims(),
    *_generalisation_claims(),
    *_table1_claims(),
)


_REGISTERED: list[tuple[Claim, ...]] = []


def all_claims() -> tuple[Claim, ...]:
    """Every registered claim: those written here, then the ``CLAIMS`` of each study folder's ``claims.py``
    (``analyses.framework.registry``), in folder order."""
    if not _REGISTERED:
        from analyses.framework import registry

        _REGISTERED.append(BUILT_IN + tuple(claim for module in registry.claim_modules() for claim in module.CLAIMS))
    return _REGISTERED[0]


def __getattr__(name: str):
    if name == "CLAIMS":  # every registered claim, the folders' included (PEP 562: computed on first use)
        return all_claims()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def claims_of(study: str) -> list[Claim]:
    """The registry's claims of ``study`` (a key of STUDIES), in registry order."""
    if study not in STUDIES:
        raise InvalidInput(f"study must be one of {sorted(STUDIES)}, got {study!r}")
    return [claim for claim in all_claims() if claim.study == study]


def _evidence(rows: object, histories: object) -> Evidence:
    if not isinstance(rows, Sequence) or isinstance(rows, (str, bytes)):
        raise InvalidInputType(f"rows must be a list of CSV rows (dicts), got {type(rows).__name__}")
    if not all(isinstance(row, Mapping) for row in rows):
        raise InvalidInputType("rows must be a list of CSV rows (dicts)")
    if histories is not None and not isinstance(histories, Mapping):
        raise InvalidInputType(f"histories must be a dict (row key -> history) or None, got "
                               f"{type(histories).__name__}")
    keys = [row_key(row) for row in rows]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise InvalidInput(f"rows hold several rows {repeated}: pass the rows of one run of each table "
                           "(interp.training.sweep.study_rows), one per grid point and seed")
    return Evidence(tuple(rows), histories)


def decide(claim: Claim, rows: Sequence[Mapping[str, object]],
           histories: Mapping[str, Sequence[Mapping[str, object]]] | None = None) -> Verdict:
    """The verdict on ``claim`` from a study's ``rows`` (CSV rows of one run) and the seeds' ``histories`` (row_key ->
    training history; needed by the claims whose rule or control reads the curves): "reproduced" / "not reproduced"
    by the rule when the control holds, "undecided at this budget" when it does not. The rule's figure is computed
    (and shown) either way. A claim that reads the training curves raises InvalidInput when a row's history is
    missing: a wiring error, not an outcome."""
    if not isinstance(claim, Claim):
        raise InvalidInputType(f"claim must be a Claim of analyses.claims.CLAIMS, got {type(claim).__name__}")
    evidence = _evidence(rows, histories)
    control = claim.control.evaluate(evidence)
    rule = claim.rule.evaluate(evidence)
    if not control.holds:
        return Verdict(UNDECIDED, rule.figure, control.figure)
    return Verdict(REPRODUCED if rule.holds else NOT_REPRODUCED, rule.figure, control.figure)


def run_identity(row: Mapping[str, object]) -> str:
    """The training run a row records: every ``TrainConfig`` field of its config, seed included, as canonical JSON.
    A field the row does not hold (written before the option existed) takes its default, which trains as before;
    keys that are not training fields (the evaluation setting ``analyses.generalisation`` adds) are not the run's.
    Rows of two tables with one identity are one seeded training: the same initial weights and task draws (written
    by different versions of the code they can differ by float rounding, which training amplifies), so claims that
    read them do not rest on independent evidence."""
    config = json.loads(str(row["config"]))
    missing = [field.name for field in fields(TrainConfig)
               if field.name not in config and (field.name == "seed" or field.default is MISSING)]
    if missing:
        raise ValueError(f"row {row.get('name')!r}: its config lacks {missing}, so it names no training run")
    return json.dumps({field.name: config.get(field.name, field.default) for field in fields(TrainConfig)},
                      sort_keys=True)


def rows_read(claim: Claim, rows: Sequence[Mapping[str, object]],
              histories: Mapping[str, Sequence[Mapping[str, object]]] | None = None) -> list[Mapping[str, object]]:
    """The rows ``claim``'s verdict reads (every cell its rule or its control asks ``Evidence.cell`` for: the control
    decides whether the verdict counts), in the order first read. A check over all of ``Evidence.rows`` (no
    clipping, the benchmark's completeness) is not recorded: the studies' cells hold those rows."""
    evidence = _evidence(rows, histories)
    read: dict[int, Mapping[str, object]] = {}

    class Recording(Evidence):
        def cell(self, **fields: object) -> list[Mapping[str, object]]:
            found = Evidence.cell(self, **fields)
            read.update((id(row), row) for row in found if id(row) not in read)
            return found

    recording = Recording(evidence.rows, evidence.histories)
    claim.rule.evaluate(recording)
    claim.control.evaluate(recording)
    return list(read.values())


def shared_runs(read: Mapping[str, set[str]], study_of: Mapping[str, str]) -> dict[str, list[str]]:
    """For each claim id of ``read`` (claim id -> the run identities its verdict reads), the claims of *other* studies
    that read at least one of the same runs, sorted; ``study_of`` maps a claim id to its study."""
    return {claim: sorted(other for other, runs in read.items()
                          if study_of[other] != study_of[claim] and runs & read[claim])
            for claim in read}


def decide_study(study: str, rows: Sequence[Mapping[str, object]],
                 histories: Mapping[str, Sequence[Mapping[str, object]]] | None = None) -> list[tuple[Claim, Verdict]]:
    """Every claim of ``study`` decided on its rows (for the embedding study: the rows of its three tables)."""
    return [(claim, decide(claim, rows, histories)) for claim in claims_of(study)]


def histories_by_key(rows: Sequence[Mapping[str, object]],
                     by_label: Mapping[str, Sequence[Sequence[Mapping[str, object]]]]) -> dict[str, list]:
    """{row_key(row): history} of one table's ``rows`` from ``analyses.studies.histories_by_label(table, dir,
    rows)`` (label -> histories in the order of that label's rows)."""
    out, seen = {}, {}
    for row in rows:
        label = row["label"]
        index = seen.get(label, 0)
        if label not in by_label or index >= len(by_label[label]):
            raise InvalidInput(f"by_label lacks the history of row {row['name']!r} (label {label!r}, #{index})")
        out[row_key(row)] = list(by_label[label][index])
        seen[label] = index + 1
    return out


def verdict_lines(results: Sequence[tuple[Claim, Verdict]]) -> list[str]:
    """A RESULTS.md verdict table: claim, the rule's deciding figure, the control's figure, the outcome."""
    lines = ["| paper's finding | measured (rule) | control | verdict |", "|---|---|---|---|"]
    for claim, verdict in results:
        lines.append(f"| {claim.claim} (`{claim.id}`) | {verdict.figure} | {verdict.control_figure} | "
                     f"**{verdict.outcome}** |")
    return lines


# ----- docs/claims.md -----------------------------------------------------------------------------------------------
def _cell_text(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def markdown() -> str:
    """docs/claims.md: the conventions, then per study its design and one row per claim."""
    lines = [
        "# Paper 2's claims as rules, fixed before the runs",
        "",
        "<!-- generated by `python -m analyses.claims --markdown > docs/claims.md`; tests/test_claims.py checks that "
        "this file equals the generator's output -->",
        "",
        "Every finding of paper 2 (\"Leaner Transformers Can Easily Learn to Cluster\", Park, Clarkson, Horesh, Ito, "
        "Ram) that the studies here decide (the learning studies, the multi-step and generalisation evaluations over "
        "seeds, Table 1's benchmark), with its metric, its rule and its control, as `analyses/claims.py` "
        "states them. The file was committed before the 10,000-step, 5-seed runs, so `git log -p "
        "docs/claims.md` shows whether any rule changed after the data came in. `decide(claim, rows, histories)` "
        "gives **reproduced** or **not reproduced** by the rule when the control holds, and **undecided at this "
        "budget** whenever the control fails. Each rule has a unit test per outcome in `tests/test_claims.py`.",
        "",
        "## How a claim is decided",
        "",
        "* A *cell* is one grid point of a study (the rows whose training `config` has the given values); a *seed* is "
        "one row (`interp.training.sweep` writes one per grid point and seed).",
        "* A seed whose run did not end cleanly (`status` `diverged` or `unscorable`; `unfinished`: a checkpoint "
        "scored before its configured steps) takes the worst value of every metric (+inf; lower is better for every "
        "metric here), as does a non-finite value: a failed run never counts as a success.",
        f"* **Sign test**: exact one-sided binomial test of \"more seeds on the claimed side than chance\" (success "
        f"probability 1/2) at {ALPHA}. With 5 seeds it needs all 5 (p = 1/32 = 0.031); with 10 seeds, 9 (p = 0.011).",
        f"* **Rank test**: exact Mann-Whitney (Wilcoxon rank-sum) permutation test on the per-seed values, midranks "
        f"for ties, one-sided at {ALPHA}; two-sided p = twice the smaller one-sided p (at most 1). With 5 against 5 "
        "seeds and no ties it needs U <= 4 (p = 12/252 = 0.048).",
        f"* **Fisher test**: exact one-sided Fisher test of a higher rate of unstable seeds, at {ALPHA}.",
        "* A claim made of several tests (\"at every tau\") holds when every test does (an intersection-union test: "
        "level 0.05 without a multiplicity correction).",
        f"* **No effect** is a claim of equivalence, decided by evidence either way: **reproduced** when every pair of "
        f"cells is shown equivalent within +-{EQUIVALENCE_MARGIN:g} in R1 by two one-sided exact rank-sum tests "
        f"(TOST: a lies below b + {EQUIVALENCE_MARGIN:g} and above b - {EQUIVALENCE_MARGIN:g}, each at {ALPHA}; all "
        "pairs must pass, an intersection-union test needing no correction); **not reproduced** when some pair is "
        f"shown to differ by more than {EQUIVALENCE_MARGIN:g} (two-sided rank test of the shifted samples at the "
        "Bonferroni level 0.05 / m over m pairs); **undecided** when the rows show neither (too few seeds for the "
        f"margin). Why +-{EQUIVALENCE_MARGIN:g}: it is 2.5% of one-step Lloyd's objective, a quarter of the typical "
        "gain of a trained model over one-step Lloyd at the papers' defaults (R1 about 0.9, paper 2 Fig. 2), so a "
        "shift within it is small against the effects the papers report; and it is fixed before the n = 512 runs it "
        "decides at d = 4, k = 16. The rank-sum TOST with 5 against 5 seeds can show equivalence only when the seeds "
        "spread over less than the margin (its smallest p is 1/252 per side), so the margin is also the resolution "
        "of the verdict. (The first rule of `n.no_effect`, no pair rejected by a two-sided rank test at 0.05 / 6, "
        "could hardly fail: with 5 against 5 seeds only complete separation rejects; it was replaced by this one "
        "after its verdict, on the same rows.)",
        "* **Reaches one-step Lloyd**: the median over seeds of the final relative objective R1 is below 1.",
        f"* Controls need at least {MIN_SEEDS} seeds per cell read ({STABILITY_SEEDS} in the stability study) and, "
        "for a claim that something fails, a positive control: a reference cell that succeeds at the same budget, so "
        "that a failure is the claim's and not the budget's.",
        "* Runs use n = 128 where the study is not about n (the papers use 512); the n study covers the difference at "
        "d = 4, k = 6, and the contested cells (embedding at d = 4, k = 16; stability at d = 32, k = 25) are also run "
        "at n = 512 (studies `embedding_n512`, `stability_n512`, with the same rules; `n_d4k16` compares the two n). "
        "The `multistep` and `generalisation` studies score checkpoints trained at the papers' n = 512.",
        "* Rows: the CSV rows of one run (`interp.training.sweep.study_rows`; the embedding study: of its three "
        "tables); histories: \"<study>/<name>\" of a row -> its checkpoint's training history, for the rules and "
        "controls that read the training curves (column \"reads\"). The `multistep` and `generalisation` studies "
        "read rows of their own, one per checkpoint (seed) and evaluation setting, holding the per-step curves of "
        "the evaluation protocol as JSON lists (mean log objective after steps 0..T, T = 20: `model_curve` "
        "re-embedded, `stacked_curve`, `lloyd_curve`); `table1` reads one row per k of one benchmark run: a single "
        "measurement per k, not seeds, so its rules compare the run's medians without a test.",
        "",
    ]
    for design in STUDIES.values():
        tables = design.source or ", ".join(f"`analyses/results/studies/{table}.csv`" for table in design.tables)
        lines += [f"## Study `{design.name}`: {design.title}", "", f"Design: {design.design}.  ", f"Rows: {tables}.",
                  "", "| id | paper | claim | metric | rule | control | reads |", "|---|---|---|---|---|---|---|"]
        for claim in claims_of(design.name):
            columns = sorted(set(claim.rule.columns + claim.control.columns) - set(BASE_COLUMNS))
            keys = sorted(set(claim.rule.history_keys + claim.control.history_keys))
            reads = ", ".join([*columns, *(f"history {key}" for key in keys)]) or "-"
            lines.append("| " + " | ".join(_cell_text(text) for text in (
                f"`{claim.id}`", claim.paper, claim.claim, claim.metric, claim.rule.text, claim.control.text,
                reads)) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--markdown", action="store_true", help="print docs/claims.md (the table of every claim)")
    args = parser.parse_args(argv)
    if not args.markdown:
        parser.error("say what to print: --markdown")
    text = markdown()
    print(text, end="")
    return text


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
