"""The quoted numbers of README.md and of the overview of analyses/RESULTS.md, generated from committed files
between ``<!-- generated:NAME -->`` markers.

Blocks (name: source; README.md holds ``headline``, analyses/RESULTS.md's "Overview" the others):

* ``headline``: analyses/results/hybrid.json (``python -m analyses run hybrid``): the test table of the hybrid study
  (Lloyd, main-onehot, the learned default without and with its Lloyd steps, k-means++ in torch and scikit-learn's
  k-means++ with 1 and 10 starts, from random starts: mean ± SE, the paired differences to k-means++ x1 and x10 and
  the shares of tasks won, times at one thread) and the learned default's time against k-means++ x1 and x10;
* ``learning``: analyses/results/eval-*/summary.csv (``interp evaluate``): mean log objective after the last step of
  each protocol, setting and initialisation, per checkpoint vs Lloyd, with the scikit-learn columns;
* ``instruments``: analyses/results/instruments.json (``python -m analyses.studies.instruments.measure``): probes,
  weights vs the construction, ablations and patching of main-onehot beside the exact construction's, and its surrogate
  fits;
* ``explain``: analyses/results/explain.json and failures.json (``python -m analyses.studies.explain.measure``,
  ``analyses.studies.failures.measure``): the slot-symmetric share of the learned update, the distilled algorithm, and
  the slot-equivariant model;
* ``studies``: the verdict tables of the study sections of analyses/RESULTS.md (each computed from its
  committed CSV/JSON by the study script; ``tests/test_results_files.py`` checks them): one row per claim;
* ``speed``: analyses/results/bench/*.json (headline cells of the benchmarks' printed tables, as printed).

Each block starts with an HTML comment (invisible on the rendered page) naming its source files.

Only the text between a block's two markers is replaced; the rest of each document is left as it is. A missing
marker is an error naming it. ``--check`` changes nothing and exits 1 when a document differs from what the
committed files give.

Run: python -m analyses.readme [--check] [--readme README.md] [--results-md analyses/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from analyses._shared import final_rows
from analyses.claims import OUTCOMES
from analyses.framework.formatting import fixed
from analyses.studies.dependence.measure import entry
from interp import _arguments as arguments
from interp._checks import InvalidInput, check_output_file
from interp._io import write_text_atomically

PROG = "python -m analyses.readme"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
README = ROOT / "README.md"
RESULTS_MD = HERE / "RESULTS.md"
DEPENDENCE = RESULTS / "studies" / "dependence.json"
BLOCKS = ("headline", "learning", "instruments", "explain", "studies", "speed")
# where each block lives: the headline in README.md, the overview tables at the top of analyses/RESULTS.md
IN_README = ("headline",)
CHECKPOINTS = ("main-onehot", "main-binary", "main-none")  # the papers' three embeddings (explain.json has these)
EVALUATED = ("best", *CHECKPOINTS, "main-equivariant")  # every shipped checkpoint under the evaluation protocol
CHECKPOINT_NAMES = {"best": "best", "main-onehot": "one-hot", "main-binary": "binary", "main-none": "none",
                    "main-equivariant": "slot-equivariant"}


class MarkerError(ValueError):
    """README.md lacks a generated block's begin or end marker, or has them out of order or twice."""


def _source(files: str, command: str) -> str:
    """An HTML comment (invisible on the rendered page) naming a block's source files and their command."""
    return f"<!-- from {files} (written by {command}); regenerate: python -m analyses render -->"


# ----- headline ------------------------------------------------------------------------------------------------


