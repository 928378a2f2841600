"""Resumable sweeps over training-config fields with seeds, on a local process pool or on Ray (paper 2 §3, App. F).

Every grid point trains its seeds one by one with ``interp.training.train.train``, each seed to its own
resumable checkpoint, and scores each seed by the papers' protocol (paper 2 App. C): the relative
validation objective at its last step, the mean log objective after ``eval_steps`` re-embedded steps vs as many
Lloyd iterations (random init, unseen tasks), the smoothed-vs-true loss gap of one step (paper 2 Fig. 5) and,
on request, the same scores on other task families (the transfer grid, paper 2 Fig. 8). One CSV per study,
one row per seed, appended as each grid point finishes; a re-run skips finished rows and resumes checkpoints.
Beside the CSV, ``<study>_histories.jsonl`` keeps each row's training curve (its checkpoint's history: step, loss,
relative validation objective, lr), one JSON line per row with the row's name and config, written before the row;
so a table can be scored again (rules that read the curves included) where the checkpoints are gone. A line stores
the history as columns (one list per logged field); lines that store one object per logged step, as tables written
before that did, read the same. A column of float32 values (loss, relative objective) is written with float32's
shortest decimals and named in the line's "float32" list, and widened back bit for bit on reading (``history_line``).

Backends: ``local`` (a process pool sized to the machine, one torch thread per worker) and ``ray`` (one Ray task
per grid point; connects to the cluster in ``RAY_ADDRESS`` or starts a local Ray instance).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import fcntl
import io
import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy
import torch

from interp._checks import (
    InvalidInput,
    InvalidInputType,
    NonFiniteInput,
    check_choice,
    check_output_file,
    check_positive_int,
)
from interp.tasks import FAMILIES

FIELDS = ("study", "name", "label", "seed", "steps", "status", "relative_objective", "model_log_objective",
          "lloyd_log_objective", "model_curve", "lloyd_curve", "loss_gap_mean", "loss_gap_max", "transfer", "config")
BACKENDS = ("local", "ray")


@dataclass(frozen=True)
class SweepConfig:
    """One study: fixed TrainConfig fields, the grid, the seeds, where results go and how jobs run."""

    study: str
    base: dict = field(default_factory=dict)  # TrainConfig fields held fixed
    grid: dict = field(default_factory=dict)  # TrainConfig field -> values
    seeds: tuple[int, ...] = (0,)
    out: Path = Path("runs/sweeps")  # <out>/<study>.csv (git-ignored; a study that is kept writes elsewhere)
    checkpoints: Path | None = None  # default <out>/checkpoints/<study>/
    backend: str = "local"
    workers: int | None = None  # local pool size / Ray parallelism; default: the machine's cores
    eval_tasks: int = 64
    eval_steps: int = 20
    eval_families: tuple[str, ...] = ()  # transfer: also score on these families

    def __post_init__(self) -> None:
        from interp.training.train import TrainConfig

        if not isinstance(self.seeds, (tuple, list)) or not all(isinstance(seed, int) for seed in self.seeds):
            raise InvalidInputType(f"seeds must be a tuple of ints, got {self.seeds!r}")
        if not (isinstance(self.study, str) and self.study and "/" not in self.study):
            raise InvalidInput(f"study must be a non-empty name without '/', got {self.study!r}")
        check_choice(self.backend, "backend", BACKENDS)
        check_positive_int(self.eval_tasks, "eval_tasks")
        check_positive_int(self.eval_steps, "eval_steps")
        if self.workers is not None:
            check_positive_int(self.workers, "workers")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise InvalidInput(f"seeds must be distinct and non-empty, got {self.seeds!r}")
        known = {f.name for f in dataclasses.fields(TrainConfig)}
        for name in list(self.base) + list(self.grid):
            if name not in known or name == "seed":
                raise InvalidInput(f"unknown or reserved training config field {name!r} (seeds go in seeds)")
        for name, values in self.grid.items():
            if not isinstance(values, (list, tuple)) or not values:
                raise InvalidInput(f"grid[{name!r}] must be a non-empty list of values, got {values!r}")
        for family in self.eval_families:
            check_choice(family, "eval_families", FAMILIES)

    @property
    def checkpoint_dir(self) -> Path:
        return Path(self.checkpoints) if self.checkpoints is not None else Path(self.out) / "checkpoints" / self.study

    @property
    def table(self) -> Path:
        return Path(self.out) / f"{self.study}.csv"

    @property
    def histories(self) -> Path:
        return histories_path(self.table)


def _label(overrides: dict) -> str:
    return "_".join(f"{k}={v}" for k, v in overrides.items()) or "base"


def groups(config: SweepConfig) -> list[dict]:
    """One group per grid point: {'label', 'config' (TrainConfig kwargs without seed), 'seeds'}; validated here."""
    from interp.training.train import TrainConfig

    names = list(config.grid)
    out = []
    for values in itertools.product(*(config.grid[name] for name in names)):
        overrides = dict(zip(names, values))
        train_kwargs = {**config.base, **overrides}
        TrainConfig(**train_kwargs, seed=config.seeds[0])  # validate now, not in a worker
        out.append({"label": _label(overrides), "config": train_kwargs, "seeds": list(config.seeds)})
    labels = [group["label"] for group in out]
    if len(set(labels)) != len(labels):
        raise InvalidInput(f"grid values must be distinct as printed (they name the runs), got labels {labels}")
    return out


def config_key(config: str) -> str:
    """A row's ``config`` JSON in one canonical form: fields that ``TrainConfig`` gained after the row was written
    take the value they had then (``interp.training.state.ADDED_TRAIN_FIELDS``), so an older row is still found."""
    from interp.training.state import ADDED_TRAIN_FIELDS

    return json.dumps({**ADDED_TRAIN_FIELDS, **json.loads(config)}, sort_keys=True)


def wanted_config(group: dict, seed: int) -> str:
    """The JSON a finished row of this grid point and seed carries in its ``config`` column."""
    from interp.training.train import TrainConfig

    return json.dumps(dataclasses.asdict(TrainConfig(**group["config"], seed=seed)), sort_keys=True)


def study_rows(config: SweepConfig) -> list[dict]:
    """The CSV rows of exactly this sweep (its grid, fixed fields and seeds; the latest row of each), grid order."""
    by_key = {(row["name"], config_key(row["config"])): row for row in read_rows(config.table)}
    rows = []
    for group in groups(config):
        for seed in group["seeds"]:
            row = by_key.get((row_name(group["label"], seed), config_key(wanted_config(group, seed))))
            if row is not None:
                rows.append(row)
    return rows


def row_name(label: str, seed: int) -> str:
    return f"{label}_seed={seed}"


def histories_path(table: str | Path) -> Path:
    """Where the training curves of a study CSV's rows are kept: ``<study>_histories.jsonl`` beside it."""
    table = Path(table)
    return table.with_name(f"{table.stem}_histories.jsonl")


