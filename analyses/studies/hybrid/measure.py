"""Hybrid inference: the learned default's 20 steps, then Lloyd steps (``interp.hybrid.hybrid``), chosen on validation
tasks by a rule committed before they were scored (analyses/predictions/hybrid.json), then scored once on test tasks
beside Lloyd, k-means++ in torch and scikit-learn's KMeans (k-means++, 1 and 10 starts), all timed.

Tasks: the main configuration (``TaskConfig(n=512, d=32, k=10)``, normal family), drawn as ``interp evaluate`` draws
them (``interp.evaluate.evaluation_tasks``: float32, from the sampler seed), random starts as in the papers' protocol
(a uniform random k-subset of the points, ``init_centroids(..., "random")`` from seed + 1), the shuffled slot orders
from seed + 2. Every algorithm runs on those float32 values held in float64 (the model's own steps in its float32,
Lloyd's and the baselines' in float64, as ``InContextKMeans`` runs them) and is scored in float64: ln Phi, Phi =
sum_i min_j ||x_i - c_j||^2.

Stages (``--stage``; ``all`` runs pilot, validation and test in order and writes the record):

* ``pilot`` (seed 20270410, 320 tasks): every candidate and scikit-learn's KMeans; the spread of the paired
  difference between candidates adjacent in total steps gives the validation size n (``validation_size``). It only
  prints: the predictions file states its figures and n before the other stages run;
* ``validation`` (seed 20270420, the registered n tasks): each candidate's mean ln Phi; the committed rule chooses
  (``choose``);
* ``test`` (seeds 20270430 and 20270440, 320 tasks each, once): best without and with the chosen Lloyd steps,
  main-onehot as the papers run it, Lloyd from the same random starts, greedy k-means++ starts and Lloyd to
  convergence in torch, scikit-learn's KMeans (k-means++, n_init 1 and 10, to convergence) in a process that never
  imports torch; every algorithm timed on all test tasks at one thread (medians of ``TIMING_ROUNDS``); the paired
  statistics (``interp.compare.paired_summary``), the verdicts and the two goals;
* ``ship``: where the chosen Lloyd steps beat none on validation (the committed rule), their numbers as ``best``'s
  recommended ``inference`` (``steps``, ``lloyd_steps``) in interp/pretrained/best.safetensors, its metadata
  rewritten, its tensors left byte for byte.

Writes ``--out`` (analyses/results/hybrid.json), its per-task rows beside it (``hybrid_tasks.csv``: one row per
stage, seed, task and algorithm), and with ``--results-md`` the section ``hybrid`` of analyses/RESULTS.md.

    python -m analyses run hybrid --budget paper      (pilot, validation and test: a few minutes at one thread)
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from analyses import _studies as S
from analyses.framework import clustering
from analyses.framework.clustering import lloyd_centroids, log_phi
from analyses.framework.preregistration import load_predictions, prediction_of, verdict
from interp import _arguments as arguments
from interp._checks import InvalidInput, check_output_file
from interp._io import write_text_atomically

PROG = "python -m analyses.studies.hybrid.measure"
ROOT = S.HERE.parent
PREDICTIONS = S.HERE / "predictions" / "hybrid.json"
DEFAULT_OUT = S.HERE / "results" / "hybrid.json"
SHIPPED = ROOT / "interp" / "pretrained" / "best.safetensors"
SECTION_KEY = "hybrid"
STAGES = ("pilot", "all", "ship")

MODEL, PAPERS_MODEL = "best", "main-onehot"
N, D, K = 512, 32, 10
PILOT_SEED, VALIDATION_SEED, TEST_SEEDS = 20270410, 20270420, (20270430, 20270440)
PILOT_TASKS, TEST_TASKS_PER_SEED = 320, 320
CANDIDATES = {"T20+L0": (20, 0), "T20+L1": (20, 1), "T20+L2": (20, 2), "T20+L5": (20, 5), "T10+L1": (10, 1)}
BASELINE = "T20+L0"  # best as shipped before this study: 20 learned steps, no Lloyd step
MIN_GAP = 0.005  # the smallest gap between adjacent candidates worth resolving (ln Phi)
SE_FRACTION = 1 / 3  # the validation's SE of an adjacent paired difference is below this share of the expected gap
VALIDATION_BOUNDS = (320, 2000)  # at least the protocol's 320 tasks, at most what the budget allows
WIN_SES = 2.0  # the chosen candidate beats T20+L0 on validation: its paired mean difference below -2 SE
TIE = 1e-6  # |d_t| <= TIE in ln Phi: the same partition (float32 and float64 means), a tie, not a win
CHUNK = 64  # tasks per forward, as interp.evaluate
TIMING_ROUNDS = 3
LLOYD_MAX_STEPS = 300  # Lloyd to convergence: at most scikit-learn's max_iter
THREADS = 1

LABELS = {"best_20": "best, 20 steps (shuffled slots), no Lloyd step", "main_onehot_20": "main-onehot, 20 steps "
          "(fixed slots, as the papers run it)", "torch_kmeanspp_lloyd": "k-means++ (greedy, torch) + Lloyd to "
          "convergence", "sklearn_x1": "scikit-learn KMeans, k-means++, 1 start", "sklearn_x10":
          "scikit-learn KMeans, k-means++, 10 starts"}


SHORT = {"sklearn_x1": "k-means++ x1", "sklearn_x10": "k-means++ x10"}  # the references in column heads


def hybrid_name(steps: int, lloyd_steps: int) -> str:
    return f"best_{steps}+{lloyd_steps}"


def label(name: str) -> str:
    """The row label of an algorithm of the test table."""
    if name in LABELS:
        return LABELS[name]
    if name.startswith("lloyd_"):
        return f"Lloyd, {name.removeprefix('lloyd_')} iterations"
    steps, lloyd_steps = name.removeprefix("best_").split("+")
    return f"**best, {steps} steps + {lloyd_steps} Lloyd step{'s' if lloyd_steps != '1' else ''}**"


# ----- tasks and algorithms ------------------------------------------------------------------------------------------
def draw(seed: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` main-configuration tasks (count, n, d) and their random starts (count, k, d), float64
    (``analyses.framework.clustering.draw``)."""
    return clustering.draw(N, D, K, seed, count)


