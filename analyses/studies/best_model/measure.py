"""The learned default: models trained for how they are used, chosen on validation tasks, scored once on test tasks.

The shipped main-onehot model was trained, as in paper 2 (§3, Alg. 1), on one step from random starts with its centroids
always in the same slots. At inference it runs 20 re-embedded steps, and a fresh random slot order at every step
(``KMeansTransformer.forward(slot_order="shuffle")``) lowers its 20-step objective by about 0.3 (the slot study,
``analyses.studies.slots.measure``). This script fine-tunes main-onehot for that use (``interp.training``:
``TrainConfig`` slot_order, unroll, rollout, init_from, attn_xx_identity), each candidate fixed with its predicted
effect before any candidate was scored (``analyses/predictions/best_model.json`` and ``best_model_local.json``):

* ``shuffle``: the papers' one-step loss with the slot order shuffled in training;
* ``unroll3``: the loss on the centroids after 3 re-embedded steps, gradient through all three;
* ``rollout``: s ~ U{0..19} steps without gradient first, then 2 with gradient: trained on the states the model
  itself reaches late in a run;
* ``local-*``: the same three with the points-to-points attention replaced by its identity pattern (O(n) per step).

The validation tasks choose; the committed shipping rule prefers a local candidate within 0.005 of the best; the test
tasks are scored once, after the choice; ``analyses/predictions/best_model_explain.json`` holds the predictions of
the explanation stage. Stages (each resumable; results merged into ``--out`` as they finish), each run as
``python -m analyses.studies.best_model.measure`` with:

    --stage train      # train the six candidates into runs/best/
    --stage choose     # validation tasks: each candidate's mean ln Phi; the choices
    --stage test       # test tasks, once: every candidate, main-onehot (fixed and
                       # shuffled), Lloyd, scikit-learn k-means++ (1 and 10 starts);
                       # wall times; the slot-specific spread; the verdicts
    --stage ship       # the shipped candidate as interp/pretrained/best.safetensors
                       # with its inference settings (20 steps, shuffled slots)
    --stage protocol   # interp.evaluate's four protocols: best beside main-onehot
    --stage explain    # why it works: true components covered, symmetric share
    --results-md       # the RESULTS.md section from --out

The metric is the mean over tasks of ln Phi (Phi = sum_i min_j ||x_i - c_j||^2) after 20 steps from random starts
(the first k = 10 points of each shuffled task), tasks of the main configuration (n = 512, d = 32, k = 10).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import Tensor

from analyses import _shared
from analyses._shared import final_rows
from analyses.framework.preregistration import load_predictions, prediction_of, verdict
from interp import _arguments as arguments
from interp._checks import InvalidInput, check_output_file

PROG = "python -m analyses.best_model"
ROOT = _shared.ROOT
PREDICTIONS = ROOT / "analyses" / "predictions" / "best_model.json"  # the three designs
LOCAL_PREDICTIONS = ROOT / "analyses" / "predictions" / "best_model_local.json"  # the same with a local attn_xx
ROUND2_PREDICTIONS = ROOT / "analyses" / "predictions" / "best_model_round2.json"  # two more local candidates
EXPLAIN_PREDICTIONS = ROOT / "analyses" / "predictions" / "best_model_explain.json"  # why the shipped one works
DEFAULT_OUT = ROOT / "analyses" / "results" / "best_model.json"
RUNS = ROOT / "runs" / "best"
SHIPPED = ROOT / "interp" / "pretrained" / "best.safetensors"
SECTION_KEY = "best_model"
STAGES = ("train", "choose", "test", "ship", "protocol", "explain")

COMMON = {"init_from": "main-onehot", "lr": 0.001, "steps": 2000, "val_tasks": 128, "eval_steps": 20,
          "eval_every": 100, "slot_order": "shuffle", "seed": 20261202}
FULL = {"shuffle": {"unroll": 1}, "unroll3": {"unroll": 3}, "rollout": {"unroll": 2, "rollout": 19}}
LOCAL = {f"local-{name}": {**design, "attn_xx_identity": True} for name, design in FULL.items()}
ROUND2 = {"local-rollout-long": {**LOCAL["local-rollout"], "lr": 0.0002, "steps": 6000},
          "local-rollout-scratch": {**LOCAL["local-rollout"], "init_from": None, "lr": 0.01, "steps": 10_000}}
FIRST_SIX = {**FULL, **LOCAL}
CANDIDATES = {**FIRST_SIX, **ROUND2}
LOCAL_CANDIDATES = (*LOCAL, *ROUND2)
LOCAL_MARGIN = 0.005  # the shipping rule: a local candidate within this of the lowest validation mean is shipped
VALIDATION_SEED, VALIDATION_TASKS = 20261203, 96
TEST_SEED, TEST_TASKS = 20261204, 192
STEPS, K = 20, 10
RECOMMENDED = {"steps": STEPS, "slot_order": "shuffle"}
SPREAD_TASKS, SPREAD_PERMUTATIONS = 64, 64  # also the tasks of the explain stage
TIMING_ROUNDS = 3


def candidate_config(name: str):
    """The ``TrainConfig`` of candidate ``name``."""
    from interp.training.config import TrainConfig

    return TrainConfig(**{**COMMON, **CANDIDATES[name]})


def command_line(name: str) -> str:
    """The ``interp train`` command that trains candidate ``name`` (the same run as ``--stage train``)."""
    options = {**COMMON, **CANDIDATES[name]}
    flags = " ".join(f"--{key.replace('_', '-')} {value}" for key, value in options.items() if value is not None)
    return f"interp train --out runs/best/{name}.safetensors {flags}"


def tasks(seed: int, count: int) -> tuple[Tensor, Tensor]:
    """``count`` main-configuration tasks (count, 512, 32) float32 from ``seed`` and their random starts (count, 10,
    32): the first 10 points of each shuffled task."""
    from interp.tasks import TaskConfig, init_centroids, sample_tasks

    points = sample_tasks(TaskConfig(n=512, d=32, k=K), count, torch.Generator().manual_seed(seed)).points
    return points, init_centroids(points, K, "first")


@torch.no_grad()
def model_log_objectives(model, points: Tensor, init: Tensor, slot_order: str, seed: int) -> Tensor:
    """ln Phi (V,) after ``STEPS`` steps of ``model`` in ``slot_order`` (shuffled orders from ``seed``), 64 tasks
    per forward."""
    from interp.algorithms import log_objective

    model.eval()
    generator = torch.Generator().manual_seed(seed)
    values = [log_objective(points[i : i + 64], model(points[i : i + 64], init[i : i + 64], steps=STEPS,
                                                      slot_order=slot_order, generator=generator).centroids)
              for i in range(0, len(points), 64)]
    return torch.cat(values).double()


def paired(values: Tensor, reference: Tensor) -> dict:
    """Mean of the per-task difference values - reference and its standard error."""
    diff = values - reference
    return {"mean": diff.mean().item(), "se": (diff.std() / math.sqrt(len(diff))).item()}


def summary_of(values: Tensor) -> dict:
    return {"mean": values.mean().item(), "se": (values.std() / math.sqrt(len(values))).item()}


def load_run(name: str):
    from interp.model.checkpoint import load_model

    path = RUNS / f"{name}.safetensors"
    if not path.is_file():
        raise InvalidInput(f"{path} is missing: run {PROG} --stage train first")
    return load_model(path)


def stage_train(threads: int) -> dict:
    """Train (or resume, or find finished) every candidate to its registered steps."""
    from interp.training.train import train

    torch.set_num_threads(threads)
    RUNS.mkdir(parents=True, exist_ok=True)
    for name in CANDIDATES:
        meta = train(candidate_config(name), RUNS / f"{name}.safetensors", progress=False)
        print(f"{name}: step {meta['step']}, relative validation objective (20 steps / one Lloyd step) "
              f"{meta['history'][-1]['relative_objective']:.4f}")
    return {"runs": run_records()}


def run_records() -> dict:
    """Per candidate: its command, the steps its checkpoint in RUNS holds, whether that is the registered number
    (``complete``) and its last relative validation objective (20 steps / one Lloyd step)."""
    from interp.model.checkpoint import read_header

    records = {}
    for name in CANDIDATES:
        path = RUNS / f"{name}.safetensors"
        if not path.is_file():
            raise InvalidInput(f"{path} is missing: run {PROG} --stage train first")
        meta, _ = read_header(path)
        records[name] = {"command": command_line(name), "steps": meta["step"],
                         "complete": meta["step"] == candidate_config(name).steps,
                         "final_validation": meta["history"][-1]["relative_objective"]}
    return records


def shipping_choice(scores: dict, candidates, local) -> str:
    """The committed shipping rule: the lowest validation mean among ``candidates``, unless the best of the ``local``
    ones is within LOCAL_MARGIN of it, which is then shipped (it is several times faster)."""
    lowest = min(candidates, key=lambda name: scores[name]["mean"])
    best_local = min(local, key=lambda name: scores[name]["mean"])
    return best_local if scores[best_local]["mean"] <= scores[lowest]["mean"] + LOCAL_MARGIN else lowest


def stage_choose() -> dict:
    """Validation tasks: every candidate's mean ln Phi; ``chosen`` the best of the three designs (FULL); the shipping
    rule (``shipping_choice``) over the first six (best_model_local.json) and over all eight (best_model_round2.json,
    the one shipped)."""
    from interp.model.checkpoint import load_model

    runs = run_records()
    complete = [name for name in CANDIDATES if runs[name]["complete"]]  # a run stopped early is scored, not chosen
    points, init = tasks(VALIDATION_SEED, VALIDATION_TASKS)
    scores = {name: summary_of(model_log_objectives(load_run(name), points, init, "shuffle", VALIDATION_SEED + 1))
              for name in CANDIDATES}
    main = load_model("main-onehot")
    for order in ("fixed", "shuffle"):
        scores[f"main-onehot {order}"] = summary_of(model_log_objectives(main, points, init, order,
                                                                         VALIDATION_SEED + 1))
    if any(name not in complete for name in FIRST_SIX):
        raise InvalidInput(f"the first six candidates must be trained to their registered steps: run {PROG} --stage "
                           "train")
    chosen = min(FULL, key=lambda name: scores[name]["mean"])
    best_local = min(LOCAL, key=lambda name: scores[name]["mean"])
    shipped_of_six = shipping_choice(scores, FIRST_SIX, LOCAL)
    shipped = shipping_choice(scores, complete, [name for name in LOCAL_CANDIDATES if name in complete])
    for name, score in scores.items():
        print(f"validation {name:<22} mean ln Phi {score['mean']:.4f} (se {score['se']:.4f})")
    print(f"chosen among the three designs: {chosen}; best local of the first six: {best_local}; shipped by the rule "
          f"over the first six: {shipped_of_six}; over the {len(complete)} complete candidates: {shipped}")
    return {"runs": runs, "validation": {
        "seed": VALIDATION_SEED, "tasks": VALIDATION_TASKS, "scores": scores, "chosen": chosen,
        "best_local": best_local, "shipped_of_six": shipped_of_six, "shipped": shipped, "ruled_over": complete}}


SKLEARN_TIMING = r"""
import json, sys, time
import numpy as np
from threadpoolctl import threadpool_limits
from sklearn.cluster import KMeans
assert "torch" not in sys.modules
tasks = np.load(sys.argv[1])
rounds, threads = int(sys.argv[2]), int(sys.argv[3])
times, centres = [], {}
with threadpool_limits(threads):
    for n_init in (1, 10):
        for _ in range(rounds if n_init == 10 else 1):
            start = time.perf_counter()
            found = [KMeans(10, init="k-means++", n_init=n_init, random_state=i).fit(t).cluster_centers_
                     for i, t in enumerate(tasks)]
            if n_init == 10:
                times.append(time.perf_counter() - start)
        centres[n_init] = np.stack(found).tolist()