def read_histories(table: str | Path) -> dict[tuple[str, str], list[dict]]:
    """(row name, row config) -> training history of the rows of ``table`` that have one (the latest line of each);
    a line cut off by an interruption is ignored."""
    path = histories_path(table)
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # cut off: its row was never written
        float32 = entry.get("float32", [])
        if not isinstance(float32, list) or not all(field in entry["history"] for field in float32):
            raise ValueError(f"{path}: the line of {entry['name']!r} names float32 columns {float32!r} that its "
                             "history lacks")
        out[(entry["name"], config_key(entry["config"]))] = history_entries(entry["history"], float32)
    return out


def _widened(values: list) -> list:
    """Each float of ``values`` rounded to float32 and back (None stays None; a float64 beyond float32's range
    becomes inf, which ``_narrowed`` then refuses)."""
    with numpy.errstate(over="ignore"):
        return [None if value is None else float(numpy.float32(value)) for value in values]


def _narrowed(values: list) -> list | None:
    """``values`` written with the fewest decimals that widen back to the same floats (``_widened``), or None when
    some value is not a float32 value (a float64 such as a halved learning rate, an int step, only None) or the
    decimals would not be shorter."""
    if not any(isinstance(value, float) for value in values) or \
            not all(value is None or isinstance(value, float) for value in values) or _widened(values) != values:
        return None
    short = [None if value is None else float(str(numpy.float32(value))) for value in values]
    return short if _widened(short) == values and len(json.dumps(short)) < len(json.dumps(values)) else None