@torch.no_grad()
def hybrid_runs(model, points: torch.Tensor, starts: torch.Tensor, seed: int, steps: int, lloyd_steps: int,
                slot_order: str | None = None) -> torch.Tensor:
    """The centroid trajectories (V, T + L + 1, k, d) of ``hybrid`` on every task, in chunks of CHUNK tasks, the slot
    orders from seed + 2 (as ``interp evaluate``)."""
    from interp.hybrid import hybrid

    model.eval()
    orders = torch.Generator().manual_seed(seed + 2)
    return torch.cat([hybrid(model, points[i : i + CHUNK], starts[i : i + CHUNK], steps=steps,
                             lloyd_steps=lloyd_steps, slot_order=slot_order, generator=orders).centroid_trajectory
                      for i in range(0, len(points), CHUNK)])


def candidate_values(model, points: torch.Tensor, starts: torch.Tensor, seed: int) -> dict[str, np.ndarray]:
    """ln Phi (V,) of every candidate: one run of 20 learned and 5 Lloyd steps gives T20+L0..L5 (its trajectory at
    20, 21, 22, 25), a run of 10 and 1 gives T10+L1."""
    long = hybrid_runs(model, points, starts, seed, 20, 5)
    short = hybrid_runs(model, points, starts, seed, 10, 1)
    out = {}
    for name, (steps, lloyd_steps) in CANDIDATES.items():
        trajectory = long if steps == 20 else short
        out[name] = log_phi(points, trajectory[:, steps + lloyd_steps])
    return out


@torch.no_grad()
def kmeanspp_lloyd_centroids(points: torch.Tensor, seed: int) -> torch.Tensor:
    """Greedy k-means++ starts in torch (``kmeans_plusplus``, scikit-learn's local trials; seed + 3), then Lloyd until
    no assignment changes (``lloyd_until_converged``, at most LLOYD_MAX_STEPS)."""
    from interp.algorithms import kmeans_plusplus, lloyd_until_converged

    generator = torch.Generator().manual_seed(seed + 3)
    found = []
    for i in range(0, len(points), CHUNK):
        chunk = points[i : i + CHUNK]
        found.append(lloyd_until_converged(chunk, kmeans_plusplus(chunk, K, generator), LLOYD_MAX_STEPS)[0])
    return torch.cat(found)


def sklearn_values(points: torch.Tensor, seed: int, rounds: int) -> tuple[dict[str, np.ndarray], dict]:
    """ln Phi (V,) of scikit-learn's KMeans with 1 and 10 k-means++ starts (random_state = seed + task), and the run's
    record (times per round, iterations, thread pools, whether torch was imported)."""
    from interp.compare import sklearn_in_fresh_process

    found = sklearn_in_fresh_process(points.numpy(), K, seed, n_inits=(1, 10), rounds=rounds, threads=THREADS)
    values = {f"sklearn_x{n_init}": log_phi(points, torch.from_numpy(found["centres"][n_init]))
              for n_init in (1, 10)}
    return values, found


# ----- the pre-registered rules --------------------------------------------------------------------------------------
def total_steps(name: str) -> int:
    return sum(CANDIDATES[name])


