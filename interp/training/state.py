"""The state of one training run and its checkpoint, shared by ``train`` and ``train_seeds`` (paper 2, §3, Alg. 1).

A run is its ``TrainConfig`` plus everything that decides how it goes on, all saved in one checkpoint:

* the model's weights, the Adam optimiser and the ReduceLROnPlateau schedule;
* two random streams: ``tasks`` (the validation set, then one batch of tasks per step) and ``dropout`` (attention
  dropout and Gumbel noise), which starts where torch's global RNG stands after the model initialisation;
* the step, the history (one entry per evaluation: step, loss, relative validation objective, learning rate) and,
  for the seed-batched trainer, why the run stopped early (``diverged``).

The validation set is not saved: it is drawn again from the seed. Checkpoint layout (``interp.model.checkpoint``,
atomic writes): tensors ``model.*``, ``optimizer.{index}.{slot}``, ``rng.tasks`` and the dropout stream, saved as
``rng.torch`` by ``train`` (the name it has when it is torch's global RNG) and as ``rng.dropout`` by ``train_seeds``;
metadata model_config, train_config, step, history, optimizer (parameter groups), scheduler, and for the
seed-batched trainer ``trainer`` and ``diverged``. A file is resumed by the trainer that wrote it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from interp._checks import InvalidInput, check_choice
from interp.algorithms import kmeans_objective, lloyd
from interp.model import KMeansTransformer
from interp.model.checkpoint import load_checkpoint, model_from_tensors, model_tensors, save_checkpoint
from interp.tasks import init_centroids, sample_tasks

if TYPE_CHECKING:
    from interp.training.config import TrainConfig

TRAINERS = ("train", "seed_batch")  # train(): one run; seed_batch: train_seeds(), several seeds as one computation
DROPOUT_STREAM = {"train": "rng.torch", "seed_batch": "rng.dropout"}  # checkpoint name of the dropout stream
WRITER = {"train": "train()", "seed_batch": "the seed_batch trainer (train_seeds)"}


@dataclass
class ValidationSet:
    """Fixed validation tasks with their one-step Lloyd objective (the denominator of the relative objective)."""

    points: Tensor  # (V, n, d)
    init: Tensor  # (V, k, d)
    lloyd_one_step: Tensor  # (V,)


def make_validation_set(config: TrainConfig, generator: torch.Generator) -> ValidationSet:
    """``config.val_tasks`` tasks from ``generator``, their first k points as initial centres (the data are
    shuffled, so a uniform random k-subset) and Phi after one Lloyd iteration."""
    points = sample_tasks(config.task_config, config.val_tasks, generator).points  # (V, n, d)
    init = init_centroids(points, config.k, "first")  # (V, k, d)
    return ValidationSet(points, init, kmeans_objective(points, lloyd(points, init, 1).centroids))


@dataclass
class TrainingState:
    """Everything a run needs to continue: the same state resumed gives the same weights as an uninterrupted run."""

    config: TrainConfig
    trainer: str  # one of TRAINERS: which trainer writes and resumes the checkpoint
    model: KMeansTransformer
    optimizer: torch.optim.Adam
    scheduler: torch.optim.lr_scheduler.ReduceLROnPlateau
    tasks: torch.Generator  # validation set, then one batch per step
    dropout: torch.Generator  # attention dropout (and Gumbel noise), training and validation forwards
    validation: ValidationSet
    step: int = 0
    history: list[dict] = field(default_factory=list)
    diverged: str | None = None  # seed_batch: why the run stopped early

    @classmethod
    def start(cls, config: TrainConfig, trainer: str = "train") -> TrainingState:
        """A fresh run: torch.manual_seed(seed) for the initial weights, the tasks stream seeded with the same seed
        (validation set first), the dropout stream continuing torch's global RNG after the initialisation."""
        check_choice(trainer, "trainer", TRAINERS)
        torch.manual_seed(config.seed)
        tasks = torch.Generator().manual_seed(config.seed)
        validation = make_validation_set(config, tasks)
        model = KMeansTransformer(config.model_config()).train()
        dropout = torch.Generator()
        dropout.set_state(torch.get_rng_state())
        optimizer, scheduler = _optimiser(model, config)
        return cls(config, trainer, model, optimizer, scheduler, tasks, dropout, validation)

    @classmethod
    def load(cls, path: str | os.PathLike, config: TrainConfig, trainer: str = "train") -> TrainingState:
        """The run saved at ``path`` by ``trainer``, continued under ``config`` (equal to the saved training config
        except, possibly, more ``steps``)."""
        path = Path(path)
        state = cls.start(config, trainer)  # the validation set and the stream objects
        tensors, meta = load_checkpoint(path)
        written_by = meta.get("trainer") or "train"
        if written_by != trainer:
            raise InvalidInput(f"{path} was written by {WRITER.get(written_by, repr(written_by))}, not "
                               f"{WRITER[trainer]}; resume it with that trainer or pass another path")
        saved = dict(meta.get("train_config") or {})
        wanted = json.loads(json.dumps(asdict(config)))
        saved.pop("steps", None), wanted.pop("steps")  # a run may be extended with more steps
        if saved != wanted:
            raise InvalidInput(f"{path} was written by a different training config; pass another path or start "
                               f"afresh (resume=False, --no-resume) (saved: {meta.get('train_config')})")
        state.model = model_from_tensors(tensors, config.model_config(), str(path)).train()
        state.optimizer, state.scheduler = _optimiser(state.model, config)
        _load_optimizer(state.optimizer, tensors, meta["optimizer"])
        state.scheduler.load_state_dict(meta["scheduler"])
        state.tasks.set_state(tensors["rng.tasks"])
        state.dropout.set_state(tensors[DROPOUT_STREAM[trainer]])
        state.step, state.history, state.diverged = meta["step"], meta["history"], meta.get("diverged")
        return state

    @classmethod
    def resume_or_start(cls, path: str | os.PathLike, config: TrainConfig, trainer: str = "train",
                        resume: bool = True) -> TrainingState:
        """``load`` the run at ``path`` when ``resume`` and the file exists, else ``start`` one."""
        if resume and Path(path).exists():
            return cls.load(path, config, trainer)
        return cls.start(config, trainer)

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
                   DROPOUT_STREAM[self.trainer]: self.dropout.get_state()}
        meta = {"model_config": self.model.config.to_dict(), "train_config": asdict(self.config), "step": self.step,
                "history": self.history, "optimizer": optimizer_meta, "scheduler": self.scheduler.state_dict()}
        if self.trainer != "train":
            meta.update(trainer=self.trainer, diverged=self.diverged)
        save_checkpoint(path, tensors, meta)
        return json.loads(json.dumps(meta))


def _optimiser(model: KMeansTransformer, config: TrainConfig):
    """Adam at ``config.lr`` and ReduceLROnPlateau (minimising the relative objective) over ``model``'s parameters."""
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, foreach=True)
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


def _load_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, Tensor], meta: dict) -> None:
    """Inverse of ``_optimizer_tensors``."""
    state: dict = {}
    for name, tensor in tensors.items():
        if name.startswith("optimizer."):
            _, index, slot = name.split(".", 2)
            state.setdefault(int(index), {})[slot] = tensor
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
