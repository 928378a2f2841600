"""Symmetric and slot-specific parts: exact on equivariant models, the group average over all k! permutations
checked against a direct loop and for equivariance, the Monte Carlo estimate against the exact average, and the
block projection against its closed form (a I + b 11^T, equal columns / rows / biases)."""

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


def exact_average(model, points, centroids):
    """The update averaged over all k! slot orders, by a direct loop: output slot j of the run on C[:, order] belongs
    to the original centroid order[j]."""
    k = centroids.shape[1]
    total = torch.zeros_like(centroids)
    orders = list(itertools.permutations(range(k)))
    with torch.no_grad():
        for order in orders:
            output = model(points, centroids[:, list(order)], steps=1).centroids
            for j, original in enumerate(order):
                total[:, original] += output[:, j]
    return total / len(orders) - centroids


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
    assert [row["n_permutations"] for row in rows] == [1, 8, 64] and rows[-1]["distance_to_largest"] == 0.0
    assert rows[1]["distance_to_largest"] < rows[0]["distance_to_largest"]


def test_model_without_codes_is_equivariant():
    points, init = make_tasks(n=40, d=4, k=4, batch=3, seed=7)
    split = symmetric_split(random_model(4, 4, embedding="none"), points, init, None)
    assert float(split.specific.abs().max()) < 1e-12


def test_projection_has_the_closed_form_and_removes_the_slot_specific_part():
    model = random_model(3, 4, seed=2)
    projected = symmetrise_blocks(model, ["all"])
    d, e = 3, 4
    for name in ("attn_xc", "attn_xx", "attn_cx", "attn_cc"):
        before, after = getattr(model.layers[0], name), getattr(projected.layers[0], name)
        for matrix in ("W_Q", "W_K", "W_V"):
            W, P = getattr(before, matrix).detach(), getattr(after, matrix).detach()
            block = W[d:, d:]
            diagonal = block.diagonal().mean()
            off = (block.sum() - block.diagonal().sum()) / (e * e - e)
            expected = off + (diagonal - off) * torch.eye(e, dtype=torch.float64)  # a I + b 11^T
            assert torch.allclose(P[d:, d:], expected, atol=1e-14)
            assert torch.allclose(P[:d, d:], W[:d, d:].mean(1, keepdim=True).expand(d, e), atol=1e-14)
            assert torch.allclose(P[d:, :d], W[d:, :d].mean(0, keepdim=True).expand(e, d), atol=1e-14)
            assert torch.equal(P[:d, :d], W[:d, :d])
        for bias in ("b_Q", "b_K", "b_V"):
            b, p = getattr(before, bias).detach(), getattr(after, bias).detach()
            assert torch.allclose(p[d:], b[d:].mean().expand(e), atol=1e-14) and torch.equal(p[:d], b[:d])
    points, init = make_tasks(n=40, d=3, k=4, batch=3, seed=8)
    assert float(symmetric_split(projected, points, init, None).specific.abs().max()) < 1e-10
    assert torch.equal(model.layers[0].attn_xc.W_K, random_model(3, 4, seed=2).layers[0].attn_xc.W_K)  # a copy
    one = symmetrise_blocks(model, ["attn_cc.W_V.code->data"])
    assert torch.equal(one.layers[0].attn_cc.W_V[d:], model.layers[0].attn_cc.W_V[d:])
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
                                                                                  "attn_xc": groups["attn_xc"]},
                                                                slot_permutations(3))}
    assert rows["all"]["specific_remaining"] < 1e-20 and rows["intact"]["specific_remaining"] == 1.0
    assert rows["attn_xc"]["specific_remaining"] > 0


def test_slot_averaged_run_of_an_equivariant_model_is_the_model():
    points, init = make_tasks(n=60, d=4, k=3, batch=3, seed=11)
    model = lloyd_transformer(4, 3, 1)
    averaged = slot_averaged_run(model, points, init, steps=3, n_permutations=2, generator=1)
    direct = model(points, init, steps=3).centroid_trajectory
    assert float((averaged.trajectory - direct).abs().max()) < 1e-10
    mass = slot_mass(random_model(4, 3), points, init)
    assert sum(mass["mass"]) == pytest.approx(1.0) and sum(mass["lloyd_share"]) == pytest.approx(1.0)