def adjacent_pairs() -> list[tuple[str, str]]:
    """Candidates next to each other in total steps (T + L)."""
    ordered = sorted(CANDIDATES, key=total_steps)
    return list(zip(ordered, ordered[1:]))


def validation_size(values: dict[str, np.ndarray], bounds: tuple[int, int] = VALIDATION_BOUNDS) -> dict:
    """n from the pilot: per adjacent pair (a, b), d_t = f_a(t) - f_b(t), s = sd_t(d) (ddof 1), the expected gap g =
    max(|mean_t d_t|, MIN_GAP), and n_ab = ceil((s / (SE_FRACTION g))^2), the tasks at which SE = s / sqrt(n) is at
    most SE_FRACTION g; n = max_ab n_ab within ``bounds``."""
    pairs = {}
    for a, b in adjacent_pairs():
        difference = values[a] - values[b]
        sd, mean = float(np.std(difference, ddof=1)), float(difference.mean())
        gap = max(abs(mean), MIN_GAP)
        pairs[f"{a} - {b}"] = {"mean": mean, "sd": sd, "gap": gap,
                               "tasks_needed": math.ceil((sd / (SE_FRACTION * gap)) ** 2)}
    needed = max(pair["tasks_needed"] for pair in pairs.values())
    return {"pairs": pairs, "needed": needed, "bounds": list(bounds),
            "tasks": min(max(needed, bounds[0]), bounds[1])}


def se(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1) / math.sqrt(len(values)))


def choose(values: dict[str, np.ndarray]) -> dict:
    """The committed rule: the lowest mean; a candidate whose mean exceeds it by at most the SE of its paired
    difference to it is tied with it, and among the tied the fewest total steps win (then the lower mean). The choice
    beats T20+L0 when its paired mean difference to it is below -WIN_SES SE."""
    means = {name: float(v.mean()) for name, v in values.items()}
    lowest = min(means, key=means.get)
    tied = [name for name in values
            if name == lowest or means[name] - means[lowest] <= se(values[name] - values[lowest])]
    chosen = min(tied, key=lambda name: (total_steps(name), means[name]))
    against = values[chosen] - values[BASELINE]
    difference = {"mean": float(against.mean()), "se": se(against) if chosen != BASELINE else 0.0}
    return {"means": means, "lowest": lowest, "tied": tied, "chosen": chosen,
            "steps": CANDIDATES[chosen][0], "lloyd_steps": CANDIDATES[chosen][1],
            "chosen_minus_baseline": difference,
            "beats_baseline": chosen != BASELINE and difference["mean"] < -WIN_SES * difference["se"]}


# ----- stages --------------------------------------------------------------------------------------------------------
def stage_pilot(tasks: int = PILOT_TASKS, rounds: int = 1) -> dict:
    """Every candidate and scikit-learn on the pilot tasks; the validation size (printed; ``validation_size``)."""
    from interp.model.checkpoint import load_model

    points, starts = draw(PILOT_SEED, tasks)
    model = load_model(MODEL)
    values = candidate_values(model, points, starts, PILOT_SEED)
    baselines, found = sklearn_values(points, PILOT_SEED, rounds)
    values.update(baselines)
    times = {name: timed(lambda steps=steps, lloyd_steps=lloyd_steps: hybrid_runs(
        model, points, starts, PILOT_SEED, steps, lloyd_steps), rounds) for name, (steps, lloyd_steps) in
        CANDIDATES.items()}
    times.update({f"sklearn_x{n_init}": found["times"][n_init] for n_init in (1, 10)})
    print("pilot wall times (s, all pilot tasks, one thread): "
          + ", ".join(f"{name} {statistics.median(t):.2f}" for name, t in times.items()))
    size = validation_size({name: values[name] for name in CANDIDATES})
    for name, v in values.items():
        x1, x10 = v - values["sklearn_x1"], v - values["sklearn_x10"]
        print(f"pilot {name:<12} mean ln Phi {v.mean():.4f} (se {se(v):.4f}); minus x1 {x1.mean():+.4f} (se "
              f"{se(x1):.4f}, median {np.median(x1):+.5f}, won {np.mean(x1 < -TIE):.3f}, tied "
              f"{np.mean(abs(x1) <= TIE):.3f}); minus x10 {x10.mean():+.4f} (se {se(x10):.4f}, median "
              f"{np.median(x10):+.5f}, won {np.mean(x10 < -TIE):.3f})")
    for pair, entry in size["pairs"].items():
        print(f"pilot {pair}: mean {entry['mean']:+.5f}, sd {entry['sd']:.5f}, gap {entry['gap']:.4f}, tasks needed "
              f"{entry['tasks_needed']}")
    print(f"validation size: {size['tasks']} (needed {size['needed']}, bounds {size['bounds']})")
    return {"seed": PILOT_SEED, "tasks": tasks, "values": values, "validation_size": size, "times": times}