print(json.dumps({"times": times, "centres": centres, "torch_imported": "torch" in sys.modules}))
"""


def sklearn_run(points: Tensor, threads: int) -> dict:
    """scikit-learn's KMeans (k-means++, n_init 1 and 10, to convergence, random_state = task index) on each task,
    in a process that never imports torch, at ``threads`` threads: the centres and the n_init = 10 wall times."""
    import numpy as np

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tasks.npy"
        np.save(path, points.double().numpy())
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        done = subprocess.run([sys.executable, "-c", SKLEARN_TIMING, str(path), str(TIMING_ROUNDS), str(threads)],
                              capture_output=True, text=True, env=env, check=True, timeout=3600)
    return json.loads(done.stdout)


def _checked(entry: dict) -> None:
    """A committed entry: a named choice or a yes/no (a "value", no "kind") or a ``Prediction``."""
    if "kind" in entry:
        prediction_of(entry)
    elif not isinstance(entry["value"], (str, bool)):
        raise InvalidInput(f"a prediction without a kind must name a choice or a yes/no, got {entry['value']!r}")


def judged(measured: dict, predictions_file: Path) -> dict:
    """Each measured figure beside its prediction in ``predictions_file`` and the verdict
    (``analyses.framework.preregistration.verdict``; a named choice or a yes/no is confirmed when equal)."""
    predictions = load_predictions(predictions_file, _checked)["predictions"]
    verdicts = {}
    for key, value in measured.items():
        spec = predictions[key]
        if isinstance(value, (str, bool)):
            verdicts[key] = {"predicted": spec["value"], "measured": value,
                             "verdict": "confirmed" if value == spec["value"] else "refuted"}
            continue
        prediction = prediction_of(spec)
        verdicts[key] = {"predicted": spec["value"], "tolerance": spec["tolerance"], "kind": spec["kind"],
                         "measured": value, "verdict": verdict(prediction, value)}
    return verdicts


def timed_steps(model, points: Tensor, init: Tensor) -> list[float]:
    """Wall times (s) of ``STEPS`` shuffled steps of ``model`` on all tasks at once, ``TIMING_ROUNDS`` times."""
    times = []
    with torch.no_grad():
        for _ in range(TIMING_ROUNDS):
            start = time.perf_counter()
            model(points, init, steps=STEPS, slot_order="shuffle", generator=TEST_SEED + 1)
            times.append(time.perf_counter() - start)
    return times


def stage_test(data: dict, threads: int) -> dict:
    from interp.algorithms import lloyd, log_objective
    from interp.instruments.symmetry import symmetric_split
    from interp.model.checkpoint import load_model

    if "validation" not in data:
        raise InvalidInput(f"the test stage scores the validation's choice: run {PROG} --stage choose first")
    chosen, best_local, shipped_of_six, shipped = (data["validation"][key] for key in
                                                   ("chosen", "best_local", "shipped_of_six", "shipped"))
    torch.set_num_threads(threads)
    points, init = tasks(TEST_SEED, TEST_TASKS)
    main = load_model("main-onehot")
    values = {name: model_log_objectives(load_run(name), points, init, "shuffle", TEST_SEED + 1) for name in CANDIDATES}
    for order in ("fixed", "shuffle"):
        values[f"main-onehot {order}"] = model_log_objectives(main, points, init, order, TEST_SEED + 1)
    values["lloyd"] = log_objective(points, lloyd(points, init, STEPS).centroids).double()
    sklearn = sklearn_run(points, threads)
    for n_init in (1, 10):
        centres = torch.tensor(sklearn["centres"][str(n_init)], dtype=torch.float64)  # (V, k, d)
        values[f"kmeanspp_{n_init}"] = log_objective(points.double(), centres)
    times = {name: timed_steps(load_run(name), points, init) for name in dict.fromkeys((chosen, best_local, shipped))}
    sklearn_time = statistics.median(sklearn["times"])
    ratio = {name: statistics.median(t) / sklearn_time for name, t in times.items()}
    spreads = {name: symmetric_split(model, points[:SPREAD_TASKS], init[:SPREAD_TASKS], SPREAD_PERMUTATIONS,
                                     TEST_SEED + 2).permutation_spread
               for name, model in {"main-onehot": main, chosen: load_run(chosen), shipped: load_run(shipped)}.items()}

    shuffled = values["main-onehot shuffle"]
    designs = judged({
        "chosen": chosen,
        "shuffle_minus_fixed_main_onehot": paired(shuffled, values["main-onehot fixed"])["mean"],
        **{f"delta_{name}": paired(values[name], shuffled)["mean"] for name in FULL},
        "chosen_minus_kmeanspp10": paired(values[chosen], values["kmeanspp_10"])["mean"],
        "chosen_minus_kmeanspp1": paired(values[chosen], values["kmeanspp_1"])["mean"],
        "time_ratio": ratio[chosen],
        "spread_ratio": spreads["main-onehot"] / spreads[chosen],
    }, PREDICTIONS)
    local = judged({
        **{f"local_minus_full_{name}": paired(values[f"local-{name}"], values[name])["mean"] for name in FULL},
        "shipped_is_local": shipped_of_six in LOCAL,
        "local_time_ratio": ratio[best_local],
    }, LOCAL_PREDICTIONS)
    round2_measured = {
        "long_minus_local_rollout": paired(values["local-rollout-long"], values["local-rollout"])["mean"],
        "scratch_minus_local_rollout": paired(values["local-rollout-scratch"], values["local-rollout"])["mean"],
        "shipped_minus_kmeanspp10": paired(values[shipped], values["kmeanspp_10"])["mean"],
    }
    round2 = judged(round2_measured, ROUND2_PREDICTIONS)
    runs = data.get("runs", {})
    for key, name in (("long_minus_local_rollout", "local-rollout-long"),
                      ("scratch_minus_local_rollout", "local-rollout-scratch")):
        if not runs.get(name, {}).get("complete", False):  # not the registered design: no verdict
            round2[key]["verdict"] = f"not tested: {name} stopped at step {runs[name]['steps']}"
    shipped_time = statistics.median(times[shipped])
    goals = {
        "below_kmeanspp_1": paired(values[shipped], values["kmeanspp_1"])["mean"] < 0,
        "within_0.01_of_kmeanspp_10": paired(values[shipped], values["kmeanspp_10"])["mean"] <= 0.01,
        "faster_than_kmeanspp_10": shipped_time < sklearn_time,
    }
    for name, v in values.items():
        print(f"test {name:<22} mean ln Phi {v.mean().item():.4f} (se {v.std().item() / math.sqrt(len(v)):.4f})")
    for key, entry in {**designs, **local, **round2}.items():
        print(f"{key:<34} predicted {entry['predicted']!s:<8} measured {entry['measured']!s:<22} {entry['verdict']}")
    print(f"goals for the shipped model ({shipped}): {goals}")
    return {"test": {
        "seed": TEST_SEED, "tasks": TEST_TASKS, "chosen": chosen, "best_local": best_local,
        "shipped_of_six": shipped_of_six, "shipped": shipped,
        "threads": threads,
        "scores": {name: summary_of(v) for name, v in values.items()},
        "differences": {f"{name} - kmeanspp_10": paired(v, values["kmeanspp_10"]) for name, v in values.items()},
        "shipped_minus_main_onehot": {order: paired(values[shipped], values[f"main-onehot {order}"])
                                      for order in ("fixed", "shuffle")},
        "times": {"model_20_steps_s": times, "sklearn_kmeanspp_10_s": sklearn["times"],
                  "sklearn_process_imported_torch": sklearn["torch_imported"]},
        "slot_specific_spread": spreads, "verdicts": {"designs": designs, "local": local, "round2": round2},
        "goals": goals}}


def stage_ship(data: dict) -> dict:
    """Write the chosen candidate as best with RECOMMENDED (20 shuffled steps, no Lloyd steps after them); the Lloyd
    steps best recommends were chosen later by the hybrid study: rerun ``python -m analyses.studies.hybrid.measure
    --stage ship`` after this stage to write them again."""
    from interp.model.checkpoint import load_checkpoint, save_model
    from interp.model.config import InferenceSettings

    if "test" not in data:
        raise InvalidInput(f"ship the tested choice: run {PROG} --stage test first")
    chosen = data["test"]["shipped"]
    model = load_run(chosen)
    _, meta = load_checkpoint(RUNS / f"{chosen}.safetensors")
    model.inference = InferenceSettings(**RECOMMENDED)
    save_model(SHIPPED, model, train_config=meta["train_config"], history=meta["history"], step=meta["step"],
               source=f"{PROG}: candidate {chosen!r}, chosen on validation tasks ({command_line(chosen)})")
    print(f"wrote {SHIPPED}: candidate {chosen}, inference {RECOMMENDED}")
    return {"shipped": {"name": "best", "candidate": chosen, "inference": RECOMMENDED}}


EVALUATIONS = ROOT / "analyses" / "results"  # eval-<checkpoint>/summary.csv, written by interp evaluate


def evaluation_command(checkpoint: str, out: Path, n_tasks: int, threads: int) -> list[str]:
    """The ``interp evaluate`` command of the papers' protocol (main, length, shift, family) for ``checkpoint``."""
    return [sys.executable, "-m", "interp.cli", "evaluate", "--checkpoint", checkpoint, "--out", str(out),
            "--protocols", "main", "length", "shift", "family", "--tasks", str(n_tasks), "--threads", str(threads)]


