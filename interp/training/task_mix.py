"""Training on many task sizes at once: each batch draws its own number of clusters k', dimension d' and length n'
(docs/learned_model.md, "One model for every k and d").

A model built for k centroid codes serves any k' <= k (``KMeansTransformer.forward``); a task of d' < d dimensions is
zero-padded to d, so it is in the distribution of a model trained this way. A batch shares one (k', d', n'), as
the papers' task sampler draws one (k, n, distribution) per batch: k' uniform in [k_least, k], d' uniform in
[d_least, d], n' log-uniform in [n_least, n] (as many batches of n in [64, 128] as in [1024, 2048]).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from interp.task_config import TaskConfig
from interp.tasks import widen_task


def draw_task_config(config, generator: torch.Generator) -> TaskConfig:
    """The task distribution of one batch of a ``TrainConfig`` run: ``config.task_config`` itself for a run of one
    size, else (k', d', n') drawn from ``generator`` (module docstring), k' < n'."""
    if not config.mixed_sizes:
        return config.task_config
    k_least = config.k if config.k_least is None else config.k_least
    d_least = config.d if config.d_least is None else config.d_least
    n_least = config.n if config.n_least is None else config.n_least
    k = int(torch.randint(k_least, config.k + 1, (1,), generator=generator))
    d = int(torch.randint(d_least, config.d + 1, (1,), generator=generator))
    log_n = math.log(n_least) + float(torch.rand((), generator=generator, dtype=torch.float64)) * math.log(
        config.n / n_least)
    n = min(config.n, max(n_least, round(math.exp(log_n))))
    return TaskConfig(n=n, d=d, k=k, family=config.family, scale=config.scale)


def model_input(points: Tensor, config) -> Tensor:
    """A batch's points (B, n, d') as the run's model reads them (B, n, d): ``config.narrow_tasks`` "pad" (zeros) or
    "tile" (``interp.tasks.tile_dimensions``)."""
    return widen_task(points, config.d, config.narrow_tasks)
