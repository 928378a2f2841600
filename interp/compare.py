"""Models side by side: several models, each with its own seeds (checkpoints), on the same tasks and starts.

Each model is a list of checkpoints (seeds of one model); every checkpoint of every model, and Lloyd's algorithm,
runs on the same tasks from the same initial centroids (``interp.evaluate``'s protocol: ``evaluation_tasks`` and
``init_centroids`` from ``EvalConfig.seed``, ``EvalConfig.steps`` re-embedded steps, each model in the slot order its
checkpoint recommends unless ``EvalConfig.slot_order`` says otherwise). The unit of every statistic is the task: a
model's value on task t is ln Phi after the last step, averaged over its seeds, f_m(t) = mean_s f_{m,s}(t), so its
seeds are averaged per task, not counted as further models. Per model and setting:

* ``mean`` = mean_t f_m(t) and ``se`` = sd_t(f_m) / sqrt(V) over the V tasks (sd with V - 1 degrees of freedom);
* ``seed_min`` / ``seed_max``: the smallest and largest per-seed mean mean_t f_{m,s}(t) (the spread over seeds);
* against a reference model r (and against Lloyd), the paired per-task difference d_t = f_m(t) - f_r(t): its mean
  ``diff_reference``, its ``diff_reference_se`` = sd_t(d) / sqrt(V), and ``better_than_reference``, the share of
  tasks with d_t < 0 (a strictly lower objective; a tie counts as not better).

A model with Lloyd steps after its own (``EvalConfig.lloyd_steps``, None: each checkpoint's recommendation,
``InferenceSettings.lloyd_steps``) runs T learned steps then L Lloyd steps (``interp.hybrid.hybrid``). Lloyd is always
a row (``LLOYD``): T + L iterations from the same starts (L the largest of the models'), in float32 unless a model
runs in float64 (then float64). Lower is better throughout.

``paired_summary`` is the same statistics for any algorithms scored on the same tasks (one value per task each), with
several references, the median paired difference and wall times; ``sklearn_in_fresh_process`` runs and times
scikit-learn's KMeans in a process that has not imported torch.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from interp._checks import InvalidInput, InvalidInputType, check_device, check_memory
from interp.algorithms import lloyd, log_objective
from interp.evaluate import FLOAT32, EvalConfig, _inits, _on_device, evaluation_tasks, settings, write_csv
from interp.hybrid import hybrid, resolve_lloyd_steps
from interp.model import KMeansTransformer
from interp.tasks import TaskConfig, init_centroids

LLOYD = "lloyd"  # the name of Lloyd's row; no model may take it
OUTPUT_FILES = ("compare.csv", "compare_tasks.csv")  # what ``interp compare`` writes in its folder
COLUMNS = ("protocol", "setting", "init", "model", "checkpoints", "tasks", "mean", "se", "seed_min", "seed_max",
           "reference", "diff_reference", "diff_reference_se", "better_than_reference", "diff_lloyd",
           "diff_lloyd_se", "better_than_lloyd")

Group = tuple[str, str, str]  # (protocol, setting, init)


def compare(models: dict[str, list], config: EvalConfig, base: TaskConfig | None = None,
            reference: str | None = None, device: str | torch.device = "cpu", progress: bool = False) -> list[dict]:
    """One row per model (and Lloyd) and setting: mean final log objective, its SE, the spread over seeds and the
    paired differences to the reference model and to Lloyd (module docstring; columns ``COLUMNS``).

    Parameters
    ----------
    models
        Name -> that model's checkpoints (seeds): ``KMeansTransformer`` objects, or shipped names / paths, which
        are loaded with ``load_model(..., device=device)``. Every model needs the same d and k.
    config
        The tasks, steps, seed, initialisations and protocols (``EvalConfig``; its ``baselines`` are not run).
    base
        The task distribution; None: n = 512 with the models' d and k.
    reference
        The model the others are paired with (a name of ``models`` or ``LLOYD``); None: the first model.
    device, progress
        As for ``interp.evaluate.evaluate``.

    Returns
    -------
    list of dict
        Per (protocol, setting, init): the models in the given order, then Lloyd. With d_t = f_m(t) - f_ref(t):
        mean = mean_t f_m(t), se = sd_t(f_m) / sqrt(V), diff_reference = mean_t d_t, diff_reference_se =
        sd_t(d) / sqrt(V), better_than_reference = #{t: d_t < 0} / V (ties are not better).
    """
    models = load_models(models, device)
    return summary_rows(task_values(models, config, base, device=device, progress=progress),
                        reference if reference is not None else next(iter(models)))


def load_models(models: dict[str, list], device: str | torch.device = "cpu") -> dict[str, list[KMeansTransformer]]:
    """``models`` with every shipped name or path loaded on ``device`` (``load_model``); names and lists checked:
    non-empty strings other than ``LLOYD``, each with at least one checkpoint."""
    from interp.model.checkpoint import load_model

    if not isinstance(models, dict) or not models:
        raise InvalidInputType(f"models must be a non-empty dict of name -> checkpoints, got {models!r}")
    loaded = {}
    for name, checkpoints in models.items():
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"models: a model name must be a non-empty string, got {name!r}")
        if name.casefold() == LLOYD:
            raise InvalidInput(f"models: the name {name!r} is Lloyd's row; call the model something else")
        if isinstance(checkpoints, (str, Path, KMeansTransformer)) or not isinstance(checkpoints, Sequence):
            raise InvalidInputType(f"models[{name!r}] must be a list of checkpoints, got {type(checkpoints).__name__}")
        if not checkpoints:
            raise InvalidInput(f"models[{name!r}] has no checkpoints")
        loaded[name] = [item if isinstance(item, KMeansTransformer) else load_model(item, device=device)
                        for item in checkpoints]
    return loaded


def check_models(models: dict[str, list[KMeansTransformer]], base: TaskConfig, device: torch.device) -> None:
    """Refuse models off ``device`` or of another d or k than ``base``, naming the model and seed."""
    for name, checkpoints in models.items():
        for seed, model in enumerate(checkpoints):
            if not isinstance(model, KMeansTransformer):
                raise InvalidInputType(f"models[{name!r}][{seed}] must be a KMeansTransformer, got "
                                       f"{type(model).__name__}")
            if not _on_device(model.codes.device, device):
                raise InvalidInput(f"model {name}, checkpoint {seed + 1}, is on {model.codes.device} but device is "
                                   f"{device}; load it with load_model(..., device=device)")
            if model.config.d != base.d or model.config.k != base.k:
                raise InvalidInput(f"model {name}, checkpoint {seed + 1}, is for d={model.config.d}, "
                                   f"k={model.config.k}, but the tasks have d={base.d}, k={base.k} (every model "
                                   "needs the same d and k)")


def task_values(models: dict[str, list[KMeansTransformer]], config: EvalConfig, base: TaskConfig | None = None,
                device: str | torch.device = "cpu", progress: bool = False) -> dict[Group, dict[str, np.ndarray]]:
    """ln Phi after ``config.steps`` steps on every task: per (protocol, setting, init), name -> an array
    (seeds, V) float64, one row per checkpoint in the given order; ``LLOYD`` -> (1, V).

    Checked before any work, as by ``interp.evaluate.evaluate``: the device, every model on it and of the tasks'
    d and k, n > k in every setting, no initialisation given twice, and the memory one model's evaluation needs
    (``EvalConfig.memory_needs``)."""
    device = check_device(device, "device")
    if not models or not all(models.values()):
        raise InvalidInput("models: give at least one model, each with at least one checkpoint")
    first = next(iter(models.values()))[0]
    base = base if base is not None else TaskConfig(d=first.config.d, k=first.config.k)
    check_models(models, base, device)
    if len(set(config.inits)) != len(config.inits):
        raise InvalidInput(f"inits {list(config.inits)}: an initialisation is given twice")
    if len(set(config.protocols)) != len(config.protocols):
        raise InvalidInput(f"protocols {list(config.protocols)}: a protocol is given twice")
    for protocol in config.protocols:
        for setting, task_config in settings(protocol, base, config):
            if task_config.n <= task_config.k:
                raise InvalidInput(f"tasks of n={task_config.n} points ({protocol} protocol, {setting}) for k="
                                   f"{task_config.k} centroids: n must exceed k, else Lloyd's objective reaches 0 "
                                   "and its log is -inf")
    dtypes = [model.codes.dtype for checkpoints in models.values() for model in checkpoints]
    lloyd_dtype = torch.float64 if torch.float64 in dtypes else torch.float32
    most_lloyd = max(resolve_lloyd_steps(model, config.lloyd_steps) for checkpoints in models.values()
                     for model in checkpoints)
    check_memory("this comparison", config.memory_needs(base, max(FLOAT32, lloyd_dtype.itemsize), most_lloyd))
    groups = [(protocol, setting, task_config, init) for protocol in config.protocols
              for setting, task_config in settings(protocol, base, config) for init in _inits(protocol, config)]
    runs = sum(len(checkpoints) for checkpoints in models.values()) + 1  # + Lloyd
    values: dict[Group, dict[str, np.ndarray]] = {}
    with tqdm(total=len(groups) * runs, unit="run", file=sys.stderr, dynamic_ncols=True,
              disable=None if progress else True) as bar:  # None: drawn on a terminal only
        for protocol, setting, task_config, init in groups:
            points = evaluation_tasks(task_config, config)  # (V, n, d) float32, the same for every model
            start = init_centroids(points, task_config.k, init, torch.Generator().manual_seed(config.seed + 1))
            group: dict[str, np.ndarray] = {}
            for name, checkpoints in models.items():
                bar.set_description(f"compare {name}, {setting}, {init}")
                seeds = []
                for model in checkpoints:
                    seeds.append(final_log_objectives(model, points, start, config))
                    bar.update()
                group[name] = np.stack(seeds)  # (seeds, V)
            bar.set_description(f"compare Lloyd, {setting}, {init}")
            group[LLOYD] = final_log_objectives(None, points, start, config, device, lloyd_dtype,
                                                lloyd_steps=most_lloyd)[None]  # (1, V)
            bar.update()
            values[protocol, setting, init] = group
    return values


@torch.no_grad()
def final_log_objectives(model: KMeansTransformer | None, points: torch.Tensor, start: torch.Tensor,
                         config: EvalConfig, device: torch.device | None = None,
                         dtype: torch.dtype | None = None, lloyd_steps: int | None = None) -> np.ndarray:
    """ln Phi (V,) float64 of each task after ``config.steps`` re-embedded steps of ``model`` and then its L Lloyd
    steps (``interp.hybrid.hybrid``; L = ``lloyd_steps``, else ``config.lloyd_steps``, else the model's
    recommendation), or, for ``model`` None, after ``config.steps`` + ``lloyd_steps`` (None: 0) Lloyd iterations on
    ``device`` in ``dtype``, from ``start``, computed as ``interp.evaluate.objective_curves`` does (the same chunks
    of ``config.chunk`` tasks, the model's precision and device, the slot orders drawn from ``config.seed + 2``), so
    the mean over tasks is its last value.

    points (V, n, d) and start (V, k, d): the tasks and initial centroids, float32 on the CPU."""
    if model is not None:
        model.eval()
        dtype, device = model.codes.dtype, model.codes.device
    points, start = points.to(device, dtype), start.to(device, dtype)  # same tasks and start, this precision
    slot_orders = torch.Generator().manual_seed(config.seed + 2)  # "shuffle": the slot orders, reproducible
    values = []
    for first in range(0, points.shape[0], config.chunk):
        chunk_points, chunk_start = points[first : first + config.chunk], start[first : first + config.chunk]
        if model is None:
            found = lloyd(chunk_points, chunk_start, config.steps + (lloyd_steps or 0)).centroids  # (c, k, d)
        else:
            found = hybrid(model, chunk_points, chunk_start, steps=config.steps,
                           lloyd_steps=config.lloyd_steps if lloyd_steps is None else lloyd_steps, reembed=True,
                           generator=slot_orders, slot_order=config.slot_order).centroids  # (c, k, d)
        values.append(log_objective(chunk_points, found).double().cpu())  # (c,)
    return torch.cat(values).numpy()  # (V,)


def _se(values: np.ndarray) -> float:
    """sd / sqrt(len), sd with len - 1 degrees of freedom; nan for fewer than two values."""
    if len(values) < 2:
        return math.nan
    return float(np.std(values, ddof=1) / math.sqrt(len(values)))


def summary_rows(values: dict[Group, dict[str, np.ndarray]], reference: str) -> list[dict]:
    """The rows of ``compare`` (columns ``COLUMNS``) from ``task_values``' arrays, paired with ``reference``."""
    rows = []
    for (protocol, setting, init), group in values.items():
        if reference not in group:
            raise InvalidInput(f"reference {reference!r} is not one of the models ({', '.join(group)})")
        per_task = {name: seeds.mean(axis=0) for name, seeds in group.items()}  # name -> (V,), seeds averaged
        for name, seeds in group.items():
            f = per_task[name]  # (V,)
            seed_means = seeds.mean(axis=1)  # (seeds,)
            row = {"protocol": protocol, "setting": setting, "init": init, "model": name,
                   "checkpoints": 0 if name == LLOYD else seeds.shape[0], "tasks": len(f),
                   "mean": float(f.mean()), "se": _se(f), "seed_min": float(seed_means.min()),
                   "seed_max": float(seed_means.max()), "reference": reference}
            for column, other in (("reference", reference), ("lloyd", LLOYD)):
                difference = f - per_task[other]  # (V,) d_t, paired by task
                row[f"diff_{column}"] = float(difference.mean())
                row[f"diff_{column}_se"] = _se(difference)
                row[f"better_than_{column}"] = float(np.mean(difference < 0))  # strictly lower; ties are not better
            rows.append(row)
    return rows


def task_rows(values: dict[Group, dict[str, np.ndarray]]) -> list[dict]:
    """One row per (protocol, setting, init), task and model: ``value`` = f_m(t), the mean over the model's seeds,
    then ``seed_1`` ... the value of each checkpoint in the given order (blank past a model's own seeds; Lloyd has
    none)."""
    most = max(seeds.shape[0] for group in values.values() for name, seeds in group.items() if name != LLOYD)
    rows = []
    for (protocol, setting, init), group in values.items():
        for task in range(next(iter(group.values())).shape[1]):
            for name, seeds in group.items():
                row = {"protocol": protocol, "setting": setting, "init": init, "task": task, "model": name,
                       "value": float(seeds[:, task].mean())}
                for seed in range(most):
                    row[f"seed_{seed + 1}"] = float(seeds[seed, task]) if name != LLOYD and seed < len(seeds) else ""
                rows.append(row)
    return rows


def _number(value: float, digits: int = 4, sign: bool = False) -> str:
    return "–" if math.isnan(value) else f"{value:{'+' if sign else ''}.{digits}f}"


def markdown(rows: list[dict], steps: int, lloyd_steps: Mapping[str, int] | None = None) -> str:
    """``compare``'s rows as Markdown tables, one per (protocol, setting, init); ``lloyd_steps``: model -> the Lloyd
    steps it ran after its ``steps`` (named in each table's title when any is not 0)."""
    lloyd_steps = {name: count for name, count in (lloyd_steps or {}).items() if count}
    after = "" if not lloyd_steps else (
        " then Lloyd steps (" + ", ".join(f"{name} {count}" for name, count in lloyd_steps.items())
        + f"; Lloyd's row {steps + max(lloyd_steps.values())} iterations)")
    lines: list[str] = []
    groups: dict[Group, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["protocol"], row["setting"], row["init"]), []).append(row)
    for (protocol, setting, init), members in groups.items():
        reference = members[0]["reference"]
        if lines:
            lines.append("")
        lines += [f"{protocol} protocol, {setting}, {init} init: ln Phi after {steps} steps{after} over "
                  f"{members[0]['tasks']} tasks (lower is better), reference {reference}", "",
                  "| model | seeds | mean ± SE | seed means min–max | vs reference ± SE | better than reference | "
                  "vs Lloyd ± SE | better than Lloyd |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for row in members:
            seeds = "–" if row["model"] == LLOYD else str(row["checkpoints"])
            spread = "–" if row["model"] == LLOYD else f"{_number(row['seed_min'])}–{_number(row['seed_max'])}"
            lines.append(f"| {row['model']} | {seeds} | {_number(row['mean'])} ± {_number(row['se'])} | {spread} | "
                         f"{_number(row['diff_reference'], sign=True)} ± {_number(row['diff_reference_se'])} | "
                         f"{row['better_than_reference']:.0%} | {_number(row['diff_lloyd'], sign=True)} ± "
                         f"{_number(row['diff_lloyd_se'])} | {row['better_than_lloyd']:.0%} |")
    return "\n".join(lines)


def write_outputs(values: dict[Group, dict[str, np.ndarray]], rows: list[dict], out: str | Path) -> list[Path]:
    """``compare.csv`` (``rows``) and ``compare_tasks.csv`` (``task_rows(values)``) in the folder ``out`` (which
    exists), each written atomically."""
    out = Path(out)
    return [write_csv(rows, out / OUTPUT_FILES[0]), write_csv(task_rows(values), out / OUTPUT_FILES[1])]


# ----- any algorithms on the same tasks: paired statistics and times -------------------------------------------------
def paired_summary(values: Mapping[str, Sequence[float]], references: Sequence[str],
                   times: Mapping[str, Sequence[float]] | None = None, tie: float = 0.0) -> list[dict]:
    """Algorithms scored on the same V tasks, side by side: one row per algorithm, in the given order.

    Parameters
    ----------
    values
        Name -> f_a(t), one value per task (V,), the same tasks in the same order for every algorithm (ln Phi:
        lower is better). No value may be NaN.
    references
        Names of ``values`` every algorithm is paired with.
    times
        Name -> wall times in seconds of repeated runs on all V tasks (optional; an algorithm may lack them).
    tie
        A task counts as tied when |d_t| <= ``tie`` (default 0: only equal values tie); for values that reach the
        same partition by different arithmetic (float32 and float64 runs) a small positive tolerance.

    Returns
    -------
    list of dict
        ``name``, ``tasks`` V, ``mean`` = mean_t f_a(t), ``se`` = sd_t(f_a) / sqrt(V) (sd with V - 1 degrees of
        freedom); per reference r, with d_t = f_a(t) - f_r(t): ``minus_<r>`` = mean_t d_t, ``minus_<r>_se`` =
        sd_t(d) / sqrt(V), ``minus_<r>_median`` = the median of d, ``won_vs_<r>`` = #{t: d_t < -tie} / V (strictly
        lower; a tie is not a win), ``tied_with_<r>`` = #{t: |d_t| <= tie} / V; and ``time_s``, the median of its
        times (NaN without), and ``times_s``, the times themselves.
    """
    if not values:
        raise InvalidInput("values: give at least one algorithm")
    if not (isinstance(tie, (int, float)) and not isinstance(tie, bool) and 0 <= tie < math.inf):
        raise InvalidInput(f"tie must be a finite number >= 0, got {tie!r}")
    arrays = {name: np.asarray(value, dtype=np.float64) for name, value in values.items()}
    shapes = {array.shape for array in arrays.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 1:
        raise InvalidInput(f"values: every algorithm needs one value per task, the same tasks; got shapes "
                           f"{sorted(shapes)}")
    if any(np.isnan(array).any() for array in arrays.values()):
        raise InvalidInput("values: a value is NaN")
    for reference in references:
        if reference not in arrays:
            raise InvalidInput(f"reference {reference!r} is not one of the algorithms ({', '.join(arrays)})")
    times = dict(times or {})
    rows = []
    for name, f in arrays.items():
        row = {"name": name, "tasks": len(f), "mean": float(f.mean()), "se": _se(f)}
        for reference in references:
            difference = f - arrays[reference]  # (V,) d_t, paired by task
            row[f"minus_{reference}"] = float(difference.mean())
            row[f"minus_{reference}_se"] = _se(difference)
            row[f"minus_{reference}_median"] = float(np.median(difference))
            row[f"won_vs_{reference}"] = float(np.mean(difference < -tie))
            row[f"tied_with_{reference}"] = float(np.mean(np.abs(difference) <= tie))
        measured = [float(t) for t in times.get(name, ())]
        row["time_s"] = statistics.median(measured) if measured else math.nan
        row["times_s"] = measured
        rows.append(row)
    return rows


def paired_markdown(rows: list[dict], references: Sequence[str], labels: Mapping[str, str] | None = None,
                    digits: int = 4, reference_labels: Mapping[str, str] | None = None) -> str:
    """``paired_summary``'s rows as one Markdown table: mean ± SE, per reference the paired difference mean ± SE,
    its median and the share of tasks won, then the median wall time. ``labels``: name -> the row's label;
    ``reference_labels``: name -> the reference's name in the column heads (default its row label)."""
    labels = dict(labels or {})
    head = ["algorithm", "mean ± SE"]
    for reference in references:
        name = (reference_labels or {}).get(reference, labels.get(reference, reference))
        head += [f"minus {name}: mean ± SE", "median", "tasks won"]
    head.append("time (s)")
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for row in rows:
        cells = [labels.get(row["name"], row["name"]), f"{_number(row['mean'], digits)} ± {_number(row['se'], digits)}"]
        for reference in references:
            cells += [f"{_number(row[f'minus_{reference}'], digits, sign=True)} ± "
                      f"{_number(row[f'minus_{reference}_se'], digits)}",
                      _number(row[f"minus_{reference}_median"], digits, sign=True),
                      f"{row[f'won_vs_{reference}']:.1%}"]
        cells.append(_number(row["time_s"], 2))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


SKLEARN_SCRIPT = r"""
import json, sys, time
import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits
from sklearn.cluster import KMeans

tasks_path, out, k, seed, rounds, threads = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
n_inits = [int(value) for value in sys.argv[7].split(",")]
tasks = np.load(tasks_path)
times, iterations = {}, {}
with threadpool_limits(threads):
    for n_init in n_inits:
        times[n_init] = []
        for _ in range(rounds):
            start = time.perf_counter()
            fitted = [KMeans(k, init="k-means++", n_init=n_init, random_state=seed + index).fit(task)
                      for index, task in enumerate(tasks)]
            times[n_init].append(time.perf_counter() - start)
        np.save(f"{out}/centres_{n_init}.npy", np.stack([model.cluster_centers_ for model in fitted]))
        iterations[n_init] = [int(model.n_iter_) for model in fitted]
    pools = [{key: pool[key] for key in ("user_api", "internal_api", "num_threads")} for pool in threadpool_info()]
print(json.dumps({"times": times, "iterations": iterations, "threadpools": pools,
                  "torch_imported": "torch" in sys.modules}))
"""


def sklearn_in_fresh_process(points: np.ndarray, k: int, seed: int, n_inits: Sequence[int] = (1, 10),
                             rounds: int = 3, threads: int = 1, timeout: float = 3600) -> dict:
    """scikit-learn's ``KMeans(k, init="k-means++", n_init=...)`` fitted to convergence on each task, run and timed in
    a fresh Python process that never imports torch (so torch's threads and allocator cost it nothing), at
    ``threads`` threads (``OMP_NUM_THREADS`` and ``threadpoolctl.threadpool_limits``).

    points (V, n, d) float64 NumPy; task t gets ``random_state`` = seed + t (as
    ``interp.evaluate.sklearn_log_objectives``). Each n_init fits all V tasks ``rounds`` times, each round timed
    whole (``time.perf_counter``). Returns {"centres": {n_init: (V, k, d)}, "times": {n_init: [s, ...]},
    "iterations": {n_init: [n_iter_ per task]}, "threadpools": the child's thread pools, "torch_imported": whether
    the child had imported torch (False, or the timing is not what it says)}. The child is tied to this process
    (``interp._processes.preexec``)."""
    from interp._processes import preexec

    points = np.ascontiguousarray(points, dtype=np.float64)
    if points.ndim != 3:
        raise InvalidInput(f"points must be (V, n, d), got shape {points.shape}")
    with tempfile.TemporaryDirectory() as folder:
        np.save(Path(folder) / "tasks.npy", points)
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads),
               "MKL_NUM_THREADS": str(threads)}
        done = subprocess.run([sys.executable, "-c", SKLEARN_SCRIPT, str(Path(folder) / "tasks.npy"), folder, str(k),
                               str(seed), str(rounds), str(threads), ",".join(map(str, n_inits))],
                              capture_output=True, text=True, env=env, timeout=timeout,
                              preexec_fn=preexec(os.getpid()))
        if done.returncode != 0:
            raise RuntimeError(f"the scikit-learn process failed: {done.stderr.strip()[-2000:]}")
        found = json.loads(done.stdout)
        centres = {n_init: np.load(Path(folder) / f"centres_{n_init}.npy") for n_init in n_inits}
    return {"centres": centres, "times": {int(key): value for key, value in found["times"].items()},
            "iterations": {int(key): value for key, value in found["iterations"].items()},
            "threadpools": found["threadpools"], "torch_imported": found["torch_imported"]}
