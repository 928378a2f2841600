"""The hand-derived block-step kernel (interp.model.kernels.training_step) against the reference step, in float64.

Two comparisons: with ``reference_only()`` (the literal step) on the same dropped positions (the kernel run's draws
replayed to the reference, which draws every mask densely when the kernels are off), and with the step the model
takes without this kernel (``dispatch.without("training_step")``: each part through its own kernel) on the same
generator, which also checks that the kernel draws the same numbers in the same order. The steps the kernel ran are
read from ``dispatch.trace()``. Outputs to 1e-12, gradients of every parameter and of the input
centroids to 1e-10.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from interp.model import KMeansTransformer
from interp.model.attention import Attention
from interp.model.config import learned_model_config
from interp.model.embedding import embed_centroids, embed_points
from interp.model.kernels import dispatch, reference_only, training_step
from interp.tasks import init_centroids
from interp.training.losses import smoothed_loss


@pytest.fixture
def kernel_calls():
    """The paths of every forward the test runs (``dispatch.trace``); ``_kernel_steps`` counts the kernel's."""
    with dispatch.trace() as paths:
        yield paths


def _kernel_steps(paths) -> int:
    """How many steps ran the training-step kernel."""
    return sum(path.part == "block" and path.kernel == "training_step" for path in paths)


def _model(embedding="onehot", d=4, k=6, bias=True, dropout=0.01, slot_equivariant=False, reembed=True):
    torch.manual_seed(1)
    config = learned_model_config(d, k, embedding, dropout=dropout, bias=bias, slot_equivariant=slot_equivariant)
    return KMeansTransformer(replace(config, reembed=reembed)).double().train()


