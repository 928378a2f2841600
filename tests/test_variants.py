"""Variants: each is the same KMeansTransformer with one circuit part changed, checked against a classical
reference. The trimmed (normmax) and k-medoids references are written from their mathematics and share no code
with the model; they are themselves checked by hand, by brute force over the simplex and by sampling frequencies."""

import ast
import itertools
import math
from pathlib import Path

import pytest
import torch
from conftest import make_tasks

from interp import algorithms as A
from interp.model import constructions as C
from interp.primitives import normmax_limit
from interp.tasks import init_centroids
from interp.training.train import TrainConfig, train


@pytest.fixture(scope="module")
def tasks():
    points, init = make_tasks(300, 4, 5, batch=3, seed=1)
    return points, init


def max_error(out, reference):
    return (out.centroid_trajectory - reference.centroid_trajectory).abs().max().item()


@pytest.mark.parametrize("beta", [1.0, 20.0, 300.0])
def test_soft_kmeans_matches_mackay(tasks, beta):
    points, init = tasks
    out = C.soft_kmeans_transformer(4, 5, 10, beta=beta)(points, init)
    assert max_error(out, A.soft_kmeans(points, init, 10, beta=beta)) < 1e-10


def test_spherical_kmeans_matches_dhillon_modha(tasks):
    points, _ = tasks
    unit = points - 0.5
    unit = unit / unit.norm(dim=-1, keepdim=True)
    init = init_centroids(unit, 5, "random", 3)
    out = C.spherical_kmeans_transformer(4, 5, 10)(unit, init)
    reference = A.spherical_kmeans(unit, init, 10)
    assert not reference.any_empty
    assert max_error(out, reference) < 1e-10
    torch.testing.assert_close(out.centroids.norm(dim=-1), torch.ones(3, 5, dtype=torch.float64))


@pytest.mark.parametrize("gamma", [3.0, 10.0, 50.0])
def test_trimmed_normmax_limit_is_exact(tasks, gamma):
    points, init = tasks
    out = C.trimmed_kmeans_transformer(4, 5, 10, gamma=gamma)(points, init)
    assert max_error(out, A.trimmed_kmeans(points, init, 10, rule="normmax", gamma=gamma)) < 1e-10


def test_trimmed_finite_alpha_approaches_the_limit(tasks):
    """Finite alpha (entmax normmax_bisect) is a softer trimming; measured max centre error vs the alpha = inf
    rule over 10 steps on these tasks: alpha 2: 0.438, 16: 0.068, 64: 0.0384, 256: 0.0381 (the plateau is one
    cluster whose top-m boundary differs; bounds asserted below, 1.5x the measured values)."""
    points, init = tasks
    reference = A.trimmed_kmeans(points, init, 10, rule="normmax", gamma=10.0)
    errors = {alpha: max_error(C.trimmed_kmeans_transformer(4, 5, 10, gamma=10.0, alpha=alpha)(points, init), reference)
              for alpha in (2.0, 16.0, 64.0, 256.0)}
    assert errors[2.0] > errors[16.0] > errors[64.0] >= errors[256.0]
    assert errors[2.0] < 0.66 and errors[16.0] < 0.11 and errors[64.0] < 0.06 and errors[256.0] < 0.06, errors


def test_trimming_rules_drop_an_outlier():
    """Twenty points near (0, 0) and one at (10, 10) in one cluster: all rules keep the outlier out of the centre."""
    gen = torch.Generator().manual_seed(0)
    inliers = 0.01 * torch.randn(20, 2, generator=gen, dtype=torch.float64)
    points = torch.cat([inliers, torch.tensor([[10.0, 10.0]], dtype=torch.float64)])[None]  # (1, 21, 2)
    init = torch.tensor([[[0.0, 0.0]]], dtype=torch.float64)
    plain = A.lloyd(points, init, 1).centroids[0, 0]
    assert plain.norm() > 0.4  # the mean is dragged towards the outlier
    for kwargs in (dict(rule="quantile"), dict(rule="global", trim=0.05), dict(rule="normmax", gamma=1.0)):
        centre = A.trimmed_kmeans(points, init, 1, **kwargs).centroids[0, 0]
        assert centre.norm() < 0.02, kwargs
    torch.testing.assert_close(A.trimmed_kmeans(points, init, 1, rule="global", trim=0.05).centroids[0, 0],
                               inliers.mean(0))


@pytest.mark.parametrize("gamma", [0.01, 5.0, 200.0])
def test_robust_kmeans_matches_the_authors_rule(tasks, gamma):
    points, init = tasks
    out = C.robust_kmeans_transformer(4, 5, 10, gamma=gamma)(points, init)
    assert max_error(out, A.robust_kmeans(points, init, 10, gamma=gamma)) < 1e-10


