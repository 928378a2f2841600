"""The learnable model is the same KMeansTransformer (docs/learned_model.md): multi-step re-embedding, naive stacking,
dropout tied to training mode, sparsemax normaliser, the fused attention equal to the literal one."""

import pytest
import torch
from conftest import make_tasks

from interp.model import KMeansTransformer
from interp.model.config import learned_model_config
from interp.model.constructions import lloyd_transformer
from interp.model.kernels import fused as fused_attention
from interp.model.kernels.fused import flash_attention, sample_dropped_pairs


@pytest.fixture(scope="module")
def tasks():
    return make_tasks(60, 4, 3, batch=2, seed=5)


@pytest.mark.parametrize("embedding", ["onehot", "binary", "none"])
def test_widths_and_parameters(embedding):
    model = KMeansTransformer(learned_model_config(32, 10, embedding))
    width = {"onehot": 42, "binary": 36, "none": 32}[embedding]
    assert model.config.d_model == width
    assert sum(p.numel() for p in model.parameters()) == 4 * 3 * (width * width + width)


def test_steps_reembed_and_naive_stacking_differ(tasks):
    points, init = tasks
    torch.manual_seed(0)
    model = KMeansTransformer(learned_model_config(4, 3)).double().eval()
    reembedded = model(points, init, steps=4)
    stacked = model(points, init, steps=4, reembed=False)
    torch.testing.assert_close(reembedded.centroid_trajectory[:, 1], stacked.centroid_trajectory[:, 1])
    assert not torch.allclose(reembedded.centroids, stacked.centroids)
    # re-embedding step by step equals calling the one-step model on its own output
    current = init
    for _ in range(4):
        current = model(points, current, steps=1).centroids
    torch.testing.assert_close(reembedded.centroids, current, rtol=0, atol=1e-12)


def test_construction_is_exact_both_stacked_and_reembedded(tasks):
    points, init = tasks
    model = lloyd_transformer(4, 3, n_layers=1)
    stacked = model(points, init, steps=6)
    reembedded = model(points, init, steps=6, reembed=True)
    torch.testing.assert_close(stacked.centroids, reembedded.centroids, rtol=0, atol=1e-12)


def test_dropout_only_in_training_mode(tasks):
    points, init = (t.float() for t in tasks)
    torch.manual_seed(1)
    model = KMeansTransformer(learned_model_config(4, 3, dropout=0.3))
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(points, init).centroids, model(points, init).centroids)
        model.train()
        assert not torch.equal(model(points, init).centroids, model(points, init).centroids)


@pytest.mark.parametrize("normaliser", ["softmax", "sparsemax"])
def test_fused_path_equals_literal_path_with_hooks(tasks, normaliser):
    points, init = tasks
    torch.manual_seed(2)
    model = KMeansTransformer(learned_model_config(4, 3, normaliser=normaliser)).double().eval()
    plain = model(points, init, steps=2)
    cached, cache = model.run_with_cache(points, init, steps=2)
    torch.testing.assert_close(plain.centroid_trajectory, cached.centroid_trajectory, rtol=0, atol=1e-12)
    pattern = cache["blocks.1.attn_xx.hook_pattern"]
    torch.testing.assert_close(pattern.sum(-1), torch.ones_like(pattern[..., 0]))
    if normaliser == "sparsemax":
        assert (pattern == 0).any()  # sparse weights


