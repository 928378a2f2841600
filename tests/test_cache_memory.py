"""run_with_cache and identity self-attentions.

Before the fix every hooked identity self-attention built an n x n identity pattern and score matrix and kept them
in a per-module cache: at n = 3000 and 10 layers (float32) about 0.7-1.4 GB stayed allocated after the activation
cache was deleted, and n = 200,000 asked for 160 GB. Now ``run_with_cache()`` leaves the identity attentions'
scores and pattern out unless ``names_filter`` names them, and when they are formed they live for that run only.

Memory is read as the process's resident set (/proc/self/statm): torch has no CPU allocator statistics, and
tracemalloc does not see torch's allocations. The bounds are generous (200 MB against the 700+ MB held before).
"""

import gc
import os
import time
import warnings

import torch

from interp.algorithms import lloyd
from interp.model.attention import DenseIdentityPattern
from interp.model.constructions import lloyd_transformer

HELD_BOUND_MB = 200


def resident_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def task(n: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    points = torch.rand(1, n, 2, generator=generator)  # (1, n, 2) float32 in the unit cube
    return points, points[:, :3].clone()  # k = 3 initial centroids: the first three points


def fresh_model_3000():
    """A new 10-layer construction (no state from other tests) and a task of n = 3000, after a warm-up run."""
    model = lloyd_transformer(2, 3, n_layers=10, dtype=torch.float32)
    points, init = task(3000)
    model(points, init)  # warm up (lazy allocations) before measuring
    gc.collect()
    return model, points, init


def test_default_cache_holds_nothing_after_it_is_dropped():
    model, points, init = fresh_model_3000()
    before = resident_mb()
    out, cache = model.run_with_cache(points, init)
    names = set(cache.cache_dict)
    largest = max(tensor.numel() for tensor in cache.cache_dict.values())
    torch.testing.assert_close(out.centroids, lloyd(points, init, 10).centroids, rtol=0, atol=1e-5)
    del out, cache
    gc.collect()
    assert resident_mb() - before < HELD_BOUND_MB
    assert not any(name.endswith(("attn_xx.hook_scores", "attn_xx.hook_pattern")) for name in names)
    assert largest < 3000 * 3000 // 100  # nothing n x n was cached


def test_named_identity_patterns_are_cached_and_then_freed():
    """Asked for by name, the ten (3000, 3000) scores and patterns are cached (720 MB while the cache lives) and
    freed with it: no per-module copies stay behind."""
    model, points, init = fresh_model_3000()
    before = resident_mb()
    out, cache = model.run_with_cache(points, init, names_filter=lambda name: True)
    pattern = cache["blocks.9.attn_xx.hook_pattern"]
    is_identity = pattern.shape == (1, 3000, 3000) and torch.equal(pattern[0], torch.eye(3000))
    del out, cache, pattern
    gc.collect()
    assert resident_mb() - before < HELD_BOUND_MB
    assert is_identity


def test_hooking_a_large_identity_pattern_warns_with_its_size():
    model = lloyd_transformer(2, 3, n_layers=1, dtype=torch.float32)
    points, init = task(6000)  # 2 x 6000^2 x 4 bytes = 288 MB > 256 MiB
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = model.run_with_hooks(points, init, fwd_hooks=[("blocks.0.attn_xx.hook_pattern", lambda p, hook: p)])
    messages = [str(w.message) for w in caught if issubclass(w.category, DenseIdentityPattern)]
    assert len(messages) == 1 and "(6000, 6000)" in messages[0] and "0.27 GiB" in messages[0]
    torch.testing.assert_close(out.centroids, lloyd(points, init, 1).centroids, rtol=0, atol=1e-5)


def test_run_with_cache_at_n_200000_forms_nothing_quadratic():
    """n = 200,000, d = 2, k = 3, 2 layers, default hooks: an n x n float32 tensor would be 160 GB (the test
    machine has far less), so finishing is the proof; the resident set also stays small."""
    model = lloyd_transformer(2, 3, n_layers=2, dtype=torch.float32)
    points, init = task(200_000, seed=1)
    before, start = resident_mb(), time.perf_counter()
    out, cache = model.run_with_cache(points, init)
    elapsed = time.perf_counter() - start
    assert elapsed < 20
    assert resident_mb() - before < 2000
    assert max(tensor.numel() for tensor in cache.cache_dict.values()) <= 200_000 * model.config.d_model
    reference = lloyd(points, init, 2)
    assert (out.assignments != reference.assignments).float().mean() < 1e-4  # float32 near-ties only
    torch.testing.assert_close(out.centroids, reference.centroids, rtol=0, atol=1e-4)