def test_kmedoids_centres_are_data_points_and_match_the_reference(tasks):
    points, init = tasks
    model = C.kmedoids_transformer(4, 5, 10)
    for seed in (0, 1, 2):
        out = model(points, init, generator=seed)
        reference = A.randomized_kmedoids(points, init, 10, generator=seed)
        assert max_error(out, reference) < 1e-12
        for step in range(1, 11):
            centres = out.centroid_trajectory[:, step]  # (b, k, d)
            nearest = ((centres[:, :, None, :] - points[:, None, :, :]) ** 2).sum(-1).amin(-1)  # (b, k)
            assert nearest.max() < 1e-24
    again = model(points, init, generator=0)
    assert torch.equal(again.centroids, model(points, init, generator=0).centroids)
    assert not torch.equal(again.centroids, model(points, init, generator=1).centroids)


def test_kmedoids_picks_members_uniformly():
    """One cluster of 4 points: over many seeds each member is picked about a quarter of the time."""
    points = torch.tensor([[[0.0], [0.1], [0.2], [0.3], [5.0]]], dtype=torch.float64).expand(2000, 5, 1).contiguous()
    init = torch.tensor([[[0.15], [5.0]]], dtype=torch.float64).expand(2000, 2, 1).contiguous()
    out = C.kmedoids_transformer(1, 2, 1)(points, init, generator=7)
    picks = out.centroids[:, 0, 0]
    for value in (0.0, 0.1, 0.2, 0.3):
        share = ((picks - value).abs() < 1e-12).double().mean().item()
        assert abs(share - 0.25) < 0.04, (value, share)


@pytest.mark.slow
@pytest.mark.parametrize("normaliser", ["sparsemax", "normmax", "gumbel"])
def test_learnable_variants_train(tmp_path, normaliser):
    meta = train(TrainConfig(d=4, k=3, n=64, steps=80, batch=16, val_tasks=32, eval_every=40, normaliser=normaliser),
                 tmp_path / f"{normaliser}.safetensors", progress=False)
    curve = [h["relative_objective"] for h in meta["history"]]
    assert all(math.isfinite(v) for v in curve)
    assert curve[-1] < 0.6 * curve[0], curve


# ----- the references themselves --------------------------------------------------------------------------------
def normmax_objective(z, p):
    """<z, p> - max_i p_i, the alpha -> inf normmax objective."""
    return float((z * p).sum() - p.max())


@pytest.mark.parametrize("z,expected", [
    # m = 1: (0.3 - 1)/1 = -0.7; m = 2: (0.5 - 1)/2 = -0.25; m = 3: (-4.5 - 1)/3 = -1.83 -> m = 2
    ([0.3, 0.2, -5.0], [0.5, 0.5, 0.0]),
    ([-5.0, 0.2, 0.3], [0.0, 0.5, 0.5]),  # the same scores in another order
    # m = 1: 0; m = 2: 0.45; m = 3: (2.75 - 1)/3 = 0.583; m = 4: (1.75 - 1)/4 = 0.1875 -> m = 3
    ([1.0, 0.9, 0.85, -1.0], [1 / 3, 1 / 3, 1 / 3, 0.0]),
    ([3.0, 0.0, 0.0], [1.0, 0.0, 0.0]),  # m = 1: 2; m = 2: 1; m = 3: 2/3 -> the hard max
    ([0.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]),  # (0 - 1)/m grows with m -> uniform
])
def test_normmax_limit_hand_computed(z, expected):
    weights = A.normmax_limit_reference(torch.tensor(z, dtype=torch.float64))
    torch.testing.assert_close(weights, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-15)


def simplex_grid(size: int, steps: int) -> torch.Tensor:
    """All p on the simplex in R^size with coordinates in {0, 1/steps, ..., 1}, (count, size)."""
    rows = [c for c in itertools.product(range(steps + 1), repeat=size - 1) if sum(c) <= steps]
    return torch.tensor([[*c, steps - sum(c)] for c in rows], dtype=torch.float64) / steps


def test_normmax_limit_is_the_maximiser_over_a_simplex_grid():
    """Brute force: the grid contains every 'uniform on m entries' point (steps divisible by 1..4), so its best
    point is the true maximiser whatever the derivation says; the reference must find the same point and value."""
    gen = torch.Generator().manual_seed(0)
    grid = simplex_grid(4, 12)  # (455, 4)
    for _ in range(40):
        z = torch.randn(4, generator=gen, dtype=torch.float64) * 0.6
        values = grid @ z - grid.amax(dim=1)  # (455,)
        best = grid[values.argmax()]
        weights = A.normmax_limit_reference(z)
        assert normmax_objective(z, weights) == pytest.approx(values.max().item(), abs=1e-12)
        torch.testing.assert_close(weights, best, rtol=0, atol=1e-12)
    z = torch.tensor([0.3, 0.2, -5.0], dtype=torch.float64)
    grid = simplex_grid(3, 60)
    values = grid @ z - grid.amax(dim=1)
    assert values.max().item() == pytest.approx(-0.25, abs=1e-12)
    torch.testing.assert_close(grid[values.argmax()], torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64))