def stage_validation(tasks: int) -> dict:
    from interp.model.checkpoint import load_model

    points, starts = draw(VALIDATION_SEED, tasks)
    values = candidate_values(load_model(MODEL), points, starts, VALIDATION_SEED)
    choice = choose(values)
    for name, v in values.items():
        print(f"validation {name:<7} mean ln Phi {v.mean():.4f} (se {se(v):.4f})")
    print(f"validation: chosen {choice['chosen']} (lowest {choice['lowest']}, tied {choice['tied']}); minus "
          f"{BASELINE} {choice['chosen_minus_baseline']['mean']:+.4f} ± {choice['chosen_minus_baseline']['se']:.4f}; "
          f"beats it: {choice['beats_baseline']}")
    return {"seed": VALIDATION_SEED, "tasks": tasks, "values": values, "choice": choice}


def timed(run, rounds: int) -> list[float]:
    """Wall times (s) of ``run()``, ``rounds`` times."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def stage_test(choice: dict, tasks_per_seed: int = TEST_TASKS_PER_SEED, rounds: int = TIMING_ROUNDS) -> dict:
    """Every competitor on the test tasks of both seeds, once; then each timed on all of them (``timed``)."""
    from interp.model.checkpoint import load_model

    best, papers = load_model(MODEL), load_model(PAPERS_MODEL)
    chosen = hybrid_name(choice["steps"], choice["lloyd_steps"])
    lloyd_counts = sorted({20, choice["steps"] + choice["lloyd_steps"]})
    drawn = {seed: draw(seed, tasks_per_seed) for seed in TEST_SEEDS}
    values: dict[str, list[np.ndarray]] = {}
    sklearn_runs = {}

    def add(name: str, v: np.ndarray) -> None:
        values.setdefault(name, []).append(v)

    runs = {  # name -> (seed, points, starts) -> centroids (V, k, d): what is timed
        "best_20": lambda seed, p, s: hybrid_runs(best, p, s, seed, 20, 0)[:, -1],
        chosen: lambda seed, p, s: hybrid_runs(best, p, s, seed, choice["steps"], choice["lloyd_steps"])[:, -1],
        "main_onehot_20": lambda seed, p, s: hybrid_runs(papers, p, s, seed, 20, 0)[:, -1],
        **{f"lloyd_{count}": (lambda count: lambda seed, p, s: lloyd_centroids(p, s, count))(count)
           for count in lloyd_counts},
        "torch_kmeanspp_lloyd": lambda seed, p, s: kmeanspp_lloyd_centroids(p, seed),
    }
    for seed, (points, starts) in drawn.items():
        for name, run in runs.items():
            add(name, log_phi(points, run(seed, points, starts)))
        baselines, sklearn_runs[seed] = sklearn_values(points, seed, rounds)
        for name, v in baselines.items():
            add(name, v)
    load = [os.getloadavg()[0]]  # the machine's 1-minute load average around the timings (2 cores, shared)
    times = {name: timed(lambda run=run: [run(seed, *drawn[seed]) for seed in TEST_SEEDS], rounds)
             for name, run in runs.items()}
    load.append(os.getloadavg()[0])
    for n_init in (1, 10):  # each round: both seeds' tasks, as the torch algorithms
        times[f"sklearn_x{n_init}"] = [sum(sklearn_runs[seed]["times"][n_init][r] for seed in TEST_SEEDS)
                                       for r in range(rounds)]
    values = {name: np.concatenate(parts) for name, parts in values.items()}
    order = ["best_20", chosen, "main_onehot_20", *(f"lloyd_{c}" for c in lloyd_counts), "torch_kmeanspp_lloyd",
             "sklearn_x1", "sklearn_x10"]
    values = {name: values[name] for name in dict.fromkeys(order)}
    return {"seeds": list(TEST_SEEDS), "tasks_per_seed": tasks_per_seed, "chosen": chosen, "values": values,
            "times": {name: times[name] for name in values}, "rounds": rounds, "threads": THREADS,
            "load_average": load,
            "sklearn": {str(seed): {"iterations": {str(n): run["iterations"][n] for n in (1, 10)},
                                    "threadpools": run["threadpools"], "torch_imported": run["torch_imported"]}
                        for seed, run in sklearn_runs.items()}}


# ----- verdicts, goals, the record ----------------------------------------------------------------------------------
def summaries(test: dict) -> list[dict]:
    from interp.compare import paired_summary

    return paired_summary(test["values"], ["sklearn_x1", "sklearn_x10"], test["times"], tie=TIE)


def measured_figures(pilot: dict, validation: dict, test: dict, rows: list[dict]) -> dict:
    """The figure each prediction names (analyses/predictions/hybrid.json), from the stages' results."""
    by = {row["name"]: row for row in rows}
    chosen, x1, x10 = by[test["chosen"]], by["sklearn_x1"], by["sklearn_x10"]
    best = by["best_20"]
    return {
        "validation_tasks": validation["tasks"],
        "chosen": validation["choice"]["chosen"],
        "chosen_beats_no_lloyd_on_validation": validation["choice"]["beats_baseline"],
        "chosen_minus_no_lloyd_validation": validation["choice"]["chosen_minus_baseline"]["mean"],
        "test_chosen_minus_x1": chosen["minus_sklearn_x1"],
        "test_chosen_minus_x10": chosen["minus_sklearn_x10"],
        "test_chosen_won_vs_x1": chosen["won_vs_sklearn_x1"],
        "test_chosen_tied_with_x1": chosen["tied_with_sklearn_x1"],
        "test_best20_minus_x1": best["minus_sklearn_x1"],
        "test_best20_won_vs_x1": best["won_vs_sklearn_x1"],
        "test_chosen_time_over_x1": chosen["time_s"] / x1["time_s"],
        "test_chosen_time_over_x10": chosen["time_s"] / x10["time_s"],
        "goal_best20_below_x1": goals(rows, test["chosen"])["best20_below_x1"]["met"],
        "goal_chosen_within_001_of_x10": goals(rows, test["chosen"])["chosen_within_001_of_x10"]["met"],
    }


