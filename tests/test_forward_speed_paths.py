"""The plain forward's and the hooked forward's cheaper bookkeeping, against the reference computation.

The labelled step reads its layer's weight facts (feature supports, what attn_xx's and attn_cx's weights read) once
per forward (``labelled.layer_facts``, kept in the stream's memo, keyed by the weights' versions and storage) and
checks its tables in one sync (``labelled._table_checks``); the hooked step sums the residual stream and the literal
scores into fresh buffers. Each is checked against ``reference_only()`` (or the literal path) at sizes that take it.
"""

import pytest
import torch

from interp.algorithms import lloyd
from interp.constructions import lloyd_transformer
from interp.model.kernels import dispatch
from interp.model.kernels import labelled as labelled_module
from interp.model.projections import feature_support, folded_pair, known_supports, supports_of


def _tasks(b: int, n: int, d: int, k: int, seed: int, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    points = torch.rand(b, n, d, generator=generator, dtype=dtype)
    return points, points[:, :k].clone()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("embedding", "update"), [("onehot", "linear"), ("onehot", "hardmax"), ("binary", None)])
def test_labelled_forward_equals_the_reference(dtype, embedding, update, monkeypatch):
    model = lloyd_transformer(8, 16, n_layers=6, embedding=embedding, centroid_update=update, dtype=dtype)
    points, centroids = _tasks(4, 1024, 8, 16, seed=3, dtype=dtype)
    computed = {"facts": 0}
    original = labelled_module.supports_of

    def counting(matrices):
        computed["facts"] += 1
        return original(matrices)

    monkeypatch.setattr(labelled_module, "supports_of", counting)
    with torch.inference_mode():
        fast = model(points, centroids)
        assert computed["facts"] == 1  # six steps of one shared layer: its weights read once
        with dispatch.reference_only():
            reference = model(points, centroids)
    assert torch.equal(fast.assignment_trajectory, reference.assignment_trajectory)
    assert torch.equal(fast.empty_clusters, reference.empty_clusters)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert (fast.centroid_trajectory - reference.centroid_trajectory).abs().max() < tol
    if dtype == torch.float64:
        ref = lloyd(points, centroids, 6, empty="nearest_code", codes=model.codes)
        assert torch.equal(fast.assignment_trajectory, ref.assignment_trajectory)


def test_empty_clusters_are_counted_per_step():
    model = lloyd_transformer(3, 6, n_layers=3)
    points, centroids = _tasks(3, 200, 3, 6, seed=5)
    centroids[:, 5] = 10.0  # far from every point: empty at the first step
    out = model(points, centroids)
    one_hot = torch.nn.functional.one_hot(out.assignment_trajectory, 6).sum(dim=2)  # (b, T, k)
    assert torch.equal(out.empty_clusters, one_hot == 0)
    assert bool(out.empty_clusters[:, 0, 5].all())


def _stream(n: int = 50, d: int = 3, width: int = 9) -> labelled_module.LabelledTokens:
    return labelled_module.LabelledTokens.embedded(torch.rand(2, n, d, dtype=torch.float64), width)


def test_layer_facts_are_found_again_after_the_weights_change():
    model = lloyd_transformer(3, 6, n_layers=2)
    weights = model.layers[0]
    stream = _stream()
    facts = labelled_module.layer_facts(weights, stream)
    assert labelled_module.layer_facts(weights, stream) is facts  # the same forward, unchanged weights
    assert not facts.erase_reads_base and facts.erase_selector and not facts.mean_reads_base
    with torch.no_grad():
        weights.attn_cx.W_K[0, 0] = 1.0  # an in-place edit: W_K now reads the base
    changed = labelled_module.layer_facts(weights, stream)
    assert changed is not facts and changed.mean_reads_base
    W_V = weights.attn_xx.W_V
    W_V.data = 2 * W_V.data  # new storage, no version bump: not a signed selector any more
    replaced = labelled_module.layer_facts(weights, stream)
    assert replaced is not changed and not replaced.erase_selector and replaced.erase_value_bound == 2.0


