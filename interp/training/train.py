"""Training the one-layer k-means transformer on a task distribution (paper 2, §3, Alg. 1; docs/learned_model.md).

Adam (lr 0.01), ReduceLROnPlateau(0.5, patience 5) on the relative validation objective every 50 steps,
10,000 steps of 32 tasks, a 320-task validation set drawn right after seeding, the smoothed loss at tau = 0.1.
Checkpoints (safetensors, atomic; ``interp.training.state.TrainingState``) hold weights, optimiser, scheduler,
both random-number states and the history, so an interrupted run resumes to the same final weights. A
non-finite loss stops the run with ``TrainingDiverged`` and leaves the last good checkpoint in place. One run at a
time writes a checkpoint (``interp.training.lock``). Seeds of one configuration train one by one, each its own run
(docs/decisions.md, "One training loop").
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp._checks import check_device, check_memory
from interp.algorithms import kmeans_objective, lloyd
from interp.model import KMeansTransformer
from interp.model.checkpoint import check_checkpoint_path, load_checkpoint
from interp.model.transformer import OutOfTrainingRange
from interp.tasks import init_centroids, sample_tasks
from interp.training.config import TrainConfig
from interp.training.lock import checkpoint_lock
from interp.training.losses import smoothed_loss
from interp.training.state import MixedValidationSet, TrainingDiverged, TrainingState, ValidationSet
from interp.training.task_mix import draw_task_config, model_input


@torch.no_grad()
def relative_objective(model: KMeansTransformer, validation: ValidationSet | MixedValidationSet, chunk: int = 64,
                       generator: torch.Generator | None = None, steps: int = 1, slot_order: str = "fixed") -> float:
    """Mean over validation tasks of Phi(model, ``steps`` steps) / Phi(Lloyd, 1 iteration) (paper 2, Eq. 20 for one
    step), in eval mode; ``generator`` drives a Gumbel normaliser's noise and shuffled slot orders (None: torch's
    global RNG)."""
    was_training = model.training
    model.eval()
    ratios = []
    for part in validation.parts:  # groups of one task size
        for start in range(0, len(part.points), chunk):
            points = part.points[start : start + chunk]  # (c, n, d)
            out = model(points, part.init[start : start + chunk], steps=steps, generator=generator,
                        slot_order=slot_order)
            ratios.append(kmeans_objective(points, out.centroids) / part.lloyd_one_step[start : start + chunk])
    model.train(was_training)
    return torch.cat(ratios).mean().item()


@torch.no_grad()
def lloyd_one_step(points: Tensor, init: Tensor) -> Tensor:
    """Phi (B,) after one Lloyd iteration from ``init`` (B, k, d), at least the smallest normal float: the relative
    loss's per-task constant."""
    return kmeans_objective(points, lloyd(points, init, 1).centroids).clamp_min(torch.finfo(points.dtype).tiny)


def validate(model: KMeansTransformer, state: TrainingState) -> float:
    """The run's relative validation objective: ``eval_steps`` steps in the run's slot order."""
    with warnings.catch_warnings():  # steps after the first read the model's own centroids
        warnings.simplefilter("ignore", OutOfTrainingRange)
        return relative_objective(model, state.validation, generator=state.dropout, steps=state.config.eval_steps,
                                  slot_order=state.config.slot_order)


def training_forward(model: KMeansTransformer, points: Tensor, init: Tensor, state: TrainingState) -> Tensor:
    """The centroids (B, k, d) the loss is taken on: s ~ U{0..rollout} steps without gradient from ``init`` (B, k, d)
    (s drawn from the tasks stream when rollout > 0), then ``unroll`` steps with gradient, all in the run's slot
    order (paper 2 trains one step: rollout 0, unroll 1, fixed order)."""
    config = state.config
    start = init  # (B, k, d)
    with warnings.catch_warnings():  # later steps read the model's own centroids, which may leave the unit cube
        warnings.simplefilter("ignore", OutOfTrainingRange)
        if config.rollout > 0:
            free_steps = int(torch.randint(config.rollout + 1, (1,), generator=state.tasks))
            if free_steps:
                with torch.no_grad():
                    start = model(points, init, steps=free_steps, generator=state.dropout,
                                  slot_order=config.slot_order).centroids  # (B, k, d)
        return model(points, start, steps=config.unroll, generator=state.dropout,
                     slot_order=config.slot_order).centroids  # (B, k, d)