def goals(rows: list[dict], chosen: str) -> dict:
    """The two goals: best's 20 steps below k-means++ x1 in mean and on a majority of tasks (won, ties not counted);
    with its recommended Lloyd steps within 0.01 of k-means++ x10 in mean (the paired mean difference)."""
    by = {row["name"]: row for row in rows}
    best, hybrid = by["best_20"], by[chosen]
    below = best["minus_sklearn_x1"] < 0 and best["won_vs_sklearn_x1"] > 0.5
    return {"best20_below_x1": {"minus_x1": best["minus_sklearn_x1"], "won_vs_x1": best["won_vs_sklearn_x1"],
                                "met": bool(below)},
            "chosen_within_001_of_x10": {"minus_x10": hybrid["minus_sklearn_x10"],
                                         "met": bool(hybrid["minus_sklearn_x10"] <= 0.01)}}


def _checked(entry: dict) -> None:
    """A committed entry: a named choice or a yes/no (a "value", no "kind"), or a ``Prediction``."""
    if "kind" in entry:
        prediction_of(entry)
    elif not isinstance(entry.get("value"), (str, bool)):
        raise InvalidInput(f"a prediction without a kind must name a choice or a yes/no, got {entry.get('value')!r}")


def judge(predictions: dict, figures: dict) -> dict:
    """Each prediction beside its measured figure and verdict (``preregistration.verdict``; a choice or a yes/no is
    confirmed when equal)."""
    out = {}
    for key, entry in predictions["predictions"].items():
        value = figures[key]
        if "kind" not in entry:
            out[key] = {"measured": value, "verdict": "confirmed" if value == entry["value"] else "refuted"}
        else:
            out[key] = {"measured": value, "verdict": verdict(prediction_of(entry), float(value))}
    return out