def history_line(name: str, config: str, history: list[dict]) -> str:
    """One line of ``<study>_histories.jsonl``: the row's name and config JSON and its history as columns
    ({field: [value at each logged step]}), about half the bytes of one object per logged step. A column of float32
    values (the loss and relative objective of float32 training) is written with the shortest decimals that give the
    same float32 back and named in the line's "float32" list; ``read_histories`` widens it again, bit for bit."""
    columns = {field: [entry[field] for entry in history] for field in (history[0] if history else ())}
    narrowed = {field: short for field, values in columns.items() if (short := _narrowed(values)) is not None}
    line = {"name": name, "config": config, "history": {**columns, **narrowed}}
    if narrowed:
        line["float32"] = list(narrowed)
    return json.dumps(line, separators=(",", ":")) + "\n"


def history_entries(stored: dict[str, list] | list[dict], float32: tuple[str, ...] | list[str] = ()) -> list[dict]:
    """A stored history as one dict per logged step: from its columns (those named in ``float32`` widened back to
    the floats ``history_line`` was given), or as it is where the line kept one object per step."""
    if isinstance(stored, list):
        return stored
    columns = {field: _widened(values) if field in float32 else values for field, values in stored.items()}
    return [dict(zip(columns, values)) for values in zip(*columns.values(), strict=True)]


def row_histories(rows: list[dict], table: str | Path) -> list[list[dict]]:
    """The training history of each of ``rows`` (rows of ``table``), in order; a row without one is an error."""
    stored = read_histories(table)
    keys = [(row["name"], config_key(row["config"])) for row in rows]
    missing = [name for name, key in keys if (name, key) not in stored]
    if missing:
        raise FileNotFoundError(f"{histories_path(table)} lacks the training histories of rows {missing}")
    return [stored[key] for key in keys]


def _append(path: Path, text: str) -> None:
    """Append ``text`` and make it durable, after truncating a line an interruption cut off; under an exclusive lock,
    since two runs may share one study's table (``analyses.studies --only-grid`` on two lanes)."""
    with open(path, "a", newline="") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # released when the file is closed
        _drop_cut_off_row(path)  # a half line now is an interrupted writer's, never the other lane's
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def _loss_gap(model, task_config, eval_tasks: int, seed: int, tau: float, loss: str) -> tuple[float, float]:
    """Mean and max over tasks of L~(X, C1) - Phi(C1) after one step from random init (paper 2 Fig. 5)."""
    from interp.algorithms import kmeans_objective
    from interp.tasks import init_centroids, sample_tasks
    from interp.training.losses import smoothed_objective

    points = sample_tasks(task_config, eval_tasks, seed).points  # (V, n, d)
    init = init_centroids(points, task_config.k, "random", seed + 1)  # (V, k, d)
    with torch.no_grad():
        centroids = model(points, init, steps=1).centroids  # (V, k, d)
        gap = smoothed_objective(points, centroids, tau, loss) - kmeans_objective(points, centroids)  # (V,)
    return gap.mean().item(), gap.max().item()


def score(meta: dict, path: Path, study: str, label: str, eval_tasks: int, eval_steps: int,
          eval_families: tuple[str, ...]) -> dict:
    """The CSV row of one trained seed (its last checkpoint, also when it diverged), with its training ``history``
    (not a CSV column); a model whose outputs are not finite on the evaluation tasks gets status ``unscorable`` and
    NaN scores instead of stopping the sweep."""
    try:
        return _score(meta, path, study, label, eval_tasks, eval_steps, eval_families)
    except NonFiniteInput:  # the model's centroids reached a checked objective as NaN or inf
        nan = float("nan")
        return {"study": study, "name": row_name(label, meta["train_config"]["seed"]), "label": label,
                "seed": meta["train_config"]["seed"], "steps": meta["step"], "status": "unscorable",
                "relative_objective": meta["history"][-1]["relative_objective"], "model_log_objective": nan,
                "lloyd_log_objective": nan, "model_curve": "[]", "lloyd_curve": "[]", "loss_gap_mean": nan,
                "loss_gap_max": nan, "transfer": "{}", "config": json.dumps(meta["train_config"], sort_keys=True),
                "history": meta["history"]}


