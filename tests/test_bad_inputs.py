"""The bad-input table: every public entry point gives a clear error, and no CLI command shows a traceback.

Two tables, one row per distinct bad input (``docs/bad_inputs.md`` is generated from them: run
``python tests/test_bad_inputs.py > docs/bad_inputs.md``):

* ``PY_CASES``: Python API (models, lloyd, tasks, losses, checkpoint loading, TrainConfig, EvalConfig,
  InContextKMeans) -> the exception type and a message naming the problem;
* ``CLI_CASES``: every ``interp`` subcommand -> exit code 2, one clear line naming the problem, no traceback.

Cases already covered in tests/test_inputs.py, test_checkpoint.py, test_training.py, test_evaluate.py and
test_validation_and_cli.py are not repeated here. Crafted checkpoints (edited, the unkeyed digest recomputed with the
helpers of tests/test_checkpoint_hardening.py) and a checkpoint whose lock this process holds are: one row each for
the cases of test_checkpoint_hardening.py and test_concurrent_writers.py that a user can meet.

CLI cases run ``python -m interp.cli`` in child processes forked from one "zygote" process that imported the heavy
modules once (``tests/cli_zygote.py``); each child runs the ``interp.cli`` module as ``__main__`` exactly as
``python -m interp.cli`` does, with its own stdout/stderr, and an uncaught exception prints the interpreter's
traceback. ``test_zygote_matches_a_real_subprocess`` checks that a few cases give byte-identical stderr and the
same exit code under a plain ``[sys.executable, "-m", "interp.cli", ...]`` subprocess.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import struct
import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest
import torch
from child_processes import run
from cli_zygote import Zygote
from test_analyses_bad_inputs import CASES as ANALYSES_CASES
from test_analyses_bad_inputs import table as analyses_table

from interp._checks import InvalidInput, InvalidInputType
from interp.training.lock import CheckpointBusy

ROOT = Path(__file__).resolve().parents[1]
PRELOAD = ("interp.evaluate", "interp.report.builder", "interp.training.train", "interp.verify")  # CLI zygote
DOC = ROOT / "docs" / "bad_inputs.md"


# ----- fixtures: small models, data and damaged files ------------------------------------------------------
class _Evil:
    """Unpickling this creates ``marker``: a checkpoint loader that unpickles would be caught."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@dataclass
class Files:
    root: Path
    paths: dict[str, Path] = field(default_factory=dict)
    held: ExitStack = field(default_factory=ExitStack)  # checkpoint locks this process holds until close()

    def __getitem__(self, name: str) -> str:
        return str(self.paths[name])

    def close(self) -> None:
        self.held.close()


def make_files(root: Path) -> Files:
    """A tiny learned checkpoint (d=2, k=3) and damaged / foreign variants of it."""
    from safetensors.torch import save_file

    from interp.model import KMeansTransformer
    from interp.model.checkpoint import model_tensors, save_checkpoint, save_model
    from interp.model.config import learned_model_config

    root.mkdir(parents=True, exist_ok=True)
    files = Files(root)
    torch.manual_seed(0)
    model = KMeansTransformer(learned_model_config(2, 3, "onehot"))
    good = save_model(root / "tiny.safetensors", model)
    files.paths["tiny"] = good
    data = good.read_bytes()
    header_len = struct.unpack("<Q", data[:8])[0]

    def write(name: str, blob: bytes) -> None:
        path = root / name
        path.write_bytes(blob)
        files.paths[name.split(".")[0]] = path

    bad_len = bytearray(data)
    bad_len[3] ^= 0x01  # header length field
    write("bad_length.safetensors", bytes(bad_len))
    bad_json = bytearray(data)
    bad_json[9] ^= 0x55  # first byte of the JSON header
    write("bad_json.safetensors", bytes(bad_json))
    write("junk_tail.safetensors", data + b"trailing junk")
    write("empty.safetensors", b"")
    write("half.safetensors", data[: len(data) // 2])
    tag = data.replace(b"interp-checkpoint-v1", b"interp-checkpoint-v9")
    assert len(tag) == len(data)
    write("wrong_tag.safetensors", tag)
    flipped = bytearray(data)
    flipped[8 + header_len + 5] ^= 0x55  # inside the tensor data
    write("flipped_data.safetensors", bytes(flipped))
    edited = data.replace(b'\\"n_layers\\": 1', b'\\"n_layers\\": 2')  # valid JSON, another config
    assert edited != data and len(edited) == len(data)
    write("edited_meta.safetensors", edited)
    files.paths["marker"] = root / "UNPICKLED"
    write("evil_pickle.safetensors", pickle.dumps(_Evil(str(root / "UNPICKLED"))))
    torch.save(model.state_dict(), root / "torch_save.safetensors")
    files.paths["torch_save"] = root / "torch_save.safetensors"
    save_file({"weight": torch.zeros(2)}, str(root / "foreign.safetensors"))
    files.paths["foreign"] = root / "foreign.safetensors"
    tensors = model_tensors(model)
    config = model.config.to_dict()
    save_checkpoint(root / "no_config.safetensors", tensors, {"note": "no model_config"})
    files.paths["no_config"] = root / "no_config.safetensors"
    save_checkpoint(root / "unknown_key.safetensors", tensors, {"model_config": {**config, "depth": 3}})
    files.paths["unknown_key"] = root / "unknown_key.safetensors"
    save_checkpoint(root / "wrong_d.safetensors", tensors, {"model_config": {**config, "d": 7}})
    files.paths["wrong_d"] = root / "wrong_d.safetensors"
    # metadata whose model_config is not JSON (written with safetensors directly)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(root / "not_json.safetensors"),
              metadata={"format": "interp-checkpoint-v1", "model_config": "{d: 2, k: 3"})
    files.paths["not_json"] = root / "not_json.safetensors"
    (root / "a_file").write_text("not a folder")
    files.paths["a_file"] = root / "a_file"
    files.paths["folder"] = root
    files.paths["missing"] = root / "missing.safetensors"
    files.paths["nowhere"] = root / "nowhere"  # a folder that must never come to exist (tree-creation cases)
    # inputs a command must never write over: a copy of the checkpoint, links to it, a folder holding it as summary.csv
    files.paths["victim"] = root / "victim.safetensors"
    files.paths["victim"].write_bytes(data)
    files.paths["victim_symlink"] = root / "victim_symlink.safetensors"
    files.paths["victim_symlink"].symlink_to(files.paths["victim"])
    files.paths["victim_hardlink"] = root / "victim_hardlink.safetensors"
    os.link(files.paths["victim"], files.paths["victim_hardlink"])
    files.paths["victim_dir"] = root / "victim_dir"
    files.paths["victim_dir"].mkdir()
    (files.paths["victim_dir"] / "summary.csv").write_bytes(data)
    # outputs that are not regular files: made by stat-only tools, never opened (test_output_paths.py has more)
    from test_output_paths import make_character_device, make_fifo, make_socket

    files.paths["fifo"] = make_fifo(root / "out.fifo")
    files.paths["socket"] = make_socket(root / "out.sock")
    files.paths["device"] = make_character_device(root / "null")
    (root / "fifo_inside").mkdir()
    make_fifo(root / "fifo_inside" / "summary.csv")
    files.paths["fifo_inside"] = root / "fifo_inside"
    # papers' files: a zip bomb (data.pkl deflated, 20 MB of zeros), a sparse weight (test_hostile_files.py has more)
    from test_hostile_files import MB, papers_file, stand_in_model, write_bomb
    from test_hostile_files import D as PAPER_D
    from test_hostile_files import K as PAPER_K

    files.paths["bomb"] = write_bomb(root / "bomb.pt", inflated=20 * MB)
    weight = stand_in_model(PAPER_D + PAPER_K, seed=1).CAX.W_q.weight.detach()
    files.paths["sparse"] = papers_file(root / "sparse.pt", **{"CAX.W_q.weight": weight.to_sparse()})
    files.paths["bad_history"] = save_model(root / "bad_history.safetensors", model, history=["step 0", "step 2"])
    files.paths["csv_is_a_folder"] = root / "csv_is_a_folder"
    (files.paths["csv_is_a_folder"] / "evaluation.csv").mkdir(parents=True)
    files.paths["loop"] = root / "loop"
    files.paths["loop"].symlink_to("loop")  # a symbolic link to itself: stat fails with ELOOP
    meta = {"model_config": model.config.to_dict()}
    files.paths["steps_1e9"] = save_checkpoint(root / "steps_1e9.safetensors", tensors,
                                               {**meta, "inference": {"steps": 10**9}})
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(root / "inference_not_json.safetensors"),
              metadata={"format": "interp-checkpoint-v1", "model_config": json.dumps(config), "inference": "{steps: 3"})
    files.paths["inference_not_json"] = root / "inference_not_json.safetensors"
    # the valid header of a checkpoint whose metadata nests 100,000 lists (json.loads alone overflows the stack)
    deep_header = {"format": "interp-checkpoint-v1", "model_config": json.dumps(config),
                   "note": "[" * 100_000 + "]" * 100_000}
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(root / "deep.safetensors"), metadata=deep_header)
    files.paths["deep"] = root / "deep.safetensors"
    # a torch.save file (the papers' format) whose pickle asks to run code
    torch.save({"model_state_dict": model.state_dict(), "payload": _Evil(str(files.paths["marker"]))},
               root / "torch_code.pt")
    files.paths["torch_code"] = root / "torch_code.pt"
    _crafted(files, tensors, {"model_config": config})
    return files


RUN_CONFIG = dict(d=2, k=2, n=8, batch=2, val_tasks=2, eval_every=1, steps=1)  # = the flags of TINY_RUN


