"""Hostile files and formats: a zip bomb and other archives torch.save never writes, tensors that are not dense, a
papers' file in ``interp report``, float64 models in every command and malformed training history metadata.

The papers'-layout files are written with the stand-in of the authors' model of ``test_paper_format``; every
archive is refused from its zip central directory alone, before ``torch.load`` is called (checked by replacing it).
"""

import copy
import csv
import io
import math
import struct
import time
import zipfile
from pathlib import Path

import pytest
import torch
from test_paper_format import cli_args, save_training_checkpoint, stand_in_model

from interp._checks import InvalidInput
from interp.cli import main
from interp.evaluate import EvalConfig, evaluate
from interp.model import KMeansTransformer
from interp.model.checkpoint import load_model, save_model
from interp.model.config import learned_model_config
from interp.model.torch_save_file import MAX_PICKLE_BYTES, MAX_RECORD_BYTES, MAX_ZIP_ENTRIES
from interp.report.builder import build_report
from interp.report.explanation import ExplanationSettings
from interp.tasks import TaskConfig

D, K = 3, 4
MB = 2**20
SMALL = ExplanationSettings(tasks=4, fit_tasks=3, permutations=4, path_tasks=2, average_permutations=2, steps=3,
                            n=64, seed=5)


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Tiny problems: one torch thread."""


@pytest.fixture
def torch_load_calls(monkeypatch) -> list:
    """Every call of ``torch.load`` (then made as usual), to show that refused files were never unpickled."""
    calls, original = [], torch.load

    def recording(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "load", recording)
    return calls


def papers_file(path: Path, dtype=torch.float64, **edits) -> Path:
    """A training checkpoint of the papers' code (weights, optimiser, scheduler, cli_args); with ``edits``, state
    dict entries replaced, only the weights and cli_args."""
    model = stand_in_model(D + K, seed=1, dtype=dtype)
    if edits:
        state = {**model.state_dict(), **edits}
        torch.save({"model_state_dict": state, "cli_args": cli_args(D, K, "onehot")}, path)
        return path
    return Path(save_training_checkpoint(path, model, cli_args(D, K, "onehot")))


def one_line_error(argv: list[str], capsys) -> str:
    """The one line ``interp`` prints for a refused input (exit status 2)."""
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


# ----- a zip bomb and other archives torch.save never writes: refused from the central directory -----------------
def write_bomb(path: Path, inflated: int) -> Path:
    """A torch.save-shaped archive whose data.pkl is ``inflated`` zero bytes, deflate-compressed (about 1000:1); the
    zeros are written in 1 MB chunks, so the test never holds them at once."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        with archive.open("bomb/data.pkl", "w", force_zip64=True) as entry:
            chunk = bytes(MB)
            for _ in range(inflated // MB):
                entry.write(chunk)
        archive.writestr("bomb/version", "3\n", compress_type=zipfile.ZIP_STORED)
        archive.writestr("bomb/byteorder", "little", compress_type=zipfile.ZIP_STORED)
    return path


def test_a_zip_bomb_is_refused_at_once_and_never_unpickled(tmp_path, torch_load_calls):
    path = write_bomb(tmp_path / "bomb.pt", inflated=200 * MB)
    assert path.stat().st_size < 400_000  # 200 MB of zeros in about 200 kB
    start = time.perf_counter()
    with pytest.raises(InvalidInput, match=r"bomb\.pt: refused: zip entry 'bomb/data\.pkl' is compressed "
                                           r"\(deflate, 209,715,200 bytes from [\d,]+\)"):
        load_model(path)
    assert time.perf_counter() - start < 2.0
    assert torch_load_calls == []


def test_a_zip_bomb_is_one_line_from_the_command_line(tmp_path, capsys):
    path = write_bomb(tmp_path / "bomb.pt", inflated=20 * MB)
    line = one_line_error(["evaluate", "--checkpoint", str(path), "--out", str(tmp_path / "eval"), "--threads", "1"],
                          capsys)
    assert "bomb.pt: refused: zip entry 'bomb/data.pkl' is compressed" in line
    assert not (tmp_path / "eval").exists()


def write_archive(path: Path, records: dict[str, bytes]) -> Path:
    """A zip archive of stored (uncompressed) ``records``, as torch.save writes them."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in records.items():
            archive.writestr(name, data)
    return path


def genuine_records(tmp_path: Path) -> dict[str, bytes]:
    """The records of a genuine papers' training checkpoint (torch.save's own layout, folder 'run')."""
    with zipfile.ZipFile(papers_file(tmp_path / "run.pt")) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def declare_sizes(path: Path, name: str, file_size: int, compress_size: int) -> Path:
    """Overwrite the sizes the central directory gives for ``name`` (the local header and the data are unchanged)."""
    data = bytearray(path.read_bytes())
    offset = 0
    while (offset := data.find(b"PK\x01\x02", offset)) >= 0:
        length = struct.unpack_from("<H", data, offset + 28)[0]
        if data[offset + 46: offset + 46 + length].decode() == name:
            struct.pack_into("<II", data, offset + 20, compress_size, file_size)
        offset += 4
    path.write_bytes(bytes(data))
    with zipfile.ZipFile(path) as archive:  # the directory now says so
        info = archive.getinfo(name)
        assert (info.file_size, info.compress_size) == (file_size, compress_size)
    return path


def test_archives_torch_save_never_writes_are_refused_from_the_directory(tmp_path, torch_load_calls):
    records = genuine_records(tmp_path)
    pickle_name = "run/data.pkl"
    storage = next(name for name in records if name.startswith("run/data/"))
    cases = {
        "extra entry": ({**records, "run/code/evil.py": b"import os"},
                        r"entry 'run/code/evil\.py' is not one torch\.save writes"),
        "two folders": ({**records, "other/data.pkl": records[pickle_name]},
                        r"entries in 2 top-level folders \('other', 'run'\)"),
        "no data.pkl": ({name: data for name, data in records.items() if name != pickle_name},
                        r"no 'run/data\.pkl'"),
        "pickle too large": ({**records, pickle_name: bytes(MAX_PICKLE_BYTES + 1)},
                             rf"'run/data\.pkl' holds {MAX_PICKLE_BYTES + 1:,} bytes.*\(limit {MAX_PICKLE_BYTES:,}"),
        "record too large": ({**records, "run/version": bytes(MAX_RECORD_BYTES + 1)},
                             rf"'run/version' holds {MAX_RECORD_BYTES + 1:,} bytes.*\(limit {MAX_RECORD_BYTES:,}"),
        "too many entries": ({**records, **{f"run/data/{10**6 + index}": b"" for index in range(MAX_ZIP_ENTRIES)}},
                             rf"has {MAX_ZIP_ENTRIES + len(records):,} entries.*\(limit {MAX_ZIP_ENTRIES:,}"),
    }
    for label, (contents, message) in cases.items():
        path = write_archive(tmp_path / f"{label.replace(' ', '_')}.pt", contents)
        with pytest.raises(InvalidInput, match=rf"{path.name}: (refused|not a readable torch\.save file).*{message}"):
            load_model(path)
    duplicated = tmp_path / "duplicated.pt"
    with zipfile.ZipFile(duplicated, "w") as archive, pytest.warns(UserWarning, match="Duplicate name"):
        for name, data in [*records.items(), (pickle_name, records[pickle_name])]:
            archive.writestr(name, data)
    with pytest.raises(InvalidInput, match=r"duplicated\.pt: refused: .* holds 'run/data\.pkl' more than once"):
        load_model(duplicated)
    whole = write_archive(tmp_path / "whole.pt", records)
    size = whole.stat().st_size
    declared = {"larger than the file": (storage, 1_500_000_000, 1_500_000_000,
                                         rf"'{storage}' declares 1,500,000,000 bytes.* file of {size:,} bytes"),
                "sizes differ": (pickle_name, 1_500_000_000, len(records[pickle_name]),
                                 rf"'run/data\.pkl' is stored \({len(records[pickle_name]):,} bytes\) but declares "
                                 "1,500,000,000 bytes uncompressed")}
    for label, (name, file_size, compress_size, message) in declared.items():
        path = tmp_path / f"{label.replace(' ', '_')}.pt"
        path.write_bytes(whole.read_bytes())
        with pytest.raises(InvalidInput, match=rf"{path.name}: refused: .*{message}"):
            load_model(declare_sizes(path, name, file_size, compress_size))
    assert torch_load_calls == []


def test_genuine_papers_files_of_every_layout_still_load(tmp_path, torch_load_calls):
    """A training checkpoint with optimiser state, a bare state dict saved to a buffer (folder 'archive') and the
    legacy format: each is read with one torch.load and gives the stand-in's weights."""
    reference = stand_in_model(D + K, seed=1)
    expected = reference.CAX.W_q.weight
    training = papers_file(tmp_path / "run.pt")
    buffer = io.BytesIO()
    torch.save(reference.state_dict(), buffer)
    bare = tmp_path / "bare.pt"
    bare.write_bytes(buffer.getvalue())
    with zipfile.ZipFile(bare) as archive:
        assert {name.split("/")[0] for name in archive.namelist()} == {"archive"}
    legacy = tmp_path / "legacy.pt"
    torch.save({"model_state_dict": reference.state_dict(), "cli_args": cli_args(D, K, "onehot")}, legacy,
               _use_new_zipfile_serialization=False)
    models = [load_model(training), load_model(bare, d=D, k=K, embedding="onehot"), load_model(legacy)]
    assert len(torch_load_calls) == 3
    for model in models:
        assert torch.equal(model.layers[0].attn_xc.W_Q, expected)


