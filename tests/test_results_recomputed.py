"""The committed tables and verdicts recomputed from the committed raw rows, by code of this file alone.

Nothing here is imported from ``analyses`` or ``interp`` (``test_this_file_imports_neither_analyses_nor_interp``
checks it): the quantiles are numpy's, the tests scipy's, the formats and rules written out again from
analyses/RESULTS.md and docs/claims.md. Every comparison is a function of the rows and the printed text that returns
its mismatches; each kind has a test that perturbs the rows (or the printed text) in memory and asserts that the
mismatch is reported.

a. Each grid study's summary table in analyses/RESULTS.md (the sections with the table "| grid point | seeds
   (diverged) | ..." backed by ``analyses/results/studies/<KEY>.csv`` and ``<KEY>_training.json``): the rows listed
   in the JSON's "rows" ([name, steps], the latest CSV row of each), per grid point: seeds (diverged: status not
   ok), median [25 %, 75 %] of relative_objective, model_log_objective, model - lloyd and loss_gap_mean (numpy's
   linear quantiles of the finite values), median lloyd_log_objective.
b. The verdict rows (rule figure, control figure, outcome) of the sections of the embedding pairs (d = 4, k = 6;
   d = 4, k = 16 at n = 128 and 512; d = 32, k = 6), of stability (n = 128 and 512), d, k, lr, tau_loss and
   tau_loss_d32: sign tests by ``scipy.stats.binomtest``, rank-sum tests by ``scipy.stats.mannwhitneyu(method=
   "exact")`` without ties and by an exhaustive permutation of the midranks with them, Fisher by
   ``scipy.stats.fisher_exact``; training curves from ``<KEY>_histories.jsonl``. README's table of the claims decided
   at both n is compared with the recomputed outcomes.
c. README's headline table (the hybrid study's test, random starts: mean ln objective ± SE, the paired differences
   to k-means++ x1 and x10 with their SE, median and share of tasks won) and its time line from the per-task rows of
   analyses/results/hybrid_tasks.csv and the timings of hybrid.json (medians; tests/test_hybrid_results.py recomputes
   the rest of that record), RESULTS.md's learning table from every eval-*/evaluation.csv, README's claim counts from
   the verdict rows of RESULTS.md; best_model.json's differences of means, its verdicts' measured values (from its
   scores, spreads and timings), their outcomes (from predicted value, tolerance and kind) and its goals.
d. docs/learned_model.md's table of the data unlike the training tasks (median, smallest ratio, share warned) from
   learned_vs_lloyd.json's per-seed ratios, and its "At the margin 2" shares of the hostile fits.

Not recomputable here (the values they rest on are not committed):

* standard errors and paired differences' standard errors in best_model.json (``se``): only each
  model's mean and se over tasks are committed, not the per-task values; the share of tasks won likewise. The
  differences' means are checked (a difference of means), their se only for kmeanspp_10 - kmeanspp_10 = 0.
* the scores themselves (best_model.json "scores", eval-*/evaluation.csv): means over tasks of runs not committed.
* docs/learned_model.md's main-task table (quantiles, shares above 1.2 / 1.5 / 2, check times): the JSON holds only
  those summaries, not the per-fit ratios; checked only as the rounding of the committed summaries.

Recomputable from committed files but not recomputed in this file: the verdicts of family (transfer grid), n and
n_d4k16 (equivalence TOSTs), embedding_across_pairs (curve areas), multistep, generalisation and table1; the summary
tables of the sections other than the grid studies'.
"""

from __future__ import annotations

import ast
import copy
import csv
import itertools
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
RESULTS_MD = ROOT / "analyses" / "RESULTS.md"
README = ROOT / "README.md"
STUDIES = ROOT / "analyses" / "results" / "studies"
RESULTS = ROOT / "analyses" / "results"
SUMMARY_HEADER = "| grid point | seeds (diverged) | relative objective |"
ALPHA = 0.05


# ----- reading ------------------------------------------------------------------------------------------------------
def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return [row for row in csv.DictReader(handle) if None not in row.values() and None not in row]


def sections(text: str) -> dict[str, str]:
    """Each ``<!-- study:KEY -->`` section's text."""
    return {m.group(1): m.group(2) for m in re.finditer(r"<!-- study:(\S+) -->\n(.*?)<!-- /study:\1 -->", text,
                                                        re.S)}


def section_rows(key: str) -> list[dict]:
    """The CSV rows a section is written from: those listed in ``<KEY>_training.json`` (latest of each)."""
    wanted = [(name, int(steps)) for name, steps in json.loads((STUDIES / f"{key}_training.json").read_text())["rows"]]
    latest = {(row["name"], int(row["steps"])): row for row in read_csv(STUDIES / f"{key}.csv")}
    assert all(w in latest for w in wanted), f"{key}.csv lacks rows listed in {key}_training.json"
    return [latest[w] for w in wanted]


def section_histories(key: str) -> dict[str, list[tuple[float, float]]]:
    """Row name -> [(step, relative_objective)] of the latest history line per (name, configured steps)."""
    out = {}
    path = STUDIES / f"{key}_histories.jsonl"
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        steps = json.loads(entry["config"])["steps"]
        history = entry["history"]
        out[(entry["name"], steps)] = list(zip(map(float, history["step"]), map(float, history["relative_objective"])))
    return out


def table_cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split(" | ")]


