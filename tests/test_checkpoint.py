"""Checkpoints: exact round trip, clear errors for mismatched, truncated, foreign or missing files."""

import json

import pytest
import torch
from safetensors.torch import save_file

from interp.model import KMeansTransformer
from interp.model.checkpoint import load_checkpoint, load_model, model_tensors, resolve, save_checkpoint, save_model
from interp.model.config import learned_model_config
from interp.model.constructions import lloyd_transformer
from interp.training.state import TrainingState
from interp.training.train import TrainConfig


@pytest.fixture
def model():
    torch.manual_seed(0)
    return KMeansTransformer(learned_model_config(5, 4, "binary"))


def test_round_trip_is_exact(tmp_path, model):
    path = save_model(tmp_path / "m.safetensors", model, note="hello")
    loaded = load_model(path)
    assert loaded.config == model.config
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    construction = lloyd_transformer(3, 4, 2)
    again = load_model(save_model(tmp_path / "c.safetensors", construction))
    assert again.codes.dtype == torch.float64 and again.config == construction.config


def test_config_mismatch_is_a_clear_error(tmp_path, model):
    other = learned_model_config(5, 4, "onehot")  # wider embedding than the weights
    save_checkpoint(tmp_path / "bad.safetensors", model_tensors(model), {"model_config": other.to_dict()})
    with pytest.raises(ValueError, match="do not match its model config"):
        load_model(tmp_path / "bad.safetensors")


def test_truncated_file_is_a_clear_error(tmp_path, model):
    path = save_model(tmp_path / "m.safetensors", model)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        load_model(path)


def test_foreign_and_missing_files(tmp_path):
    save_file({"weight": torch.zeros(2)}, str(tmp_path / "foreign.safetensors"))
    with pytest.raises(ValueError, match="not an interp checkpoint"):
        load_model(tmp_path / "foreign.safetensors")
    (tmp_path / "pickle.pt").write_bytes(b"\x80\x04\x95 not safetensors at all")
    with pytest.raises(ValueError, match="not a readable safetensors"):
        load_model(tmp_path / "pickle.pt")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_model(tmp_path / "absent.safetensors")
    with pytest.raises(FileNotFoundError, match="shipped name"):
        load_model("main-nonexistent")


def test_invalid_config_values_are_a_clear_error(tmp_path, model):
    config = model.config.to_dict()
    config["embedding"] = "ternary"
    save_checkpoint(tmp_path / "bad.safetensors", model_tensors(model), {"model_config": config})
    with pytest.raises(ValueError, match="invalid model_config"):
        load_model(tmp_path / "bad.safetensors")


def test_atomic_write_leaves_no_temporary_files(tmp_path, model):
    save_model(tmp_path / "m.safetensors", model)
    save_model(tmp_path / "m.safetensors", model)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]
    assert json.loads(json.dumps(model.config.to_dict())) == model.config.to_dict()


@pytest.mark.parametrize("name", ["main-onehot", "main-binary", "main-none"])
def test_shipped_checkpoints_load_as_resumable_training_states(name):
    path = resolve(name)
    _, meta = load_checkpoint(path)
    state = TrainingState.load(path, TrainConfig.from_dict(meta["train_config"]))
    assert state.step == meta["step"] == 10_000 and state.history == meta["history"]
    shipped = load_model(name)
    for (key, a), (_, b) in zip(shipped.state_dict().items(), state.model.state_dict().items()):
        assert torch.equal(a, b), key
    assert len(state.optimizer.state) == len(list(state.model.parameters()))  # Adam moments for every weight
    assert state.optimizer.param_groups[0]["lr"] == meta["history"][-1]["lr"]


@pytest.mark.slow  # fresh processes
def test_a_checkpoint_write_creates_no_file_but_its_own_temporary(tmp_path):
    """While a checkpoint is being written, the folder holds only the checkpoint and its own temporary
    ``.{name}.XXXXXXXX.tmp`` (which the next run's lock removes if a kill leaves it). safetensors' ``save_file`` writes
    through a ``.tmpXXXXXX`` of its own, which a kill would leave behind; a second process writing 120 checkpoints
    while this one lists the folder saw such names before the fix."""
    import re
    import subprocess
    import sys

    from child_processes import running

    script = ("import sys, torch\nfrom interp.model.checkpoint import save_checkpoint\n"
              "tensors = {'w': torch.zeros(50_000)}\nprint('ready', flush=True)\n"
              "for step in range(120):\n    save_checkpoint(sys.argv[1], tensors, {'step': step})\n")
    out = tmp_path / "ck.safetensors"
    with running([sys.executable, "-c", script, str(out)], stdout=subprocess.PIPE, text=True) as writer:
        assert writer.stdout.readline().strip() == "ready"
        seen = set()
        while writer.poll() is None:
            seen.update(p.name for p in tmp_path.iterdir())
    assert writer.returncode == 0
    own = re.compile(r"\.ck\.safetensors\.[a-z0-9_]{8}\.tmp")
    strangers = sorted(name for name in seen if name != "ck.safetensors" and not own.fullmatch(name))
    assert not strangers, strangers
    assert any(own.fullmatch(name) for name in seen)  # the listing did see writes in progress
