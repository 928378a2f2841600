"""Property tests (hypothesis) across the package.

* the k-means objective is >= 0, and the smoothed losses bound it from above;
* a Lloyd step never increases the objective (every empty-cluster rule but the authors' random point);
* every exact construction equals Lloyd on random float64 inputs with distinct points (draws where Lloyd
  empties a cluster or a point is within 1e-9 of a tie are skipped with ``assume``: the constructions are
  exact only there, docs/constructions.md#conditions-for-exactness);
* permuting the points permutes the assignments (constructions and Lloyd) and leaves the centroids;
* InContextKMeans is invariant to translating and uniformly scaling the data before the unit-cube mapping.

Examples are few (``max_examples`` 20-40) and derandomised, so the suite is fast and stable.
"""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from interp.algorithms import kmeans_objective, lloyd, squared_distances
from interp.estimator import InContextKMeans
from interp.model.constructions import lloyd_transformer
from interp.tasks import init_centroids
from interp.training.losses import smoothed_objective

SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
CONSTRUCTIONS = {
    "onehot-linear": dict(embedding="onehot", centroid_update="linear"),
    "onehot-hardmax": dict(embedding="onehot", centroid_update="hardmax"),
    "binary": dict(embedding="binary"),
    "dot": dict(embedding="onehot", attention="dot"),
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


coordinates = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=64)


@st.composite
def points_and_centroids(draw, max_n=25, max_d=4, max_k=6):
    """Arbitrary finite float64 tasks (duplicates and ties allowed): points (b, n, d), centroids (b, k, d)."""
    b = draw(st.integers(1, 2))
    n = draw(st.integers(1, max_n))
    d = draw(st.integers(1, max_d))
    k = draw(st.integers(1, min(n, max_k)))
    points = draw(arrays(np.float64, (b, n, d), elements=coordinates))
    centroids = draw(arrays(np.float64, (b, k, d), elements=coordinates))
    return torch.from_numpy(points), torch.from_numpy(centroids)


@st.composite
def random_tasks(draw, min_n=2, max_n=60, max_d=5, min_k=1, max_k=8):
    """Continuous random tasks from a drawn seed: uniform or Gaussian-mixture points (distinct with
    probability 1), a drawn scale and offset, and a random k-subset as initial centroids."""
    seed = draw(st.integers(0, 2**31 - 1))
    n = draw(st.integers(min_n, max_n))
    d = draw(st.integers(1, max_d))
    k = draw(st.integers(min(min_k, n), min(n, max_k)))
    scale = draw(st.sampled_from([1e-3, 1.0, 50.0]))
    offset = draw(st.sampled_from([0.0, -3.0, 100.0]))
    mixture = draw(st.booleans())
    gen = torch.Generator().manual_seed(seed)
    if mixture:
        centres = torch.rand((1, k, d), generator=gen, dtype=torch.float64)
        labels = torch.randint(k, (1, n), generator=gen)
        points = centres[0][labels] + 0.05 * torch.randn((1, n, d), generator=gen, dtype=torch.float64)
    else:
        points = torch.rand((1, n, d), generator=gen, dtype=torch.float64)
    points = points * scale + offset
    init = init_centroids(points, k, "random", gen)
    return points, init


def _no_near_ties(points, trajectory, tol=1e-9):
    """True when, at every step, each point's best centroid beats the second best by > tol (relative)."""
    if trajectory.shape[2] < 2:
        return True
    for t in range(trajectory.shape[1] - 1):
        sq = squared_distances(points, trajectory[:, t])  # (b, n, k)
        two = sq.topk(2, dim=2, largest=False).values
        scale = sq.amax(dim=2).clamp_min(1e-300)
        if bool(((two[..., 1] - two[..., 0]) <= tol * scale).any()):
            return False
    return True


# ----- objective ------------------------------------------------------------------------------------------
@settings(max_examples=40, **SETTINGS)
@given(points_and_centroids(), st.sampled_from([0.01, 0.1, 1.0]), st.sampled_from(["softmin", "sparsemax"]))
def test_objective_is_non_negative_and_below_the_smoothed_losses(task, tau, kind):
    points, centroids = task
    objective = kmeans_objective(points, centroids)
    assert objective.shape == (points.shape[0],)
    assert bool((objective >= 0).all())
    smooth = smoothed_objective(points, centroids, tau, kind)
    assert bool((smooth >= objective * (1 - 1e-9) - 1e-9).all())


@settings(max_examples=40, **SETTINGS)
@given(points_and_centroids(), st.sampled_from(["sklearn", "keep"]))
def test_a_lloyd_step_never_increases_the_objective(task, empty):
    points, centroids = task
    before = kmeans_objective(points, centroids)
    out = lloyd(points, centroids, 1, empty=empty)
    after = kmeans_objective(points, out.centroids)
    # rounding of the means only: the bound is relative to the data's magnitude
    slack = 1e-9 * (before + (points * points).sum(dim=(1, 2)) + 1.0)
    assert bool((after <= before + slack).all()), (before, after)