def test_known_supports_match_only_the_very_tensor():
    matrix = torch.zeros(6, 6)
    matrix[:, 2:4] = 1.0
    twin = matrix.clone()
    known = supports_of([matrix, None])
    assert known[id(matrix)][1] == slice(2, 4)
    twin[:, 0] = 1.0
    with known_supports({id(twin): (matrix, slice(2, 4))}):  # an id that names another tensor is not trusted
        assert feature_support(twin) == slice(0, 4)
    with known_supports(known):
        assert feature_support(matrix) == slice(2, 4)


def _literal_support(matrix: torch.Tensor) -> slice:
    """The smallest range of last-axis features holding every nonzero, found by a Python loop over the entries."""
    width = matrix.shape[-1]
    rows = matrix.detach().reshape(-1, width).tolist()
    read = [column for column in range(width) if any(row[column] != 0 for row in rows)]
    if not read:
        return slice(0, 1)
    return slice(None) if (read[0], read[-1] + 1) == (0, width) else slice(read[0], read[-1] + 1)


def test_supports_read_in_one_sync_equal_each_matrix_alone():
    partial, full, empty, single = torch.zeros(6, 6), torch.ones(6, 6), torch.zeros(6, 6), torch.zeros(3, 6)
    partial[1, 2], partial[4, 3] = 1.0, -2.0
    single[0, 5] = 0.5
    learned = torch.ones(6, 6).requires_grad_()
    matrices = [partial, full, None, empty, single, learned]
    known = supports_of(matrices)
    assert [known[id(m)][1] for m in matrices if m is not None] == [slice(2, 4), slice(None), slice(0, 1),
                                                                    slice(5, 6), slice(None)]
    assert all(known[id(m)][1] == _literal_support(m) for m in matrices if m is not None and not m.requires_grad)
    assert all(feature_support(m) == known[id(m)][1] for m in matrices if m is not None)
    mixed_widths = [partial, torch.eye(4)[:, 1:3].contiguous()]  # widths 6 and 2: one matrix at a time
    assert [supports_of(mixed_widths)[id(m)][1] for m in mixed_widths] == [slice(2, 4), slice(None)]


def test_supports_of_one_width_reads_no_matrix_alone(monkeypatch):
    """Matrices of one width and device are read together: ``feature_support`` (one sync each) is asked only for
    the one that requires grad."""
    from interp.model import projections

    asked = []
    original = projections.feature_support
    monkeypatch.setattr(projections, "feature_support", lambda matrix: asked.append(matrix) or original(matrix))
    frozen = [torch.zeros(5, 5), torch.eye(5), torch.zeros(2, 5)]
    frozen[0][3, 1] = 1.0
    learned = torch.ones(5, 5).requires_grad_()
    known = supports_of([*frozen, learned])
    assert len(asked) == 1 and asked[0] is learned
    assert [known[id(m)][1] for m in frozen] == [slice(1, 2), slice(None), slice(0, 1)]


def test_folded_pair_contracts_over_the_folded_matrix_support():
    """folded = Y W is zero outside W's support S, so Y W X^T = folded[..., S] X[..., S]^T, also where folded's own
    support is narrower than S (Y cancels a column of W)."""
    W = torch.zeros(6, 6, dtype=torch.float64)
    W[0, 1:4] = torch.tensor([1.0, 2.0, -1.0], dtype=torch.float64)
    W[1, 1:4] = torch.tensor([1.0, 0.5, 3.0], dtype=torch.float64)
    Y = torch.tensor([[[1.0, -1.0, 0, 0, 0, 0], [2.0, -2.0, 0, 0, 0, 0]]], dtype=torch.float64)  # (1, 2, 6)
    folded = Y @ W  # (1, 2, 6): 0 in feature 1 (W[0, 1] - W[1, 1] = 0), though W reads it
    assert feature_support(folded) == slice(2, 4) and feature_support(W) == slice(1, 4)
    tokens = torch.rand(1, 7, 6, dtype=torch.float64)
    left, right = folded_pair(folded, tokens, W)
    assert left.shape == (1, 2, 3) and right.shape == (1, 3, 7)  # W's support: features 1, 2, 3
    assert torch.allclose(left @ right, folded @ tokens.transpose(1, 2), rtol=0, atol=1e-14)


