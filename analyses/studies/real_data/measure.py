"""Real data at their own k: a learned model through ``interp.InContextKMeans`` against Lloyd's algorithm and
scikit-learn's KMeans on scikit-learn's bundled data sets, every method from the same starts.

The data (``datasets``; all bundled with scikit-learn, nothing downloaded), k = their number of classes:

* iris (n = 150, d = 4, k = 3), wine (178, 13, 3) and breast cancer (569, 30, 2), each standardised
  (``StandardScaler``);
* digits after ``PCA(32, random_state=0)`` (1797, 32, 10);
* digits 0-4 only after ``PCA(16, random_state=0)`` (901, 16, 5): a k and a d between the others';
* wine on its raw scale (178, 13, 3): proline spans about 1,400 and magnesium about 90, the other eleven features at
  most 20, so the estimator's one-scale map to the unit cube leaves the data nearly one-dimensional.

Starts: for random_state s = 0 .. --starts - 1, k distinct data points drawn by
``numpy.random.RandomState(s).choice(n, k, replace=False)`` (their indices are in the record). From each start, as
an explicit ``init`` array (the same centroids for every method):

* ``learned``: ``InContextKMeans(k, model=M, steps=T, init=start, random_state=s)``, T the checkpoint's recommended
  steps (its ``inference.steps``; the estimator's default 20 where it names none);
* ``learned_lloyd``: the same, then L Lloyd steps (``--lloyd-steps``; default the checkpoint's recommended
  ``inference.lloyd_steps`` where it names some, else 1, the step that moves each centroid to its cell's mean): the
  estimator's ``lloyd_steps=`` where it has that parameter, otherwise ``InContextKMeans(k, model="lloyd", steps=L,
  init=<the learned centres>)``;
* ``lloyd``: ``InContextKMeans(k, model="lloyd", steps=20, init=start)``;
* ``lloyd_converged``: ``model="lloyd"`` continued 20 steps at a time from its own centres until they are a fixed
  point of one more Lloyd step (to 1e-9 of the data's span), at most CONVERGED_LIMIT steps;
* ``sklearn_1`` and ``sklearn_10``: ``sklearn.cluster.KMeans(k, init="k-means++", n_init=1 or 10, random_state=s)``
  (scikit-learn's own k-means++ starts, not the shared ones).

Every inertia is the sum of squared distances of the data to their nearest centre, in the data's own (standardised,
PCA or raw) coordinates, computed from the centres by ``inertia`` here. A model that refuses a data set (a learned
checkpoint serves only some k and d) leaves that data set's learned rows None and the refusal's message in the
record. The record (--out, JSON) holds every start's inertias (``rows``), so that every figure of the section can be
recomputed; the section's summary per data set: mean inertia ± standard error over the starts, the learned / Lloyd
(20 steps) inertia ratio per start (mean, and how many starts are within 2 %), and the goal "no worse than
model='lloyd' from the same starts": met when the mean of the per-start ratios is at most GOAL_RATIO = 1.02.

Run: python -m analyses.studies.real_data.measure [--model best] [--starts 10] [--results-md]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from analyses import _studies as S
from analyses.framework.formatting import fixed
from interp import _arguments as arguments
from interp._io import write_text_atomically

PROG = "python -m analyses.studies.real_data.measure"
DEFAULT_OUT = S.HERE / "results" / "real_data.json"
MODEL = "best"
STARTS = 10
MAX_STARTS = 100
LLOYD_STEPS = 20  # model="lloyd", the estimator's default steps
DEFAULT_STEPS = 20  # a learned model's steps where its checkpoint recommends none (the estimator's default)
DEFAULT_STEPS_WHY = "the estimator's default: its checkpoint recommends none"
DEFAULT_LLOYD_AFTER = 1  # Lloyd steps after the learned ones where the checkpoint recommends none
BLOCK = 20  # lloyd_converged: steps between fixed-point checks
CONVERGED_LIMIT = 1_000
FIXED_POINT = 1e-9  # of the data's largest per-feature span
GOAL_RATIO = 1.02  # "no worse than model='lloyd' from the same starts": inertia within 2 %
METHODS = ("learned", "learned_lloyd", "lloyd", "lloyd_converged", "sklearn_1", "sklearn_10")
LEARNED = ("learned", "learned_lloyd")
DATASETS = ("iris", "wine", "breast_cancer", "digits_pca32", "digits04_pca16", "wine_raw")


def datasets() -> dict[str, dict]:
    """name -> {"description", "k", "X" (n, d) float64}: the study's data (module docstring), bundled with
    scikit-learn."""
    from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
    from sklearn.decomposition import PCA
    from sklearn.preprocessing import StandardScaler

    def standardised(loaded) -> np.ndarray:
        return StandardScaler().fit_transform(loaded.data)

    digits = load_digits()
    low = digits.target <= 4
    return {
        "iris": {"description": "load_iris(), StandardScaler", "k": 3, "X": standardised(load_iris())},
        "wine": {"description": "load_wine(), StandardScaler", "k": 3, "X": standardised(load_wine())},
        "breast_cancer": {"description": "load_breast_cancer(), StandardScaler", "k": 2,
                          "X": standardised(load_breast_cancer())},
        "digits_pca32": {"description": "load_digits(), PCA(32, random_state=0)", "k": 10,
                         "X": PCA(32, random_state=0).fit_transform(digits.data)},
        "digits04_pca16": {"description": "load_digits() digits 0-4, PCA(16, random_state=0)", "k": 5,
                           "X": PCA(16, random_state=0).fit_transform(digits.data[low])},
        "wine_raw": {"description": "load_wine(), raw scale", "k": 3, "X": np.asarray(load_wine().data, float)},
    }


def start_indices(n: int, k: int, seed: int) -> list[int]:
    """The start of random_state ``seed``: k distinct data points' indices."""
    return [int(i) for i in np.random.RandomState(seed).choice(n, k, replace=False)]