# ----- a. summary tables --------------------------------------------------------------------------------------------
def band(values: list[float], digits: int) -> str:
    finite = np.array([v for v in values if math.isfinite(v)])
    if finite.size == 0:
        return "n/a"
    median, low, high = np.quantile(finite, [0.5, 0.25, 0.75])
    return f"{median:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def expected_summary(rows: list[dict]) -> dict[str, list[str]]:
    labels: dict[str, list[dict]] = {}
    for row in rows:
        labels.setdefault(row["label"], []).append(row)
    out = {}
    for label, seeds in labels.items():
        col = {name: [float(r[name]) for r in seeds] for name in
               ("relative_objective", "model_log_objective", "lloyd_log_objective", "loss_gap_mean")}
        gaps = [m - ll for m, ll in zip(col["model_log_objective"], col["lloyd_log_objective"])]
        out[label] = [label, f"{len(seeds)} ({sum(r['status'] != 'ok' for r in seeds)})",
                      band(col["relative_objective"], 3), band(col["model_log_objective"], 3),
                      f"{np.median(col['lloyd_log_objective']):.3f}", band(gaps, 3), band(col["loss_gap_mean"], 2)]
    return out


def printed_summary(section: str) -> dict[str, list[str]]:
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(SUMMARY_HEADER))
    out = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = table_cells(line)
        out[cells[0]] = cells
    return out


def summary_mismatches(rows: list[dict], section: str) -> list[str]:
    expected, printed = expected_summary(rows), printed_summary(section)
    problems = [f"grid points differ: printed {sorted(printed)}, rows {sorted(expected)}"] \
        if set(expected) != set(printed) else []
    for label in sorted(set(expected) & set(printed)):
        if expected[label] != printed[label]:
            problems.append(f"{label}: printed {printed[label]}, recomputed {expected[label]}")
    return problems


SECTIONS = sections(RESULTS_MD.read_text())
GRID_KEYS = sorted(key for key, text in SECTIONS.items() if SUMMARY_HEADER in text)


def test_this_file_imports_neither_analyses_nor_interp():
    tree = ast.parse(Path(__file__).read_text())
    names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    names += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert names and not [n for n in names if n.split(".")[0] in ("analyses", "interp")], names
    assert {n.split(".")[0] for n in names} <= {"__future__", "ast", "copy", "csv", "itertools", "json", "math", "re",
                                               "pathlib", "numpy", "pytest", "scipy"}, names


def test_the_grid_sections_are_found():
    assert len(GRID_KEYS) >= 14, GRID_KEYS
    for key in ("lr", "tau_loss", "tau_loss_d32", "embedding_d4_k6", "embedding_d4_k16", "embedding_d32_k6", "k", "d",
                "family", "n", "stability_d32_k25", "embedding_d4_k16_n512", "stability_d32_k25_n512"):
        assert key in GRID_KEYS


@pytest.mark.parametrize("key", GRID_KEYS)
def test_summary_table_recomputed_from_the_rows(key):
    assert (STUDIES / f"{key}.csv").is_file() and (STUDIES / f"{key}_training.json").is_file(), key
    problems = summary_mismatches(section_rows(key), SECTIONS[key])
    assert not problems, "\n".join(problems)


def test_summary_comparison_fails_on_changed_rows():
    rows = section_rows("d")
    assert not summary_mismatches(rows, SECTIONS["d"])
    changed = copy.deepcopy(rows)
    target = next(r for r in changed if r["label"] == "d=8")
    target["relative_objective"] = str(float(target["relative_objective"]) + 0.05)
    assert any(p.startswith("d=8:") for p in summary_mismatches(changed, SECTIONS["d"]))
    assert any(p.startswith("d=16:") for p in summary_mismatches(
        [r for r in rows if r is not next(x for x in rows if x["label"] == "d=16")], SECTIONS["d"]))  # a row dropped
    diverged = copy.deepcopy(rows)
    diverged[0]["status"] = "diverged"
    assert summary_mismatches(diverged, SECTIONS["d"])
    lloyd = copy.deepcopy(rows)
    for row in lloyd[:3]:
        row["lloyd_log_objective"] = str(float(row["lloyd_log_objective"]) + 0.01)
    assert summary_mismatches(lloyd, SECTIONS["d"])


# ----- b. verdicts --------------------------------------------------------------------------------------------------
def median(values: list[float]) -> float:
    s = sorted(values)
    if not s:
        return math.nan
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def finite_or_inf(value: float) -> float:
    return value if math.isfinite(value) else math.inf


def clean(row: dict) -> bool:
    return row["status"] == "ok"


def r1(row: dict) -> float:
    return finite_or_inf(float(row["relative_objective"])) if clean(row) else math.inf


def g20(row: dict) -> float:
    if not clean(row):
        return math.inf
    return finite_or_inf(finite_or_inf(float(row["model_log_objective"])) - finite_or_inf(
        float(row["lloyd_log_objective"])))


def loss_gap_mean(row: dict) -> float:
    return finite_or_inf(float(row["loss_gap_mean"])) if clean(row) else math.inf


def sign_p(hits: int, trials: int) -> float:
    return 1.0 if trials == 0 else stats.binomtest(hits, trials, 0.5, alternative="greater").pvalue


def rank_p(a: list[float], b: list[float], alternative: str) -> float:
    """Exact one-sided rank-sum p ("less": a lower); scipy's exact test without ties, else every split of the
    pooled midranks."""
    if not a or not b:
        return 1.0
    pooled = a + b
    if len(set(pooled)) == len(pooled) and all(math.isfinite(v) for v in pooled):
        return stats.mannwhitneyu(a, b, alternative=alternative, method="exact").pvalue
    ranks = stats.rankdata([v if math.isfinite(v) else 1e300 for v in pooled])  # +inf: the largest, tied together
    observed = ranks[: len(a)].sum()
    sums = np.array([ranks[list(c)].sum() for c in itertools.combinations(range(len(pooled)), len(a))])
    tail = sums <= observed + 1e-9 if alternative == "less" else sums >= observed - 1e-9
    return float(tail.mean())


def fisher_p(hits_a: int, n_a: int, hits_b: int, n_b: int) -> float:
    if n_a == 0 or n_b == 0:
        return 1.0
    return stats.fisher_exact([[hits_a, n_a - hits_a], [hits_b, n_b - hits_b]], alternative="greater").pvalue


