"""Crafted checkpoints: the digest is unkeyed, so a file can be edited and its digest
recomputed; every such file is refused with a clear ``InvalidInput`` before anything large is allocated, or loads as
the model it really describes.

Each case edits a genuine file and rewrites it with a correct digest: through ``save_checkpoint`` (which computes
it), or, for headers that ``json.dumps`` cannot produce, with safetensors directly and the module's digest function.
"""

import json
import math
import os
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from interp._checks import InvalidInput
from interp.cli import main
from interp.model import KMeansTransformer, ModelConfig
from interp.model.checkpoint import (
    DIGEST,
    FORMAT,
    _digest,
    expected_shapes,
    load_checkpoint,
    load_model,
    save_checkpoint,
    save_model,
)
from interp.model.config import AttentionConfig, learned_model_config
from interp.training.state import TrainingState
from interp.training.train import TrainConfig, train

CONFIG = TrainConfig(d=2, k=3, n=16, batch=4, val_tasks=8, steps=4, eval_every=2)


@pytest.fixture(scope="module")
def run(tmp_path_factory, one_torch_thread) -> Path:
    """A genuine 4-step training checkpoint (d=2, k=3, Adam moments present)."""
    path = tmp_path_factory.mktemp("run") / "run.safetensors"
    train(CONFIG, path, progress=False)
    return path


@pytest.fixture
def tiny(tmp_path) -> tuple[dict, dict]:
    """(tensors, metadata) of a saved one-layer learned model, d=2, k=3 (no training state)."""
    torch.manual_seed(0)
    path = save_model(tmp_path / "tiny.safetensors", KMeansTransformer(learned_model_config(2, 3)))
    return load_checkpoint(path)


def rewrite(path: Path, tensors: dict, meta: dict) -> Path:
    """Write an edited checkpoint with a recomputed (valid) digest through the module's own save path."""
    return save_checkpoint(path, tensors, meta)


def rewrite_header(path: Path, tensors: dict, header: dict[str, str]) -> Path:
    """Write raw header strings (not necessarily what json.dumps gives) with a recomputed digest."""
    header = {"format": FORMAT, **header}
    contiguous = {name: tensor.contiguous() for name, tensor in tensors.items()}
    header[DIGEST] = _digest(contiguous, header)
    save_file(contiguous, str(path), metadata=header)
    return path


def edited_config(meta: dict, **changes) -> dict:
    return {**meta, "model_config": {**meta["model_config"], **changes}}


# ----- finding 4: sizes are checked against the tensors and limits before anything is allocated ---------------------
@pytest.mark.parametrize("n_layers", [100_000, 10_000_000])
@pytest.mark.parametrize("shared", [True, False])
def test_huge_n_layers_is_refused_at_once_without_allocating(tmp_path, tiny, n_layers, shared):
    tensors, meta = tiny
    path = rewrite(tmp_path / "deep.safetensors", tensors,
                   edited_config(meta, n_layers=n_layers, shared_weights=shared))
    assert path.stat().st_size < 30_000  # a ~25 KB file
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(InvalidInput, match=f"n_layers={n_layers} exceeds the limit 1,000"):
        load_model(path)
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 2.0, elapsed  # before: 102 s and 6.3 GB for n_layers = 100,000
    assert peak < 20e6, peak  # Python allocations while refusing: far below one block per layer


def test_n_layers_within_the_limit_still_loads(tmp_path, tiny):
    tensors, meta = tiny
    model = load_model(rewrite(tmp_path / "three.safetensors", tensors, edited_config(meta, n_layers=3)))
    assert model.config.n_layers == 3 and len(model.blocks) == 3


@pytest.mark.parametrize("changes,needle", [
    (dict(d=100_000), r"weights do not match its model config.*is \(5, 5\), needs \(100003, 100003\)"),
    (dict(d=10**12), "d=1000000000000 exceeds the limit"),
    (dict(k=10**12), "k=1000000000000 exceeds the limit"),
    (dict(k=4), r"weights do not match its model config"),
    (dict(ffn=True), r"missing \['model\.layers\.0\.ffn_centroids"),
])
def test_sizes_that_disagree_with_the_tensors_are_refused(tmp_path, tiny, changes, needle):
    tensors, meta = tiny
    path = rewrite(tmp_path / "sized.safetensors", tensors, edited_config(meta, **changes))
    start = time.perf_counter()
    with pytest.raises(InvalidInput, match=needle):
        load_model(path)
    assert time.perf_counter() - start < 2.0


