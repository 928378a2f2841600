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

Lloyd is always a row (``LLOYD``): T iterations from the same starts, in float32 unless a model runs in float64 (then
float64). Lower is better throughout.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from interp._checks import InvalidInput, InvalidInputType, check_device, check_memory
from interp.algorithms import lloyd, log_objective
from interp.evaluate import FLOAT32, EvalConfig, _inits, _on_device, evaluation_tasks, settings, write_csv
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
    check_memory("this comparison", config.memory_needs(base, max(FLOAT32, lloyd_dtype.itemsize)))
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
            group[LLOYD] = final_log_objectives(None, points, start, config, device, lloyd_dtype)[None]  # (1, V)
            bar.update()
            values[protocol, setting, init] = group
    return values


@torch.no_grad()
def final_log_objectives(model: KMeansTransformer | None, points: torch.Tensor, start: torch.Tensor,
                         config: EvalConfig, device: torch.device | None = None,
                         dtype: torch.dtype | None = None) -> np.ndarray:
    """ln Phi (V,) float64 of each task after ``config.steps`` re-embedded steps of ``model`` (None: Lloyd's
    iterations on ``device`` in ``dtype``) from ``start``, computed as ``interp.evaluate.objective_curves`` does
    (the same chunks of ``config.chunk`` tasks, the model's precision and device, the slot orders drawn from
    ``config.seed + 2``), so the mean over tasks is its last value.

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
            trajectory = lloyd(chunk_points, chunk_start, config.steps).centroid_trajectory  # (c, T+1, k, d)
        else:
            trajectory = model(chunk_points, chunk_start, steps=config.steps, reembed=True, generator=slot_orders,
                               slot_order=config.slot_order).centroid_trajectory  # (c, T+1, k, d)
        values.append(log_objective(chunk_points, trajectory[:, config.steps]).double().cpu())  # (c,)
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


def markdown(rows: list[dict], steps: int) -> str:
    """``compare``'s rows as Markdown tables, one per (protocol, setting, init)."""
    lines: list[str] = []
    groups: dict[Group, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["protocol"], row["setting"], row["init"]), []).append(row)
    for (protocol, setting, init), members in groups.items():
        reference = members[0]["reference"]
        if lines:
            lines.append("")
        lines += [f"{protocol} protocol, {setting}, {init} init: ln Phi after {steps} steps over "
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