class Evidence:
    def __init__(self, rows: list[dict], histories: dict):
        self.rows, self.histories = rows, histories

    def cell(self, **fields) -> list[dict]:
        return [r for r in self.rows if all(json.loads(r["config"]).get(k) == v for k, v in fields.items())]

    def curve(self, row: dict) -> list[tuple[float, float]]:
        return self.histories[(row["name"], json.loads(row["config"])["steps"])]


def both(findings: list[tuple[bool, str]]) -> tuple[bool, str]:
    return all(h for h, _ in findings), "; ".join(f for _, f in findings)


def sign(name: str, values: list[float], op: str, threshold: float, fmt: str = ".3f") -> tuple[bool, str]:
    side = {"<": lambda v: v < threshold, ">": lambda v: v > threshold}[op]
    hits = sum(side(v) for v in values)
    p = sign_p(hits, len(values))
    return bool(values) and p <= ALPHA, (f"{name}: {hits}/{len(values)} seeds {op} {threshold:g}, median "
                                         f"{median(values):{fmt}}, p = {p:.3f}")


def flags_test(name: str, flags: list[bool], what: str) -> tuple[bool, str]:
    p = sign_p(sum(flags), len(flags))
    return bool(flags) and p <= ALPHA, f"{name}: {sum(flags)}/{len(flags)} seeds {what}, p = {p:.3f}"


def ranks(name_a: str, a: list[float], name_b: str, b: list[float], alternative: str,
          fmt: str = ".3f") -> tuple[bool, str]:
    p = rank_p(a, b, alternative)
    return bool(a) and bool(b) and p <= ALPHA, (f"{name_a} median {median(a):{fmt}} vs {name_b} median "
                                                f"{median(b):{fmt}}, one-sided p = {p:.3f}")


def enough(ev: Evidence, cells: list[tuple[str, dict]], minimum: int = 5) -> tuple[bool, str]:
    counts = [(name, len(ev.cell(**fields))) for name, fields in cells]
    return all(c >= minimum for _, c in counts), ("seeds " + ", ".join(f"{n} {c}" for n, c in counts)
                                                  + f" (>= {minimum} each)")


def reaches(ev: Evidence, cell: tuple[str, dict]) -> tuple[bool, str]:
    m = median([r1(row) for row in ev.cell(**cell[1])])
    return m < 1, f"{cell[0]} median relative objective {m:.3f} (< 1 needed)"


def values(ev: Evidence, cell: tuple[str, dict], metric) -> list[float]:
    return [metric(row) for row in ev.cell(**cell[1])]


def embedding_claims(ev: Evidence, prefix: str, d: int, k: int) -> dict:
    onehot, binary, none = ((f"d={d},k={k} {e}", {"d": d, "k": k, "embedding": e}) for e in ("onehot", "binary",
                                                                                             "none"))
    bests, flags = [], []
    for row in ev.cell(**none[1]):
        curve = [v for _, v in ev.curve(row)]
        best = min(curve) if curve and all(math.isfinite(v) for v in curve) else math.inf
        bests.append(best)
        flags.append(best > 1 and r1(row) < curve[0])
    scored = [row for c in (onehot, binary, none) for row in ev.cell(**c[1]) if row["status"] != "unscorable"]
    finite = sum(math.isfinite(float(row["lloyd_log_objective"])) for row in scored)
    key = f"{prefix}.d{d}k{k}"
    return {
        f"{key}.onehot_binary_beat_one_step_lloyd": (
            both([sign(c[0], values(ev, c, r1), "<", 1) for c in (onehot, binary)]), enough(ev, [onehot, binary])),
        f"{key}.none_never_matches": (
            flags_test(none[0], flags, f"improve on step 0 and never reach 1 (median best {median(bests):.3f})"),
            both([enough(ev, [none, onehot]), reaches(ev, onehot)])),
        f"{key}.twenty_step_order": (
            both([sign(onehot[0], values(ev, onehot, g20), "<", 0, "+.3f"),
                  sign(binary[0], values(ev, binary, g20), "<", 0, "+.3f"),
                  sign(none[0], values(ev, none, g20), ">", 0, "+.3f")]),
            both([enough(ev, [onehot, binary, none]),
                  (finite == len(scored), f"Lloyd's 20-step log objective finite in {finite}/{len(scored)} scored "
                                          "rows")])),
    }


def stability_claims(ev: Evidence, prefix: str) -> dict:
    cells = [(e, {"embedding": e}) for e in ("onehot", "binary")]
    rows = [row for _, f in cells for row in ev.cell(**f)]
    good = sum(json.loads(r["config"]).get("grad_clip") is None and json.loads(r["config"])["steps"] >= 10000
               for r in rows)
    control = both([enough(ev, cells, 10),
                    (good == len(rows), f"no gradient clipping and >= 10000 configured steps in {good}/{len(rows)} "
                                        "rows")])

    def count(name: str, holds, need: str) -> tuple[bool, str]:
        flags = [not clean(row) for row in ev.cell(embedding=name)]
        figure = f"{name}: {sum(flags)}/{len(flags)} seeds numerically unstable ({need})"
        return bool(flags) and holds(sum(flags)), figure

    return {f"{prefix}.binary_stable": (count("binary", lambda c: c == 0, "0 needed"), control),
            f"{prefix}.onehot_unstable_in_some_seeds": (count("onehot", lambda c: c >= 1, ">= 1 needed"), control)}


def grid_claims(ev: Evidence, field: str, grid: tuple[int, ...]) -> dict:
    cells = [(f"{field}={v}", {field: v}) for v in grid]
    return {f"{field}.beats_one_step_lloyd_at_every_{field}": (
        both([sign(c[0], values(ev, c, r1), "<", 1) for c in cells]), enough(ev, cells))}