def test_a_legacy_file_declaring_a_huge_storage_is_refused_at_once(tmp_path):
    """The legacy format is bounded by its file: a storage declared at 16 GB is checked against the bytes the file
    holds for it before anything is read (torch allocates it untouched, then refuses)."""
    path = tmp_path / "legacy.pt"
    torch.save({"model_state_dict": {"CAX.W_q.weight": torch.zeros(12345, dtype=torch.float64)}}, path,
               _use_new_zipfile_serialization=False)
    data = path.read_bytes()
    declared = b"M" + struct.pack("<H", 12345)  # the pickle's BININT2 numel of the storage
    assert data.count(declared) >= 1
    path.write_bytes(data.replace(declared, b"J" + struct.pack("<i", 2_000_000_000), 1))
    start = time.perf_counter()
    with pytest.raises(InvalidInput, match=r"legacy\.pt: not a readable torch\.save file .*wrong byte size"):
        load_model(path)
    assert time.perf_counter() - start < 2.0


# ----- tensors that are not dense ----------------------------------------------------------------------------------
NOT_DENSE = {
    "sparse_coo": (lambda t: t.to_sparse(), r"is a sparse tensor \(torch\.sparse_coo\); only dense tensors"),
    "sparse_csr": (lambda t: t.to_sparse_csr(), r"is a sparse tensor \(torch\.sparse_csr\); only dense tensors"),
    "sparse_csc": (lambda t: t.to_sparse_csc(), r"is a sparse tensor \(torch\.sparse_csc\)"),
    "sparse_bsr": (lambda t: t.to_sparse_bsr((7, 7)), r"is a sparse tensor \(torch\.sparse_bsr\)"),
    "meta": (lambda t: t.to("meta"), r"is a meta tensor \(a shape without values\)"),
    "nested": (lambda t: torch.nested.nested_tensor([t, t]), r"is a nested tensor; only dense tensors"),
    "quantized": (lambda t: torch.quantize_per_tensor(t.float(), 0.1, 0, torch.qint8),
                  r"is a quantized tensor \(torch\.qint8\); only dense floating-point tensors"),
}


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch warns that sparse CSR/CSC and nested are in beta
@pytest.mark.parametrize("kind", list(NOT_DENSE))
def test_tensors_that_are_not_dense_are_refused_by_name(tmp_path, kind):
    make, message = NOT_DENSE[kind]
    weight = stand_in_model(D + K, seed=1).CAX.W_q.weight.detach()
    path = papers_file(tmp_path / f"{kind}.pt", **{"CAX.W_q.weight": make(weight)})
    with pytest.raises(InvalidInput, match=rf"{kind}\.pt: CAX\.W_q\.weight {message}"):
        load_model(path)


