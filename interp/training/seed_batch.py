"""Several seeds of one training configuration trained together as one batched computation (SPEC §2.7.4, §3.3).

Each seed keeps everything ``interp.training.train.train`` gives a run: its own initial weights, Adam optimiser,
ReduceLROnPlateau schedule, task stream, validation set, dropout stream, checkpoint (same format, resumable)
and curve. Only the arithmetic is shared: per step the S seeds' weights are stacked, (S, D, D), and the S
one-layer forwards, dropouts and smoothed losses run as one computation with the seed as a leading batch axis
(the attentions fold it into the task axis). Each seed's dropout masks are drawn from its own generator, which
starts where ``train``'s global RNG stands after the model initialisation and draws the same shapes in the same
order, so a seed trained here follows the run ``train`` gives it, up to float rounding (tested).

The layer (paper 2 Eq. 4, learned configuration of ``learned_model_config``):

    X' = X + A_xc(X, C) + A_xx(X, X),   C' = C + A_cx(C, X') + A_cc(C, C),   output C'[:, :d]
    A(Z, Z') = dropout(normaliser(-gamma ||Q z_i - K z'_j||^2 / sqrt(D))) (V Z' + b_V)
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp._checks import InvalidInput
from interp.algorithms import kmeans_objective
from interp.model.checkpoint import load_checkpoint, model_from_tensors, model_tensors, save_checkpoint
from interp.training.losses import smoothed_objective
from interp.model import KMeansTransformer
from interp.model.attention import FUSED_MIN_PAIRS, normalise
from interp.model.config import AttentionConfig
from interp.model.fused_attention import flash_attention, sample_dropped_pairs
from interp.tasks import init_centroids, sample_tasks
from interp.training.train import TrainConfig, ValidationSet, _load_optimizer, _optimizer_tensors, make_validation_set

TRAINER = "seed_batch"  # checkpoint metadata "trainer": which trainer can resume the file
ATTENTIONS = ("attn_xc", "attn_xx", "attn_cx", "attn_cc")
SLOTS = ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V")
BATCHED_NORMALISERS = ("softmax", "sparsemax")


@dataclass
class SeedRun:
    """One seed's state: model, optimiser, schedule, random streams, history and where it is saved."""

    config: TrainConfig
    out: Path
    model: KMeansTransformer
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.ReduceLROnPlateau
    tasks: torch.Generator  # validation set, then one batch per step
    dropout: torch.Generator  # attention-dropout masks
    validation: ValidationSet
    step: int = 0
    history: list | None = None
    diverged: str | None = None

    def save(self) -> dict:
        optim_tensors, optim_meta = _optimizer_tensors(self.optimizer)
        tensors = {**model_tensors(self.model), **optim_tensors,
                   "rng.tasks": self.tasks.get_state(), "rng.dropout": self.dropout.get_state()}
        meta = {"model_config": self.model.config.to_dict(), "train_config": asdict(self.config), "step": self.step,
                "history": self.history, "optimizer": optim_meta, "scheduler": self.scheduler.state_dict(),
                "trainer": TRAINER, "diverged": self.diverged}
        save_checkpoint(self.out, tensors, meta)
        return meta


# ----- the batched computation ------------------------------------------------------------------------------
def stacked_weights(runs: list[SeedRun]) -> dict[str, dict[str, Tensor | None]]:
    """Per attention, each slot stacked over seeds: W (S, D, D), b (S, D) or None (bias-free). Differentiable."""
    layers = [run.model.layers[0] for run in runs]
    out = {}
    for name in ATTENTIONS:
        weights = [getattr(layer, name) for layer in layers]
        out[name] = {slot: (None if getattr(weights[0], slot) is None
                            else torch.stack([getattr(w, slot) for w in weights])) for slot in SLOTS}
    return out