def largest_jump(curve: list[tuple[float, float]]) -> float:
    best, jump = math.inf, 0.0
    for _, value in curve:
        if not math.isfinite(value):
            return math.inf
        if best < math.inf:
            jump = max(jump, value / best - 1)
        best = min(best, value)
    return jump


def lr_claims(ev: Evidence) -> dict:
    cell = {lr: (f"lr={lr:g}", {"lr": lr}) for lr in (0.001, 0.01, 0.1, 1.0)}

    def unstable(row: dict) -> bool:
        return not clean(row) or largest_jump(ev.curve(row)) > 0.25

    base = [unstable(row) for row in ev.cell(**cell[0.01][1])]
    tests = []
    for lr in (0.1, 1.0):
        flags = [unstable(row) for row in ev.cell(**cell[lr][1])]
        p = fisher_p(sum(flags), len(flags), sum(base), len(base))
        tests.append((p <= ALPHA, f"{cell[lr][0]}: {sum(flags)}/{len(flags)} seeds unstable vs {sum(base)}/"
                                  f"{len(base)} at lr=0.01, one-sided p = {p:.3f}"))
    clipped = sum(json.loads(r["config"]).get("grad_clip") is not None for r in ev.rows)
    return {
        "lr.lr001_best": (both([ranks(cell[0.01][0], values(ev, cell[0.01], r1), cell[lr][0], values(ev, cell[lr], r1),
                                      "less") for lr in (0.001, 0.1, 1.0)]), enough(ev, list(cell.values()))),
        "lr.high_lr_unstable": (both(tests), both([
            enough(ev, list(cell.values())),
            (not any(base), f"lr=0.01: {sum(base)}/{len(base)} seeds unstable (0 needed)"),
            (clipped == 0, f"{clipped}/{len(ev.rows)} rows trained with gradient clipping (0 needed)")])),
    }


def tau_claims(ev: Evidence) -> dict:
    taus = (1.0, 0.25, 0.14, 0.1)
    ne = {t: (f"NE tau={t:g}", {"loss": "softmin", "tau": t}) for t in taus}
    l2 = {t: (f"L2 tau={t:g}", {"loss": "sparsemax", "tau": t}) for t in taus}

    def settling(row: dict) -> float:
        curve = ev.curve(row)
        final = curve[-1][1]
        if not clean(row) or not all(math.isfinite(v) for _, v in curve) or final <= 0:
            return math.inf
        settled = curve[-1][0]
        for step, value in reversed(curve):
            if abs(value / final - 1) > 0.05:
                break
            settled = step
        return settled

    def settles(cell) -> tuple[bool, str]:
        rows = ev.cell(**cell[1])
        last = max((ev.curve(row)[-1][0] for row in rows), default=math.nan)
        m = median([settling(row) for row in rows])
        return m <= 0.8 * last, f"{cell[0]} median settling step {m:.0f} of {last:.0f} (<= 80% needed)"

    finals = [r1(row) for row in ev.cell(**l2[1.0][1])]
    improve = [1 < r1(row) < ev.curve(row)[0][1] for row in ev.cell(**l2[1.0][1])]
    four = [ne[1.0], ne[0.1], l2[1.0], l2[0.1]]
    return {
        "tau_loss.l2_tighter_than_ne": (
            both([ranks(l2[t][0], values(ev, l2[t], loss_gap_mean), "NE", values(ev, ne[t], loss_gap_mean), "less",
                        ".2f") for t in taus]),
            enough(ev, [*ne.values(), *l2.values()])),
        "tau_loss.tau01_both_beat_one_step_lloyd": (
            both([sign(c[0], values(ev, c, r1), "<", 1) for c in (ne[0.1], l2[0.1])]), enough(ev, [ne[0.1], l2[0.1]])),
        "tau_loss.tau1_ne_misses_lloyd": (
            sign(ne[1.0][0], values(ev, ne[1.0], r1), ">", 1),
            both([enough(ev, [ne[1.0], ne[0.1]]), reaches(ev, ne[0.1])])),
        "tau_loss.tau1_l2_improves_but_misses_lloyd": (
            flags_test(l2[1.0][0], improve, f"improve on step 0 but stay above 1 (median final {median(finals):.3f})"),
            both([enough(ev, [l2[1.0], l2[0.1]]), reaches(ev, l2[0.1])])),
        "tau_loss.higher_tau_worse": (
            both([ranks(c[1.0][0], values(ev, c[1.0], r1), "tau=0.1", values(ev, c[0.1], r1), "greater")
                  for c in (ne, l2)]),
            both([enough(ev, four), reaches(ev, ne[0.1]), reaches(ev, l2[0.1])])),
        "tau_loss.higher_tau_faster": (
            both([ranks(c[1.0][0], values(ev, c[1.0], settling), "tau=0.1", values(ev, c[0.1], settling), "less",
                        ".0f") for c in (ne, l2)]),
            both([enough(ev, four), settles(ne[0.1]), settles(l2[0.1])])),
    }


def claims_of_section(key: str, ev: Evidence) -> dict | None:
    """claim id -> ((rule holds, figure), (control holds, figure)) of a section, or None: not recomputed here."""
    pair = re.fullmatch(r"embedding_d(\d+)_k(\d+)(_n512)?", key)
    if pair:
        return embedding_claims(ev, "embedding_n512" if pair.group(3) else "embedding", int(pair.group(1)),
                                int(pair.group(2)))
    if key in ("stability_d32_k25", "stability_d32_k25_n512"):
        return stability_claims(ev, "stability_n512" if key.endswith("n512") else "stability")
    if key in ("d", "k"):
        return grid_claims(ev, key, (4, 8, 16, 32) if key == "d" else (6, 10, 16, 25))
    if key == "lr":
        return lr_claims(ev)
    if key in ("tau_loss", "tau_loss_d32"):
        return tau_claims(ev)
    return None


