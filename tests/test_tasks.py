"""Task distributions and initialisations (paper 2, App. D, App. C; docs/learned_model.md, docs/evaluation.md)."""

import math

import pytest
import torch

from interp.tasks import FAMILIES, TaskConfig, _standard_noise, init_centroids, sample_tasks


@pytest.mark.parametrize("family", FAMILIES)
def test_tasks_are_seeded_scaled_and_shaped(family):
    config = TaskConfig(n=64, d=3, k=4, family=family)
    first = sample_tasks(config, 5, 123)
    again = sample_tasks(config, 5, 123)
    other = sample_tasks(config, 5, 124)
    assert first.points.shape == (5, 64, 3) and first.labels.shape == (5, 64)
    assert torch.equal(first.points, again.points) and torch.equal(first.labels, again.labels)
    assert not torch.equal(first.points, other.points)
    torch.testing.assert_close(first.points.amin(dim=1), torch.zeros(5, 3))
    torch.testing.assert_close(first.points.amax(dim=1), torch.ones(5, 3))
    assert int(first.labels.max()) < 4


def test_standard_noise_moments():
    """Inverse-CDF samplers have the textbook moments: normal var 1, laplace var 2, gumbel mean Euler's
    gamma and var pi^2/6, cauchy quartiles -1 and +1."""
    gen = torch.Generator().manual_seed(0)
    size = (400_000,)
    normal = _standard_noise("normal", size, gen, torch.float64)
    laplace = _standard_noise("laplace", size, gen, torch.float64)
    gumbel = _standard_noise("gumbel", size, gen, torch.float64)
    cauchy = _standard_noise("cauchy", size, gen, torch.float64)
    assert abs(normal.var().item() - 1) < 0.01
    assert abs(laplace.var().item() - 2) < 0.03
    assert abs(gumbel.mean().item() - 0.5772156649) < 0.01
    assert abs(gumbel.var().item() - math.pi**2 / 6) < 0.02
    quartiles = torch.quantile(cauchy[:100_000], torch.tensor([0.25, 0.75], dtype=torch.float64))
    torch.testing.assert_close(quartiles, torch.tensor([-1.0, 1.0], dtype=torch.float64), atol=0.03, rtol=0)


def test_weights_and_anisotropy():
    equal = sample_tasks(TaskConfig(n=4000, d=2, k=4), 1, 5).labels
    freq = torch.bincount(equal[0], minlength=4) / 4000
    assert (freq - 0.25).abs().max() < 0.03
    unequal = sample_tasks(TaskConfig(n=4000, d=2, k=4, equal_weights=False), 8, 5).labels
    spread = [torch.bincount(row, minlength=4).float() for row in unequal]
    assert max(float(s.max() / s.clamp_min(1).min()) for s in spread) > 2
    iso = sample_tasks(TaskConfig(n=64, d=2, k=3), 2, 1).points
    aniso = sample_tasks(TaskConfig(n=64, d=2, k=3, anisotropic=True), 2, 1).points
    assert not torch.equal(iso, aniso)


def test_random_and_first_init_are_data_points():
    points = sample_tasks(TaskConfig(n=50, d=2, k=5), 3, 0).points
    random = init_centroids(points, 5, "random", 1)
    assert torch.equal(init_centroids(points, 5, "first"), points[:, :5])
    for b in range(3):
        matches = (random[b][:, None, :] == points[b][None]).all(-1)  # (k, n)
        assert (matches.sum(1) == 1).all() and matches.any(0).sum() == 5  # k distinct data points
    assert torch.equal(random, init_centroids(points, 5, "random", 1))


def test_gonzalez_is_farthest_first():
    points = sample_tasks(TaskConfig(n=80, d=3, k=6), 2, 2).points
    centres = init_centroids(points, 6, "gonzalez", 3)
    for b in range(2):
        for j in range(1, 6):
            min_sq = torch.cdist(points[b], centres[b, :j]).amin(1) ** 2
            chosen = torch.cdist(centres[b, j : j + 1], centres[b, :j]).amin() ** 2
            assert torch.isclose(chosen, min_sq.max())


def test_kmeans_plus_plus_samples_proportional_to_squared_distance():
    """Points 0, 1, 3 on a line: given first centre 0, the second is 1 w.p. 1/10 and 3 w.p. 9/10."""
    batch = 30_000
    points = torch.tensor([0.0, 1.0, 3.0], dtype=torch.float64).reshape(1, 3, 1).expand(batch, 3, 1).contiguous()
    centres = init_centroids(points, 2, "kmeans++", 0)[..., 0]  # (batch, 2)
    first_zero = centres[:, 0] == 0
    assert abs(first_zero.double().mean().item() - 1 / 3) < 0.02
    second_is_one = (centres[first_zero, 1] == 1).double().mean().item()
    assert abs(second_is_one - 0.1) < 0.015


def test_laplace_noise_stays_finite_at_the_extreme_float32_draw():
    # torch.rand can return exactly 0 (probability 2^-24 per float32 draw); clamped to 1e-12 it used to give
    # log1p(-1) = -inf, and then NaN points after min-max scaling (found by the family study)
    from interp.tasks import laplace_icdf

    uniform = torch.tensor([0.0, 0.25, 0.5, 0.75, 1 - 2**-24], dtype=torch.float32).clamp(1e-12, 1 - 1e-12)
    noise = laplace_icdf(uniform)
    assert torch.isfinite(noise).all()
    assert noise[0].item() == pytest.approx(math.log(2e-12), rel=1e-3)  # -26.9: the float64 value
    assert noise[1:4].tolist() == pytest.approx([-math.log(2), 0.0, math.log(2)])  # textbook quantiles
