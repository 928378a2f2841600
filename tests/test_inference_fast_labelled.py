"""The labelled points stream: exact inference at Lloyd's cost.

Without any hook the Lloyd constructions carry the points stream as ``LabelledTokens`` ([x; 0] + code table[label])
and never form it as (b, n, D): attn_xc's hardmax is a table and a label per point (tied arg-max sets get their own
AHAT-mean rows), attn_xx's identity erases the old row, attn_cx is a segment sum over the labels. Checked in float64
against the literal path (``run_with_cache``: every hook point hooked) at sizes where the labelled step runs (read from
``dispatch.trace()``), with ties, with hooks on one block only, and against values built here from the reference Lloyd.
"""

import pytest
import torch

from interp.algorithms import lloyd
from interp.constructions import lloyd_transformer
from interp.model.kernels import dispatch

TOL = 1e-12


def _tasks(b: int, n: int, d: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    points = torch.rand(b, n, d, generator=generator, dtype=torch.float64)
    return points, points[:, :k].clone()


@pytest.fixture
def labelled():
    """The paths of every forward the test runs (``dispatch.trace``); ``labelled_steps`` counts the steps that ran
    the labelled step (recorded whole as ``labelled_stream``; a fallback is not)."""
    with dispatch.trace() as paths:
        yield paths


def labelled_steps(paths) -> int:
    return sum(path.part == "block" and path.kernel == "labelled_stream" for path in paths)


def _assert_same(fast, literal):
    assert (fast.centroid_trajectory - literal.centroid_trajectory).abs().max() < TOL
    assert torch.equal(fast.assignment_trajectory, literal.assignment_trajectory)
    assert torch.equal(fast.empty_clusters, literal.empty_clusters)


@pytest.mark.parametrize("embedding", ["onehot", "binary"])
@pytest.mark.parametrize(("n", "k"), [(1024, 16), (3000, 7)])
def test_labelled_forward_equals_the_literal_path_and_lloyd(embedding, n, k, labelled):
    model = lloyd_transformer(8, k, n_layers=6, embedding=embedding)
    points, centroids = _tasks(3, n, 8, k, seed=n + k)
    with torch.inference_mode():
        fast = model(points, centroids)
    assert labelled_steps(labelled) == 6  # every layer ran labelled
    literal, _ = model.run_with_cache(points, centroids)
    assert labelled_steps(labelled) == 6  # hooks everywhere: never labelled
    _assert_same(fast, literal)
    reference = lloyd(points, centroids, 6, empty="nearest_code", codes=model.codes)
    _assert_same(fast, reference)


@pytest.mark.parametrize(("embedding", "copies"), [("onehot", 2), ("onehot", 3), ("binary", 2)])
def test_tied_assignments_keep_ahats_average(embedding, copies, labelled):
    """Identical initial centroids tie for every point nearest to them: each point's code is AHAT's average of the
    tied codes, held as one extra table row per distinct tied set, and the labelled step still runs."""
    # binary ties: the two tied centroids take the same members, and the literal path's matrix product may round
    # their equal means differently (one ulp on some CPUs), after which the next step's tie is broken by rounding;
    # the paths are compared where the tie is exact by construction, the first step
    model = lloyd_transformer(4, 6, n_layers=1 if embedding == "binary" else 3, embedding=embedding)
    points, centroids = _tasks(3, 300, 4, 6, seed=7)
    centroids[:, 1:copies] = centroids[:, :1]
    with torch.no_grad():
        fast = model(points, centroids)
    assert labelled_steps(labelled) >= 1
    literal, cache = model.run_with_cache(points, centroids)
    pattern = cache["blocks.0.attn_xc.hook_pattern"]  # (b, n, k)
    assert bool((pattern == 1 / copies).any())  # a real tie, averaged
    _assert_same(fast, literal)


def test_two_way_ties_stay_labelled_at_every_layer(labelled):
    model = lloyd_transformer(4, 6, n_layers=3, embedding="binary")
    points, centroids = _tasks(3, 300, 4, 6, seed=7)
    centroids[:, 1] = centroids[:, 0]
    with torch.no_grad():
        model(points, centroids)
    assert labelled_steps(labelled) == 3  # halves are exact: (code + 1/2) - 1/2 = code


def test_hooks_on_one_block_see_the_literal_stream(labelled):
    """Blocks before a hooked one run labelled; the hooked block forms the stream, which holds exactly the literal
    numbers; the hooked values equal run_with_cache's and the output is the same."""
    model = lloyd_transformer(8, 10, n_layers=6, embedding="onehot")
    points, centroids = _tasks(2, 1024, 8, 10, seed=11)
    names = ["blocks.3.hook_points_resid_pre", "blocks.3.attn_xc.hook_pattern", "blocks.3.attn_xx.hook_out"]
    seen = {}

    def keep(tensor, hook):
        seen[hook.name] = tensor.clone()

    with torch.no_grad():
        hooked = model.run_with_hooks(points, centroids, fwd_hooks=[(name, keep) for name in names])
    assert labelled_steps(labelled) == 3  # blocks 0, 1, 2
    literal, cache = model.run_with_cache(points, centroids)
    for name in names:
        assert torch.equal(seen[name], cache[name]), name
    _assert_same(hooked, literal)


def test_cached_streams_are_the_points_and_their_codes():
    """The literal cache (unchanged by the labelled path) holds [x; code of the assignment] after every layer: built
    here from the reference Lloyd's assignments and the one-hot codes."""
    model = lloyd_transformer(5, 8, n_layers=4, embedding="onehot")
    points, centroids = _tasks(2, 700, 5, 8, seed=5)
    out, cache = model.run_with_cache(points, centroids)
    reference = lloyd(points, centroids, 4, empty="nearest_code", codes=model.codes)
    for layer in range(4):
        expected = torch.cat([points, torch.eye(8, dtype=torch.float64)[reference.assignment_trajectory[:, layer]]], -1)
        assert torch.equal(cache[f"blocks.{layer}.hook_points_resid_post"], expected)
    with torch.no_grad():
        _assert_same(model(points, centroids), out)


def test_a_hooked_embedding_keeps_the_tensor_stream(labelled):
    """A hook on the points embedding gives the (b, n, D) stream from the start: no labelled step, the same output."""
    model = lloyd_transformer(8, 16, n_layers=4, embedding="binary")
    points, centroids = _tasks(2, 1024, 8, 16, seed=3)
    with torch.no_grad():
        tensor_path = model.run_with_hooks(points, centroids, fwd_hooks=[("hook_points_embed", lambda t, hook: None)])
        assert labelled_steps(labelled) == 0
        fast = model(points, centroids)
        assert labelled_steps(labelled) == 4
    _assert_same(fast, tensor_path)


def test_gradients_never_take_the_labelled_step(labelled):
    model = lloyd_transformer(3, 4, n_layers=2).requires_grad_(True)
    points, centroids = _tasks(2, 200, 3, 4, seed=1)
    model(points, centroids).centroids.sum().backward()
    assert labelled_steps(labelled) == 0
    assert model.layers[0].attn_cx.W_V.grad is not None