def stage_protocol(threads: int, n_tasks: int) -> dict:
    """``interp evaluate`` on the shipped best (its recommended settings) into analyses/results/eval-best, beside
    the committed evaluation of main-onehot (the same tasks: the protocol's default seed and task count) and the
    scikit-learn columns of best's evaluation."""
    out = EVALUATIONS / "eval-best"
    subprocess.run(evaluation_command(str(SHIPPED), out, n_tasks, threads), check=True, cwd=ROOT)
    best, main = final_rows(out / "summary.csv"), final_rows(EVALUATIONS / "eval-main-onehot" / "summary.csv")
    table = {"|".join(key): {"best": float(row["model_median"]), "main-onehot": float(main[key]["model_median"]),
                             "lloyd": float(row["lloyd_median"]), "kmeanspp_1": float(row["kmeanspp_1"]),
                             "kmeanspp_10": float(row["kmeanspp_10"])} for key, row in best.items()}
    for key, row in best.items():
        if abs(float(main[key]["lloyd_median"]) - float(row["lloyd_median"])) > 1e-6:
            raise ValueError(f"Lloyd differs between the two evaluations at {key}: not the same tasks")
    for key, entry in table.items():
        print(f"{key:<40} best {entry['best']:.4f} main-onehot {entry['main-onehot']:.4f} Lloyd {entry['lloyd']:.4f}"
              f" km++x1 {entry['kmeanspp_1']:.4f} km++x10 {entry['kmeanspp_10']:.4f}")
    worse = [key for key, entry in table.items() if entry["best"] > entry["main-onehot"]]
    shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    command = " ".join(["interp", *evaluation_command("best", shown, n_tasks, threads)[3:]])
    return {"protocol": {"tasks": n_tasks, "command": command, "steps": STEPS, "rows": table,
                         "best_worse_than_main_onehot": worse}}