def outcome(rule: tuple[bool, str], control: tuple[bool, str]) -> str:
    if not control[0]:
        return "undecided at this budget"
    return "reproduced" if rule[0] else "not reproduced"


def printed_verdicts(section: str) -> dict[str, tuple[str, str, str]]:
    """claim id -> (rule figure, control figure, outcome) of a section's verdict table."""
    out = {}
    for line in section.splitlines():
        if not line.startswith("| ") or "(`" not in line:
            continue
        cells = table_cells(line)
        found = re.search(r"\(`([\w.]+)`\)$", cells[0])
        if found and len(cells) == 4 and cells[3].startswith("**"):
            out[found.group(1)] = (cells[1], cells[2], cells[3].strip("*"))
    return out


def verdict_mismatches(key: str, ev: Evidence, printed: dict[str, tuple[str, str, str]]) -> list[str]:
    computed = claims_of_section(key, ev)
    assert computed is not None, key
    problems = [f"claims differ: printed {sorted(printed)}, recomputed {sorted(computed)}"] \
        if set(printed) != set(computed) else []
    for claim in sorted(set(printed) & set(computed)):
        rule, control = computed[claim]
        mine = (rule[1], control[1], outcome(rule, control))
        for what, a, b in zip(("rule figure", "control figure", "outcome"), printed[claim], mine):
            if a != b:
                problems.append(f"{key} {claim} {what}: printed {a!r}, recomputed {b!r}")
    return problems


VERDICT_KEYS = ["embedding_d4_k6", "embedding_d4_k16", "embedding_d32_k6", "embedding_d4_k16_n512",
                "stability_d32_k25", "stability_d32_k25_n512", "d", "k", "lr", "tau_loss", "tau_loss_d32"]


def evidence(key: str) -> Evidence:
    return Evidence(section_rows(key), section_histories(key))


@pytest.mark.parametrize("key", VERDICT_KEYS)
def test_verdicts_recomputed_from_the_rows(key):
    printed = printed_verdicts(SECTIONS[key])
    assert printed, f"no verdict rows in section {key}"
    problems = verdict_mismatches(key, evidence(key), printed)
    assert not problems, "\n".join(problems)


def test_rank_test_with_ties_agrees_with_scipy_where_scipy_is_exact():
    a, b = [0.1, 0.4, 0.5, 0.9, 1.2], [0.3, 0.6, 0.7, 1.5, 2.0]
    exact = stats.mannwhitneyu(a, b, alternative="less", method="exact").pvalue
    perm = stats.permutation_test((a, b), lambda x, y: stats.rankdata(np.r_[x, y])[: len(x)].sum(),
                                  permutation_type="independent", alternative="less", n_resamples=np.inf).pvalue
    assert rank_p(a, b, "less") == pytest.approx(exact)
    assert rank_p(a + [math.inf], b + [math.inf], "less") == pytest.approx(
        stats.permutation_test((a + [9e9], b + [9e9]), lambda x, y: stats.rankdata(np.r_[x, y])[: len(x)].sum(),
                               permutation_type="independent", alternative="less", n_resamples=np.inf).pvalue)
    assert exact == pytest.approx(perm)


def test_verdict_comparison_fails_on_changed_rows_histories_or_text():
    key = "embedding_d4_k6"
    ev, printed = evidence(key), printed_verdicts(SECTIONS[key])
    assert not verdict_mismatches(key, ev, printed)
    rows = copy.deepcopy(ev.rows)  # one one-hot seed above one-step Lloyd: 4/5, p = 0.188, not reproduced
    next(r for r in rows if '"embedding": "onehot"' in r["config"])["relative_objective"] = "1.2"
    problems = verdict_mismatches(key, Evidence(rows, ev.histories), printed)
    assert any("onehot_binary_beat_one_step_lloyd outcome" in p for p in problems), problems
    flipped = dict(printed)
    rule, control, _ = flipped[f"{key.replace('_d4_k6', '.d4k6')}.twenty_step_order"]
    flipped["embedding.d4k6.twenty_step_order"] = (rule, control, "not reproduced")
    assert any("twenty_step_order outcome" in p for p in verdict_mismatches(key, ev, flipped))
    histories = copy.deepcopy(ev.histories)  # a none seed whose curve once reaches 0.99
    none_row = next(r for r in ev.rows if '"embedding": "none"' in r["config"])
    curve = histories[(none_row["name"], 10000)]
    curve[5] = (curve[5][0], 0.99)
    assert any("none_never_matches" in p for p in verdict_mismatches(key, Evidence(ev.rows, histories), printed))
    lr = evidence("lr")  # an lr = 0.01 seed's curve jumps: the stable baseline fails, undecided
    histories = copy.deepcopy(lr.histories)
    base_row = next(r for r in lr.rows if json.loads(r["config"])["lr"] == 0.01)
    curve = histories[(base_row["name"], 10000)]
    curve[-1] = (curve[-1][0], curve[-1][1] * 2)
    problems = verdict_mismatches("lr", Evidence(lr.rows, histories), printed_verdicts(SECTIONS["lr"]))
    assert any("high_lr_unstable outcome" in p for p in problems), problems
    stab = evidence("stability_d32_k25")
    rows = copy.deepcopy(stab.rows)
    next(r for r in rows if '"embedding": "binary"' in r["config"])["status"] = "diverged"
    assert any("binary_stable outcome" in p for p in verdict_mismatches(
        "stability_d32_k25", Evidence(rows, stab.histories), printed_verdicts(SECTIONS["stability_d32_k25"])))
    tau = evidence("tau_loss")  # loss gaps: one L2 tau = 0.25 seed above every NE seed
    rows = copy.deepcopy(tau.rows)
    next(r for r in rows if '"loss": "sparsemax"' in r["config"] and '"tau": 0.25' in r["config"])[
        "loss_gap_mean"] = "99"
    assert any("l2_tighter_than_ne rule figure" in p for p in verdict_mismatches(
        "tau_loss", Evidence(rows, tau.histories), printed_verdicts(SECTIONS["tau_loss"])))


