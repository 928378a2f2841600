"""The state of one training run and its checkpoint, as ``train`` keeps and resumes it (paper 2, §3, Alg. 1).

A run is its ``TrainConfig`` plus everything that decides how it goes on, all saved in one checkpoint:

* the model's weights, the Adam optimiser and the ReduceLROnPlateau schedule;
* two random streams: ``tasks`` (the validation set, then one batch of tasks per step) and ``dropout`` (attention
  dropout and Gumbel noise), which starts where torch's global RNG stands after the model initialisation;
* the step and the history (one entry per evaluation: step, loss, relative validation objective, learning rate).

The validation set is not saved: it is drawn again from the seed.

Devices: a run computes on one ``device`` (``train(..., device=...)``; not part of ``TrainConfig``, so a checkpoint
does not depend on the machine). Both random streams stay CPU generators whatever the device: the tasks, the
validation set (with its one-step Lloyd denominator) and the initial weights are drawn and computed on the CPU and
then moved, and the dropout stream's draws are made on the CPU and moved (``interp.primitives.random_device``), so a
seed draws the same numbers on every device. Checkpoints hold CPU tensors; a run resumes onto any device (loaded on
the CPU, then moved). Checkpoint layout (``interp.model.checkpoint``,
atomic writes): tensors ``model.*``, ``optimizer.{index}.{slot}``, ``rng.tasks`` and the dropout stream
``rng.dropout`` (files ``train`` wrote before that name hold it as ``rng.torch``, and still resume); metadata
model_config, train_config, step, history, optimizer (parameter groups), scheduler.

Files of the former seed-batched trainer (``train_seeds``, since removed: docs/decisions.md, "One training loop")
have this layout plus metadata ``trainer`` = "seed_batch" and ``diverged`` (null, or why that seed stopped early).
They load as models, and ``train`` resumes them as its own files; one marked diverged is not resumed: ``train``
raises ``TrainingDiverged``, as when a run diverges under it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from interp._checks import InvalidInput
from interp.algorithms import kmeans_objective, lloyd
from interp.model import KMeansTransformer
from interp.model.checkpoint import (
    config_disagreements,
    load_checkpoint,
    model_from_tensors,
    model_tensors,
    save_checkpoint,
)
from interp.task_config import TaskConfig
from interp.tasks import init_centroids, sample_tasks
from interp.training.task_mix import draw_task_config, model_input

if TYPE_CHECKING:
    from interp.training.config import TrainConfig

DROPOUT_STREAM = "rng.dropout"  # checkpoint name of the dropout stream (the seed-batched trainer's files too)
OLD_DROPOUT_STREAM = "rng.torch"  # its name in files train() wrote before: still read
SEED_BATCH_TRAINER = "seed_batch"  # metadata "trainer" of the former seed-batched trainer's files (train() writes none)
# TrainConfig fields newer than some checkpoints: their value then
ADDED_TRAIN_FIELDS = {"slot_equivariant": False, "slot_order": "fixed", "unroll": 1, "rollout": 0, "eval_steps": 1,
                      "init_from": None, "attn_xx_identity": False, "k_least": None, "d_least": None, "n_least": None,
                      "relative_loss": False, "narrow_tasks": "pad"}
FINE_TUNE_CHANGES = ("attn_xx.identity",)  # model-config fields a fine-tuning may change (the same parameters)


class TrainingDiverged(RuntimeError):
    """The loss or the weights became NaN or infinite; the last good checkpoint is kept."""


@dataclass
class ValidationSet:
    """Fixed validation tasks with their one-step Lloyd objective (the denominator of the relative objective)."""

    points: Tensor  # (V, n, d)
    init: Tensor  # (V, k, d)
    lloyd_one_step: Tensor  # (V,)

    @property
    def parts(self) -> tuple[ValidationSet, ...]:
        """Its groups of tasks of one size: itself."""
        return (self,)


@dataclass
class MixedValidationSet:
    """The validation tasks of a run of many sizes (``TrainConfig.mixed_sizes``): groups of ``batch`` tasks, each of
    one size (k', d', n') drawn as a training batch draws it."""

    parts: tuple[ValidationSet, ...]


def make_validation_set(config: TrainConfig, generator: torch.Generator,
                        device: torch.device | str = "cpu") -> ValidationSet | MixedValidationSet:
    """``config.val_tasks`` tasks from ``generator``, their first k points as initial centres (the data are
    shuffled, so a uniform random k-subset) and Phi after one Lloyd iteration; computed on the CPU, then moved to
    ``device``. A run of many sizes draws them in groups of ``config.batch``, each group's size first
    (``task_mix.draw_task_config``), its points zero-padded to d."""
    if config.mixed_sizes:
        sizes = [min(config.batch, config.val_tasks - start) for start in range(0, config.val_tasks, config.batch)]
        return MixedValidationSet(tuple(_validation_part(draw_task_config(config, generator), size, config,
                                                         generator, device) for size in sizes))
    return _validation_part(config.task_config, config.val_tasks, config, generator, device)


def _validation_part(task_config: TaskConfig, size: int, config: TrainConfig, generator: torch.Generator,
                     device: torch.device | str) -> ValidationSet:
    points = model_input(sample_tasks(task_config, size, generator).points, config)  # (V, n, d)
    init = init_centroids(points, task_config.k, "first")  # (V, k, d)
    lloyd_one_step = kmeans_objective(points, lloyd(points, init, 1).centroids)  # (V,)
    return ValidationSet(points.to(device), init.to(device), lloyd_one_step.to(device))


@dataclass
class TrainingState:
    """Everything a run needs to continue: the same state resumed gives the same weights as an uninterrupted run."""

    config: TrainConfig
    model: KMeansTransformer
    optimizer: torch.optim.Adam
    scheduler: torch.optim.lr_scheduler.ReduceLROnPlateau
    tasks: torch.Generator  # validation set, then one batch per step
    dropout: torch.Generator  # attention dropout (and Gumbel noise), training and validation forwards
    validation: ValidationSet
    step: int = 0
    history: list[dict] = field(default_factory=list)

    @classmethod
    def start(cls, config: TrainConfig, device: torch.device | str = "cpu") -> TrainingState:
        """A fresh run on ``device``: torch.manual_seed(seed) for the initial weights, the tasks stream seeded with
        the same seed (validation set first), the dropout stream continuing torch's global RNG after the
        initialisation. Both streams are CPU generators; the weights are initialised on the CPU and then moved."""
        torch.manual_seed(config.seed)
        tasks = torch.Generator().manual_seed(config.seed)
        validation = make_validation_set(config, tasks, device)
        model = KMeansTransformer(config.model_config()).train()
        if config.init_from is not None:
            _load_initial_weights(model, config.init_from)
        model = model.to(device)
        dropout = torch.Generator()
        dropout.set_state(torch.get_rng_state())
        optimizer, scheduler = optimiser_and_schedule(model, config)
        return cls(config, model, optimizer, scheduler, tasks, dropout, validation)

    @classmethod
    def load(cls, path: str | os.PathLike, config: TrainConfig, device: torch.device | str = "cpu") -> TrainingState:
        """The run saved at ``path``, continued under ``config`` (equal to the saved training config except,
        possibly, more ``steps``) on ``device`` (whichever device wrote it: the file is read on the CPU, then the
        model and the optimiser's state are moved). A file of the former seed-batched trainer marked diverged raises
        ``TrainingDiverged``: that run stopped at a non-finite loss or weights and is not continued."""
        path = Path(path)
        state = cls.start(config, device)  # the validation set and the stream objects
        tensors, meta = load_checkpoint(path)
        saved = meta.get("train_config") or {}
        saved = dict(saved) if isinstance(saved, dict) else {"train_config": saved}
        if "train_config" not in saved:
            saved = {**ADDED_TRAIN_FIELDS, **saved}  # a file written before these fields existed
        wanted = json.loads(json.dumps(asdict(config)))
        saved.pop("steps", None), wanted.pop("steps")  # a run may be extended with more steps
        if saved != wanted:
            raise InvalidInput(f"{path} was written by a different training config; pass another path or start "
                               f"afresh (resume=False, --no-resume) (saved: {meta.get('train_config')})")
        _check_saved_run(path, tensors, meta, state)
        if meta.get("diverged"):
            note = meta["diverged"][:200].rstrip(".")
            raise TrainingDiverged(f"{path} holds a seed-batched run that diverged: {note}. It is not resumed (its "
                                   "weights still load as a model); to train this config again, start afresh "
                                   "(resume=False, --no-resume) or pass another path")
        state.model = model_from_tensors(tensors, config.model_config(), str(path)).train().to(device)
        state.optimizer, state.scheduler = optimiser_and_schedule(state.model, config)
        _load_optimizer(state.optimizer, tensors, meta["optimizer"], str(path))
        state.scheduler.load_state_dict(_scheduler_state(meta["scheduler"], state.scheduler, str(path)))
        for generator, name in ((state.tasks, "rng.tasks"), (state.dropout, dropout_stream_name(tensors))):
            try:
                generator.set_state(tensors[name])
            except RuntimeError as error:
                raise InvalidInput(f"{path}: {name} is not a valid random-number state: {error}") from None
        state.step, state.history = meta["step"], meta["history"]
        return state

    @classmethod
    def resume_or_start(cls, path: str | os.PathLike, config: TrainConfig, resume: bool = True,
                        device: torch.device | str = "cpu") -> TrainingState:
        """``load`` the run at ``path`` when ``resume`` and the file exists, else ``start`` one, on ``device``."""
        if resume and Path(path).exists():
            return cls.load(path, config, device)
        return cls.start(config, device)

    def record(self, relative_objective: float, loss: float | None) -> None:
        """Append an evaluation at ``self.step`` to the history; after training (a loss) the plateau schedule first
        steps on the relative objective, so the entry holds the learning rate the next steps use."""
        if loss is not None:
            self.scheduler.step(relative_objective)
        self.history.append({"step": self.step, "loss": loss, "relative_objective": relative_objective,
                             "lr": self.optimizer.param_groups[0]["lr"]})

    def save(self, path: str | os.PathLike) -> dict:
        """Write the state to ``path`` atomically; returns the metadata as ``load_checkpoint`` reads it back."""
        optimizer_tensors, optimizer_meta = _optimizer_tensors(self.optimizer)
        tensors = {**model_tensors(self.model), **optimizer_tensors, "rng.tasks": self.tasks.get_state(),
                   DROPOUT_STREAM: self.dropout.get_state()}
        meta = {"model_config": self.model.config.to_dict(), "train_config": asdict(self.config), "step": self.step,
                "history": self.history, "optimizer": optimizer_meta, "scheduler": self.scheduler.state_dict()}
        save_checkpoint(path, tensors, meta)
        return json.loads(json.dumps(meta))


def _load_initial_weights(model: KMeansTransformer, name_or_path: str) -> None:
    """Copy the weights of the checkpoint ``name_or_path`` (``init_from``: fine-tuning) into ``model``; its model
    config must be the run's but for ``FINE_TUNE_CHANGES`` (``InvalidInput`` naming init_from otherwise)."""
    from interp.model.checkpoint import load_model, read_header, resolve
    from interp.model.torch_save_file import is_torch_save_file

    source = load_model(name_or_path)
    path = resolve(name_or_path)
    # the file's own fields: ones it predates (e.g. gumbel_tau of a softmax model) are not compared
    saved = source.config.to_dict() if is_torch_save_file(path) else read_header(path)[0]["model_config"]
    differ = [name for name in config_disagreements(saved, model.config) if name not in FINE_TUNE_CHANGES]
    if differ:
        raise InvalidInput(f"init_from={name_or_path!r} is a model of another config ({', '.join(differ[:4])} "
                           "differ from this run's)")
    model.load_state_dict(source.to(torch.float32).state_dict())


def dropout_stream_name(tensors: dict[str, Tensor]) -> str:
    """The dropout stream's name in a checkpoint: ``rng.dropout``, or ``rng.torch`` in a file train() wrote before
    the name was shared (never both: a file holding both is refused as unexpected tensors)."""
    return OLD_DROPOUT_STREAM if OLD_DROPOUT_STREAM in tensors and DROPOUT_STREAM not in tensors else DROPOUT_STREAM


def optimiser_and_schedule(model: KMeansTransformer, config: TrainConfig):
    """Adam at ``config.lr`` and ReduceLROnPlateau (minimising the relative objective) over ``model``'s parameters."""
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, fused=True)  # one kernel for all parameters
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode="min", factor=config.plateau_factor, patience=config.plateau_patience)
    return optimizer, scheduler


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, Tensor], dict]:
    """The optimiser's per-parameter state as ``optimizer.{index}.{slot}`` tensors, and its parameter groups."""
    state = optimizer.state_dict()
    tensors = {}
    for index, slots in state["state"].items():
        for slot, value in slots.items():
            tensors[f"optimizer.{index}.{slot}"] = torch.as_tensor(value)
    return tensors, {"param_groups": state["param_groups"]}


