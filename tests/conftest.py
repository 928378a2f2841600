"""Shared fixtures: seeded tasks in float64, and a check that no process a test started outlives the session."""

import os

import pytest
import torch
from child_processes import kill_leftovers

from interp.tasks import TaskConfig, init_centroids, sample_tasks

# torch threads per test process: the machine's cores shared among the pytest-xdist workers (`make test` runs two),
# at most 2; more threads than cores make small ops tens of times slower
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // WORKERS)))


def make_tasks(n: int, d: int, k: int, batch: int, seed: int, dtype=torch.float64):
    """Seeded Gaussian-mixture tasks (paper 2 App. D) and random-subset initial centroids."""
    tasks = sample_tasks(TaskConfig(n=n, d=d, k=k), batch, seed, dtype=dtype)
    return tasks.points, init_centroids(tasks.points, k, "random", seed + 1)


@pytest.fixture(autouse=True)
def torch_threads_restored():
    """A test that sets torch's thread count (a command run in process with --threads) leaves it as it found it."""
    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


@pytest.fixture
def small_tasks():
    return make_tasks(n=200, d=3, k=5, batch=4, seed=11)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny problems: one torch thread per test module (2 threads on a loaded 2-core machine are ~50x slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session", autouse=True)
def no_process_outlives_the_session():
    """Fails the run, naming them, if child processes (or members of a session a test started) are still running
    when the tests end, after killing them: a leaked child would otherwise run on, unseen, after the suite."""
    yield
    leaked = kill_leftovers()
    assert not leaked, "processes left running by the tests (now killed):\n" + "\n".join(map(str, leaked))