# ----- README's table of the claims decided at both n ---------------------------------------------------------------
def readme_both_n_mismatches(readme: str, outcomes: dict[str, str]) -> list[str]:
    """README's rows "| finding | `claim` | outcome (n = 128) | outcome (n = 512) |" against recomputed outcomes."""
    problems, seen = [], 0
    for line in readme.splitlines():
        cells = table_cells(line) if line.startswith("| ") else []
        if len(cells) != 4 or not re.fullmatch(r"`[\w.]+`", cells[1]) or "(n = 512)" not in cells[3]:
            continue
        seen += 1
        short = cells[1].strip("`")
        at = {"128": ("embedding." + short) if short.startswith("d4k16") else "stability." + short,
              "512": ("embedding_n512." + short) if short.startswith("d4k16") else "stability_n512." + short}
        for cell, n in ((cells[2], "128"), (cells[3], "512")):
            expected = f"{outcomes.get(at[n])} (n = {n})"
            if cell != expected:
                problems.append(f"README {short} at n = {n}: {cell!r}, recomputed {expected!r}")
    return problems if seen else ["README has no table of the claims decided at both n"]


def recomputed_outcomes(keys=VERDICT_KEYS) -> dict[str, str]:
    out = {}
    for key in keys:
        for claim, (rule, control) in claims_of_section(key, evidence(key)).items():
            out[claim if key != "tau_loss_d32" else f"tau_loss_d32:{claim}"] = outcome(rule, control)
    return out


def test_readme_claims_at_both_n_recomputed():
    keys = ["embedding_d4_k16", "embedding_d4_k16_n512", "stability_d32_k25", "stability_d32_k25_n512"]
    outcomes = recomputed_outcomes(keys)
    readme = README.read_text()
    assert not readme_both_n_mismatches(readme, outcomes)
    flipped = dict(outcomes, **{"stability_n512.binary_stable": "not reproduced"})
    assert any("binary_stable at n = 512" in p for p in readme_both_n_mismatches(readme, flipped))


# ----- c. README's headline, the learning table, best_model.json ----------------------------------------------------
def step20(folder: str) -> dict[tuple[str, str, str], dict]:
    return {(r["protocol"], r["setting"], r["init"]): r for r in read_csv(RESULTS / folder / "evaluation.csv")
            if r["step"] == "20"}


def hybrid_test_rows(record: dict) -> dict[str, np.ndarray]:
    """The hybrid study's test values per algorithm, ordered by (seed, task), from its per-task rows."""
    found: dict[str, list] = {}
    for row in read_csv(RESULTS / record["protocol"]["rows"]):
        if row["stage"] == "test":
            found.setdefault(row["algorithm"], []).append((int(row["seed"]), int(row["task"]), float(row["ln_phi"])))
    return {name: np.array([value for _, _, value in sorted(entries)]) for name, entries in found.items()}


def headline_mismatches(record: dict, values: dict[str, np.ndarray], readme: str) -> list[str]:
    """README's headline table and time line against the hybrid study's test rows: mean ± SE, minus k-means++ x1
    and x10 (mean ± SE, median, share won beyond the tie tolerance), median times."""
    test, tie = record["test"], record["protocol"]["tie"]
    block = readme.split("<!-- generated:headline -->")[1].split("<!-- /generated:headline -->")[0]
    printed = {table_cells(line)[0]: table_cells(line)[1:] for line in block.splitlines()
               if line.startswith("| ") and len(table_cells(line)) == 5}
    times = {name: float(np.median(t)) for name, t in test["times"].items()}
    problems = []
    lloyd = [name for name in values if name.startswith("lloyd_")][:1]
    for name in dict.fromkeys([*lloyd, "main_onehot_20", "best_20", test["chosen"], "torch_kmeanspp_lloyd",
                               "sklearn_x1", "sklearn_x10"]):
        f = values[name]
        cells = [f"{f.mean():.3f} ± {stats.sem(f):.3f}"]
        for reference in ("sklearn_x1", "sklearn_x10"):
            d = f - values[reference]
            cells.append(f"{d.mean():+.3f} ± {stats.sem(d):.3f} ({np.median(d):+.3f}; won {np.mean(d < -tie):.0%}, "
                         f"tied {np.mean(np.abs(d) <= tie):.0%})")
        cells.append(f"{times[name]:.2f}")
        label = test["labels"][name]
        if printed.get(label) != cells:
            problems.append(f"headline {label}: printed {printed.get(label)}, recomputed {cells}")
    chosen, x1, x10 = times[test["chosen"]], times["sklearn_x1"], times["sklearn_x10"]
    speed = (f"{chosen:.2f} s, {chosen / x1:.1f} times scikit-learn's k-means++ x1 ({x1:.2f} s) and "
             f"{chosen / x10:.2f} times its x10 ({x10:.2f} s)")
    if speed not in block:
        problems.append(f"speed line lacks {speed!r}")
    return problems


def claim_counts_mismatches(results_sections: dict[str, str], readme: str) -> list[str]:
    verdicts = [v[2] for key, text in results_sections.items() for v in printed_verdicts(text).values()
                if "fewer than the papers' 10,000" not in text]  # the overview counts the papers' budget only
    counts = (f"{len(verdicts)} claims: {verdicts.count('reproduced')} reproduced, "
              f"{verdicts.count('not reproduced')} not reproduced, {verdicts.count('undecided at this budget')} "
              "undecided")
    return [] if counts in readme else [f"README lacks {counts!r}"]


