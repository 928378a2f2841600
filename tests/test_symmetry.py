"""Symmetric and slot-specific parts: exact on equivariant models, the group average over all k! permutations
checked against a direct loop and for equivariance, the Monte Carlo estimate against the exact average, the block
projection against the mean of R W R^T over every permutation R of the code features, and slot masses by hand."""

import itertools

import pytest
import torch
from conftest import make_tasks

from interp import KMeansTransformer
from interp._checks import InvalidInput
from interp.constructions import lloyd_transformer
from interp.instruments.symmetry import (
    block_groups,
    block_symmetrisation,
    code_blocks,
    slot_averaged_run,
    slot_mass,
    slot_permutations,
    specific_by_path,
    symmetric_convergence,
    symmetric_split,
    symmetrise_blocks,
)
from interp.model.config import learned_model_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def random_model(d: int, k: int, embedding: str = "onehot", seed: int = 0) -> KMeansTransformer:
    """A learnable-configuration model with random (nn.Linear-style) weights, float64, eval mode: not equivariant."""
    torch.manual_seed(seed)
    return KMeansTransformer(learned_model_config(d, k, embedding=embedding)).double().eval()


def average_over(model, points, centroids, orders):
    """The update averaged over the given slot orders, by a direct loop: output slot j of the run on C[:, order]
    belongs to the original centroid order[j]."""
    total = torch.zeros_like(centroids)
    with torch.no_grad():
        for order in orders:
            output = model(points, centroids[:, list(order)], steps=1).centroids
            for j, original in enumerate(order):
                total[:, original] += output[:, j]
    return total / len(orders) - centroids


def exact_average(model, points, centroids):
    """The update averaged over all k! slot orders (``average_over``)."""
    return average_over(model, points, centroids, list(itertools.permutations(range(centroids.shape[1]))))


def test_permutations_all_and_random():
    every = slot_permutations(4)
    assert every.shape == (24, 4) and len({tuple(row) for row in every.tolist()}) == 24
    first, second = slot_permutations(10, 5, 3), slot_permutations(10, 5, 3)
    assert torch.equal(first, second) and bool((first.sort(1).values == torch.arange(10)).all())
    with pytest.raises(InvalidInput):
        slot_permutations(9)


@pytest.mark.parametrize("k", [3, 4])
def test_construction_has_no_slot_specific_part(k):
    points, init = make_tasks(n=80, d=4, k=k, batch=4, seed=2)
    split = symmetric_split(lloyd_transformer(4, k, 1), points, init, None)
    assert split.exhaustive and split.n_permutations == [6, 24][k - 3]
    assert float(split.specific.abs().max()) < 1e-10
    assert split.r2_symmetric == pytest.approx(1.0, abs=1e-12) and split.monte_carlo_error == 0.0


def test_group_average_matches_a_direct_loop_and_is_equivariant():
    model = random_model(4, 3)
    points, init = make_tasks(n=40, d=4, k=3, batch=3, seed=5)
    split = symmetric_split(model, points, init, None)
    reference = exact_average(model, points, init)
    assert float((split.symmetric - reference).abs().max()) < 1e-12
    assert split.permutation_spread > 1e-5  # random weights read slot identity (a little)
    swapped = [2, 0, 1]  # the symmetric part of the permuted start is the permuted symmetric part
    moved = symmetric_split(model, points, init[:, swapped], None)
    assert float((moved.symmetric + init[:, swapped] - (split.symmetric + init)[:, swapped]).abs().max()) < 1e-12
    update = split.update
    expected_r2 = 1 - ((update - reference) ** 2).sum() / ((update - update.mean()) ** 2).sum()
    assert split.r2_symmetric == pytest.approx(float(expected_r2), abs=1e-12)


