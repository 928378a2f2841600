"""Acceptance: hook names and shapes, hook contents equal Lloyd, patching acts as Lloyd would (README.md, "Hooks")."""

import pytest
import torch
from conftest import make_tasks
from transformer_lens.ActivationCache import ActivationCache

from interp.algorithms import cluster_sums, lloyd
from interp.model import decode_assignments
from interp.model.constructions import lloyd_transformer

B, N, D, K, T = 3, 150, 4, 6, 4


@pytest.fixture(scope="module")
def tasks():
    points, init = make_tasks(N, D, K, batch=B, seed=21)
    assert not lloyd(points, init, T).any_empty
    return points, init


def expected_shapes(width: int, identity: bool) -> dict:
    """The cached names and shapes of a default run_with_cache; identity self-attentions' (b, n, n) scores and
    pattern are left out of the default cache (they are formed only when asked for)."""
    shapes = {"hook_anchor": (B, 1, D), "hook_points_embed": (B, N, width), "hook_centroids_embed": (B, K, width)}
    for layer in range(T):
        shapes.update({
            f"blocks.{layer}.attn_xc.hook_scores": (B, N, K), f"blocks.{layer}.attn_xc.hook_pattern": (B, N, K),
            f"blocks.{layer}.attn_cx.hook_scores": (B, K, N), f"blocks.{layer}.attn_cx.hook_pattern": (B, K, N),
            f"blocks.{layer}.hook_points_resid_post": (B, N, width),
            f"blocks.{layer}.hook_centroids_resid_post": (B, K, width),
        })
        if not identity:
            shapes.update({
                f"blocks.{layer}.attn_xx.hook_scores": (B, N, N), f"blocks.{layer}.attn_xx.hook_pattern": (B, N, N),
                f"blocks.{layer}.attn_cc.hook_scores": (B, K, K), f"blocks.{layer}.attn_cc.hook_pattern": (B, K, K),
            })
    return shapes


@pytest.mark.parametrize("kwargs", [dict(), dict(embedding="binary"), dict(attention="dot"),
                                    dict(self_attention="literal")], ids=["onehot", "binary", "dot", "literal"])
def test_cache_names_shapes_and_contents(tasks, kwargs):
    points, init = tasks
    model = lloyd_transformer(D, K, n_layers=T, **kwargs)
    reference = lloyd(points, init, T)
    out, cache = model.run_with_cache(points, init)
    assert isinstance(cache, ActivationCache)
    identity = kwargs.get("self_attention", "identity") == "identity"
    for name, shape in expected_shapes(model.config.d_model, identity).items():
        assert name in cache.cache_dict, name
        assert tuple(cache[name].shape) == shape, name
    if identity:
        assert not any(".attn_xx.hook_" in name and not name.endswith("hook_out") for name in cache.cache_dict)
    # tasks in the unit cube are not translated: the streams hold the input coordinates
    assert torch.equal(cache["hook_anchor"], torch.zeros(B, 1, D, dtype=points.dtype))
    scratch = slice(D, D + model.config.scratch_width)
    for layer in range(T):
        centroids = cache[f"blocks.{layer}.hook_centroids_resid_post"][..., :D]
        torch.testing.assert_close(centroids, reference.centroid_trajectory[:, layer + 1], rtol=0, atol=1e-12)
        labels = decode_assignments(cache[f"blocks.{layer}.hook_points_resid_post"][..., scratch], model.codes)
        assert torch.equal(labels, reference.assignment_trajectory[:, layer])
        # the assignment pattern is the one-hot of Lloyd's labels (hardmax, no ties on continuous data)
        pattern = cache[f"blocks.{layer}.attn_xc.hook_pattern"]
        assert torch.equal(pattern.argmax(-1), reference.assignment_trajectory[:, layer])
        assert torch.all(pattern.max(-1).values == 1)
    # caching changes nothing: the plain forward (the labelled fast path, segment sums in another order of
    # additions) gives the same centroids to float64 rounding and the same assignments
    plain = model(points, init)
    torch.testing.assert_close(out.centroids, plain.centroids, rtol=0, atol=1e-12)
    assert torch.equal(out.assignment_trajectory, plain.assignment_trajectory)


def test_identity_scores_and_pattern_are_cached_when_named(tasks):
    """Naming an identity self-attention's hooks in names_filter caches them: scores 0 on the diagonal and -inf
    elsewhere, the pattern the identity, and the run's centroids are unchanged."""
    points, init = tasks
    model = lloyd_transformer(D, K, n_layers=2)
    names = ["blocks.1.attn_xx.hook_scores", "blocks.1.attn_xx.hook_pattern", "blocks.0.attn_cc.hook_pattern"]
    out, cache = model.run_with_cache(points, init, names_filter=names)
    assert set(cache.cache_dict) == set(names)
    eye = torch.eye(N, dtype=torch.float64).expand(B, N, N)
    assert torch.equal(cache["blocks.1.attn_xx.hook_pattern"], eye)
    assert torch.equal(cache["blocks.0.attn_cc.hook_pattern"], torch.eye(K, dtype=torch.float64).expand(B, K, K))
    scores = cache["blocks.1.attn_xx.hook_scores"]
    assert torch.equal(scores.diagonal(dim1=-2, dim2=-1), torch.zeros(B, N, dtype=torch.float64))
    assert bool((scores[~eye.bool()] == float("-inf")).all())
    torch.testing.assert_close(out.centroids, lloyd(points, init, 2).centroids, rtol=0, atol=1e-12)