def inertia(X: np.ndarray, centres: np.ndarray) -> float:
    """Sum over the points of the squared distance to the nearest centre, in X's coordinates."""
    return float(((X[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2).min(axis=1).sum())


def lloyd_step(X: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """One Lloyd step with the construction's empty-cluster rule (an empty centre goes to the mean of all points)."""
    labels = ((X[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2).argmin(axis=1)
    out = np.repeat(X.mean(axis=0, keepdims=True), len(centres), axis=0)
    for j in range(len(centres)):
        if (labels == j).any():
            out[j] = X[labels == j].mean(axis=0)
    return out


def recommended(model: str) -> dict:
    """The checkpoint's k and d (and the k it serves, where it says), its recommended steps and Lloyd steps."""
    from interp.model.checkpoint import load_model

    loaded = load_model(model)
    served = getattr(loaded, "served_k", None)
    steps = loaded.inference.steps
    return {"k": loaded.config.k, "d": loaded.config.d, "served_k": None if served is None else list(served),
            "steps": steps if steps is not None else DEFAULT_STEPS,
            "steps_from": "checkpoint" if steps is not None else "the estimator's default",
            "lloyd_steps": int(getattr(loaded.inference, "lloyd_steps", 0) or 0)}


def _sha256(model: str) -> str:
    """The checkpoint file's SHA-256 (which file the record measured)."""
    import hashlib

    from interp.model.checkpoint import resolve

    return hashlib.sha256(resolve(model).read_bytes()).hexdigest()


def _estimator_has_lloyd_steps() -> bool:
    from interp import InContextKMeans

    return "lloyd_steps" in InContextKMeans().get_params()


def _fit(X: np.ndarray, k: int, **params):
    """``InContextKMeans(k, **params).fit(X)`` and the names of the warnings it raised."""
    from interp import InContextKMeans

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fitted = InContextKMeans(k, **params).fit(X)
    return fitted, sorted({type(w.message).__name__ if isinstance(w.message, Warning) else w.category.__name__
                           for w in caught})


def lloyd_converged(X: np.ndarray, k: int, start: np.ndarray) -> tuple[np.ndarray, int, bool]:
    """model="lloyd" from ``start``, BLOCK steps at a time, until its centres are a fixed point of one more Lloyd step
    (to FIXED_POINT of the data's span) or CONVERGED_LIMIT steps: (centres, steps run, whether a fixed point)."""
    span = float((X.max(axis=0) - X.min(axis=0)).max()) or 1.0
    centres, steps = start, 0
    while steps < CONVERGED_LIMIT:
        centres = _fit(X, k, model="lloyd", steps=BLOCK, init=centres)[0].cluster_centers_
        steps += BLOCK
        if np.abs(lloyd_step(X, centres) - centres).max() <= FIXED_POINT * span:
            return centres, steps, True
    return centres, steps, False


def measure_dataset(X: np.ndarray, k: int, model: str, starts: int | Sequence[int] = STARTS,
                    lloyd_after: int | None = None) -> dict:
    """Every method from each start on one data set (module docstring): {"n", "d", "k", "refused", "rows"}, a row
    per start with its indices, each method's inertia (None for a refused learned model), the warnings of the learned
    fit and the steps lloyd_converged ran."""
    from sklearn.cluster import KMeans

    from interp._checks import InvalidInput

    n, d = X.shape
    seeds = list(range(starts)) if isinstance(starts, int) else list(starts)
    advice = recommended(model)
    after = (advice["lloyd_steps"] or DEFAULT_LLOYD_AFTER) if lloyd_after is None else lloyd_after
    through_estimator = _estimator_has_lloyd_steps()
    plain = {"lloyd_steps": 0} if through_estimator else {}  # "learned" is the model's steps alone
    out = {"n": n, "d": d, "k": k, "model_steps": advice["steps"], "lloyd_after": after,
           "learned_lloyd_route": "InContextKMeans(lloyd_steps=L)" if through_estimator else
           "InContextKMeans(model='lloyd', steps=L, init=<the learned centres>)", "refused": None, "rows": []}
    for seed in seeds:
        indices = start_indices(n, k, seed)
        start = X[indices]
        row = {"random_state": seed, "start": indices, "inertia": {}, "learned_warnings": None}
        try:
            learned, row["learned_warnings"] = _fit(X, k, model=model, steps=advice["steps"], init=start,
                                                    random_state=seed, **plain)
        except InvalidInput as error:  # the model does not serve this k or d
            out["refused"] = str(error)
            learned = None
        if learned is None:
            row["inertia"].update({name: None for name in LEARNED})
        else:
            row["inertia"]["learned"] = inertia(X, learned.cluster_centers_)
            if through_estimator:
                polished = _fit(X, k, model=model, steps=advice["steps"], lloyd_steps=after, init=start,
                                random_state=seed)[0]
            else:
                polished = _fit(X, k, model="lloyd", steps=after, init=learned.cluster_centers_)[0]
            row["inertia"]["learned_lloyd"] = inertia(X, polished.cluster_centers_)
        row["inertia"]["lloyd"] = inertia(X, _fit(X, k, model="lloyd", steps=LLOYD_STEPS, init=start)[0]
                                          .cluster_centers_)
        centres, row["lloyd_converged_steps"], row["lloyd_converged"] = lloyd_converged(X, k, start)
        row["inertia"]["lloyd_converged"] = inertia(X, centres)
        for runs in (1, 10):
            fitted = KMeans(n_clusters=k, init="k-means++", n_init=runs, random_state=seed).fit(X)
            row["inertia"][f"sklearn_{runs}"] = inertia(X, fitted.cluster_centers_)
        out["rows"].append(row)
    return out


# ----- the summary, from the rows alone ------------------------------------------------------------------------------
def summary(entry: dict) -> dict:
    """One data set's figures from its rows: each method's mean inertia and standard error over the starts, the
    learned (and learned + Lloyd) / Lloyd ratio per start with its mean and the starts within 2 %, and the goal's
    verdict ("met", "missed", or "missed (refused)" where the model refuses the data set)."""
    rows = entry["rows"]
    out = {"methods": {}}
    for method in METHODS:
        values = [row["inertia"][method] for row in rows]
        if any(value is None for value in values):
            out["methods"][method] = None
            continue
        values = np.asarray(values, dtype=float)
        out["methods"][method] = {"mean": float(values.mean()),
                                  "se": float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0}
    for method in LEARNED:
        if out["methods"][method] is None:
            out[method] = {"ratios": None, "mean_ratio": None, "within": None, "goal": "missed (refused)"}
            continue
        ratios = [row["inertia"][method] / row["inertia"]["lloyd"] for row in rows]
        mean = float(np.mean(ratios))
        out[method] = {"ratios": ratios, "mean_ratio": mean, "within": int(sum(r <= GOAL_RATIO for r in ratios)),
                       "goal": "met" if mean <= GOAL_RATIO else "missed"}
    return out


# ----- the section ---------------------------------------------------------------------------------------------------
LABELS = {"learned": "learned", "learned_lloyd": "learned + Lloyd", "lloyd": "model='lloyd', 20 steps",
          "lloyd_converged": "model='lloyd', converged", "sklearn_1": "KMeans k-means++, n_init=1",
          "sklearn_10": "KMeans k-means++, n_init=10"}


def _number(value: float) -> str:
    """Two decimals with thousands separators (1,093,454.53)."""
    return f"{round(value, 2) + 0.0:,.2f}"


def _inertia_cell(figures: dict | None) -> str:
    return "refused" if figures is None else f"{_number(figures['mean'])} ± {_number(figures['se'])}"


def _ratio_cell(figures: dict, starts: int) -> str:
    if figures["mean_ratio"] is None:
        return "refused"
    return f"{fixed(figures['mean_ratio'], 3)} ({figures['within']} of {starts} within 2 %)"


def results_section(record: dict) -> str:
    """The RESULTS.md section ``real_data`` from the record: the tables recomputed from its rows."""
    model, starts = record["model"], record["starts"]
    advice = record["checkpoint"]
    low, high = advice["served_k"] or (advice["k"], advice["k"])
    served = f"k = {low}" if low == high else f"k = {low} to {high}"
    checksum = f"SHA-256 {advice['sha256'][:12]}…; " if "sha256" in advice else ""
    routes = "`, `".join(sorted({entry["learned_lloyd_route"] for entry in record["datasets"].values()}))
    lines = [
        "## Real data at their own k",
        "",
        f"Command: `{record['command']}`  ",
        f"Budget: model `{model}` ({checksum}serves {served}, d ≤ {advice['d']}; {advice['steps']} steps, "
        f"{'as its checkpoint recommends' if advice['steps_from'] == 'checkpoint' else DEFAULT_STEPS_WHY}), "
        f"{starts} starts per data set (random_state 0-{starts - 1}: k distinct data points, the same initial "
        "centroids for every method but scikit-learn's, which draws its own k-means++ starts); learned + Lloyd: "
        f"{record['lloyd_after']} Lloyd step{'s' if record['lloyd_after'] != 1 else ''} after the learned ones "
        f"(`{routes}`). "
        "Inertia in the data's own coordinates (standardised, PCA or raw); mean ± standard error over the starts. "
        "Protocol: docs/evaluation.md, \"Real data\"; every start's inertias are in "
        "`analyses/results/real_data.json`.",
        "",
        "| data (n, d, k) | " + " | ".join(LABELS[m] for m in METHODS) + " |",
        "|---|" + "---|" * len(METHODS),
    ]
    figures = {name: summary(entry) for name, entry in record["datasets"].items()}
    for name, entry in record["datasets"].items():
        lines.append(f"| {name} ({entry['n']}, {entry['d']}, {entry['k']}) | "
                     + " | ".join(_inertia_cell(figures[name]["methods"][m]) for m in METHODS) + " |")
    lines += [
        "",
        f"The goal: no worse than `model='lloyd'` (20 steps) from the same starts, met where the mean over the starts "
        f"of the per-start inertia ratio is at most {fixed(GOAL_RATIO, 2)}.",
        "",
        "| data | learned / Lloyd per start: mean (starts within 2 %) | goal | learned + Lloyd / Lloyd | goal |",
        "|---|---|---|---|---|",
    ]
    for name in record["datasets"]:
        found = figures[name]
        lines.append(f"| {name} | {_ratio_cell(found['learned'], starts)} | **{found['learned']['goal']}** | "
                     f"{_ratio_cell(found['learned_lloyd'], starts)} | **{found['learned_lloyd']['goal']}** |")
    refused = {name: entry["refused"] for name, entry in record["datasets"].items() if entry["refused"]}
    met = [name for name in record["datasets"] if figures[name]["learned"]["goal"] == "met"]
    missed = [name for name in record["datasets"] if figures[name]["learned"]["goal"] == "missed"]
    lines += ["", f"Learned alone: the goal is met on {', '.join(met) or 'no data set'}, missed on "
                  f"{', '.join(missed) or 'no data set'}"
                  + (f", and the model refuses {', '.join(refused)}." if refused else ".")]
    if refused:
        lines += ["", "Refusals (the estimator's message):", ""]
        lines += [f"* {name}: {message}" for name, message in refused.items()]
    warned = []
    for name, entry in record["datasets"].items():
        if entry["rows"][0]["learned_warnings"] is None:
            continue
        counts = {}
        for row in entry["rows"]:
            for warning in row["learned_warnings"]:
                counts[warning] = counts.get(warning, 0) + 1
        warned.append(f"{name}: " + (", ".join(f"{warning} from {count} of {len(entry['rows'])} starts"
                                               for warning, count in sorted(counts.items())) or "none"))
    if warned:
        lines += ["", "Warnings the estimator raised on the learned fits (LearnedWorseThanLloyd: its own check against "
                      "Lloyd's algorithm from the same start): " + "; ".join(warned) + "."]
    unconverged = [name for name, entry in record["datasets"].items()
                   if not all(row["lloyd_converged"] for row in entry["rows"])]
    most = max(row["lloyd_converged_steps"] for entry in record["datasets"].values() for row in entry["rows"])
    lines += ["", f"`model='lloyd'`, converged: a fixed point within {most} steps from every start"
                  + (f" but on {', '.join(unconverged)} (stopped at {CONVERGED_LIMIT})." if unconverged else ".")]
    return "\n".join(lines) + "\n"


def section() -> str:
    """The section from the committed JSON (``render``)."""
    return results_section(json.loads(DEFAULT_OUT.read_text()))


def main(argv: list[str] | None = None) -> dict:
    import sklearn
    import torch

    from interp._checks import check_output_file

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=MODEL, type=arguments.checkpoint,
                        help=f"the learned model: a shipped name or a checkpoint (default {MODEL})")
    parser.add_argument("--starts", type=arguments.count(MAX_STARTS), default=STARTS,
                        help=f"starts per data set, random_state 0 .. STARTS - 1 (default {STARTS})")
    parser.add_argument("--lloyd-steps", type=arguments.count(CONVERGED_LIMIT, minimum=0), default=None,
                        help="Lloyd steps after the learned ones (default: the checkpoint's recommendation, else "
                        f"{DEFAULT_LLOYD_AFTER})")
    parser.add_argument("--data", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--results-md", action="store_true", help="put the section into analyses/RESULTS.md")
    parser.add_argument("--threads", type=arguments.threads, default=1)
    args = parser.parse_args(argv)
    out = check_output_file(args.out, "--out")
    torch.set_num_threads(args.threads)
    advice = recommended(args.model)
    advice["sha256"] = _sha256(args.model)
    record = {"command": S.command_line(), "model": args.model, "checkpoint": advice, "starts": args.starts,
              "lloyd_after": args.lloyd_steps if args.lloyd_steps is not None else
              (advice["lloyd_steps"] or DEFAULT_LLOYD_AFTER), "goal_ratio": GOAL_RATIO,
              "versions": {"scikit-learn": sklearn.__version__, "numpy": np.__version__, "torch": torch.__version__},
              "datasets": {}}
    data = datasets()
    for name in args.data:
        print(f"{name} ...", flush=True)
        record["datasets"][name] = {"description": data[name]["description"],
                                    **measure_dataset(data[name]["X"], data[name]["k"], args.model, args.starts,
                                                      record["lloyd_after"])}
    record["summary"] = {name: {key: value for key, value in summary(entry).items()}
                         for name, entry in record["datasets"].items()}
    write_text_atomically(Path(out), json.dumps(record, indent=1) + "\n")
    print(f"wrote {out}")
    text = results_section(record)
    print(text)
    if args.results_md:
        S.write_section("real_data", text)
    return record


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