def test_the_models_normmax_limit_equals_the_reference_on_random_scores():
    gen = torch.Generator().manual_seed(1)
    spread = torch.logspace(-1, 1, 300, dtype=torch.float64)[:, None]  # (300, 1): from near-ties to one clear max
    logits = torch.randn(300, 9, generator=gen, dtype=torch.float64) * spread  # (300, 9)
    expected = torch.stack([A.normmax_limit_reference(row) for row in logits])  # (300, 9)
    torch.testing.assert_close(normmax_limit(logits, dim=-1), expected, rtol=0, atol=1e-15)
    assert len({int((row > 0).sum()) for row in expected}) >= 4  # several support sizes exercised


def test_trimmed_normmax_step_by_hand():
    """One cluster, 1-D points 0, sqrt(0.1), sqrt(5.3), centre 0, gamma 1: z = (0, -0.1, -5.3) = (0.3, 0.2, -5) - 0.3,
    so m = 2 (as above) and the new centre is the mean of the two nearest points, sqrt(0.1) / 2."""
    points = torch.tensor([[[0.0], [math.sqrt(0.1)], [math.sqrt(5.3)]]], dtype=torch.float64)  # (1, 3, 1)
    init = torch.zeros(1, 1, 1, dtype=torch.float64)
    centre = A.trimmed_kmeans(points, init, 1, rule="normmax", gamma=1.0).centroids
    assert centre.item() == pytest.approx(math.sqrt(0.1) / 2, abs=1e-15)


def test_gumbel_max_frequencies_are_the_softmax_probabilities():
    probabilities = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.0], dtype=torch.float64)
    draws = 200_000
    logits = probabilities.log().expand(draws, -1)  # (draws, 5); log 0 = -inf: never picked
    picks = A.gumbel_max(logits, torch.Generator().manual_seed(2))  # (draws,)
    frequencies = torch.bincount(picks, minlength=5).double() / draws
    standard_error = (probabilities * (1 - probabilities) / draws).sqrt()
    assert frequencies[4] == 0
    assert ((frequencies - probabilities).abs() <= 5 * standard_error).all(), (frequencies, probabilities)


def test_kmedoids_reference_draws_members_uniformly_and_any_point_for_an_empty_cluster():
    """Cluster 0 has five members (0 .. 0.4), cluster 1 one point (5), cluster 2 none (centre 100): over 6000 tasks
    cluster 0 picks each member with frequency 1/5 and cluster 2 each point with 1/6, within 5 binomial SEs."""
    tasks = 6000
    values = [0.0, 0.1, 0.2, 0.3, 0.4, 5.0]
    points = torch.tensor(values, dtype=torch.float64)[None, :, None].expand(tasks, -1, -1).contiguous()  # (b, 6, 1)
    init = torch.tensor([0.2, 5.0, 100.0], dtype=torch.float64)[None, :, None].expand(tasks, -1, -1).contiguous()
    out = A.randomized_kmedoids(points, init, 1, generator=3)
    assert out.empty_clusters[:, 0].tolist() == [[False, False, True]] * tasks
    for cluster, candidates in ((0, values[:5]), (2, values)):
        picks = out.centroids[:, cluster, 0]  # (b,)
        share = 1 / len(candidates)
        standard_error = math.sqrt(share * (1 - share) / tasks)
        counted = 0
        for value in candidates:
            frequency = ((picks - value).abs() < 1e-12).double().mean().item()
            counted += frequency
            assert abs(frequency - share) <= 5 * standard_error, (cluster, value, frequency)
        assert counted == pytest.approx(1.0)  # never anything else
    assert (out.centroids[:, 1, 0] == 5.0).all()  # a one-member cluster keeps its point


def test_kmedoids_reference_draws_one_uniform_tensor_per_step():
    """The stream contract that makes the comparison with the transformer exact: one rand((b, k, n)) per step."""
    points, init = make_tasks(50, 2, 3, batch=2, seed=4)
    generator, twin = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    A.randomized_kmedoids(points, init, 4, generator=generator)
    for _ in range(4):
        torch.rand((2, 3, 50), generator=twin, dtype=torch.float64)
    assert torch.equal(generator.get_state(), twin.get_state())


def test_algorithms_import_nothing_from_the_model():
    """The references must not share code with what they check: no interp.model import, and not the model's
    normmax_limit / gumbel_noise primitives."""
    tree = ast.parse((Path(A.__file__)).read_text())
    imported = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
    assert not [name for name in imported if name.startswith("interp.model")], imported
    assert not [name for name in imported if name.endswith(("normmax_limit", "gumbel_noise"))], imported
