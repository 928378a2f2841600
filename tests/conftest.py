"""Shared fixtures: seeded tasks in float64."""

import pytest
import torch

from interp.tasks import TaskConfig, init_centroids, sample_tasks

torch.set_num_threads(2)


def make_tasks(n: int, d: int, k: int, batch: int, seed: int, dtype=torch.float64):
    """Seeded Gaussian-mixture tasks (SPEC §2.7.3) and random-subset initial centroids."""
    tasks = sample_tasks(TaskConfig(n=n, d=d, k=k), batch, seed, dtype=dtype)
    return tasks.points, init_centroids(tasks.points, k, "random", seed + 1)


@pytest.fixture
def small_tasks():
    return make_tasks(n=200, d=3, k=5, batch=4, seed=11)