def task_rows(pilot: dict, validation: dict, test: dict) -> list[dict]:
    """One row per stage, seed, task and algorithm: {stage, seed, task, algorithm, ln_phi} (task: the index within
    its seed's draw)."""
    rows = []
    for stage, record, seeds in (("pilot", pilot, [pilot["seed"]]), ("validation", validation, [validation["seed"]]),
                                 ("test", test, test["seeds"])):
        per_seed = len(next(iter(record["values"].values()))) // len(seeds)
        for name, values in record["values"].items():
            for index, value in enumerate(values):
                rows.append({"stage": stage, "seed": seeds[index // per_seed], "task": index % per_seed,
                             "algorithm": name, "ln_phi": repr(float(value))})
    return rows


def write_rows(rows: list[dict], path: Path) -> None:
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomically(path, text.getvalue())


def rows_path(out: Path) -> Path:
    """The per-task rows beside the record: ``<out stem>_tasks.csv``."""
    return Path(out).with_name(Path(out).stem + "_tasks.csv")


def without_values(record: dict) -> dict:
    return {key: value for key, value in record.items() if key != "values"}


def record_head(predictions: dict) -> dict:
    """The running command, the commit that last changed the predictions file and its content (as
    ``analyses.framework.measured.record_head``, whose check knows no named choices)."""
    from analyses._shared import file_commit

    return {"command": S.command_line(), "prediction_commit": file_commit(PREDICTIONS),
            "predictions_file": PREDICTIONS.relative_to(ROOT).as_posix(), "predictions": predictions}


def run_all(out: Path, quick: bool, results_md: bool) -> dict:
    predictions = load_predictions(PREDICTIONS, _checked)
    head = record_head(predictions)  # the commit holding them, read before any run
    design = predictions["design"]
    pilot_tasks, rounds = (16, 1) if quick else (PILOT_TASKS, TIMING_ROUNDS)
    print("pilot ...", flush=True)
    pilot = stage_pilot(pilot_tasks)
    registered = design["validation_tasks"]
    if not quick and pilot["validation_size"]["tasks"] != registered:
        raise InvalidInput(f"the pilot gives a validation size of {pilot['validation_size']['tasks']}, the "
                           f"predictions registered {registered}: the pilot is not the one they were made from")
    print("validation ...", flush=True)
    validation = stage_validation(16 if quick else registered)
    print("test ...", flush=True)
    test = stage_test(validation["choice"], 16 if quick else TEST_TASKS_PER_SEED, rounds)
    rows = summaries(test)
    figures = measured_figures(pilot, validation, test, rows)
    record = {**head, "budget": "quick" if quick else "paper",
              "protocol": {"n": N, "d": D, "k": K, "family": "normal", "starts": "random (init_centroids, seed + 1)",
                           "slot_orders": "seed + 2", "model": MODEL, "candidates": CANDIDATES, "tie": TIE,
                           "min_gap": MIN_GAP, "se_fraction": SE_FRACTION, "win_ses": WIN_SES,
                           "rows": rows_path(out).name},
              "pilot": without_values(pilot), "validation": without_values(validation),
              "test": {**without_values(test), "summary": rows, "labels": {row["name"]: label(row["name"])
                                                                          for row in rows}},
              "goals": goals(rows, test["chosen"]), "measured": figures,
              "verdicts": judge(predictions, figures)}
    write_rows(task_rows(pilot, validation, test), rows_path(out))
    write_text_atomically(out, json.dumps(record, indent=1) + "\n")
    print(f"wrote {out} and {rows_path(out)}")
    from interp.compare import paired_markdown

    print(paired_markdown(rows, ["sklearn_x1", "sklearn_x10"], record["test"]["labels"]))
    for key, entry in record["verdicts"].items():
        print(f"prediction {key}: measured {entry['measured']}, {entry['verdict']}")
    print(f"goals: {json.dumps(record['goals'])}")
    if results_md:
        S.write_section(SECTION_KEY, results_section(record))
    return record


def tensor_digests(tensors: dict[str, torch.Tensor]) -> dict[str, str]:
    """sha256 of each tensor's dtype, shape and bytes."""
    import hashlib

    return {name: hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|".encode() + t.contiguous().view(torch.uint8).numpy()
                                 .tobytes()).hexdigest() for name, t in sorted(tensors.items())}


def stage_ship(out: Path) -> dict:
    """Where the validation's choice beats T20+L0 (the committed rule), write its steps and Lloyd steps into best's
    ``inference`` metadata: the checkpoint read (``load_checkpoint``, its digest checked) and written again with the
    same tensors and the new metadata (``save_checkpoint``), the tensors' bytes checked equal; else nothing."""
    from interp.model.checkpoint import load_checkpoint, save_checkpoint

    record = json.loads(Path(out).read_text())
    choice = record["validation"]["choice"]
    tensors, metadata = load_checkpoint(SHIPPED)
    if not choice["beats_baseline"]:
        print(f"the choice {choice['chosen']} does not beat {BASELINE} on validation: best is left as it is")
        return metadata.get("inference", {})
    inference = {**metadata["inference"], "steps": choice["steps"], "lloyd_steps": choice["lloyd_steps"]}
    before = tensor_digests(tensors)
    save_checkpoint(SHIPPED, tensors, {**metadata, "inference": inference})
    after, written = load_checkpoint(SHIPPED)
    if tensor_digests(after) != before or written["inference"] != inference:
        raise RuntimeError(f"{SHIPPED}: the rewritten checkpoint's tensors or inference differ from what was meant")
    print(f"best.safetensors now recommends {inference}; its {len(before)} tensors unchanged byte for byte")
    return inference


# ----- the section ---------------------------------------------------------------------------------------------------
def _f(value: float, digits: int = 4, sign: bool = False) -> str:
    return f"{value:{'+' if sign else ''}.{digits}f}"