def headline_block(results: Path = RESULTS) -> str:
    """The README's one table: the hybrid study's test (analyses/results/hybrid.json): mean ln Phi ± SE from random
    starts, the paired difference to scikit-learn's k-means++ x1 and x10 (mean ± SE, median, share of tasks won) and
    the time at one thread, for Lloyd, the papers' main-onehot, the learned default without and with its Lloyd steps,
    k-means++ in torch and scikit-learn's; then the learned default's time against k-means++ x1 and x10, the claims'
    verdict counts and the claims decided at both n (``both_n_lines``)."""
    study = json.loads((results / "hybrid.json").read_text())
    test = study["test"]
    rows = {row["name"]: row for row in test["summary"]}
    chosen, tasks = test["chosen"], test["tasks_per_seed"] * len(test["seeds"])
    lloyd = [name for name in rows if name.startswith("lloyd_")][:1]
    order = [*lloyd, "main_onehot_20", "best_20", chosen, "torch_kmeanspp_lloyd", "sklearn_x1", "sklearn_x10"]

    def versus(row: dict, reference: str) -> str:
        return (f"{row[f'minus_{reference}']:+.3f} ± {row[f'minus_{reference}_se']:.3f} "
                f"({row[f'minus_{reference}_median']:+.3f}; won {row[f'won_vs_{reference}']:.0%}, tied "
                f"{row[f'tied_with_{reference}']:.0%})")

    lines = [_source("analyses/results/hybrid.json; the verdicts of analyses/RESULTS.md with studies/dependence.json",
                     "python -m analyses run hybrid; analyses.dependence"),
             f"| algorithm (random starts; {tasks} unseen tasks, n = 512, d = 32, k = 10; one thread) | mean ln Φ ± SE "
             "(lower is better) | minus k-means++ x1: mean ± SE (median; share of tasks won, tied) | minus k-means++ "
             "x10: mean ± SE (median; share of tasks won, tied) | time (s) |",
             "|---|---|---|---|---|"]
    for name in dict.fromkeys(order):
        row = rows[name]
        lines.append(f"| {test['labels'][name]} | {row['mean']:.3f} ± {row['se']:.3f} | {versus(row, 'sklearn_x1')} | "
                     f"{versus(row, 'sklearn_x10')} | {row['time_s']:.2f} |")
    hybrid, x1, x10 = rows[chosen], rows["sklearn_x1"], rows["sklearn_x10"]
    steps, lloyd_steps = study["validation"]["choice"]["steps"], study["validation"]["choice"]["lloyd_steps"]
    goals = study["goals"]
    speed = (f"Time (one thread, all {tasks} test tasks, median of {test['rounds']} rounds): best's {steps} steps "
             f"and {lloyd_steps} Lloyd step{'s' if lloyd_steps != 1 else ''} {hybrid['time_s']:.2f} s, "
             f"{hybrid['time_s'] / x1['time_s']:.1f} times scikit-learn's k-means++ x1 ({x1['time_s']:.2f} s) and "
             f"{hybrid['time_s'] / x10['time_s']:.2f} times its x10 ({x10['time_s']:.2f} s). Goals: best's 20 steps "
             "below k-means++ x1 in mean and on most tasks "
             f"{'met' if goals['best20_below_x1']['met'] else 'missed'}; with its Lloyd steps within 0.01 of "
             f"k-means++ x10 {'met' if goals['chosen_within_001_of_x10']['met'] else 'missed'} (analyses/RESULTS.md, "
             "\"Hybrid inference\").")
    every, independent = claim_counts()
    both = both_n_lines()
    return ("\n".join(lines) + f"\n\n{speed}\n\nPaper 2's findings, each decided by a rule committed before its runs "
            "(one rule, `n.no_effect`'s, was replaced after its first verdict: docs/claims.md; the cell d = 8, k = 8 "
            "takes the embedding cells' rules, committed while its runs trained), at the papers' 10,000 "
            f"steps: {counts_text(every)}; over independent evidence only (no training run that its "
            f"rule or control reads is read by another study's claim): {counts_text(independent)} "
            "(analyses/RESULTS.md, \"Overview\")."
            + ("" if not both else " The claims registered both at the studies' n and at the papers' n = 512 (same "
               "rules, each decided at each n or undecided where its control fails):\n\n" + "\n".join(both)))


PAPER_N_SUFFIX = "_n512"  # a study at the papers' n: the claims of study X decided again as X_n512.<same claim>


def both_n_lines(results_md: Path = RESULTS_MD) -> list[str]:
    """A table of the registered claims at both n: the finding and its verdict at the studies' n and at n = 512
    (each cell names its n, read from the section's budget line), from the verdict tables of RESULTS.md (claim ids
    ``<study>.<claim>`` and ``<study>_n512.<claim>``); no lines when no claim has both."""
    verdicts = {}
    for _, budget, claim, _, verdict in paper_budget_rows(results_md)[0]:
        claim_id, n = _claim_id(claim), re.search(r"\bn=(\d+)", budget)
        if claim_id is not None:
            verdicts[claim_id] = (re.sub(r" \(`[\w.]+`\)$", "", claim), f"{verdict} (n = {n.group(1) if n else '?'})")
    rows = []
    for claim_id, (finding, at_paper_n) in verdicts.items():
        study, _, rest = claim_id.partition(".")
        twin = f"{study.removesuffix(PAPER_N_SUFFIX)}.{rest}"
        if study.endswith(PAPER_N_SUFFIX) and twin in verdicts:
            rows.append(f"| {finding} | `{rest}` | {verdicts[twin][1]} | {at_paper_n} |")
    if not rows:
        return []
    return ["| finding (paper 2) | claim | at the studies' n | at the papers' n |", "|---|---|---|---|", *rows]


# ----- learning ------------------------------------------------------------------------------------------------


