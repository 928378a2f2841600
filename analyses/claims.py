"""The machinery of paper 2's claims: each a rule with a control, fixed before the runs.

Each :class:`Claim` names one metric (columns of the study rows that ``interp.training.sweep``
writes, or of the seeds' training histories), a **rule** (a pure function of the rows: does the claim hold?) and a
**control** (a pure function of the rows that must hold for the verdict to count). :func:`decide` turns a claim and
a study's rows into a :class:`Verdict`: "reproduced" or "not reproduced" by the rule when the control holds, and
"undecided at this budget" whenever it does not.

Where the claims live: each study folder's ``analyses/studies/<folder>/claims.py`` lists its own in ``CLAIMS``,
built from what this module holds: the types, the metrics (:func:`final_relative`, :func:`twenty_step_gap`,
:func:`curve_area`, ...), the building blocks of rules and controls (``_sign``, ``_ranks``, ``_flags``,
``_enough``, ``_check``, ...), the constants, and the builders several folders share (:func:`embedding_pair_claims`
for every embedding cell, :func:`grid_claim` for d and k, :func:`stability_claims` for both stability cells,
:func:`no_effect_claim` for n and n_d4k16). :func:`all_claims` (and ``CLAIMS``) loads the folders' modules on first
use, in the order of CLAIM_FOLDERS; :func:`designs` (and ``STUDIES``) gives each study's design and tables,
the ``DESIGNS`` of the folder that holds its claims (docs/claims.md's sections). Here also: :func:`decide`,
:func:`rows_read`, :func:`run_identity`, :func:`verdict_lines` and :func:`markdown`.

Conventions (every rule and control; ``python -m analyses.claims --markdown`` writes them into docs/claims.md;
the exact tests are in analyses/framework/statistics.py, ``analyses.framework.statistics``):

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
  rank-sum TOST (``statistics.equivalence_p``) at 0.05 (intersection-union: no correction); it is "not reproduced" only
  when some pair differs by more than the margin (``statistics.beyond_margin_p`` at the Bonferroni level 0.05 / m over
  m pairs), and undecided when neither is shown (too few seeds for the margin).
* "Reaches one-step Lloyd": the median over seeds of the final relative objective is below 1.

The study rows are the CSV rows of one run (``interp.training.sweep.study_rows``: one row per (grid point, seed)),
for the embedding study those of its three tables together; histories map a row's :func:`row_key` ("<study>/<name>":
row names repeat across the embedding tables) to its checkpoint's training history (``[{"step", "loss",
"relative_objective", "lr"}, ...]``; :func:`histories_by_key` converts the label-keyed lists of
``analyses.framework.grid.histories_by_label``). The studies ``multistep`` and ``generalisation`` read rows of
their own, one per checkpoint (and evaluation setting) with per-step curves (``analyses.multistep --seed-rows``,
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
from analyses.framework.statistics import beyond_margin_p, equivalence_p, rank_sum_p, sign_test_p
from analyses.framework.statistics import median as _median
from interp import _arguments as arguments
from interp._checks import InvalidInput, InvalidInputType
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


# ----- claim builders the study folders share ----------------------------------------------------------------------
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


def grid_claim(study: str, field: str, values: Sequence[int], fixed: str, paper: str) -> Claim:
    """The claim of a one-field grid (studies ``d`` and ``k``): at tau = 0.1 the one-hot model beats one-step Lloyd at
    every value of ``field``."""
    cells = [(f"{field}={value}", {field: value}) for value in values]

    def beat(ev: Evidence) -> Finding:
        return _all([_sign(cell[0], _values(ev, cell, final_relative), "<", 1) for cell in cells])

    return Claim(f"{study}.beats_one_step_lloyd_at_every_{field}", study, paper,
                 f"At tau = 0.1 ({fixed}) the one-hot model beats one-step Lloyd at every {field} in "
                 f"{{{', '.join(map(str, values))}}}", R1_METRIC + WHY_R1,
                 _check(f"sign test of R1 < 1 at each {field} (all must pass)", R1_COLUMNS, beat),
                 _check(f"at least {MIN_SEEDS} seeds at each {field}", (), lambda ev: _enough(ev, cells)))


NUMERIC_METRIC = ("numerically unstable seeds: runs stopped by a non-finite loss or non-finite weights (status "
                  "diverged) or whose model gives non-finite outputs (status unscorable), the paper's 'numerically "
                  "unstable'; a finite jump of the validation objective does not count. A count, not a test: at 10 "
                  "against 10 "
                  "seeds Fisher's exact test cannot reach 0.05 even at the paper's own counts (3/10 against 0/10: "
                  "one-sided p = 0.105)")


def stability_claims(study: str = "stability") -> list[Claim]:
    """The claims of one-hot vs binary stability without clipping at d = 32, k = 25 (studies ``stability`` and
    ``stability_n512``, the same rules at n = 128 and 512): binary trains stably, one-hot is numerically unstable in
    some seeds."""
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


def no_effect_claim(claim_id: str, study: str, cells: Sequence[Cell], claim: str,
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


# ----- multi-step inference, length and shift (studies multistep, generalisation): per-step curves ------------------
MULTISTEP_T = 20  # the papers' T: re-embedded model steps, stacked steps and Lloyd iterations (paper 2 Fig. 6)
GENERALISATION_LENGTHS = (128, 256, 1024, 2048)  # interp.evaluate's ``length`` protocol
SHIFTS = ("unequal weights", "anisotropic", "half scale", "double scale")  # interp.evaluate's ``shift`` protocol


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


# ----- paper 2 Table 1 (study table1): the benchmark run's grid and its rounds --------------------------------------
TABLE1_KS = (6, 25, 100, 400, 1000)  # the paper's k grid (d = 32, n = 1024, 32 tasks)


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


# ----- the registry -------------------------------------------------------------------------------------------------
# The studies: each one's design and the tables its claims read (docs/claims.md's sections, in this order). The claims
# themselves are in the study folders: the ``CLAIMS`` of analyses/studies/<folder>/claims.py.
def designs() -> dict[str, StudyDesign]:
    """name -> the design of every study the claims decide: the ``DESIGNS`` of the study folders' ``claims.py``, in
    the order their claims register (CLAIM_FOLDERS)."""
    if not _DESIGNS:
        _DESIGNS.update((design.name, design) for module in _claim_modules()
                        for design in getattr(module, "DESIGNS", ()))
    return _DESIGNS


_DESIGNS: dict[str, StudyDesign] = {}

# The order the folders' claims register in: the order they were written in when they lived in this module, which
# ``claims_of`` keeps (the order of every verdict table and of docs/claims.md); a folder not named here follows, in
# name order.
CLAIM_FOLDERS = ("embedding_d4_k6", "embedding_d4_k16", "embedding_d32_k6", "embedding_across_pairs", "tau_loss", "d",
                 "k", "family", "stability_d32_k25", "lr", "n", "embedding_d4_k16_n512", "stability_d32_k25_n512",
                 "n_d4k16", "main_seeds", "inference_embedding")

_REGISTERED: list[tuple[Claim, ...]] = []


def _claim_modules() -> list:
    """The study folders' ``claims.py`` modules (``analyses.framework.registry``): the folders of CLAIM_FOLDERS first,
    in its order, then the others in name order. Imported on first use, so that a folder's claims.py can import this
    module (``from analyses import claims as C``) in either order."""
    from analyses.framework import registry

    def rank(module) -> int:
        folder = module.__name__.split(".")[-2]
        return CLAIM_FOLDERS.index(folder) if folder in CLAIM_FOLDERS else len(CLAIM_FOLDERS)

    return sorted(registry.claim_modules(), key=rank)  # stable: the other folders keep their name order


def all_claims() -> tuple[Claim, ...]:
    """Every registered claim: the ``CLAIMS`` of each study folder's ``claims.py``, in ``_claim_modules`` order."""
    if not _REGISTERED:
        _REGISTERED.append(tuple(claim for module in _claim_modules() for claim in module.CLAIMS))
    return _REGISTERED[0]


def __getattr__(name: str):
    if name == "CLAIMS":  # every registered claim, the folders' included (PEP 562: computed on first use)
        return all_claims()
    if name == "STUDIES":  # name -> StudyDesign of every study the claims decide, from the folders' DESIGNS
        return designs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def claims_of(study: str) -> list[Claim]:
    """The registry's claims of ``study`` (a key of ``designs()``), in registry order."""
    if study not in designs():
        raise InvalidInput(f"study must be one of {sorted(designs())}, got {study!r}")
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
    """{row_key(row): history} of one table's ``rows`` from ``analyses.framework.grid.histories_by_label(table,
    dir, rows)`` (label -> histories in the order of that label's rows)."""
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
    for design in designs().values():
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