def _project(tokens: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """Z W^T + b per seed: tokens (S, B, t, D), weight (S, D, D), bias (S, D) -> (S, B, t, D)."""
    seeds, batch, count, width = tokens.shape
    flat = tokens.reshape(seeds, batch * count, width)  # (S, B*t, D): one (B*t, D) x (D, D) product per seed
    if bias is None:
        projected = flat @ weight.transpose(-1, -2)
    else:
        projected = torch.baddbmm(bias[:, None, :], flat, weight.transpose(-1, -2))
    return projected.view(seeds, batch, count, -1)


def _uses_fused(config: AttentionConfig, n_queries: int, n_keys: int, literal: bool) -> bool:
    """The same choice ``Attention.forward`` makes, so both trainers draw dropout for the same path."""
    return (not literal and n_queries * n_keys >= FUSED_MIN_PAIRS and config.normaliser == "softmax"
            and not config.hard and config.output_norm == "none")


def attention(queries: Tensor, keys: Tensor, weights: dict, config: AttentionConfig, fused: bool,
              dropout: Tensor | tuple[Tensor, Tensor, Tensor] | None) -> Tensor:
    """Euclidean attention per seed: queries (S, B, q, D), keys (S, B, r, D) -> (S, B, q, D).

    ``dropout``: None, a keep mask already divided by 1 - p (S, B, q, r), or for the fused path the dropped
    (task, query, key) positions over the folded (S * B) task axis."""
    seeds, batch, n_queries, width = queries.shape
    q = _project(queries, weights["W_Q"], weights["b_Q"])  # (S, B, q, D)
    k = _project(keys, weights["W_K"], weights["b_K"])  # (S, B, r, D)
    v = _project(keys, weights["W_V"], weights["b_V"])  # (S, B, r, D)
    scale = config.gamma / (math.sqrt(width) if config.scale_by_sqrt_dim else 1.0)
    if fused:  # -||q - k||^2 = [q, 1].[2k, -||k||^2] - ||q||^2; softmax ignores the per-query term
        q_aug = torch.cat([q, torch.ones_like(q[..., :1])], dim=-1).flatten(0, 1)  # (S*B, q, D+1)
        k_aug = torch.cat([2 * k, -(k * k).sum(-1, keepdim=True)], dim=-1).flatten(0, 1)  # (S*B, r, D+1)
        p = config.dropout if dropout is not None else 0.0
        out = flash_attention(q_aug, k_aug, v.flatten(0, 1), scale, p, dropout)  # (S*B, q, D)
        return out.view(seeds, batch, n_queries, width)
    # scores up to the per-query -||q||^2, which softmax and sparsemax ignore: (2 q.k - ||k||^2) scale
    scores = (2 * q @ k.transpose(-1, -2) - (k * k).sum(-1)[..., None, :]) * scale  # (S, B, q, r)
    pattern = normalise(scores, config, dim=-1)  # (S, B, q, r)
    if dropout is not None:
        pattern = pattern * dropout
    return pattern @ v  # (S, B, q, D)


def batched_step(weights: dict, points: Tensor, init: Tensor, codes: Tensor, configs: dict[str, AttentionConfig],
                 fused: dict[str, bool], dropout: dict | None = None) -> Tensor:
    """One re-embedded layer for every seed: points (S, B, n, d), init (S, B, k, d) -> centroids (S, B, k, d)."""
    seeds, batch, n, d = points.shape
    scratch = codes.shape[1]
    points_stream = torch.cat([points, points.new_zeros(seeds, batch, n, scratch)], dim=-1)  # (S, B, n, D)
    codes_tokens = codes.to(init).expand(seeds, batch, -1, -1)  # (S, B, k, e)
    centroids_stream = torch.cat([init, codes_tokens], dim=-1)  # (S, B, k, D)
    masks = dropout or {}
    attn_xc_out = attention(points_stream, centroids_stream, weights["attn_xc"], configs["attn_xc"], fused["attn_xc"],
                            masks.get("attn_xc"))  # (S, B, n, D)
    attn_xx_out = attention(points_stream, points_stream, weights["attn_xx"], configs["attn_xx"], fused["attn_xx"],
                            masks.get("attn_xx"))  # (S, B, n, D)
    points_post = points_stream + attn_xc_out + attn_xx_out  # (S, B, n, D)
    attn_cx_out = attention(centroids_stream, points_post, weights["attn_cx"], configs["attn_cx"], fused["attn_cx"],
                            masks.get("attn_cx"))  # (S, B, k, D)
    attn_cc_out = attention(centroids_stream, centroids_stream, weights["attn_cc"], configs["attn_cc"],
                            fused["attn_cc"], masks.get("attn_cc"))  # (S, B, k, D)
    centroids_post = centroids_stream + attn_cx_out + attn_cc_out  # (S, B, k, D)
    return centroids_post[..., :d]


def _shapes(config: TrainConfig) -> dict[str, tuple[int, int]]:
    """(queries, keys) per attention."""
    n, k = config.n, config.k
    return {"attn_xc": (n, k), "attn_xx": (n, n), "attn_cx": (k, n), "attn_cc": (k, k)}


def _draw_dropout(runs: list[SeedRun], batch: int, configs: dict, fused: dict, shapes: dict) -> dict:
    """Each seed's masks from its own generator, in ``train``'s order and layout: per attention a dense keep
    mask as F.dropout draws it (keys-major (B, r, q) when there are fewer keys than queries) or, on the fused
    path, the exact Bernoulli(p) dropped positions of ``sample_dropped_pairs``."""
    per_seed = {name: [] for name in ATTENTIONS}
    for run in runs:
        for name in ATTENTIONS:
            p = configs[name].dropout
            n_queries, n_keys = shapes[name]
            if fused[name]:
                per_seed[name].append(sample_dropped_pairs(batch, n_queries, n_keys, p, generator=run.dropout))
                continue
            keys_major = n_keys < n_queries and configs[name].normaliser != "gumbel"
            layout = (batch, n_keys, n_queries) if keys_major else (batch, n_queries, n_keys)
            keep = torch.empty(layout).bernoulli_(1 - p, generator=run.dropout).div_(1 - p)
            per_seed[name].append(keep.transpose(1, 2) if keys_major else keep)
    out = {}
    for name in ATTENTIONS:
        if fused[name]:
            offsets = [(index * batch + tasks, queries, keys) for index, (tasks, queries, keys) in enumerate(per_seed[name])]
            out[name] = tuple(torch.cat(parts) for parts in zip(*offsets))
        else:
            out[name] = torch.stack(per_seed[name])  # (S, B, q, r)
    return out


# ----- the training loop ------------------------------------------------------------------------------------
def _check_batchable(config: TrainConfig) -> None:
    if config.normaliser not in BATCHED_NORMALISERS:
        raise InvalidInput(f"normaliser={config.normaliser!r} is not supported by the seed-batched trainer "
                         f"(supported: {', '.join(BATCHED_NORMALISERS)}); train its seeds one by one with train()")


def _start(config: TrainConfig, out: Path, resume: bool) -> SeedRun:
    """A seed's run as ``train`` would start (or resume) it: same initial weights, validation set and streams."""
    torch.manual_seed(config.seed)  # model initialisation, as in train()
    tasks = torch.Generator().manual_seed(config.seed)
    validation = make_validation_set(config, tasks)
    model = KMeansTransformer(config.model_config()).train()
    dropout = torch.Generator()
    dropout.set_state(torch.get_rng_state())  # train() draws dropout from the global RNG from here on
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, foreach=True)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode="min", factor=config.plateau_factor, patience=config.plateau_patience)
    run = SeedRun(config, out, model, optimizer, scheduler, tasks, dropout, validation, 0, [])
    if not (resume and out.exists()):
        return run
    tensors, meta = load_checkpoint(out)
    if meta.get("trainer") != TRAINER:
        raise InvalidInput(f"{out} was written by train(), not the seed-batched trainer; resume it with train() "
                         "or pass another path")
    saved = dict(meta.get("train_config") or {})
    wanted = json.loads(json.dumps(asdict(config)))
    saved.pop("steps", None), wanted.pop("steps")
    if saved != wanted:
        raise InvalidInput(f"{out} was written by a different training config (saved: {meta.get('train_config')})")
    run.model = model_from_tensors(tensors, config.model_config(), str(out)).train()
    run.optimizer = torch.optim.Adam(run.model.parameters(), lr=config.lr, foreach=True)
    _load_optimizer(run.optimizer, tensors, meta["optimizer"])
    run.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        run.optimizer, mode="min", factor=config.plateau_factor, patience=config.plateau_patience)
    run.scheduler.load_state_dict(meta["scheduler"])
    run.tasks.set_state(tensors["rng.tasks"])
    run.dropout.set_state(tensors["rng.dropout"])
    run.step, run.history, run.diverged = meta["step"], meta["history"], meta.get("diverged")
    return run


