"""Reference Lloyd and objective (paper 2 Eq. 1 and Alg. 2, with scikit-learn's semantics)."""

import numpy as np
import pytest
import torch
from conftest import make_tasks
from sklearn.cluster import KMeans

from interp.algorithms import kmeans_objective, lloyd, log_objective


def test_hand_computed_step():
    points = torch.tensor([[[0.0, 0.0], [0.0, 1.0], [4.0, 0.0], [4.0, 1.0]]], dtype=torch.float64)
    init = torch.tensor([[[0.0, 0.0], [4.0, 1.0]]], dtype=torch.float64)
    out = lloyd(points, init, 1)
    torch.testing.assert_close(out.centroids, torch.tensor([[[0.0, 0.5], [4.0, 0.5]]], dtype=torch.float64))
    assert out.assignments.tolist() == [[0, 0, 1, 1]]
    assert kmeans_objective(points, out.centroids).item() == pytest.approx(1.0)  # 4 * 0.5^2
    assert log_objective(points, init).item() == pytest.approx(np.log(2.0))  # two points at distance 1


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_lloyd_matches_sklearn(dtype):
    points, init = make_tasks(300, 5, 7, batch=3, seed=2, dtype=dtype)
    out = lloyd(points, init, 6)
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    for b in range(3):
        km = KMeans(7, init=init[b].numpy(), n_init=1, max_iter=6, tol=0, algorithm="lloyd").fit(points[b].numpy())
        np.testing.assert_allclose(out.centroids[b].numpy(), km.cluster_centers_, rtol=0, atol=tol)
        assert kmeans_objective(points[b : b + 1], out.centroids[b : b + 1]).item() == pytest.approx(
            km.inertia_, rel=1e-6 if dtype == torch.float64 else 1e-3)


def test_objective_never_increases():
    points, init = make_tasks(200, 3, 8, batch=6, seed=4)
    out = lloyd(points, init, 10)
    objective = torch.stack([kmeans_objective(points, out.centroid_trajectory[:, t]) for t in range(11)], 1)
    assert (objective[:, 1:] <= objective[:, :-1] + 1e-12).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_is_refused_naming_the_dtype(small_tasks, dtype):
    """In bfloat16 the squared distances cancel (20 iterations end up to 0.74 from the float64 centroids on
    main-configuration tasks): refused, not run inexactly."""
    from interp._checks import InvalidInputType
    from interp.algorithms import soft_kmeans

    points, init = (t.to(dtype) for t in small_tasks)
    for run in (lambda: lloyd(points, init, 3), lambda: soft_kmeans(points, init, 3)):
        with pytest.raises(InvalidInputType, match=f"points dtype {dtype}"):
            run()
