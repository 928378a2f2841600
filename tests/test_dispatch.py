"""The one switch to the reference computation (``interp.model.kernels.reference_only``): with it no kernel runs
(``dispatch.trace``), and the outputs equal the kernels' at sizes that take them; without it each kernel is taken
there."""

import os
import sys

import pytest
import torch
from child_processes import run
from conftest import make_tasks

from interp.constructions import lloyd_transformer
from interp.model import KMeansTransformer
from interp.model.config import learned_model_config
from interp.model.kernels import dispatch

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def kernels(paths) -> set[str]:
    """The kernels a traced forward ran (``dispatch.REFERENCE`` for the parts the reference computed)."""
    return {path.kernel for path in paths}


def test_learned_model_fused_softmax_against_the_reference():
    points, init = make_tasks(n=256, d=4, k=3, batch=3, seed=0)  # 256 x 256 pairs: the fused kernel's size
    torch.manual_seed(0)
    model = KMeansTransformer(learned_model_config(4, 3)).double().eval()
    with torch.no_grad():
        with dispatch.trace() as fast_paths:
            fast = model(points, init, steps=3)
        assert "fused_softmax" in kernels(fast_paths)
        with dispatch.reference_only(), dispatch.trace() as reference_paths:
            reference = model(points, init, steps=3)
        assert reference_paths == [(step, "block", "reference") for step in range(3)]
    torch.testing.assert_close(fast.centroids, reference.centroids, rtol=0, atol=1e-12)
    assert torch.equal(fast.assignments, reference.assignments)


def test_construction_kernels_against_the_reference():
    points, init = make_tasks(n=300, d=3, k=4, batch=3, seed=1)
    model = lloyd_transformer(3, 4, n_layers=5)
    with torch.no_grad():
        with dispatch.trace() as fast_paths:
            fast = model(points, init)
        assert {"labelled_stream", "hardmax_sets"} & kernels(fast_paths)
        with dispatch.reference_only(), dispatch.trace() as reference_paths:
            reference = model(points, init)
        assert kernels(reference_paths) == {dispatch.REFERENCE}, reference_paths
        fast_again = model(points, init)  # the switch is scoped to its block
    torch.testing.assert_close(fast.centroids, reference.centroids, rtol=0, atol=1e-12)
    assert torch.equal(fast.assignments, reference.assignments)
    assert torch.equal(fast_again.centroids, fast.centroids)


def test_the_environment_variable_switches_the_kernels_off():
    code = "from interp.model.kernels import dispatch; print(dispatch.kernels_allowed())"
    env = {**os.environ, "INTERP_REFERENCE": "1"}
    done = run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "False"
    with dispatch.reference_only():
        assert not dispatch.kernels_allowed()
        with dispatch.reference_only(False):
            assert dispatch.kernels_allowed()
    assert dispatch.kernels_allowed()