def _crafted(files: Files, tensors: dict, meta: dict) -> None:
    """Checkpoints edited with a recomputed digest (it is unkeyed: anyone can), a genuine 1-step run (``run``) and
    edits of its model_config and resume state, and a checkpoint path whose lock this process holds (``busy``)."""
    from test_checkpoint_hardening import edited_config, rewrite  # the crafting helpers of the hardening tests

    from interp.model.checkpoint import load_checkpoint
    from interp.training.lock import checkpoint_lock
    from interp.training.train import TrainConfig, train

    def craft(name: str, tensors: dict, meta: dict) -> None:
        files.paths[name] = rewrite(files.root / f"{name}.safetensors", tensors, meta)

    def weight(value: float) -> dict:  # the tensors with one entry of W_Q replaced
        w_q = tensors["model.layers.0.attn_xc.W_Q"].clone()  # (5, 5)
        w_q[0, 1] = value
        return {**tensors, "model.layers.0.attn_xc.W_Q": w_q}

    craft("n_layers_1e5", tensors, edited_config(meta, n_layers=100_000))
    craft("d_1e5", tensors, edited_config(meta, d=100_000))
    craft("d_1e12", tensors, edited_config(meta, d=10**12))
    craft("k_1e12", tensors, edited_config(meta, k=10**12))
    craft("w_q_1e30", weight(1e30), meta)
    craft("w_q_nan", weight(float("nan")), meta)
    craft("w_q_inf", weight(float("inf")), meta)
    craft("zero_codes", {**tensors, "model.codes": torch.zeros_like(tensors["model.codes"])}, meta)  # (3, 3)
    files.paths["run"] = files.root / "run.safetensors"
    train(TrainConfig(**RUN_CONFIG), files.paths["run"], progress=False)
    run_tensors, run_meta = load_checkpoint(files.paths["run"])
    for field_name, value in (("gamma", 1000.0), ("dropout", 0.9)):
        attention = {**run_meta["model_config"]["attn_xc"], field_name: value}
        craft(f"run_{field_name}", run_tensors, edited_config(run_meta, attn_xc=attention))
    craft("run_rng_short", {**run_tensors, "rng.tasks": run_tensors["rng.tasks"][:100]}, run_meta)  # mt19937: 5056
    craft("run_adam_shape", {**run_tensors, "optimizer.0.exp_avg": torch.zeros(7)}, run_meta)
    craft("run_step_12_5", run_tensors, {**run_meta, "step": 12.5})
    files.paths["busy"] = files.root / "busy.safetensors"
    files.held.enter_context(checkpoint_lock(files.paths["busy"]))


@pytest.fixture(scope="module")
def files(tmp_path_factory, one_torch_thread) -> Iterator[Files]:
    made = make_files(tmp_path_factory.mktemp("bad_inputs"))
    yield made
    made.close()


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _tasks(n=20, d=2, k=3, dtype=torch.float64):
    gen = torch.Generator().manual_seed(0)
    return torch.rand((1, n, d), generator=gen, dtype=dtype), torch.rand((1, k, d), generator=gen, dtype=dtype)


def _scaled(factor, dtype):
    points, centroids = _tasks(dtype=dtype)
    return points * factor, centroids * factor


def _construction(**kwargs):
    from interp.constructions import lloyd_transformer

    return lloyd_transformer(2, 3, 1, **kwargs)


def _X(n=20, d=3):
    return np.random.RandomState(0).rand(n, d)


def _with(array, index, value):
    array = np.array(array, dtype=complex if isinstance(value, complex) else float)
    array[index] = value
    return array


# ----- Python API ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PyCase:
    entry: str  # entry point
    bad: str  # the bad input
    call: Callable  # files -> None, raises
    error: type
    needle: str  # regex the message must contain


def _kmeans(**kwargs):
    from interp.estimator import InContextKMeans

    return InContextKMeans(**kwargs)


def _model(cfg_kwargs=None):
    import dataclasses

    from interp.model import KMeansTransformer
    from interp.model.config import learned_model_config

    return KMeansTransformer(dataclasses.replace(learned_model_config(2, 3), **(cfg_kwargs or {})))


def _load(name):
    from interp.model.checkpoint import load_model

    return lambda f: load_model(f[name])


def _lloyd(*args, **kwargs):
    from interp.algorithms import lloyd

    return lloyd(*args, **kwargs)


def _objective(*args):
    from interp.algorithms import kmeans_objective

    return kmeans_objective(*args)


def _loss(points, centroids, tau, kind="softmin"):
    from interp.training.losses import smoothed_loss

    return smoothed_loss(points, centroids, tau, kind)


def _task_config(**kwargs):
    from interp.tasks import TaskConfig

    return TaskConfig(**kwargs)


def _sample(batch, generator):
    from interp.tasks import TaskConfig, sample_tasks

    return sample_tasks(TaskConfig(n=10, d=2, k=2), batch, generator)


def _init(points, k, method="random", generator=None):
    from interp.tasks import init_centroids

    return init_centroids(points, k, method, generator)


def _train_config(**kwargs):
    from interp.training.train import TrainConfig

    return TrainConfig(**kwargs)


def _train_from_dict(data):
    from interp.training.train import TrainConfig

    return TrainConfig.from_dict(data)


def _eval_config(**kwargs):
    from interp.evaluate import EvalConfig

    return EvalConfig(**kwargs)


def _evaluate_api(f, n=20, **config):
    from interp.evaluate import EvalConfig, evaluate
    from interp.model.checkpoint import load_model
    from interp.tasks import TaskConfig

    return evaluate({"tiny": load_model(f["tiny"])}, TaskConfig(n=n, d=2, k=3), EvalConfig(**config))


def _build_report(f, checkpoint, out):
    from interp.report.builder import build_report

    return build_report(f[checkpoint], out, n_tasks=1)


def _train_api(out):
    from interp.training.train import TrainConfig, train

    return train(TrainConfig(**RUN_CONFIG), out, progress=False)


def _load_on(f, device):
    from interp.model.checkpoint import load_model

    return load_model(f["tiny"], device=device)


def _report_on(f, device):
    from interp.report.builder import build_report

    return build_report(f["tiny"], f.root / "device.html", n_tasks=1, device=device)


def _train_on(f, device):
    from interp.training.train import TrainConfig, train

    return train(TrainConfig(**RUN_CONFIG), f.root / "device_run.safetensors", progress=False, device=device)


def _evaluate_on(f, device, model_device="cpu"):
    from interp.evaluate import EvalConfig, evaluate
    from interp.model.checkpoint import load_model
    from interp.tasks import TaskConfig

    model = load_model(f["tiny"]).to(model_device)
    return evaluate({"tiny": model}, TaskConfig(n=20, d=2, k=3), EvalConfig(n_tasks=1, steps=1), device=device)


def _save_model_api(path):
    from interp.model.checkpoint import save_model

    return save_model(path, _model())


def _write_csv(path):
    from interp.evaluate import write_csv

    return write_csv([{"a": 1}], path)


def _attention(**kwargs):
    from interp.model.config import AttentionConfig

    return AttentionConfig(**kwargs)


def _model_config(**kwargs):
    from interp.model import ModelConfig
    from interp.model.config import AttentionConfig

    if kwargs.pop("identity_cross", False):
        kwargs["attn_xc"] = AttentionConfig(identity=True)
    return ModelConfig(**kwargs)


def _not_fitted():
    from sklearn.exceptions import NotFittedError

    return NotFittedError


def _sparse():
    import scipy.sparse

    return scipy.sparse.csr_matrix(_X())


def _write_text(path):
    from interp._io import write_text_atomically

    return write_text_atomically(path, "page")


def _learned_tasks(scale: float):
    """One main-configuration-sized task (n=64, d=32, k=10) of the unit cube, times ``scale``."""
    gen = torch.Generator().manual_seed(0)
    return torch.rand((1, 64, 32), generator=gen) * scale, torch.rand((1, 10, 32), generator=gen) * scale


def _main_onehot(scale: float, warning_is_error: bool = True):
    import warnings

    from interp.model.checkpoint import load_model
    from interp.model.transformer import OutOfTrainingRange

    with warnings.catch_warnings():  # the table shows the warning as what the call gets (else the later error)
        warnings.simplefilter("error" if warning_is_error else "ignore", OutOfTrainingRange)
        return load_model("main-onehot")(*_learned_tasks(scale), steps=2)


def _fit_warning(X, **kwargs):
    import warnings

    from interp.model.transformer import OutOfTrainingRange

    with warnings.catch_warnings():
        warnings.simplefilter("error", OutOfTrainingRange)
        warnings.simplefilter("error", RuntimeWarning)
        return _kmeans(**kwargs).fit(X)


def _wine():
    from sklearn.datasets import load_wine

    return load_wine().data


def _fit_warned(category_path: str, X, **kwargs):
    """Fit with warnings of ``category_path`` (module:name) raised, so that the table shows the warning."""
    import importlib
    import warnings

    module, name = category_path.split(":")
    with warnings.catch_warnings():
        warnings.simplefilter("error", getattr(importlib.import_module(module), name))
        return _kmeans(**kwargs).fit(X)


def _fit_with_memory(available: int, **kwargs):
    from unittest import mock

    with mock.patch("interp.estimator.available_memory", return_value=available):
        return _kmeans(**kwargs).fit(np.random.RandomState(0).rand(2000, 50))


def _with_outlier():
    X = np.random.RandomState(0).rand(511, 32)
    return np.vstack([X, np.full((1, 32), 1000.0)])