def test_k_of_a_d_only_model_is_bounded_although_its_codes_are_empty(tmp_path):
    """embedding='none' stores codes of shape (k, 0): zero bytes for any k, so only the limit stops k = 1e12."""
    torch.manual_seed(0)
    tensors, meta = load_checkpoint(save_model(tmp_path / "none.safetensors",
                                               KMeansTransformer(learned_model_config(2, 3, "none"))))
    tensors = {**tensors, "model.codes": torch.zeros((10**12, 0))}
    path = rewrite(tmp_path / "big_k.safetensors", tensors, edited_config(meta, k=10**12))
    with pytest.raises(InvalidInput, match="k=1000000000000 exceeds the limit 1,000,000"):
        load_model(path)


@pytest.mark.parametrize("config", [
    learned_model_config(3, 5, "onehot"), learned_model_config(3, 5, "binary", bias=False),
    learned_model_config(2, 1, "binary"), learned_model_config(4, 3, "none"),
    ModelConfig(d=3, k=4, ffn=True, ffn_hidden=7, norm_slot=True, n_layers=3, shared_weights=False),
    ModelConfig(d=2, k=2, n_layers=2, attn_xc=AttentionConfig(bias=False)),
], ids=["onehot", "binary-nobias", "binary-k1", "none", "ffn-normslot-unshared", "mixed-bias"])
def test_expected_shapes_are_the_models_state_dict(config):
    """The shapes checked before allocation are exactly those of the model the config builds."""
    model = KMeansTransformer(config)
    assert expected_shapes(config) == {f"model.{name}": tuple(t.shape) for name, t in model.state_dict().items()}


# ----- finding 5: what is loaded is validated -----------------------------------------------------------------------
@pytest.mark.parametrize("value,needle", [(1e30, "magnitude 1e\\+30 > 4.29e\\+09"), (math.nan, "NaN or inf"),
                                          (math.inf, "NaN or inf"), (-math.inf, "NaN or inf")])
def test_non_finite_or_overflowing_weights_are_refused(tmp_path, tiny, value, needle):
    """float32 reaches (2 - 2^-23) 2^127, so the bound max^(1/4) is just under 2^32 = 4.29e9."""
    tensors, meta = tiny
    weight = tensors["model.layers.0.attn_xc.W_Q"].clone()
    weight[0, 1] = value
    path = rewrite(tmp_path / "w.safetensors", {**tensors, "model.layers.0.attn_xc.W_Q": weight}, meta)
    with pytest.raises(InvalidInput, match=f"model.layers.0.attn_xc.W_Q.*{needle}"):
        load_model(path)


def test_weights_of_a_float64_model_may_be_large(tmp_path, tiny):
    """The bound is finfo.max^(1/4) of the file's dtype: 1e30 fits float64 (bound ~2^256 = 1.16e77), not float32."""
    tensors, meta = tiny
    tensors = {name: t.double() for name, t in tensors.items()}
    tensors["model.layers.0.attn_xc.W_Q"][0, 1] = 1e30
    model = load_model(rewrite(tmp_path / "w64.safetensors", tensors, meta))
    assert model.layers[0].attn_xc.W_Q[0, 1].item() == 1e30 and model.codes.dtype == torch.float64


@pytest.mark.parametrize("codes", [torch.zeros(3, 3), torch.eye(3)[[1, 0, 2]], 2 * torch.eye(3)],
                         ids=["zeroed", "permuted", "scaled"])
def test_codes_must_be_the_embeddings_codes(tmp_path, tiny, codes):
    tensors, meta = tiny
    path = rewrite(tmp_path / "codes.safetensors", {**tensors, "model.codes": codes}, meta)
    with pytest.raises(InvalidInput, match="model.codes differ from the onehot codes of k=3 centroids"):
        load_model(path)


def test_mixed_or_integer_dtypes_are_refused(tmp_path, tiny):
    tensors, meta = tiny
    mixed = {**tensors, "model.layers.0.attn_xc.W_Q": tensors["model.layers.0.attn_xc.W_Q"].double()}
    with pytest.raises(InvalidInput, match="must all be float32 or all float64"):
        load_model(rewrite(tmp_path / "mixed.safetensors", mixed, meta))
    halves = {name: t.half() for name, t in tensors.items()}
    with pytest.raises(InvalidInput, match="must all be float32 or all float64"):
        load_model(rewrite(tmp_path / "half.safetensors", halves, meta))


