"""Acceptance: patching clean assignments into a corrupted construction run restores the clean centroids exactly."""

import math

import pytest
import torch
from conftest import make_tasks

from interp.instruments.patching import ablation_sweep, collapsed_init, patch_run, patching_sweep
from interp.model import KMeansTransformer
from interp.model.config import learned_model_config
from interp.model.constructions import lloyd_transformer
from interp.tasks import init_centroids


@pytest.fixture(scope="module")
def setup():
    points, clean_init = make_tasks(150, 3, 4, batch=3, seed=31)
    corrupted_init = init_centroids(points, 4, "random", 99)
    return points, clean_init, corrupted_init


@pytest.mark.parametrize("embedding", ["onehot", "binary"])
def test_clean_assignments_restore_clean_centroids_exactly(setup, embedding):
    points, clean_init, corrupted_init = setup
    model = lloyd_transformer(3, 4, n_layers=4, embedding=embedding, centroid_update="hardmax")
    clean, cache = model.run_with_cache(points, clean_init)
    corrupted = model(points, corrupted_init)
    assert not torch.allclose(clean.centroids, corrupted.centroids)
    for layer in range(4):
        patched = patch_run(model, points, corrupted_init, cache, layer, "assignments")
        # from the patched layer on, the trajectory is the clean one
        torch.testing.assert_close(patched.centroid_trajectory[:, layer + 1 :],
                                   clean.centroid_trajectory[:, layer + 1 :], rtol=0, atol=1e-12)
        assert torch.equal(patched.readout_trajectory[:, layer:], clean.readout_trajectory[:, layer:])
        assert torch.equal(patched.assignment_trajectory[:, layer + 1:], clean.assignment_trajectory[:, layer + 1:])


def test_sweep_scores_and_ablations_on_the_construction(setup):
    points, clean_init, corrupted_init = setup
    model = lloyd_transformer(3, 4, n_layers=2)
    effects = patching_sweep(model, points, clean_init, corrupted_init)
    by_site = {(e.layer, e.kind): e for e in effects}
    assert by_site[(0, "assignments")].restored == pytest.approx(1.0, abs=1e-9)
    assert by_site[(0, "centroids")].restored == pytest.approx(1.0, abs=1e-9)
    # the self-attention attn_xx only erases the (empty) old code at layer 0: patching it changes nothing
    assert by_site[(0, "attn_xx")].restored == pytest.approx(0.0, abs=1e-9)
    rows = {(r["attention"], r["ablation"]): r for r in ablation_sweep(model, points, clean_init)}
    assert rows[("attn_cx", "zero")]["change"] > 0.1  # without the update, centroids do not move to the means
    assert all(math.isfinite(r["log_objective"]) for r in rows.values())


def test_learned_model_patching_runs(setup):
    points, clean_init, corrupted_init = (t.float() for t in setup)
    torch.manual_seed(0)
    model = KMeansTransformer(learned_model_config(3, 4)).eval()
    effects = patching_sweep(model, points, clean_init, corrupted_init, steps=2)
    assert len(effects) == 2 * 6 and all(math.isfinite(e.log_objective) for e in effects)
    # patching the last centroid stream restores the clean output exactly, whatever the model
    collapsed = collapsed_init(clean_init)
    last = {e.kind: e for e in patching_sweep(model, points, clean_init, collapsed, steps=1)}
    assert last["centroids"].restored == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError, match="kind"):
        patch_run(model, points, corrupted_init, model.run_with_cache(points, clean_init)[1], 0, "queries")
