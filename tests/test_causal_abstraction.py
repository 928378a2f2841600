"""Interchange interventions and DAS against Lloyd's step (interp.instruments.causal_abstraction).

Expected values come from the mathematics (the constructions are one Lloyd step each, so the known alignment has
IIA exactly 1) and from a few-line numpy Lloyd written here, never from the module."""

import math

import numpy as np
import pytest
import torch

from interp._checks import InvalidInput
from interp.instruments.causal_abstraction import (
    Alignment,
    DASSettings,
    Pairs,
    counterfactual,
    das,
    iia,
    interchange,
    known_alignment,
    random_rotation,
    sample_pairs,
    subspace_overlap,
)
from interp.model.constructions import lloyd_transformer
from interp.task_config import TaskConfig

SIZES = [(32, 2, 3), (64, 5, 6)]  # (n, d, k)
EXACT = 1e-9  # float64 construction at gamma = inf against float64 numpy: rounding only
NEAR_EXACT_GAMMA = 1e6  # finite: softmax everywhere, differentiable; a runner-up weighs exp(-1e6 gap)


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    yield


# ----- an independent Lloyd in numpy ----------------------------------------------------------------------------
def np_assign(x, c):
    """x (n, d), c (k, d) -> nearest centroid (n,)."""
    return ((x[:, None, :] - c[None, :, :]) ** 2).sum(-1).argmin(1)


def np_means(x, labels, k):
    """Cluster means (k, d) and whether some cluster is empty."""
    counts = np.bincount(labels, minlength=k)
    means = np.stack([x[labels == j].mean(0) if counts[j] else np.zeros(x.shape[1]) for j in range(k)])
    return means, bool((counts == 0).any())


def np_counterfactual(variable, xb, cb, xs, cs, step, steps):
    """Lloyd on the base task with the variable at ``step`` from the source; (centroids, defined)."""
    k, defined = cb.shape[0], True
    for _ in range(step):
        cb, empty_b = np_means(xb, np_assign(xb, cb), k)
        cs, empty_s = np_means(xs, np_assign(xs, cs), k)
        defined &= not (empty_b or empty_s)
    if variable == "assignment":
        c, empty = np_means(xb, np_assign(xs, cs), k)  # base points under the source labels
    else:
        c, empty = np_means(xs, np_assign(xs, cs), k)  # the source's means
    defined &= not empty
    for _ in range(steps - step - 1):
        c, empty = np_means(xb, np_assign(xb, c), k)
        defined &= not empty
    return c, defined


def np_counterfactuals(variable, pairs, step, steps):
    arrays = [t.numpy() for t in (pairs.base_points, pairs.base_centroids, pairs.source_points,
                                  pairs.source_centroids)]
    results = [np_counterfactual(variable, *(a[b] for a in arrays), step, steps) for b in range(len(pairs))]
    return np.stack([c for c, _ in results]), np.array([ok for _, ok in results])


def args(pairs):
    return pairs.base_points, pairs.base_centroids, pairs.source_points, pairs.source_centroids


# ----- the known alignment: IIA = 1 ------------------------------------------------------------------------------
@pytest.mark.parametrize("embedding", ["onehot", "binary"])
@pytest.mark.parametrize("n, d, k", SIZES)
@pytest.mark.parametrize("variable", ["assignment", "means"])
def test_known_alignment_has_iia_one(embedding, n, d, k, variable):
    model = lloyd_transformer(d, k, n_layers=1, embedding=embedding)  # gamma = inf: exact Lloyd steps
    pairs = sample_pairs(TaskConfig(n=n, d=d, k=k), 48, seed=3)
    alignment = known_alignment(model, variable)
    out = interchange(model, *args(pairs), alignment)
    expected, defined = np_counterfactuals(variable, pairs, 0, 1)
    assert defined.sum() >= 40  # few pairs empty a cluster at one step
    assert np.abs(out.centroids.numpy()[defined] - expected[defined]).max() < EXACT
    result = iia(model, *args(pairs), alignment, tol=EXACT)
    assert result.accuracy == 1.0 and result.standard_error == 0.0
    assert result.pairs == defined.sum() and result.pairs + result.skipped == 48
    assert result.assignment_accuracy == 1.0