@pytest.mark.parametrize("field,value", [("gamma", 1000.0), ("dropout", 0.9), ("normaliser", "sparsemax")])
def test_a_trained_models_config_edited_away_from_its_train_config_is_refused(tmp_path, run, field, value):
    tensors, meta = load_checkpoint(run)
    attention = {**meta["model_config"]["attn_xc"], field: value}
    path = rewrite(tmp_path / "edited.safetensors", tensors, edited_config(meta, attn_xc=attention))
    with pytest.raises(InvalidInput, match=f"model_config disagrees with the train_config.*attn_xc.{field}"):
        load_model(path)
    with pytest.raises(InvalidInput, match="model_config is not the one its train_config implies"):
        TrainingState.load(path, CONFIG)


def test_legal_values_edited_consistently_are_the_models_real_config(tmp_path, run, tiny):
    """gamma = 1000 in a plain model file, or dropout = 0.9 in both configs of a trained one, are legal models:
    they load as exactly what the file says (the digest cannot tell an edit from a save)."""
    tensors, meta = tiny
    attention = {**meta["model_config"]["attn_xc"], "gamma": 1000.0}
    model = load_model(rewrite(tmp_path / "gamma.safetensors", tensors, edited_config(meta, attn_xc=attention)))
    assert model.config.attn_xc.gamma == 1000.0 and model.config.attn_xx.gamma == 1.0
    tensors, meta = load_checkpoint(run)
    both = {**meta, "train_config": {**meta["train_config"], "dropout": 0.9},
            "model_config": replace(CONFIG, dropout=0.9).model_config().to_dict()}
    model = load_model(rewrite(tmp_path / "dropout.safetensors", tensors, both))
    assert model.config.attn_cc.dropout == 0.9 and not model.training


def test_damaged_train_config_is_refused(tmp_path, run):
    tensors, meta = load_checkpoint(run)
    for value, needle in ((["a list"], "invalid train_config: expected a JSON object"),
                          ({**meta["train_config"], "d": "four"}, "invalid train_config: d must be an int")):
        with pytest.raises(InvalidInput, match=needle):
            load_model(rewrite(tmp_path / "tc.safetensors", tensors, {**meta, "train_config": value}))


def test_the_model_layer_reads_train_config_as_training_does():
    """``trained_model_config`` (the model layer's reading of a saved train_config, which imports no training) gives
    ``TrainConfig.model_config()`` for every model field's non-default value and for a config that leaves fields out
    (their defaults are TrainConfig's)."""
    from dataclasses import asdict, fields

    from interp.model.config import TRAINED_MODEL_FIELDS, trained_model_config

    changed = {"d": 5, "k": 7, "embedding": "binary", "normaliser": "sparsemax", "dropout": 0.2, "bias": False,
               "attn_xx_identity": True}
    assert set(changed) | {"slot_equivariant"} == set(TRAINED_MODEL_FIELDS)
    for name, value in [*changed.items(), ("slot_equivariant", True)]:
        train = TrainConfig(**{name: value})
        assert trained_model_config(asdict(train)) == train.model_config(), name
    defaults = {field.name: field.default for field in fields(TrainConfig)}
    partial = {"d": 3, "k": 4}  # every other model field left out: TrainConfig's defaults
    assert trained_model_config(partial) == TrainConfig(**{**defaults, **partial}).model_config()


# ----- finding 6: deeply nested metadata ----------------------------------------------------------------------------
@pytest.mark.parametrize("depth", [17, 1_000, 200_000])  # containers inside one another
def test_deeply_nested_metadata_is_a_clear_error(tmp_path, tiny, run, depth):
    tensors, meta = tiny
    nested = "[" * depth + "]" * depth
    header = {key: json.dumps(value) for key, value in meta.items()}
    path = rewrite_header(tmp_path / "nested.safetensors", tensors, {**header, "note": nested})
    for read in (load_checkpoint, load_model):
        with pytest.raises(InvalidInput, match="metadata 'note' is nested deeper than 16 levels"):
            read(path)
    tensors, meta = load_checkpoint(run)
    header = {key: json.dumps(value) for key, value in meta.items()}
    resumed = rewrite_header(tmp_path / "nested_run.safetensors", tensors, {**header, "history": nested})
    with pytest.raises(InvalidInput, match="metadata 'history' is nested deeper than 16 levels"):
        TrainingState.load(resumed, CONFIG)