def _load_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, Tensor], meta: dict, source: str) -> None:
    """Inverse of ``_optimizer_tensors`` (the tensors and parameter groups checked by ``_check_saved_run``)."""
    state: dict = {}
    for name, tensor in tensors.items():
        if name.startswith("optimizer."):
            _, index, slot = name.split(".", 2)
            state.setdefault(int(index), {})[slot] = tensor
    try:
        optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    except (ValueError, KeyError, TypeError, RuntimeError) as error:
        raise InvalidInput(f"{source}: the saved optimiser state does not fit the model: {error}") from None


ADAM_SLOTS = ("step", "exp_avg", "exp_avg_sq")  # Adam's per-parameter state (amsgrad off)
SCHEDULER_PROGRESS = ("best", "num_bad_epochs", "cooldown_counter", "last_epoch", "_last_lr")  # the rest is config


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_saved_run(path: Path, tensors: dict[str, Tensor], meta: dict, state: TrainingState) -> None:
    """Refuse, with ``InvalidInput``, a checkpoint whose run state cannot be resumed into ``state`` (a fresh state of
    the same config): the step, history, model config, optimiser, scheduler and random-number states are checked
    for type, shape and range before any is loaded. The weights are checked by ``model_from_tensors``."""
    def refuse(what: str) -> InvalidInput:
        return InvalidInput(f"{path}: {what}; not a resumable checkpoint (damaged or crafted?)")

    missing = [key for key in ("step", "history", "optimizer", "scheduler", "model_config") if key not in meta]
    if missing:
        raise refuse(f"metadata lacks {missing}")
    step, history = meta["step"], meta["history"]
    if not _is_count(step):
        raise refuse(f"step must be a non-negative integer, got {step!r}")
    if not isinstance(history, list) or not history or not all(isinstance(entry, dict) for entry in history):
        raise refuse("history must be a non-empty list of evaluations")
    for entry in history:
        if set(entry) != {"step", "loss", "relative_objective", "lr"} or not _is_count(entry["step"]) or not all(
                _is_number(entry[key]) for key in ("relative_objective", "lr")) or not (
                entry["loss"] is None or _is_number(entry["loss"])):
            raise refuse(f"history entry {str(entry)[:80]} is not (step, loss, relative_objective, lr)")
    steps = [entry["step"] for entry in history]
    if steps != sorted(steps) or steps[-1] > step:
        raise refuse(f"history steps {steps[:3]}...{steps[-1]} must increase up to the step {step}")
    if meta.get("trainer") not in (None, SEED_BATCH_TRAINER):
        raise refuse(f"trainer must be absent (train()) or {SEED_BATCH_TRAINER!r} (the former seed-batched trainer), "
                     f"got {meta.get('trainer')!r:.60}")
    if not (meta.get("diverged") is None or isinstance(meta.get("diverged"), str)):
        raise refuse("diverged must be a note or null")
    if not isinstance(meta["model_config"], dict) or config_disagreements(meta["model_config"],
                                                                         state.config.model_config()):
        raise refuse("model_config is not the one its train_config implies")
    if torch.float32 != next((t.dtype for name, t in tensors.items() if name.startswith("model.")), torch.float32):
        raise refuse("training checkpoints hold float32 weights")

    streams = ("rng.tasks", dropout_stream_name(tensors))
    parameters = list(state.model.parameters())
    slots = {f"optimizer.{index}.{slot}" for index in range(len(parameters)) for slot in ADAM_SLOTS}
    present = {name for name in tensors if name.startswith("optimizer.")}
    unexpected = sorted(name for name in tensors
                        if not name.startswith(("model.", "optimizer.")) and name not in streams)
    if unexpected:
        raise refuse(f"unexpected tensors {unexpected[:4]}")
    # a parameter that never had a gradient (attn_xx's query and key under the identity pattern) has no Adam state
    stated = {index for index in range(len(parameters)) if any(f"optimizer.{index}.{slot}" in present
                                                                for slot in ADAM_SLOTS)}
    whole = {f"optimizer.{index}.{slot}" for index in stated for slot in ADAM_SLOTS}
    if present != whole or not present and step > 0:
        raise refuse(f"optimiser tensors {sorted(present ^ whole)[:4] or sorted(slots)[:4]} missing or unexpected")
    for index, parameter in enumerate(parameters):
        if index not in stated:
            continue
        moments = [tensors[f"optimizer.{index}.{slot}"] for slot in ("exp_avg", "exp_avg_sq")]
        count = tensors[f"optimizer.{index}.step"]
        if any(m.shape != parameter.shape or m.dtype != parameter.dtype for m in moments):
            raise refuse(f"optimizer.{index} moments have shape {tuple(moments[0].shape)}/{tuple(moments[1].shape)} "
                         f"and dtype {moments[0].dtype}, parameter {index} has {tuple(parameter.shape)}, "
                         f"{parameter.dtype}")
        if count.numel() != 1 or not count.is_floating_point() or not bool(torch.isfinite(count).all()) \
                or count.item() < 0:
            raise refuse(f"optimizer.{index}.step must be one non-negative count")
        if not all(bool(torch.isfinite(m).all()) for m in moments) or bool((moments[1] < 0).any()):
            raise refuse(f"optimizer.{index} moments must be finite (and exp_avg_sq >= 0)")

    groups = meta["optimizer"].get("param_groups") if isinstance(meta["optimizer"], dict) else None
    fresh_groups = json.loads(json.dumps(state.optimizer.state_dict()["param_groups"]))
    if not isinstance(groups, list) or len(groups) != len(fresh_groups) or not all(isinstance(g, dict) for g in groups):
        raise refuse(f"optimizer param_groups must be a list of {len(fresh_groups)} group(s)")
    for group, fresh in zip(groups, fresh_groups):
        if group.get("params") != fresh["params"]:
            raise refuse(f"optimizer param_groups name parameters {str(group.get('params'))[:60]}, the model has "
                         f"{fresh['params']}")
        lr = group.get("lr")
        if not (_is_number(lr) and 0 < lr <= state.config.lr):
            raise refuse(f"optimizer lr must be in (0, {state.config.lr}] (the schedule only lowers it), got {lr!r}")
        kernels = ("foreach", "fused")  # how Adam's update is computed, not what it computes
        differ = sorted(key for key in set(group) & set(fresh) - {"params", "lr", *kernels}
                        if group[key] != fresh[key])
        bad_kernel = [key for key in kernels if group.get(key) not in (None, True, False)]
        if differ or bad_kernel:
            raise refuse(f"optimizer settings {differ or bad_kernel} differ from Adam's of this config")

    if not all(name in tensors for name in streams):
        raise refuse(f"random-number states {[name for name in streams if name not in tensors]} are missing")
    for name in streams:
        wanted = state.tasks.get_state()
        if tensors[name].dtype != wanted.dtype or tensors[name].shape != wanted.shape:
            raise refuse(f"{name} must be a {wanted.dtype} state of shape {tuple(wanted.shape)}, got "
                         f"{tensors[name].dtype} {tuple(tensors[name].shape)}")