PY_CASES = [
    # sizes and scales: memory estimated before allocating, labels right at any scale, learned models' range
    PyCase("InContextKMeans.fit", "sizes beyond the available memory (2000 x 50, 100 kB available)",
           lambda f: _fit_with_memory(100_000, n_clusters=3), InvalidInput,
           "needs at least .* of memory and 100 kB is available; the largest part is"),
    PyCase("learned model(points, centroids)", "tasks of the unit cube times 1e18 (its scores overflow)",
           lambda f: _main_onehot(1e18, warning_is_error=False), InvalidInput, "centroids are not finite there"),
    PyCase("learned model(points, centroids)", "tasks of the unit cube times 0.001 (a spread it was not trained on)",
           lambda f: _main_onehot(1e-3), Warning,
           "a task's widest coordinate range is only 0.000998, below 0.5 of the 1"),
    PyCase("InContextKMeans.fit", "a learned model, one point 1000 away from the rest",
           lambda f: _fit_warning(_with_outlier(), n_clusters=10, model="main-onehot"), Warning,
           "the middle 90% of X spans"),
    PyCase("InContextKMeans.fit", "X times 1e300 (labels right; the inertia overflows float64)",
           lambda f: _fit_warning(_X() * 1e300, n_clusters=2), RuntimeWarning,
           "inertia_ is about 1e.*, outside the float64 range, and is reported as inf"),
    PyCase("load_model", "a zip bomb (a papers' .pt whose data.pkl inflates 1000:1)", _load("bomb"),
           InvalidInput, "is compressed .*nothing was decompressed or unpickled"),
    # writers never rename onto, or open, a special file
    PyCase("write_text_atomically", "a FIFO at the path", lambda f: _write_text(f["fifo"]), InvalidInput,
           "it is a fifo; give the path of a regular file"),
    PyCase("save_model", "a character device at the path", lambda f: _save_model_api(f["device"]), InvalidInput,
           "it is a character device; give the path of a regular file"),
    # models
    PyCase("KMeansTransformer(config)", "a dict instead of a ModelConfig", lambda f: _model_from_dict(),
           InvalidInputType,
           "config must be a ModelConfig"),
    PyCase("ModelConfig", "identity=True on a cross-attention (attn_xc)",
           lambda f: _model_config(d=2, k=3, identity_cross=True), InvalidInput, "attn_xc is a cross-attention"),
    PyCase("AttentionConfig", "normaliser='linear' with Euclidean scores", lambda f: _attention(normaliser="linear"),
           InvalidInput, "needs score='dot'"),
    PyCase("AttentionConfig", "dropout=1.0", lambda f: _attention(dropout=1.0), InvalidInput,
           r"dropout must be in \[0, 1\)"),
    PyCase("lloyd", "float32 points scaled by 2**64 (squared distances overflow)",
           lambda f: _lloyd(*_scaled(2.0 ** 64, torch.float32), 1), InvalidInput, "points of a task spread over"),
    PyCase("kmeans_objective", "float64 points scaled by 2**512",
           lambda f: _objective(*_scaled(2.0 ** 512, torch.float64)), InvalidInput, "would overflow"),
    PyCase("learned model(points, centroids)", "float32 points scaled by 2**64",
           lambda f: _model()(*_scaled(2.0 ** 64, torch.float32)), InvalidInput, "points lie up to"),
    PyCase("lloyd_transformer", "dtype='float16'", lambda f: _construction(dtype="float16"), InvalidInput,
           "dtype must be"),
    PyCase("lloyd_transformer", "gamma=True (a bool)", lambda f: _construction(gamma=True), InvalidInputType,
           "gamma must be a number"),
    PyCase("AttentionConfig", "gamma=True (a bool)", lambda f: _attention(gamma=True), InvalidInputType,
           "gamma must be a number"),
    PyCase("AttentionConfig", "gamma=NaN", lambda f: _attention(gamma=float("nan")), InvalidInput, "gamma must be"),
    PyCase("model(points, centroids, steps)", "steps > n_layers for a model without shared weights",
           lambda f: _model(dict(shared_weights=False, n_layers=2))(*_tasks(dtype=torch.float32), steps=3),
           InvalidInput, "steps=3 exceeds n_layers=2"),
    # lloyd / objective
    PyCase("lloyd", "complex points", lambda f: _lloyd(*(t.to(torch.complex64) for t in _tasks()), 1), InvalidInputType,
           "points must have a floating dtype"),
    PyCase("lloyd", "numpy arrays instead of tensors", lambda f: _lloyd(_tasks()[0].numpy(), _tasks()[1], 1),
           InvalidInputType, "points must be a torch.Tensor"),
    PyCase("lloyd", "steps=2.5 (float)", lambda f: _lloyd(*_tasks(), 2.5), InvalidInputType, "steps must be an int"),
    PyCase("lloyd", "steps=True (bool)", lambda f: _lloyd(*_tasks(), True), InvalidInputType, "steps must be an int"),
    PyCase("lloyd", "steps=10**9", lambda f: _lloyd(*_tasks(), 10**9), InvalidInput,
           "steps must be at most 10,000, got 1,000,000,000"),
    PyCase("lloyd", "bfloat16 points (the squared distances cancel)",
           lambda f: _lloyd(*(t.bfloat16() for t in _tasks()), 2), InvalidInputType,
           "points dtype torch.bfloat16 is too coarse for exact Lloyd iterations"),
    PyCase("model(points, centroids, steps)", "steps=10**6 on one shared layer",
           lambda f: _model()(*_tasks(dtype=torch.float32), steps=10**6), InvalidInput,
           "steps must be at most 10,000, got 1,000,000"),
    PyCase("kmeans_objective", "rank-2 points (n, d)", lambda f: _objective(_tasks()[0][0], _tasks()[1]), InvalidInput,
           r"points must have shape \(batch, n, d\)"),
    # tasks
    PyCase("TaskConfig", "d=2.5", lambda f: _task_config(d=2.5), InvalidInputType, "d must be an int"),
    PyCase("TaskConfig", "n=0", lambda f: _task_config(n=0), InvalidInput, "n must be >= 1"),
    PyCase("TaskConfig", "scale=inf", lambda f: _task_config(scale=float("inf")), InvalidInput, "scale must be"),
    PyCase("sample_tasks", "batch=0", lambda f: _sample(0, 1), InvalidInput, "batch must be >= 1"),
    PyCase("sample_tasks", "generator='seed' (a string)", lambda f: _sample(2, "seed"), InvalidInputType,
           "generator must be a torch.Generator or an int seed, got str"),
    PyCase("model(points, centroids)", "generator=2.5 (a float)",
           lambda f: _model()(*_tasks(dtype=torch.float32), generator=2.5), InvalidInputType,
           "generator must be a torch.Generator, an int seed or None, got float"),
    PyCase("model(points, centroids)", "generator=2**64 (beyond a 64-bit seed)",
           lambda f: _model()(*_tasks(dtype=torch.float32), generator=2**64), InvalidInput,
           r"generator seed must be in \[0, 2\*\*63\)"),
    PyCase("lloyd", "generator=-1 (a negative seed)", lambda f: _lloyd(*_tasks(), 2, generator=-1), InvalidInput,
           r"generator seed must be in \[0, 2\*\*63\), got -1"),
    PyCase("init_centroids", "k=20 > n=5 points", lambda f: _init(torch.rand(1, 5, 2), 20, "kmeans++"), InvalidInput,
           "k=20 must not exceed n=5"),
    PyCase("init_centroids", "rank-2 points", lambda f: _init(torch.rand(5, 2), 2), InvalidInput,
           r"points must have shape \(batch, n, d\)"),
    # losses
    PyCase("smoothed_loss", "tau=0", lambda f: _loss(*_tasks(), 0.0), InvalidInput, "tau must be a positive finite"),
    PyCase("smoothed_loss", "tau=NaN", lambda f: _loss(*_tasks(), float("nan")), InvalidInput,
           "tau must be a positive"),
    PyCase("smoothed_loss", "kind='hinge'", lambda f: _loss(*_tasks(), 0.1, "hinge"), InvalidInput,
           "kind must be one of"),
    PyCase("smoothed_loss", "NaN in points", lambda f: _loss(_nan_points(), _tasks()[1], 0.1), InvalidInput,
           "points contains NaN or inf"),
    # checkpoint loading (never unpickles)
    PyCase("load_model", "header-length field corrupted", _load("bad_length"), InvalidInput,
           "not a readable safetensors checkpoint"),
    PyCase("load_model", "a byte of the JSON header flipped", _load("bad_json"), InvalidInput,
           "not a readable safetensors checkpoint"),
    PyCase("load_model", "trailing bytes appended", _load("junk_tail"), InvalidInput, "not a readable safetensors"),
    PyCase("load_model", "empty file", _load("empty"), InvalidInput, "not a readable safetensors"),
    PyCase("load_model", "format tag of another version", _load("wrong_tag"), InvalidInput, "not an interp checkpoint"),
    PyCase("load_model", "a pickle (with a payload) renamed .safetensors", _load("evil_pickle"), InvalidInput,
           "not a readable safetensors"),
    PyCase("load_model", "a torch.save file renamed .safetensors", _load("torch_save"), InvalidInput,
           "torch_save.safetensors is a torch.save file, not a safetensors file, despite its name"),
    PyCase("load_model", "a folder instead of a file", _load("folder"), FileNotFoundError, "no checkpoint"),
    PyCase("load_model", "metadata model_config is not JSON", _load("not_json"), InvalidInput,
           "corrupt metadata: its 'model_config' entry is not JSON"),
    PyCase("load_model", "metadata inference is not JSON", _load("inference_not_json"), InvalidInput,
           "corrupt metadata: its 'inference' entry is not JSON"),
    PyCase("load_model", "metadata inference recommends steps=10**9", _load("steps_1e9"), InvalidInput,
           r"steps_1e9.safetensors: invalid inference settings \(metadata 'inference'\): steps must be at most "
           "10,000, got 1,000,000,000"),
    PyCase("load_model", "metadata without model_config", _load("no_config"), InvalidInput, "no model_config"),
    PyCase("load_model", "model_config with an unknown key", _load("unknown_key"), InvalidInput,
           "invalid model_config"),
    PyCase("load_model", "model_config d edited (weights no longer fit)", _load("wrong_d"), InvalidInput,
           "do not match its model config"),
    # crafted checkpoints: edited and the (unkeyed) digest recomputed; refused before anything large is allocated
    PyCase("load_model", "model_config n_layers=100000, digest recomputed", _load("n_layers_1e5"), InvalidInput,
           "n_layers=100000 exceeds the limit 1,000"),
    PyCase("load_model", "model_config d=100000, digest recomputed", _load("d_1e5"), InvalidInput,
           r"weights do not match its model config .*needs \(100003, 100003\)"),
    PyCase("load_model", "model_config d=10**12, digest recomputed", _load("d_1e12"), InvalidInput,
           "d=1000000000000 exceeds the limit"),
    PyCase("load_model", "model_config k=10**12, digest recomputed", _load("k_1e12"), InvalidInput,
           "k=1000000000000 exceeds the limit"),
    PyCase("load_model", "an entry of W_Q set to 1e30 (float32), digest recomputed", _load("w_q_1e30"), InvalidInput,
           "W_Q has an entry of magnitude 1e\\+30 .*overflows the attention scores"),
    PyCase("load_model", "an entry of W_Q set to NaN, digest recomputed", _load("w_q_nan"), InvalidInput,
           "W_Q has NaN or inf entries"),
    PyCase("load_model", "an entry of W_Q set to inf, digest recomputed", _load("w_q_inf"), InvalidInput,
           "W_Q has NaN or inf entries"),
    PyCase("load_model", "model.codes zeroed, digest recomputed", _load("zero_codes"), InvalidInput,
           "model.codes differ from the onehot codes of k=3 centroids"),
    PyCase("load_model", "gamma 1 -> 1000 in a trained checkpoint's model_config only", _load("run_gamma"),
           InvalidInput, r"model_config disagrees with the train_config .*\(attn_xc.gamma\)"),
    PyCase("load_model", "dropout 0.01 -> 0.9 in a trained checkpoint's model_config only", _load("run_dropout"),
           InvalidInput, r"model_config disagrees with the train_config .*\(attn_xc.dropout\)"),
    PyCase("load_model", "metadata JSON nested 100,000 levels deep", _load("deep"), InvalidInput,
           "metadata 'note' is nested deeper than 16 levels"),
    PyCase("load_model", "a torch.save file (the papers' format) whose pickle asks to run code", _load("torch_code"),
           InvalidInput, "refused: it asks to unpickle io.open.* nothing in it was run"),
    # training outputs: one writer per checkpoint, checked before training
    PyCase("train", "out being written by another run (its lock is held)", lambda f: _train_api(f["busy"]),
           CheckpointBusy, "busy.safetensors is being written by process [0-9]+ "),
    PyCase("train", "out: a name that is not valid UTF-8", lambda f: _train_api(str(f.root) + "/\udcff.safetensors"),
           InvalidInput, "is not a valid UTF-8 path"),
    PyCase("train", "out=/nonexistent/deep/x", lambda f: _train_api(f["nowhere"] + "/deep/x"), InvalidInput,
           "its folder .*deep does not exist; create it first"),
    PyCase("save_model", "a path in a folder that does not exist (none is created)",
           lambda f: _save_model_api(f["nowhere"] + "/deep/m.safetensors"), FileNotFoundError,
           "its folder .*deep does not exist"),
    # TrainConfig / EvalConfig
    PyCase("TrainConfig.from_dict", "an unknown field", lambda f: _train_from_dict({"bogus": 1}), InvalidInput,
           "unknown training config fields"),
    PyCase("TrainConfig", "d='32' (a string)", lambda f: _train_config(d="32"), InvalidInputType, "d must be an int"),
    PyCase("TrainConfig", "batch=0", lambda f: _train_config(batch=0), InvalidInput, "batch must be >= 1"),
    PyCase("TrainConfig", "unroll=0", lambda f: _train_config(unroll=0), InvalidInput, "unroll must be >= 1"),
    PyCase("TrainConfig", "rollout=10**9 (more clustering steps than MAX_STEPS)",
           lambda f: _train_config(rollout=10**9), InvalidInput, "rollout must be at most 10,000, got 1,000,000,000"),
    PyCase("EvalConfig", "steps=10**9", lambda f: _eval_config(steps=10**9), InvalidInput,
           "steps must be at most 10,000, got 1,000,000,000"),
    PyCase("TrainConfig", "slot_order='sorted'", lambda f: _train_config(slot_order="sorted"), InvalidInput,
           "slot_order must be one of"),
    PyCase("TrainConfig", "init_from='' (empty)", lambda f: _train_config(init_from=""), InvalidInput,
           "init_from must be a checkpoint name or path"),
    PyCase("TrainConfig", "normaliser='linear'", lambda f: _train_config(normaliser="linear"), InvalidInput,
           "normaliser must be one of"),
    PyCase("TrainConfig", "family='uniform'", lambda f: _train_config(family="uniform"), InvalidInput,
           "family must be one of"),
    PyCase("TrainConfig", "plateau_patience=-1", lambda f: _train_config(plateau_patience=-1), InvalidInput,
           "plateau_patience must be >= 0"),
    PyCase("TrainConfig", "scale=-0.1", lambda f: _train_config(scale=-0.1), InvalidInput, "scale must be a positive"),
    PyCase("EvalConfig", "n_tasks=0", lambda f: _eval_config(n_tasks=0), InvalidInput, "n_tasks must be >= 1"),
    PyCase("EvalConfig", "steps=0", lambda f: _eval_config(steps=0), InvalidInput, "steps must be >= 1"),
    PyCase("EvalConfig", "slot_order='sorted'", lambda f: _eval_config(slot_order="sorted"), InvalidInput,
           "slot_order must be one of"),
    PyCase("EvalConfig", "inits=('bogus',)", lambda f: _eval_config(inits=("bogus",)), InvalidInput,
           "init must be one of"),
    PyCase("EvalConfig", "protocols=('bogus',)", lambda f: _eval_config(protocols=("bogus",)), InvalidInput,
           "protocol must be one of"),
    PyCase("EvalConfig", "chunk=0", lambda f: _eval_config(chunk=0), InvalidInput, "chunk must be >= 1"),
    PyCase("EvalConfig", "seed=2**63 (beyond torch's generators)", lambda f: _eval_config(seed=2**63), InvalidInput,
           r"seed must be in \[0, 2\*\*63\)"),
    PyCase("TrainConfig", "k=3, n=3 (one Lloyd step reaches objective 0)", lambda f: _train_config(k=3, n=3),
           InvalidInput, "k=3 must be less than n=3"),
    PyCase("TrainConfig", "d=1, k=1, n=1", lambda f: _train_config(d=1, k=1, n=1), InvalidInput,
           "k=1 must be less than n=1"),
    PyCase("TrainConfig", "seed=10**24", lambda f: _train_config(seed=10**24), InvalidInput,
           r"seed must be in \[0, 2\*\*63\)"),
    PyCase("TrainConfig", "seed=-1", lambda f: _train_config(seed=-1), InvalidInput, r"seed must be in \[0, 2\*\*63\)"),
    PyCase("TrainConfig", "seed=1.5", lambda f: _train_config(seed=1.5), InvalidInputType, "seed must be an int"),
    PyCase("sample_tasks", "generator=10**24 (a seed beyond torch's generators)", lambda f: _sample(2, 10**24),
           InvalidInput, r"generator seed must be in \[0, 2\*\*63\)"),
    # evaluate, report and their writers: checked before any work
    PyCase("evaluate", "tasks with n = k (log objective -inf)", lambda f: _evaluate_api(f, n=3, n_tasks=1, steps=1),
           InvalidInput, "n must exceed k"),
    PyCase("evaluate", "n_tasks=10**6, n=10**7 (more memory than the machine has)",
           lambda f: _evaluate_api(f, n=10**7, n_tasks=10**6), InvalidInput,
           "this evaluation needs at least .* of memory"),
    PyCase("build_report", "out = the checkpoint", lambda f: _build_report(f, "victim", f["victim"]), InvalidInput,
           "which is the checkpoint input"),
    PyCase("build_report", "out in a folder that does not exist",
           lambda f: _build_report(f, "tiny", f["nowhere"] + "/deep/report.html"), InvalidInput,
           "does not exist; create it first"),
    PyCase("write_csv", "a path in a folder that does not exist (none is created)",
           lambda f: _write_csv(f["nowhere"] + "/deep/rows.csv"), FileNotFoundError,
           "its folder .*deep does not exist"),
    # InContextKMeans
    PyCase("InContextKMeans.fit", "slot_order='sorted'", lambda f: _kmeans(n_clusters=3, slot_order="sorted").fit(_X()),
           InvalidInput, "slot_order must be None, 'fixed' or 'shuffle'"),
    PyCase("InContextKMeans.fit", "1-D X", lambda f: _kmeans(n_clusters=3).fit(_X()[:, 0]), ValueError,
           "Expected 2D array, got 1D array"),
    PyCase("InContextKMeans.fit", "3-D X", lambda f: _kmeans(n_clusters=3).fit(_X()[None]), ValueError,
           "Found array with dim 3"),
    PyCase("InContextKMeans.fit", "NaN in X", lambda f: _kmeans(n_clusters=3).fit(_with(_X(), (0, 0), np.nan)),
           ValueError, "Input X contains NaN"),
    PyCase("InContextKMeans.fit", "inf in X", lambda f: _kmeans(n_clusters=3).fit(_with(_X(), (1, 2), np.inf)),
           ValueError, "Input X contains infinity"),
    PyCase("InContextKMeans.fit", "strings in X", lambda f: _kmeans(n_clusters=2).fit(np.array([["a", "b"]] * 3)),
           ValueError, "could not convert string to float"),
    PyCase("InContextKMeans.fit", "complex X", lambda f: _kmeans(n_clusters=2).fit(_X() + 1j), ValueError,
           "Complex data not supported"),
    PyCase("InContextKMeans.fit", "no samples, shape (0, 3)", lambda f: _kmeans(n_clusters=1).fit(np.empty((0, 3))),
           ValueError, r"0 sample\(s\)"),
    PyCase("InContextKMeans.fit", "no features, shape (5, 0)", lambda f: _kmeans(n_clusters=1).fit(np.empty((5, 0))),
           ValueError, r"0 feature\(s\)"),
    PyCase("InContextKMeans.fit", "sparse X", lambda f: _kmeans(n_clusters=2).fit(_sparse()), TypeError,
           "Sparse data was passed"),
    PyCase("InContextKMeans.fit", "fewer samples than n_clusters (3 < 8)", lambda f: _kmeans().fit(_X(3)), InvalidInput,
           "n_samples=3 should be >= n_clusters=8"),
    PyCase("InContextKMeans.fit", "feature range overflows float64",
           lambda f: _kmeans(n_clusters=2).fit(np.array([[1e308], [-1e308], [0.0]])), InvalidInput, "overflows"),
    PyCase("InContextKMeans", "n_clusters=0", lambda f: _kmeans(n_clusters=0).fit(_X()), InvalidInput,
           "n_clusters must be an integer >= 1"),
    PyCase("InContextKMeans", "n_clusters=2.5", lambda f: _kmeans(n_clusters=2.5).fit(_X()), InvalidInput,
           "n_clusters must be an integer"),
    PyCase("InContextKMeans", "steps=0", lambda f: _kmeans(n_clusters=2, steps=0).fit(_X()), InvalidInput,
           "steps must be an integer >= 1"),
    PyCase("InContextKMeans", "n_init=0", lambda f: _kmeans(n_clusters=2, n_init=0).fit(_X()), InvalidInput,
           "n_init must be an integer >= 1"),
    PyCase("InContextKMeans", "init='kmeans' (unknown name)", lambda f: _kmeans(n_clusters=2, init="kmeans").fit(_X()),
           InvalidInput, "init must be 'k-means\\+\\+', 'random' or an array"),
    PyCase("InContextKMeans", "init=3 (not an array)", lambda f: _kmeans(n_clusters=2, init=3).fit(_X()),
           InvalidInputType,
           "init must be"),
    PyCase("InContextKMeans", "init array of the wrong shape", lambda f: _kmeans(n_clusters=3, init=_X()[:2]).fit(_X()),
           InvalidInput, r"init array must have shape \(n_clusters, n_features\) = \(3, 3\)"),
    PyCase("InContextKMeans", "NaN in the init array",
           lambda f: _kmeans(n_clusters=3, init=_with(_X()[:3], (0, 0), np.nan)).fit(_X()), ValueError,
           "Input init contains NaN"),
    PyCase("InContextKMeans", "random_state='x'", lambda f: _kmeans(n_clusters=2, random_state="x").fit(_X()),
           InvalidInputType, "random_state must be None, an int in"),
    PyCase("InContextKMeans", "random_state=-1", lambda f: _kmeans(n_clusters=2, random_state=-1).fit(_X()),
           InvalidInput, r"random_state must be None, an int in \[0, 2\*\*32 - 1\] .*got -1"),
    PyCase("InContextKMeans", "n_init=1001", lambda f: _kmeans(n_clusters=2, n_init=1001).fit(_X()), InvalidInput,
           "n_init must be at most 1,000, got 1,001"),
    PyCase("InContextKMeans", "steps=10**9", lambda f: _kmeans(n_clusters=2, steps=10**9).fit(_X()), InvalidInput,
           "steps must be at most 10,000, got 1,000,000,000"),
    PyCase("InContextKMeans.fit",
           "model='best', lloyd_steps=0, on scikit-learn's wine data (unlike its training tasks)",
           lambda f: _fit_warned("interp.estimator:LearnedWorseThanLloyd", _wine(), n_clusters=10, model="best",
                                 lloyd_steps=0, random_state=0), Warning,
           r"model 'best' ended at 16.9 times the inertia of Lloyd's algorithm from the same start"),
    PyCase("InContextKMeans.fit", "5 distinct points, each 20 times, and n_clusters=10",
           lambda f: _fit_warned("sklearn.exceptions:ConvergenceWarning", np.repeat(_X(n=5), 20, axis=0),
                                 n_clusters=10), Warning,
           r"Number of distinct clusters \(5\) found smaller than n_clusters \(10\)"),
    PyCase("InContextKMeans", "model=42", lambda f: _kmeans(n_clusters=2, model=42).fit(_X()), InvalidInputType,
           "model must be 'lloyd', a shipped checkpoint name or a path"),
    PyCase("InContextKMeans", "model: unknown name / missing file", lambda f: _kmeans(model=f["missing"]).fit(_X()),
           FileNotFoundError, "no checkpoint"),
    PyCase("InContextKMeans", "model: a foreign safetensors file", lambda f: _kmeans(model=f["foreign"]).fit(_X()),
           InvalidInput, "not an interp checkpoint"),
    PyCase("InContextKMeans", "model (k=3) asked for n_clusters=4",
           lambda f: _kmeans(n_clusters=4, model=f["tiny"]).fit(_X(d=2)), InvalidInput,
           "serves only n_clusters=3, got n_clusters=4"),
    PyCase("InContextKMeans", "model (d=2) given 3-feature data",
           lambda f: _kmeans(n_clusters=3, model=f["tiny"]).fit(_X(d=3)), InvalidInput,
           "dimension at most d=2.*X has 3 features"),
    PyCase("InContextKMeans.predict", "before fit", lambda f: _kmeans(n_clusters=2).predict(_X()), _not_fitted(),
           "not fitted yet"),
    PyCase("InContextKMeans.predict", "X with another number of features",
           lambda f: _kmeans(n_clusters=2).fit(_X()).predict(_X(d=2)), ValueError,
           "X has 2 features, but InContextKMeans is expecting 3"),
    PyCase("InContextKMeans.transform", "NaN in X", lambda f: _kmeans(n_clusters=2).fit(_X()).transform(
        _with(_X(), (3, 1), np.nan)), ValueError, "Input X contains NaN"),
    # devices: checked before any work (interp._checks.check_device), named by their argument
    PyCase("load_model", "device='gpu' (not a torch device)",
           lambda f: _load_on(f, "gpu"), InvalidInput, "device must be a torch device such as 'cpu', 'cuda'"),
    PyCase("train", "device=0 (an int)", lambda f: _train_on(f, 0), InvalidInputType,
           "device must be a device name \\(str\\) or a torch.device, got int"),
    PyCase("evaluate", "device='cuda:99' (a CUDA device this machine lacks)", lambda f: _evaluate_on(f, "cuda:99"),
           InvalidInput, "device 'cuda:99': (CUDA is not available|this machine has)"),
    PyCase("evaluate", "a model on another device than device='cpu' (torch's meta device)",
           lambda f: _evaluate_on(f, "cpu", model_device="meta"), InvalidInput,
           "checkpoint tiny is on meta but device is cpu"),
    PyCase("build_report", "device='xla' (a device type interp does not run on)",
           lambda f: _report_on(f, "xla"), InvalidInput, "device must be a cpu, cuda or mps device, got 'xla'"),
    PyCase("InContextKMeans.fit", "device='gpu'", lambda f: _kmeans(n_clusters=2, device="gpu").fit(_X()),
           InvalidInput, "device must be a torch device such as"),
    PyCase("InContextKMeans.fit", "device='cpu:7' (a CPU index other than 0)",
           lambda f: _kmeans(n_clusters=2, device="cpu:7").fit(_X()), InvalidInput,
           r"device 'cpu:7': this machine has one CPU device, 'cpu' \(or 'cpu:0'\)"),
]


