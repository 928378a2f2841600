"""The papers' evaluation protocol (paper 2 App. C, Figs. 4, 6, 7, 12, Table 1).

320 unseen tasks (seeded apart from training), T = 20 re-embedded steps of the model and T Lloyd iterations
from the same initial centroids; the metric is the mean over tasks of ln sum_i min_j ||x_i - c_j||^2 after
each step. Across several checkpoints (seeds) the curves are summarised by median and quantile band. Each model
runs in the slot order its checkpoint recommends unless ``EvalConfig.slot_order`` says otherwise (shuffled orders
drawn from the seed). Beside them, per setting, scikit-learn's KMeans with k-means++ starts (1 and 10 of them, to
convergence) on the same tasks: the columns ``kmeanspp_1`` and ``kmeanspp_10``.

Protocols: ``main`` (initialisations random, k-means++, Gonzalez), ``length`` (n in 128..2048), ``shift``
(unequal weights, anisotropic, half and double scale) and ``family`` (normal, cauchy, gumbel, laplace,
lognormal). The reference Lloyd relocates empty clusters as scikit-learn does (the authors put a random
data point there; with random init on these mixtures empties are rare). The tasks are drawn in float32, so every
checkpoint sees the same tasks, and each model and its Lloyd reference run in the model's precision (float32 or
float64).

Devices: ``evaluate(..., device=...)`` runs the models and Lloyd on ``device``; the tasks and initial centroids are
drawn on the CPU from the seed (the same on every device) and moved there, and the scikit-learn baselines run on
the CPU.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from interp._checks import (
    MAX_TASKS,
    InvalidInput,
    InvalidInputType,
    MemoryNeed,
    check_choice,
    check_count,
    check_device,
    check_memory,
    check_positive_int,
    check_seed,
    check_steps,
)
from interp._io import write_text_atomically
from interp.algorithms import lloyd, log_objective
from interp.hybrid import hybrid, resolve_lloyd_steps
from interp.model import KMeansTransformer
from interp.model.config import SLOT_ORDERS
from interp.tasks import FAMILIES, INITS, TaskConfig, init_centroids, sample_tasks

PROTOCOLS = ("main", "length", "shift", "family")
BASELINE_COLUMNS = ("kmeanspp_1", "kmeanspp_10")  # scikit-learn KMeans, k-means++ starts, n_init 1 and 10
EVAL_SEED = 20261130  # unseen tasks: not the training seed
OUTPUT_FILES = ("evaluation.csv", "summary.csv", "evaluation.html")  # what ``interp evaluate`` writes in its folder
FLOAT32 = 4  # bytes: the tasks are drawn in float32; a float64 model holds them and its trajectories in 8
SAMPLED = 28  # bytes per coordinate while ``sample_tasks`` runs: noise, location and scale in float64, the result


@dataclass(frozen=True)
class EvalConfig:
    """What to evaluate: tasks per setting (at most ``MAX_TASKS``), steps (at most ``MAX_STEPS``), seed (in
    [0, 2**63)), initialisations and protocols; the memory the sizes need is checked by ``evaluate``
    (``memory_needs``)."""

    n_tasks: int = 320
    steps: int = 20
    seed: int = EVAL_SEED
    inits: tuple[str, ...] = ("random", "kmeans++", "gonzalez")
    protocols: tuple[str, ...] = ("main",)
    lengths: tuple[int, ...] = (128, 256, 1024, 2048)
    chunk: int = 64  # tasks per forward
    slot_order: str | None = None  # None: each model's recommended one (KMeansTransformer.inference)
    baselines: bool = True  # scikit-learn KMeans (k-means++, n_init 1 and 10) columns, once per setting
    lloyd_steps: int | None = None  # Lloyd steps after the model's (interp.hybrid); None: each model's recommended

    def __post_init__(self) -> None:
        if self.slot_order is not None:
            check_choice(self.slot_order, "slot_order", SLOT_ORDERS)
        if self.lloyd_steps is not None:
            check_steps(self.lloyd_steps, "lloyd_steps", minimum=0)
        if not isinstance(self.baselines, bool):
            raise InvalidInputType(f"baselines must be a bool, got {self.baselines!r}")
        for name in ("inits", "protocols", "lengths"):
            if not isinstance(getattr(self, name), (tuple, list)):
                raise InvalidInputType(f"{name} must be a tuple, got {type(getattr(self, name)).__name__}")
        for n in self.lengths:
            check_positive_int(n, "lengths")
        check_count(self.n_tasks, "n_tasks", MAX_TASKS)
        check_steps(self.steps, "steps")
        check_positive_int(self.chunk, "chunk")
        check_seed(self.seed, "seed")
        for init in self.inits:
            check_choice(init, "init", INITS)
        for protocol in self.protocols:
            check_choice(protocol, "protocol", PROTOCOLS)

    def memory_needs(self, base: TaskConfig, itemsize: int = FLOAT32, lloyd_steps: int = 0) -> list[MemoryNeed]:
        """What evaluating one model on ``base`` (and the protocols' variants of it) holds at once, at the larger of
        two moments (a lower bound of the peak): drawing all V tasks of the largest n (28 bytes per coordinate,
        ``SAMPLED``), or running one chunk of c tasks: the V tasks and the model's and Lloyd's centroid trajectories,
        2 x c x (T + L + 1) x k x d numbers (L: the Lloyd steps after the model's), in the model's precision
        (``itemsize`` bytes)."""
        largest = max((base.n, *self.lengths)) if "length" in self.protocols else base.n
        tasks = {"n_tasks": self.n_tasks, "n": largest, "d": base.d}
        coordinates = self.n_tasks * largest * base.d
        chunk = min(self.chunk, self.n_tasks)
        drawing = [MemoryNeed("the tasks while they are drawn", tasks, SAMPLED * coordinates)]
        running = [MemoryNeed("the tasks", tasks, itemsize * coordinates),
                   MemoryNeed("the centroid trajectories of one chunk", {"chunk": chunk, "steps": self.steps,
                                                                          "k": base.k, "d": base.d},
                              2 * itemsize * chunk * (self.steps + lloyd_steps + 1) * base.k * base.d)]
        return max(drawing, running, key=lambda needs: sum(need.nbytes for need in needs))


@torch.no_grad()
def objective_curves(model: KMeansTransformer, task_config: TaskConfig, config: EvalConfig,
                     init: str) -> dict[str, list[float]]:
    """Mean log objective after steps 0..T + L for the model (T re-embedded steps, then L Lloyd steps:
    ``interp.hybrid.hybrid``, L = ``config.lloyd_steps`` or the model's recommendation) and T + L Lloyd iterations,
    same tasks and start, in the model's precision (tasks and start are drawn in float32 for every model, so models
    of either precision share them), on the model's device (tasks, start and slot orders drawn on the CPU, then
    moved)."""
    model.eval()
    points = evaluation_tasks(task_config, config)  # (V, n, d)
    init_gen = torch.Generator().manual_seed(config.seed + 1)
    centroids = init_centroids(points, task_config.k, init, init_gen)  # (V, k, d)
    dtype, device = model.codes.dtype, model.codes.device
    points, centroids = points.to(device, dtype), centroids.to(device, dtype)  # same start, model's precision
    total = config.steps + resolve_lloyd_steps(model, config.lloyd_steps)  # T + L
    model_sums = torch.zeros(total + 1, dtype=torch.float64, device=device)
    lloyd_sums = torch.zeros(total + 1, dtype=torch.float64, device=device)
    slot_orders = torch.Generator().manual_seed(config.seed + 2)  # "shuffle": the slot orders, reproducible
    for start in range(0, config.n_tasks, config.chunk):
        chunk_points, chunk_init = points[start : start + config.chunk], centroids[start : start + config.chunk]
        trajectory = hybrid(model, chunk_points, chunk_init, steps=config.steps, lloyd_steps=config.lloyd_steps,
                            reembed=True, generator=slot_orders, slot_order=config.slot_order).centroid_trajectory
        reference = lloyd(chunk_points, chunk_init, total).centroid_trajectory  # (c, T+L+1, k, d)
        for t in range(total + 1):
            model_sums[t] += log_objective(chunk_points, trajectory[:, t]).double().sum()
            lloyd_sums[t] += log_objective(chunk_points, reference[:, t]).double().sum()
    return {"model": (model_sums / config.n_tasks).tolist(), "lloyd": (lloyd_sums / config.n_tasks).tolist()}


def evaluation_tasks(task_config: TaskConfig, config: EvalConfig) -> torch.Tensor:
    """The ``config.n_tasks`` tasks (V, n, d) of one setting, float32, from ``config.seed``: every model, Lloyd and
    the scikit-learn baselines see these."""
    return sample_tasks(task_config, config.n_tasks, torch.Generator().manual_seed(config.seed)).points


def sklearn_log_objectives(points: torch.Tensor, k: int, n_init: int, seed: int) -> torch.Tensor:
    """ln Phi (V,) of ``sklearn.cluster.KMeans(k, init="k-means++", n_init=n_init)`` run to convergence on each task
    of points (V, n, d) (float64, ``random_state`` seed + task index, one thread), Phi computed as for the models."""
    import numpy as np
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    tasks = points.double().numpy()  # (V, n, d)
    with threadpool_limits(1):  # two OpenMP runtimes (torch's and scikit-learn's) contend when both use threads
        centres = np.stack([KMeans(k, init="k-means++", n_init=n_init, random_state=seed + index).fit(task)
                            .cluster_centers_ for index, task in enumerate(tasks)])  # (V, k, d)
    return log_objective(points.double(), torch.from_numpy(centres))


def sklearn_baselines(task_config: TaskConfig, config: EvalConfig) -> dict[str, float]:
    """Mean ln Phi over the setting's tasks of scikit-learn's KMeans with k-means++ starts, 1 and 10 of them:
    {"kmeanspp_1": ..., "kmeanspp_10": ...} (the same tasks as the models; seeds from ``config.seed``)."""
    points = evaluation_tasks(task_config, config)  # (V, n, d)
    return {f"kmeanspp_{n_init}": sklearn_log_objectives(points, task_config.k, n_init, config.seed).mean().item()
            for n_init in (1, 10)}


def settings(protocol: str, base: TaskConfig, config: EvalConfig) -> list[tuple[str, TaskConfig]]:
    """The task distributions of one protocol, named."""
    if protocol == "main":
        return [("in-distribution", base)]
    if protocol == "length":
        return [(f"n={n}", dataclasses.replace(base, n=n)) for n in config.lengths]
    if protocol == "shift":
        return [("unequal weights", dataclasses.replace(base, equal_weights=False)),
                ("anisotropic", dataclasses.replace(base, anisotropic=True)),
                ("half scale", dataclasses.replace(base, scale=base.scale / 2)),
                ("double scale", dataclasses.replace(base, scale=base.scale * 2))]
    return [(family, dataclasses.replace(base, family=family)) for family in FAMILIES]


def evaluate(models: dict[str, KMeansTransformer], base: TaskConfig, config: EvalConfig,
             device: str | torch.device = "cpu", progress: bool = False) -> list[dict]:
    """Rows {checkpoint, protocol, setting, init, step, model, lloyd} for every model, protocol and setting.
    Protocols other than ``main`` use the first initialisation only. A model with Lloyd steps after its own (L,
    ``config.lloyd_steps`` or its recommendation) has rows for the steps 0..T + L, the last L being Lloyd's
    iterations from its step-T centroids (``objective_curves``).

    ``device`` ("cpu", "cuda", "cuda:1", "mps" or a ``torch.device``; ``check_device``) is where the models and
    Lloyd run and where every model must already be (``load_model(..., device=...)`` or ``model.to(device)``); the
    tasks are drawn on the CPU and moved there. The rows do not depend on the device beyond rounding.

    Checked before any work: the device, every model on it and fitting the tasks, every task has more points than
    centroids (with n = k Lloyd's objective reaches 0 and its log -inf), and the memory the evaluation needs is
    available (``EvalConfig.memory_needs``; ``InsufficientMemory`` otherwise).

    ``progress``: a tqdm bar on stderr, drawn on a terminal only, counting the curves (one per checkpoint, setting
    and initialisation), described by the checkpoint and protocol it is on, with tqdm's estimate of the time left;
    it starts after the checks."""
    device = check_device(device, "device")
    for name, model in models.items():
        if not _on_device(model.codes.device, device):
            raise InvalidInput(f"checkpoint {name} is on {model.codes.device} but device is {device}; load it with "
                               "load_model(..., device=device) or move it with model.to(device)")
        least, most = model.served_k
        if base.d > model.config.d or not least <= base.k <= most:
            served = f"k={most}" if least == most else f"k from {least} to {most}"
            raise InvalidInput(f"checkpoint {name} is for d <= {model.config.d} (fewer padded or tiled) and {served}, "
                               f"but the tasks have d={base.d}, k={base.k}")
    for protocol in config.protocols:
        for setting, task_config in settings(protocol, base, config):
            if task_config.n <= task_config.k:
                raise InvalidInput(f"tasks of n={task_config.n} points ({protocol} protocol, {setting}) for k="
                                   f"{task_config.k} centroids: n must exceed k, else Lloyd's objective reaches 0 "
                                   "and its log is -inf")
    itemsize = max((model.codes.dtype.itemsize for model in models.values()), default=FLOAT32)
    most_lloyd = max((resolve_lloyd_steps(model, config.lloyd_steps) for model in models.values()), default=0)
    check_memory("this evaluation", config.memory_needs(base, itemsize, most_lloyd))
    baselines: dict[tuple[str, str], dict[str, float]] = {}  # per (protocol, setting): computed once
    rows = []
    curves_per_model = sum(len(settings(protocol, base, config)) * len(_inits(protocol, config))
                           for protocol in config.protocols)
    with tqdm(total=len(models) * curves_per_model, unit="curve", file=sys.stderr, dynamic_ncols=True,
              disable=None if progress else True) as bar:  # None: drawn on a terminal only
        for name, model in models.items():
            for protocol in config.protocols:
                bar.set_description(f"evaluate {name}, {protocol}")
                for setting, task_config in settings(protocol, base, config):
                    if config.baselines and (protocol, setting) not in baselines:
                        bar.set_postfix_str(f"{setting}: scikit-learn k-means++")
                        baselines[protocol, setting] = sklearn_baselines(task_config, config)
                    for init in _inits(protocol, config):
                        bar.set_postfix_str(f"{setting}, {init}")
                        curves = objective_curves(model, task_config, config, init)
                        for step, (model_value, lloyd_value) in enumerate(zip(curves["model"], curves["lloyd"])):
                            rows.append({"checkpoint": name, "protocol": protocol, "setting": setting, "init": init,
                                         "step": step, "model": model_value, "lloyd": lloyd_value,
                                         **baselines.get((protocol, setting), {})})
                        bar.update()
    return rows


def _inits(protocol: str, config: EvalConfig) -> tuple[str, ...]:
    """The initialisations a protocol runs: every one for ``main``, the first for the others."""
    return config.inits if protocol == "main" else config.inits[:1]


def _on_device(where: torch.device, device: torch.device) -> bool:
    """Whether a tensor on ``where`` is on ``device``: the same type and, for CUDA, the same index (none: the current
    CUDA device)."""
    if where.type != device.type:
        return False
    if device.type != "cuda":
        return True
    current = torch.cuda.current_device()
    return (current if where.index is None else where.index) == (current if device.index is None else device.index)


def summarise(rows: list[dict], quantiles: tuple[float, float] = (0.0, 1.0)) -> list[dict]:
    """Median and quantile band across checkpoints (seeds) per (protocol, setting, init, step)."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["protocol"], row["setting"], row["init"], row["step"]), []).append(row)
    summary = []
    for (protocol, setting, init, step), members in groups.items():
        entry = {"protocol": protocol, "setting": setting, "init": init, "step": step, "seeds": len(members)}
        entry.update({name: members[0][name] for name in BASELINE_COLUMNS if name in members[0]})  # per setting
        for method in ("model", "lloyd"):
            values = sorted(m[method] for m in members)
            entry[f"{method}_median"] = statistics.median(values)
            entry[f"{method}_low"] = _quantile(values, quantiles[0])
            entry[f"{method}_high"] = _quantile(values, quantiles[1])
        summary.append(entry)
    return summary


def _quantile(sorted_values: list[float], q: float) -> float:
    position = q * (len(sorted_values) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (position - low) * (sorted_values[high] - sorted_values[low])


def write_csv(rows: list[dict], path: str | Path) -> Path:
    """``rows`` as CSV (header from the first row's keys), written atomically into a folder that exists."""
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return write_text_atomically(path, text.getvalue())
