"""Seeds trained together (interp.training.seed_batch) follow the runs train() gives them, resume, and report divergence."""

import dataclasses

import pytest
import torch

from interp.model.checkpoint import load_checkpoint
from interp.training.seed_batch import train_seeds
from interp.training.train import TrainConfig, train


def _weights(path):
    tensors, meta = load_checkpoint(path)
    return {name: t for name, t in tensors.items() if name.startswith("model.")}, meta


# n = 128 puts the points' self-attention (128 x 128 pairs) on the fused flash path with sparse dropout; the
# other three attentions take the dense path with F.dropout's masks: both dropout draws are exercised.
@pytest.mark.parametrize("embedding,loss,normaliser", [("onehot", "softmin", "softmax"), ("binary", "sparsemax", "softmax"),
                                                       ("none", "softmin", "softmax"), ("onehot", "softmin", "sparsemax")])
def test_batched_seeds_match_one_by_one_training(tmp_path, one_torch_thread, embedding, loss, normaliser):
    config = TrainConfig(d=3, k=5, n=128, batch=4, val_tasks=16, eval_every=10, steps=30, embedding=embedding,
                         loss=loss, tau=0.25, normaliser=normaliser)
    assert config.dropout == 0.01  # the papers' attention dropout is on
    seeds = [11, 12, 13]
    batched = train_seeds(config, seeds, [tmp_path / f"b{s}.safetensors" for s in seeds], progress=False)
    for seed, meta in zip(seeds, batched):
        single = train(dataclasses.replace(config, seed=seed), tmp_path / f"o{seed}.safetensors", progress=False)
        assert meta["step"] == single["step"] == 30 and meta["diverged"] is None
        rel_batched = [h["relative_objective"] for h in meta["history"]]
        rel_single = [h["relative_objective"] for h in single["history"]]
        assert len(rel_batched) == len(rel_single) == 4
        assert rel_batched[0] == pytest.approx(rel_single[0], rel=1e-5)  # same initial weights
        assert rel_batched == pytest.approx(rel_single, rel=1e-4)
        assert [h["lr"] for h in meta["history"]] == [h["lr"] for h in single["history"]]
        weights_batched, _ = _weights(tmp_path / f"b{seed}.safetensors")
        weights_single, _ = _weights(tmp_path / f"o{seed}.safetensors")
        for name in weights_single:
            assert torch.allclose(weights_batched[name], weights_single[name], atol=1e-4, rtol=1e-4), name
    # different seeds are different models
    first, _ = _weights(tmp_path / "b11.safetensors")
    second, _ = _weights(tmp_path / "b12.safetensors")
    assert not torch.allclose(first["model.layers.0.attn_xc.W_Q"], second["model.layers.0.attn_xc.W_Q"])


def test_interrupted_batched_run_resumes_to_the_same_weights(tmp_path, one_torch_thread):
    config = TrainConfig(d=3, k=4, n=40, batch=4, val_tasks=8, eval_every=5, steps=20)
    seeds = [1, 2]
    whole = [tmp_path / f"whole{s}.safetensors" for s in seeds]
    parts = [tmp_path / f"part{s}.safetensors" for s in seeds]
    train_seeds(config, seeds, whole, progress=False)
    stopped = train_seeds(config, seeds, parts, progress=False, stop_after=12)
    assert [m["step"] for m in stopped] == [10, 10]  # the last checkpoint before the interruption
    resumed = train_seeds(config, seeds, parts, progress=False)
    for a, b, meta in zip(whole, parts, resumed):
        weights_a, meta_a = _weights(a)
        weights_b, _ = _weights(b)
        assert meta["step"] == 20 and meta["history"] == meta_a["history"]
        assert all(torch.equal(weights_a[name], weights_b[name]) for name in weights_a)


def test_seeds_at_different_steps_resume_in_groups(tmp_path, one_torch_thread):
    config = TrainConfig(d=2, k=3, n=24, batch=4, val_tasks=8, eval_every=5, steps=15)
    train_seeds(config, [7], [tmp_path / "s7.safetensors"], progress=False, stop_after=5)
    metas = train_seeds(config, [7, 8], [tmp_path / "s7.safetensors", tmp_path / "s8.safetensors"], progress=False)
    assert [m["step"] for m in metas] == [15, 15]
    alone = train_seeds(config, [7], [tmp_path / "alone7.safetensors"], progress=False)[0]
    assert metas[0]["history"] == alone["history"]


def test_a_diverging_seed_stops_and_the_others_go_on(tmp_path, one_torch_thread):
    config = TrainConfig(d=3, k=2, n=32, batch=8, val_tasks=16, eval_every=5, steps=40, lr=1e4)
    paths = [tmp_path / f"s{s}.safetensors" for s in range(3)]
    metas = train_seeds(config, [0, 1, 2], paths, progress=False)
    diverged = [m for m in metas if m["diverged"]]
    finished = [m for m in metas if not m["diverged"]]
    assert diverged and finished
    for meta, path in zip(metas, paths):
        weights, saved = _weights(path)
        assert saved["diverged"] == meta["diverged"]
        assert all(torch.isfinite(t).all() for t in weights.values())  # the last good weights are kept
        assert meta["step"] == (40 if not meta["diverged"] else meta["history"][-1]["step"])
    # the note names the step; at lr = 1e4 the dynamics are chaotic, so train() is not compared step by step
    assert "non-finite at step" in diverged[0]["diverged"]


def test_bad_arguments_are_named(tmp_path):
    config = TrainConfig(d=2, k=2, n=16, batch=2, val_tasks=4, steps=2)
    with pytest.raises(ValueError, match="normaliser='gumbel'"):
        train_seeds(dataclasses.replace(config, normaliser="gumbel"), [0], [tmp_path / "a"], progress=False)
    with pytest.raises(ValueError, match="seeds must be distinct"):
        train_seeds(config, [1, 1], [tmp_path / "a", tmp_path / "b"], progress=False)
    with pytest.raises(ValueError, match="seeds must be a non-empty list"):
        train_seeds(config, [], [], progress=False)
    with pytest.raises(ValueError, match="outs must give one checkpoint path per seed"):
        train_seeds(config, [1, 2], [tmp_path / "a"], progress=False)
    with pytest.raises(ValueError, match="outs must be checkpoint file paths"):
        train_seeds(config, [1], [tmp_path], progress=False)
    train(config, tmp_path / "single.safetensors", progress=False)
    with pytest.raises(ValueError, match="written by train\\(\\)"):
        train_seeds(config, [config.seed], [tmp_path / "single.safetensors"], progress=False)
    train_seeds(config, [config.seed], [tmp_path / "batched.safetensors"], progress=False)
    with pytest.raises(ValueError, match="seed_batch trainer"):
        train(config, tmp_path / "batched.safetensors", progress=False)
