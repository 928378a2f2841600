"""Training learns, resumes exactly after a kill, and stops cleanly on a non-finite loss (paper 2, §3)."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from child_processes import run, running
from safetensors import safe_open

import interp.training.train as train_module
from interp._checks import InvalidInput
from interp.model import KMeansTransformer
from interp.model.checkpoint import load_checkpoint, load_model
from interp.training.state import TrainingState
from interp.training.train import TrainConfig, TrainingDiverged, train

TINY = dict(d=4, k=3, n=64, batch=16, val_tasks=64)


def test_short_run_lowers_the_relative_validation_objective(tmp_path):
    meta = train(TrainConfig(**TINY, steps=200, eval_every=50), tmp_path / "run.safetensors", progress=False)
    curve = [entry["relative_objective"] for entry in meta["history"]]
    assert [entry["step"] for entry in meta["history"]] == [0, 50, 100, 150, 200]
    assert curve[-1] < 0.5 * curve[0], curve
    model = load_model(tmp_path / "run.safetensors")
    assert not model.training and model.config.d == 4


def _checkpoint_step(path: Path) -> int:
    try:
        with safe_open(str(path), framework="pt") as handle:
            return int(handle.metadata()["step"])
    except Exception:
        return -1


def _train_command(out: Path, steps: int) -> list[str]:
    return [sys.executable, "-m", "interp.cli", "train", "--out", str(out), "--threads", "1", "--no-progress",
            "--d", "4", "--k", "3", "--n", "64", "--batch", "16", "--val-tasks", "32", "--eval-every", "20",
            "--steps", str(steps)]


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights(tmp_path):
    steps = 300
    reference, interrupted = tmp_path / "reference.safetensors", tmp_path / "interrupted.safetensors"
    run(_train_command(reference, steps), check=True, capture_output=True)
    with running(_train_command(interrupted, steps), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as process:
        deadline = time.time() + 120
        while _checkpoint_step(interrupted) < 100 and time.time() < deadline and process.poll() is None:
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait()
    killed_at = _checkpoint_step(interrupted)
    assert 100 <= killed_at < steps, f"the run was not interrupted mid-way (checkpoint step {killed_at})"
    run(_train_command(interrupted, steps), check=True, capture_output=True)
    expected, _ = load_checkpoint(reference)
    got, meta = load_checkpoint(interrupted)
    assert meta["step"] == steps
    for name in expected:
        if name.startswith("model."):
            assert torch.equal(expected[name], got[name]), name


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    calls = {"n": 0}
    real_loss = train_module.smoothed_loss

    def loss_that_breaks(*args, **kwargs):
        calls["n"] += 1
        value = real_loss(*args, **kwargs)
        return value * float("nan") if calls["n"] == 35 else value

    monkeypatch.setattr(train_module, "smoothed_loss", loss_that_breaks)
    out = tmp_path / "run.safetensors"
    with pytest.raises(TrainingDiverged, match="step 35"):
        train(TrainConfig(**TINY, steps=100, eval_every=10), out, progress=False)
    tensors, meta = load_checkpoint(out)
    assert meta["step"] == 30
    assert all(torch.isfinite(t).all() for name, t in tensors.items() if name.startswith("model."))


def test_resume_with_another_config_is_refused(tmp_path):
    out = tmp_path / "run.safetensors"
    train(TrainConfig(**TINY, steps=10, eval_every=10), out, progress=False)
    with pytest.raises(ValueError, match="different training config"):
        train(TrainConfig(**{**TINY, "k": 2}, steps=10, eval_every=10), out, progress=False)
    # more steps extend the same run
    meta = train(TrainConfig(**TINY, steps=20, eval_every=10), out, progress=False)
    assert meta["step"] == 20


@pytest.mark.parametrize("field,value", [("tau", 0.0), ("lr", -1.0), ("loss", "hinge"), ("embedding", "ternary"),
                                         ("steps", 0), ("plateau_factor", 1.5), ("grad_clip", 0.0), ("k", 100)])
def test_train_config_rejects_bad_values(field, value):
    with pytest.raises((ValueError, TypeError), match=field if field != "k" else "k="):
        TrainConfig(**{**TINY, field: value})


def test_training_state_saves_and_loads_every_part(tmp_path):
    config = TrainConfig(**TINY, steps=10, eval_every=5)
    state = TrainingState.start(config)
    state.record(1.5, loss=None)
    loss = sum((p * p).sum() for p in state.model.parameters())
    loss.backward()
    state.optimizer.step()  # Adam now has moments to save
    state.step = 3
    torch.rand(5, generator=state.tasks), torch.rand(7, generator=state.dropout)  # move both streams on
    path = tmp_path / "state.safetensors"
    meta = state.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.safetensors"]  # atomic: no temporary file left
    tensors, saved = load_checkpoint(path)
    # train()'s format: the dropout stream under rng.dropout, no trainer tag
    assert "rng.dropout" in tensors and "rng.tasks" in tensors and "rng.torch" not in tensors
    assert "trainer" not in saved and saved == meta
    loaded = TrainingState.load(path, TrainConfig(**TINY, steps=20, eval_every=5))  # more steps extend the run
    assert loaded.step == 3 and loaded.history == [{"step": 0, "loss": None, "relative_objective": 1.5, "lr": 0.01}]
    for (name, a), (_, b) in zip(state.model.state_dict().items(), loaded.model.state_dict().items()):
        assert torch.equal(a, b), name
    for a, b in zip(state.model.parameters(), loaded.model.parameters()):
        assert torch.equal(state.optimizer.state[a]["exp_avg"], loaded.optimizer.state[b]["exp_avg"])
        assert torch.equal(state.optimizer.state[a]["exp_avg_sq"], loaded.optimizer.state[b]["exp_avg_sq"])
    assert loaded.scheduler.state_dict() == state.scheduler.state_dict()
    assert torch.equal(loaded.validation.points, state.validation.points)  # drawn again from the seed
    assert torch.equal(torch.rand(4, generator=loaded.tasks), torch.rand(4, generator=state.tasks))
    assert torch.equal(torch.rand(4, generator=loaded.dropout), torch.rand(4, generator=state.dropout))
    assert loaded.model.training
    with pytest.raises(InvalidInput, match="different training config"):
        TrainingState.load(path, TrainConfig(**{**TINY, "lr": 0.1}, steps=10, eval_every=5))


def test_dropout_stream_starts_where_torchs_global_rng_stands_after_initialisation():
    """train() drew dropout from torch's global RNG right after seeding it and initialising the model; the state's
    dropout stream starts there, so checkpoints that saved that RNG (rng.torch) resume into the same draws."""
    config = TrainConfig(**TINY, steps=10)
    state = TrainingState.start(config)
    torch.manual_seed(config.seed)
    seeded = torch.get_rng_state()
    KMeansTransformer(config.model_config())
    assert torch.equal(state.dropout.get_state(), torch.get_rng_state())
    assert not torch.equal(state.dropout.get_state(), seeded)  # the initialisation drew from it


def test_a_file_with_the_old_name_of_the_dropout_stream_resumes_to_the_same_weights(tmp_path):
    """Files train() wrote before the dropout stream was named rng.dropout hold it as rng.torch: they resume, and the
    resumed run ends with the same weights as one resumed from the current name."""
    from interp.model.checkpoint import save_checkpoint

    config = TrainConfig(**TINY, steps=4, eval_every=2)
    current, old = tmp_path / "current.safetensors", tmp_path / "old.safetensors"
    train(config, current, progress=False, stop_after=2)
    tensors, meta = load_checkpoint(current)
    tensors["rng.torch"] = tensors.pop("rng.dropout")
    save_checkpoint(old, tensors, meta)
    for path in (current, old):
        train(config, path, progress=False)
    expected, got = load_checkpoint(current)[0], load_checkpoint(old)[0]
    assert "rng.dropout" in got and "rng.torch" not in got  # the resumed run writes the current name
    for name in expected:
        if name.startswith("model."):
            assert torch.equal(expected[name], got[name]), name


def _as_seed_batched(path, diverged=None):
    """Rewrite train()'s checkpoint at ``path`` as the former seed-batched trainer wrote its files: the same tensors
    and metadata, plus metadata trainer "seed_batch" and diverged (null, or why the seed stopped early)."""
    from interp.model.checkpoint import save_checkpoint

    tensors, meta = load_checkpoint(path)
    save_checkpoint(path, tensors, {**meta, "trainer": "seed_batch", "diverged": diverged})


def test_a_checkpoint_of_the_former_seed_batched_trainer_loads_and_resumes(tmp_path):
    """Its layout is train()'s (weights, Adam, scheduler, rng.tasks and rng.dropout, history): it loads as a model,
    and train() resumes it to the weights and history of an uninterrupted run, writing its own format from then on."""
    config = TrainConfig(**TINY, steps=4, eval_every=2)
    whole, batched = tmp_path / "whole.safetensors", tmp_path / "batched.safetensors"
    train(config, whole, progress=False)
    train(config, batched, progress=False, stop_after=2)
    _as_seed_batched(batched)
    assert load_checkpoint(batched)[1]["trainer"] == "seed_batch"
    model = load_model(batched)
    assert not model.training and model.config == load_model(whole).config
    resumed = train(config, batched, progress=False)
    assert resumed["step"] == 4 and "trainer" not in resumed and "diverged" not in resumed
    (expected, expected_meta), (got, got_meta) = load_checkpoint(whole), load_checkpoint(batched)
    assert got_meta["history"] == expected_meta["history"]
    for name in expected:
        if name.startswith("model."):
            assert torch.equal(expected[name], got[name]), name


def test_a_diverged_seed_batched_checkpoint_loads_but_is_not_resumed(tmp_path):
    """A file the seed-batched trainer marked diverged (that seed's loss or weights turned non-finite; its last good
    checkpoint kept) still loads as a model, but train() does not continue it as if it were healthy: it raises
    TrainingDiverged naming the file and the note, with or without more steps, and leaves the file as it was;
    resume=False starts afresh."""
    import re

    config = TrainConfig(**TINY, steps=4, eval_every=2)
    path = tmp_path / "diverged.safetensors"
    train(config, path, progress=False, stop_after=2)
    note = "loss became non-finite at step 3; the last good checkpoint (step 2) is kept. Try a smaller lr or grad_clip."
    _as_seed_batched(path, diverged=note)
    before = path.read_bytes()
    assert load_model(path).config.d == TINY["d"]
    expected = (f"{re.escape(str(path))} holds a seed-batched run that diverged: loss became non-finite at step 3; "
                r"the last good checkpoint \(step 2\) is kept. Try a smaller lr or grad_clip. It is not resumed \(its "
                r"weights still load as a model\); to train this config again, start afresh \(resume=False, "
                r"--no-resume\) or pass another path")
    with pytest.raises(TrainingDiverged, match=f"^{expected}$"):
        train(config, path, progress=False)
    with pytest.raises(TrainingDiverged, match="holds a seed-batched run that diverged"):
        train(TrainConfig(**TINY, steps=8, eval_every=2), path, progress=False)
    assert path.read_bytes() == before
    fresh = train(config, path, resume=False, progress=False)
    assert fresh["step"] == 4 and "diverged" not in fresh and "trainer" not in fresh