def _model_from_dict():
    from interp.model import KMeansTransformer

    return KMeansTransformer({"d": 2, "k": 3})


def _nan_points():
    points = _tasks()[0].clone()
    points[0, 0, 0] = float("nan")
    return points


def _case_id(case) -> str:
    where = case.entry if isinstance(case, PyCase) else case.command
    return re.sub(r"[^A-Za-z0-9]+", "-", f"{where} {case.bad}").strip("-")[:80]


@pytest.mark.parametrize("case", PY_CASES, ids=[_case_id(c) for c in PY_CASES])
def test_python_api_bad_input(files, case):
    with pytest.raises(case.error, match=case.needle):
        case.call(files)
    assert not Path(files["nowhere"]).exists(), "a folder tree was created"


def test_checkpoints_never_unpickle(files):
    from interp.model.checkpoint import load_model

    for name in ("evil_pickle", "torch_save", "torch_code"):
        with pytest.raises(ValueError):
            load_model(files[name])
    assert not Path(files["marker"]).exists(), "a checkpoint loader unpickled a file"


@pytest.mark.parametrize("name", ["flipped_data", "edited_meta"])
def test_damaged_tensor_data_or_metadata_is_a_clear_error(files, name):
    """The digest detects damage that does not recompute it (flipped bits, a same-length edit); it is not keyed, so
    it cannot detect tampering."""
    from interp.model.checkpoint import load_model

    with pytest.raises(InvalidInput, match="modified|digest|checksum"):
        load_model(files[name])