@pytest.mark.parametrize("embedding", ["onehot", "binary"])
@pytest.mark.parametrize("variable", ["assignment", "means"])
def test_intervention_at_a_later_step_then_more_steps(embedding, variable):
    n, d, k = 64, 3, 4
    model = lloyd_transformer(d, k, n_layers=3, embedding=embedding)
    pairs = sample_pairs(TaskConfig(n=n, d=d, k=k), 48, seed=5)
    alignment = known_alignment(model, variable, step=1)
    out = interchange(model, *args(pairs), alignment, steps=3)
    expected, defined = np_counterfactuals(variable, pairs, 1, 3)
    assert defined.sum() >= 20
    assert np.abs(out.centroids.numpy()[defined] - expected[defined]).max() < EXACT
    target = counterfactual(variable, *args(pairs), step=1, steps=3)
    assert np.abs(target.centroids.numpy()[defined] - expected[defined]).max() < EXACT
    assert (~target.empty_clusters.flatten(1).any(1)).numpy().tolist() == defined.tolist()
    assert iia(model, *args(pairs), alignment, steps=3, tol=EXACT).accuracy == 1.0


def test_tasks_with_other_anchors_are_run_in_the_base_coordinates():
    """Base tasks far from the origin, source tasks elsewhere: the source's centroid means the same point."""
    model = lloyd_transformer(2, 3, n_layers=2)
    pairs = sample_pairs(TaskConfig(n=32, d=2, k=3), 16, seed=1)
    moved = Pairs(pairs.base_points + 1024, pairs.base_centroids + 1024, pairs.source_points - 64,
                  pairs.source_centroids - 64)
    for variable, steps in (("means", 1), ("assignment", 2)):
        out = interchange(model, *args(moved), known_alignment(model, variable), steps=steps)
        expected, defined = np_counterfactuals(variable, moved, 0, steps)
        assert defined.sum() >= 10
        assert np.abs(out.centroids.numpy()[defined] - expected[defined]).max() < 1e-9 * 1024


# ----- controls that can fail -----------------------------------------------------------------------------------
@pytest.mark.parametrize("embedding", ["onehot", "binary"])
def test_wrong_alignments_have_low_iia(embedding):
    n, d, k = 32, 4, 3
    model = lloyd_transformer(d, k, n_layers=1, embedding=embedding)
    pairs = sample_pairs(TaskConfig(n=n, d=d, k=k), 64, seed=7)
    width, e = model.config.d_model, model.config.scratch_width
    hook = "blocks.0.hook_points_resid_post"
    data = Alignment("assignment", hook, features=slice(0, d))  # the points' coordinates, not their codes
    random = Alignment("assignment", hook,
                       basis=random_rotation(width, torch.Generator().manual_seed(0))[:, :e].contiguous())
    codes = Alignment("means", "blocks.0.hook_centroids_resid_post", features=slice(d, d + e))  # the same in both
    for alignment in (data, random, codes):
        assert iia(model, *args(pairs), alignment, tol=1e-6).accuracy <= 0.05


def test_shared_points_would_not_identify_the_alignment():
    """Why the sources have other points: with the base's own points (other starts only), swapping the *whole*
    points stream also reproduces the counterfactual; with other points it does not."""
    n, d, k = 32, 3, 4
    model = lloyd_transformer(d, k, n_layers=1)
    pairs = sample_pairs(TaskConfig(n=n, d=d, k=k), 32, seed=2)
    whole = Alignment("assignment", "blocks.0.hook_points_resid_post", features=slice(None))
    shared = Pairs(pairs.base_points, pairs.base_centroids, pairs.base_points,
                   pairs.base_points[:, -k:].clone())  # the same points, another start (the last k points)
    assert iia(model, *args(shared), whole, tol=EXACT).accuracy == 1.0
    assert iia(model, *args(pairs), whole, tol=1e-6).accuracy == 0.0
    assert iia(model, *args(pairs), known_alignment(model, "assignment"), tol=EXACT).accuracy == 1.0