def learning_block(results: Path = RESULTS) -> str:
    """Mean log objective after the last evaluation step, per (protocol, setting, init): Lloyd, then each shipped
    checkpoint with its difference to Lloyd (the same tasks and initial centroids for all). The family protocol's
    "normal" setting is left out: it is the main protocol's in-distribution, random-init row."""
    final = {name: final_rows(results / f"eval-{name}" / "summary.csv") for name in EVALUATED}
    keys = [key for key in final[EVALUATED[0]] if key[:2] != ("family", "normal")]
    lines = [_source("analyses/results/eval-*/summary.csv", "interp evaluate --checkpoint X --out "
                     "analyses/results/eval-X --protocols main length shift family"),
             "| protocol | setting | init | Lloyd | km++ x1 | km++ x10 | "
             + " | ".join(f"{CHECKPOINT_NAMES[c]} (diff)" for c in EVALUATED) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(EVALUATED)]
    for key in keys:
        lloyd = [float(final[name][key]["lloyd_median"]) for name in EVALUATED]
        if max(lloyd) - min(lloyd) > 1e-6:  # other tasks differ by far more; float32 rounding of code versions, less
            raise ValueError(f"Lloyd differs between the evaluations at {key}: {lloyd} (not the same tasks?)")
        cells = []
        for name in EVALUATED:
            model = float(final[name][key]["model_median"])
            cells.append(f"{model:.3f} ({model - lloyd[0]:+.3f})")
        baselines = final["best"][key]  # scikit-learn's KMeans on the same tasks (written with best's evaluation)
        lines.append(f"| {' | '.join(key)} | {lloyd[0]:.3f} | {float(baselines['kmeanspp_1']):.3f} | "
                     f"{float(baselines['kmeanspp_10']):.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + _learning_reading(final)


def _learning_reading(final: dict) -> str:
    """The table in words, every figure looked up in it: random starts, Gonzalez starts, Cauchy tasks, and the
    slot-equivariant model beside main-onehot."""
    def diff(name: str, key: tuple[str, str, str]) -> str:
        row = final[name][key]
        return fixed(float(row["model_median"]) - float(row["lloyd_median"]), 3, True, minus="−")

    def model(name: str, key: tuple[str, str, str]) -> str:
        return fixed(float(final[name][key]["model_median"]), 3)

    random, gonzalez = ("main", "in-distribution", "random"), ("main", "in-distribution", "gonzalez")
    cauchy = ("family", "cauchy", "random")
    lloyd = fixed(float(final["main-onehot"][random]["lloyd_median"]), 3)
    none_side = "above" if float(final["main-none"][random]["model_median"]) > float(lloyd) else "below"
    best = final["best"][random]
    return (f"`best`, the learned default (main-onehot fine-tuned for 20 steps in shuffled slot orders; "
            f"analyses/RESULTS.md, \"A learned default\"), ends at {model('best', random)} with random starts, "
            f"where scikit-learn's KMeans with k-means++ starts run to convergence reaches "
            f"{fixed(float(best['kmeanspp_1']), 3)} from one start and {fixed(float(best['kmeanspp_10']), 3)} "
            "from ten. "
            f"With random starts the learned one-hot and binary models end at {model('main-onehot', random)} and "
            f"{model('main-binary', random)} against Lloyd's {lloyd} (the papers' headline: learned below Lloyd), "
            f"and the d-only model at {model('main-none', random)}, {none_side} it. From Gonzalez (farthest-first) "
            f"starts, which the papers do not report, one-hot and binary end {diff('main-onehot', gonzalez)} and "
            f"{diff('main-binary', gonzalez)} from Lloyd; on Cauchy tasks {diff('main-onehot', cauchy)} and "
            f"{diff('main-binary', cauchy)}. The slot-equivariant model (one-hot with slot-tied weights, "
            "`ModelConfig.slot_equivariant`, trained like main-onehot from the same seed) is exactly equivariant; "
            f"with random starts it ends {diff('main-equivariant', random)} from Lloyd against main-onehot's "
            f"{diff('main-onehot', random)}, from Gonzalez starts {diff('main-equivariant', gonzalez)} and on Cauchy "
            f"tasks {diff('main-equivariant', cauchy)}. It is shipped so that this can be inspected, not as an "
            "improvement. " + _generalisation_verdicts())


def _generalisation_verdicts(results_md: Path = RESULTS_MD) -> str:
    """The registered verdicts on length and shift generalisation over the one-hot seeds (the ``generalisation``
    section of RESULTS.md), which the one-checkpoint table above cannot decide."""
    section = study_sections(results_md.read_text()).get("generalisation")
    rows = [] if section is None else verdict_rows(section)
    if not rows:
        return ("Whether length and shift generalisation hold by a registered rule is not decided: the table gives the "
                "figures of one checkpoint per model.")
    checkpoints = re.search(r"^Budget: .*; checkpoints (.+?)\s*$", section, re.M)
    if checkpoints is None:
        raise ValueError("the generalisation section's budget line names no checkpoints")
    verdicts = "; ".join(f"`{_claim_id(claim)}` {verdict}" for claim, _, verdict in rows)
    return (f"The table gives one checkpoint per model; over {len(checkpoints.group(1).split(', '))} one-hot seeds the "
            f"registered rules decide length and shift generalisation (analyses/RESULTS.md, study `generalisation`): "
            f"{verdicts}.")


# ----- instruments ---------------------------------------------------------------------------------------------


def instruments_block(path: Path = RESULTS / "instruments.json", model: str = "main-onehot",
                      construction: str = "construction-onehot") -> str:
    """The headline instrument figures of ``model`` beside the exact construction's, and its surrogate table,
    from ``python -m analyses.studies.instruments.measure``' JSON (unicode minus signs, as in the surrounding text)."""
    data = json.loads(path.read_text())
    per = data["checkpoints"]

    def num(value, digits=3, sign=False):
        return fixed(value, digits, sign, minus="−")

    def probe(name: str, hook: str, target: str, key: str = "value") -> float:
        return next(r for r in per[name]["probes"] if r["hook"] == f"blocks.0.{hook}" and r["target"] == target)[key]

    def cosine(name: str, attention: str, matrix: str) -> float:
        return next(r for r in per[name]["weights"] if r["attention"] == attention and r["matrix"] == matrix)["cosine"]

    def ablation(name: str, attention: str, kind: str) -> float:
        rows = per[name]["ablations"]
        return next(r for r in rows if r["attention"] == attention and r["ablation"] == kind)["change"]

    def restored(name: str, kind: str) -> str:
        value = next(r for r in per[name]["patching"] if r["kind"] == kind)["restored"]
        return "n/a" if value is None else f"{num(100 * value, 0)}%"

    def both(cell) -> str:
        return f"{cell(model)} | {cell(construction)}"

    order = ("attn_xc", "attn_cc", "attn_cx", "attn_xx")
    intact = next(r for r in per[model]["ablations"] if r["ablation"] == "intact")["log_objective"]
    lines = [_source("analyses/results/instruments.json", data["command"]),
             f"| instrument | measure | {model} | exact construction |", "|---|---|---|---|",
             "| probe: assignment from attn_xc's output / point stream / input embedding | held-out accuracy "
             "(chance 0.1) | " + both(lambda m: " / ".join(num(v) for v in (
                 probe(m, "attn_xc.hook_out", "assignment"), probe(m, "hook_points_resid_post", "assignment"),
                 probe(m, "hook_points_resid_post", "assignment", "baseline")))) + " |",
             "| probe: Lloyd's update from the centroid stream after / before the layer | held-out R² | "
             + both(lambda m: " / ".join(num(v) for v in (
                 probe(m, "hook_centroids_resid_post", "centroid"),
                 probe(m, "hook_centroids_resid_post", "centroid", "baseline")))) + " |",
             "| weights: QᵀK of attn_xc / attn_xx / attn_cc | cosine with the construction | " + both(
                 lambda m: " / ".join(num(cosine(m, a, "QK"), 2) for a in ("attn_xc", "attn_xx", "attn_cc"))) + " |",
             "| weights: OV of attn_cx / attn_cc / attn_xc | cosine with the construction | " + both(
                 lambda m: " / ".join(num(cosine(m, a, "OV"), 2) for a in ("attn_cx", "attn_cc", "attn_xc"))) + " |",
             f"| ablation (one step, intact {num(intact, 2)}): zero {' / '.join(order)} | mean log objective change | "
             + both(lambda m: " / ".join(num(ablation(m, a, "zero"), 2, True) for a in order)) + " |",
             "| ablation: mean-ablate attn_xx | mean log objective change | "
             + both(lambda m: num(ablation(m, "attn_xx", "mean"), 2, True)) + " |",
             "| patching into a collapsed start: centroid stream / attn_cx out / attn_xc out / scratch slots | gap "
             "restored | " + both(lambda m: " / ".join(restored(m, k) for k in ("centroids", "attn_cx", "attn_xc",
                                                                              "assignments"))) + " |",
             "", "| surrogate of the one-step update | fitted | R² update | R² centroids | 20 steps as an algorithm |",
             "|---|---|---|---|---|"]
    names = {"lloyd": "Lloyd (hard cluster mean)", "relaxed": "relaxed Lloyd c + λ(m − c)",
             "soft": "soft k-means, one temperature", "full": "a·hard + b·soft(T) + g·old + e·global"}
    for fit in per[model]["surrogates"]:
        coefficients = fit["coefficients"]
        fitted = {"lloyd": "—", "relaxed": f"λ = {num(coefficients.get('lam'), 2)}",
                  "soft": f"T = {num(fit['temperature'], 2)}",
                  "full": ", ".join(f"{symbol} = {num(coefficients.get(key))}" for symbol, key in
                                    (("a", "hard"), ("b", "soft"), ("g", "old"), ("e", "global")))}[fit["name"]]
        lines.append(f"| {names[fit['name']]} | {fitted} | {num(fit['r2_update'])} | {num(fit['r2_centroids'])} | "
                     f"{num(fit['log_objective_after_steps'])} |")
    references = per[model]["surrogate_references"]
    lines.append(f"| the learned model itself | | | | {num(references['learned model'])} "
                 f"(Lloyd {num(references['Lloyd'])}) |")
    soft = next(fit for fit in per[model]["surrogates"] if fit["name"] == "soft")
    best = max(per[model]["surrogates"], key=lambda fit: fit["r2_update"])
    lines += ["", f"For {model}, the best of these surrogates explains R² {num(best['r2_update'])} of the one-step "
              f"update ({names[best['name']]}); soft k-means at one temperature (T = {num(soft['temperature'], 2)}) "
              f"explains {num(soft['r2_update'])} and, iterated on its own, reaches "
              f"{num(soft['log_objective_after_steps'])} after 20 steps against the model's "
              f"{num(references['learned model'])} and Lloyd's {num(references['Lloyd'])}. A linear probe recovers "
              "Lloyd's update from the centroid stream with held-out R² "
              f"{num(probe(model, 'hook_centroids_resid_post', 'centroid'))} after the layer against "
              f"{num(probe(model, 'hook_centroids_resid_post', 'centroid', 'baseline'))} before it"
              + (": the layer leaves less of Lloyd's update linearly readable than its input held" if
                 probe(model, "hook_centroids_resid_post", "centroid")
                 < probe(model, "hook_centroids_resid_post", "centroid", "baseline") else "")
              + "; mean-ablating attn_xx costs "
              f"{num(ablation(model, 'attn_xx', 'mean'), 2, True)} (the construction's attn_xx is the identity: "
              f"{num(ablation(construction, 'attn_xx', 'mean'), 2, True)})."]
    return "\n".join(lines)


# ----- studies ---------------------------------------------------------------------------------------------------


def study_sections(text: str) -> dict[str, str]:
    """{name: section text} of every ``<!-- study:NAME -->`` section of RESULTS.md, in order."""
    return {m.group(1): m.group(2) for m in re.finditer(r"<!-- study:(\w+) -->\n(.*?)<!-- /study:\1 -->", text, re.S)}


def verdict_rows(section: str) -> list[tuple[str, str, str]]:
    """(paper's finding, deciding figure, verdict) of a section's verdict table, as ``analyses.claims.verdict_lines``
    writes it (the rule's figure, or the control's when it leaves the claim undecided)."""
    rows = []
    for line in section.splitlines():
        match = re.fullmatch(r"\| (.+) \| (.+) \| (.+) \| \*\*(reproduced|not reproduced|undecided at this budget)\*\* "
                             r"\|", line)
        if match:
            claim, rule, control, outcome = match.groups()
            rows.append((claim, f"control: {control}" if outcome == "undecided at this budget" else rule, outcome))
    return rows


def at_paper_budget(section: str) -> bool:
    """Whether a study section's command trained at the papers' budget (10,000 steps): the runner's ``--budget
    paper`` (analyses/framework/budgets.py), or an older command's ``--steps``."""
    runner = re.search(r"^Command: `python -m analyses run \w+ --budget (\w+)", section, re.M)
    if runner:  # a grid study's Budget line, or the Rows line of a study of other studies' rows, names its steps
        trained = re.search(r"^(?:Budget: .*steps=|Rows: .* at )(\d+)", section, re.M)
        return runner.group(1) == "paper" and bool(trained) and int(trained.group(1)) >= 10_000
    match = re.search(r"^Command: `[^`]*--steps[ =](\d+)", section, re.M)
    return bool(match) and int(match.group(1)) >= 10_000


def _budget(section: str) -> str:
    match = re.search(r"^Budget: ([^;\n]*)", section, re.M)
    return f": {match.group(1).strip()}" if match else ""


# sections whose command scores 10,000-step models without training them (no --steps of training in the command)
SCORED_AT_PAPER_BUDGET = ("multistep", "multistep_seeds", "generalisation", "inference_embedding")


def _claim_id(claim: str) -> str | None:
    match = re.search(r"\(`([\w.]+)`\)$", claim)
    return match.group(1) if match else None


def paper_budget_rows(results_md: Path = RESULTS_MD) -> tuple[list[tuple[str, str, str, str, str]], list[str]]:
    """(section, budget, claim, deciding figure, verdict) of every claim of the study sections at the papers' budget,
    and the names of the sections at shorter budgets."""
    rows, shorter = [], []
    for name, section in study_sections(results_md.read_text()).items():
        verdicts = verdict_rows(section)
        if not verdicts:
            continue
        if not at_paper_budget(section) and name not in SCORED_AT_PAPER_BUDGET:
            shorter.append(name)
            continue
        rows += [(name, _budget(section), claim, measured, verdict) for claim, measured, verdict in verdicts]
    return rows, shorter


def claim_counts(results_md: Path = RESULTS_MD, dependence: Path = DEPENDENCE) -> tuple[dict, dict]:
    """Verdict counts of the registered claims at the papers' budget: over all of them, and over those whose runs no
    other study's claim reads (``dependence``, written by ``python -m analyses run dependence``); the second also
    counts, under "no training run", the independent claims that read none (a benchmark's claims have no dependence
    entry)."""
    claims = json.loads(dependence.read_text())["claims"]
    every = {outcome: 0 for outcome in OUTCOMES}
    independent = {**every, "no training run": 0}
    for name, _, claim, _, verdict in paper_budget_rows(results_md)[0]:
        claim_id = _claim_id(claim)
        if claim_id is None:
            continue  # a finding scored without a registered rule (its section says so)
        every[verdict] += 1
        dependence_entry = entry(claims, name, claim_id)
        if not dependence_entry.get("shares_runs_with"):
            independent[verdict] += 1
            independent["no training run"] += not dependence_entry
    return every, independent


def counts_text(counts: dict) -> str:
    total = sum(counts[outcome] for outcome in OUTCOMES)
    benchmark = (f" ({counts['no training run']} of them read no training run, only a benchmark)"
                 if counts.get("no training run") else "")
    return (f"{total} claims: {counts['reproduced']} reproduced, {counts['not reproduced']} not reproduced, "
            f"{counts['undecided at this budget']} undecided{benchmark}")


def studies_block(results_md: Path = RESULTS_MD, dependence: Path = DEPENDENCE) -> str:
    """One row per claim of the study sections of RESULTS.md at the papers' budget (and the sections that score
    10,000-step models): the paper's finding, the study, the verdict of its committed rule, the figure that decides
    it, and the other studies whose claims read one of its training runs; then the verdict counts over every
    registered claim and over independent evidence only. Sections at shorter budgets are named in one line."""
    claims = json.loads(dependence.read_text())["claims"]
    lines = [_source("the verdict tables of analyses/RESULTS.md and analyses/results/studies/dependence.json",
                     "python -m analyses run <study>, run dependence; checked against the "
                     "committed CSV/JSON by tests/test_results_files.py; rules in docs/claims.md"),
             "| claim | study (budget) | verdict | deciding figure | shares runs with |", "|---|---|---|---|---|"]
    rows, shorter = paper_budget_rows(results_md)
    for name, budget, claim, measured, verdict in rows:
        others = entry(claims, name, _claim_id(claim) or "").get("shares_runs_with", [])
        shared = ", ".join(f"`{study}`" for study in dict.fromkeys(claims[other]["study"] for other in others)) or "-"
        lines.append(f"| {claim} | `{name}`{budget} | {verdict} | {measured} | {shared} |")
    every, independent = claim_counts(results_md, dependence)
    lines += ["", f"Registered claims at the papers' budget: {counts_text(every)}. Over independent evidence only "
              "(claims none of whose training runs, read by the rule or by the control, another study's claim reads; "
              "a run shared by several tables is one seeded training, `python -m analyses.dependence`): "
              f"{counts_text(independent)}."]
    if shorter:
        lines += ["", f"At shorter budgets (sections kept in RESULTS.md, each claim undecided by its control or "
                      f"decided there): {', '.join(f'`{name}`' for name in shorter)}."]
    return "\n".join(lines)


# ----- speed -----------------------------------------------------------------------------------------------------


def _bench(folder: Path, name: str) -> tuple[dict, list[dict]]:
    data = json.loads((folder / f"{name}.json").read_text())
    return data, [dict(zip(data["header"], row)) for row in data["rows"]]


def _threads(count: str) -> str:
    """"1 thread" / "2 threads" from a table's threads cell."""
    return f"{count} thread{'s' if count != '1' else ''}"


def _by_threads(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """threads ("1", "2") -> competitor -> row of a benchmark table timed at both thread counts."""
    return {threads: {row["competitor"]: row for row in rows if row["threads"] == threads} for threads in ("1", "2")}


def speed_block(folder: Path = RESULTS / "bench") -> str:
    """Headline rows of the benchmarks' stored tables (cells as the benchmarks printed them)."""
    _, lloyd = _bench(folder, "inference_lloyd")
    lloyd_title = json.loads((folder / "inference_lloyd.json").read_text())["title"]
    sizes = json.loads(re.search(r"sizes (\{.*?\})", lloyd_title).group(1))
    two = _by_threads(lloyd)["2"]
    cache = {row["threads"]: row["x transformer"] for row in lloyd if row["competitor"] == "transformer run_with_cache"}
    emb_data, embeddings = _bench(folder, "inference_embeddings")
    emb_sizes = json.loads(re.search(r"(\{.*?\})", emb_data["title"]).group(1))
    shown = [row for row in embeddings if row["k"] in ("100", "1000")] or embeddings[-2:]
    train_data, training = _bench(folder, "training")
    ours, reference = training
    projected = re.search(r"(projected|measured) 10,000 steps: ([\d.]+) min", train_data["footer"] or "")
    large_data, large = _bench(folder, "inference_large")
    large_sizes = json.loads(re.search(r"(\{.*?\})", large_data["title"]).group(1))
    large_two = _by_threads(large)["2"]
    _, small = _bench(folder, "training_small")
    seeds_data, seeds = _bench(folder, "seeds")
    seeds_title = re.match(r"(\d+) seeds x (\d+) steps", seeds_data["title"])
    evaluation_rows = []  # the evaluation forward (bench_inference --evaluation-only), when measured
    if (folder / "inference_evaluation.json").exists():
        evaluation_data, evaluation = _bench(folder, "inference_evaluation")
        size = json.loads(re.search(r"(\{.*?\})", evaluation_data["title"]).group(1))
        identical = "identical" if evaluation_data["footer"].endswith("yes (1 and 2 threads)") else "NOT identical"
        evaluation_rows = [f"| evaluation forward, {size['steps']} re-embedded steps of `main-onehot` | "
                           f"b={size['batch']}, n={size['n']}, d={size['d']}, k={size['k']} | "
                           + "; ".join(f"{_threads(threads)}: "
                                       f"{rows['interp forward (attn_xx once)']['median ms']} ms with attn_xx computed "
                                       f"once, {rows['forward recomputing attn_xx']['median ms']} ms recomputing it, "
                                       f"Lloyd {rows['Lloyd iterations']['median ms']} ms"
                                       for threads, rows in _by_threads(evaluation).items())
                           + f" (trajectories {identical}) |"]
    lines = [_source("analyses/results/bench/*.json", "python -m analyses.bench_inference (and --profile), "
                     "bench_training (and --small, --profile); seeds.json is the seed-batching measurement behind "
                     "docs/decisions.md, 'One training loop'"),
             "| benchmark | size | result |", "|---|---|---|",
             f"| inference: construction forward, {sizes['layers']} layers | b={sizes['batch']}, n={sizes['n']}, "
             f"d={sizes['d']}, k={sizes['k']}, 2 threads | {two['transformer forward']['median ms']} ms; reference "
             f"Lloyd {two['reference Lloyd']['median ms']} ms; scikit-learn loop "
             f"{two['sklearn KMeans loop']['median ms']} ms |",
             f"| inference: `run_with_cache` vs forward | same | {cache['2']}× (2 threads), {cache['1']}× (1 thread) |",
             *evaluation_rows,
             f"| inference: construction forward, one large task, {large_sizes['layers']} layers | "
             f"n={large_sizes['n']:,}, d={large_sizes['d']}, k={large_sizes['k']}, 2 threads | "
             f"{large_two['construction forward']['median ms']} ms, peak "
             f"{large_two['construction forward']['peak MB']} MB; batched Lloyd "
             f"{large_two['batched Lloyd']['median ms']} ms, {large_two['batched Lloyd']['peak MB']} MB |",
             f"| one-hot vs binary forward, learnable layer | d={emb_sizes['d']}, n={emb_sizes['n']}, "
             f"b={emb_sizes['batch']}, k={' / '.join(r['k'] for r in shown)} | binary "
             f"{' / '.join(r['speed-up'].replace('x', '×') for r in shown)} faster, "
             f"{' / '.join(r['memory saved'] for r in shown)} less memory |",
             f"| training step, interp vs the authors'-style formulation | {_training_size(train_data['title'])} | "
             f"{ours['s/step']} s vs {reference['s/step']} s ({reference['x interp time']}×); {ours['peak MB']} vs "
             f"{reference['peak MB']} MB"
             + (f"; 10,000 steps {projected.group(1)} {projected.group(2)} min" if projected else "")
             + " |",
             *(f"| training step at the studies' sizes | {row['size'].replace(' ', ', ')}, batch 32, "
               f"{_threads(row['threads'])} | {row['interp ms']} ms; without the block-step "
               f"kernel {row['interp without block-step kernel ms']} ms; reference {row['reference ms']} ms |"
               for row in small),
             f"| seed batching (since removed), {seeds_title.group(1)} seeds together vs one by one | "
             f"{seeds[0]['config'].replace(' ', ', ')}, {seeds_title.group(2)} steps | "
             + ", ".join(f"{row['speed-up'].replace('x', '×')} ({_threads(row['threads'])})" for row in seeds)
             + " |"]
    if (folder / "training_profile.json").exists():  # where a step's time goes (bench_training --profile)
        profile_data, profile = _bench(folder, "training_profile")
        batch = re.search(r"batch (\d+)", profile_data["title"]).group(1)
        lines += [f"| where a step's time goes (torch.profiler) | {row['size'].replace(' ', ', ')}, batch {batch}, "
                  f"1 thread | step {row['step ms']} ms; forward {row['forward share']}, loss {row['loss share']}, "
                  f"backward {row['backward share']}, Adam {row['Adam share']}; {row['aten ops/step']} aten operators "
                  "per step; "
                  f"most self time (ms/step): {row['most self time (ms/step)']} |" for row in profile]
    if (folder / "inference_profile.json").exists():  # where the construction forward's time goes (--profile)
        profile_data, inference_profile = _bench(folder, "inference_profile")
        size = json.loads(re.search(r"sizes (\{.*?\})", profile_data["title"]).group(1))
        lines += [f"| where the construction forward's time goes (torch.profiler) | b={size['batch']}, n={size['n']}, "
                  f"d={size['d']}, k={size['k']}, {size['layers']} layers, {_threads(threads)} | forward "
                  f"{rows['transformer forward']['median ms']} ms, "
                  f"{rows['transformer forward']['aten ops/call']} aten operators per call (most self time, ms: "
                  f"{rows['transformer forward']['most self time (ms)']}); Lloyd "
                  f"{rows['reference Lloyd']['median ms']} ms, {rows['reference Lloyd']['aten ops/call']} operators "
                  f"({rows['reference Lloyd']['most self time (ms)']}); run_with_cache "
                  f"{rows['transformer run_with_cache']['median ms']} ms, its cache "
                  f"{rows['transformer run_with_cache']['cache']} |"
                  for threads, rows in _by_threads(inference_profile).items()]
    if (folder / "training_unroll.json").exists():  # unrolled training (bench_training --unroll)
        unroll_data, unroll = _bench(folder, "training_unroll")
        size = re.search(r"(d=\d+), (k=\d+), (n=\d+), batch (\d+)", unroll_data["title"])
        lines.append(f"| unrolled training, loss after T re-embedded steps | {size.group(1)}, {size.group(2)}, "
                     f"{size.group(3)}, batch {size.group(4)}, 2 threads | "
                     + "; ".join(f"T={row['T']}: {row['ms/step']} ms ({row['ms / (T x one step)']}× T × one step), "
                                 f"peak {row['peak MB']} MB ({row['peak / (T x one step)']}×)" for row in unroll)
                     + " |")
    return "\n".join(lines)


def _training_size(title: str) -> str:
    match = re.search(r"batch (\d+), (n=\d+), (d=\d+), (k=\d+)", title)
    return f"b={match.group(1)}, {match.group(2)}, {match.group(3)}, {match.group(4)}" if match else ""


# ----- explain ---------------------------------------------------------------------------------------------------


def explain_block(explain: Path = RESULTS / "explain.json", failures: Path = RESULTS / "failures.json") -> str:
    """What the learned update is, per shipped checkpoint: the slot-symmetric share of the one-step update; the
    distilled algorithm of the whole update, the family x kernel chosen on validation tasks over every kernel and over
    the Euclidean kernel alone (learned numbers, held-out R^2 of the raw update); and 20-step mean log objectives of the
    model, the slot-averaged model, the chosen distilled algorithm and Lloyd on the same unseen tasks; then the
    slot-equivariant model trained from the start, against its prediction (failures.json, case ``slots``)."""
    data = json.loads(explain.read_text())["models"]
    lines = [_source("analyses/results/explain.json, failures.json",
                     "python -m analyses.explain; python -m analyses.failures"),
             "| model | slot-symmetric share of the update | distilled whole update, chosen on validation: family, "
             "kernel (learned numbers): held-out R² | Euclidean kernel only | 20 steps: model / slot-averaged (8×) / "
             "distilled / Lloyd |", "|---|---|---|---|---|"]
    for name in CHECKPOINTS:
        entry = data[name]
        whole, references = entry["distill"]["whole"], entry["distill"]["references"]
        chosen, euclidean = whole["selected"], whole["euclidean"]
        share = entry["symmetry"]["symmetric_share"]
        lines.append(f"| {name} | {share:.3f} | {chosen['family']}, {chosen['kernel']} ({chosen['n_parameters']:,}): "
                     f"{chosen['r2_update']:.3f} | {euclidean['family']} ({euclidean['n_parameters']:,}): "
                     f"{euclidean['r2_update']:.3f} | {references['model']:.3f} / {references['slot_averaged']:.3f} / "
                     f"{chosen['log_objective']:.3f} / {references['lloyd']:.3f} |")
    slots = json.loads(failures.read_text())["cases"]["slots"]["slot_equivariant_model"]
    prediction = slots["prediction"]
    measured = slots["measured"]
    if measured is None:
        result = "pending"
    else:
        beats = "beats" if slots["beats_main_onehot"] else "does not beat"
        result = (f"{measured:.3f} ({slots['gap']:+.3f} vs Lloyd): {slots['verdict']}; it {beats} main-onehot at the "
                  "same compute")
    lines += ["", f"Slot-equivariant one-hot model trained from the start (`{slots['checkpoint']}`, 10,000 steps, the "
              f"seed of main-onehot), 20 steps on the same tasks: predicted {prediction['value']:.3f} ± "
              f"{prediction['tolerance']:.2f}, measured {result}."]
    return "\n".join(lines)


# ----- README ----------------------------------------------------------------------------------------------------


def blocks() -> dict[str, str]:
    """{block name: generated text} from the committed files."""
    return {"headline": headline_block(), "learning": learning_block(), "instruments": instruments_block(),
            "explain": explain_block(), "studies": studies_block(), "speed": speed_block()}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- generated:{name} -->", f"<!-- /generated:{name} -->"


def block_in(text: str, name: str) -> str:
    """The current text between ``name``'s markers (without the newlines next to them)."""
    begin, end = markers(name)
    for marker in (begin, end):
        count = text.count(marker)
        if count != 1:
            raise MarkerError(f"the document must hold the marker {marker} exactly once, found it {count} times")
    start, stop = text.index(begin) + len(begin), text.index(end)
    if stop < start:
        raise MarkerError(f"the document has {end} before {begin}")
    return text[start:stop].strip("\n")


def fill(text: str, generated: dict[str, str]) -> str:
    """``text`` with each block's markers enclosing its generated text; everything else unchanged."""
    for name, content in generated.items():
        block_in(text, name)  # checks the markers
        begin, end = markers(name)
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{content}\n{end}{tail}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--readme", default=str(README), type=arguments.existing_file)
    parser.add_argument("--results-md", default=str(RESULTS_MD), type=arguments.existing_file)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a document is stale")
    parser.add_argument("--only", nargs="+", choices=BLOCKS, default=list(BLOCKS))
    args = parser.parse_args(argv)
    documents = {"--readme": (args.readme, [name for name in args.only if name in IN_README]),
                 "--results-md": (args.results_md, [name for name in args.only if name not in IN_README])}
    generated = {name: content for name, content in blocks().items() if name in args.only}
    stale = []
    for flag, (path, names) in documents.items():
        if not names:
            continue
        if not args.check:
            check_output_file(path, flag)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise InvalidInput(f"{flag} {path} is not UTF-8 text") from None
        try:
            new = fill(text, {name: generated[name] for name in names})
        except MarkerError as error:
            raise InvalidInput(f"{flag} {path}: {error}") from None
        if args.check:
            stale += [f"{path.name}:{name}" for name in names if block_in(text, name) != generated[name]]
            continue
        if new != text:
            write_text_atomically(path, new)
        print(f"{'updated' if new != text else 'unchanged'}: {path} ({', '.join(names)})")
    if args.check:
        if stale:
            print(f"stale generated blocks {stale}; run python -m analyses.readme", file=sys.stderr)
            return 1
        print("generated blocks up to date")
    return 0


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
