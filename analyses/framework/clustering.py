"""What the measurements that score clustering algorithms on drawn tasks share: the tasks and random starts as
``interp evaluate`` draws them, ln Phi in float64, and Lloyd from given starts in chunks. The hybrid and any_k
studies use it."""

from __future__ import annotations

import json
import re

import numpy as np
import torch

CHUNK = 64  # tasks per forward, as interp.evaluate


def draw(n: int, d: int, k: int, seed: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` Gaussian-mixture tasks (count, n, d) and their random starts (count, k, d), drawn in float32 as
    ``interp evaluate`` draws them from ``seed`` (starts, a uniform random k-subset, from seed + 1), held in float64."""
    from interp.evaluate import EvalConfig, evaluation_tasks
    from interp.tasks import TaskConfig, init_centroids

    points = evaluation_tasks(TaskConfig(n=n, d=d, k=k), EvalConfig(n_tasks=count, seed=seed))
    starts = init_centroids(points, k, "random", torch.Generator().manual_seed(seed + 1))
    return points.double(), starts.double()


def log_phi(points: torch.Tensor, centroids: torch.Tensor) -> np.ndarray:
    """ln Phi (V,) in float64, Phi = sum_i min_j ||x_i - c_j||^2."""
    from interp.algorithms import log_objective

    return log_objective(points.double(), centroids.double()).numpy()


@torch.no_grad()
def lloyd_centroids(points: torch.Tensor, starts: torch.Tensor, steps: int) -> torch.Tensor:
    """Lloyd's centroids (V, k, d) after ``steps`` iterations from ``starts``, in chunks of CHUNK tasks."""
    from interp.algorithms import lloyd

    return torch.cat([lloyd(points[i : i + CHUNK], starts[i : i + CHUNK], steps).centroids
                      for i in range(0, len(points), CHUNK)])


def dumps(record: dict) -> str:
    """``record`` as indented JSON with every list of numbers (the per-task values) on one line: the same content as
    ``json.dumps(record, indent=1)`` at about half the size."""
    lists: list[str] = []

    def mark(value):
        if isinstance(value, list) and value and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                     for v in value):
            lists.append(json.dumps(value))
            return f"@@{len(lists) - 1}@@"
        if isinstance(value, dict):
            return {key: mark(item) for key, item in value.items()}
        if isinstance(value, list):
            return [mark(item) for item in value]
        return value

    text = json.dumps(mark(record), indent=1)
    return re.sub(r'"@@(\d+)@@"', lambda found: lists[int(found.group(1))], text) + "\n"
