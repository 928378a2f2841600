"""Counts a caller supplies are bounded before any work, and a long run leaves the model as it found it: the steps of
a forward, the memory of its trajectories, the blocks a shared-weight model adds for a long run, the generator."""

import pytest
import torch
from conftest import make_tasks

import interp._checks as checks
from interp import lloyd, load_model
from interp._checks import MAX_STEPS, InsufficientMemory, InvalidInput, InvalidInputType


@pytest.fixture(scope="module")
def model():
    return load_model("main-onehot")


@pytest.fixture(scope="module")
def tiny():
    points, init = make_tasks(n=20, d=32, k=10, batch=1, seed=4, dtype=torch.float32)
    return points, init


@pytest.mark.parametrize("steps", [MAX_STEPS + 1, 10**9, 2**70])
def test_too_many_steps_are_refused_at_once_naming_steps(model, tiny, steps):
    with pytest.raises(InvalidInput, match=f"steps must be at most {MAX_STEPS:,}"):
        model(*tiny, steps=steps)
    with pytest.raises(InvalidInput, match=f"steps must be at most {MAX_STEPS:,}"):
        lloyd(tiny[0].double(), tiny[1].double(), steps)


def test_the_hook_points_are_the_same_before_and_after_a_long_run(tiny):
    """One shared layer run for 100 steps borrows blocks for that call's hook points and gives them back: the model's
    hook points are what they were, and a checkpoint that recommends 20 steps has 20 blocks from the start."""
    model = load_model("main-onehot")
    before = set(model.hook_dict)
    with torch.no_grad():
        out, cache = model.run_with_cache(*tiny, steps=100)
        model(*tiny, steps=100)
    assert "blocks.99.hook_points_resid_post" in cache.cache_dict  # the call had them
    assert out.centroid_trajectory.shape[1] == 101
    assert len(model.blocks) == 1 and set(model.hook_dict) == before
    best = load_model("best")
    assert len(best.blocks) == 20
    names = set(best.hook_dict)
    with torch.no_grad():
        best(*tiny, generator=0)
        best(*tiny, steps=30, generator=0)
    assert set(best.hook_dict) == names


def test_a_hook_on_a_borrowed_block_keeps_it(tiny):
    """A hook a caller added to a block beyond the standing ones is not given back with the block."""
    model = load_model("main-onehot")
    seen = []
    with torch.no_grad():
        model._ensure_blocks(8)  # as a call of that many steps does, before its hooks go on
        model.add_hook("blocks.5.hook_points_resid_post", lambda x, hook: seen.append(1), is_permanent=True)
        model(*tiny, steps=8)
        model(*tiny, steps=8)
    assert len(seen) == 2 and len(model.blocks) == 6
    model.reset_hooks(including_permanent=True)


def test_trajectories_beyond_the_available_memory_are_refused(model, monkeypatch):
    """64 tasks x 10,000 steps x 512 points keep 3 x 2.6 GB of int64 labels: refused when 1 GB is available."""
    monkeypatch.setattr(checks, "available_memory", lambda *args: 10**9)
    points, init = make_tasks(n=512, d=32, k=10, batch=64, seed=1, dtype=torch.float32)
    with pytest.raises(InsufficientMemory, match="the per-step centroid and label trajectories"):
        model(points, init, steps=MAX_STEPS)


@pytest.mark.parametrize("generator, error, message", [
    ("abc", InvalidInputType, "generator must be a torch.Generator, an int seed or None, got str"),
    (2.5, InvalidInputType, "got float"),
    (True, InvalidInputType, "got bool"),
    ([1], InvalidInputType, "got list"),
    (2**64, InvalidInput, r"generator seed must be in \[0, 2\*\*63\)"),
    (-1, InvalidInput, r"generator seed must be in \[0, 2\*\*63\), got -1"),
])
def test_a_bad_generator_is_refused_naming_it(model, tiny, generator, error, message):
    with pytest.raises(error, match=message):
        model(*tiny, generator=generator)
    with pytest.raises(error, match=message):
        lloyd(tiny[0].double(), tiny[1].double(), 2, empty="random_point", generator=generator)