def test_iia_statistics_by_hand():
    """Half the pairs right: accuracy 1/2 and standard error sqrt(1/4 / pairs)."""
    n, d, k = 32, 2, 3
    model = lloyd_transformer(d, k, n_layers=1)
    pairs = sample_pairs(TaskConfig(n=n, d=d, k=k), 40, seed=4)
    _, defined = np_counterfactuals("assignment", pairs, 0, 1)
    keep = torch.from_numpy(np.flatnonzero(defined)[:32])
    pairs = pairs.subset(keep)
    # second half: the source is the base itself, so the base run is unchanged and differs from the counterfactual
    half = 16
    source_points = torch.cat([pairs.source_points[:half], pairs.base_points[half:]])
    source_centroids = torch.cat([pairs.source_centroids[:half], pairs.base_centroids[half:]])
    alignment = Alignment("assignment", "blocks.0.hook_points_resid_post", features=slice(0, d))  # data only
    mixed = Pairs(pairs.base_points, pairs.base_centroids, source_points, source_centroids)
    result = iia(model, *args(mixed), alignment, tol=1e-6)
    # first half: the points' data swapped (wrong); second half: source = base, a no-op equal to the counterfactual
    assert result.pairs == 32 and result.accuracy == 0.5
    assert math.isclose(result.standard_error, math.sqrt(0.25 / 32))


# ----- DAS -------------------------------------------------------------------------------------------------------
def test_das_recovers_the_assignment_subspace_from_a_random_rotation():
    """One-hot construction at a finite gamma (its centre update is normalised linear attention): from a random
    rotation, DAS finds the scratch slots; an untrained random rotation does not."""
    n, d, k = 32, 4, 3
    model = lloyd_transformer(d, k, n_layers=1, embedding="onehot", gamma=NEAR_EXACT_GAMMA)
    config = TaskConfig(n=n, d=d, k=k)
    train, held_out = sample_pairs(config, 256, seed=1), sample_pairs(config, 256, seed=2)
    result = das(model, "assignment", train, held_out, DASSettings(dim=k, steps=400, seed=0))
    known = iia(model, *args(held_out), known_alignment(model, "assignment"), tol=1e-3)
    assert result.iia.accuracy >= 0.99 and result.iia.accuracy >= known.accuracy - 1e-12
    assert result.overlap >= 0.999 and min(result.cosines) >= 0.999
    assert result.initial_iia.accuracy <= 0.05 and result.initial_overlap <= 0.8
    basis = result.alignment.basis
    assert torch.allclose(basis.T @ basis, torch.eye(k, dtype=basis.dtype), atol=1e-12)
    # the learned basis lies in the scratch slots d..d+k-1: nothing of it on the points' coordinates
    assert float(basis[:d].abs().max()) < 1e-3


def test_das_recovers_the_means_subspace():
    n, d, k = 32, 4, 3
    model = lloyd_transformer(d, k, n_layers=1, embedding="binary", gamma=NEAR_EXACT_GAMMA)
    config = TaskConfig(n=n, d=d, k=k)
    result = das(model, "means", sample_pairs(config, 128, seed=1), sample_pairs(config, 128, seed=2),
                 DASSettings(dim=d, steps=200, seed=0))
    assert result.iia.accuracy >= 0.99 and result.overlap >= 0.999
    assert result.initial_iia.accuracy <= 0.05


@pytest.mark.parametrize("embedding, centroid_update, n, d, k, restarts", [
    ("binary", None, 32, 4, 3, 3),
    ("onehot", "hardmax", 64, 5, 6, 1),
])
def test_das_with_tempering_on_softmax_centre_updates(embedding, centroid_update, n, d, k, restarts):
    """A softmax centre update at a near-exact gamma: DAS trains through a tempered copy (gamma from 10 to 1e4) and is
    scored on the model as it is."""
    model = lloyd_transformer(d, k, n_layers=1, embedding=embedding, gamma=NEAR_EXACT_GAMMA,
                              centroid_update=centroid_update)
    config = TaskConfig(n=n, d=d, k=k)
    held_out = sample_pairs(config, 256, seed=2)
    settings = DASSettings(dim=model.config.scratch_width, steps=400, seed=0, restarts=restarts,
                           temper=(10.0, 1e4))
    result = das(model, "assignment", sample_pairs(config, 256, seed=1), held_out, settings)
    assert result.iia.accuracy >= 0.99 and result.overlap >= 0.999
    assert result.initial_iia.accuracy <= 0.05
    assert len(result.final_losses) == restarts and min(result.final_losses) < 1e-6


def test_subspace_overlap_by_hand():
    eye = torch.eye(4, dtype=torch.float64)
    assert subspace_overlap(eye[:, :2], eye[:, :2])[0] == pytest.approx(1.0)
    assert subspace_overlap(eye[:, 2:], eye[:, :2])[0] == pytest.approx(0.0)
    tilted = torch.stack([(eye[0] + eye[2]) / math.sqrt(2), eye[1]], dim=1)  # angles 45 and 0 degrees
    share, cosines = subspace_overlap(tilted, eye[:, :2])
    assert share == pytest.approx((0.5 + 1.0) / 2) and cosines == pytest.approx((1.0, math.sqrt(0.5)))


