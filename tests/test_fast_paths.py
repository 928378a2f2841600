"""The fused softmax attention, tested at the sizes where the model takes it.

An attention takes the fused path in an unhooked step when queries x keys >= 16,384; an identity hook on
``hook_pattern`` runs the step's reference (the materialised pattern) without changing any number. At n >= 128 the
points self-attention (n x n pairs) is fused; at n * k >= 16,384 the two cross-attentions are too (the path each
attention took is read from ``dispatch.trace()``).
The fused path's kernel forms the pattern once up to 65,536 pairs per task (n160, and n2800's cross-attentions) and
is torch's flash kernel above (main, n2800's self-attention), so both kernels are checked here.

Checked in float64: (a) forward fused vs literal, (b) every parameter's gradient fused vs literal, (c) attention
dropout on the fused path vs the literal model masked by the same dropped pairs, (d) forward and every gradient
against the literal model (``interp.model.literal``: dense patterns, squared differences summed term by term), which
imports nothing of the model's forward.
"""

import math
from dataclasses import replace

import pytest
import torch
from conftest import make_tasks
from torch import nn

from interp.model import KMeansTransformer
from interp.model.config import learned_model_config
from interp.model.kernels import dispatch
from interp.model.kernels.fused import sample_dropped_pairs
from interp.model.literal import LiteralModel
from interp.training.losses import smoothed_loss

ATTENTIONS = ("attn_xc", "attn_xx", "attn_cx", "attn_cc")
TAU = 0.1  # softmin loss temperature of the training runs
TOL = 1e-10


# ----- helpers -----------------------------------------------------------------------------------------------
def learned_model(d: int, k: int, seed: int, embedding: str = "onehot", dropout: float = 0.0) -> KMeansTransformer:
    """The learnable one-layer model (default initialisation from ``seed``) in float64."""
    torch.manual_seed(seed)
    return KMeansTransformer(learned_model_config(d, k, embedding, dropout=dropout)).double()


def literal_hooks(steps: int) -> list:
    """Identity hooks on every attention's pattern at every step: they force the literal path, change nothing."""
    return [(f"blocks.{step}.{name}.hook_pattern", lambda pattern, hook: pattern)
            for step in range(steps) for name in ATTENTIONS]


def fused_attentions(paths) -> int:
    """How many attentions took the fused softmax kernel (the formed-pattern kernel below DENSE_MAX_PAIRS pairs per
    task, torch's flash kernel above)."""
    return sum(path.kernel == "fused_softmax" for path in paths)


def run(model, points, init, steps: int, literal: bool):
    """Centroids (b, k, d) after ``steps`` steps and the softmin loss, on the fused or the literal path."""
    if literal:
        out = model.run_with_hooks(points, init, steps=steps, fwd_hooks=literal_hooks(steps))
    else:
        out = model(points, init, steps=steps)
    return out.centroids, smoothed_loss(points, out.centroids, TAU)


def parameter_gradients(model, loss) -> dict[str, torch.Tensor]:
    names, params = zip(*model.named_parameters())
    return dict(zip(names, torch.autograd.grad(loss, params)))


def assert_gradients_close(got: dict, expected: dict, tol: float = TOL) -> None:
    assert got.keys() == expected.keys()
    for name in got:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=tol, msg=name)


SIZES = {  # (n, d, k, batch): fused attentions
    "n160": (160, 4, 6, 2),  # attn_xx (25,600 pairs)
    "main": (512, 32, 10, 2),  # attn_xx (262,144 pairs): the main configuration, few tasks
    "n2800": (2800, 3, 6, 1),  # attn_xx and both cross-attentions (16,800 pairs each)
}


@pytest.fixture(scope="module", params=list(SIZES))
def size(request):
    n, d, k, batch = SIZES[request.param]
    points, init = make_tasks(n, d, k, batch=batch, seed=7)
    return n, d, k, points, init


# ----- (a) forward and (b) gradients, fused vs literal --------------------------------------------------------
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_fused_forward_equals_literal(size, mode):
    n, d, k, points, init = size
    model = learned_model(d, k, seed=1)
    model.train(mode == "train")  # dropout 0: train mode differs from eval only in the flag the path reads
    with torch.no_grad(), dispatch.trace() as paths:
        fused, _ = run(model, points, init, steps=2, literal=False)
        fused_calls = fused_attentions(paths)
        literal, _ = run(model, points, init, steps=2, literal=True)
    # attentions at or over the threshold: attn_xx once (the second re-embedded step reuses it:
    # dispatch.reused_points_attention), both cross-attentions at each of the 2 steps where n k is that large
    assert model.config.reembed and model.config.shared_weights
    expected_fused = 1 + (2 * 2 if n * k >= 16384 else 0)
    assert fused_calls == expected_fused and fused_attentions(paths) == fused_calls  # taken plain, never hooked
    torch.testing.assert_close(fused, literal, rtol=0, atol=TOL)
    assert fused.abs().max() > 0.1  # a real output, not a degenerate one


