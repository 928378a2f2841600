"""Smoothed losses bound the k-means objective from above and equal it as tau -> 0 (paper 2, Eq. 24-28)."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interp.algorithms import kmeans_objective
from interp.training.losses import smoothed_loss, smoothed_objective


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(6, 40), d=st.integers(1, 5), k=st.integers(1, 6),
       tau=st.floats(1e-3, 10.0), kind=st.sampled_from(["softmin", "sparsemax"]), spread=st.floats(0.01, 100.0))
def test_smoothed_objective_upper_bounds_kmeans(seed, n, d, k, tau, kind, spread):
    gen = torch.Generator().manual_seed(seed)
    points = spread * torch.rand(3, n, d, generator=gen, dtype=torch.float64)
    centroids = spread * torch.randn(3, k, d, generator=gen, dtype=torch.float64)  # any centroids, not data points
    smooth = smoothed_objective(points, centroids, tau, kind)
    true = kmeans_objective(points, centroids)
    assert (smooth >= true * (1 - 1e-12) - 1e-12).all()


def test_equals_the_objective_as_tau_goes_to_zero():
    gen = torch.Generator().manual_seed(0)
    points = torch.rand(4, 50, 3, generator=gen, dtype=torch.float64)
    centroids = torch.rand(4, 5, 3, generator=gen, dtype=torch.float64)
    true = kmeans_objective(points, centroids)
    for kind in ("softmin", "sparsemax"):
        taus = (1.0, 1e-2, 1e-4, 1e-8)
        gaps = [(smoothed_objective(points, centroids, tau, kind) - true).max().item() for tau in taus]
        assert gaps[0] > gaps[1] > gaps[2] >= 0 and gaps[3] < 1e-10, (kind, gaps)
    # sparsemax is exact once tau is below the margin; softmin only in the limit (Prop. H.1)
    assert (smoothed_objective(points, centroids, 1e-8, "sparsemax") - true).abs().max() < 1e-12


def test_hand_computed_softmin_weights():
    """One point at 0, centroids at 1 and 2 (r = 1, 4), tau = 1: w = softmax(-1, -4)."""
    points = torch.zeros(1, 1, 1, dtype=torch.float64)
    centroids = torch.tensor([[[1.0], [2.0]]], dtype=torch.float64)
    w1 = 1 / (1 + torch.exp(torch.tensor(-3.0, dtype=torch.float64)))
    expected = w1 * 1 + (1 - w1) * 4
    torch.testing.assert_close(smoothed_loss(points, centroids, 1.0), expected)
    # sparsemax(-1, -4): the gap 3 exceeds 1, so all weight on the nearest: exactly 1
    assert smoothed_loss(points, centroids, 1.0, "sparsemax").item() == 1.0