# ----- the learned models: the API runs on them ------------------------------------------------------------------
def test_learned_model_runs():
    import interp

    model = interp.load_model("main-onehot")
    pairs = sample_pairs(TaskConfig(n=40, d=32, k=10), 4, seed=0, dtype=torch.float32)
    for variable in ("assignment", "means"):
        result = iia(model, *args(pairs), known_alignment(model, variable), tol=1e-2)
        assert 0.0 <= result.accuracy <= 1.0 and 0.0 <= result.assignment_accuracy <= 1.0
        assert result.pairs + result.skipped == 4


# ----- bad inputs ------------------------------------------------------------------------------------------------
def test_bad_inputs_name_the_argument():
    model = lloyd_transformer(2, 3, n_layers=1)
    pairs = sample_pairs(TaskConfig(n=16, d=2, k=3), 8, seed=0)
    alignment = known_alignment(model, "assignment")
    cases = [
        (lambda: interchange(model, pairs.base_points, pairs.base_centroids, pairs.source_points[:, :8],
                             pairs.source_centroids, alignment), "source_points"),
        (lambda: interchange(model, pairs.base_points, pairs.base_centroids, pairs.source_points,
                             pairs.source_centroids[:4], alignment), "source_centroids"),
        (lambda: interchange(model, pairs.base_points[0], pairs.base_centroids, pairs.source_points,
                             pairs.source_centroids, alignment), "points"),
        (lambda: interchange(model, *args(pairs), alignment, steps=0), "steps"),
        (lambda: known_alignment(model, "centroids"), "variable"),
        (lambda: counterfactual("labels", *args(pairs)), "variable"),
        (lambda: counterfactual("means", *args(pairs), step=2, steps=1), "steps"),
        (lambda: Alignment("assignment", "blocks.0.hook_centroids_resid_post", features=slice(0, 2)), "hook"),
        (lambda: Alignment("assignment", "blocks.0.hook_points_resid_post"), "basis"),
        (lambda: Alignment("assignment", "blocks.0.hook_points_resid_post",
                           basis=torch.ones(5, 2, dtype=torch.float64)), "basis"),
        (lambda: interchange(model, *args(pairs), Alignment("assignment", "blocks.0.hook_points_resid_post",
                                                            basis=torch.eye(7, dtype=torch.float64)[:, :2])),
         "basis"),
        (lambda: iia(model, *args(pairs), alignment, tol=0.0), "tol"),
        (lambda: DASSettings(dim=0), "dim"),
        (lambda: DASSettings(dim=2, steps=0), "steps"),
        (lambda: DASSettings(dim=2, steps=10**9), "steps"),
        (lambda: DASSettings(dim=2, batch=0), "batch"),
        (lambda: DASSettings(dim=2, lr=-1.0), "lr"),
        (lambda: DASSettings(dim=2, restarts=0), "restarts"),
        (lambda: DASSettings(dim=2, temper=(10.0, 1.0)), "temper"),
        (lambda: das(model, "assignment", pairs, pairs, DASSettings(dim=6)), "dim"),
        (lambda: das(model, "assignment", pairs, pairs, DASSettings(dim=2, batch=9)), "batch"),
        (lambda: das(model, "assignment", pairs, pairs, DASSettings(dim=2, batch=8, temper=(1.0, 10.0))), "temper"),
        (lambda: das(model, "means", pairs, pairs, DASSettings(dim=2, batch=8),
                     hook="blocks.1.hook_centroids_resid_post"), "hook"),
        (lambda: sample_pairs(TaskConfig(n=16, d=2, k=3), 0, seed=0), "count"),
    ]
    for call, name in cases:
        with pytest.raises(InvalidInput, match=name):
            call()
    empty = Alignment("assignment", "blocks.0.hook_points_resid_post", features=slice(0, 0))
    with pytest.raises(InvalidInput, match="features"):
        interchange(model, *args(pairs), empty)


def test_a_model_without_scratch_slots_has_no_known_assignment():
    import interp

    with pytest.raises(InvalidInput, match="embedding"):
        known_alignment(interp.load_model("main-none"), "assignment")