def test_a_sparse_tensor_is_one_line_from_the_command_line(tmp_path, capsys):
    weight = stand_in_model(D + K, seed=1).CAX.W_q.weight.detach()
    path = papers_file(tmp_path / "sparse.pt", **{"CAX.W_q.weight": weight.to_sparse()})
    line = one_line_error(["evaluate", "--checkpoint", str(path), "--out", str(tmp_path / "eval"), "--threads", "1"],
                          capsys)
    assert line.endswith("sparse.pt: CAX.W_q.weight is a sparse tensor (torch.sparse_coo); only dense tensors are "
                         "read")


def test_cli_args_settings_of_other_types_are_refused(tmp_path):
    """Settings the weights-only unpickler gives as tensors, lists or dicts are named, not compared or hashed."""
    model = stand_in_model(D + K, seed=1)
    cases = {"dqkv": (dict(dqkv=torch.ones(2)), r"cli_args dqkv=tensor\(\[1\., 1\.\]\): only dqkv = 1"),
             "scratch": (dict(scratch=["onehot"]), r"cli_args scratch=\['onehot'\] is not one this loader maps"),
             "attn_act": (dict(attn_act={"softmax": 1}), r"cli_args attn_act=\{'softmax': 1\} is not one this loader")}
    for name, (changes, message) in cases.items():
        path = tmp_path / f"{name}.pt"
        torch.save({"model_state_dict": model.state_dict(), "cli_args": {**cli_args(D, K, "onehot"), **changes}}, path)
        with pytest.raises(InvalidInput, match=rf"{name}\.pt: {message}"):
            load_model(path)


