"""Readouts agree with the model output and with Lloyd, for constructions and learned models."""

import torch
from conftest import make_tasks

from interp.algorithms import lloyd
from interp.instruments.readouts import (
    cached_steps,
    centroid_trajectory,
    hard_assignments,
    objective_trajectory,
    soft_assignments,
)
from interp.model import KMeansTransformer
from interp.model.config import learned_model_config
from interp.model.constructions import lloyd_transformer


def test_readouts_of_the_construction_are_lloyd():
    points, init = make_tasks(120, 3, 4, batch=2, seed=8)
    for embedding in ("onehot", "binary"):
        model = lloyd_transformer(3, 4, n_layers=5, embedding=embedding)
        out, cache = model.run_with_cache(points, init)
        reference = lloyd(points, init, 5)
        assert cached_steps(cache) == 5
        assert torch.equal(hard_assignments(cache, model), reference.assignment_trajectory)
        soft = soft_assignments(cache)
        assert soft.shape == (2, 5, 120, 4) and torch.equal(soft.argmax(-1), reference.assignment_trajectory)
        trajectory = centroid_trajectory(cache, model, init)
        torch.testing.assert_close(trajectory, reference.centroid_trajectory, rtol=0, atol=1e-12)
        objective = objective_trajectory(points, trajectory)
        assert (objective[:, 1:] <= objective[:, :-1] + 1e-12).all()


def test_readouts_of_a_learned_model_match_its_output():
    points, init = (t.float() for t in make_tasks(80, 4, 3, batch=2, seed=9))
    torch.manual_seed(0)
    for embedding in ("onehot", "none"):
        model = KMeansTransformer(learned_model_config(4, 3, embedding)).eval()
        out, cache = model.run_with_cache(points, init, steps=3)
        assert torch.equal(hard_assignments(cache, model), out.readout_trajectory)
        torch.testing.assert_close(centroid_trajectory(cache, model, init), out.centroid_trajectory)