def test_identity_pattern_patched_in_place_takes_effect(tasks):
    """An in-place edit of the identity pattern (a hook returning None) acts like a returned patch."""
    points, init = tasks
    model = lloyd_transformer(D, K, n_layers=2)

    def zero_in_place(pattern, hook):
        pattern.zero_()

    in_place = model.run_with_hooks(points, init, fwd_hooks=[("blocks.1.attn_xx.hook_pattern", zero_in_place)])
    returned = model.run_with_hooks(
        points, init, fwd_hooks=[("blocks.1.attn_xx.hook_pattern", lambda p, hook: torch.zeros_like(p))])
    torch.testing.assert_close(in_place.centroids, returned.centroids, rtol=0, atol=0)
    assert not torch.allclose(in_place.centroids, model(points, init).centroids)


def test_shared_layer_run_for_more_steps_has_a_block_per_step(tasks):
    points, init = tasks
    model = lloyd_transformer(D, K, n_layers=1)
    out, cache = model.run_with_cache(points, init, steps=T)
    assert {f"blocks.{layer}.hook_centroids_resid_post" for layer in range(T)} <= set(cache.cache_dict)
    torch.testing.assert_close(out.centroids, lloyd(points, init, T).centroids, rtol=0, atol=1e-12)
    assert len(list(model.parameters())) == 12  # one layer's Q, K, V of four attentions, shared


@pytest.mark.parametrize("embedding", ["onehot", "binary"])
def test_patching_assignment_slots_moves_centroids_like_lloyd(tasks, embedding):
    """Overwrite blocks.0.hook_points_resid_post's slots with other labels: the next centroids are those
    labels' cluster means, exactly Lloyd's update step."""
    points, init = tasks
    model = lloyd_transformer(D, K, n_layers=2, embedding=embedding, centroid_update="hardmax")
    generator = torch.Generator().manual_seed(3)
    patched_labels = torch.randint(K, (B, N), generator=generator)
    patched_labels[:, :K] = torch.arange(K)  # every cluster keeps a member
    codes = model.codes[patched_labels]  # (B, N, e)

    def write_labels(resid, hook):
        resid = resid.clone()
        resid[..., D:] = codes
        return resid

    out = model.run_with_hooks(points, init, fwd_hooks=[("blocks.0.hook_points_resid_post", write_labels)])
    sums, counts = cluster_sums(points, patched_labels, K)
    expected = sums / counts[..., None]
    torch.testing.assert_close(out.centroid_trajectory[:, 1], expected, rtol=0, atol=1e-12)
    assert torch.equal(out.readout_trajectory[:, 0], patched_labels)  # the model carries the patched labels
    assert not torch.equal(out.assignment_trajectory[:, 0], patched_labels)  # Lloyd's E-step from init does not
    # the second layer then continues Lloyd from the patched centroids (random labels put every centroid near
    # the global mean, so clusters may empty: the construction's rule is Lloyd's empty="nearest_code")
    second = lloyd(points, expected, 1, empty="nearest_code", codes=model.codes)
    torch.testing.assert_close(out.centroid_trajectory[:, 2], second.centroids, rtol=0, atol=1e-12)
    assert torch.equal(out.empty_clusters[:, 1], second.empty_clusters[:, 0])


def test_patching_identity_self_attention_pattern_takes_effect(tasks):
    """The identity shortcut honours a patched pattern (zero-ablating attn_xx keeps the old assignment)."""
    points, init = tasks
    model = lloyd_transformer(D, K, n_layers=2)
    out = model.run_with_hooks(
        points, init, fwd_hooks=[("blocks.1.attn_xx.hook_pattern", lambda p, hook: torch.zeros_like(p))]
    )
    plain = model(points, init)
    assert not torch.allclose(out.centroids, plain.centroids)


def test_patching_identity_self_attention_scores_takes_effect(tasks):
    """Scores patched on the identity shortcut define the pattern (its gamma = inf hardmax): uniform scores make
    attn_xx average all points instead of erasing each point's own old code."""
    points, init = tasks
    model = lloyd_transformer(D, K, n_layers=2)
    seen = {}

    def uniform_scores(scores, hook):
        return torch.zeros_like(scores)

    def keep_pattern(pattern, hook):
        seen["pattern"] = pattern
        return pattern

    out = model.run_with_hooks(points, init, fwd_hooks=[("blocks.1.attn_xx.hook_scores", uniform_scores),
                                                        ("blocks.1.attn_xx.hook_pattern", keep_pattern)])
    torch.testing.assert_close(seen["pattern"], torch.full((B, N, N), 1.0 / N, dtype=torch.float64))
    assert not torch.allclose(out.centroids, model(points, init).centroids)