def test_fused_gradients_equal_literal(size):
    n, d, k, points, init = size
    model = learned_model(d, k, seed=2).train()
    grads = {}
    for literal in (False, True):
        _, loss = run(model, points, init, steps=2, literal=literal)
        grads[literal] = parameter_gradients(model, loss)
    assert len(grads[False]) == 4 * 6  # W_Q, W_K, W_V, b_Q, b_K, b_V of four attentions
    assert all(g.abs().max() > 0 for g in grads[True].values())  # every parameter reaches the loss
    assert_gradients_close(grads[False], grads[True])


# ----- (d) the literal model ---------------------------------------------------------------------------------
def dense_softmin_loss(points, centroids, tau: float = TAU):
    """mean over tasks of sum_i sum_j softmax_j(-r_ij / tau) r_ij, r = squared distances (b, n, k)."""
    r = torch.cdist(points, centroids, compute_mode="donot_use_mm_for_euclid_dist") ** 2  # (b, n, k)
    return (torch.softmax(-r / tau, dim=-1) * r).sum(dim=(1, 2)).mean()


def literal_of(model: KMeansTransformer) -> tuple[LiteralModel, dict[str, nn.Parameter]]:
    """The literal model of ``model`` and its parameters by the model's parameter names."""
    literal = LiteralModel.from_model(model)
    return literal, dict(literal.named_parameters())


@pytest.mark.parametrize("embedding,steps", [("onehot", 1), ("onehot", 2), ("binary", 1)])
def test_forward_and_gradients_equal_the_literal_model(size, embedding, steps):
    n, d, k, points, init = size
    model = learned_model(d, k, seed=3, embedding=embedding).train()
    reference, pairs = literal_of(model)
    centroids, loss = run(model, points, init, steps=steps, literal=False)
    expected = reference(points, init, steps).centroid_trajectory[:, -1]
    expected_loss = dense_softmin_loss(points, expected)
    torch.testing.assert_close(centroids, expected, rtol=0, atol=TOL)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-12, atol=0)
    got = parameter_gradients(model, loss)
    names = list(got)
    wanted = dict(zip(names, torch.autograd.grad(expected_loss, [pairs[name] for name in names])))
    assert_gradients_close(got, wanted)


# ----- (c) dropout on the fused path --------------------------------------------------------------------------
def xx_dropout_model(d: int, k: int, p: float, seed: int) -> KMeansTransformer:
    """The learnable model with attention dropout ``p`` on the points self-attention only (the fused one at
    n >= 128), so the global RNG draws exactly one set of dropped pairs per step, (b, n, n) in (task, query, key)
    order."""
    base = learned_model_config(d, k, "onehot", dropout=0.0)
    torch.manual_seed(seed)
    return KMeansTransformer(replace(base, attn_xx=replace(base.attn_xx, dropout=p))).double().train()


@pytest.mark.parametrize("p", [0.1, 0.01])
def test_fused_dropout_equals_dense_masked_attention_from_the_same_pairs(p):
    """Seeded: sample_dropped_pairs draws the dropped (task, query, key) positions from torch's global RNG; drawing
    them again from the same seed gives the mask of the dense reference. Forward and every gradient to 1e-10."""
    n, d, k, batch = 160, 4, 6, 2
    points, init = make_tasks(n, d, k, batch=batch, seed=9)
    model = xx_dropout_model(d, k, p, seed=4)
    reference, pairs = literal_of(model)

    torch.manual_seed(123)
    centroids, loss = run(model, points, init, steps=2, literal=False)
    torch.manual_seed(123)
    masks = []
    for _ in range(2):
        mask = torch.ones(batch, n, n, dtype=torch.float64)  # (b, n, n)
        mask[sample_dropped_pairs(batch, n, n, p)] = 0
        masks.append(mask)
    dropped_share = 1 - torch.stack(masks).mean().item()
    assert abs(dropped_share - p) < 5 * math.sqrt(p * (1 - p) / (2 * batch * n * n))  # about p of the pairs

    keep_masks = {(step, "attn_xx"): mask / (1 - p) for step, mask in enumerate(masks)}
    expected = reference(points, init, 2, keep_masks=keep_masks).centroid_trajectory[:, -1]
    expected_loss = dense_softmin_loss(points, expected)
    torch.testing.assert_close(centroids, expected, rtol=0, atol=TOL)
    got = parameter_gradients(model, loss)
    names = list(got)
    wanted = dict(zip(names, torch.autograd.grad(expected_loss, [pairs[name] for name in names])))
    assert_gradients_close(got, wanted)
    # and the dropout mattered: without the masks the reference differs
    assert (reference(points, init, 2).centroid_trajectory[:, -1] - expected).abs().max() > 1e-6


def test_dropout_is_off_in_eval_mode_on_the_fused_path():
    n, d, k = 160, 4, 6
    points, init = make_tasks(n, d, k, batch=2, seed=9)
    model = xx_dropout_model(d, k, 0.3, seed=4).eval()
    reference, _ = literal_of(model)
    with torch.no_grad():
        torch.testing.assert_close(model(points, init, steps=2).centroids,
                                   reference(points, init, 2).centroid_trajectory[:, -1], rtol=0, atol=TOL)