def test_monte_carlo_estimate_approaches_the_exact_average():
    model = random_model(4, 4, seed=1)
    points, init = make_tasks(n=40, d=4, k=4, batch=4, seed=6)
    exact = symmetric_split(model, points, init, None)
    estimate = symmetric_split(model, points, init, 200, generator=9)
    total = float(((exact.update - exact.update.mean()) ** 2).sum())
    error = float(((estimate.symmetric - exact.symmetric) ** 2).sum()) / total
    assert error < 3 * estimate.monte_carlo_error  # E[error] = monte_carlo_error
    assert estimate.permutation_spread == pytest.approx(exact.permutation_spread, rel=0.25)
    assert abs(estimate.r2_symmetric_corrected - exact.r2_symmetric) < abs(estimate.r2_symmetric - exact.r2_symmetric)
    rows = symmetric_convergence(model, points, init, counts=(1, 8, 64), generator=9)
    assert [row["n_permutations"] for row in rows] == [1, 8, 64]
    assert rows[1]["distance_to_largest"] < rows[0]["distance_to_largest"]
    # the estimates from the first 1 and 8 of the 64 slot orders, against the 64, by a direct loop over the runs
    orders = slot_permutations(4, 64, 9)
    estimates = {count: average_over(model, points, init, orders[:count].tolist()) for count in (1, 8, 64)}
    for row in rows[:2]:
        distance = float(((estimates[row["n_permutations"]] - estimates[64]) ** 2).sum()) / total
        assert row["distance_to_largest"] == pytest.approx(distance, rel=1e-9)


def test_model_without_codes_is_equivariant():
    points, init = make_tasks(n=40, d=4, k=4, batch=3, seed=7)
    split = symmetric_split(random_model(4, 4, embedding="none"), points, init, None)
    assert float(split.specific.abs().max()) < 1e-12


def code_permutation(d: int, e: int, order: tuple[int, ...]) -> torch.Tensor:
    """R = diag(I_d, P): the (D, D) matrix that permutes the e code features by ``order``."""
    return torch.eye(d + e, dtype=torch.float64)[list(range(d)) + [d + j for j in order]]


def test_projection_is_the_average_over_code_permutations_and_removes_the_slot_specific_part():
    """The projection against its definition, computed here directly: the mean of R W R^T (and of R b) over all
    4! permutations R of the code features; data->data entries and data biases are untouched by every R."""
    model = random_model(3, 4, seed=2)
    projected = symmetrise_blocks(model, ["all"])
    d, e = 3, 4
    rotations = [code_permutation(d, e, order) for order in itertools.permutations(range(e))]
    for name in ("attn_xc", "attn_xx", "attn_cx", "attn_cc"):
        before, after = getattr(model.layers[0], name), getattr(projected.layers[0], name)
        for matrix in ("W_Q", "W_K", "W_V"):
            W = getattr(before, matrix).detach()
            average = torch.stack([r @ W @ r.T for r in rotations]).mean(0)
            assert torch.allclose(getattr(after, matrix).detach(), average, rtol=0, atol=1e-14), (name, matrix)
            assert torch.equal(getattr(after, matrix)[:d, :d], W[:d, :d])
        for bias in ("b_Q", "b_K", "b_V"):
            b = getattr(before, bias).detach()
            average = torch.stack([r @ b for r in rotations]).mean(0)
            assert torch.allclose(getattr(after, bias).detach(), average, rtol=0, atol=1e-14), (name, bias)
    points, init = make_tasks(n=40, d=3, k=4, batch=3, seed=8)
    assert float(symmetric_split(projected, points, init, None).specific.abs().max()) < 1e-10
    assert torch.equal(model.layers[0].attn_xc.W_K, random_model(3, 4, seed=2).layers[0].attn_xc.W_K)  # a copy
    # one block alone: only W_V's data rows x code columns change, to the group average's entries there
    one = symmetrise_blocks(model, ["attn_cc.W_V.code->data"])
    W = model.layers[0].attn_cc.W_V.detach()
    average = torch.stack([r @ W @ r.T for r in rotations]).mean(0)
    changed = one.layers[0].attn_cc.W_V.detach().clone()
    assert torch.allclose(changed[:d, d:], average[:d, d:], rtol=0, atol=1e-14)
    changed[:d, d:] = W[:d, d:]
    assert torch.equal(changed, W) and not torch.allclose(average[:d, d:], W[:d, d:])
    with pytest.raises(InvalidInput):
        symmetrise_blocks(model, ["attn_cc.W_V.nothing"])


