"""Several seeds of one training configuration trained together as one batched computation (paper 2, §3, Alg. 1).

Each seed keeps everything ``interp.training.train.train`` gives a run, its own ``TrainingState``: initial weights,
Adam optimiser, ReduceLROnPlateau schedule, task stream, validation set, dropout stream, checkpoint (same format,
resumable) and curve. Only the arithmetic is shared: per step the S seeds' weights are stacked
(``StackedLayerWeights``, (S, D, D)) and one ``Block`` runs the S one-layer forwards with the seed as a leading axis
(``interp.model.attention``, "Seed axis"), followed by one smoothed loss over all S * B tasks. Each seed draws its
dropout masks from its own stream, which starts where ``train``'s does and draws the same shapes in the same order,
so a seed trained here follows the run ``train`` gives it, up to float rounding (tested).

The layer (paper 2, Eq. 4, learned configuration of ``learned_model_config``):

    X' = X + A_xc(X, C) + A_xx(X, X),   C' = C + A_cx(C, X') + A_cc(C, C),   output C'[:, :d]
    A(Z, Z') = dropout(normaliser(-gamma ||Q z_i - K z'_j||^2 / sqrt(D))) (V Z' + b_V)
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp._checks import InvalidInput
from interp.algorithms import kmeans_objective
from interp.model.attention import Generators
from interp.model.block import Block, StackedLayerWeights
from interp.model.checkpoint import check_checkpoint_path, load_checkpoint, save_checkpoint
from interp.model.config import ModelConfig
from interp.model.embedding import embed_centroids, embed_points
from interp.tasks import init_centroids, sample_tasks
from interp.training.lock import checkpoint_lock
from interp.training.losses import smoothed_objective
from interp.training.state import TrainingState
from interp.training.train import TrainConfig

TRAINER = "seed_batch"  # checkpoint metadata "trainer": which trainer can resume the file
BATCHED_NORMALISERS = ("softmax", "sparsemax")


def stacked_weights(states: list[TrainingState]) -> StackedLayerWeights:
    """The seeds' one layer stacked over seeds: W (S, D, D), b (S, D). Differentiable."""
    return StackedLayerWeights.stack([state.model.layers[0] for state in states])


def batched_step(block: Block, config: ModelConfig, weights: StackedLayerWeights, points: Tensor, init: Tensor,
                 codes: Tensor, generator: Generators = None) -> Tensor:
    """One re-embedded step of S models through ``block``: points (S, B, n, d), init (S, B, k, d) -> centroids
    (S, B, k, d). ``generator``: one dropout stream per model (or one for all, or None: the global RNG)."""
    seeds, batch = points.shape[:2]
    points_stream = embed_points(points.flatten(0, 1), config.scratch_width, config.norm_slot)  # (S*B, n, D)
    centroids_stream = embed_centroids(init.flatten(0, 1), codes, config.norm_slot)  # (S*B, k, D)
    need_pattern = config.embedding == "none"  # as the model's forward: a d-only model reads attn_xc's pattern
    _, centroids_post, _ = block(points_stream.unflatten(0, (seeds, batch)),
                                 centroids_stream.unflatten(0, (seeds, batch)), weights, need_pattern, generator)
    return centroids_post[..., : config.d]  # (S, B, k, d)


@torch.no_grad()
def relative_objectives(states: list[TrainingState], block: Block, config: ModelConfig, codes: Tensor,
                        chunk: int = 64) -> list[float]:
    """Per seed: mean over its validation tasks of Phi(model, 1 step) / Phi(Lloyd, 1 iteration) (paper 2, Eq. 20),
    in eval mode, as ``train``'s ``relative_objective``."""
    weights = stacked_weights(states)
    generators = [state.dropout for state in states]
    ratios = []
    total = len(states[0].validation.points)
    block.eval()
    try:
        for start in range(0, total, chunk):
            points = torch.stack([state.validation.points[start : start + chunk] for state in states])  # (S, c, n, d)
            init = torch.stack([state.validation.init[start : start + chunk] for state in states])  # (S, c, k, d)
            lloyd = torch.stack([state.validation.lloyd_one_step[start : start + chunk] for state in states])  # (S, c)
            centroids = batched_step(block, config, weights, points, init, codes, generators)  # (S, c, k, d)
            objective = kmeans_objective(points.flatten(0, 1), centroids.flatten(0, 1)).view(lloyd.shape)  # (S, c)
            ratios.append(objective / lloyd)
    finally:
        block.train()
    return torch.cat(ratios, dim=1).mean(dim=1).tolist()


def _check_batchable(config: TrainConfig) -> None:
    if config.normaliser not in BATCHED_NORMALISERS:
        raise InvalidInput(f"normaliser={config.normaliser!r} is not supported by the seed-batched trainer "
                           f"(supported: {', '.join(BATCHED_NORMALISERS)}); train its seeds one by one with train()")
    defaults = TrainConfig(d=config.d, k=config.k, n=config.n)
    changed = [name for name in ("slot_order", "unroll", "rollout", "eval_steps", "init_from", "attn_xx_identity")
               if getattr(config, name) != getattr(defaults, name)]
    if changed:
        raise InvalidInput(f"the seed-batched trainer runs the papers' one-step training only; {', '.join(changed)} "
                           "need train(), one seed at a time")


