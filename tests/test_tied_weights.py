"""Slot-tied weights (``ModelConfig.slot_equivariant``): the model commutes with slot permutations exactly, its
weights have the tied form, it starts from the projection of the untied model of the same seed, and it trains,
saves and loads like any learned model."""

from __future__ import annotations

import itertools

import pytest
import torch

from interp._checks import InvalidInput
from interp.model import KMeansTransformer
from interp.model.checkpoint import load_model, save_model
from interp.model.config import learned_model_config
from interp.model.tied_weights import SlotTiedAttentionWeights
from interp.training.train import TrainConfig, train

ATTENTIONS = ("attn_xc", "attn_xx", "attn_cx", "attn_cc")


def _model(d: int, k: int, seed: int, tied: bool) -> KMeansTransformer:
    torch.manual_seed(seed)
    return KMeansTransformer(learned_model_config(d, k, slot_equivariant=tied)).double().eval()


def _tasks(d: int, k: int, b: int = 4, n: int = 30, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    points = torch.rand(b, n, d, generator=generator, dtype=torch.float64)
    return points, points[:, :k].clone()


def _code_permutation(d: int, k: int, permutation: tuple[int, ...]) -> torch.Tensor:
    """R = diag(I_d, P): the (D, D) matrix that permutes the k code features by ``permutation``."""
    order = list(range(d)) + [d + j for j in permutation]
    return torch.eye(d + k, dtype=torch.float64)[order]


def test_every_slot_permutation_permutes_the_output_exactly_and_the_untied_model_does_not():
    d, k = 3, 4
    tied, untied = _model(d, k, 5, True), _model(d, k, 5, False)
    points, centroids = _tasks(d, k)
    out_tied, out_untied = tied(points, centroids).centroids, untied(points, centroids).centroids  # (b, k, d)
    worst_tied, worst_untied = 0.0, 0.0
    for permutation in itertools.permutations(range(k)):  # all 24
        index = torch.tensor(permutation)
        worst_tied = max(worst_tied, (tied(points, centroids[:, index]).centroids - out_tied[:, index]).abs().max())
        worst_untied = max(worst_untied,
                           (untied(points, centroids[:, index]).centroids - out_untied[:, index]).abs().max())
    assert worst_tied < 1e-12
    assert worst_untied > 1e-3  # the same architecture untied reads slot identity


def test_every_tied_matrix_is_fixed_by_every_code_permutation():
    """R W R^T = W and R b = b for all permutations R of the code features: the defining property."""
    d, k = 3, 4
    layer = _model(d, k, 1, True).layers[0]
    for name in ATTENTIONS:
        weights = getattr(layer, name)
        assert isinstance(weights, SlotTiedAttentionWeights)
        for permutation in itertools.permutations(range(k)):
            rotation = _code_permutation(d, k, permutation)
            for matrix in ("W_Q", "W_K", "W_V"):
                value = getattr(weights, matrix).detach()
                assert torch.allclose(rotation @ value @ rotation.T, value, atol=0, rtol=0)
            for bias in ("b_Q", "b_K", "b_V"):
                value = getattr(weights, bias).detach()
                assert torch.equal(rotation @ value, value)


def test_the_tied_model_starts_at_the_projection_of_the_untied_model_of_the_same_seed():
    """Same seed: the tied initial weights are the untied ones averaged over code permutations, computed here as
    the mean of R W R^T over all k! permutations (independent of the module's closed form)."""
    d, k = 2, 4
    tied, untied = _model(d, k, 11, True).layers[0], _model(d, k, 11, False).layers[0]
    rotations = [_code_permutation(d, k, p) for p in itertools.permutations(range(k))]
    for name in ATTENTIONS:
        for matrix in ("W_Q", "W_K", "W_V"):
            full = getattr(getattr(untied, name), matrix).detach()  # (D, D)
            average = torch.stack([r @ full @ r.T for r in rotations]).mean(0)
            assert torch.allclose(getattr(getattr(tied, name), matrix).detach(), average, atol=1e-7)
        for bias in ("b_Q", "b_K", "b_V"):
            full = getattr(getattr(untied, name), bias).detach()
            average = torch.stack([r @ full for r in rotations]).mean(0)
            assert torch.allclose(getattr(getattr(tied, name), bias).detach(), average, atol=1e-7)
    free = sum(p.numel() for p in tied.parameters())
    assert free == 4 * (3 * (d * d + 2 * d + 2) + 3 * (d + 1))  # A, u, v, a, b per matrix; beta, c per bias


def test_training_keeps_the_model_equivariant_and_checkpoints_round_trip(tmp_path, one_torch_thread):
    config = TrainConfig(d=3, k=4, n=24, batch=4, val_tasks=8, steps=6, eval_every=3, slot_equivariant=True)
    out = tmp_path / "tied.safetensors"
    meta = train(config, out, progress=False)
    assert meta["step"] == 6 and meta["model_config"]["slot_equivariant"] is True
    model = load_model(out).double()
    points, centroids = _tasks(3, 4, seed=2)
    reversed_slots = torch.tensor([3, 2, 1, 0])
    out_plain = model(points, centroids).centroids
    out_reversed = model(points, centroids[:, reversed_slots]).centroids
    assert (out_reversed - out_plain[:, reversed_slots]).abs().max() < 1e-12
    initial = _model(3, 4, config.seed, True)
    moved = sum((a.detach() - b).abs().sum() for a, b in zip(model.parameters(), initial.parameters()))
    assert moved > 1e-3  # it trained
    saved = tmp_path / "copy.safetensors"
    save_model(saved, model)
    again = load_model(saved).double()
    assert torch.equal(again(points, centroids).centroids, out_plain)


@pytest.mark.parametrize("embedding", ["binary", "none"])
def test_slot_equivariant_needs_one_hot_codes(embedding):
    with pytest.raises(InvalidInput, match="slot_equivariant=True needs embedding='onehot'"):
        learned_model_config(4, 5, embedding, slot_equivariant=True)
    with pytest.raises(InvalidInput, match="slot_equivariant=True needs embedding='onehot'"):
        TrainConfig(d=4, k=5, embedding=embedding, slot_equivariant=True)