def learning_table_mismatches(evals: dict[str, dict], results_text: str) -> list[str]:
    columns = ("eval-best", "eval-main-onehot", "eval-main-binary", "eval-main-none", "eval-main-equivariant")
    block = results_text.split("<!-- generated:learning -->")[1].split("<!-- /generated:learning -->")[0]
    problems, seen = [], 0
    for line in block.splitlines():
        cells = table_cells(line) if line.startswith("| ") else []
        if len(cells) != 11 or cells[0] == "protocol" or cells[0].startswith("-"):
            continue
        seen += 1
        key = tuple(cells[:3])
        ref = evals["eval-best"][key]
        expected = [*key, f"{float(ref['lloyd']):.3f}", f"{float(ref['kmeanspp_1']):.3f}",
                    f"{float(ref['kmeanspp_10']):.3f}"]
        for folder in columns:
            row = evals[folder][key]
            expected.append(f"{float(row['model']):.3f} ({float(row['model']) - float(row['lloyd']):+.3f})")
        if cells != expected:
            problems.append(f"learning table {key}: printed {cells}, recomputed {expected}")
    return problems if seen else ["no learning table"]


def best_model_mismatches(model: dict) -> list[str]:
    test, problems = model["test"], []
    scores = {name: s["mean"] for name, s in test["scores"].items()}
    for name, diff in test["differences"].items():
        a, b = name.split(" - ")
        if not math.isclose(diff["mean"], scores[a] - scores[b], rel_tol=0, abs_tol=1e-12):
            problems.append(f"difference {name}: {diff['mean']}, recomputed {scores[a] - scores[b]}")
    shipped = test["shipped"]
    for init, diff in test["shipped_minus_main_onehot"].items():
        expected = scores[shipped] - scores[f"main-onehot {init}"]
        if not math.isclose(diff["mean"], expected, abs_tol=1e-12):
            problems.append(f"shipped - main-onehot {init}: {diff['mean']}, recomputed {expected}")
    times = {name: float(np.median(t)) for name, t in test["times"]["model_20_steps_s"].items()}
    sklearn = float(np.median(test["times"]["sklearn_kmeanspp_10_s"]))
    spread = test["slot_specific_spread"]
    chosen = test["chosen"]
    measured = {
        "shuffle_minus_fixed_main_onehot": scores["main-onehot shuffle"] - scores["main-onehot fixed"],
        "delta_shuffle": scores["shuffle"] - scores["main-onehot shuffle"],
        "delta_unroll3": scores["unroll3"] - scores["main-onehot shuffle"],
        "delta_rollout": scores["rollout"] - scores["main-onehot shuffle"],
        "chosen_minus_kmeanspp10": scores[chosen] - scores["kmeanspp_10"],
        "chosen_minus_kmeanspp1": scores[chosen] - scores["kmeanspp_1"],
        "time_ratio": times[chosen] / sklearn,
        "spread_ratio": spread["main-onehot"] / spread[chosen],
        "local_minus_full_shuffle": scores["local-shuffle"] - scores["shuffle"],
        "local_minus_full_unroll3": scores["local-unroll3"] - scores["unroll3"],
        "local_minus_full_rollout": scores["local-rollout"] - scores["rollout"],
        "local_time_ratio": times["local-shuffle"] / sklearn,
        "long_minus_local_rollout": scores["local-rollout-long"] - scores["local-rollout"],
        "scratch_minus_local_rollout": scores["local-rollout-scratch"] - scores["local-rollout"],
        "shipped_minus_kmeanspp10": scores[shipped] - scores["kmeanspp_10"],
    }
    verdicts = {name: v for group in test["verdicts"].values() for name, v in group.items()}
    for name, value in measured.items():
        v = verdicts[name]
        if not math.isclose(v["measured"], value, rel_tol=1e-9, abs_tol=1e-12):
            problems.append(f"verdict {name}: measured {v['measured']}, recomputed {value}")
        if v["verdict"] in ("confirmed", "refuted"):
            low, high = v["predicted"] - v["tolerance"], v["predicted"] + v["tolerance"]
            holds = {"within": low <= value <= high, "at_most": value <= high, "at_least": value >= low}[v["kind"]]
            if v["verdict"] != ("confirmed" if holds else "refuted"):
                problems.append(f"verdict {name}: {v['verdict']}, recomputed {'confirmed' if holds else 'refuted'}")
    goals = {"below_kmeanspp_1": scores[shipped] < scores["kmeanspp_1"],
             "within_0.01_of_kmeanspp_10": scores[shipped] - scores["kmeanspp_10"] <= 0.01,
             "faster_than_kmeanspp_10": times[shipped] < sklearn}
    problems += [f"goal {name}: {test['goals'][name]}, recomputed {value}" for name, value in goals.items()
                 if test["goals"][name] != value]
    if test["differences"]["kmeanspp_10 - kmeanspp_10"]["se"] != 0:
        problems.append("the se of a difference with itself is not 0")
    return problems


def load_evals() -> dict[str, dict]:
    return {p.name: step20(p.name) for p in sorted(RESULTS.glob("eval-*")) if (p / "evaluation.csv").exists()}


def test_readme_headline_and_best_model_recomputed():
    evals, model = load_evals(), json.loads((RESULTS / "best_model.json").read_text())
    readme, results_text = README.read_text(), RESULTS_MD.read_text()
    hybrid = json.loads((RESULTS / "hybrid.json").read_text())
    problems = headline_mismatches(hybrid, hybrid_test_rows(hybrid), readme)
    problems += learning_table_mismatches(evals, results_text)
    problems += best_model_mismatches(model)
    problems += claim_counts_mismatches(SECTIONS, readme)
    assert not problems, "\n".join(problems)