def results_section(record: dict) -> str:
    """The RESULTS.md section ``hybrid`` from the committed record (and best's committed metadata)."""
    from interp.compare import paired_markdown
    from interp.model.checkpoint import read_header

    pilot, validation, test = record["pilot"], record["validation"], record["test"]
    choice, size = validation["choice"], pilot["validation_size"]
    rows, labels = test["summary"], test["labels"]
    by = {row["name"]: row for row in rows}
    predictions = record["predictions"]["predictions"]
    lines = [
        "## Hybrid inference: best's learned steps, then Lloyd steps",
        "",
        f"Command: `{record['command']}`  ",
        f"Tasks: the main configuration (n = {record['protocol']['n']}, d = {record['protocol']['d']}, k = "
        f"{record['protocol']['k']}, normal), drawn as `interp evaluate` draws them; random starts (k points of the "
        "task, seed + 1), shuffled slot orders for best (seed + 2), main-onehot in fixed slots; every algorithm scored "
        "in float64 (ln Φ); a task with |difference| ≤ "
        f"{record['protocol']['tie']:g} is a tie (the same partition), not a win. Candidates `TT+LL`: T learned "
        "steps of best, then L Lloyd steps (`interp.hybrid.hybrid`). Predictions, the selection rule and the "
        f"validation size: `{record['predictions_file']}` ({record['prediction_commit']['commit'][:7]}), committed "
        "before the validation and test runs.",
        "",
        f"Pilot (seed {pilot['seed']}, {pilot['tasks']} tasks), the validation size: for each pair of candidates "
        "adjacent in total steps, the paired difference's sd s and gap g = max(|mean|, "
        f"{record['protocol']['min_gap']}); tasks needed = ⌈(3 s / g)²⌉ (the SE of the difference below a third of "
        "the gap):",
        "",
        "| pair | mean difference | sd | gap | tasks needed |",
        "|---|---|---|---|---|",
        *[f"| {pair} | {_f(entry['mean'], 4, True)} | {_f(entry['sd'])} | {_f(entry['gap'])} | "
          f"{entry['tasks_needed']} |" for pair, entry in size["pairs"].items()],
        "",
        f"Validation size: {size['tasks']} tasks (needed {size['needed']}, within {size['bounds'][0]} to "
        f"{size['bounds'][1]}).",
        "",
        f"Validation (seed {validation['seed']}, {validation['tasks']} tasks): mean ln Φ ± SE, and the paired "
        f"difference to the lowest, {choice['lowest']} (from the per-task rows):",
        "",
        "| candidate | total steps | mean ± SE | minus the lowest: mean ± SE | tied with it |",
        "|---|---|---|---|---|",
        *[f"| {name} | {sum(record['protocol']['candidates'][name])} | {_f(v.mean())} ± {_f(se(v))} | "
          f"{_f((v - lowest).mean(), 6, True)} ± {_f(se(v - lowest) if name != choice['lowest'] else 0.0, 6)} | "
          f"{'yes' if name in choice['tied'] else 'no'} |"
          for values in [validation_values(record)] for lowest in [values[choice["lowest"]]]
          for name, v in values.items()],
        "",
        *near_misses(record, choice),
        f"Chosen (the fewest total steps among the tied): **{choice['chosen']}**, minus T20+L0 "
        f"{_f(choice['chosen_minus_baseline']['mean'], 4, True)} ± {_f(choice['chosen_minus_baseline']['se'])}: "
        + ("it beats T20+L0 (below −2 SE)." if choice["beats_baseline"] else "it does not beat T20+L0 by the rule."),
        "",
        f"Test (seeds {', '.join(map(str, test['seeds']))}, {test['tasks_per_seed']} tasks each, "
        f"{test['tasks_per_seed'] * len(test['seeds'])} in all, run once after the choice): mean ln Φ ± SE over tasks; "
        "minus k-means++ x1 and x10: the paired per-task difference, mean ± SE, its median and the share of tasks "
        f"won (lower by more than the tie tolerance); time: median of {test['rounds']} wall times over all test "
        f"tasks at {test['threads']} thread (torch in this process, chunks of {CHUNK} tasks; scikit-learn in a "
        "process that never imported torch; the machine's 1-minute load average "
        f"{' and '.join(f'{x:.1f}' for x in test['load_average'])} before and after, on 2 cores shared with other "
        "work):",
        "",
        paired_markdown(rows, ["sklearn_x1", "sklearn_x10"], labels, reference_labels=SHORT),
        "",
        "Tied shares (|difference| ≤ the tie tolerance) against x1 / x10: "
        + "; ".join(f"{labels[row['name']].strip('*')} {row['tied_with_sklearn_x1']:.1%} / "
                    f"{row['tied_with_sklearn_x10']:.1%}" for row in rows) + ".",
        "",
        "Times over k-means++ x1 / x10: " + "; ".join(
            f"{labels[row['name']].strip('*')} {row['time_s'] / by['sklearn_x1']['time_s']:.2f} / "
            f"{row['time_s'] / by['sklearn_x10']['time_s']:.2f}" for row in rows) + ".",
        "",
        "| prediction | predicted | measured | verdict |",
        "|---|---|---|---|",
    ]
    for key, found in record["verdicts"].items():
        entry = predictions[key]
        if "kind" in entry:
            predicted = f"{entry['kind'].replace('_', ' ')} {entry['value']:g} (tolerance {entry['tolerance']:g})"
            measured = f"{found['measured']:.4f}" if isinstance(found["measured"], float) else str(found["measured"])
        else:
            predicted, measured = str(entry["value"]), str(found["measured"])
        lines.append(f"| {key}: {entry['quantity']} | {predicted} | {measured} | {found['verdict']} |")
    below, within = record["goals"]["best20_below_x1"], record["goals"]["chosen_within_001_of_x10"]
    inference = read_header(SHIPPED)[0].get("inference", {})
    recommended = (inference.get("steps"), inference.get("lloyd_steps", 0))
    shipped = (f"interp/pretrained/best.safetensors recommends {recommended[0]} steps and {recommended[1]} Lloyd "
               "steps (metadata `inference`)")
    if not choice["beats_baseline"]:
        shipped += "; the choice did not beat T20+L0 on validation, so it was left as it was."
    elif recommended == (choice["steps"], choice["lloyd_steps"]):
        shipped += f", set from this choice by `{PROG} --stage ship` (the tensors byte for byte as before)."
    else:
        shipped += f"; the choice beats T20+L0 on validation but is not written there yet (`{PROG} --stage ship`)."
    lines += [
        "",
        "Goals. Learned default below k-means++ x1 in mean and on the majority of tasks (20 steps, random starts): "
        f"**{'met' if below['met'] else 'missed'}** (minus x1 {_f(below['minus_x1'], 4, True)}, won on "
        f"{below['won_vs_x1']:.1%} of the tasks). With its recommended Lloyd steps within 0.01 of k-means++ x10: "
        f"**{'met' if within['met'] else 'missed'}** ({choice['chosen']}, minus x10 "
        f"{_f(within['minus_x10'], 4, True)}).",
        "",
        f"Shipped: {shipped}",
    ]
    return "\n".join(lines) + "\n"