@pytest.mark.parametrize("kernel", ["dense", "flash"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_sparse_dropout_flash_attention_equals_dense_masked_attention(dtype, kernel, monkeypatch):
    """Forward and gradients of the fused attention with exact dropout vs the dense masked computation, through
    the formed-pattern kernel (40 x 30 pairs, below DENSE_MAX_PAIRS) and, with the limit at 0, the flash kernel."""
    if kernel == "flash":
        monkeypatch.setattr(fused_attention, "DENSE_MAX_PAIRS", 0)
    else:
        assert 40 * 30 <= fused_attention.DENSE_MAX_PAIRS
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(3, 40, 7, dtype=dtype, generator=gen, requires_grad=True)
    k = torch.randn(3, 30, 7, dtype=dtype, generator=gen, requires_grad=True)
    v = torch.randn(3, 30, 6, dtype=dtype, generator=gen, requires_grad=True)
    p, scale = 0.2, 0.7
    torch.manual_seed(4)
    dropped = sample_dropped_pairs(3, 40, 30, p)
    out = flash_attention(q, k, v, scale, p, dropped)
    grad = torch.randn(out.shape, dtype=dtype, generator=gen)
    got = torch.autograd.grad(out, (q, k, v), grad)
    mask = torch.ones(3, 40, 30, dtype=dtype)
    mask[dropped] = 0
    reference = (torch.softmax(scale * q @ k.transpose(1, 2), -1) * mask) @ v / (1 - p)
    expected = torch.autograd.grad(reference, (q, k, v), grad)
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    torch.testing.assert_close(out, reference, rtol=0, atol=tol)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=tol)


def test_dense_kernel_backward_twice_and_without_dropout():
    """The formed-pattern kernel puts the dropped weights back for its backward and zeroes them again: a second
    backward through the same graph gives the same gradients; with dropout 0 it is plain softmax attention."""
    gen = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(2, 16, 5, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(3))
    torch.manual_seed(7)
    out = flash_attention(q, k, v, 0.9, 0.3)
    grad = torch.randn(out.shape, dtype=torch.float64, generator=gen)
    first = torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)
    second = torch.autograd.grad(out, (q, k, v), grad)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    plain = flash_attention(q, k, v, 0.9, 0.0)
    reference = torch.softmax(0.9 * q @ k.transpose(1, 2), -1) @ v
    torch.testing.assert_close(plain, reference, rtol=0, atol=1e-13)


def test_dropped_pairs_are_a_bernoulli_process():
    torch.manual_seed(5)
    b, i, j = sample_dropped_pairs(8, 200, 300, 0.01)
    count = len(b)
    mean, std = 8 * 200 * 300 * 0.01, (8 * 200 * 300 * 0.01 * 0.99) ** 0.5
    assert abs(count - mean) < 5 * std
    flat = (b * 200 + i) * 300 + j
    assert len(torch.unique(flat)) == count  # distinct positions
    assert int(b.max()) < 8 and int(i.max()) < 200 and int(j.max()) < 300
    # positions uniform: each batch gets about an eighth
    assert (torch.bincount(b, minlength=8).double() / count - 1 / 8).abs().max() < 0.02


@pytest.mark.parametrize("kernel", ["dense", "flash"])
def test_given_dropped_pairs_in_any_order_or_repeated_are_dropped_once(kernel, monkeypatch):
    """Both kernels read the dropped pairs as a sorted sparse structure: pairs given shuffled, or one pair twice,
    give the masked computation in which each listed pair is dropped once."""
    if kernel == "flash":
        monkeypatch.setattr(fused_attention, "DENSE_MAX_PAIRS", 0)
    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(2, 10, 8, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(3))
    torch.manual_seed(9)
    batch, query, key = sample_dropped_pairs(2, 10, 10, 0.2)
    order = torch.randperm(len(batch), generator=gen)
    shuffled = (torch.cat([batch[order], batch[:1]]), torch.cat([query[order], query[:1]]),
                torch.cat([key[order], key[:1]]))  # shuffled, and the first pair listed twice
    out = flash_attention(q, k, v, 0.5, 0.2, shuffled)
    mask = torch.ones(2, 10, 10, dtype=torch.float64)
    mask[batch, query, key] = 0
    reference = (torch.softmax(0.5 * q @ k.transpose(1, 2), -1) * mask) @ v / 0.8
    torch.testing.assert_close(out, reference, rtol=0, atol=1e-12)
    grad = torch.randn(out.shape, dtype=torch.float64, generator=gen)
    expected = torch.autograd.grad(reference, (q, k, v), grad)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), grad), expected):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