def stage_explain() -> dict:
    """Why the shipped model works (predictions in best_model_explain.json): on the first SPREAD_TASKS test tasks,
    the true components its 20-step run covers against main-onehot's, where its gain in ln Phi lies, and how much of
    its one-step update the slot-symmetric part explains."""
    from analyses.studies.slots.measure import covered
    from interp.algorithms import log_objective
    from interp.instruments.symmetry import component_means, symmetric_split
    from interp.model.checkpoint import load_model
    from interp.tasks import TaskConfig, sample_tasks

    batch = sample_tasks(TaskConfig(n=512, d=32, k=K), TEST_TASKS, torch.Generator().manual_seed(TEST_SEED))
    points, labels = batch.points[:SPREAD_TASKS], batch.labels[:SPREAD_TASKS]
    init = points[:, :K]  # (b, k, d): the random starts of ``tasks``
    means = component_means(points, labels, K)  # (b, k, d)
    shipped, main = load_model(SHIPPED), load_model("main-onehot")
    runs = {"best": (shipped, "shuffle"), "main-onehot shuffle": (main, "shuffle"),
            "main-onehot fixed": (main, "fixed")}
    coverage, objective = {}, {}
    with torch.no_grad():
        for name, (model, order) in runs.items():
            centroids = model(points, init, steps=STEPS, slot_order=order, generator=TEST_SEED + 1).centroids
            coverage[name] = covered(centroids, means)  # (b,)
            objective[name] = log_objective(points, centroids).double()  # (b,)
    gain = objective["main-onehot shuffle"] - objective["best"]  # (b,): > 0 where best is lower
    differs = coverage["best"] != coverage["main-onehot shuffle"]
    splits = {name: symmetric_split(model, points, init, SPREAD_PERMUTATIONS, TEST_SEED + 2)
              for name, model in (("best", shipped), ("main-onehot", main))}
    measured = {
        "coverage_gain": (coverage["best"] - coverage["main-onehot shuffle"]).mean().item(),
        "coverage_share_of_gain": (gain[differs].sum() / gain.sum()).item(),
        "symmetric_r2_gain": splits["best"].r2_symmetric_corrected - splits["main-onehot"].r2_symmetric_corrected,
    }
    verdicts = judged(measured, EXPLAIN_PREDICTIONS)
    for key, entry in verdicts.items():
        print(f"{key:<24} predicted {entry['kind']} {entry['predicted']} measured {entry['measured']:+.4f} "
              f"{entry['verdict']}")
    return {"explain": {
        "tasks": SPREAD_TASKS, "seed": TEST_SEED,
        "coverage": {name: summary_of(c) for name, c in coverage.items()},
        "all_covered": {name: (c == K).double().mean().item() for name, c in coverage.items()},
        "tasks_with_other_coverage": int(differs.sum()),
        "gain": {"total_mean": gain.mean().item(), "where_coverage_differs": gain[differs].sum().item() / len(gain),
                 "where_coverage_equal": gain[~differs].sum().item() / len(gain)},
        "symmetric": {name: {"r2_symmetric_corrected": split.r2_symmetric_corrected,
                             "permutation_spread": split.permutation_spread} for name, split in splits.items()},
        "verdicts": verdicts}}


