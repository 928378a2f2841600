"""The relative objective that decides most verdicts, against a computation that imports nothing it checks.

``interp.training.train.relative_objective`` is the mean over validation tasks of Phi(model, 1 step) / Phi(Lloyd,
1 iteration) (paper 2, Eq. 20), with Phi(C) = sum_i min_j ||x_i - c_j||^2. Here the same number is recomputed in
NumPy float64 from the validation points, the initial centroids and the model's one-step centroids: the objective
by brute-force distances and one Lloyd iteration by nearest-centre labels and means, written out below. The exact
construction performs one Lloyd iteration, so its relative objective is 1 to rounding; a model that returns its
input centroids unchanged scores Phi(init) / Phi(Lloyd), which one Lloyd iteration can only lower (ratio >= 1).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp.model import KMeansTransformer
from interp.model.config import learned_model_config
from interp.model.constructions import lloyd_transformer
from interp.training.config import TrainConfig
from interp.training.state import make_validation_set
from interp.training.train import relative_objective

CONFIG = TrainConfig(d=3, k=4, n=40, val_tasks=12)


def numpy_objective(points: np.ndarray, centroids: np.ndarray) -> float:
    """sum_i min_j ||x_i - c_j||^2 for one task: points (n, d), centroids (k, d)."""
    differences = points[:, None, :] - centroids[None, :, :]  # (n, k, d)
    return float((differences ** 2).sum(axis=2).min(axis=1).sum())


def numpy_lloyd_step(points: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """One Lloyd iteration for one task: nearest centre (first on ties), then each centre the mean of its points;
    a centre without points stays (none occurs here: every initial centre is one of the points)."""
    distances = ((points[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)  # (n, k)
    labels = distances.argmin(axis=1)  # (n,)
    new = centroids.copy()
    for j in range(len(centroids)):
        members = points[labels == j]  # (m, d)
        if len(members):
            new[j] = members.mean(axis=0)
    return new


def numpy_relative(points: np.ndarray, init: np.ndarray, stepped: np.ndarray) -> float:
    """Mean over tasks of Phi(stepped) / Phi(one Lloyd iteration from init)."""
    ratios = [numpy_objective(x, c) / numpy_objective(x, numpy_lloyd_step(x, c0))
              for x, c0, c in zip(points, init, stepped)]
    return float(np.mean(ratios))


@pytest.fixture(scope="module")
def validation():
    return make_validation_set(CONFIG, torch.Generator().manual_seed(7))


def _as_numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().double().numpy()


def test_every_initial_centre_is_a_point_so_no_cluster_empties(validation):
    points, init = _as_numpy(validation.points), _as_numpy(validation.init)  # (V, n, d), (V, k, d)
    for x, c in zip(points, init):
        assert all(np.any(np.all(x == centre, axis=1)) for centre in c)


def test_relative_objective_of_a_learned_model_equals_the_numpy_computation(validation):
    torch.manual_seed(3)
    model = KMeansTransformer(learned_model_config(CONFIG.d, CONFIG.k, "onehot")).eval()
    with torch.no_grad():
        stepped = model(validation.points, validation.init, steps=1).centroids  # (V, k, d)
    expected = numpy_relative(_as_numpy(validation.points), _as_numpy(validation.init), _as_numpy(stepped))
    measured = relative_objective(model, validation, chunk=5)  # chunks of 5, 5, 2: the mean is over all tasks
    assert measured == pytest.approx(expected, rel=1e-5)
    assert abs(expected - 1) > 0.05  # an untrained model is far from Lloyd: the comparison is not 1 == 1


def test_the_exact_construction_scores_one(validation):
    construction = lloyd_transformer(CONFIG.d, CONFIG.k, n_layers=1, embedding="onehot", dtype=torch.float32)
    assert relative_objective(construction, validation) == pytest.approx(1.0, abs=1e-5)


def test_a_model_that_does_not_move_scores_phi_init_over_phi_lloyd(validation):
    """Centroids returned unchanged: the ratio is Phi(init) / Phi(Lloyd) by the NumPy computation, and >= 1."""
    class Frozen(torch.nn.Module):
        training = False

        def forward(self, points, centroids, steps=1, generator=None, slot_order=None):
            return type("Out", (), {"centroids": centroids})()

    points, init = _as_numpy(validation.points), _as_numpy(validation.init)
    expected = numpy_relative(points, init, init)
    assert expected > 1.0
    assert relative_objective(Frozen(), validation) == pytest.approx(expected, rel=1e-5)