# ----- CLI -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CliCase:
    command: str
    bad: str
    argv: Callable  # files -> list[str]
    needle: str  # regex the error line must contain
    argparse: bool = False  # argparse's own error: usage lines, then the error line


TINY_RUN = ["--d", "2", "--k", "2", "--n", "8", "--batch", "2", "--val-tasks", "2", "--eval-every", "1", "--steps", "1",
            "--no-progress", "--threads", "1"]


def _path(f: Files, name: str) -> str:
    """A fixture file by name, else ``name`` under the fixture folder (the first part may be a fixture name)."""
    if name in f.paths:
        return f[name]
    first, _, rest = name.partition("/")
    return f"{f[first]}/{rest}" if first in f.paths and rest else str(f.root / name)


def _train(*extra, out="missing"):
    return lambda f: ["train", "--out", _path(f, out), *extra]


def _evaluate(*extra, checkpoint="tiny", out="folder"):
    return lambda f: ["evaluate", "--checkpoint", f[checkpoint], "--out", _path(f, out), *extra]


def _report(*extra, checkpoint="tiny", out="report.html"):
    return lambda f: ["report", "--checkpoint", f[checkpoint] if checkpoint in f.paths else checkpoint,
                      "--out", _path(f, out), *extra]


CLI_CASES = [
    # papers' files and metadata checked before they are trusted (tests/test_hostile_files.py has every variant)
    CliCase("interp evaluate", "--checkpoint a zip bomb (a .pt whose data.pkl inflates 1000:1)",
            _evaluate(checkpoint="bomb"), r"bomb.pt: refused: zip entry 'bomb/data.pkl' is compressed"),
    CliCase("interp report", "--checkpoint a papers' file with a sparse weight", _report(checkpoint="sparse"),
            r"sparse.pt: CAX.W_q.weight is a sparse tensor \(torch.sparse_coo\); only dense tensors are read"),
    CliCase("interp report", "--checkpoint with a malformed history (digest valid)", _report(checkpoint="bad_history"),
            r"bad_history.safetensors: metadata history\[0\] must be an object"),
    # outputs that are not regular files: refused by stat before any work, never opened (a FIFO would block)
    CliCase("interp report", "--out a FIFO", _report(out="fifo"),
            "out.fifo is a fifo; give the path of a regular file"),
    CliCase("interp report", "--out a socket", _report(out="socket"), "out.sock is a socket; give the path of a "
            "regular file"),
    CliCase("interp report", "--out newdir/ (a trailing slash names a folder)",
            lambda f: ["report", "--checkpoint", f["tiny"], "--out", f"{f.root}/newdir/"],
            "newdir/ ends with '/': it names a folder; give the path of a file"),
    CliCase("interp train", "--out a FIFO", _train(*TINY_RUN, out="fifo"), "out.fifo is a fifo; give the path of a "
            "regular file"),
    CliCase("interp train", "--out a character device (/dev/null)", _train(*TINY_RUN, out="device"),
            "null is a character device; give the path of a regular file"),
    CliCase("interp evaluate", "--out a folder holding a FIFO named summary.csv", _evaluate(out="fifo_inside"),
            "summary.csv is a fifo; give the path of a regular file"),
    CliCase("interp evaluate", "--out a FIFO", _evaluate(out="fifo"), "out.fifo is a fifo; give a folder"),
    CliCase("interp", "no subcommand", lambda f: [], "the following arguments are required: command", True),
    CliCase("interp", "unknown subcommand", lambda f: ["frobnicate"], "invalid choice: 'frobnicate'", True),
    CliCase("interp verify", "--layers abc (not an int)", lambda f: ["verify", "--layers", "abc"],
            "argument --layers: expected an integer, got 'abc'", True),
    CliCase("interp verify", "--tasks 0", lambda f: ["verify", "--tasks", "0"],
            "argument --tasks: expected an integer >= 1, got 0", True),
    CliCase("interp verify", "--gamma nan", lambda f: ["verify", "--gamma", "nan"], "gamma must be positive"),
    CliCase("interp verify", "an unknown option", lambda f: ["verify", "--fast"], "unrecognized arguments: --fast",
            True),
    CliCase("interp train", "no --out", lambda f: ["train"], "the following arguments are required: --out", True),
    CliCase("interp train", "--steps x (not an int)", _train("--steps", "x"),
            "argument --steps: expected an integer, got 'x'", True),
    CliCase("interp train", "--embedding ternary", _train("--embedding", "ternary"), "embedding must be one of"),
    CliCase("interp train", "--k 100 --n 50 (k > n)", _train("--k", "100", "--n", "50"),
            "k=100 must be less than n=50"),
    CliCase("interp train", "--threads 0", _train("--threads", "0"), "argument --threads: expected an integer >= 1",
            True),
    CliCase("interp train", "--tau nan", _train("--tau", "nan"), "tau must be a positive finite number"),
    CliCase("interp train", "--unroll 0", _train("--unroll", "0"), "argument --unroll: expected an integer >= 1",
            True),
    CliCase("interp train", "--unroll 1000000000 (more clustering steps than MAX_STEPS)",
            _train("--unroll", "1000000000"),
            "argument --unroll: expected an integer from 1 to 10,000, got 1,000,000,000", True),
    CliCase("interp train", "--rollout 1000000000", _train("--rollout", "1000000000"),
            "argument --rollout: expected an integer from 0 to 10,000, got 1,000,000,000", True),
    CliCase("interp train", "--init-from a checkpoint of another k", _train(*TINY_RUN, "--k", "4", "--init-from",
                                                                          "main-onehot"),
            "init_from='main-onehot' is a model of another config"),
    CliCase("interp train", "--dropout 1.5", _train(*TINY_RUN, "--dropout", "1.5"), r"dropout must be in \[0, 1\)"),
    CliCase("interp train", "--out: a foreign safetensors file (resume)", _train(*TINY_RUN, out="foreign"),
            "not an interp checkpoint"),
    CliCase("interp train", "--out: a truncated checkpoint (resume)", _train(*TINY_RUN, out="half"),
            "truncated or corrupt"),
    CliCase("interp train", "--out: a pickle renamed .safetensors", _train(*TINY_RUN, out="evil_pickle"),
            "not a readable safetensors checkpoint"),
    CliCase("interp train", "--out: a folder", _train(*TINY_RUN, out="folder"), "is a folder; give the path of a file"),
    CliCase("interp train", "--out under a file (a file where a folder must be)",
            lambda f: ["train", "--out", f["a_file"] + "/run.safetensors", *TINY_RUN],
            "a_file is a file, not a folder"),
    CliCase("interp evaluate", "no --out", lambda f: ["evaluate", "--checkpoint", f["tiny"]],
            "the following arguments are required: --out", True),
    CliCase("interp evaluate", "--checkpoint: a truncated file", _evaluate(checkpoint="half"), "truncated or corrupt"),
    CliCase("interp evaluate", "--checkpoint: a torch.save file", _evaluate(checkpoint="torch_save"),
            "is a torch.save file, not a safetensors file, despite its name"),
    CliCase("interp evaluate", "--checkpoint: metadata inference recommends steps=10**9",
            _evaluate(checkpoint="steps_1e9"), r"invalid inference settings \(metadata 'inference'\): steps must be "
            "at most 10,000"),
    CliCase("interp evaluate", "--protocols bogus", _evaluate("--protocols", "bogus"), "protocol must be one of"),
    CliCase("interp evaluate", "--inits bogus", _evaluate("--inits", "bogus"), "init must be one of"),
    CliCase("interp evaluate", "--slot-order sorted", _evaluate("--slot-order", "sorted"),
            "argument --slot-order: invalid choice: 'sorted'", True),
    CliCase("interp evaluate", "--n 2 (fewer points than the model's k=3)", _evaluate("--n", "2"),
            "k=3 must not exceed n=2"),
    CliCase("interp evaluate", "--tasks 0", _evaluate("--tasks", "0"), "argument --tasks: expected an integer >= 1",
            True),
    CliCase("interp evaluate", "--threads 0", _evaluate("--threads", "0"),
            "argument --threads: expected an integer >= 1", True),
    CliCase("interp evaluate", "--out: an existing file",
            _evaluate("--tasks", "1", "--steps", "1", "--n", "16", "--inits", "random", "--threads", "1", out="a_file"),
            "is a file; give a folder"),
    CliCase("interp report", "--checkpoint: an unknown name", _report(checkpoint="main-nonexistent"),
            "no checkpoint 'main-nonexistent'"),
    CliCase("interp report", "--checkpoint: a foreign safetensors file", _report(checkpoint="foreign"),
            "not an interp checkpoint"),
    CliCase("interp report", "--checkpoint: model_config edited", _report(checkpoint="wrong_d"),
            "do not match its model config"),
    CliCase("interp report", "--tasks 0", _report("--tasks", "0"), "argument --tasks: expected an integer >= 1",
            True),
    CliCase("interp report", "--out under a file", _report("--tasks", "1", "--threads", "1", out="a_file/report.html"),
            "a_file is a file, not a folder"),
    # no command writes over its own input (resolved links and hard links included)
    CliCase("interp report", "--out: the --checkpoint file itself", _report(checkpoint="victim", out="victim"),
            "--out would write .*victim.safetensors, which is the --checkpoint input"),
    CliCase("interp report", "--out: a symbolic link to the --checkpoint file",
            _report(checkpoint="victim", out="victim_symlink"), "which is the --checkpoint input"),
    CliCase("interp report", "--out: a hard link to the --checkpoint file",
            _report(checkpoint="victim", out="victim_hardlink"), "which is the --checkpoint input"),
    CliCase("interp evaluate", "--out: the --checkpoint file itself", _evaluate(checkpoint="victim", out="victim"),
            "which is the --checkpoint input"),
    CliCase("interp evaluate", "--out: a folder whose summary.csv is the --checkpoint",
            lambda f: ["evaluate", "--checkpoint", f["victim_dir"] + "/summary.csv", "--out", f["victim_dir"]],
            "--out would write .*summary.csv, which is the --checkpoint input"),
    # outputs checked before any work; nothing but an evaluate folder's last level is created
    CliCase("interp report", "--out in a folder that cannot be written (/proc)",
            lambda f: ["report", "--checkpoint", f["tiny"], "--out", "/proc/report.html"], "cannot write in /proc"),
    CliCase("interp report", "--out /nonexistent/deep/report.html", _report(out="nowhere/deep/report.html"),
            "its folder .*deep does not exist; create it first"),
    CliCase("interp evaluate", "--out /nonexistent/deep/folder", _evaluate(out="nowhere/deep/folder"),
            "its folder .*deep does not exist; create it first"),
    CliCase("interp evaluate", "--out: a folder whose evaluation.csv is a folder", _evaluate(out="csv_is_a_folder"),
            "evaluation.csv is a folder"),
    CliCase("interp train", "--out /nonexistent/deep/run.safetensors",
            _train(*TINY_RUN, out="nowhere/deep/run.safetensors"),
            "its folder .*deep does not exist; create it first"),
    CliCase("interp train", "--out: a name that is not valid UTF-8",
            lambda f: ["train", "--out", str(f.root) + "/\udcff.safetensors", *TINY_RUN], "not a valid UTF-8 path"),
    CliCase("interp evaluate", "--out: a folder name that is not valid UTF-8",
            lambda f: ["evaluate", "--checkpoint", f["tiny"], "--out", str(f.root) + "/\udcff"],
            "--out .* is not a valid UTF-8 path"),
    CliCase("interp evaluate", "--out: a symbolic link to itself (a loop)", _evaluate(out="loop"),
            "--out .*loop: a symbolic link on this path leads back to itself"),
    CliCase("interp report", "--out: a symbolic link to itself (a loop)", _report(out="loop"),
            "--out .*loop: a symbolic link on this path leads back to itself"),
    # sizes that cannot be allocated: refused from an estimate before anything is allocated
    CliCase("interp evaluate", "--tasks 1000000 --n 100000000", _evaluate("--tasks", "1000000", "--n", "100000000"),
            "this evaluation needs at least .* of memory .*--tasks=1000000, --n=100000000"),
    CliCase("interp evaluate", "--tasks 100000000000 (more than MAX_TASKS)", _evaluate("--tasks", "100000000000"),
            "argument --tasks: expected an integer from 1 to 1,000,000, got 100,000,000,000", True),
    CliCase("interp evaluate", "--steps 100000000000 (more than MAX_STEPS)", _evaluate("--steps", "100000000000"),
            "argument --steps: expected an integer from 1 to 10,000, got 100,000,000,000", True),
    CliCase("interp report", "--tasks 100000000000 (more than MAX_TASKS)", _report("--tasks", "100000000000"),
            "argument --tasks: expected an integer from 1 to 1,000,000, got 100,000,000,000", True),
    CliCase("interp train", "--n 100000000000", _train("--n", "100000000000"),
            "this training run needs at least .* of memory .*--n=100000000000"),
    CliCase("interp train", "--k 1000000 --n 1000001", _train("--k", "1000000", "--n", "1000001"),
            "this training run needs at least .* of memory .*--k=1000000"),
    CliCase("interp train", "--d 100000000", _train("--d", "100000000"),
            "this training run needs at least .* of memory .*--d=100000000"),
    CliCase("interp train", "--batch 100000000000", _train("--batch", "100000000000"),
            "this training run needs at least .* of memory .*--batch=100000000000"),
    CliCase("interp verify", "--tasks 1000000 --layers 10000", lambda f: ["verify", "--tasks", "1000000", "--layers",
                                                                          "10000"],
            "this verification needs at least .* of memory .*--tasks=1000000, --layers=10000"),
    CliCase("interp verify", "--layers 1000000000000 (more than MAX_STEPS)",
            lambda f: ["verify", "--layers", "1000000000000"],
            "argument --layers: expected an integer from 1 to 10,000, got 1,000,000,000,000", True),
    CliCase("interp verify", "--tasks 1000000000000 (more than MAX_TASKS)",
            lambda f: ["verify", "--tasks", "1000000000000"],
            "argument --tasks: expected an integer from 1 to 1,000,000, got 1,000,000,000,000", True),
    CliCase("interp train", "--threads 1000000000000 (more than the CPU cores)", _train("--threads", "1000000000000"),
            "argument --threads: expected at most the .* CPU cores", True),
    # crafted metadata: JSON nested 100,000 levels deep
    CliCase("interp evaluate", "--checkpoint: metadata nested 100,000 levels deep", _evaluate(checkpoint="deep"),
            "nested deeper than"),
    CliCase("interp report", "--checkpoint: metadata nested 100,000 levels deep", _report(checkpoint="deep"),
            "nested deeper than"),
    CliCase("interp train", "--out: metadata nested 100,000 levels deep (resume)", _train(*TINY_RUN, out="deep"),
            "nested deeper than"),
    # crafted checkpoints (digest recomputed) and run states that cannot be resumed
    CliCase("interp evaluate", "--checkpoint: model_config n_layers=100000, digest recomputed",
            _evaluate(checkpoint="n_layers_1e5"), "n_layers=100000 exceeds the limit 1,000"),
    CliCase("interp report", "--checkpoint: model_config n_layers=100000, digest recomputed",
            _report(checkpoint="n_layers_1e5"), "n_layers=100000 exceeds the limit 1,000"),
    CliCase("interp evaluate", "--checkpoint: an entry of W_Q set to NaN, digest recomputed",
            _evaluate(checkpoint="w_q_nan"), "W_Q has NaN or inf entries"),
    CliCase("interp evaluate", "--checkpoint: a torch.save file whose pickle asks to run code",
            _evaluate(checkpoint="torch_code"), "refused: it asks to unpickle io.open"),
    CliCase("interp train", "--out: rng.tasks state of the wrong size (resume)", _train(*TINY_RUN, out="run_rng_short"),
            r"rng.tasks must be a torch.uint8 state of shape \(5056,\), got torch.uint8 \(100,\)"),
    CliCase("interp train", "--out: optimizer.0.exp_avg of the wrong shape (resume)",
            _train(*TINY_RUN, out="run_adam_shape"), r"optimizer.0 moments have shape \(7,\)"),
    CliCase("interp train", "--out: step = 12.5 (resume)", _train(*TINY_RUN, out="run_step_12_5"),
            "step must be a non-negative integer, got 12.5"),
    # one writer per checkpoint: a lock held for the run's lifetime (here by the test process)
    CliCase("interp train", "--out being written by another process", _train(*TINY_RUN, out="busy"),
            r"busy.safetensors is being written by process [0-9]+ \(it holds .*\.busy\.safetensors\.lock\); wait"),
    CliCase("interp train", "--out being written by another process, with --no-resume",
            _train(*TINY_RUN, "--no-resume", out="busy"), "busy.safetensors is being written by process [0-9]+"),
    # degenerate sizes: k >= n gives Lloyd's objective 0
    CliCase("interp train", "--k 3 --n 3", _train("--k", "3", "--n", "3"), "k=3 must be less than n=3"),
    CliCase("interp train", "--d 1 --k 1 --n 1", _train("--d", "1", "--k", "1", "--n", "1"),
            "k=1 must be less than n=1"),
    CliCase("interp train", "--k 1000000 --n 1000000", _train("--k", "1000000", "--n", "1000000"),
            "k=1000000 must be less than n=1000000"),
    CliCase("interp evaluate", "--n 3 (as many points as the model's k=3)", _evaluate("--n", "3"),
            "n=3 points .* for k=3 centroids: n must exceed k"),
    # seeds: integers in [0, 2**63), named by their option
    CliCase("interp train", "--seed 1e24", _train("--seed", "1e24"),
            r"argument --seed: expected an integer seed in \[0, 2\*\*63\), got '1e24'", True),
    CliCase("interp train", "--seed 10**24 (an integer beyond torch's generators)", _train("--seed", str(10**24)),
            r"argument --seed: expected an integer seed in \[0, 2\*\*63\)", True),
    CliCase("interp train", "--seed -1", _train("--seed", "-1"), r"argument --seed: expected an integer seed", True),
    CliCase("interp evaluate", "--seed 2**63", _evaluate("--seed", str(2**63)),
            r"argument --seed: expected an integer seed in \[0, 2\*\*63\)", True),
    # devices: checked before any work, named --device (interp._checks.check_device)
    CliCase("interp train", "--device bogus", _train(*TINY_RUN, "--device", "bogus"),
            "--device must be a torch device such as 'cpu', 'cuda' or 'cuda:0', got 'bogus'"),
    CliCase("interp train", "--device cuda:99 (a CUDA device this machine lacks)",
            _train(*TINY_RUN, "--device", "cuda:99"), "--device 'cuda:99': (CUDA is not available|this machine has)"),
    CliCase("interp evaluate", "--device xla (a device type interp does not run on)", _evaluate("--device", "xla"),
            "--device must be a cpu, cuda or mps device, got 'xla'"),
    CliCase("interp report", "--device gpu", _report("--device", "gpu"), "--device must be a torch device such as"),
    CliCase("interp train", "--device cpu:7 (a CPU index other than 0)", _train(*TINY_RUN, "--device", "cpu:7"),
            r"--device 'cpu:7': this machine has one CPU device, 'cpu' \(or 'cpu:0'\)"),
    CliCase("interp evaluate", "--device cpu:7", _evaluate("--device", "cpu:7"),
            "--device 'cpu:7': this machine has one CPU device"),
    CliCase("interp report", "--device cpu:7", _report("--device", "cpu:7"),
            "--device 'cpu:7': this machine has one CPU device"),
    # interp compare (tests/test_compare.py has every variant)
    CliCase("interp compare", "--model: a name given twice",
            lambda f: ["compare", "--model", "a=main-onehot", "--model", "a=main-binary", "--out", _path(f, "folder")],
            "--model: the name 'a' is given twice"),
    CliCase("interp compare", "--model: an empty checkpoint list",
            lambda f: ["compare", "--model", "a=", "--out", _path(f, "folder")],
            "argument --model: model 'a' has an empty checkpoint", True),
    CliCase("interp compare", "--model: a missing checkpoint file",
            lambda f: ["compare", "--model", "a=main-onehot", "--model", "b=missing.safetensors", "--out",
                       _path(f, "folder")], "--model b: no checkpoint 'missing.safetensors': not a file"),
    CliCase("interp compare", "--model: models of another d and k",
            lambda f: ["compare", "--model", "a=main-onehot", "--model", f"b={f['tiny']}", "--out",
                       _path(f, "folder"), "--tasks", "1", "--threads", "1"],
            "--model: model b, checkpoint 1, is for d=2, k=3, but the tasks have d=32, k=10"),
]