def test_path_split_of_the_slot_specific_part_sums_to_it():
    model = random_model(4, 3, seed=3)
    points, init = make_tasks(n=40, d=4, k=3, batch=3, seed=9)
    result = specific_by_path(model, points, init, slot_permutations(3))
    split = symmetric_split(model, points, init, None)
    assert float((sum(result["specific"].values()) - split.specific).abs().max()) < 1e-10
    assert float((sum(result["fine_specific"].values()) - split.specific).abs().max()) < 1e-10
    assert sum(result["specific_shares"].values()) == pytest.approx(1.0, abs=1e-10)


def test_symmetrising_every_block_leaves_no_slot_specific_variance():
    model = random_model(4, 3, seed=4)
    points, init = make_tasks(n=40, d=4, k=3, batch=3, seed=10)
    groups = block_groups(model)
    assert groups["all"] == code_blocks(model) and "attn_xc.K" in groups
    rows = {row["group"]: row for row in block_symmetrisation(model, points, init, {"all": groups["all"],
                                                                                  "attn_xc": groups["attn_xc"],
                                                                                  "none": []},
                                                                slot_permutations(3))}
    assert rows["all"]["specific_remaining"] < 1e-20
    assert rows["attn_xc"]["specific_remaining"] > 0
    # symmetrising no block leaves the model: all of its slot-specific variance remains, its update is the model's
    assert rows["none"]["specific_remaining"] == pytest.approx(1.0, abs=1e-12)
    assert rows["none"]["update_r2"] == 1.0 and rows["none"]["log_objective"] == rows["intact"]["log_objective"]
    # the intact model's slot-specific variance (relative to its update's) is the spread of the symmetric split
    spread = symmetric_split(model, points, init, None).permutation_spread
    assert spread > 1e-6 and rows["intact"]["specific_variance"] == pytest.approx(spread, rel=1e-9)


def test_slot_averaged_run_of_an_equivariant_model_is_the_model():
    points, init = make_tasks(n=60, d=4, k=3, batch=3, seed=11)
    model = lloyd_transformer(4, 3, 1)
    averaged = slot_averaged_run(model, points, init, steps=3, n_permutations=2, generator=1)
    direct = model(points, init, steps=3).centroid_trajectory
    assert float((averaged.trajectory - direct).abs().max()) < 1e-10
    # the construction's attn_xc is hard: its mass on a slot is the share of points nearest to that centroid
    mass = slot_mass(model, points, init)
    assert mass["mass"] == pytest.approx(mass["lloyd_share"], abs=1e-12) and mass["argmax_share"] == mass["mass"]
    assert max(mass["lloyd_share"]) - min(mass["lloyd_share"]) > 0.01  # unequal shares: the slots are told apart


def test_slot_mass_by_hand():
    """One task on a line, centroids at 0, 1 and 5: points -0.1, 0.1, 0.2 are nearest to 0, 0.9 to 1, 4 and 6 to 5,
    so the shares of points are 3/6, 1/6 and 2/6 (the construction's hard attention puts all mass there too)."""
    line = torch.tensor([-0.1, 0.1, 0.2, 0.9, 4.0, 6.0], dtype=torch.float64)
    points = torch.stack([line, torch.zeros(6, dtype=torch.float64)], -1)[None]  # (1, 6, 2)
    centroids = torch.tensor([[[0.0, 0.0], [1.0, 0.0], [5.0, 0.0]]], dtype=torch.float64)  # (1, 3, 2)
    mass = slot_mass(lloyd_transformer(2, 3, 1), points, centroids)
    for key in ("lloyd_share", "argmax_share", "mass"):
        assert mass[key] == pytest.approx([3 / 6, 1 / 6, 2 / 6], abs=1e-12), key
