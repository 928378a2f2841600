"""Acceptance: every construction equals scikit-learn's Lloyd step by step (docs/constructions.md)."""

import numpy as np
import pytest
import torch
from conftest import make_tasks
from sklearn.cluster import KMeans
from sklearn.metrics import pairwise_distances_argmin

from interp.algorithms import lloyd
from interp.model.constructions import lloyd_transformer

CONSTRUCTIONS = {
    "onehot-linear": dict(embedding="onehot", centroid_update="linear"),
    "onehot-hardmax": dict(embedding="onehot", centroid_update="hardmax"),
    "binary": dict(embedding="binary"),
    "dot-ffn": dict(embedding="onehot", attention="dot"),
    "onehot-literal-self": dict(embedding="onehot", self_attention="literal"),
}
# (n, d, k, seed): d = 1, k = 2, k not a power of two, k = n / 4; seeds where Lloyd never empties a cluster
SIZES = [(200, 1, 2, 0), (300, 3, 6, 1), (120, 4, 30, 5), (256, 8, 10, 3), (400, 2, 13, 4)]
T = 10


def sklearn_trajectory(points: np.ndarray, init: np.ndarray, n_iter: int):
    """Centroids after t = 1..n_iter iterations and labels_ for each, from separate max_iter=t fits."""
    centres, labels = [], []
    for t in range(1, n_iter + 1):
        km = KMeans(n_clusters=len(init), init=init, n_init=1, max_iter=t, tol=0, algorithm="lloyd")
        km.fit(points)
        centres.append(km.cluster_centers_)
        labels.append(km.labels_)
    return np.stack(centres), np.stack(labels)


@pytest.fixture(scope="module", params=SIZES, ids=lambda s: f"n{s[0]}-d{s[1]}-k{s[2]}")
def case(request):
    n, d, k, seed = request.param
    points, init = make_tasks(n, d, k, batch=2, seed=seed)
    reference = lloyd(points, init, T)
    assert not reference.any_empty, "test precondition: this seed must not empty a cluster"
    expected = [sklearn_trajectory(points[b].numpy(), init[b].numpy(), T) for b in range(points.shape[0])]
    return points, init, expected


@pytest.mark.parametrize("name", list(CONSTRUCTIONS))
def test_construction_matches_sklearn_every_step(case, name):
    points, init, expected = case
    d, k = points.shape[2], init.shape[1]
    model = lloyd_transformer(d, k, n_layers=T, **CONSTRUCTIONS[name])
    out = model(points, init)
    assert not out.any_empty
    for b, (centres, labels) in enumerate(expected):
        got = out.centroid_trajectory[b, 1:].numpy()  # (T, k, d) after steps 1..T
        np.testing.assert_allclose(got, centres, rtol=0, atol=1e-10)
        # the layer-1 assignment is w.r.t. the initial centroids ...
        first = pairwise_distances_argmin(points[b].numpy(), init[b].numpy())
        np.testing.assert_array_equal(out.assignment_trajectory[b, 0].numpy(), first)
        # ... and layer t+1's is scikit-learn's labels_ after t iterations
        np.testing.assert_array_equal(out.assignment_trajectory[b, 1:].numpy(), labels[:-1])


def test_binary_codes_are_lsb_first():
    """Paper 2, Def. 2.1: B_6 rows (0,1,0,1,0,1), (0,0,1,1,0,0), (0,0,0,0,1,1)."""
    model = lloyd_transformer(2, 6, 1, embedding="binary")
    expected = torch.tensor([[0, 1, 0, 1, 0, 1], [0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1]], dtype=torch.float64)
    torch.testing.assert_close(model.codes.T, expected)
    assert model.config.d_model == 2 + 3


def test_widths():
    assert lloyd_transformer(8, 10, 1).config.d_model == 18
    assert lloyd_transformer(8, 10, 1, embedding="binary").config.d_model == 8 + 4
    assert lloyd_transformer(8, 10, 1, attention="dot").config.d_model == 8 + 10 + 1


def test_requ_ffn_writes_the_squared_norm():
    """The ReQU FFN of the dot-product construction vs ||z_{:d}||^2 to ~1e-15."""
    model = lloyd_transformer(5, 3, 1, attention="dot")
    tokens = torch.randn(4, 7, model.config.d_model, dtype=torch.float64)
    block = model.blocks[0]
    added = block.ffn_points(tokens, model.layers[0].ffn_points)
    torch.testing.assert_close(added[..., -1], (tokens[..., :5] ** 2).sum(-1), rtol=0, atol=1e-13)
    assert added[..., :-1].abs().max() == 0
