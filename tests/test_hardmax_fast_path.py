"""The exact inference fast paths of hard (AHAT, gamma = inf) attention.

In an unhooked step (no hook on any of its hook points), a hard attention finds each row's arg-max set in one pass
and, when every set is a single key, gathers the winning values instead of multiplying by a (q x r) pattern; with
ties it uses AHAT's uniform weights on the set. Outside autograd in an unhooked step, the points' residual sum is
accumulated in attn_xc's fresh output buffer. Without any hook the constructions carry the points stream labelled
(``tests/test_inference_fast_labelled.py``); these counts include its hard attentions. Hooks (``run_with_cache``,
``run_with_hooks``) force the literal path, whose numbers these are checked against: float64, 1e-12, assignments
identical, ties included, at sizes where the fast path runs (it is counted).
"""

import pytest
import torch

from interp.constructions import lloyd_transformer
from interp.model.kernels import dispatch
from interp.model.kernels import hardmax as hardmax_module

TOL = 1e-12


def _tasks(b: int, n: int, d: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    points = torch.rand(b, n, d, generator=generator, dtype=torch.float64)
    return points, points[:, :k].clone()


@pytest.fixture
def gathers(monkeypatch):
    """Counts the hard attentions (``hardmax``) and those whose every arg-max set was a single key (``gather``), on
    the tensor path and the labelled stream alike (both ask ``kernels.hardmax.single_winner``)."""
    counter = {"gather": 0, "hardmax": 0}
    original = hardmax_module.single_winner

    def counting(counts, index_sums, n_keys):
        counter["hardmax"] += 1
        single = bool((counts == 1).all())  # written here, not read from the code under test
        counter["gather"] += int(single)
        return original(counts, index_sums, n_keys)

    monkeypatch.setattr(hardmax_module, "single_winner", counting)
    return counter


def _fast(model, points, centroids, stream: str):
    """The plain forward on the labelled stream, or (``stream="tensor"``) on the (b, n, D) tensor stream: the
    labelled-stream kernel switched off, every other kernel on."""
    with torch.no_grad():
        if stream == "labelled":
            return model(points, centroids)
        with dispatch.without("labelled_stream"):
            return model(points, centroids)


STREAMS = ["labelled", "tensor"]


@pytest.mark.parametrize("stream", STREAMS)
@pytest.mark.parametrize("embedding", ["onehot", "binary"])
@pytest.mark.parametrize(("n", "k"), [(512, 10), (1024, 16)])
def test_fast_forward_equals_the_literal_path(embedding, n, k, stream, gathers):
    model = lloyd_transformer(8, k, n_layers=6, embedding=embedding)
    points, centroids = _tasks(4, n, 8, k, seed=n + k)
    fast = _fast(model, points, centroids, stream)
    assert gathers["gather"] >= 6  # attn_xc gathered at every layer
    literal, cache = model.run_with_cache(points, centroids)
    assert (fast.centroid_trajectory - literal.centroid_trajectory).abs().max() < TOL
    assert torch.equal(fast.assignment_trajectory, literal.assignment_trajectory)
    assert torch.equal(fast.empty_clusters, literal.empty_clusters)
    # the cache holds what the literal path computed: attn_xc's pattern is one-hot on the assignment
    pattern = cache["blocks.5.attn_xc.hook_pattern"]  # (b, n, k)
    assert torch.equal(pattern.argmax(-1), literal.assignment_trajectory[:, 5])


@pytest.mark.parametrize("stream", STREAMS)
@pytest.mark.parametrize("embedding", ["onehot", "binary"])
def test_ties_take_ahats_average_on_both_paths(embedding, stream, gathers):
    """Two identical initial centroids tie for every point nearest to them: AHAT splits the point's code between
    them; the fast path must do exactly the same (no gather there)."""
    # binary ties: the two tied centroids take the same members, and the literal path's matrix product may round
    # their equal means differently (one ulp on some CPUs), after which the next step's tie is broken by rounding;
    # the paths are compared where the tie is exact by construction, the first step
    model = lloyd_transformer(4, 6, n_layers=1 if embedding == "binary" else 3, embedding=embedding)
    points, centroids = _tasks(3, 300, 4, 6, seed=7)
    centroids[:, 1] = centroids[:, 0]
    fast = _fast(model, points, centroids, stream)
    literal, _ = model.run_with_cache(points, centroids)
    assert gathers["hardmax"] > gathers["gather"]  # some attention met ties
    assert (fast.centroid_trajectory - literal.centroid_trajectory).abs().max() < TOL
    assert torch.equal(fast.assignment_trajectory, literal.assignment_trajectory)


def test_a_hook_on_attn_xc_output_sees_an_unmodified_tensor():
    """The in-place residual sum must not write into a tensor a hook kept: with a hook on attn_xc's output the sum is
    formed out of place, and the kept tensor still equals a copy taken inside the hook."""
    model = lloyd_transformer(4, 5, n_layers=2)
    points, centroids = _tasks(2, 200, 4, 5, seed=3)
    kept = []

    def keep(out, hook):
        kept.append((out, out.clone()))

    with torch.no_grad():
        hooked = model.run_with_hooks(points, centroids, fwd_hooks=[("blocks.0.attn_xc.hook_out", keep)])
        plain = model(points, centroids)
    assert len(kept) == 1 and torch.equal(kept[0][0], kept[0][1])
    assert (hooked.centroids - plain.centroids).abs().max() < TOL  # plain: the labelled stream, other sums


def test_gradients_are_unchanged_by_the_fast_path():
    """With autograd on, the residual sum stays out of place; gradients through a hard construction with a
    learnable copy of its weights equal those of the literal path."""
    model = lloyd_transformer(3, 4, n_layers=2, embedding="binary").requires_grad_(True)
    points, centroids = _tasks(2, 100, 3, 4, seed=5)
    centroids.requires_grad_(True)
    fast = torch.autograd.grad(model(points, centroids).centroids.sum(), centroids)[0]
    literal_out, _ = model.run_with_cache(points, centroids)
    literal = torch.autograd.grad(literal_out.centroids.sum(), centroids)[0]
    assert (fast - literal).abs().max() < TOL
