"""The distilled algorithm: fitted to the exact construction it recovers Lloyd; fitted to soft k-means and to targets
written here from the formulas (numpy) it recovers their parameters; the attn_xc kernel is the model's own score."""

import math

import numpy as np
import pytest
import torch
from conftest import make_tasks

from interp import KMeansTransformer
from interp._checks import InvalidInput
from interp.constructions import lloyd_transformer, soft_kmeans_transformer
from interp.instruments.distill import (
    FAMILIES,
    MAX_PARAMETERS,
    DistilledAlgorithm,
    attention_kernel,
    euclidean_kernel,
    fit_distilled,
    score,
)
from interp.model.config import learned_model_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def numpy_update(points, centroids, beta, lam, kappa=0.0, beta_c=1.0):
    """c + lam (soft mean - c) + kappa (softmax-weighted centroid mean - c), written from the formula."""
    x, c = points.numpy(), centroids.numpy()
    logits = -beta * ((x[:, :, None, :] - c[:, None, :, :]) ** 2).sum(-1)  # (b, n, k)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    mean = np.einsum("bnk,bnd->bkd", weights, x) / weights.sum(1)[..., None]
    near = -beta_c * ((c[:, :, None, :] - c[:, None, :, :]) ** 2).sum(-1)  # (b, k, k)
    neighbours = np.exp(near - near.max(-1, keepdims=True))
    neighbours /= neighbours.sum(-1, keepdims=True)
    return torch.from_numpy(c + lam * (mean - c) + kappa * (neighbours @ c - c))


@pytest.mark.parametrize("kernel", ["euclidean", "attn_xc"])
def test_fitted_to_the_construction_it_is_lloyd(kernel):
    model = lloyd_transformer(4, 3, 1)
    points, init = make_tasks(n=128, d=4, k=3, batch=8, seed=1)
    test_points, test_init = make_tasks(n=128, d=4, k=3, batch=8, seed=21)
    chosen = euclidean_kernel() if kernel == "euclidean" else attention_kernel(model)
    for family in ("soft", "damped"):
        fit = fit_distilled(family, chosen, points, init, model(points, init).centroids)
        assert score(fit.algorithm, test_points, test_init, model(test_points, test_init).centroids) >= 0.999
    assert fit.algorithm.parameters["lam"] == pytest.approx(1.0, abs=1e-3)


def test_recovers_soft_kmeans_temperature():
    beta = 7.0
    points, init = make_tasks(n=100, d=4, k=3, batch=6, seed=2)
    targets = soft_kmeans_transformer(4, 3, 1, beta=beta)(points, init).centroids
    fit = fit_distilled("soft", euclidean_kernel(), points, init, targets)
    assert fit.algorithm.parameters["beta"] == pytest.approx(beta, rel=1e-3)
    assert fit.r2_fit == pytest.approx(1.0, abs=1e-8)


def test_recovers_damping_and_repulsion_from_formula_targets():
    points, init = make_tasks(n=100, d=3, k=4, batch=6, seed=3)
    damped = fit_distilled("damped", euclidean_kernel(), points, init, numpy_update(points, init, 3.0, 0.7))
    assert damped.algorithm.parameters["beta"] == pytest.approx(3.0, rel=1e-3)
    assert damped.algorithm.parameters["lam"] == pytest.approx(0.7, rel=1e-3)
    targets = numpy_update(points, init, 3.0, 0.9, kappa=-0.2, beta_c=2.0)
    repulsive = fit_distilled("repulsive", euclidean_kernel(), points, init, targets)
    for name, value in {"beta": 3.0, "lam": 0.9, "kappa": -0.2, "beta_c": 2.0}.items():
        assert repulsive.algorithm.parameters[name] == pytest.approx(value, rel=1e-3), name
    assert repulsive.n_parameters == 4


def test_attention_kernel_is_the_models_assignment_score():
    torch.manual_seed(1)
    model = KMeansTransformer(learned_model_config(3, 4, embedding="none")).double().eval()
    points, init = make_tasks(n=30, d=3, k=4, batch=2, seed=4)
    _, cache = model.run_with_cache(points, init, steps=1, names_filter="blocks.0.attn_xc.hook_scores")
    scores = attention_kernel(model).scores(points, init)  # (b, n, k)
    assert float((scores - cache["blocks.0.attn_xc.hook_scores"]).abs().max()) < 1e-10


def test_families_are_small_and_checked():
    assert all(len(names) <= MAX_PARAMETERS for names in FAMILIES.values())
    points, init = make_tasks(n=40, d=3, k=3, batch=2, seed=5)
    algorithm = DistilledAlgorithm("damped", euclidean_kernel(), {"beta": 2.0, "lam": 0.5})
    trajectory = algorithm.run(points, init, steps=3)
    assert trajectory.shape == (2, 4, 3, 3) and torch.equal(trajectory[:, 0], init)
    assert float((trajectory[:, 1] - numpy_update(points, init, 2.0, 0.5)).abs().max()) < 1e-12
    with pytest.raises(InvalidInput):
        DistilledAlgorithm("damped", euclidean_kernel(), {"beta": 2.0})
    with pytest.raises(InvalidInput):
        fit_distilled("lloyd", euclidean_kernel(), points, init, init)
    assert math.isfinite(score(algorithm, points, init, trajectory[:, 1]))
