"""The distilled algorithm: fitted to the exact construction it recovers Lloyd; fitted to soft k-means and to targets
written here from the formulas (numpy) it recovers their parameters; the attn_xc kernel is the model's own score and,
with the offsets read from the key code columns, its whole attn_xc score; every learned number is counted."""

import math

import numpy as np
import pytest
import torch
from conftest import make_tasks

from interp import KMeansTransformer
from interp._checks import InvalidInput
from interp.constructions import lloyd_transformer, soft_kmeans_transformer
from interp.instruments.distill import (
    ALL_FAMILIES,
    FAMILIES,
    MAX_PARAMETERS,
    SLOT_FAMILIES,
    DistilledAlgorithm,
    SlotOffsets,
    attention_kernel,
    euclidean_kernel,
    fit_distilled,
    model_slot_offsets,
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


def numpy_slot_update(points, centroids, beta, lam, rho, offsets, alpha=None):
    """The offset family (alpha None) or the attend family on the Euclidean kernel, written from the formulas."""
    x, c, delta = points.numpy(), centroids.numpy(), offsets.numpy()
    keys = rho * c + (1 - rho) * 0.5 + delta[None]  # (b, k, d)
    logits = -beta * ((x[:, :, None, :] - keys[:, None, :, :]) ** 2).sum(-1)  # (b, n, k)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    if alpha is None:
        target = np.einsum("bnk,bnd->bkd", p, x) / p.sum(1)[..., None]
    else:
        a = np.exp(alpha * p - (alpha * p).max(1, keepdims=True))
        a /= a.sum(1, keepdims=True)  # a softmax over the points
        target = np.einsum("bnk,bnd->bkd", a, x)
    return torch.from_numpy(c + lam * (target - c))


def test_zero_offsets_and_no_shrink_are_the_damped_family():
    points, init = make_tasks(n=60, d=3, k=4, batch=3, seed=6)
    damped = DistilledAlgorithm("damped", euclidean_kernel(), {"beta": 2.5, "lam": 0.8})
    offset = DistilledAlgorithm("offset", euclidean_kernel(), {"beta": 2.5, "lam": 0.8, "rho": 1.0},
                                SlotOffsets(torch.zeros(4, 3)))
    assert float((offset.step(points, init) - damped.step(points, init)).abs().max()) < 1e-13


@pytest.mark.parametrize("family", ["offset", "attend"])
def test_slot_families_are_their_formulas(family):
    points, init = make_tasks(n=50, d=3, k=4, batch=2, seed=7)
    offsets = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 0.2
    parameters = {"beta": 3.0, "lam": 0.9, "rho": 0.6} | ({"alpha": 8.0} if family == "attend" else {})
    algorithm = DistilledAlgorithm(family, euclidean_kernel(), parameters, SlotOffsets(offsets))
    expected = numpy_slot_update(points, init, 3.0, 0.9, 0.6, offsets, 8.0 if family == "attend" else None)
    assert float((algorithm.step(points, init) - expected).abs().max()) < 1e-12
    permutation = torch.tensor([2, 0, 3, 1])  # the offsets stay with the slots: not slot-equivariant
    moved = algorithm.step(points, init[:, permutation])
    assert float((moved - algorithm.step(points, init)[:, permutation]).abs().max()) > 1e-6


def test_fitted_offsets_on_the_construction_recover_lloyd():
    model = lloyd_transformer(4, 3, 1)
    points, init = make_tasks(n=128, d=4, k=3, batch=8, seed=1)
    test_points, test_init = make_tasks(n=128, d=4, k=3, batch=8, seed=21)
    fit = fit_distilled("offset", euclidean_kernel(), points, init, model(points, init).centroids)
    assert score(fit.algorithm, test_points, test_init, model(test_points, test_init).centroids) >= 0.999
    assert fit.algorithm.offsets.source == "fitted" and fit.n_parameters == 3 + 3 * 4


def test_recovers_planted_offsets_from_formula_targets():
    points, init = make_tasks(n=120, d=3, k=3, batch=8, seed=8)
    planted = torch.tensor([[0.05, -0.04, 0.0], [-0.03, 0.02, 0.06], [0.0, 0.05, -0.05]], dtype=torch.float64)
    targets = numpy_slot_update(points, init, 6.0, 0.9, 0.8, planted)
    fit = fit_distilled("offset", euclidean_kernel(), points, init, targets, max_iter=300)
    assert fit.r2_fit == pytest.approx(1.0, abs=1e-6)
    for name, value in {"beta": 6.0, "lam": 0.9, "rho": 0.8}.items():
        assert fit.algorithm.parameters[name] == pytest.approx(value, rel=1e-3), name
    assert float((fit.algorithm.offsets.values - planted).abs().max()) < 1e-3


@pytest.mark.parametrize("embedding", ["onehot", "binary"])
def test_read_offsets_give_the_models_whole_attn_xc_score_and_are_counted(embedding):
    torch.manual_seed(2)
    model = KMeansTransformer(learned_model_config(3, 4, embedding=embedding)).double().eval()
    points, init = make_tasks(n=30, d=3, k=4, batch=2, seed=9)
    _, cache = model.run_with_cache(points, init, steps=1, names_filter="blocks.0.attn_xc.hook_scores")
    kernel, offsets = attention_kernel(model), model_slot_offsets(model)
    scores = kernel.scores(points, init, offsets.values)  # (b, n, k): codes included
    assert float((scores - cache["blocks.0.attn_xc.hook_scores"]).abs().max()) < 1e-10
    width, code = model.config.d_model, model.config.scratch_width  # D = 7 (one-hot) or 5 (binary)
    assert kernel.n_learned == 2 * width * 3 + 2 * width  # W_Q, W_K data columns and both biases
    assert offsets.source == "attn_xc" and offsets.n_learned == width * code  # W_K's code columns
    algorithm = DistilledAlgorithm("offset", kernel, {"beta": 1.0, "lam": 1.0, "rho": 1.0}, offsets)
    assert (algorithm.n_fitted, algorithm.n_read) == (3, kernel.n_learned + width * code)
    assert algorithm.n_parameters == 3 + kernel.n_learned + width * code
    fit = fit_distilled("attend", kernel, points, init, model(points, init, steps=1).centroids, max_iter=5,
                        offsets=offsets)
    assert fit.algorithm.offsets is offsets and fit.n_parameters == 4 + kernel.n_learned + width * code
    none = KMeansTransformer(learned_model_config(3, 4, embedding="none")).double()
    with pytest.raises(InvalidInput):
        model_slot_offsets(none)


def test_parameter_counts_and_checks_of_the_slot_families():
    assert set(ALL_FAMILIES) == set(FAMILIES) | set(SLOT_FAMILIES)
    assert all(len(names) <= MAX_PARAMETERS for names in ALL_FAMILIES.values())
    assert DistilledAlgorithm("repulsive", euclidean_kernel(), {"beta": 1.0, "lam": 1.0, "kappa": 0.0,
                                                                "beta_c": 1.0}).n_parameters == 4
    offsets = SlotOffsets(torch.zeros(10, 32))
    algorithm = DistilledAlgorithm("attend", euclidean_kernel(), {"beta": 1.0, "lam": 1.0, "rho": 1.0, "alpha": 5.0},
                                   offsets)
    assert (algorithm.n_fitted, algorithm.n_read, algorithm.n_parameters) == (4 + 320, 0, 324)
    with pytest.raises(InvalidInput):
        DistilledAlgorithm("offset", euclidean_kernel(), {"beta": 1.0, "lam": 1.0, "rho": 1.0})  # no offsets
    with pytest.raises(InvalidInput):
        DistilledAlgorithm("damped", euclidean_kernel(), {"beta": 1.0, "lam": 1.0}, offsets)  # symmetric family
    with pytest.raises(InvalidInput):
        SlotOffsets(torch.full((2, 3), float("nan")))
    points, init = make_tasks(n=40, d=3, k=3, batch=2, seed=5)
    with pytest.raises(InvalidInput):
        fit_distilled("damped", euclidean_kernel(), points, init, init, offsets=SlotOffsets(torch.zeros(3, 3)))