def explain_reading(explain: dict) -> str:
    """The explanation table in words, every figure and verdict read from it."""
    verdicts = explain["verdicts"]
    gain = verdicts["coverage_gain"]["measured"]
    more = "more" if gain > 0 else ("fewer" if gain < 0 else "as many")
    share = verdicts["coverage_share_of_gain"]["measured"]
    symmetric = explain["symmetric"]
    r2_change = "more" if verdicts["symmetric_r2_gain"]["measured"] > 0 else "less"
    total = explain["gain"]["total_mean"]  # > 0: lower ln Phi than main-onehot shuffled
    change = (f"its gain in ln Phi over main-onehot shuffled ({total:+.4f} per task)" if total > 0 else
              f"its loss in ln Phi against main-onehot shuffled (it ends {-total:.4f} per task higher)")
    return (f"Reading. The shipped model's 20-step runs cover {more} true components than main-onehot's shuffled runs "
            f"on the same tasks and starts ({gain:+.3f} per task; the coverage hypothesis is "
            f"{verdicts['coverage_gain']['verdict']}), and a share of {share:.2f} of {change} lies in the "
            f"tasks whose coverage differs (by the rule: {verdicts['coverage_share_of_gain']['verdict']}). Its "
            "one-step update from "
            f"random starts is {r2_change} slot-symmetric than main-onehot's (R^2 "
            f"{symmetric['best']['r2_symmetric_corrected']:.3f} against "
            f"{symmetric['main-onehot']['r2_symmetric_corrected']:.3f}; "
            f"{verdicts['symmetric_r2_gain']['verdict']}). " + (
                "These measurements are consistent with the hypothesis that the gain comes from finding more of the "
                "components; no intervention has tested it." if total > 0 and all(
                    verdicts[key]["verdict"] == "confirmed" for key in ("coverage_gain", "coverage_share_of_gain"))
                else "The hypothesis that fine-tuning helps by finding more components is refuted here: the "
                "difference between the two runs lies mostly in the tasks whose coverage differs, but it goes the "
                "other way." if total <= 0 and share > 0.5 else
                "The coverage hypothesis does not account for the difference as predicted."))


