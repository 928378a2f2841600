"""Translation invariance: k-means does not change when a task is translated, so neither may
``interp.lloyd``, the other translation-invariant references, or any exact construction.

Before the fix distances were ||x||^2 - 2 x.c + ||c||^2 on the raw coordinates: float32 tasks at 1e3 and float64
tasks at 1e8 had 35-80 % of their assignments changed by the translation. The tasks here lie on a grid of 2^-12,
so the translated task is exactly representable (the translation itself adds no rounding) and the comparison is
exact: the assignments must be identical, step by step.

Centroid tolerance: a task inside the unit cube has anchor 0, its translate by t (a multiple of the anchor grid,
which is <= 8 for a task of range <= 1) has anchor exactly t, so both runs compute the same numbers and the
outputs differ only by the final c + t (half an ulp at t) and the test's own near + t (another half): one ulp of
the offset, 2^-14 = 6.1e-5 (float32, t = 1e3) and 2^-26 = 1.5e-8 (float64, t = 1e8).
"""

import pytest
import torch

from interp.algorithms import kmeans_objective, lloyd, randomized_kmedoids, robust_kmeans, soft_kmeans, trimmed_kmeans
from interp.model.constructions import (
    kmedoids_transformer,
    lloyd_transformer,
    robust_kmeans_transformer,
    soft_kmeans_transformer,
    trimmed_kmeans_transformer,
)
from interp.primitives import task_anchor

CASES = [(torch.float32, 1e3), (torch.float64, 1e8)]
CASE_IDS = ["float32+1e3", "float64+1e8"]
SEEDS = [0, 1, 2]
B, N, D, K, T = 3, 120, 3, 4, 10
CONSTRUCTIONS = {
    "onehot-linear": dict(),
    "onehot-ahat": dict(centroid_update="hardmax"),
    "binary": dict(embedding="binary"),
    "dot-ffn": dict(attention="dot"),
    "literal-self-attention": dict(self_attention="literal"),
}


def grid_task(dtype: torch.dtype, seed: int, b: int = B, n: int = N, d: int = D, k: int = K):
    """Points on the 2^-12 grid in [0, 1)^d and k of them as initial centroids: exact at the offsets used here."""
    generator = torch.Generator().manual_seed(seed)
    points = torch.floor(torch.rand(b, n, d, generator=generator, dtype=torch.float64) * 4096) / 4096
    picks = torch.stack([torch.randperm(n, generator=generator)[:k] for _ in range(b)])  # (b, k)
    init = torch.gather(points, 1, picks[..., None].expand(-1, -1, d))
    return points.to(dtype), init.to(dtype)


def one_ulp(offset: float, dtype: torch.dtype) -> float:
    """The spacing of ``dtype`` numbers at ``offset`` (the tasks' coordinates lie in [offset, offset + 1))."""
    value = torch.tensor(offset, dtype=dtype)
    return float(torch.nextafter(value, torch.tensor(float("inf"), dtype=dtype)) - value)


def translated(dtype, offset, seed):
    points, init = grid_task(dtype, seed)
    far_points, far_init = points + offset, init + offset
    assert torch.equal(far_points - offset, points) and torch.equal(far_init - offset, init)  # exact translate
    return points, init, far_points, far_init


def assert_translation_invariant(near, far, offset, dtype):
    assert torch.equal(near.assignment_trajectory, far.assignment_trajectory)
    assert torch.equal(near.empty_clusters, far.empty_clusters)
    torch.testing.assert_close(far.centroid_trajectory, near.centroid_trajectory + offset, rtol=0,
                               atol=one_ulp(offset, dtype))
    # the final outputs themselves: the same labels, the centroids translated
    assert torch.equal(near.assignments, far.assignments)
    torch.testing.assert_close(far.centroids, near.centroids + offset, rtol=0, atol=one_ulp(offset, dtype))


