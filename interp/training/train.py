"""Training the one-layer k-means transformer on a task distribution (SPEC §2.7, §3.3 Alg. 1).

Adam (lr 0.01), ReduceLROnPlateau(0.5, patience 5) on the relative validation objective every 50 steps,
10,000 steps of 32 tasks, a 320-task validation set drawn right after seeding, the smoothed loss at tau = 0.1.
Checkpoints (safetensors, atomic) hold weights, optimiser, scheduler, both random-number states and the
history, so an interrupted run resumes to the same final weights. A non-finite loss stops the run with
``TrainingDiverged`` and leaves the last good checkpoint in place.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp._checks import InvalidInput, check_choice, check_positive_int
from interp.algorithms import kmeans_objective, lloyd
from interp.model.checkpoint import load_checkpoint, model_from_tensors, model_tensors, save_checkpoint
from interp.training.losses import LOSSES, smoothed_loss
from interp.model import KMeansTransformer, ModelConfig
from interp.model.config import EMBEDDINGS, learned_model_config
from interp.tasks import FAMILIES, TaskConfig, init_centroids, sample_tasks


@dataclass(frozen=True)
class TrainConfig:
    """One training run (defaults: the papers' main configuration, SPEC §2.7.4)."""

    d: int = 32
    k: int = 10
    n: int = 512
    embedding: str = "onehot"
    family: str = "normal"
    scale: float = 0.1
    normaliser: str = "softmax"  # attention normaliser: softmax, sparsemax, normmax (alpha 2), gumbel (tau 1)
    loss: str = "softmin"  # smoothed loss weights: softmin (NE) or sparsemax (L2)
    tau: float = 0.1
    lr: float = 0.01
    steps: int = 10_000
    batch: int = 32
    val_tasks: int = 320
    eval_every: int = 50
    plateau_factor: float = 0.5
    plateau_patience: int = 5
    dropout: float = 0.01
    bias: bool = True
    grad_clip: float | None = None
    seed: int = 153476998

    def __post_init__(self) -> None:
        for name in ("d", "k", "n", "steps", "batch", "val_tasks", "eval_every"):
            check_positive_int(getattr(self, name), name)
        check_positive_int(self.plateau_patience, "plateau_patience", minimum=0)
        check_choice(self.embedding, "embedding", EMBEDDINGS)
        check_choice(self.family, "family", FAMILIES)
        check_choice(self.loss, "loss", LOSSES)
        check_choice(self.normaliser, "normaliser", ("softmax", "sparsemax", "normmax", "gumbel"))
        for name in ("tau", "lr", "scale"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise InvalidInput(f"{name} must be a positive finite number, got {value!r}")
        if not 0 < self.plateau_factor < 1:
            raise InvalidInput(f"plateau_factor must be in (0, 1), got {self.plateau_factor!r}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise InvalidInput(f"grad_clip must be positive or None, got {self.grad_clip!r}")
        if self.k > self.n:
            raise InvalidInput(f"k={self.k} must not exceed n={self.n}")

    @property
    def task_config(self) -> TaskConfig:
        return TaskConfig(n=self.n, d=self.d, k=self.k, family=self.family, scale=self.scale)

    def model_config(self) -> ModelConfig:
        return learned_model_config(self.d, self.k, self.embedding, self.normaliser, dropout=self.dropout, bias=self.bias)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise InvalidInput(f"unknown training config fields: {sorted(unknown)}")
        return cls(**data)


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


@dataclass
class ValidationSet:
    """Fixed validation tasks with their one-step Lloyd objective (the denominator of the relative objective)."""

    points: Tensor  # (V, n, d)
    init: Tensor  # (V, k, d)
    lloyd_one_step: Tensor  # (V,)


def make_validation_set(config: TrainConfig, generator: torch.Generator) -> ValidationSet:
    points = sample_tasks(config.task_config, config.val_tasks, generator).points  # (V, n, d)
    init = init_centroids(points, config.k, "first")  # data are shuffled: the first k points (SPEC §2.7.3)
    return ValidationSet(points, init, kmeans_objective(points, lloyd(points, init, 1).centroids))


@torch.no_grad()
def relative_objective(model: KMeansTransformer, validation: ValidationSet, chunk: int = 64) -> float:
    """Mean over validation tasks of Phi(model, 1 step) / Phi(Lloyd, 1 iteration) (SPEC §2.7.4, paper 2 Eq. 20)."""
    was_training = model.training
    model.eval()
    ratios = []
    for start in range(0, len(validation.points), chunk):
        points = validation.points[start : start + chunk]
        out = model(points, validation.init[start : start + chunk], steps=1)
        ratios.append(kmeans_objective(points, out.centroids) / validation.lloyd_one_step[start : start + chunk])
    model.train(was_training)
    return torch.cat(ratios).mean().item()


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, Tensor], dict]:
    state = optimizer.state_dict()
    tensors = {}
    for index, slots in state["state"].items():
        for slot, value in slots.items():
            tensors[f"optimizer.{index}.{slot}"] = torch.as_tensor(value)
    return tensors, {"param_groups": state["param_groups"]}


def _load_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, Tensor], meta: dict) -> None:
    state: dict = {}
    for name, tensor in tensors.items():
        if name.startswith("optimizer."):
            _, index, slot = name.split(".", 2)
            state.setdefault(int(index), {})[slot] = tensor
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def train(
    config: TrainConfig,
    out: str | os.PathLike,
    resume: bool = True,
    progress: bool = True,
    stop_after: int | None = None,
) -> dict:
    """Train (or resume) a run whose checkpoint is ``out``; returns the checkpoint metadata (with history).

    ``stop_after`` ends the process's work after that many steps in total, as an interruption would (used by
    the resume test); the run resumes from its last checkpoint.
    """
    out = Path(out)
    if out.is_dir():
        raise InvalidInput(f"out must be a checkpoint file path, got the folder {out}")
    torch.manual_seed(config.seed)  # model initialisation and dropout
    generator = torch.Generator().manual_seed(config.seed)  # tasks: validation first, then training batches
    validation = make_validation_set(config, generator)
    model = KMeansTransformer(config.model_config()).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, foreach=True)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode="min", factor=config.plateau_factor, patience=config.plateau_patience)
    step, history = 0, []
    if resume and out.exists():
        tensors, meta = load_checkpoint(out)
        if meta.get("trainer") is not None:
            raise InvalidInput(f"{out} was written by the {meta['trainer']} trainer; resume it with "
                             "interp.training.seed_batch.train_seeds or pass another --out")
        saved = dict(meta.get("train_config") or {})
        wanted = json.loads(json.dumps(asdict(config)))
        saved.pop("steps", None), wanted.pop("steps")  # a run may be extended with more steps
        if saved != wanted:
            raise InvalidInput(f"{out} was written by a different training config; pass another --out or --no-resume "
                             f"(saved: {meta.get('train_config')})")
        model = model_from_tensors(tensors, config.model_config(), str(out)).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, foreach=True)
        _load_optimizer(optimizer, tensors, meta["optimizer"])
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="min", factor=config.plateau_factor, patience=config.plateau_patience)
        scheduler.load_state_dict(meta["scheduler"])
        generator.set_state(tensors["rng.tasks"])
        torch.set_rng_state(tensors["rng.torch"])
        step, history = meta["step"], meta["history"]
    if not history:
        history.append({"step": 0, "loss": None, "relative_objective": relative_objective(model, validation),
                        "lr": optimizer.param_groups[0]["lr"]})

    def checkpoint() -> dict:
        optim_tensors, optim_meta = _optimizer_tensors(optimizer)
        tensors = {**model_tensors(model), **optim_tensors,
                   "rng.tasks": generator.get_state(), "rng.torch": torch.get_rng_state()}
        meta = {"model_config": model.config.to_dict(), "train_config": asdict(config), "step": step,
                "history": history, "optimizer": optim_meta, "scheduler": scheduler.state_dict()}
        save_checkpoint(out, tensors, meta)
        return meta

    last_meta = checkpoint() if step == 0 else None
    bar = tqdm(total=config.steps, initial=step, disable=not progress, desc=f"train {out.name}", dynamic_ncols=True)
    bar.set_postfix(rel=f"{history[-1]['relative_objective']:.3f}")
    while step < config.steps:
        if stop_after is not None and step >= stop_after:
            break
        points = sample_tasks(config.task_config, config.batch, generator).points  # (B, n, d)
        init = init_centroids(points, config.k, "first")  # (B, k, d)
        loss = smoothed_loss(points, model(points, init, steps=1).centroids, config.tau, config.loss, validate=False)
        if not torch.isfinite(loss):
            bar.close()
            raise TrainingDiverged(f"loss became {loss.item()} at step {step + 1}; the last good checkpoint "
                                   f"(step {step - step % config.eval_every}) is kept at {out}. "
                                   "Try a smaller lr or grad_clip.")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
            bar.close()
            raise TrainingDiverged(f"weights became non-finite at step {step + 1}; the last good checkpoint "
                                   f"(step {step - step % config.eval_every}) is kept at {out}. "
                                   "Try a smaller lr or grad_clip.")
        step += 1
        bar.update(1)
        if step % config.eval_every == 0 or step == config.steps:
            rel = relative_objective(model, validation)
            scheduler.step(rel)
            history.append({"step": step, "loss": loss.item(), "relative_objective": rel,
                            "lr": optimizer.param_groups[0]["lr"]})
            bar.set_postfix(rel=f"{rel:.3f}", loss=f"{loss.item():.1f}")
            last_meta = checkpoint()
    bar.close()
    if last_meta is None:
        last_meta = load_checkpoint(out)[1]
    return last_meta
