"""Slot order at inference (``KMeansTransformer.forward(slot_order=...)``) and a checkpoint's recommended inference
settings: the shuffled run checked against fixed-order runs on the permuted centroids (a loop written here), its
output in the caller's order, reproducible from a seed, equal to the fixed order for models equivariant to the slot
order; the settings stored, restored and refused when malformed."""

import warnings

import pytest
import torch
from conftest import make_tasks

from interp import KMeansTransformer
from interp._checks import InvalidInput
from interp.constructions import lloyd_transformer
from interp.model.checkpoint import load_model, save_model
from interp.model.config import InferenceSettings, learned_model_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def random_model(d: int, k: int, embedding: str = "onehot", seed: int = 0) -> KMeansTransformer:
    """A learnable-configuration model with random weights, float64, eval mode: its update depends on slot order."""
    torch.manual_seed(seed)
    return KMeansTransformer(learned_model_config(d, k, embedding=embedding)).double().eval()


def recorded_orders(model, points, init, steps, seed):
    """The shuffled run and the slot order pi (b, k) of each step, read from ``blocks.{l}.hook_slot_order``."""
    out, cache = model.run_with_cache(points, init, steps=steps, slot_order="shuffle", generator=seed,
                                      names_filter=lambda name: name.endswith("hook_slot_order"))
    return out, [cache[f"blocks.{step}.hook_slot_order"] for step in range(steps)]


@pytest.mark.filterwarnings("ignore::interp.model.transformer.OutOfTrainingRange")
@pytest.mark.parametrize("embedding", ["onehot", "binary"])
def test_shuffled_step_is_the_fixed_step_on_permuted_centroids_mapped_back(embedding):
    points, init = make_tasks(batch=5, n=40, d=3, k=4, seed=1)
    model = random_model(3, 4, embedding)
    with torch.no_grad():
        out, orders = recorded_orders(model, points, init, steps=3, seed=11)
        current = init
        for step, order in enumerate(orders):
            assert sorted(order[0].tolist()) == [0, 1, 2, 3]  # a permutation of the slots
            slots = torch.stack([current[b, order[b]] for b in range(len(order))])  # slot j holds centroid pi(j)
            with warnings.catch_warnings():  # the random model's own centroids may leave the unit cube
                warnings.simplefilter("ignore")
                fixed = model(points, slots, steps=1, slot_order="fixed")
            expected = torch.empty_like(current)
            labels = torch.empty_like(fixed.assignments)
            for b in range(len(order)):
                expected[b, order[b]] = fixed.centroids[b]  # slot j's output belongs to centroid pi(j)
                labels[b] = order[b][fixed.readout_trajectory[b, 0]]  # the decoded slot, as centroid pi(slot)
            torch.testing.assert_close(out.centroid_trajectory[:, step + 1], expected, rtol=0, atol=1e-12)
            assert torch.equal(out.readout_trajectory[:, step], labels)
            current = expected
    assert not all(torch.equal(orders[0], order) for order in orders[1:])  # a fresh order at every step


def test_shuffle_is_reproducible_from_a_seed_and_changes_with_it():
    points, init = make_tasks(batch=4, n=30, d=2, k=3, seed=2)
    model = random_model(2, 3)
    with torch.no_grad():
        first = model(points, init, steps=4, slot_order="shuffle", generator=5)
        again = model(points, init, steps=4, slot_order="shuffle", generator=torch.Generator().manual_seed(5))
        other = model(points, init, steps=4, slot_order="shuffle", generator=6)
        fixed = model(points, init, steps=4)
    assert torch.equal(first.centroids, again.centroids)
    assert not torch.equal(first.centroids, other.centroids)
    assert not torch.equal(first.centroids, fixed.centroids)  # the random model's update depends on the order


@pytest.mark.parametrize("name", ["main-none", "main-equivariant"])
def test_equivariant_shipped_models_are_unchanged_by_shuffling(name):
    points, init = make_tasks(batch=3, n=64, d=32, k=10, seed=3)
    model = load_model(name).double()  # float64: rounding differences stay near 1e-15 over the steps
    with torch.no_grad():
        fixed = model(points, init, steps=5)
        shuffled = model(points, init, steps=5, slot_order="shuffle", generator=0)
    torch.testing.assert_close(shuffled.centroids, fixed.centroids, rtol=0, atol=1e-11)


def test_the_construction_is_unchanged_by_shuffling():
    points, init = make_tasks(batch=3, n=50, d=3, k=4, seed=4)
    model = lloyd_transformer(d=3, k=4, n_layers=6)
    with torch.no_grad():
        fixed = model(points, init)
        shuffled = model(points, init, slot_order="shuffle", generator=1)
    torch.testing.assert_close(shuffled.centroids, fixed.centroids, rtol=0, atol=1e-12)
    assert torch.equal(shuffled.assignments, fixed.assignments)


def test_slot_order_is_checked():
    points, init = make_tasks(batch=1, n=10, d=2, k=3, seed=0)
    with pytest.raises(InvalidInput, match="slot_order must be one of"):
        random_model(2, 3)(points, init, slot_order="random")
    with pytest.raises(InvalidInput, match="slot_order"):
        InferenceSettings(slot_order="sorted")
    with pytest.raises(InvalidInput, match="steps"):
        InferenceSettings(steps=0)


def test_recommended_settings_are_used_stored_and_restored(tmp_path):
    points, init = make_tasks(batch=2, n=30, d=2, k=3, seed=5)
    model = random_model(2, 3)
    model.inference = InferenceSettings(steps=4, slot_order="shuffle")
    with torch.no_grad():
        default = model(points, init, generator=9)
        explicit = model(points, init, steps=4, slot_order="shuffle", generator=9)
        overridden = model(points, init, steps=2, slot_order="fixed")
    assert default.centroid_trajectory.shape[1] == 5 and torch.equal(default.centroids, explicit.centroids)
    assert overridden.centroid_trajectory.shape[1] == 3
    save_model(tmp_path / "m.safetensors", model)
    loaded = load_model(tmp_path / "m.safetensors")
    assert loaded.inference == InferenceSettings(steps=4, slot_order="shuffle")
    with torch.no_grad():
        assert torch.equal(loaded(points, init, generator=9).centroids, default.centroids)
    plain = random_model(2, 3)
    save_model(tmp_path / "plain.safetensors", plain)
    assert load_model(tmp_path / "plain.safetensors").inference == InferenceSettings()


@pytest.mark.parametrize("inference, needle", [
    ({"slot_order": "sorted"}, "slot_order must be one of"),
    ({"steps": -1}, "steps"),
    ({"speed": 2}, "inference must be a JSON object with steps, slot_order"),
    ("shuffle", "inference must be a JSON object"),
])
def test_malformed_inference_metadata_is_refused(tmp_path, inference, needle):
    path = tmp_path / "bad.safetensors"
    save_model(path, random_model(2, 3), inference=inference)
    with pytest.raises(InvalidInput, match=needle):
        load_model(path)


def test_shipped_best_runs_twenty_shuffled_steps_by_default():
    model = load_model("best")  # and the Lloyd steps the hybrid study chose, which the forward never runs
    assert (model.inference.steps, model.inference.slot_order) == (20, "shuffle")
    points, init = make_tasks(batch=2, n=64, d=32, k=10, seed=6)
    with torch.no_grad():
        out = model(points.float(), init.float(), generator=0)
        explicit = model(points.float(), init.float(), steps=20, slot_order="shuffle", generator=0)
    assert out.centroid_trajectory.shape[1] == 21
    assert torch.equal(out.centroids, explicit.centroids)