def train_seeds(
    config: TrainConfig,
    seeds: list[int],
    outs: list[str | os.PathLike],
    resume: bool = True,
    progress: bool = True,
    stop_after: int | None = None,
) -> list[dict]:
    """Train (or resume) ``config`` once per seed, all seeds as one batched computation; returns each seed's
    checkpoint metadata (``history`` is its curve; ``diverged`` says why a seed stopped early, else None).

    A seed whose loss or weights turn non-finite stops there (its last good checkpoint is kept, marked
    diverged); the others go on. Seeds resumed at different steps train in groups of equal step. Each path must be
    a UTF-8 path in a folder that exists; the run holds every seed's checkpoint lock until it returns (a path another
    run is writing is refused with ``CheckpointBusy``). ``stop_after`` ends the work once a seed reaches that step,
    as an interruption would (as in ``train``)."""
    _check_batchable(config)
    if isinstance(seeds, (int, str)) or len(seeds) == 0:
        raise InvalidInput(f"seeds must be a non-empty list of ints, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise InvalidInput(f"seeds must be distinct, got {seeds!r}")
    if len(outs) != len(seeds):
        raise InvalidInput(f"outs must give one checkpoint path per seed ({len(seeds)}), got {len(outs)}")
    paths = [check_checkpoint_path(out, "outs") for out in outs]
    if len({path.resolve() for path in paths}) != len(paths):
        raise InvalidInput("outs must be distinct paths, one per seed")
    with ExitStack() as locks:
        for path in paths:
            locks.enter_context(checkpoint_lock(path))
        return _train_seeds_locked(config, seeds, paths, resume, progress, stop_after)


def _train_seeds_locked(config: TrainConfig, seeds: list[int], paths: list[Path], resume: bool, progress: bool,
                        stop_after: int | None) -> list[dict]:
    """The body of ``train_seeds``, run while holding every seed's checkpoint lock."""
    states = [TrainingState.resume_or_start(path, replace(config, seed=seed), TRAINER, resume)
              for seed, path in zip(seeds, paths)]
    out_of = {state.config.seed: path for state, path in zip(states, paths)}  # seeds are distinct
    model_config = config.model_config()
    block = Block(model_config).train()  # hook points and computation; the weights are the seeds' own
    codes = states[0].model.codes  # (k, e)

    fresh = [state for state in states if not state.history]
    if fresh:
        for state, rel in zip(fresh, relative_objectives(fresh, block, model_config, codes)):
            state.record(rel, loss=None)
            state.save(out_of[state.config.seed])
    by_step: dict[int, list[TrainingState]] = {}
    for state in states:
        if state.diverged is None and state.step < config.steps:
            by_step.setdefault(state.step, []).append(state)
    for start_step in sorted(by_step):
        _train_group(by_step[start_step], out_of, block, model_config, codes, stop_after, progress)
    return [load_checkpoint(path)[1] for path in paths]


def _train_group(states: list[TrainingState], out_of: dict[int, Path], block: Block, model_config: ModelConfig,
                 codes: Tensor, stop_after: int | None, progress: bool) -> None:
    """Train seeds that stand at the same step together until they finish, diverge or the budget runs out."""
    config = states[0].config
    active = list(states)
    step = active[0].step
    bar = tqdm(total=config.steps, initial=step, disable=not progress, dynamic_ncols=True,
               desc=f"train {len(active)} seeds")
    while active and step < config.steps:
        if stop_after is not None and step >= stop_after:
            break
        batches = [sample_tasks(config.task_config, config.batch, state.tasks).points for state in active]
        points = torch.stack(batches)  # (S, B, n, d)
        init = torch.stack([init_centroids(p, config.k, "first") for p in batches])  # (S, B, k, d)
        centroids = batched_step(block, model_config, stacked_weights(active), points, init, codes,
                                 [state.dropout for state in active])  # (S, B, k, d)
        per_task = smoothed_objective(points.flatten(0, 1), centroids.flatten(0, 1), config.tau, config.loss,
                                      validate=False)  # (S*B,)
        losses = per_task.view(len(active), config.batch).mean(dim=1)  # (S,) each seed's batch loss
        finite = torch.isfinite(losses).tolist()
        for state in active:
            state.optimizer.zero_grad(set_to_none=True)
        losses[torch.tensor(finite)].sum().backward()  # seeds share no weights: each gets its own gradient
        step += 1
        for index, state in enumerate(active):
            what = "loss"
            if finite[index]:
                if config.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(state.model.parameters(), config.grad_clip)
                state.optimizer.step()
                finite[index] = all(bool(torch.isfinite(p).all()) for p in state.model.parameters())
                what = "weights"
            if finite[index]:
                state.step = step
            else:
                state.diverged = _mark_diverged(out_of[state.config.seed], what, step)
        kept_losses = losses.detach()[torch.tensor(finite)].tolist()
        active = [state for state, ok in zip(active, finite) if ok]
        bar.update(1)
        if active and (step % config.eval_every == 0 or step == config.steps):
            rels = relative_objectives(active, block, model_config, codes)
            for state, rel, loss in zip(active, rels, kept_losses):
                state.record(rel, loss)
                state.save(out_of[state.config.seed])
            bar.set_postfix(rel=f"{min(rels):.3f}..{max(rels):.3f}")
    bar.close()


def _mark_diverged(path: Path, what: str, step: int) -> str:
    """Rewrite the seed's last good checkpoint with a divergence note (tensors unchanged); returns the note."""
    tensors, meta = load_checkpoint(path)
    meta["diverged"] = (f"{what} became non-finite at step {step}; the last good checkpoint (step {meta['step']}) "
                        "is kept. Try a smaller lr or grad_clip.")
    save_checkpoint(path, tensors, meta)
    return meta["diverged"]
