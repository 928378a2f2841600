"""``ClusteringOutput``'s labels mean the same for every model: the nearest returned centroid (the final E-step),
per step the nearest of the centroids the step received, and the empty clusters from those. Checked against a
nearest-centre rule written here in NumPy, on the shipped learned models as well as the constructions and Lloyd."""

import numpy as np
import pytest
import torch

from interp import lloyd, load_model
from interp.model.constructions import lloyd_transformer
from interp.tasks import TaskConfig, init_centroids, sample_tasks

SHIPPED = ("best", "main-onehot", "main-binary", "main-none", "main-equivariant")


def nearest(points: torch.Tensor, centroids: torch.Tensor) -> np.ndarray:
    """(b, n) index of the nearest centroid by explicit float64 differences (no expansion), ties to the lowest."""
    x, c = points.double().numpy(), centroids.double().numpy()
    distances = ((x[:, :, None, :] - c[:, None, :, :]) ** 2).sum(-1)  # (b, n, k)
    return distances.argmin(axis=2)


@pytest.fixture(scope="module")
def main_tasks():
    """Eight tasks of the main configuration (n = 512, d = 32, k = 10) with random starts, float32."""
    points = sample_tasks(TaskConfig(n=512, d=32, k=10), 8, 5).points.float()  # (8, 512, 32)
    return points, init_centroids(points, 10, "random", 6)


@pytest.fixture(scope="module")
def outputs(main_tasks, one_torch_thread):
    points, init = main_tasks
    runs = {}
    with torch.no_grad():
        for name in SHIPPED:
            runs[name] = load_model(name)(points, init, steps=20, generator=0)
    return runs


@pytest.mark.parametrize("name", SHIPPED)
def test_a_learned_models_labels_are_the_nearest_centroids(main_tasks, outputs, name):
    points, _ = main_tasks
    out = outputs[name]
    assert np.array_equal(out.assignments.numpy(), nearest(points, out.centroids))
    for step in range(out.assignment_trajectory.shape[1]):
        labels = nearest(points, out.centroid_trajectory[:, step])  # (b, n)
        assert np.array_equal(out.assignment_trajectory[:, step].numpy(), labels)
        members = np.stack([(labels == j).any(axis=1) for j in range(10)], axis=1)  # (b, k)
        assert np.array_equal(out.empty_clusters[:, step].numpy(), ~members)


def test_the_readout_is_the_models_own_and_says_so(main_tasks, outputs):
    """The one-hot model's decoded scratch slots are near chance (0.1) against the nearest returned centroid; the
    d-only model's attn_xc arg-max follows it (docs/hooks.md, "Read-outs")."""
    points, _ = main_tasks
    agreement = {name: float((outputs[name].readout_trajectory[:, -1].numpy()
                              == nearest(points, outputs[name].centroid_trajectory[:, -2])).mean())
                 for name in ("main-onehot", "main-none")}
    assert agreement["main-onehot"] < 0.3 and agreement["main-none"] > 0.9, agreement
    assert not outputs["main-onehot"].empty_clusters[:, -1].any()  # at its last step no cluster is empty


def test_construction_and_lloyd_labels_agree_and_the_readout_is_exact(small_tasks):
    """The exact construction's labels equal Lloyd's, and its decoded slots equal them too (the construction writes
    its codes); Lloyd's final labels are scikit-learn's final E-step."""
    points, init = small_tasks
    model = lloyd_transformer(3, 5, n_layers=6, embedding="binary")
    out = model(points, init)
    reference = lloyd(points, init, 6, empty="nearest_code", codes=model.codes)
    assert torch.equal(out.assignment_trajectory, reference.assignment_trajectory)
    assert torch.equal(out.readout_trajectory, reference.assignment_trajectory)
    assert np.array_equal(reference.assignments.numpy(), nearest(points, reference.centroids))
    assert np.array_equal(out.assignments.numpy(), nearest(points, out.centroids))
    assert reference.readout_trajectory is None


def test_spherical_kmeans_assigns_by_its_own_rule():
    """A variant with its own assignment rule uses it for the final labels: spherical k-means, the largest cosine."""
    from interp.algorithms import spherical_kmeans

    generator = torch.Generator().manual_seed(2)
    points = torch.nn.functional.normalize(torch.randn(3, 60, 4, generator=generator, dtype=torch.float64), dim=-1)
    init = points[:, :5].clone()
    out = spherical_kmeans(points, init, 4)
    cosines = np.einsum("bnd,bkd->bnk", points.numpy(), out.centroids.numpy())
    assert np.array_equal(out.assignments.numpy(), cosines.argmax(axis=2))
