"""Training for how the model is used (``TrainConfig`` slot_order, unroll, rollout, eval_steps, init_from,
attn_xx_identity): each checked against the same computation written out here, an interrupted run resuming to the
same weights, and the refusals."""

import copy

import pytest
import torch

from interp._checks import InvalidInput
from interp.model.checkpoint import load_checkpoint, load_model
from interp.tasks import init_centroids, sample_tasks
from interp.training.losses import smoothed_loss
from interp.training.state import TrainingState
from interp.training.train import TrainConfig, train, training_forward

pytestmark = [pytest.mark.usefixtures("one_torch_thread"),
              pytest.mark.filterwarnings("ignore::interp.model.transformer.OutOfTrainingRange")]

TINY = {"d": 2, "k": 3, "n": 16, "batch": 4, "val_tasks": 8, "eval_every": 4}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("init") / "tiny.safetensors"
    train(TrainConfig(**TINY, steps=4), path, progress=False)
    return path


@pytest.mark.parametrize("field, value, needle", [
    ("unroll", 0, "unroll"), ("eval_steps", 0, "eval_steps"), ("rollout", -1, "rollout"),
    ("slot_order", "random", "slot_order"), ("init_from", "", "init_from"), ("attn_xx_identity", 1, "attn_xx_identity"),
])
def test_bad_values_are_refused_naming_the_field(field, value, needle):
    with pytest.raises(InvalidInput, match=needle):
        TrainConfig(**TINY, **{field: value})


def test_init_from_copies_the_weights(tiny_model):
    source = load_model(tiny_model)
    state = TrainingState.start(TrainConfig(**TINY, steps=2, init_from=str(tiny_model), seed=99))
    for (name, mine), theirs in zip(state.model.named_parameters(), source.parameters()):
        assert torch.equal(mine, theirs), name
    local = TrainingState.start(TrainConfig(**TINY, steps=2, init_from=str(tiny_model), attn_xx_identity=True))
    assert local.model.config.attn_xx.identity
    assert all(torch.equal(a, b) for a, b in zip(local.model.parameters(), source.parameters()))


def test_init_from_a_model_of_another_config_is_refused(tiny_model):
    with pytest.raises(InvalidInput, match="init_from=.* is a model of another config"):
        TrainingState.start(TrainConfig(**{**TINY, "k": 4}, steps=2, init_from=str(tiny_model)))
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        TrainingState.start(TrainConfig(**TINY, steps=2, init_from="no-such-model"))


def test_training_forward_runs_the_rollout_without_gradient_then_the_unrolled_steps(tiny_model):
    config = TrainConfig(**TINY, steps=2, init_from=str(tiny_model), slot_order="shuffle", unroll=2, rollout=5,
                         seed=7)
    state = TrainingState.start(config)
    points = sample_tasks(config.task_config, config.batch, torch.Generator().manual_seed(1)).points
    init = init_centroids(points, config.k, "first")
    twin = copy.deepcopy(state)  # the same weights and random streams
    centroids = training_forward(state.model, points, init, state)
    loss = smoothed_loss(points, centroids, config.tau)
    loss.backward()

    free_steps = int(torch.randint(config.rollout + 1, (1,), generator=twin.tasks))  # the same draw, by hand
    start = init
    if free_steps:
        with torch.no_grad():
            start = twin.model(points, init, steps=free_steps, generator=twin.dropout, slot_order="shuffle").centroids
    expected = twin.model(points, start, steps=2, generator=twin.dropout, slot_order="shuffle").centroids
    smoothed_loss(points, expected, config.tau).backward()
    torch.testing.assert_close(centroids, expected, rtol=0, atol=0)
    for mine, theirs in zip(state.model.parameters(), twin.model.parameters()):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=0, atol=0)
    assert torch.equal(state.tasks.get_state(), twin.tasks.get_state())


def test_an_interrupted_run_resumes_to_the_same_weights(tiny_model, tmp_path):
    config = TrainConfig(**TINY, steps=8, init_from=str(tiny_model), slot_order="shuffle", unroll=2, rollout=3,
                         eval_steps=3, lr=0.003)
    whole, cut = tmp_path / "whole.safetensors", tmp_path / "cut.safetensors"
    train(config, whole, progress=False)
    train(config, cut, progress=False, stop_after=4)
    assert load_checkpoint(cut)[1]["step"] == 4
    meta = train(config, cut, progress=False)
    assert meta["step"] == 8 and len(meta["history"]) == 3
    expected, got = load_checkpoint(whole)[0], load_checkpoint(cut)[0]
    for name in expected:
        if name.startswith("model."):
            assert torch.equal(expected[name], got[name]), name
    assert load_model(whole).config.attn_xx.identity is False