@pytest.mark.parametrize("case", ["integers", "spoiled_base", "not_erased", "fractions_checked_pairwise",
                                  "fractional_values"])
def test_erasure_checks_in_one_sync(case):
    width, d = 9, 3
    model = lloyd_transformer(d, width - d, n_layers=1)
    weights = model.layers[0].attn_xx
    old = _stream(width=width)
    old = labelled_module.LabelledTokens(old.base, old.base_columns, torch.zeros(2, 4, width, dtype=torch.float64),
                                         torch.zeros_like(old.labels))
    old.table[:, :, d:] = torch.eye(4, width - d, dtype=torch.float64)
    new_table = torch.zeros(2, 5, width, dtype=torch.float64)
    new_table[:, :, d:] = torch.eye(5, width - d, dtype=torch.float64)
    expected = True
    if case == "spoiled_base":
        new_table[0, 0, 0] = 1.0
        expected = False
    if case == "fractions_checked_pairwise":
        new_table[:, :, d:] *= 0.5  # not integers: every pair (a, l) checked, and exact (halves and ones)
    if case == "fractional_values":
        with torch.no_grad():
            weights.W_V.mul_(0.5)  # no signed selector, not integers
        expected = False
    erased = labelled_module.identity_table(old, weights)
    if case == "not_erased":
        erased = erased + 1e-3
        erased[..., :d] = 0
        expected = False
    facts = labelled_module.layer_facts(model.layers[0], old)
    assert labelled_module.erases_exactly(new_table, old, erased, weights, facts) is expected
    assert labelled_module.erases_exactly(new_table, old, erased, weights) is expected  # facts computed there


def test_hooked_run_sums_and_scores_are_the_literal_ones():
    """The cache of a hooked run: resid_post is (resid_pre + attn_xc out) + attn_xx out, the cached scores are
    attn_xc's literal scores from the cached resid_pre, and a patch of the scores still takes effect."""
    model = lloyd_transformer(4, 5, n_layers=2)
    points, centroids = _tasks(2, 300, 4, 5, seed=9)
    out, cache = model.run_with_cache(points, centroids)
    weights = model.layers[0]
    for layer in range(2):
        pre, post = cache[f"blocks.{layer}.hook_points_resid_pre"], cache[f"blocks.{layer}.hook_points_resid_post"]
        summed = (pre + cache[f"blocks.{layer}.attn_xc.hook_out"]) + cache[f"blocks.{layer}.attn_xx.hook_out"]
        assert torch.equal(post, summed)
        scores = model.blocks[layer].attn_xc.scores(pre, cache[f"blocks.{layer}.hook_centroids_resid_pre"],
                                                     weights.attn_xc)
        assert torch.equal(cache[f"blocks.{layer}.attn_xc.hook_scores"], scores)
    centre = cache["blocks.0.hook_centroids_resid_post"]
    assert torch.equal(centre, (cache["blocks.0.hook_centroids_resid_pre"] + cache["blocks.0.attn_cx.hook_out"])
                       + cache["blocks.0.attn_cc.hook_out"])

    def everyone_to_slot_0(scores, hook):
        scores = scores.clone()
        scores[..., 0] = 0.0  # the largest possible literal score: every point picks slot 0
        return scores

    patched = model.run_with_hooks(points, centroids, fwd_hooks=[("blocks.0.attn_xc.hook_scores", everyone_to_slot_0)])
    assert bool((patched.readout_trajectory[:, 0] == 0).all())
    assert not torch.equal(patched.centroid_trajectory, out.centroid_trajectory)
