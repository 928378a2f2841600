"""Bad input raises a clear error naming the argument; inputs are never mutated; float32 agrees with float64."""

import pytest
import torch
from conftest import make_tasks

from interp.algorithms import kmeans_objective, lloyd
from interp.model.constructions import lloyd_transformer
from interp.tasks import TaskConfig, init_centroids, sample_tasks


@pytest.fixture(scope="module")
def model():
    return lloyd_transformer(3, 4, n_layers=2)


def good():
    return make_tasks(50, 3, 4, batch=2, seed=0)


def _nan(points):
    points = points.clone()
    points[0, 0, 0] = float("nan")
    return points


def _inf(points):
    points = points.clone()
    points[1, 2, 1] = float("inf")
    return points


BAD = [
    ("points NaN", lambda p, c: (_nan(p), c), ValueError, "points"),
    ("points inf", lambda p, c: (_inf(p), c), ValueError, "points"),
    ("centroids NaN", lambda p, c: (p, _nan(c)), ValueError, "centroids"),
    ("integer points", lambda p, c: (p.long(), c), TypeError, "points"),
    ("rank-2 points", lambda p, c: (p[0], c), ValueError, "points"),
    ("rank-2 centroids", lambda p, c: (p, c[0]), ValueError, "centroids"),
    ("empty batch", lambda p, c: (p[:0], c[:0]), ValueError, "points"),
    ("k > n", lambda p, c: (p[:, :3], c), ValueError, "k="),
    ("d mismatch", lambda p, c: (p, c[..., :2]), ValueError, "d="),
    ("batch mismatch", lambda p, c: (p, c[:1]), ValueError, "batch"),
    ("not a tensor", lambda p, c: (p.tolist(), c), TypeError, "points"),
    ("dtype mismatch", lambda p, c: (p, c.float()), TypeError, "dtype"),
]


@pytest.mark.parametrize("name,corrupt,error,needle", BAD, ids=[b[0] for b in BAD])
def test_model_and_lloyd_reject_bad_input(model, name, corrupt, error, needle):
    points, init = corrupt(*good())
    with pytest.raises(error, match=needle):
        model(points, init)
    with pytest.raises(error, match=needle):
        lloyd(points, init, 2)


def test_model_specific_errors(model):
    points, init = good()
    with pytest.raises(ValueError, match="d=3"):
        model(torch.rand(2, 50, 5, dtype=torch.float64), torch.rand(2, 4, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="k=4"):  # more centroids than codes (fewer are served: test_any_k.py)
        model(points, torch.cat([init, init[:, :1]], dim=1))
    with pytest.raises(TypeError, match="model dtype"):
        model(points.float(), init.float())
    with pytest.raises(ValueError, match="steps"):
        model(points, init, steps=0)


@pytest.mark.parametrize("kwargs,needle", [
    (dict(d=0, k=3), "d"), (dict(d=2, k=0), "k"), (dict(d=2, k=3, embedding="ternary"), "embedding"),
    (dict(d=2, k=3, embedding="none"), "none"),
    (dict(d=2, k=3, embedding="binary", centroid_update="linear"), "binary"),
    (dict(d=2, k=3, attention="cosine"), "attention"), (dict(d=2, k=3, gamma=-1.0), "gamma"),
    (dict(d=2, k=3, n_layers=0), "n_layers"), (dict(d=2, k=3, attention="dot", embedding="binary"), "dot"),
])
def test_construction_arguments(kwargs, needle):
    with pytest.raises((ValueError, TypeError), match=needle):
        lloyd_transformer(**kwargs)


def test_task_and_init_arguments():
    with pytest.raises(ValueError, match="k=9"):
        TaskConfig(n=5, d=2, k=9)
    with pytest.raises(ValueError, match="family"):
        TaskConfig(family="uniform")
    with pytest.raises(ValueError, match="scale"):
        TaskConfig(scale=0.0)
    with pytest.raises(ValueError, match="method"):
        init_centroids(torch.rand(1, 10, 2), 3, "kmeans")
    with pytest.raises(ValueError, match="steps"):
        lloyd(*good(), steps=0)
    with pytest.raises(ValueError, match="empty"):
        lloyd(*good(), empty="drop")
    with pytest.raises(ValueError, match="codes"):
        points, init = good()
        init = init.clone()
        init[:, 0] = 50.0
        lloyd(points, init, 1, empty="nearest_code")


@pytest.mark.parametrize("kwargs", [dict(), dict(embedding="binary"), dict(attention="dot"),
                                    dict(self_attention="literal")])
def test_inputs_are_not_mutated(kwargs):
    points, init = good()
    points_copy, init_copy = points.clone(), init.clone()
    lloyd_transformer(3, 4, 3, **kwargs)(points, init)
    lloyd(points, init, 3)
    kmeans_objective(points, init)
    assert torch.equal(points, points_copy) and torch.equal(init, init_copy)


@pytest.mark.parametrize("kwargs", [dict(), dict(embedding="binary"), dict(attention="dot")])
def test_float32_agrees_with_float64(kwargs):
    """Well-separated tasks (scale 0.02): float32 construction within 1e-4 of float64 over 10 layers."""
    tasks = sample_tasks(TaskConfig(n=300, d=4, k=5, scale=0.02), 4, 9, dtype=torch.float64)
    init = init_centroids(tasks.points, 5, "kmeans++", 10)
    model64 = lloyd_transformer(4, 5, 10, dtype=torch.float64, **kwargs)
    model32 = lloyd_transformer(4, 5, 10, dtype=torch.float32, **kwargs)
    out64 = model64(tasks.points, init)
    out32 = model32(tasks.points.float(), init.float())
    assert torch.equal(out64.assignment_trajectory, out32.assignment_trajectory)
    assert (out32.centroid_trajectory.double() - out64.centroid_trajectory).abs().max() < 1e-4