def test_metadata_nested_as_deep_as_interp_writes_loads(tmp_path, tiny):
    tensors, meta = tiny
    deep = 0
    for _ in range(16):
        deep = [deep]
    model = load_model(rewrite(tmp_path / "sixteen.safetensors", tensors, {**meta, "note": deep}))
    assert model.config.d == 2


def test_nested_metadata_is_one_line_from_every_command(tmp_path, tiny, run, capsys):
    """evaluate, report and train (resume) print one line and exit 2 (before: a RecursionError traceback)."""
    tensors, meta = tiny
    nested = "{\"a\":" * 100_000 + "1" + "}" * 100_000
    header = {key: json.dumps(value) for key, value in meta.items()}
    model_file = rewrite_header(tmp_path / "nested.safetensors", tensors, {**header, "model_config": nested})
    run_tensors, run_meta = load_checkpoint(run)
    run_header = {key: json.dumps(value) for key, value in run_meta.items()}
    run_file = rewrite_header(tmp_path / "nested_run.safetensors", run_tensors, {**run_header, "scheduler": nested})
    commands = [["evaluate", "--checkpoint", str(model_file), "--out", str(tmp_path / "eval"), "--tasks", "1"],
                ["report", "--checkpoint", str(model_file), "--out", str(tmp_path / "r.html"), "--tasks", "1"],
                ["train", "--out", str(run_file), "--no-progress", "--threads", "1", "--d", "2", "--k", "3",
                 "--n", "16", "--batch", "4", "--val-tasks", "8", "--steps", "6", "--eval-every", "2"]]
    for argv in commands:
        assert main(argv) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and "is nested deeper than 16 levels" in lines[0], lines
    assert not (tmp_path / "r.html").exists()


# ----- finding 6: run state that cannot be resumed ------------------------------------------------------------------
def _resume_edited(tmp_path: Path, run: Path, edit) -> Path:
    tensors, meta = load_checkpoint(run)
    tensors, meta = dict(tensors), json.loads(json.dumps(meta))
    edit(tensors, meta)
    return rewrite(tmp_path / "edited_run.safetensors", tensors, meta)


def _set(mapping, key, value):
    mapping[key] = value