def results_section(data: dict) -> str:
    """The RESULTS.md section, every figure from ``data`` (the results file)."""
    files = ", ".join(f"`{p['file']}` ({p['commit'][:7]})" for p in data["predictions"])
    lines = ["## A learned default: main-onehot fine-tuned for how it is used", "",
             f"Eight candidates trained for 20 shuffled steps (seven fine-tunings of main-onehot, one from scratch), "
             f"each design and its predicted effect committed before it was scored ({files}); `python -m "
             "analyses.best_model --stage train choose test ship protocol explain` reruns everything:", ""]
    runs = data.get("runs", {})
    lines += [f"- `{name}`: `{runs[name]['command']}`" + ("" if runs[name]["complete"] else
              f" (**stopped at step {runs[name]['steps']}** of the registered {candidate_config(name).steps}, for lack "
              "of time; scored as it stood, left out of the choice, its prediction not tested)")
              for name in CANDIDATES if name in runs]
    if "validation" in data:
        v = data["validation"]
        lines += ["", f"Validation ({v['tasks']} tasks, seed {v['seed']}; mean ln Phi after 20 steps, shuffled "
                  "slots): " + "; ".join(f"{name} {s['mean']:.4f}" for name, s in v["scores"].items())
                  + f". Best of the three designs: **{v['chosen']}**; best local of the first six: "
                  f"**{v['best_local']}**; the committed rule over the first six: {v['shipped_of_six']}; over the "
                  f"{len(v['ruled_over'])} candidates trained to their registered steps, shipped as `best`: "
                  f"**{v['shipped']}**."]
    if "test" in data:
        t = data["test"]
        lines += ["", f"Test ({t['tasks']} tasks, seed {t['seed']}, scored once after the choice; mean ln Phi after 20 "
                  "steps from random starts ± standard error over tasks; the difference to k-means++ x10 paired per "
                  "task):", "", "| algorithm | mean ln Phi | minus k-means++ x10 |", "|---|---|---|"]
        for name, score in t["scores"].items():
            diff = t["differences"][f"{name} - kmeanspp_10"]
            lines.append(f"| {name} | {score['mean']:.4f} ± {score['se']:.4f} | {diff['mean']:+.4f} ± "
                         f"{diff['se']:.4f} |")
        times = t["times"]
        model_times = "; ".join(f"{name} {statistics.median(v):.2f} s" for name, v in times["model_20_steps_s"].items())
        lines += ["", f"Wall time ({t['threads']} threads, medians of {TIMING_ROUNDS}), 20 steps on all {t['tasks']} "
                  f"tasks at once: {model_times}; scikit-learn KMeans(n_clusters=10, n_init=10) over the same tasks, "
                  f"in a process without torch: {statistics.median(times['sklearn_kmeanspp_10_s']):.2f} s.", "",
                  "| prediction | predicted | measured | verdict |", "|---|---|---|---|"]
        judged_entries = {name: entry for group in t["verdicts"].values() for name, entry in group.items()}
        for entry_key, entry in judged_entries.items():
            measured = entry["measured"] if isinstance(entry["measured"], (str, bool)) else f"{entry['measured']:+.4f}"
            predicted = entry["predicted"] if isinstance(entry["predicted"], (str, bool)) else (
                f"{entry['kind']} {entry['predicted']:+.3f} (tolerance {entry['tolerance']:.3f})")
            lines.append(f"| {entry_key} | {predicted} | {measured} | {entry['verdict']} |")
        against = t["shipped_minus_main_onehot"]
        lines += ["", f"The shipped model minus main-onehot, paired per task: {against['shuffle']['mean']:+.4f} ± "
                  f"{against['shuffle']['se']:.4f} against main-onehot in shuffled slot orders, "
                  f"{against['fixed']['mean']:+.4f} ± {against['fixed']['se']:.4f} against it as the papers run it."]
        lines += ["", f"Goals for the shipped model ({t['shipped']}): "
                  + "; ".join(f"{name}: {'met' if met else '**missed**'}" for name, met in t["goals"].items()) + "."]
    if "protocol" in data:
        p = data["protocol"]
        lines += ["", f"Evaluation protocol (`{p['command']}`, {p['tasks']} tasks per setting, 20 steps; best in its "
                  "recommended settings; main-onehot as shipped, from its committed evaluation on the same tasks; "
                  "scikit-learn's KMeans to convergence):",
                  "", "| protocol | setting | init | best | main-onehot | Lloyd | k-means++ x1 | k-means++ x10 |",
                  "|---|---|---|---|---|---|---|---|"]
        for key, e in p["rows"].items():
            protocol, setting, init = key.split("|")
            lines.append(f"| {protocol} | {setting} | {init} | {e['best']:.4f} | {e['main-onehot']:.4f} | "
                         f"{e['lloyd']:.4f} | {e['kmeanspp_1']:.4f} | {e['kmeanspp_10']:.4f} |")
        worse = p["best_worse_than_main_onehot"]
        lines += ["", "Rows where best is worse than main-onehot: " + (", ".join(worse) if worse else "none") + "."]
    if "explain" in data:
        e = data["explain"]
        lines += ["", f"What the fine-tuning changed ({e['tasks']} test tasks; coverage: true components, of 10, whose "
                  "mean is the nearest to some centroid after 20 steps; symmetric R^2: the share of the one-step "
                  "update from random starts that its slot-symmetric part explains, 64 permutations):", "",
                  "| run | coverage | all 10 covered |", "|---|---|---|"]
        for name, c in e["coverage"].items():
            lines.append(f"| {name} | {c['mean']:.3f} ± {c['se']:.3f} | {e['all_covered'][name]:.3f} |")
        g = e["gain"]
        lines += ["", f"Gain in mean ln Phi over main-onehot shuffled: {g['total_mean']:+.4f} per task, of which "
                  f"{g['where_coverage_differs']:+.4f} from the {e['tasks_with_other_coverage']} tasks whose coverage "
                  f"differs and {g['where_coverage_equal']:+.4f} from the others. Symmetric R^2: "
                  + "; ".join(f"{name} {v['r2_symmetric_corrected']:.3f} (slot-specific spread "
                              f"{v['permutation_spread']:.3f})" for name, v in e["symmetric"].items()) + ".", "",
                  "| prediction | predicted | measured | verdict |", "|---|---|---|---|"]
        for key, entry in e["verdicts"].items():
            lines.append(f"| {key} | {entry['kind']} {entry['predicted']:+.3f} | {entry['measured']:+.4f} | "
                         f"{entry['verdict']} |")
        lines += ["", explain_reading(e)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=STAGES, nargs="+", default=[], help="what to run, in this order")
    parser.add_argument("--threads", type=arguments.threads, default=1, help="torch threads (test: timing threads)")
    parser.add_argument("--protocol-tasks", type=arguments.positive_int, default=320,
                        help="tasks per setting of the protocol stage (default 320)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--results-md", action="store_true", help="put the section into analyses/RESULTS.md")
    args = parser.parse_args(argv)
    if not args.stage and not args.results_md:
        raise InvalidInput("give --stage (train, choose, test, ship, protocol) or --results-md")
    check_output_file(args.out, "--out")
    from analyses._shared import file_commit, write_json

    try:
        data = json.loads(args.out.read_text()) if args.out.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise InvalidInput(f"--out {args.out} is not a results file of {PROG} ({error})") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"--out {args.out} is not a results file of {PROG} (not a JSON object)")
    data["predictions"] = [{"file": str(path.relative_to(ROOT)), "commit": file_commit(path)["commit"]}
                           for path in (PREDICTIONS, LOCAL_PREDICTIONS, ROUND2_PREDICTIONS, EXPLAIN_PREDICTIONS)]
    for stage in STAGES:
        if stage not in args.stage:
            continue
        if stage == "train":
            data.update(stage_train(args.threads))
        elif stage == "choose":
            data.update(stage_choose())
        elif stage == "test":
            data.update(stage_test(data, args.threads))
        elif stage == "ship":
            data.update(stage_ship(data))
        elif stage == "protocol":
            data.update(stage_protocol(args.threads, args.protocol_tasks))
        else:
            data.update(stage_explain())
        write_json(data, args.out)
    if args.results_md:
        from analyses._studies import RESULTS_MD, write_section

        write_section(SECTION_KEY, results_section(data), RESULTS_MD)
    return data


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG, interrupted="each finished stage is in --out; run the same command to resume"))