@torch.no_grad()
def relative_objectives(runs: list[SeedRun], codes: Tensor, configs: dict, fused: dict, chunk: int = 64) -> list[float]:
    """Per seed: mean over its validation tasks of Phi(model, 1 step) / Phi(Lloyd, 1 iteration) (paper 2 Eq. 20)."""
    weights = stacked_weights(runs)
    ratios = []
    total = len(runs[0].validation.points)
    for start in range(0, total, chunk):
        points = torch.stack([run.validation.points[start : start + chunk] for run in runs])  # (S, c, n, d)
        init = torch.stack([run.validation.init[start : start + chunk] for run in runs])  # (S, c, k, d)
        lloyd = torch.stack([run.validation.lloyd_one_step[start : start + chunk] for run in runs])  # (S, c)
        centroids = batched_step(weights, points, init, codes, configs, fused)  # (S, c, k, d)
        objective = kmeans_objective(points.flatten(0, 1), centroids.flatten(0, 1)).view(lloyd.shape)
        ratios.append(objective / lloyd)
    return torch.cat(ratios, dim=1).mean(dim=1).tolist()


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
    diverged); the others go on. Seeds resumed at different steps train in groups of equal step.
    ``stop_after`` ends the work once a seed reaches that step, as an interruption would (as in ``train``)."""
    _check_batchable(config)
    if isinstance(seeds, (int, str)) or len(seeds) == 0:
        raise InvalidInput(f"seeds must be a non-empty list of ints, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise InvalidInput(f"seeds must be distinct, got {seeds!r}")
    if len(outs) != len(seeds):
        raise InvalidInput(f"outs must give one checkpoint path per seed ({len(seeds)}), got {len(outs)}")
    paths = [Path(out) for out in outs]
    for path in paths:
        if path.is_dir():
            raise InvalidInput(f"outs must be checkpoint file paths, got the folder {path}")
    if len(set(paths)) != len(paths):
        raise InvalidInput("outs must be distinct paths, one per seed")
    runs = [_start(replace(config, seed=seed), path, resume) for seed, path in zip(seeds, paths)]
    model_config = config.model_config()
    configs = {name: getattr(model_config, name) for name in ATTENTIONS}
    literal_xc = model_config.embedding == "none"  # the d-only model reads assignments from attn_xc's pattern
    shapes = _shapes(config)
    fused = {name: _uses_fused(configs[name], *shapes[name], literal=(name == "attn_xc" and literal_xc))
             for name in ATTENTIONS}
    codes = runs[0].model.codes  # (k, e)

    fresh = [run for run in runs if not run.history]
    if fresh:
        for run, rel in zip(fresh, relative_objectives(fresh, codes, configs, fused)):
            run.history.append({"step": 0, "loss": None, "relative_objective": rel,
                                "lr": run.optimizer.param_groups[0]["lr"]})
            run.save()
    by_step: dict[int, list[SeedRun]] = {}
    for run in runs:
        if run.diverged is None and run.step < config.steps:
            by_step.setdefault(run.step, []).append(run)
    for start_step in sorted(by_step):
        _train_group(by_step[start_step], config, codes, configs, fused, shapes, stop_after, progress)
    return [load_checkpoint(run.out)[1] for run in runs]


def _train_group(runs: list[SeedRun], config: TrainConfig, codes: Tensor, configs: dict, fused: dict,
                 shapes: dict, stop_after: int | None, progress: bool) -> None:
    """Train seeds that stand at the same step together until they finish, diverge or the budget runs out."""
    active = list(runs)
    step = active[0].step
    bar = tqdm(total=config.steps, initial=step, disable=not progress, dynamic_ncols=True,
               desc=f"train {len(active)} seeds")
    while active and step < config.steps:
        if stop_after is not None and step >= stop_after:
            break
        batches = [sample_tasks(config.task_config, config.batch, run.tasks).points for run in active]
        points = torch.stack(batches)  # (S, B, n, d)
        init = torch.stack([init_centroids(p, config.k, "first") for p in batches])  # (S, B, k, d)
        has_dropout = any(c.dropout > 0 for c in configs.values())
        masks = _draw_dropout(active, config.batch, configs, fused, shapes) if has_dropout else None
        centroids = batched_step(stacked_weights(active), points, init, codes, configs, fused, masks)  # (S, B, k, d)
        per_task = smoothed_objective(points.flatten(0, 1), centroids.flatten(0, 1), config.tau, config.loss,
                                      validate=False)
        losses = per_task.view(len(active), config.batch).mean(dim=1)  # (S,) each seed's batch loss
        finite = torch.isfinite(losses).tolist()
        for run in active:
            run.optimizer.zero_grad(set_to_none=True)
        losses[torch.tensor(finite)].sum().backward()  # seeds share no weights: each gets its own gradient
        step += 1
        for index, run in enumerate(active):
            if finite[index]:
                if config.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(run.model.parameters(), config.grad_clip)
                run.optimizer.step()
                finite[index] = all(bool(torch.isfinite(p).all()) for p in run.model.parameters())
                what = "weights"
            else:
                what = "loss"
            if not finite[index]:
                run.diverged = (f"{what} became non-finite at step {step}; the last good checkpoint "
                                f"(step {run.step}) is kept. Try a smaller lr or grad_clip.")
                _, meta = load_checkpoint(run.out)
                run.history = meta["history"]
                _mark_diverged(run)
        kept_losses = losses.detach()[torch.tensor(finite)].tolist()
        active = [run for run, ok in zip(active, finite) if ok]
        bar.update(1)
        if active and (step % config.eval_every == 0 or step == config.steps):
            rels = relative_objectives(active, codes, configs, fused)
            for run, rel, loss in zip(active, rels, kept_losses):
                run.scheduler.step(rel)
                run.step = step
                run.history.append({"step": step, "loss": loss, "relative_objective": rel,
                                    "lr": run.optimizer.param_groups[0]["lr"]})
                run.save()
            bar.set_postfix(rel=f"{min(rels):.3f}..{max(rels):.3f}")
    bar.close()


def _mark_diverged(run: SeedRun) -> None:
    """Rewrite the seed's last good checkpoint with the divergence note (tensors unchanged)."""
    tensors, meta = load_checkpoint(run.out)
    meta["diverged"] = run.diverged
    save_checkpoint(run.out, tensors, meta)