@settings(max_examples=25, **SETTINGS)
@given(random_tasks(), st.integers(2, 6))
def test_lloyd_objective_is_monotone_along_the_trajectory(task, steps):
    points, init = task
    trajectory = lloyd(points, init, steps).centroid_trajectory
    values = torch.stack([kmeans_objective(points, trajectory[:, t]) for t in range(steps + 1)], dim=1)  # (b, T+1)
    slack = 1e-9 * (values[:, :1] + 1.0)
    assert bool((values[:, 1:] <= values[:, :-1] + slack).all())


# ----- constructions = Lloyd ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CONSTRUCTIONS))
@settings(max_examples=15, **SETTINGS)
@given(task=random_tasks(min_n=6, min_k=2), steps=st.integers(1, 5))
def test_constructions_equal_lloyd_on_random_inputs(task, steps, name):
    points, init = task
    assume(torch.unique(points[0], dim=0).shape[0] == points.shape[1])  # distinct points
    reference = lloyd(points, init, steps)
    assume(not reference.any_empty)  # exactness needs non-empty clusters (docs/constructions.md)
    assume(_no_near_ties(points, reference.centroid_trajectory))
    model = lloyd_transformer(points.shape[2], init.shape[1], n_layers=1, **CONSTRUCTIONS[name])
    out = model(points, init, steps=steps)
    scale = float(points.abs().max()) + 1.0
    torch.testing.assert_close(out.centroid_trajectory, reference.centroid_trajectory, rtol=0, atol=1e-10 * scale)
    assert torch.equal(out.assignment_trajectory, reference.assignment_trajectory)
    assert not out.any_empty


# ----- permutation equivariance ---------------------------------------------------------------------------
@settings(max_examples=25, **SETTINGS)
@given(random_tasks(min_n=4, min_k=2), st.integers(0, 2**31 - 1), st.integers(1, 4),
       st.sampled_from(["lloyd", *CONSTRUCTIONS]))
def test_permuting_points_permutes_assignments(task, perm_seed, steps, name):
    points, init = task
    reference = lloyd(points, init, steps)
    assume(not reference.any_empty and _no_near_ties(points, reference.centroid_trajectory))
    perm = torch.randperm(points.shape[1], generator=torch.Generator().manual_seed(perm_seed))
    if name == "lloyd":
        run = lambda p: lloyd(p, init, steps)  # noqa: E731
    else:
        model = lloyd_transformer(points.shape[2], init.shape[1], n_layers=1, **CONSTRUCTIONS[name])
        run = lambda p: model(p, init, steps=steps)  # noqa: E731
    out, permuted = run(points), run(points[:, perm])
    assert torch.equal(permuted.assignments, out.assignments[:, perm])
    assert torch.equal(permuted.assignment_trajectory, out.assignment_trajectory[:, :, perm])
    scale = float(points.abs().max()) + 1.0
    torch.testing.assert_close(permuted.centroids, out.centroids, rtol=0, atol=1e-10 * scale)


# ----- the estimator's unit-cube mapping --------------------------------------------------------------------
@settings(max_examples=20, **SETTINGS)
@given(st.integers(0, 2**31 - 1), st.integers(20, 80), st.integers(1, 4), st.integers(1, 5),
       st.floats(1e-2, 1e2), st.floats(-1e3, 1e3), st.sampled_from(["k-means++", "random"]))
def test_estimator_is_invariant_to_translation_and_scaling(seed, n, d, k, scale, shift, init):
    rng = np.random.RandomState(seed % (2**32))
    X = rng.standard_normal((n, d)) * rng.uniform(0.1, 3, size=d) + rng.uniform(-5, 5, size=d)
    translation = shift * rng.uniform(-1, 1, size=d)
    Y = scale * X + translation
    params = dict(n_clusters=k, steps=5, init=init, n_init=2, random_state=seed)
    a = InContextKMeans(**params).fit(X)
    b = InContextKMeans(**params).fit(Y)
    assume(_no_near_ties(torch.from_numpy(X)[None], torch.from_numpy(a.cluster_centers_)[None, None]))
    np.testing.assert_array_equal(a.labels_, b.labels_)
    span = float((X.max(0) - X.min(0)).max())
    np.testing.assert_allclose((b.cluster_centers_ - translation) / scale, a.cluster_centers_, rtol=0, atol=1e-8 * span)
    assert b.inertia_ == pytest.approx(scale**2 * a.inertia_, rel=1e-6, abs=1e-12 * scale**2 * span**2)
    np.testing.assert_array_equal(a.predict(X), b.predict(Y))
    assert a.inertia_ >= 0 and (a.transform(X) >= 0).all()