def train(
    config: TrainConfig,
    out: str | os.PathLike,
    resume: bool = True,
    progress: bool = True,
    stop_after: int | None = None,
    device: str | torch.device = "cpu",
) -> dict:
    """Train (or resume) a run whose checkpoint is ``out``; returns the checkpoint metadata (with history).

    ``out`` must be a UTF-8 path in a folder that exists. The run holds the checkpoint's lock
    (``interp.training.lock``) from before it reads ``out`` until it returns: a second run on the same path is
    refused with ``CheckpointBusy``. ``stop_after`` ends the process's work after that many steps in total, as an
    interruption would (used by the resume test); the run resumes from its last checkpoint. A checkpoint of the
    former seed-batched trainer resumes as one of ``train``'s own; one it marked diverged raises ``TrainingDiverged``
    (``interp.training.state``).

    ``device`` ("cpu", "cuda", "cuda:1", "mps" or a ``torch.device``; ``check_device``) is where the model, the
    optimiser's state, each batch of tasks and the validation set live. It is not part of ``config``: a checkpoint
    is the same whichever machine wrote it, and resumes onto any device. The random streams stay CPU generators
    (``interp.training.state``): tasks are drawn on the CPU and moved, and dropout and Gumbel draws are made on the
    CPU and moved, so a seed draws the same numbers on every device. Per step the host waits for the device twice
    (the loss's finiteness and the weights' finiteness, which decide whether the run goes on), and at each
    evaluation for the objective and the loss it records.
    """
    device = check_device(device, "device")
    out = check_checkpoint_path(out, "out")
    check_memory("this training run", config.memory_needs())
    with checkpoint_lock(out):
        return _train_locked(config, out, resume, progress, stop_after, device)


def _train_locked(config: TrainConfig, out: Path, resume: bool, progress: bool, stop_after: int | None,
                  device: torch.device) -> dict:
    """The body of ``train``, run while holding the checkpoint's lock."""
    state = TrainingState.resume_or_start(out, config, resume, device)
    model = state.model
    if not state.history:
        state.record(validate(model, state), loss=None)
    last_meta = state.save(out) if state.step == 0 else None
    bar = tqdm(total=config.steps, initial=state.step, disable=not progress, desc=f"train {out.name}",
               dynamic_ncols=True)
    bar.set_postfix(rel=f"{state.history[-1]['relative_objective']:.3f}")
    while state.step < config.steps:
        if stop_after is not None and state.step >= stop_after:
            break
        task_config = draw_task_config(config, state.tasks)  # this batch's (k', d', n'): the run's own unless mixed
        points = model_input(sample_tasks(task_config, config.batch, state.tasks).points, config).to(device)
        init = init_centroids(points, task_config.k, "first")  # (B, k', d)
        centroids = training_forward(model, points, init, state)  # (B, k, d)
        reference = lloyd_one_step(points, init) if config.relative_loss else None  # (B,) or None
        loss = smoothed_loss(points, centroids, config.tau, config.loss, validate=False, reference=reference)
        failed = None if torch.isfinite(loss) else f"loss became {loss.item()}"
        if failed is None:
            state.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            state.optimizer.step()
            if not bool(torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all()):  # one sync
                failed = "weights became non-finite"
        if failed is not None:
            bar.close()
            raise TrainingDiverged(f"{failed} at step {state.step + 1}; the last good checkpoint (step "
                                   f"{state.history[-1]['step']}) is kept at {out}. Try a smaller lr or grad_clip.")
        state.step += 1
        bar.update(1)
        if state.step % config.eval_every == 0 or state.step == config.steps:
            state.record(validate(model, state), loss.item())
            bar.set_postfix(rel=f"{state.history[-1]['relative_objective']:.3f}", loss=f"{loss.item():.1f}")
            last_meta = state.save(out)
    bar.close()
    if last_meta is None:
        last_meta = load_checkpoint(out)[1]
    return last_meta
