"""How much worse than Lloyd's algorithm each shipped learned model ends, through ``InContextKMeans``, on the tasks it
was trained for and on data unlike them: the measurements behind the estimator's ``LEARNED_MARGIN``.

For every shipped learned model (``MODELS``) ``InContextKMeans(10, model=..., lloyd_steps=0)`` is fitted with its
defaults (20 steps, one k-means++ start seeded from ``random_state``) and no Lloyd steps after the model's (the model's
own answer, whatever Lloyd steps its checkpoint recommends: docs/learned_model.md, "Hybrid inference") and reports
``inertia_ratio_``: its inertia over that of Lloyd's algorithm run from the same start for the same steps
(``lloyd_inertia_``). The data:

* main: --tasks tasks of the training distribution, ``sample_tasks(TaskConfig(n=512, d=32, k=10), tasks, --seed)``
  (Gaussian mixtures, min-max scaled to the unit cube), task i fitted with ``random_state=i``;
* hostile (``hostile_cases``): scikit-learn's bundled iris, wine, breast cancer and digits (reduced to 32 features by
  ``PCA(32, random_state=0)``), ``make_blobs`` with 10 centres, n = k = 10 distinct points, and 5 distinct points
  each 20 times; each fitted with ``random_state`` 0 .. --hostile-seeds - 1.

The JSON (--out) holds, per model, the quantiles of the ratio on the main tasks, the share of them above each
candidate margin (``CANDIDATES``) and the share the estimator warned on (``LearnedWorseThanLloyd``, at its
``LEARNED_MARGIN``), each hostile ratio with the warnings raised, and the time the check against Lloyd takes next to
the rest of ``fit`` (one thread). ``--from-json`` prints the Markdown tables of docs/learned_model.md from --out,
computing nothing.

Run: python -m analyses.studies.learned_vs_lloyd.measure [--tasks 256] [--out analyses/results/learned_vs_lloyd.json]
     [--from-json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

from analyses import _shared
from analyses.framework.formatting import ratio
from analyses.framework.statistics import median
from interp import _arguments as arguments
from interp._checks import InvalidInput, check_output_file

PROG = "python -m analyses.learned_vs_lloyd"
OUT = _shared.ROOT / "analyses" / "results" / "learned_vs_lloyd.json"
MODELS = ("best", "main-onehot", "main-binary", "main-none", "main-equivariant")
K = 10  # the shipped models' k
TASKS = 256
SEED = 20270301  # the main tasks' seed (unused by any other analysis)
HOSTILE_SEEDS = 10
MAX_HOSTILE_SEEDS = 1_000  # random_state values per hostile case
CANDIDATES = (1.1, 1.2, 1.3, 1.5, 1.75, 2.0, 2.5, 3.0)  # candidate margins of learned / Lloyd inertia
QUANTILES = (0.0, 0.5, 0.9, 0.99, 1.0)
HOSTILE = ("iris", "wine", "breast_cancer", "digits_pca32", "blobs10", "n_equals_k", "duplicates_5x20")


def hostile_cases() -> dict[str, tuple[str, object]]:
    """{name: (description, X float64 (n, d))}: data unlike the training tasks, all with at least k = 10 points."""
    import numpy as np
    from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine, make_blobs
    from sklearn.decomposition import PCA

    digits = PCA(32, random_state=0).fit_transform(load_digits().data)
    blobs, _ = make_blobs(n_samples=500, centers=10, n_features=2, random_state=0)
    return {
        "iris": ("load_iris(): n = 150, d = 4", load_iris().data),
        "wine": ("load_wine(): n = 178, d = 13", load_wine().data),
        "breast_cancer": ("load_breast_cancer(): n = 569, d = 30", load_breast_cancer().data),
        "digits_pca32": ("load_digits() after PCA(32): n = 1797, d = 32", digits),
        "blobs10": ("make_blobs(500, centers=10, n_features=2, random_state=0)", blobs),
        "n_equals_k": ("10 distinct points, d = 3 (default_rng(0).normal)", np.random.default_rng(0).normal(
            size=(10, 3))),
        "duplicates_5x20": ("5 distinct points (d = 2), each 20 times", np.repeat(
            np.random.default_rng(3).normal(size=(5, 2)), 20, axis=0)),
    }


def fit_once(model: str, X, random_state: int) -> dict:
    """One ``InContextKMeans(10, model=model, random_state=random_state, lloyd_steps=0).fit(X)``: its inertia, Lloyd's,
    their ratio, the warnings it raised (class names), and the seconds of the check against Lloyd and of the whole
    fit."""
    from interp import estimator as E

    checked = []
    original = E.InContextKMeans._check_against_lloyd

    def timed(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            checked.append(time.perf_counter() - started)

    E.InContextKMeans._check_against_lloyd = timed
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            started = time.perf_counter()
            fitted = E.InContextKMeans(K, model=model, random_state=random_state, lloyd_steps=0).fit(X)
            seconds = time.perf_counter() - started
    finally:
        E.InContextKMeans._check_against_lloyd = original
    return {"inertia": fitted.inertia_, "lloyd_inertia": fitted.lloyd_inertia_, "ratio": fitted.inertia_ratio_,
            "warnings": sorted({w.category.__name__ for w in caught}), "check_s": sum(checked), "fit_s": seconds}


def _quantiles(values: list[float]) -> dict[str, float]:
    import numpy as np

    return {f"{q:g}": float(np.quantile(values, q)) for q in QUANTILES}


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def measure(tasks: int, seed: int, hostile_seeds: int) -> dict:
    """The results (module docstring) of every model in ``MODELS``."""
    import numpy as np
    import torch

    from interp.estimator import LEARNED_MARGIN, LEARNED_SLACK
    from interp.tasks import TaskConfig, sample_tasks

    torch.set_num_threads(1)
    points = sample_tasks(TaskConfig(n=512, d=32, k=K), tasks, seed).points.double().numpy()  # (tasks, 512, 32)
    cases = hostile_cases()
    models = {}
    for model in MODELS:
        main = [fit_once(model, X, index) for index, X in enumerate(points)]
        ratios = [run["ratio"] for run in main]
        hostile = {}
        for name in HOSTILE:
            description, X = cases[name]
            runs = [fit_once(model, X, state) for state in range(hostile_seeds)]
            hostile[name] = {
                "data": description, "ratios": [run["ratio"] for run in runs],
                "median_ratio": median([run["ratio"] for run in runs]), "min_ratio": min(run["ratio"] for run in runs),
                "warned": _share(["LearnedWorseThanLloyd" in run["warnings"] for run in runs]),
                "warnings": sorted({name for run in runs for name in run["warnings"]}),
                "median_inertia": median([run["inertia"] for run in runs]),
                "median_lloyd_inertia": median([run["lloyd_inertia"] for run in runs]),
                "overhead_median": median([run["check_s"] / (run["fit_s"] - run["check_s"]) for run in runs])}
        overhead = [run["check_s"] / (run["fit_s"] - run["check_s"]) for run in main]
        models[model] = {
            "main": {"quantiles": _quantiles(ratios),
                     "share_above": {f"{margin:g}": _share([r > margin for r in ratios]) for margin in CANDIDATES},
                     "warned": _share(["LearnedWorseThanLloyd" in run["warnings"] for run in main]),
                     "convergence_warned": _share(["ConvergenceWarning" in run["warnings"] for run in main]),
                     "check_ms_median": 1e3 * median([run["check_s"] for run in main]),
                     "fit_without_check_ms_median": 1e3 * median([run["fit_s"] - run["check_s"] for run in main]),
                     "overhead_median": median(overhead)},
            "hostile": hostile}
        print(f"{model}: main median ratio {models[model]['main']['quantiles']['0.5']:.3f}, max "
              f"{models[model]['main']['quantiles']['1']:.3f}, warned {models[model]['main']['warned']:.3f}; hostile "
              f"warned {_share([h['warned'] == 1.0 for h in hostile.values()]):.2f} of cases", flush=True)
    main_warned = [models[m]["main"]["warned"] for m in MODELS]
    hostile_warned = [models[m]["hostile"][name]["warned"] for m in MODELS for name in HOSTILE]
    return {
        "command": PROG, "source": "written by that command",
        "settings": {"tasks": tasks, "seed": seed, "task_config": {"n": 512, "d": 32, "k": K}, "steps": 20,
                     "init": "k-means++", "n_init": 1, "hostile_seeds": hostile_seeds, "threads": 1,
                     "margin": LEARNED_MARGIN, "slack_per_point": LEARNED_SLACK, "candidates": list(CANDIDATES)},
        "models": models,
        "summary": {"main_warned": float(np.mean(main_warned)),
                    "main_warned_max_of_models": float(np.max(main_warned)),
                    "hostile_warned": float(np.mean(hostile_warned)),
                    "hostile_warned_min_of_cases": float(np.min(hostile_warned)),
                    "hostile_warned_by_case": {name: float(np.mean([models[m]["hostile"][name]["warned"]
                                                                    for m in MODELS])) for name in HOSTILE},
                    "overhead_median": median([models[m]["main"]["overhead_median"] for m in MODELS])}}


def tables(results: dict) -> str:
    """The Markdown tables of docs/learned_model.md ("What the learned models are for") from ``results``."""
    settings, models = results["settings"], results["models"]
    margin = settings["margin"]
    lines = [f"On {settings['tasks']} tasks of TaskConfig(n=512, d=32, k=10) (seed {settings['seed']}), one "
             f"k-means++ start each, {settings['steps']} steps: learned / Lloyd inertia from the same start.", "",
             "| model | min | median | 90 % | 99 % | max | share > 1.2 | share > 1.5 | share warned (> "
             f"{margin:g}) | check against Lloyd (median; over the rest of fit) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, model in models.items():
        main = model["main"]
        q = main["quantiles"]
        lines.append(f"| {name} | {q['0']:.3f} | {q['0.5']:.3f} | {q['0.9']:.3f} | {q['0.99']:.3f} | {q['1']:.3f} | "
                     f"{main['share_above']['1.2']:.1%} | {main['share_above']['1.5']:.1%} | {main['warned']:.1%} | "
                     f"{main['check_ms_median']:.1f} ms, {main['overhead_median']:.0%} of the fit |")
    lines += ["", f"Data unlike the training tasks: median (smallest) learned / Lloyd inertia over "
              f"{settings['hostile_seeds']} seeds of the start, and the share of the seeds that warned.", "",
              "| model | " + " | ".join(HOSTILE) + " |", "|---|" + "---|" * len(HOSTILE)]
    for name, model in models.items():
        cells = [f"{ratio(model['hostile'][case]['median_ratio'])} ({ratio(model['hostile'][case]['min_ratio'])}), "
                 f"{model['hostile'][case]['warned']:.0%}" for case in HOSTILE]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    summary = results["summary"]
    by_case = summary["hostile_warned_by_case"]
    others = [share for case, share in by_case.items() if case != "digits_pca32"]
    lines += ["", f"At the margin {margin:g}: {summary['main_warned']:.2%} of the main-task fits warn (at most "
              f"{summary['main_warned_max_of_models']:.2%} for one model); {summary['hostile_warned']:.1%} of the "
              "hostile fits (" + ", ".join(f"{case} {share:.0%}" for case, share in by_case.items()) +
              f"), {sum(others) / len(others):.1%} without digits_pca32. ConvergenceWarning (fewer distinct "
              "clusters than k) on the main tasks: " + ", ".join(
                  f"{name} {model['main']['convergence_warned']:.1%}" for name, model in models.items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(OUT), help="the JSON to write (read with --from-json)")
    parser.add_argument("--tasks", type=arguments.tasks, default=TASKS, help="main-configuration tasks")
    parser.add_argument("--seed", type=arguments.seed, default=SEED, help="seed of the main-configuration tasks")
    parser.add_argument("--hostile-seeds", type=arguments.count(MAX_HOSTILE_SEEDS), default=HOSTILE_SEEDS,
                        help="random_state values 0 .. N - 1 for each hostile case")
    parser.add_argument("--from-json", action="store_true", help="print the tables from --out, computing nothing")
    args = parser.parse_args(argv)
    if args.from_json:
        out = Path(args.out)
        if not out.is_file():
            raise InvalidInput(f"--from-json reads --out {out}, which does not exist or is not a file")
        results = json.loads(out.read_text())
        print(tables(results), end="")
        return results
    out = check_output_file(args.out, "--out")
    results = measure(args.tasks, args.seed, args.hostile_seeds)
    _shared.write_json(results, out)
    print(tables(_shared.finite_or_none(results)), end="")
    return results


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