def _scheduler_state(saved: object, scheduler: torch.optim.lr_scheduler.ReduceLROnPlateau, source: str) -> dict:
    """The saved ReduceLROnPlateau state, checked against a fresh scheduler of the same config: its settings equal,
    its progress (best, counters, last learning rates) of the right types; keys the scheduler lacks are dropped."""
    fresh = scheduler.state_dict()
    if not isinstance(saved, dict):
        raise InvalidInput(f"{source}: scheduler state must be a JSON object, got {type(saved).__name__}")
    state = {key: value for key, value in saved.items() if key in fresh}
    differ = sorted(key for key in state if key not in SCHEDULER_PROGRESS
                    and json.loads(json.dumps(state[key])) != json.loads(json.dumps(fresh[key])))
    last_lr = state.get("_last_lr", fresh["_last_lr"])
    well_typed = (_is_number(state.get("best", 0.0)) and all(_is_count(state.get(key, 0)) for key in
                  ("num_bad_epochs", "cooldown_counter", "last_epoch"))
                  and isinstance(last_lr, list) and len(last_lr) == len(fresh["_last_lr"])
                  and all(_is_number(lr) and 0 < lr < math.inf for lr in last_lr))
    if differ or not well_typed:
        raise InvalidInput(f"{source}: scheduler state {differ or 'progress'} does not fit ReduceLROnPlateau of this "
                           "config; not a resumable checkpoint (damaged or crafted?)")
    return state
