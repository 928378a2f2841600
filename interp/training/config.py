"""``TrainConfig``: one training run's settings, checked at construction (paper 2, §3, App. F; docs/learned_model.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from interp._checks import InvalidInput, check_choice, check_positive_int
from interp.model import ModelConfig
from interp.model.config import EMBEDDINGS, learned_model_config
from interp.tasks import FAMILIES, TaskConfig
from interp.training.losses import LOSSES


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
