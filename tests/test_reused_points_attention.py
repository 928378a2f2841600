"""The reused points self-attention (``kernels.dispatch.reused_points_attention``): a re-embedding forward without grad
computes attn_xx once, and gives bit for bit the trajectories of the forward that recomputes it at every step.

The recomputing forward is the same model with this kernel switched off (``dispatch.without``: every other kernel
stays), or with every kernel off (``reference_only()``); a hooked step runs the reference and so its own attn_xx.
What computed each step's attn_xx is read from ``dispatch.trace()``. Sizes take both attention paths: n = 512
(512 x 512 pairs, the fused softmax kernel) and n = 64 (the folded-scores kernel)."""

from __future__ import annotations

import pytest
import torch

from interp.model import KMeansTransformer
from interp.model.checkpoint import load_model
from interp.model.config import AttentionConfig, ModelConfig
from interp.model.kernels import dispatch, reference_only
from interp.tasks import TaskConfig, init_centroids, sample_tasks

STEPS = 6
NO_OP_ON_ATTN_XX = [(lambda name: name.endswith("attn_xx.hook_out"), lambda tensor, hook: None)]
RECOMPUTING = "reused_points_attention"  # the kernel switched off: every step computes its own attn_xx


def _task(n: int, d: int, k: int, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    points = sample_tasks(TaskConfig(n=n, d=d, k=k), 4, torch.Generator().manual_seed(n)).points  # (4, n, d)
    centroids = init_centroids(points, k, "random", torch.Generator().manual_seed(1))  # (4, k, d)
    return points.to(dtype), centroids.to(dtype)


def _attn_xx_calls(model: KMeansTransformer, run) -> int:
    """How many steps computed their own attn_xx during ``run()``: the steps taken whole by one path (the reference,
    the training step) and those whose attn_xx ran a kernel other than the reuse (``dispatch.trace``)."""
    with dispatch.trace() as paths:
        run()
    whole = {path.step for path in paths if path.part == "block"}
    own = {path.step for path in paths if path.part == "attn_xx" and path.kernel != "reused_points_attention"}
    assert not whole & own
    return len(whole | own)


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
        with dispatch.without(RECOMPUTING):
            recomputed = model(points, centroids, **kwargs)
            assert _attn_xx_calls(model, lambda: model(points, centroids, **kwargs)) == STEPS
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
    # every kernel is off in the literal forward: the same numbers up to the order of additions
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


def test_a_cache_of_one_step_keeps_the_reuse_elsewhere_and_records_the_same_values():
    """Caching step 2's centroid stream and assignment pattern runs step 2's reference (its own attn_xx); the other
    steps reuse step 0's attn_xx, and every cached tensor and the trajectories equal those of the forward that
    recomputes attn_xx at every step."""
    model = load_model("main-onehot").eval()
    points, centroids = _task(512, 32, 10)
    wanted = ["blocks.2.hook_centroids_resid_post", "blocks.2.attn_xc.hook_pattern"]
    kwargs = dict(steps=STEPS, reembed=True, names_filter=wanted)
    with torch.no_grad():
        with dispatch.trace() as paths:
            out, cache = model.run_with_cache(points, centroids, **kwargs)
        with dispatch.without(RECOMPUTING):
            recomputed, recomputed_cache = model.run_with_cache(points, centroids, **kwargs)
    assert [path for path in paths if path.part in ("block", "attn_xx")] == [
        (0, "attn_xx", "fused_softmax"), (1, "attn_xx", "reused_points_attention"), (2, "block", "reference"),
        *[(step, "attn_xx", "reused_points_attention") for step in range(3, STEPS)]]
    assert sorted(cache.keys()) == sorted(recomputed_cache.keys()) == sorted(wanted)
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
        with dispatch.without(RECOMPUTING):
            recomputed = model.run_with_hooks(points, centroids, fwd_hooks=patch, **kwargs)
        unpatched = model(points, centroids, **kwargs)
    assert torch.equal(patched.centroid_trajectory, recomputed.centroid_trajectory)
    assert not torch.equal(patched.centroid_trajectory[:, 4:], unpatched.centroid_trajectory[:, 4:])  # it took effect
    assert torch.equal(patched.centroid_trajectory[:, :4], unpatched.centroid_trajectory[:, :4])  # steps 0-2 alike
