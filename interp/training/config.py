"""``TrainConfig``: one training run's settings, checked at construction (paper 2, §3, App. F;
docs/learned_model.md). Torch-free, so the command line checks its arguments before importing torch."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from interp._checks import (
    MAX_STEPS,
    MAX_TASKS,
    InvalidInput,
    MemoryNeed,
    check_choice,
    check_count,
    check_positive_int,
    check_seed,
    check_steps,
)
from interp.model.config import EMBEDDINGS, SLOT_ORDERS, TRAINED_MODEL_FIELDS, ModelConfig, trained_model_config
from interp.task_config import FAMILIES, NARROW_TASKS, TaskConfig

LOSSES = ("softmin", "sparsemax")  # the smoothed loss's weights (interp.training.losses)

FLOAT32 = 4  # bytes: training runs in float32
# The most optimiser steps of one run, and so of eval_every and plateau_patience: 10^5 times the papers' 10,000 (at
# 10 ms a step, 116 days); a run shows its progress and can be stopped and resumed, so the bound only catches a typo.
MAX_TRAIN_STEPS = 10**9
# Every count of a run, (least, largest): the command line's types and ``TrainConfig`` both read them. The clustering
# steps of an example (unroll, rollout, eval_steps) are at most ``MAX_STEPS``, the validation tasks at most
# ``MAX_TASKS``, the optimiser steps at most ``MAX_TRAIN_STEPS``; largest None: a size the memory estimate bounds (d,
# k, n, batch: ``memory_needs``).
COUNTS: dict[str, tuple[int, int | None]] = {
    "d": (1, None), "k": (1, None), "n": (1, None), "steps": (1, MAX_TRAIN_STEPS), "batch": (1, None),
    "val_tasks": (1, MAX_TASKS), "eval_every": (1, MAX_TRAIN_STEPS), "plateau_patience": (0, MAX_TRAIN_STEPS),
    "unroll": (1, MAX_STEPS), "rollout": (0, MAX_STEPS), "eval_steps": (1, MAX_STEPS),
}
SAMPLED = 28  # bytes per coordinate while ``sample_tasks`` runs: noise, location and scale in float64, the result


@dataclass(frozen=True)
class TrainConfig:
    """One training run (defaults: the papers' main configuration, paper 2, App. F; docs/learned_model.md).

    ``k < n``: the relative validation objective divides by Lloyd's objective after one step, which is 0 when every
    point is a centroid (k = n), so such runs are refused. ``seed`` is in [0, 2**63). Every count is within its
    ``COUNTS`` bounds: ``unroll``, ``rollout`` (from 0) and ``eval_steps`` at most ``MAX_STEPS``, ``val_tasks`` at
    most ``MAX_TASKS``, ``steps``, ``eval_every`` and ``plateau_patience`` at most ``MAX_TRAIN_STEPS``."""

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
    slot_equivariant: bool = False  # one-hot with slot-tied weights (interp.model.tied_weights)
    # how each training example is run (docs/learned_model.md, "Training for how the model is used"):
    slot_order: str = "fixed"  # "shuffle": a fresh random slot order at every embedding, in training and validation
    unroll: int = 1  # re-embedded steps with gradient per example; the loss is on the last step's centroids
    rollout: int = 0  # first s ~ U{0..rollout} steps without gradient (one s per batch), then the unrolled steps
    eval_steps: int = 1  # steps of the validation objective (still relative to one Lloyd iteration)
    init_from: str | None = None  # start from this checkpoint's weights (a shipped name or a path): fine-tuning
    attn_xx_identity: bool = False  # each point attends to itself only (identity pattern): O(n) per step, not O(n^2)
    # many task sizes in one run (interp.training.task_mix; None: every task has k, d, n): each batch draws its own
    k_least: int | None = None  # k' uniform in [k_least, k]: the model keeps k codes and serves every k' <= k
    d_least: int | None = None  # d' uniform in [d_least, d], zero-padded to d
    n_least: int | None = None  # n' log-uniform in [n_least, n]
    # each task's loss divided by its objective after one Lloyd step from the same start (no gradient), so that
    # tasks of every size weigh alike; False: the papers' loss
    relative_loss: bool = False
    # how a task of d' < d dimensions fills the model's d: "pad" (zeros) or "tile" (its coordinates repeated,
    # interp.tasks.tile_dimensions: every coordinate in the unit interval and squared distances on a d-dimensional
    # task's scale)
    narrow_tasks: str = "pad"

    def __post_init__(self) -> None:
        for name, (least, largest) in COUNTS.items():
            value = getattr(self, name)
            if largest == MAX_STEPS:  # clustering steps per example: a typo here would hang the first batch
                check_steps(value, name, least)
            elif largest is not None:
                check_count(value, name, largest, least)
            else:
                check_positive_int(value, name, least)
        check_choice(self.slot_order, "slot_order", SLOT_ORDERS)
        if self.init_from is not None and not (isinstance(self.init_from, str) and self.init_from):
            raise InvalidInput(f"init_from must be a checkpoint name or path, got {self.init_from!r}")
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
        for name, largest in (("k_least", self.k), ("d_least", self.d), ("n_least", self.n)):
            value = getattr(self, name)
            if value is not None:
                check_count(value, name, largest, 1)
        if self.n_least is not None and self.k >= self.n_least:
            raise InvalidInput(f"k={self.k} must be less than n_least={self.n_least}: a batch of the largest k may "
                               "have the fewest points")
        if self.k >= self.n:
            raise InvalidInput(f"k={self.k} must be less than n={self.n}: with k >= n one Lloyd step can reach "
                               "objective 0, and the relative validation objective divides by it")
        check_seed(self.seed, "seed")
        if not isinstance(self.slot_equivariant, bool):
            raise InvalidInput(f"slot_equivariant must be a bool, got {self.slot_equivariant!r}")
        check_choice(self.narrow_tasks, "narrow_tasks", NARROW_TASKS)
        if not isinstance(self.relative_loss, bool):
            raise InvalidInput(f"relative_loss must be a bool, got {self.relative_loss!r}")
        if not isinstance(self.attn_xx_identity, bool):
            raise InvalidInput(f"attn_xx_identity must be a bool, got {self.attn_xx_identity!r}")
        if self.slot_equivariant and self.embedding != "onehot":
            raise InvalidInput(f"slot_equivariant=True needs embedding='onehot', got {self.embedding!r}")

    @property
    def steps_per_example(self) -> int:
        """The most model steps one training example runs: the rollout's and the unrolled ones."""
        return self.rollout + self.unroll

    @property
    def mixed_sizes(self) -> bool:
        """Whether batches draw their own (k', d', n') (``interp.training.task_mix``)."""
        return (self.k_least, self.d_least, self.n_least) != (None, None, None)

    @property
    def task_config(self) -> TaskConfig:
        return TaskConfig(n=self.n, d=self.d, k=self.k, family=self.family, scale=self.scale)

    def model_config(self) -> ModelConfig:
        return trained_model_config({name: getattr(self, name) for name in TRAINED_MODEL_FIELDS})

    def memory_needs(self) -> list[MemoryNeed]:
        """What a run that takes at least one step must hold at once, at the larger of two moments (a lower bound of
        its peak memory, float32): drawing the V validation tasks (28 bytes per coordinate, ``SAMPLED``), or the
        first Adam update: weights, gradients and both moments (4 x 4 bytes per parameter; 4 attentions with
        D x D Q, K, V and D-vector biases, D the model width), the validation points and one batch of points (4
        bytes per coordinate), plus the (B, n, n) points-to-points pattern for a normaliser without a fused kernel
        (all but softmax)."""
        width = self.model_config().d_model  # slot-tied weights have fewer parameters: an upper bound for them
        parameters = 4 * (3 * width * width + (3 * width if self.bias else 0))  # (D, D) Q, K, V (+ (D,) biases)
        drawing = [MemoryNeed("the validation tasks while they are drawn",
                              {"val_tasks": self.val_tasks, "n": self.n, "d": self.d},
                              SAMPLED * self.val_tasks * self.n * self.d)]
        updating = [
            MemoryNeed(f"the weights, gradients and Adam moments (model width D={width})", {"d": self.d, "k": self.k},
                       4 * FLOAT32 * parameters),
            MemoryNeed("the validation points", {"val_tasks": self.val_tasks, "n": self.n, "d": self.d},
                       FLOAT32 * self.val_tasks * self.n * self.d),
            MemoryNeed("one batch of points", {"batch": self.batch, "n": self.n, "d": self.d},
                       FLOAT32 * self.batch * self.n * self.d),
        ]
        if self.normaliser != "softmax":
            updating.append(MemoryNeed("the points-to-points attention pattern of one batch",
                                       {"batch": self.batch, "n": self.n}, FLOAT32 * self.batch * self.n * self.n))
        return max(drawing, updating, key=lambda needs: sum(need.nbytes for need in needs))

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise InvalidInput(f"unknown training config fields: {sorted(unknown)}")
        return cls(**data)