@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    runner = Zygote(tmp_path_factory.mktemp("cli_out"), preload=PRELOAD)
    yield runner
    runner.close()


def check_cli_result(case: CliCase, rc, stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    assert rc == 2, (rc, stderr)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "no message"
    message = lines[-1]
    assert re.search(case.needle, message), (case.needle, stderr)
    if case.argparse:
        assert message.startswith("interp") and ": error: " in message
    else:
        assert len(lines) == 1, stderr  # exactly one line
        assert message.startswith(f"{case.command}: error: "), message
    return message


@pytest.mark.parametrize("case", CLI_CASES, ids=[_case_id(c) for c in CLI_CASES])
def test_cli_bad_input_is_one_clear_line(zygote, files, case):
    rc, _, stderr = zygote.run(case.argv(files))
    check_cli_result(case, rc, stderr)
    assert not Path(files["nowhere"]).exists(), "a command created a folder tree"


def test_every_cli_subcommand_is_covered():
    from interp.cli import build_parser

    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "command").choices
    covered = {case.command.split()[-1] for case in CLI_CASES}
    missing = sorted(set(subcommands) - covered)
    assert not missing, f"add bad-input cases for: {missing}"


@pytest.mark.slow
@pytest.mark.parametrize("bad", ["--gamma nan"])  # a real process costs ~5 s of imports
def test_zygote_matches_a_real_subprocess(zygote, files, bad):
    case = next(c for c in CLI_CASES if c.bad == bad)
    argv = case.argv(files)
    real = run([sys.executable, "-m", "interp.cli", *argv], capture_output=True, text=True, cwd=ROOT, timeout=300)
    rc, _, stderr = zygote.run(argv)
    assert (real.returncode, real.stderr) == (rc, stderr)
    check_cli_result(case, real.returncode, real.stderr)