# ----- float64 models in every command ---------------------------------------------------------------------------
def test_float64_and_float32_models_evaluate_on_the_same_tasks(tmp_path):
    """One float32 model and its float64 copy: both evaluate, on the same tasks (Lloyd's curves agree to float32
    rounding), with the same results up to rounding."""
    torch.manual_seed(0)
    single = KMeansTransformer(learned_model_config(2, 3, "onehot"))
    paths = [save_model(tmp_path / "single.safetensors", single),
             save_model(tmp_path / "double.safetensors", copy.deepcopy(single).double())]
    assert load_model(paths[1]).codes.dtype == torch.float64
    out = tmp_path / "eval"
    assert main(["evaluate", "--checkpoint", *map(str, paths), "--out", str(out), "--tasks", "6", "--steps", "3",
                 "--inits", "random", "--n", "32", "--threads", "1"]) == 0
    with open(out / "evaluation.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    by_step = {}
    for row in rows:
        by_step.setdefault(int(row["step"]), {})[Path(row["checkpoint"]).stem] = row
    assert sorted(by_step) == [0, 1, 2, 3]
    for step, pair in by_step.items():
        for column in ("model", "lloyd"):
            first, second = float(pair["single"][column]), float(pair["double"][column])
            assert math.isfinite(first) and abs(first - second) < 1e-4, (step, column, first, second)


def test_the_evaluation_memory_estimate_counts_the_models_precision(monkeypatch):
    """Tasks and trajectories are held in the model's precision: a float64 model needs twice a float32 one's."""
    base = TaskConfig(n=16, d=2, k=3)
    config = EvalConfig(n_tasks=4, steps=2000, inits=("random",))  # long trajectories outweigh drawing the tasks
    single, double = config.memory_needs(base, itemsize=4), config.memory_needs(base, itemsize=8)
    assert [need.what for need in single] == ["the tasks", "the centroid trajectories of one chunk"]
    assert [need.nbytes for need in double] == [2 * need.nbytes for need in single]
    checked = []

    def stop_after_the_check(work, needs):
        checked.append(needs)
        raise InterruptedError  # the check is all this test needs: no evaluation runs

    monkeypatch.setattr("interp.evaluate.check_memory", stop_after_the_check)
    torch.manual_seed(0)
    model = KMeansTransformer(learned_model_config(2, 3, "onehot")).double()
    with pytest.raises(InterruptedError):
        evaluate({"double": model}, base, config)
    assert checked == [double]


@pytest.mark.slow  # a whole report, at small sizes: about 20 s
@pytest.mark.filterwarnings("ignore::interp.model.transformer.OutOfTrainingRange")  # an untrained model drifts
def test_a_float64_papers_file_evaluates_and_reports(tmp_path):
    """The stand-in of the authors' model is float64: evaluate runs it, and report reads the file (no interp
    metadata: the page says whose file it is and shows its cli_args)."""
    path = papers_file(tmp_path / "run.pt")
    assert main(["evaluate", "--checkpoint", str(path), "--out", str(tmp_path / "eval"), "--tasks", "4", "--steps",
                 "2", "--inits", "random", "--n", "32", "--threads", "1"]) == 0
    model = load_model(path)
    rows = evaluate({"run": model}, TaskConfig(n=32, d=D, k=K), EvalConfig(n_tasks=4, steps=2, inits=("random",)))
    assert all(math.isfinite(row["model"]) for row in rows)
    page = build_report(str(path), tmp_path / "report.html", n_tasks=4, explanation_settings=SMALL).read_text()
    assert "a checkpoint of the papers&#x27; own code" in page
    assert "nclusters" in page and "attn_itemp" in page  # its cli_args
    assert f"d={D}, k={K}" in page


# ----- malformed training history ----------------------------------------------------------------------------------
MALFORMED_HISTORIES = {
    "a text": ("low", r"history must be a list of evaluations, got a str"),
    "a list of texts": (["step 0", "step 2"], r"history\[0\] must be an object .*, got a str"),
    "an object": ({"step": 0, "relative_objective": 0.5}, r"history must be a list of evaluations, got a dict"),
    "no step": ([{"relative_objective": 0.5}], r"history\[0\] lacks 'step'"),
    "no objective": ([{"step": 0, "relative_objective": 0.5}, {"step": 2}], r"history\[1\] lacks 'relative_objective'"),
    "a text step": ([{"step": "2", "relative_objective": 0.5}], r"history\[0\] step must be a non-negative integer, "
                                                                r"got '2'"),
    "a negative step": ([{"step": -1, "relative_objective": 0.5}], r"history\[0\] step must be a non-negative"),
    "a boolean step": ([{"step": True, "relative_objective": 0.5}], r"history\[0\] step must be a non-negative"),
    "a text objective": ([{"step": 0, "relative_objective": "0.5"}], r"history\[0\] relative_objective must be a "
                                                                     r"number, got '0\.5'"),
    "a list loss": ([{"step": 0, "relative_objective": 0.5, "loss": [1]}], r"history\[0\] loss must be a number or "
                                                                           r"null, got \[1\]"),
}


@pytest.fixture(scope="module")
def tiny_model() -> KMeansTransformer:
    torch.manual_seed(0)
    return KMeansTransformer(learned_model_config(2, 3, "onehot"))


@pytest.mark.parametrize("case", list(MALFORMED_HISTORIES))
def test_malformed_history_is_refused_naming_the_file_and_field(tmp_path, tiny_model, case):
    history, message = MALFORMED_HISTORIES[case]
    path = save_model(tmp_path / "edited.safetensors", tiny_model, history=history)  # a valid digest
    with pytest.raises(InvalidInput, match=rf"edited\.safetensors: metadata {message}"):
        load_model(path)


def test_malformed_history_is_one_line_from_report_and_evaluate(tmp_path, tiny_model, capsys):
    path = save_model(tmp_path / "edited.safetensors", tiny_model, history=["step 0", "step 2"])
    for argv in (["report", "--checkpoint", str(path), "--out", str(tmp_path / "r.html"), "--tasks", "1"],
                 ["evaluate", "--checkpoint", str(path), "--out", str(tmp_path / "eval"), "--tasks", "1"]):
        line = one_line_error([*argv, "--threads", "1"], capsys)
        assert "edited.safetensors: metadata history[0] must be an object" in line
    assert not (tmp_path / "r.html").exists()


def test_well_formed_histories_load(tmp_path, tiny_model):
    """What training writes (loss null at step 0, learning rates, a NaN objective of a diverged run) and no
    evaluations at all."""
    written = [{"step": 0, "loss": None, "relative_objective": 1.2, "lr": 0.01},
               {"step": 2, "loss": 3.5, "relative_objective": math.nan, "lr": 0.005}]
    for index, history in enumerate((written, [])):
        path = save_model(tmp_path / f"ok{index}.safetensors", tiny_model, history=history)
        assert load_model(path).config == tiny_model.config
