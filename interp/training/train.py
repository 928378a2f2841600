"""Training the one-layer k-means transformer on a task distribution (paper 2, §3, Alg. 1; docs/learned_model.md).

Adam (lr 0.01), ReduceLROnPlateau(0.5, patience 5) on the relative validation objective every 50 steps,
10,000 steps of 32 tasks, a 320-task validation set drawn right after seeding, the smoothed loss at tau = 0.1.
Checkpoints (safetensors, atomic; ``interp.training.state.TrainingState``) hold weights, optimiser, scheduler,
both random-number states and the history, so an interrupted run resumes to the same final weights. A
non-finite loss stops the run with ``TrainingDiverged`` and leaves the last good checkpoint in place.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from tqdm.auto import tqdm

from interp._checks import InvalidInput, check_choice, check_positive_int
from interp.algorithms import kmeans_objective
from interp.model.checkpoint import load_checkpoint
from interp.training.losses import LOSSES, smoothed_loss
from interp.training.state import TrainingState, ValidationSet
from interp.model import KMeansTransformer, ModelConfig
from interp.model.config import EMBEDDINGS, learned_model_config
from interp.tasks import FAMILIES, TaskConfig, init_centroids, sample_tasks


@dataclass(frozen=True)
class TrainConfig:
    """One training run (defaults: the papers' main configuration, paper 2, App. F; docs/learned_model.md)."""

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


@torch.no_grad()
def relative_objective(model: KMeansTransformer, validation: ValidationSet, chunk: int = 64,
                       generator: torch.Generator | None = None) -> float:
    """Mean over validation tasks of Phi(model, 1 step) / Phi(Lloyd, 1 iteration) (paper 2, Eq. 20), in eval mode;
    ``generator`` drives a Gumbel normaliser's noise (None: torch's global RNG)."""
    was_training = model.training
    model.eval()
    ratios = []
    for start in range(0, len(validation.points), chunk):
        points = validation.points[start : start + chunk]
        out = model(points, validation.init[start : start + chunk], steps=1, generator=generator)
        ratios.append(kmeans_objective(points, out.centroids) / validation.lloyd_one_step[start : start + chunk])
    model.train(was_training)
    return torch.cat(ratios).mean().item()


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
    state = TrainingState.resume_or_start(out, config, "train", resume)
    model = state.model
    if not state.history:
        state.record(relative_objective(model, state.validation, generator=state.dropout), loss=None)
    last_meta = state.save(out) if state.step == 0 else None
    bar = tqdm(total=config.steps, initial=state.step, disable=not progress, desc=f"train {out.name}",
               dynamic_ncols=True)
    bar.set_postfix(rel=f"{state.history[-1]['relative_objective']:.3f}")
    while state.step < config.steps:
        if stop_after is not None and state.step >= stop_after:
            break
        points = sample_tasks(config.task_config, config.batch, state.tasks).points  # (B, n, d)
        init = init_centroids(points, config.k, "first")  # (B, k, d)
        centroids = model(points, init, steps=1, generator=state.dropout).centroids  # (B, k, d)
        loss = smoothed_loss(points, centroids, config.tau, config.loss, validate=False)
        failed = None if torch.isfinite(loss) else f"loss became {loss.item()}"
        if failed is None:
            state.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            state.optimizer.step()
            if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
                failed = "weights became non-finite"
        if failed is not None:
            bar.close()
            raise TrainingDiverged(f"{failed} at step {state.step + 1}; the last good checkpoint (step "
                                   f"{state.history[-1]['step']}) is kept at {out}. Try a smaller lr or grad_clip.")
        state.step += 1
        bar.update(1)
        if state.step % config.eval_every == 0 or state.step == config.steps:
            state.record(relative_objective(model, state.validation, generator=state.dropout), loss.item())
            bar.set_postfix(rel=f"{state.history[-1]['relative_objective']:.3f}", loss=f"{loss.item():.1f}")
            last_meta = state.save(out)
    bar.close()
    if last_meta is None:
        last_meta = load_checkpoint(out)[1]
    return last_meta