@pytest.mark.parametrize("dtype, offset", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("seed", SEEDS)
def test_lloyd_is_translation_invariant(dtype, offset, seed):
    points, init, far_points, far_init = translated(dtype, offset, seed)
    for empty in ("sklearn", "keep"):
        assert_translation_invariant(lloyd(points, init, T, empty=empty), lloyd(far_points, far_init, T, empty=empty),
                                     offset, dtype)


@pytest.mark.parametrize("dtype, offset", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("construction", list(CONSTRUCTIONS))
def test_constructions_are_translation_invariant(construction, dtype, offset, seed):
    points, init, far_points, far_init = translated(dtype, offset, seed)
    model = lloyd_transformer(D, K, n_layers=T, dtype=dtype, **CONSTRUCTIONS[construction])
    near, far = model(points, init), model(far_points, far_init)
    assert_translation_invariant(near, far, offset, dtype)
    # and both are Lloyd (with the constructions' empty-cluster rule)
    reference = lloyd(far_points, far_init, T, empty="nearest_code", codes=model.codes)
    assert torch.equal(far.assignment_trajectory, reference.assignment_trajectory)


@pytest.mark.parametrize("dtype, offset", CASES, ids=CASE_IDS)
def test_variant_references_and_constructions_are_translation_invariant(dtype, offset):
    points, init, far_points, far_init = translated(dtype, offset, seed=5)
    steps = 4
    pairs = {
        "soft": (lambda p, c: soft_kmeans(p, c, steps, beta=10.0),
                 soft_kmeans_transformer(D, K, steps, beta=10.0, dtype=dtype)),
        "trimmed": (lambda p, c: trimmed_kmeans(p, c, steps, rule="normmax", gamma=10.0),
                    trimmed_kmeans_transformer(D, K, steps, gamma=10.0, dtype=dtype)),
        "robust": (lambda p, c: robust_kmeans(p, c, steps, gamma=0.01),
                   robust_kmeans_transformer(D, K, steps, gamma=0.01, dtype=dtype)),
    }
    for name, (reference, model) in pairs.items():
        for run in (reference, model):
            near, far = run(points, init), run(far_points, far_init)
            assert torch.equal(near.assignment_trajectory, far.assignment_trajectory), name
            # soft and robust centres are weighted means: one more rounding than Lloyd's at most per coordinate
            torch.testing.assert_close(far.centroids, near.centroids + offset, rtol=0,
                                       atol=2 * one_ulp(offset, dtype), msg=name)
    # k-medoids picks data points: the picks are identical and the medoids are exactly the translated points
    for run in (lambda p, c: randomized_kmedoids(p, c, steps, generator=3),
                lambda p, c: kmedoids_transformer(D, K, steps, dtype=dtype)(p, c, generator=3)):
        near, far = run(points, init), run(far_points, far_init)
        assert torch.equal(near.assignment_trajectory, far.assignment_trajectory)
        assert torch.equal(far.centroids, near.centroids + offset)


@pytest.mark.parametrize("dtype, offset", CASES, ids=CASE_IDS)
def test_objective_is_translation_invariant(dtype, offset):
    """Phi is a sum of squared differences of the exact translate: computed on the anchored task it is the same
    number; the raw expansion would lose it entirely (||x||^2 = 3e16 at 1e8 against distances of order 1)."""
    points, init, far_points, far_init = translated(dtype, offset, seed=7)
    direct = ((points[:, :, None, :].double() - init[:, None, :, :].double()) ** 2).sum(-1).amin(-1).sum(-1)
    torch.testing.assert_close(kmeans_objective(far_points, far_init).double(), direct, rtol=1e-5, atol=0)
    assert torch.equal(kmeans_objective(far_points, far_init), kmeans_objective(points, init))


def test_float32_points_near_1000_are_assigned_as_at_the_origin():
    """Float32 points uniform in [1000, 1001]^2 (not on a coarse grid) and the same points moved to the origin
    (x - 1000 is exact by Sterbenz's lemma) get identical assignments (47 % differed with the raw expansion)."""
    generator = torch.Generator().manual_seed(0)
    far = 1000 + torch.rand(16, 300, 2, generator=generator, dtype=torch.float32)
    near = far - 1000
    init = far[:, :5].clone()
    for steps in (1, 10):
        assert torch.equal(lloyd(far, init, steps).assignment_trajectory,
                           lloyd(near, init - 1000, steps).assignment_trajectory)
        model = lloyd_transformer(2, 5, n_layers=steps, dtype=torch.float32)
        assert torch.equal(model(far, init).assignment_trajectory, model(near, init - 1000).assignment_trajectory)


# ----- the anchor --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_anchor_subtraction_is_exact_and_zero_near_the_origin(dtype):
    generator = torch.Generator().manual_seed(11)
    unit = torch.rand(6, 50, 3, generator=generator, dtype=torch.float64)
    # tasks in the unit cube: anchor 0 (their coordinates are used as they are)
    assert torch.equal(task_anchor(unit.to(dtype)), torch.zeros(6, 1, 3, dtype=dtype))
    # tasks far away, some tight, some wide, some negative: x - a is exact (checked in float64, where the
    # difference of two float32 numbers this close is exact) and within 3/4 G < 6 R of 0
    scale = torch.tensor([1e-3, 1.0, 30.0, 1e-3, 1.0, 30.0], dtype=torch.float64)[:, None, None]
    offset = torch.tensor([5.0, -7e2, 3e4, -2e3, 1e3, -1.5e3], dtype=torch.float64)[:, None, None]
    points = (unit * scale + offset).to(dtype)
    anchor = task_anchor(points)  # (6, 1, 3)
    centred = points - anchor
    if dtype == torch.float32:
        assert torch.equal(centred.double(), points.double() - anchor.double())
    spread = (points.amax(1) - points.amin(1)).amax(-1).double()  # (6,) R
    assert bool((centred.abs().amax(dim=(1, 2)).double() < 6 * spread).all())
    assert bool((anchor != 0).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_anchor_moves_with_translations_by_multiples_of_its_grid(dtype):
    """G = the power of two in (4R, 8R] (R = 0.75 here: G = 4): translating by multiples of G moves the anchor by
    exactly the translation, so the anchored task is bitwise the same."""
    generator = torch.Generator().manual_seed(3)
    points = (torch.floor(torch.rand(2, 40, 2, generator=generator, dtype=torch.float64) * 3072) / 4096).to(dtype)
    points[:, 0] = 0.0
    points[:, 1] = 0.75  # R = 0.75 exactly in every coordinate
    for shift in (4.0, -12.0, 1000.0, -2048.0):
        moved = points + shift
        assert torch.equal(moved - shift, points)  # an exact translate
        assert torch.equal(task_anchor(moved), task_anchor(points) + shift)
        assert torch.equal(moved - task_anchor(moved), points - task_anchor(points))