# ----- the documented table --------------------------------------------------------------------------------
def test_every_case_is_in_the_documented_table():
    text = DOC.read_text()
    missing = [f"{c.entry}: {c.bad}" for c in PY_CASES if f"| `{c.entry}` | {c.bad} |" not in text]
    missing += [f"{c.command}: {c.bad}" for c in CLI_CASES if f"| `{c.command}` | {c.bad} |" not in text]
    missing += [f"{c.script}: {c.bad}" for c in ANALYSES_CASES if f"| {c.script} | `{c.bad}` |" not in text]
    assert not missing, f"regenerate: python tests/test_bad_inputs.py > docs/bad_inputs.md; missing {missing}"
    assert len(PY_CASES) + len(CLI_CASES) >= 30


def _markdown() -> str:  # pragma: no cover - run by hand to regenerate docs/bad_inputs.md
    import tempfile

    torch.set_num_threads(1)

    def clean(text: str, root: Path) -> str:
        text = text.replace(str(root), "<tmp>").replace("|", "\\|").strip()
        text = re.sub(r"and [0-9.]+ [kMGTPE]?B is available", "and <available memory> is available", text)
        text = re.sub(r"at most the [0-9]+ CPU cores", "at most the <cores> CPU cores", text)
        text = re.sub(r"being written by process [0-9]+", "being written by process <pid>", text)
        return text.splitlines()[0] if text else text

    rows = ["| entry point | bad input | what it gets |", "|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        f = make_files(root / "files")
        for case in PY_CASES:
            try:
                case.call(f)
                raise AssertionError(f"no error for {case}")
            except case.error as error:
                rows.append(f"| `{case.entry}` | {case.bad} | `{type(error).__name__}`: {clean(str(error), root)} |")
        (root / "out").mkdir()
        runner = Zygote(root / "out")
        try:
            for case in CLI_CASES:
                rc, _, stderr = runner.run(case.argv(f))
                message = check_cli_result(case, rc, stderr)
                rows.append(f"| `{case.command}` | {case.bad} | exit {rc}: {clean(message, root)} |")
        finally:
            runner.close()
            f.close()
    head = ("# Bad inputs and what they get\n\n"
            f"{len(PY_CASES)} Python API and {len(CLI_CASES)} CLI cases, tested in `tests/test_bad_inputs.py`, and "
            f"{len(ANALYSES_CASES)} cases of the analyses scripts, tested in `tests/test_analyses_bad_inputs.py` "
            "(generated by `python tests/test_bad_inputs.py > docs/bad_inputs.md`). `<tmp>` stands for a temporary "
            "folder. Earlier tests cover more cases (NaN/inf/rank/dtype/size mismatches of model and Lloyd inputs, "
            "construction arguments, truncated/foreign/missing checkpoints, TrainConfig values).\n\n"
            "Every check of user input raises `InvalidInput` (a `ValueError`) or one of its subclasses: "
            "`InvalidInputType` (also a `TypeError`) and `CheckpointBusy` (another run holds the checkpoint's lock); "
            "the other names in the table are a missing file (`FileNotFoundError`) and the checks "
            "scikit-learn makes for the estimator. The command line prints these as one line on stderr and exits 2, "
            "never with a traceback (an internal error keeps its traceback and exits 1); argparse's own errors "
            "(missing or malformed options) print the usage first. `<available memory>` and `<cores>` stand for "
            "the machine's. Ctrl-C prints one line, for `train` "
            "`interrupted; <checkpoint> holds the last saved step; run the same command to resume`, and exits 130 "
            "(`tests/test_cli_safety.py`).\n\n"
            "Before any work every command checks that it writes over none of its inputs (symbolic and hard links "
            "included), that every output can be written in a folder that exists (nothing is created but the last "
            "level of an `evaluate` folder), and that the memory its sizes need is available. A training run holds "
            "an operating-system lock on its checkpoint for its whole lifetime (`interp.training.lock`), so a second "
            "run on the same path, started together with it or with `--no-resume`, is refused before it reads or "
            "writes anything (`<pid>` stands for the holder's process id; `tests/test_concurrent_writers.py`). "
            "The estimate (`TrainConfig.memory_needs`, `EvalConfig.memory_needs`) counts only buffers that must be "
            "held at once, a lower bound of the peak, and is compared with what the kernel and the memory cgroup "
            "report available: a refusal is never wrong, while a run close to the limit can still run out of "
            "memory.\n\n"
            "interp's checkpoints are safetensors and are never unpickled (a `torch.save` file of the papers' own "
            "code is read with `torch.load(weights_only=True)`: tensors and plain containers, never code). Their "
            "sha256 digest detects damage (truncation, "
            "flipped bits, a same-length edit that does not recompute it: "
            "`test_damaged_tensor_data_or_metadata_is_a_clear_error`), not tampering: it is not keyed, and anyone "
            "who edits a file can recompute it. So the loader also checks what it reads before it allocates or "
            "trusts it (`interp.model.checkpoint`; docs/learned_model.md, \"Checkpoints\"): the sizes in the "
            "metadata against limits and against the stored tensors' shapes, finite weights small enough not to "
            "overflow the attention scores, the codes equal to the embedding's, a trained model's config equal to "
            "the one its train_config implies, metadata nested no deeper than interp writes, and on resume the step, "
            "optimiser and random-number states. The rows \"digest recomputed\" are such crafted files; "
            "`tests/test_checkpoint_hardening.py` has more of them. A `torch.save` file is checked before anything "
            "in it is unpickled: its zip directory is read (entry count, the names torch.save writes, sizes against "
            "the file and against limits, and no compressed entry, since torch.save never compresses: a zip bomb is "
            "refused at once), and only dense floating-point tensors are read (docs/learned_model.md, \"Limits\"; "
            "`tests/test_hostile_files.py`).\n\n"
            "Output paths are looked at with `stat` alone before any work (`interp._checks.check_output_file`, used "
            "by every writer: the CLI, the report, the analyses, checkpoints): a regular file or a new name is "
            "written through a temporary file and a rename; a FIFO, socket, block device, or a folder where a file "
            "must be, is refused without being opened (opening a FIFO would block); a character device such as "
            "/dev/null is written straight into by the text outputs and refused as a checkpoint; a trailing slash "
            "names a folder (`tests/test_output_paths.py`).\n\n"
            "Sizes and scales. `InContextKMeans.fit` estimates the memory each path needs from (n_samples, "
            "n_features, n_clusters, n_init, n_steps) before allocating and refuses what fits nowhere, naming the "
            "sizes; wide data (d much larger than n) run the construction's iterations without its (d + k)^2 "
            "weights. Labels and distances are right at any scale of X (1e-300 to 1e300); an inertia beyond float64 "
            "is reported as inf (or 0) with a `RuntimeWarning`. A learned model called directly refuses to return "
            "non-finite centroids computed outside its training range (`InvalidInput`) and warns "
            "(`OutOfTrainingRange`) on tasks spread over less than half the unit cube, where the shipped models "
            "degrade (docs/learned_model.md, \"Scales\"); the estimator warns the same for learned models when a "
            "few far points squeeze the rest of the data (`tests/test_hostile_numbers.py`). Where the estimator "
            "runs a learned model it also runs Lloyd's iterations from the same starts and warns "
            "(`LearnedWorseThanLloyd`, naming the inertia ratio and `model='lloyd'`) above 2 times Lloyd's inertia, "
            "a margin chosen from measurements on the models' own tasks and on data unlike them "
            "(docs/learned_model.md, \"What the learned models are for\"; `tests/test_estimator_self_check.py`); "
            "like scikit-learn it warns (`ConvergenceWarning`) when fewer distinct clusters than `n_clusters` are "
            "found. Warnings are shown in the table as what the call gets.\n\n"
            "Counts. Every count a user or a file supplies is bounded before any work: clustering steps (a forward, "
            "the estimator, a checkpoint's `inference` steps, training's unroll, rollout and evaluation steps) at "
            "most `interp._checks.MAX_STEPS` = 10,000, tasks at most `MAX_TASKS` = 1,000,000, training's "
            "optimiser steps at most 10^9, `n_init` at most 1,000; sizes (d, k, n, batch) by the memory estimate, "
            "and a forward's per-step trajectories by the available memory (`tests/test_bounds.py`, "
            "`tests/test_command_bounds.py`). A run longer than a shared-weight model's standing blocks borrows "
            "blocks for its hook points and gives them back after the call. Workers of a study, a sweep or a "
            "campaign die with their parent whatever kills it (`interp._processes.die_with`: `PR_SET_PDEATHSIG`, "
            "else a thread that watches the parent; `tests/test_orphans.py`).\n\n"
            "## Python API and the `interp` command\n\n")
    tail = ("\n\n## The analyses scripts (`python -m analyses.<script>`)\n\n"
            "Each runs through `interp._arguments.run`, as the `interp` command does: one line `python -m "
            "analyses.<script>: error: <message>` and exit 2 (argparse's own errors print the usage first); every "
            "flag is checked by a type of `interp._arguments`; `TMP` stands for a temporary folder and `<repo>` for "
            "the checkout.\n\n"
            + analyses_table())
    return head + "\n".join(rows) + tail + "\n"


if __name__ == "__main__":  # pragma: no cover
    os.chdir(ROOT)  # the analyses scripts run as ``python -m`` from the repository
    sys.path.insert(0, str(ROOT))
    sys.stdout.write(_markdown())