def _task(b, n, d, k):
    points = torch.rand(b, n, d, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    return points, init_centroids(points, k, "first")


def _step(model, points, init, steps=1, slot_order="fixed", seed=7):
    """Outputs and gradients (every parameter, the input centroids) of one training step."""
    model.zero_grad(set_to_none=True)
    init = init.clone().requires_grad_()
    out = model(points, init, steps=steps, generator=seed, slot_order=slot_order)
    smoothed_loss(points, out.centroids, 0.1).backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    return out, grads, init.grad


def _replayed_reference(model, points, init, monkeypatch, **kwargs):
    """The kernel's step and the literal step on the kernel run's dropped positions."""
    recorded = []
    real = Attention.draw_dropout

    def record(self, *args, **kw):
        draw = real(self, *args, **kw)
        if draw is not None:
            recorded.append(draw)
        return draw

    monkeypatch.setattr(Attention, "draw_dropout", record)
    fast = _step(model, points, init, **kwargs)
    replay = iter(recorded)

    def replayed(self, batch, n_queries, n_keys, like, generator, need_pattern=False):
        return next(replay) if self.dropping() else None  # dropped pairs or a keep mask: the reference takes both

    monkeypatch.setattr(Attention, "draw_dropout", replayed)
    with reference_only():
        slow = _step(model, points, init, **kwargs)
    monkeypatch.setattr(Attention, "draw_dropout", real)
    assert next(replay, "done") == "done"
    return fast, slow


def _assert_same(fast, slow):
    (out_f, grads_f, init_f), (out_s, grads_s, init_s) = fast, slow
    torch.testing.assert_close(out_f.centroid_trajectory, out_s.centroid_trajectory, atol=1e-12, rtol=0)
    assert torch.equal(out_f.assignment_trajectory, out_s.assignment_trajectory)
    assert grads_f.keys() == grads_s.keys()
    zero = [name for name in grads_s if grads_s[name].abs().max() == 0]  # weights that read the points' 0 scratch
    assert len(zero) < len(grads_s) // 2, zero
    for name in grads_s:
        torch.testing.assert_close(grads_f[name], grads_s[name], atol=1e-10, rtol=0, msg=name)
    assert init_s.abs().max() > 0
    torch.testing.assert_close(init_f, init_s, atol=1e-10, rtol=0)


@pytest.mark.parametrize("embedding, b, n, d, k, steps", [
    ("onehot", 2, 128, 4, 6, 1),  # attn_xx: sampled dropped pairs; the others: dense keep masks
    ("onehot", 3, 32, 4, 6, 2),  # every attention a dense keep mask; two re-embedded steps
    ("binary", 3, 32, 4, 6, 1),
    ("none", 2, 32, 3, 5, 1),  # assignments from attn_xc's pattern (drawn densely, as a returned pattern is)
    ("onehot", 1, 512, 2, 32, 1),  # attn_xc and attn_cx also sampled pairs (n k >= FUSED_MIN_PAIRS)
    ("onehot", 2, 6, 2, 6, 2),  # n = k: the reference lays attn_xc out queries-major, the kernel keys-major
])
def test_kernel_equals_literal_step_on_the_same_dropped_positions(embedding, b, n, d, k, steps, monkeypatch,
                                                                   kernel_calls):
    model = _model(embedding, d, k)
    points, init = _task(b, n, d, k)
    fast, slow = _replayed_reference(model, points, init, monkeypatch, steps=steps)
    assert _kernel_steps(kernel_calls) == steps
    _assert_same(fast, slow)


@pytest.mark.parametrize("options", [dict(bias=False), dict(slot_equivariant=True), dict(dropout=0.0),
                                     dict(reembed=False)])
def test_kernel_variants_equal_literal_step(options, monkeypatch, kernel_calls):
    """No biases; slot-tied weights (computed from parameters); no dropout; and a model that does not re-embed, whose
    second (reference) step reads the kernel's points stream, so the gradient flows back through it."""
    model = _model(**options)
    points, init = _task(2, 32, 4, 6)
    fast, slow = _replayed_reference(model, points, init, monkeypatch, steps=2)
    assert _kernel_steps(kernel_calls) == (1 if options.get("reembed") is False else 2)
    _assert_same(fast, slow)


def test_block_step_both_streams_equal_reference_block():
    """One block step: both output streams and the gradients of a random functional of both (every parameter, the
    centroid stream) against ``Block.forward`` under ``reference_only()``; n = 32 draws dense keep masks on both
    paths, so one generator seed gives both the same masks."""
    model = _model()
    block, weights = model.blocks[0], model.layers[0]
    points, init = _task(3, 32, 4, 6)
    centroids = embed_centroids(init, model.codes, False).requires_grad_()  # (b, k, D)
    embedded = embed_points(points, model.config.scratch_width, False)  # (b, n, D)
    probe = torch.Generator().manual_seed(2)
    weight_x = torch.randn(embedded.shape, generator=probe, dtype=torch.float64)
    weight_c = torch.randn(centroids.shape, generator=probe, dtype=torch.float64)

    def run(kernel):
        generator = torch.Generator().manual_seed(11)
        if kernel:
            stream, updated, _ = training_step.block_step(block, None, points, centroids, weights, False, generator)
        else:
            with reference_only():
                stream, updated, _ = block(embedded, centroids, weights, False, generator)
        total = (stream * weight_x).sum() + (updated * weight_c).sum()
        return stream, updated, torch.autograd.grad(total, [centroids, *model.parameters()])

    fast, slow = run(True), run(False)
    torch.testing.assert_close(fast[0], slow[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(fast[1], slow[1], atol=1e-12, rtol=0)
    for grad_fast, grad_slow in zip(fast[2], slow[2]):
        torch.testing.assert_close(grad_fast, grad_slow, atol=1e-10, rtol=0)


@pytest.mark.parametrize("embedding, steps, slot_order", [("onehot", 1, "fixed"), ("onehot", 2, "shuffle"),
                                                          ("none", 2, "fixed")])
def test_kernel_draws_what_the_step_without_it_draws(embedding, steps, slot_order, kernel_calls):
    """Same generator, no replay: the kernel consumes it as the step it replaces does (n = 128: attn_xx's dropped
    pairs sampled sparsely, the other attentions' dense masks)."""
    model = _model(embedding, 3 if embedding == "none" else 4, 5 if embedding == "none" else 6)
    points, init = _task(2, 128, model.config.d, model.config.k)
    fast = _step(model, points, init, steps, slot_order)
    assert _kernel_steps(kernel_calls) == steps
    with dispatch.without("training_step"):
        slow = _step(model, points, init, steps, slot_order)
    assert _kernel_steps(kernel_calls) == steps
    _assert_same(fast, slow)


def test_kernel_refused_when_hooked_in_eval_without_grad_or_reference_only(kernel_calls):
    model = _model()
    points, init = _task(2, 32, 4, 6)
    with reference_only():
        _step(model, points, init)
    with torch.no_grad():
        model.eval()(points, init, generator=3)
    _step(model, points, init)  # eval mode with grad: the reference step (a user's gradient, not training)
    model.train()
    for name in ("blocks.0.attn_xx.hook_pattern", "blocks.0.hook_points_resid_post", "hook_centroids_embed"):
        seen = []
        model.run_with_hooks(points, init, generator=3, fwd_hooks=[(name, lambda t, hook: seen.append(1))])
        assert seen == [1]
    seen = []
    with model.hooks(bwd_hooks=[("blocks.0.hook_centroids_resid_post", lambda grad, hook: seen.append(1))]):
        _step(model, points, init)  # a backward hook, too, keeps the reference step (whose hook points it fires on)
    assert seen == [1]
    assert _kernel_steps(kernel_calls) == 0
    _step(model, points, init)
    assert _kernel_steps(kernel_calls) == 1  # the same model and task take the kernel when nothing refuses it
