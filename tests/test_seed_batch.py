"""Seeds trained together (interp.training.seed_batch) follow the runs train() gives them, resume, and report
divergence."""

import dataclasses

import pytest
import torch

from interp._checks import InvalidInput
from interp.model import KMeansTransformer, ModelConfig
from interp.model.attention import AttentionWeights, StackedAttentionWeights
from interp.model.block import Block, StackedLayerWeights
from interp.model.checkpoint import load_checkpoint
from interp.model.config import learned_model_config
from interp.model.embedding import embed_centroids, embed_points
from interp.training import seed_batch
from interp.training.seed_batch import train_seeds
from interp.training.train import TrainConfig, train


def _weights(path):
    tensors, meta = load_checkpoint(path)
    return {name: t for name, t in tensors.items() if name.startswith("model.")}, meta


# n = 128 puts the points' self-attention (128 x 128 pairs) on the fused path (its formed-pattern kernel) with sparse
# dropout; the other three attentions take the dense path with F.dropout's masks: both dropout draws are exercised.
@pytest.mark.slow
@pytest.mark.parametrize("embedding,loss,normaliser", [
    ("onehot", "softmin", "softmax"), ("binary", "sparsemax", "softmax"),
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


def test_a_diverging_seed_stops_and_the_others_go_on(tmp_path, one_torch_thread, monkeypatch):
    """The second seed's loss turns NaN at step 7: it stops there, its step-5 checkpoint kept and marked; the
    other seeds finish exactly as they train without it."""
    config = TrainConfig(d=3, k=2, n=32, batch=8, val_tasks=16, eval_every=5, steps=20)
    real_objective = seed_batch.smoothed_objective
    calls = {"n": 0}

    def objective_that_breaks(points, centroids, *args, **kwargs):
        per_task = real_objective(points, centroids, *args, **kwargs)  # (S * B,): one call per training step
        calls["n"] += 1
        broken = torch.zeros_like(per_task, dtype=torch.bool)
        broken[config.batch : 2 * config.batch] = calls["n"] == 7  # the second seed's tasks at step 7
        return torch.where(broken, float("nan"), per_task)

    monkeypatch.setattr(seed_batch, "smoothed_objective", objective_that_breaks)
    paths = [tmp_path / f"s{s}.safetensors" for s in range(3)]
    metas = train_seeds(config, [0, 1, 2], paths, progress=False)
    assert metas[1]["diverged"] == ("loss became non-finite at step 7; the last good checkpoint (step 5) is kept. "
                                    "Try a smaller lr or grad_clip.")
    assert metas[1]["step"] == 5 and [h["step"] for h in metas[1]["history"]] == [0, 5]
    weights, saved = _weights(paths[1])
    assert saved["diverged"] == metas[1]["diverged"] and all(torch.isfinite(t).all() for t in weights.values())
    assert [(m["step"], m["diverged"]) for m in (metas[0], metas[2])] == [(20, None), (20, None)]
    monkeypatch.setattr(seed_batch, "smoothed_objective", real_objective)
    alone = [tmp_path / f"alone{s}.safetensors" for s in (0, 2)]
    train_seeds(config, [0, 2], alone, progress=False)
    for with_diverged, without in zip((paths[0], paths[2]), alone):
        expected, _ = _weights(without)
        got, _ = _weights(with_diverged)
        for name in expected:
            torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-6)


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
    with pytest.raises(ValueError, match="outs must be a checkpoint file path, got the folder"):
        train_seeds(config, [1], [tmp_path], progress=False)
    train(config, tmp_path / "single.safetensors", progress=False)
    with pytest.raises(ValueError, match="written by train\\(\\)"):
        train_seeds(config, [config.seed], [tmp_path / "single.safetensors"], progress=False)
    train_seeds(config, [config.seed], [tmp_path / "batched.safetensors"], progress=False)
    with pytest.raises(ValueError, match="seed_batch trainer"):
        train(config, tmp_path / "batched.safetensors", progress=False)


# ----- the seed axis of the layer: S stacked models through one Block equal S single-model forwards -------------
def _models_and_streams(config, seeds, n, batch):
    """S float64 models of ``config`` (seeds ``seeds``) and per-model embedded streams (S, b, n, D), (S, b, k, D)."""
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(KMeansTransformer(config).double())
    generator = torch.Generator().manual_seed(100)
    points = torch.rand(len(seeds), batch, n, config.d, dtype=torch.float64, generator=generator)  # (S, b, n, d)
    init = points[:, :, : config.k].clone()  # (S, b, k, d)
    codes = models[0].codes  # (k, e)
    points_stream = torch.stack([embed_points(p, config.scratch_width, config.norm_slot) for p in points])
    centroids_stream = torch.stack([embed_centroids(c, codes, config.norm_slot) for c in init])
    return models, points_stream, centroids_stream


@pytest.mark.parametrize("config", [learned_model_config(3, 5, "onehot", dropout=0.0),
                                    learned_model_config(3, 5, "none", dropout=0.0),
                                    ModelConfig(d=3, k=5, ffn=True)], ids=["onehot", "none", "ffn"])
def test_stacked_block_equals_single_model_blocks(one_torch_thread, config):
    """n = 128: attn_xx (128 x 128 pairs) takes the fused path (its formed-pattern kernel), the other attentions the
    literal path."""
    models, points, centroids = _models_and_streams(config, seeds=[1, 2, 3], n=128, batch=2)
    block = Block(config)
    assert block.attn_xx.uses_fused(128, 128) and not block.attn_xc.uses_fused(128, 5)
    need_pattern = config.embedding == "none"
    stacked = StackedLayerWeights.stack([model.layers[0] for model in models])
    assert stacked.attn_xx.W_Q.shape == (3, config.d_model, config.d_model)
    points_out, centroids_out, pattern = block(points, centroids, stacked, need_pattern)  # (S, b, ...)
    for index, model in enumerate(models):
        single = block(points[index], centroids[index], model.layers[0], need_pattern)
        torch.testing.assert_close(points_out[index], single[0], rtol=0, atol=1e-12)
        torch.testing.assert_close(centroids_out[index], single[1], rtol=0, atol=1e-12)
        if need_pattern:
            torch.testing.assert_close(pattern[index], single[2], rtol=0, atol=1e-12)
    assert not torch.allclose(centroids_out[0], centroids_out[1])  # the models differ


@pytest.mark.parametrize("normaliser", ["softmax", "sparsemax", "gumbel"])
def test_stacked_block_draws_each_models_dropout_and_noise_as_its_single_forward(one_torch_thread, normaliser):
    """Training mode, dropout 0.2, one generator per model: model s's masks (sparse on the fused path, dense in
    keys-major layout for attn_xc) and Gumbel noise are those of its own forward from a copy of its generator."""
    config = learned_model_config(3, 5, "onehot", normaliser=normaliser, dropout=0.2)
    models, points, centroids = _models_and_streams(config, seeds=[4, 5], n=128, batch=2)
    block = Block(config).train()
    generators = [torch.Generator().manual_seed(seed) for seed in (40, 50)]
    copies = [torch.Generator().manual_seed(seed) for seed in (40, 50)]
    stacked = StackedLayerWeights.stack([model.layers[0] for model in models])
    _, centroids_out, _ = block(points, centroids, stacked, generator=generators)  # (S, b, k, D)
    for index, model in enumerate(models):
        _, single, _ = block(points[index], centroids[index], model.layers[0], generator=copies[index])
        torch.testing.assert_close(centroids_out[index], single, rtol=0, atol=1e-12)
        assert torch.equal(generators[index].get_state(), copies[index].get_state())  # the same draws, no more
    block.eval()
    _, without_dropout, _ = block(points, centroids, stacked)
    assert (without_dropout - centroids_out).abs().max() > 1e-3  # dropout and noise did act


def test_stacked_weights_refuse_hooks_and_mismatched_generators():
    config = learned_model_config(2, 3, dropout=0.0)
    models, points, centroids = _models_and_streams(config, seeds=[1, 2], n=8, batch=1)
    block = Block(config)
    stacked = StackedLayerWeights.stack([model.layers[0] for model in models])
    with pytest.raises(InvalidInput, match="need 2 generators"):
        block(points, centroids, stacked, generator=[torch.Generator()])
    with pytest.raises(InvalidInput, match="take tokens \\(S, b, t, D\\)"):
        block(points[0], centroids[0], stacked)
    block.attn_xc.hook_pattern.add_hook(lambda tensor, hook: tensor)
    with pytest.raises(InvalidInput, match="need single-model weights"):
        block(points, centroids, stacked)
    block.attn_xc.hook_pattern.remove_hooks()
    with pytest.raises(InvalidInput, match="same widths"):
        StackedAttentionWeights.stack([models[0].layers[0].attn_xc, AttentionWeights(7, bias=True)])