def _score(meta: dict, path: Path, study: str, label: str, eval_tasks: int, eval_steps: int,
           eval_families: tuple[str, ...]) -> dict:
    from interp.evaluate import EVAL_SEED, EvalConfig, objective_curves
    from interp.model.checkpoint import load_model
    from interp.training.train import TrainConfig

    train_config = TrainConfig(**meta["train_config"])
    model = load_model(path)
    eval_config = EvalConfig(n_tasks=eval_tasks, steps=eval_steps, inits=("random",))
    curves = objective_curves(model, train_config.task_config, eval_config, "random")
    gap_mean, gap_max = _loss_gap(model, train_config.task_config, eval_tasks, EVAL_SEED, train_config.tau,
                                  train_config.loss)
    transfer = {}
    for family in eval_families:
        shifted = dataclasses.replace(train_config.task_config, family=family)
        family_curves = objective_curves(model, shifted, eval_config, "random")
        transfer[family] = {"model": family_curves["model"][-1], "lloyd": family_curves["lloyd"][-1]}
    return {"study": study, "name": row_name(label, train_config.seed), "label": label, "seed": train_config.seed,
            "steps": meta["step"], "status": "diverged" if meta.get("diverged") else "ok",
            "relative_objective": meta["history"][-1]["relative_objective"],
            "model_log_objective": curves["model"][-1], "lloyd_log_objective": curves["lloyd"][-1],
            "model_curve": json.dumps(curves["model"]), "lloyd_curve": json.dumps(curves["lloyd"]),
            "loss_gap_mean": gap_mean, "loss_gap_max": gap_max, "transfer": json.dumps(transfer),
            "config": json.dumps(dataclasses.asdict(train_config), sort_keys=True), "history": meta["history"]}


def run_group(group: dict, study: str, checkpoint_dir: str, eval_tasks: int, eval_steps: int,
              eval_families: tuple[str, ...]) -> list[dict]:
    """Train (or resume) one grid point's seeds, one by one, and score them; runs in a worker (local process or Ray
    task). A seed that diverges is scored on its last good checkpoint, with status ``diverged``."""
    from interp.model.checkpoint import load_checkpoint
    from interp.training.train import TrainConfig, TrainingDiverged, train

    torch.set_num_threads(1)
    seeds = group["seeds"]
    paths = [Path(checkpoint_dir) / f"{row_name(group['label'], seed)}.safetensors" for seed in seeds]
    config = TrainConfig(**group["config"], seed=seeds[0])
    metas = []
    for seed, path in zip(seeds, paths):
        try:
            metas.append(train(dataclasses.replace(config, seed=seed), path, progress=False))
        except TrainingDiverged as error:
            meta = load_checkpoint(path)[1]
            meta["diverged"] = str(error)
            metas.append(meta)
    return [score(meta, path, study, group["label"], eval_tasks, eval_steps, eval_families)
            for meta, path in zip(metas, paths)]


def _local(todo: list[dict], config: SweepConfig, workers: int):
    """Run the groups on ``workers`` processes of this machine; one worker: in this process. An interrupt (Ctrl-C:
    the terminal's SIGINT reaches every process of its group) or a failed group ends the run at once: queued groups
    are dropped and the workers terminated (a pool's orderly shutdown would first run the groups already handed to
    them); each group resumes from its checkpoints when run again. A worker that dies fails the run
    (``BrokenProcessPool``) instead of leaving it waiting. Each worker dies with this process however it ends,
    SIGKILL included (``interp._processes.die_with``): ``PR_SET_PDEATHSIG`` follows the thread that created the worker,
    and the pool creates its workers in ``submit`` (all at the first one under the ``fork`` start method; one per
    ``submit`` under ``spawn`` and ``forkserver``; none later, as no ``max_tasks_per_child`` is set), that is in the
    thread that iterates this generator, which outlives them: it shuts the pool down before it ends."""
    import concurrent.futures
    import functools
    import multiprocessing

    from interp._processes import die_with

    run = functools.partial(run_group, study=config.study, checkpoint_dir=str(config.checkpoint_dir),
                            eval_tasks=config.eval_tasks, eval_steps=config.eval_steps,
                            eval_families=tuple(config.eval_families))
    if workers == 1:
        threads = torch.get_num_threads()  # run_group trains on one thread; the caller's setting comes back after
        try:
            for group in todo:
                yield run(group)
        finally:
            torch.set_num_threads(threads)
        return
    others = set(multiprocessing.active_children())  # the caller's own child processes: never terminated here
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, initializer=die_with, initargs=(os.getpid(),))
    try:
        futures = [pool.submit(run, group) for group in todo]
        for future in concurrent.futures.as_completed(futures):
            yield future.result()
    except BaseException:
        for worker in set(multiprocessing.active_children()) - others:
            worker.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # after a terminate: the broken pool's futures fail at once


