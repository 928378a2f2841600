"""Interventions (interp.instruments.interventions) against independent references.

The references are written here in numpy from the mathematics: soft k-means (MacKay) at an inverse temperature beta,
r_ij = softmax_j(-beta ||x_i - c_j||^2), c_j = sum_i r_ij x_i / sum_i r_ij, which the soft construction
(docs/variants.md) computes with attn_xc at gamma = beta and attn_cx as normalised linear attention.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from interp._checks import InvalidInput
from interp.constructions import lloyd_transformer, soft_kmeans_transformer
from interp.instruments.interventions import compete, compete_pattern, rescaled_run, retemper, robust_scale
from interp.model import KMeansTransformer
from interp.model.config import learned_model_config

D, K, N, BETA = 3, 4, 40, 5.0


def _task(batch: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """points (b, n, d) in the unit cube and the first k points as centroids (b, k, d), float64."""
    generator = torch.Generator().manual_seed(seed)
    points = torch.rand(batch, N, D, generator=generator, dtype=torch.float64)
    return points, points[:, :K].clone()


def _responsibilities(points: np.ndarray, centroids: np.ndarray, beta: float) -> np.ndarray:
    """r (n, k): softmax over centroids of -beta ||x_i - c_j||^2, one task."""
    distances = ((points[:, None, :] - centroids[None, :, :]) ** 2).sum(-1)  # (n, k)
    logits = -beta * distances
    logits -= logits.max(axis=1, keepdims=True)
    weights = np.exp(logits)
    return weights / weights.sum(axis=1, keepdims=True)


def _soft_kmeans(points: np.ndarray, centroids: np.ndarray, betas: list[float]) -> np.ndarray:
    """Soft k-means of one task, one step per entry of ``betas``; the final centroids (k, d)."""
    for beta in betas:
        r = _responsibilities(points, centroids, beta)  # (n, k)
        centroids = (r.T @ points) / r.sum(axis=0)[:, None]
    return centroids


def test_retemper_soft_construction_is_the_construction_at_gamma_times_factor():
    points, centroids = _task()
    model = soft_kmeans_transformer(D, K, beta=BETA)
    hooked = model.run_with_hooks(points, centroids, steps=3, fwd_hooks=retemper(model, "attn_xc", 2.5)).centroids
    rebuilt = soft_kmeans_transformer(D, K, beta=BETA * 2.5)(points, centroids, steps=3).centroids
    torch.testing.assert_close(hooked, rebuilt, rtol=0, atol=1e-12)
    for task in range(points.shape[0]):
        expected = _soft_kmeans(points[task].numpy(), centroids[task].numpy(), [12.5] * 3)
        np.testing.assert_allclose(hooked[task].numpy(), expected, rtol=0, atol=1e-12)


def test_retemper_per_task_factors_and_selected_steps():
    points, centroids = _task()
    model = soft_kmeans_transformer(D, K, beta=BETA)
    factors = torch.tensor([1.0, 2.5, 0.4], dtype=torch.float64)
    per_task = model.run_with_hooks(points, centroids, steps=2, fwd_hooks=retemper(model, "attn_xc", factors))
    second_only = model.run_with_hooks(points, centroids, steps=2, fwd_hooks=retemper(model, "attn_xc", 3.0, [1]))
    for task, factor in enumerate([1.0, 2.5, 0.4]):
        expected = _soft_kmeans(points[task].numpy(), centroids[task].numpy(), [BETA * factor] * 2)
        np.testing.assert_allclose(per_task.centroids[task].numpy(), expected, rtol=0, atol=1e-12)
        expected = _soft_kmeans(points[task].numpy(), centroids[task].numpy(), [BETA, BETA * 3.0])
        np.testing.assert_allclose(second_only.centroids[task].numpy(), expected, rtol=0, atol=1e-12)


def test_hooks_off_leave_the_output_identical():
    torch.manual_seed(3)
    model = KMeansTransformer(learned_model_config(D, K)).double().eval()
    points, centroids = _task(2, seed=1)
    before = model(points, centroids, steps=3).centroid_trajectory
    plain_hooks = model.run_with_hooks(points, centroids, steps=3, fwd_hooks=[]).centroid_trajectory
    unit = model.run_with_hooks(points, centroids, steps=3, fwd_hooks=retemper(model, "attn_xc", 1.0))
    sharpened = model.run_with_hooks(points, centroids, steps=3, fwd_hooks=retemper(model, "attn_xc", 4.0)
                                     + compete(model)).centroid_trajectory
    after = model(points, centroids, steps=3).centroid_trajectory
    assert torch.equal(before, plain_hooks)
    assert torch.equal(before, after)  # the hooked runs left no hook behind
    assert all(not point.fwd_hooks for point in model.hook_dict.values())
    torch.testing.assert_close(unit.centroid_trajectory, before, rtol=0, atol=1e-12)  # literal path, same numbers
    assert (sharpened - before).abs().max() > 1e-3  # the intervention does act


def test_compete_pattern_by_hand():
    pattern = torch.tensor([[[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]], dtype=torch.float64)  # (1, 2 queries, 3 keys)
    rows = [[Fraction(1, 2), Fraction(1, 2), Fraction(0)], [Fraction(1, 5), Fraction(3, 10), Fraction(1, 2)]]
    columns = [rows[0][j] + rows[1][j] for j in range(3)]  # 7/10, 4/5, 1/2
    shared = [[row[j] / columns[j] for j in range(3)] for row in rows]  # [[5/7, 5/8, 0], [2/7, 3/8, 1]]
    expected = [[value / sum(row) for value in row] for row in shared]
    np.testing.assert_allclose(compete_pattern(pattern)[0].numpy(), np.array(expected, dtype=float), atol=1e-15)
    doubly_stochastic = torch.full((1, 2, 2), 0.5, dtype=torch.float64)
    assert torch.equal(compete_pattern(doubly_stochastic, iterations=3), doubly_stochastic)
    with pytest.raises(InvalidInput, match="iterations"):
        compete_pattern(pattern, iterations=0)


def test_compete_on_the_soft_construction_is_the_doubly_normalised_mean():
    points, centroids = _task()
    model = soft_kmeans_transformer(D, K, beta=BETA)
    out = model.run_with_hooks(points, centroids, steps=1, fwd_hooks=compete(model, "attn_cx")).centroids
    for task in range(points.shape[0]):
        x, c = points[task].numpy(), centroids[task].numpy()
        r = _responsibilities(x, c, BETA)  # (n, k)
        pattern = (r / r.sum(axis=0)).T  # (k, n): attn_cx's linear attention, each centroid's members' weights
        pattern = pattern / pattern.sum(axis=0, keepdims=True)  # each point shared out among the centroids
        pattern = pattern / pattern.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(out[task].numpy(), pattern @ x, rtol=0, atol=1e-12)


def test_rescaled_run_is_exact_for_lloyd_and_retempers_soft_kmeans_by_scale_squared():
    points, centroids = _task()
    centre = torch.tensor([[[0.2, -0.1, 0.4]], [[0.0, 0.0, 0.0]], [[1.0, 0.5, 0.3]]], dtype=torch.float64)
    scale = torch.tensor([0.5, 2.0, 3.0], dtype=torch.float64)
    lloyd_model = lloyd_transformer(D, K, 3)
    torch.testing.assert_close(rescaled_run(lloyd_model, points, centroids, centre, scale, 3),
                               lloyd_model(points, centroids, steps=3).centroid_trajectory, rtol=0, atol=1e-12)
    soft = soft_kmeans_transformer(D, K, beta=BETA)
    moved = rescaled_run(soft, points, centroids, centre, scale, 2)[:, -1]
    for task, factor in enumerate([0.5, 2.0, 3.0]):
        expected = _soft_kmeans(points[task].numpy(), centroids[task].numpy(), [BETA * factor ** 2] * 2)
        np.testing.assert_allclose(moved[task].numpy(), expected, rtol=0, atol=1e-12)


def test_robust_scale_matches_numpy_quantiles():
    points, _ = _task(2, seed=5)
    centre, scale = robust_scale(points, 0.3)
    for task in range(2):
        x = points[task].numpy()
        low, median, high = np.quantile(x, [0.25, 0.5, 0.75], axis=0)
        np.testing.assert_allclose(centre[task, 0].numpy(), median, atol=1e-15)
        np.testing.assert_allclose(float(scale[task]), 0.3 / np.median(high - low), rtol=1e-14)


@pytest.mark.parametrize("call, argument", [
    (lambda m: retemper(m, "attn_zz", 2.0), "attention"),
    (lambda m: retemper(m, "attn_xc", 0.0), "factor"),
    (lambda m: retemper(m, "attn_xc", float("nan")), "factor"),
    (lambda m: retemper(m, "attn_xc", float("inf")), "factor"),
    (lambda m: retemper(m, "attn_xc", True), "factor"),
    (lambda m: retemper(m, "attn_xc", torch.tensor([1.0, -1.0])), "factor"),
    (lambda m: retemper(m, "attn_cx", 2.0), "attention"),  # linear attention: a factor cancels
    (lambda m: retemper(m, "attn_xx", 2.0), "attention"),  # identity self-attention
    (lambda m: retemper(m, "attn_xc", 2.0, steps=[]), "steps"),
    (lambda m: retemper(m, "attn_xc", 2.0, steps=[-1]), "steps"),
    (lambda m: compete(m, "attn_xc", iterations=0), "iterations"),
    (lambda m: compete(m, "attn_cc"), "attention"),
])
def test_bad_arguments_name_the_argument(call, argument):
    model = soft_kmeans_transformer(D, K, beta=BETA)
    with pytest.raises(InvalidInput, match=argument):
        call(model)


def test_bad_rescaling_and_task_count_name_the_argument():
    points, centroids = _task()
    model = soft_kmeans_transformer(D, K, beta=BETA)
    centre = torch.zeros(3, 1, D, dtype=torch.float64)
    with pytest.raises(InvalidInput, match="scale"):
        rescaled_run(model, points, centroids, centre, torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64))
    with pytest.raises(InvalidInput, match="centre"):
        rescaled_run(model, points, centroids, centre[:2], torch.ones(3, dtype=torch.float64))
    with pytest.raises(InvalidInput, match="target_spread"):
        robust_scale(points, -1.0)
    with pytest.raises(InvalidInput, match="factor"):
        model.run_with_hooks(points, centroids, steps=1,
                             fwd_hooks=retemper(model, "attn_xc", torch.ones(2, dtype=torch.float64)))
