"""The constructions' empty-cluster rule is defined, flagged, never NaN, and equals Lloyd's
``empty="nearest_code"``; scikit-learn's relocation is reproduced by ``empty="sklearn"``."""

import numpy as np
import pytest
import torch
from conftest import make_tasks
from sklearn.cluster import KMeans

from interp.algorithms import lloyd
from interp.model.constructions import lloyd_transformer


def tasks_with_a_stranded_centroid(k: int, second: bool = False):
    points, init = make_tasks(200, 2, k, batch=3, seed=7)
    init = init.clone()
    init[:, 1] = torch.tensor([5.0, 5.0], dtype=torch.float64)  # far outside [0,1]^2: no member at step 1
    if second:
        init[0, 3] = torch.tensor([-4.0, 6.0], dtype=torch.float64)  # and a second empty cluster in task 0
    return points, init


@pytest.mark.parametrize("kwargs", [dict(), dict(centroid_update="hardmax"), dict(embedding="binary"),
                                    dict(attention="dot")], ids=["linear", "hardmax", "binary", "dot"])
def test_constructions_follow_the_nearest_code_rule(kwargs):
    k = 7
    points, init = tasks_with_a_stranded_centroid(k)
    model = lloyd_transformer(2, k, n_layers=5, **kwargs)
    out = model(points, init)
    reference = lloyd(points, init, 5, empty="nearest_code", codes=model.codes)
    assert torch.isfinite(out.centroid_trajectory).all()
    assert out.empty_clusters[:, 0, 1].all()
    assert torch.equal(out.empty_clusters, reference.empty_clusters)
    torch.testing.assert_close(out.centroid_trajectory, reference.centroid_trajectory, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kwargs", [dict(), dict(centroid_update="hardmax"), dict(attention="dot")])
def test_onehot_rule_is_the_global_mean(kwargs):
    """Two clusters empty at once both land on the global mean. (They then coincide: an exact tie, which
    Lloyd gives to the lower index and AHAT splits, so later steps may differ: docs/decisions.md.)"""
    points, init = tasks_with_a_stranded_centroid(5, second=True)
    model = lloyd_transformer(2, 5, n_layers=1, **kwargs)
    out = model(points, init)
    assert out.empty_clusters[0, 0, 1] and out.empty_clusters[0, 0, 3]
    torch.testing.assert_close(out.centroids[:, 1], points.mean(dim=1), rtol=0, atol=1e-12)
    torch.testing.assert_close(out.centroids[0, 3], points[0].mean(dim=0), rtol=0, atol=1e-12)
    reference = lloyd(points, init, 1, empty="nearest_code", codes=model.codes)
    torch.testing.assert_close(out.centroids, reference.centroids, rtol=0, atol=1e-12)


def test_binary_rule_pools_hamming_neighbours():
    """k = 4, codes 00,10,01,11 (LSB first); cluster 0 empty: its Hamming neighbours are 1 and 2."""
    points, init = make_tasks(100, 2, 4, batch=1, seed=3)
    init = init.clone()
    init[0, 0] = torch.tensor([9.0, 9.0], dtype=torch.float64)
    model = lloyd_transformer(2, 4, n_layers=1, embedding="binary")
    out = model(points, init)
    labels = out.assignment_trajectory[0, 0]  # the step's assignment, from init
    members = (labels == 1) | (labels == 2)
    assert members.any() and not (labels == 0).any()
    torch.testing.assert_close(out.centroids[0, 0], points[0, members].mean(0), rtol=0, atol=1e-12)


def test_keep_rule():
    points, init = tasks_with_a_stranded_centroid(5)
    out = lloyd(points, init, 1, empty="keep")
    torch.testing.assert_close(out.centroids[:, 1], init[:, 1])


def test_sklearn_relocation_matches_sklearn():
    """One empty cluster per task: the farthest point becomes its centre, as scikit-learn."""
    points, init = make_tasks(200, 2, 5, batch=3, seed=7)
    init = init.clone()
    init[:, 1] = torch.tensor([5.0, 5.0], dtype=torch.float64)
    for t in (1, 2, 5):
        ours = lloyd(points, init, t, empty="sklearn")
        for b in range(3):
            km = KMeans(5, init=init[b].numpy(), n_init=1, max_iter=t, tol=0, algorithm="lloyd").fit(points[b].numpy())
            np.testing.assert_allclose(ours.centroids[b].numpy(), km.cluster_centers_, rtol=0, atol=1e-10)
    assert ours.empty_clusters[:, 0, 1].all()


def test_random_point_rule_is_seeded_and_a_data_point():
    points, init = tasks_with_a_stranded_centroid(5)
    first = lloyd(points, init, 1, empty="random_point", generator=4)
    again = lloyd(points, init, 1, empty="random_point", generator=4)
    assert torch.equal(first.centroids, again.centroids)
    for b in range(3):
        distances = (points[b] - first.centroids[b, 1]).norm(dim=-1)
        assert distances.min() == 0