def _ray(todo: list[dict], config: SweepConfig, workers: int):
    """Run the groups as Ray tasks. A local Ray instance started here shares this process's fate: when this process
    ends, SIGKILL included, its raylet ends and kills the tasks' worker processes within seconds (Ray's own doing,
    nothing to add here); Ray's idle agent processes end on their own about a minute later."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("backend='ray' needs the ray package: pip install 'ray'") from None
    started = False
    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init()  # the user's cluster
        else:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)  # a local Ray instance
        started = True
    try:
        task = ray.remote(num_cpus=1)(run_group)
        futures = [task.remote(group, config.study, str(config.checkpoint_dir), config.eval_tasks,
                               config.eval_steps, tuple(config.eval_families)) for group in todo]
        while futures:
            done, futures = ray.wait(futures, num_returns=1)
            yield ray.get(done[0])
    finally:
        if started:
            ray.shutdown()


def _drop_cut_off_row(path: Path) -> None:
    """Truncate a row cut off by an interruption (bytes after the last newline): it was never finished."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as handle:
            handle.truncate(data.rfind(b"\n") + 1)


def read_rows(path: str | Path) -> list[dict]:
    """A study's CSV rows ([] when it does not exist yet)."""
    path = Path(path)
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        text = handle.read()
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    if rows and not text.endswith("\n"):  # the last row was cut off by an interruption: not finished
        rows.pop()
    return [row for row in rows if None not in row.values() and None not in row]


def pending(config: SweepConfig) -> list[dict]:
    """The grid points of ``config`` with the seeds whose row its table lacks (a row of the same name trained with
    another config is not this one), in grid order; empty when every seed's row is written."""
    existing = read_rows(config.table)
    if existing and list(existing[0]) != list(FIELDS):
        raise InvalidInput(f"{config.table} has other columns than this runner writes; move it away or pass another "
                           "out")
    done = {(row["name"], config_key(row["config"])) for row in existing}
    todo = []
    for group in groups(config):
        seeds = [seed for seed in group["seeds"]
                 if (row_name(group["label"], seed), config_key(wanted_config(group, seed))) not in done]
        if seeds:
            todo.append({**group, "seeds": seeds})
    return todo


def run_sweep(config: SweepConfig, progress: bool = True) -> Path:
    """Run every unfinished grid point of the study and append its rows to ``config.table``; returns the CSV."""
    table = config.table
    table.parent.mkdir(parents=True, exist_ok=True)
    config.checkpoint_dir.mkdir(parents=True, exist_ok=True)  # train() writes only into a folder that exists
    for name, path in (("the study table", table), ("the training curves", config.histories)):
        check_output_file(path, name, devices=False)  # appended to: a regular file or a new name, never a FIFO
    todo = pending(config)
    if not table.exists():
        with open(table, "w", newline="") as handle:
            csv.DictWriter(handle, fieldnames=FIELDS).writeheader()
    if not todo:
        return table
    workers = config.workers or max(1, min(len(todo), os.cpu_count() or 1))
    results = _local(todo, config, workers) if config.backend == "local" else _ray(todo, config, workers)
    with contextlib.closing(results):  # an interrupt between two groups still stops the workers here, at once
        for rows in results:
            curves = "".join(history_line(row["name"], row["config"], row.pop("history")) for row in rows)
            _append(config.histories, curves)  # before the rows: a written row always has its curve
            buffer = io.StringIO()
            csv.DictWriter(buffer, fieldnames=FIELDS).writerows(rows)
            _append(table, buffer.getvalue())  # one grid point per write: an interrupted sweep keeps them
            if progress:
                for row in rows:
                    print(f"{row['name']}: {row['status']}, relative {row['relative_objective']:.3f}, "
                          f"model {row['model_log_objective']:.3f}, Lloyd {row['lloyd_log_objective']:.3f}", flush=True)
    return table