RESUME_CASES = {
    "rng state of the wrong size": (lambda t, m: _set(t, "rng.tasks", t["rng.tasks"][:100]),  # mt19937: 5056 bytes
                                    r"rng.tasks must be a torch.uint8 state of shape \(5056,\), got .* \(100,\)"),
    "rng state of the wrong dtype": (lambda t, m: _set(t, "rng.dropout", t["rng.dropout"].float()),
                                     "rng.dropout must be a torch.uint8 state"),
    "rng state missing": (lambda t, m: t.pop("rng.dropout"), r"random-number states \['rng.dropout'\] are missing"),
    "both names of the dropout stream": (lambda t, m: _set(t, "rng.torch", t["rng.dropout"].clone()),
                                         r"unexpected tensors \['rng.torch'\]"),
    "optimiser moment of the wrong shape": (lambda t, m: _set(t, "optimizer.0.exp_avg", torch.zeros(7)),
                                            r"optimizer.0 moments have shape \(7,\)"),
    "optimiser moment NaN": (lambda t, m: t["optimizer.3.exp_avg_sq"].fill_(math.nan), "optimizer.3 moments must be"),
    "optimiser slot missing": (lambda t, m: t.pop("optimizer.2.step"), "optimiser tensors.*optimizer.2.step"),
    "optimiser for another model": (lambda t, m: _set(m["optimizer"]["param_groups"][0], "params", [0, 1]),
                                    "optimizer param_groups name parameters"),
    "optimiser lr above the config's": (lambda t, m: _set(m["optimizer"]["param_groups"][0], "lr", 5.0),
                                        r"optimizer lr must be in \(0, 0.01\]"),
    "optimiser betas edited": (lambda t, m: _set(m["optimizer"]["param_groups"][0], "betas", [0.5, 0.5]),
                               r"optimizer settings \['betas'\]"),
    "step 12.5": (lambda t, m: _set(m, "step", 12.5), "step must be a non-negative integer, got 12.5"),
    "step -2": (lambda t, m: _set(m, "step", -2), "step must be a non-negative integer, got -2"),
    "step true": (lambda t, m: _set(m, "step", True), "step must be a non-negative integer, got True"),
    "history not a list": (lambda t, m: _set(m, "history", {"step": 0}), "history must be a non-empty list"),
    "history entry with a text objective": (lambda t, m: _set(m["history"][0], "relative_objective", "low"),
                                            "is not \\(step, loss, relative_objective, lr\\)"),
    "history beyond the step": (lambda t, m: _set(m["history"][-1], "step", 99), "must increase up to the step 4"),
    "scheduler factor edited": (lambda t, m: _set(m["scheduler"], "factor", 10.0), r"scheduler state \['factor'\]"),
    "scheduler counter a text": (lambda t, m: _set(m["scheduler"], "num_bad_epochs", "x"), "scheduler state progress"),
    "scheduler not an object": (lambda t, m: _set(m, "scheduler", [1]), "scheduler state must be a JSON object"),
    "an unknown tensor": (lambda t, m: _set(t, "payload", torch.zeros(3)), r"unexpected tensors \['payload'\]"),
    "float64 weights": (lambda t, m: t.update({k: v.double() for k, v in t.items() if k.startswith("model.")}),
                        "training checkpoints hold float32 weights"),
    "NaN weight": (lambda t, m: t["model.layers.0.attn_cc.b_V"].fill_(math.nan), "attn_cc.b_V has NaN or inf"),
    "no optimizer metadata": (lambda t, m: m.pop("optimizer"), r"metadata lacks \['optimizer'\]"),
    "trainer tag a list": (lambda t, m: _set(m, "trainer", ["x"]),
                           r"trainer must be absent \(train\(\)\) or 'seed_batch' .*, got \['x'\]"),
    "trainer tag unknown": (lambda t, m: _set(m, "trainer", "train_many"), "trainer must be absent .*'train_many'"),
    "divergence note a number": (lambda t, m: _set(m, "diverged", 3), "diverged must be a note or null"),
}


@pytest.mark.parametrize("case", list(RESUME_CASES), ids=list(RESUME_CASES))
def test_run_state_that_cannot_be_resumed_is_a_clear_error(tmp_path, run, case):
    edit, needle = RESUME_CASES[case]
    path = _resume_edited(tmp_path, run, edit)
    with pytest.raises(InvalidInput, match=needle):
        train(replace(CONFIG, steps=8), path, progress=False)


def test_the_genuine_run_resumes_and_an_unknown_scheduler_key_is_dropped(tmp_path, run):
    """The checks accept what the trainer writes; a key ReduceLROnPlateau does not have (here one that would shadow
    its step method) is not loaded."""
    path = _resume_edited(tmp_path, run, lambda t, m: _set(m["scheduler"], "step", 5))
    meta = train(replace(CONFIG, steps=8), path, progress=False)
    assert meta["step"] == 8 and [entry["step"] for entry in meta["history"]] == [0, 2, 4, 6, 8]
    assert "step" not in meta["scheduler"]


# ----- finding 10: output paths are checked before training -------------------------------------------------------
def test_a_path_that_is_not_utf8_is_refused_before_training(tmp_path):
    bad = Path(os.fsdecode(bytes(tmp_path) + b"/run-\xff.safetensors"))
    with pytest.raises(InvalidInput, match=r"run-\\udcff.safetensors' is not a valid UTF-8 path"):
        train(CONFIG, bad, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_missing_folder_is_refused_not_created(tmp_path):
    deep = tmp_path / "nonexistent" / "deep" / "x.safetensors"
    with pytest.raises(InvalidInput, match=f"its folder {deep.parent} does not exist; create it first"):
        train(CONFIG, deep, progress=False)
    (tmp_path / "a_file").write_text("")
    with pytest.raises(InvalidInput, match="is not a folder"):
        train(CONFIG, tmp_path / "a_file" / "x.safetensors", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]
    with pytest.raises(FileNotFoundError, match="its folder .* does not exist"):
        save_model(deep, KMeansTransformer(learned_model_config(2, 3)))
    assert not (tmp_path / "nonexistent").exists()