def test_headline_comparisons_fail_on_changed_values():
    evals, model = load_evals(), json.loads((RESULTS / "best_model.json").read_text())
    readme, results_text = README.read_text(), RESULTS_MD.read_text()
    changed = copy.deepcopy(evals)
    row = changed["eval-best"][("main", "in-distribution", "random")]
    row["kmeanspp_10"] = str(float(row["kmeanspp_10"]) + 0.002)
    assert learning_table_mismatches(changed, results_text)
    hybrid = json.loads((RESULTS / "hybrid.json").read_text())
    values = hybrid_test_rows(hybrid)
    shifted = {**values, "sklearn_x10": values["sklearn_x10"] + 0.002}
    assert any("10 starts" in p for p in headline_mismatches(hybrid, shifted, readme))
    times = copy.deepcopy(hybrid)
    times["test"]["times"]["sklearn_x10"] = [t * 1.3 for t in times["test"]["times"]["sklearn_x10"]]
    assert any("speed line" in p for p in headline_mismatches(times, values, readme))
    scores = copy.deepcopy(model)
    scores["test"]["scores"]["rollout"]["mean"] += 0.03
    problems = best_model_mismatches(scores)
    assert any("rollout - kmeanspp_10" in p for p in problems) and any("verdict delta_rollout" in p for p in problems)
    flipped = copy.deepcopy(model)
    flipped["test"]["verdicts"]["designs"]["time_ratio"]["verdict"] = "refuted"
    assert any("time_ratio: refuted" in p for p in best_model_mismatches(flipped))
    one_less = {k: v for k, v in SECTIONS.items() if k != "lr"}
    assert claim_counts_mismatches(one_less, readme)


# ----- d. learned_vs_lloyd.json in docs/learned_model.md ------------------------------------------------------------
def g3(value: float) -> str:
    return "∞" if value == math.inf else f"{value:.3g}"


def learned_mismatches(data: dict, doc: str) -> list[str]:
    models, problems, seen = data["models"], [], 0
    margin = data["settings"]["margin"]
    cases = list(next(iter(models.values()))["hostile"])
    for line in doc.splitlines():
        cells = table_cells(line) if line.startswith("| ") else []
        if len(cells) != len(cases) + 1 or cells[0] not in models:
            continue
        seen += 1
        expected = [cells[0]]
        for case in cases:
            ratios = [float(r) for r in models[cells[0]]["hostile"][case]["ratios"]]  # "inf" as text
            share = sum(r > margin for r in ratios) / len(ratios)
            expected.append(f"{g3(float(np.median(ratios)))} ({g3(min(ratios))}), {share:.0%}")
        if cells != expected:
            problems.append(f"hostile table {cells[0]}: printed {cells}, recomputed {expected}")
    every = [float(r) > margin for m in models.values() for c in cases for r in m["hostile"][c]["ratios"]]
    without = [float(r) > margin for m in models.values() for c in cases if c != "digits_pca32"
               for r in m["hostile"][c]["ratios"]]
    per_case = ", ".join(
        f"{c} {np.mean([float(r) > margin for m in models.values() for r in m['hostile'][c]['ratios']]):.0%}"
        for c in cases)
    quoted = (f"{np.mean(every):.1%} of the hostile fits ({per_case}), {np.mean(without):.1%} without digits_pca32")
    if quoted not in doc:
        problems.append(f"docs/learned_model.md lacks {quoted!r}")
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("| model | min | median | 90 % |")), None)
    main_rows = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start + 2:])) if start else []
    if sorted(table_cells(line)[0] for line in main_rows) != sorted(models):
        problems.append(f"main table rows {[table_cells(line)[0] for line in main_rows]}, models {sorted(models)}")
    for line in main_rows:
        cells = table_cells(line)
        if cells[0] not in models:
            continue
        main = models[cells[0]]["main"]
        q, share = main["quantiles"], main["share_above"]
        expected = [cells[0], *(f"{q[x]:.3f}" for x in ("0", "0.5", "0.9", "0.99", "1")),
                    *(f"{share[x]:.1%}" for x in ("1.2", "1.5", "2")),
                    f"{main['check_ms_median']:.1f} ms, {main['overhead_median']:.0%} of the fit"]
        if cells != expected:
            problems.append(f"main table {cells[0]}: printed {cells}, the committed summaries {expected}")
    return problems if seen == len(models) else problems + [f"hostile table rows {seen} of {len(models)}"]


def test_learned_vs_lloyd_tables_recomputed():
    data = json.loads((RESULTS / "learned_vs_lloyd.json").read_text())
    problems = learned_mismatches(data, (ROOT / "docs" / "learned_model.md").read_text())
    assert not problems, "\n".join(problems)


def test_learned_vs_lloyd_comparison_fails_on_a_changed_ratio():
    data = json.loads((RESULTS / "learned_vs_lloyd.json").read_text())
    doc = (ROOT / "docs" / "learned_model.md").read_text()
    changed = copy.deepcopy(data)
    changed["models"]["best"]["hostile"]["iris"]["ratios"][0] = 2.5  # above the margin: 90% warned, not 80%
    problems = learned_mismatches(changed, doc)
    assert any("hostile table best" in p for p in problems) and any("hostile fits" in p for p in problems)
    smallest = copy.deepcopy(data)
    smallest["models"]["main-binary"]["hostile"]["wine"]["ratios"] = [
        float(r) * 0.9 if float(r) == min(map(float, smallest["models"]["main-binary"]["hostile"]["wine"]["ratios"]))
        else float(r) for r in smallest["models"]["main-binary"]["hostile"]["wine"]["ratios"]]
    assert any("hostile table main-binary" in p for p in learned_mismatches(smallest, doc))
    quantile = copy.deepcopy(data)
    quantile["models"]["main-none"]["main"]["quantiles"]["0.9"] += 0.01
    assert any("main table main-none" in p for p in learned_mismatches(quantile, doc))