def near_misses(record: dict, choice: dict) -> list[str]:
    """A sentence (and a blank line) naming the candidates within the smallest gap of interest (``min_gap``) of the
    lowest that the registered rule does not tie with it, since it ties only within one paired SE; none: no lines."""
    values = validation_values(record)
    lowest, gap = values[choice["lowest"]], record["protocol"]["min_gap"]
    close = [(name, float((v - lowest).mean()), se(v - lowest)) for name, v in values.items()
             if name not in choice["tied"] and (v - lowest).mean() < gap]
    if not close:
        return []
    return ["The rule ties only within one paired SE: "
            + "; ".join(f"{name} lies {_f(mean, 6)} above {choice['lowest']}, below the smallest gap of interest "
                        f"({gap:g}) but {mean / error:.1f} SE away, so it is not tied" for name, mean, error in close)
            + ".", ""]


def validation_values(record: dict, out: Path = DEFAULT_OUT) -> dict[str, np.ndarray]:
    """Each candidate's validation ln Phi per task, in task order, from the rows beside the record."""
    found: dict[str, list] = {}
    with open(Path(out).with_name(record["protocol"]["rows"]), newline="") as handle:
        for row in csv.DictReader(handle):
            if row["stage"] == "validation":
                found.setdefault(row["algorithm"], []).append((int(row["task"]), float(row["ln_phi"])))
    return {name: np.array([value for _, value in sorted(entries)]) for name, entries in found.items()}


def section() -> str:
    """The section from the committed JSON (``render``)."""
    return results_section(json.loads(DEFAULT_OUT.read_text()))


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=STAGES, default="all")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--quick", action="store_true", help="a smoke run: 16 tasks per stage, one timing round")
    parser.add_argument("--results-md", action="store_true", help="put the section into analyses/RESULTS.md")
    args = parser.parse_args(argv)
    torch.set_num_threads(THREADS)
    if args.stage == "pilot":
        pilot = stage_pilot(16 if args.quick else PILOT_TASKS)
        return {"pilot": {**without_values(pilot), "means": {k: float(v.mean()) for k, v in pilot["values"].items()}}}
    if args.stage == "ship":
        return stage_ship(Path(args.out))
    out = check_output_file(args.out, "--out")
    check_output_file(rows_path(out), "--out's rows")
    return run_all(out, args.quick, args.results_md)


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
