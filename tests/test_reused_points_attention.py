"""The reused points self-attention (``kernels.dispatch.reused_points_attention``): a re-embedding forward without grad
computes attn_xx once, and gives bit for bit the trajectories of the forward that recomputes it at every step.

The recomputing forward is the same model with a no-op hook on every attn_xx's ``hook_out`` (a hook keeps every
kernel decision but this one: it returns None, so it changes nothing), or with the kernels off
(``reference_only()``). Sizes take both attention paths: n = 512 (512 x 512 pairs, the fused softmax kernel) and
n = 64 (the formed-pattern reference)."""

from __future__ import annotations

import pytest
import torch

from interp.model import KMeansTransformer
from interp.model.checkpoint import load_model
from interp.model.config import AttentionConfig, ModelConfig
from interp.model.kernels import reference_only
from interp.tasks import TaskConfig, init_centroids, sample_tasks

STEPS = 6
NO_OP_ON_ATTN_XX = [(lambda name: name.endswith("attn_xx.hook_out"), lambda tensor, hook: None)]


def _task(n: int, d: int, k: int, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    points = sample_tasks(TaskConfig(n=n, d=d, k=k), 4, torch.Generator().manual_seed(n)).points  # (4, n, d)
    centroids = init_centroids(points, k, "random", torch.Generator().manual_seed(1))  # (4, k, d)
    return points.to(dtype), centroids.to(dtype)


def _attn_xx_calls(model: KMeansTransformer, run) -> int:
    """How many times any block's attn_xx module ran during ``run()`` (a module hook, not a HookPoint hook: it leaves
    every kernel decision as it is)."""
    calls = []
    model._ensure_blocks(STEPS)
    handles = [block.attn_xx.register_forward_hook(lambda *args: calls.append(1)) for block in model.blocks]
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return len(calls)


@pytest.mark.parametrize("name", ["main-onehot", "main-binary", "main-none", "main-equivariant"])
@pytest.mark.parametrize("n", [512, 64])
@pytest.mark.parametrize("slot_order", ["fixed", "shuffle"])
def test_reused_attention_gives_the_recomputed_trajectories_bit_for_bit(name, n, slot_order):
    model = load_model(name).eval()
    points, centroids = _task(n, model.config.d, model.config.k)
    kwargs = dict(steps=STEPS, reembed=True, slot_order=slot_order, generator=7)
    with torch.no_grad():
        assert _attn_xx_calls(model, lambda: model(points, centroids, **kwargs)) == 1
        reused = model(points, centroids, **kwargs)
        recomputed = model.run_with_hooks(points, centroids, fwd_hooks=NO_OP_ON_ATTN_XX, **kwargs)
        assert _attn_xx_calls(model, lambda: model.run_with_hooks(points, centroids, fwd_hooks=NO_OP_ON_ATTN_XX,
                                                                  **kwargs)) == STEPS
    assert torch.equal(reused.centroid_trajectory, recomputed.centroid_trajectory)
    assert torch.equal(reused.assignment_trajectory, recomputed.assignment_trajectory)


def test_reused_attention_in_float64_matches_the_literal_forward():
    model = load_model("main-onehot").double().eval()
    points, centroids = _task(512, 32, 10, torch.float64)
    with torch.no_grad():
        reused = model(points, centroids, steps=STEPS, reembed=True)
        with reference_only():
            literal = model(points, centroids, steps=STEPS, reembed=True)
            assert _attn_xx_calls(model, lambda: model(points, centroids, steps=STEPS, reembed=True)) == STEPS
    # the fused softmax kernel is off in the literal forward too: the same numbers up to the order of additions
    torch.testing.assert_close(reused.centroid_trajectory, literal.centroid_trajectory, rtol=1e-12, atol=1e-12)
    assert torch.equal(reused.assignment_trajectory, literal.assignment_trajectory)


def _small(**changes) -> KMeansTransformer:
    torch.manual_seed(0)
    config = ModelConfig(d=3, k=4, reembed=True, input_range=(0.0, 1.0), **changes)
    return KMeansTransformer(config).eval()


@pytest.mark.parametrize("case", ["grad", "no re-embedding", "layers of their own", "dropout in training mode",
                                  "gumbel", "hooked"])
def test_attn_xx_is_recomputed_where_a_step_could_differ(case):
    """Every step runs its own attn_xx where its output could differ between steps or a gradient or hook needs it."""
    model = _small(shared_weights=case != "layers of their own", n_layers=STEPS if case == "layers of their own" else 1,
                   attn_xx=AttentionConfig(normaliser="gumbel" if case == "gumbel" else "softmax", dropout=0.1))
    points, centroids = _task(32, 3, 4)
    if case == "dropout in training mode":
        model.train()
    kwargs = dict(steps=STEPS, reembed=case != "no re-embedding", generator=3)
    run = (lambda: model.run_with_hooks(points, centroids, fwd_hooks=NO_OP_ON_ATTN_XX, **kwargs)) if case == "hooked" \
        else (lambda: model(points, centroids, **kwargs))
    with torch.set_grad_enabled(case == "grad"):
        assert _attn_xx_calls(model, run) == STEPS
    with torch.no_grad():  # the control: the same model in eval mode, re-embedding and unhooked, computes it once
        model.eval()
        if model.config.shared_weights and model.config.attn_xx.normaliser != "gumbel":
            assert _attn_xx_calls(model, lambda: model(points, centroids, steps=STEPS, reembed=True)) == 1


def test_a_cache_of_other_hook_points_keeps_the_reuse_and_records_the_same_values():
    """Caching the centroid stream and the assignments' attention (not attn_xx's input or output) still computes attn_xx
    once; every cached tensor equals the one the recomputing forward caches."""
    model = load_model("main-onehot").eval()
    points, centroids = _task(512, 32, 10)
    wanted = lambda name: "centroids_resid_post" in name or "attn_xc.hook_pattern" in name  # noqa: E731
    with torch.no_grad():
        assert _attn_xx_calls(model, lambda: model.run_with_cache(points, centroids, steps=STEPS, reembed=True,
                                                                  names_filter=wanted)) == 1
        out, cache = model.run_with_cache(points, centroids, steps=STEPS, reembed=True, names_filter=wanted)
        with model.hooks(fwd_hooks=NO_OP_ON_ATTN_XX):
            recomputed, recomputed_cache = model.run_with_cache(points, centroids, steps=STEPS, reembed=True,
                                                                names_filter=wanted)
    assert sorted(cache.keys()) == sorted(recomputed_cache.keys()) and len(cache.keys()) == 2 * STEPS
    for name in cache.keys():
        assert torch.equal(cache[name], recomputed_cache[name]), name
    assert torch.equal(out.centroid_trajectory, recomputed.centroid_trajectory)


def test_a_patch_of_one_steps_points_stream_reaches_its_attn_xx():
    """A hook that changes the points stream before step 3 makes step 3 compute its own attn_xx from the patched
    stream (the other steps reuse step 0's): the trajectories of the forward that recomputes attn_xx at every step."""
    model = load_model("main-onehot").eval()
    points, centroids = _task(512, 32, 10)
    patch = [("blocks.3.hook_points_resid_pre", lambda stream, hook: stream * 1.01)]
    kwargs = dict(steps=STEPS, reembed=True)
    with torch.no_grad():
        assert _attn_xx_calls(model, lambda: model.run_with_hooks(points, centroids, fwd_hooks=patch, **kwargs)) == 2
        patched = model.run_with_hooks(points, centroids, fwd_hooks=patch, **kwargs)
        recomputed = model.run_with_hooks(points, centroids, fwd_hooks=patch + NO_OP_ON_ATTN_XX, **kwargs)
        unpatched = model(points, centroids, **kwargs)
    assert torch.equal(patched.centroid_trajectory, recomputed.centroid_trajectory)
    assert not torch.equal(patched.centroid_trajectory[:, 4:], unpatched.centroid_trajectory[:, 4:])  # it took effect
    assert torch.equal(patched.centroid_trajectory[:, :4], unpatched.centroid_trajectory[:, :4])  # steps 0-2 alike
