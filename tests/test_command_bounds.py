"""Bounds and output rules every command shares: a symbolic-link loop or a name that is not UTF-8 is refused as an
output by every writer, ``--device`` names only devices the machine has (a CPU index other than 0 included), every
count option is bounded at parse time, clustering-step counts a user or a checkpoint supplies are at most
``MAX_STEPS``, a checkpoint is recognised by its content whatever its name, and the analyses' explanation checks
what it will write before any work. Each refusal is one line naming the option (exit 2)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from interp._checks import MAX_STEPS, MAX_TASKS, InvalidInput, check_device, check_output_file, check_output_folder
from interp.cli import main
from interp.training.config import MAX_TRAIN_STEPS

pytestmark = pytest.mark.usefixtures("one_torch_thread")
QUICK_EVALUATE = ["--tasks", "1", "--steps", "1", "--n", "16", "--inits", "random", "--no-baselines", "--threads", "1"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    from interp.model import KMeansTransformer
    from interp.model.checkpoint import save_model
    from interp.model.config import learned_model_config

    torch.manual_seed(0)
    return save_model(tmp_path_factory.mktemp("bounds") / "tiny.safetensors",
                      KMeansTransformer(learned_model_config(2, 3, "onehot")))


def outcome(argv: list[str], capsys) -> tuple[int, list[str]]:
    """(exit status, the non-empty lines of stderr) of ``interp argv`` run in this process."""
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own refusals
        code = stop.code
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def refused(argv: list[str], capsys) -> str:
    """The last line of a refusal (exit 2, no traceback)."""
    code, lines = outcome(argv, capsys)
    assert code == 2, lines
    assert lines and not any("Traceback" in line for line in lines), lines
    return lines[-1]


# ----- a loop of symbolic links as an output -----------------------------------------------------------------
@pytest.fixture
def loop(tmp_path) -> Path:
    link = tmp_path / "loop"
    link.symlink_to(link.name)  # a link to itself: stat fails with ELOOP
    return link


@pytest.mark.parametrize("command", ["evaluate", "report", "train"])
def test_a_symlink_loop_as_out_is_one_line_naming_out(checkpoint, loop, capsys, command):
    argv = {"evaluate": ["evaluate", "--checkpoint", str(checkpoint), "--out", str(loop), *QUICK_EVALUATE],
            "report": ["report", "--checkpoint", str(checkpoint), "--out", str(loop), "--tasks", "1"],
            "train": ["train", "--out", str(loop), "--d", "2", "--k", "2", "--n", "8", "--steps", "1"]}[command]
    line = refused(argv, capsys)
    assert line == (f"interp {command}: error: --out {loop}: a symbolic link on this path leads back to itself (a "
                    "loop of links); give another path"), line


def test_a_symlink_loop_is_refused_by_the_output_checks(loop):
    for check in (lambda: check_output_file(loop, "out"), lambda: check_output_folder(loop, ["a.csv"], "out"),
                  lambda: check_output_file(loop / "inside.html", "out")):
        with pytest.raises(InvalidInput, match="out .*loop.*: a symbolic link on this path leads back to itself"):
            check()


# ----- names that are not UTF-8: one rule for every writer --------------------------------------------------------
def test_every_writer_refuses_a_name_that_is_not_utf8(checkpoint, tmp_path, capsys):
    folder = str(tmp_path) + "/\udcff"  # the byte 0xff: a valid Linux file name, not UTF-8
    line = refused(["evaluate", "--checkpoint", str(checkpoint), "--out", folder, *QUICK_EVALUATE], capsys)
    assert "--out" in line and "is not a valid UTF-8 path" in line, line
    assert not os.path.exists(folder), "evaluate created the folder"
    line = refused(["report", "--checkpoint", str(checkpoint), "--out", folder + ".html", "--tasks", "1"], capsys)
    assert "--out" in line and "is not a valid UTF-8 path" in line, line
    for check in (lambda: check_output_file(folder, "out"), lambda: check_output_folder(folder, [], "out")):
        with pytest.raises(InvalidInput, match="is not a valid UTF-8 path"):
            check()


# ----- devices --------------------------------------------------------------------------------------------------
def test_check_device_refuses_a_cpu_index_other_than_0():
    assert check_device("cpu:0", "--device") == torch.device("cpu:0")
    for name in ("cpu:1", "cpu:7"):
        with pytest.raises(InvalidInput, match=f"--device '{name}': this machine has one CPU device, 'cpu' "
                                               r"\(or 'cpu:0'\)"):
            check_device(name, "--device")
        with pytest.raises(InvalidInput, match=f"device '{name}'"):
            check_device(torch.device(name), "device")


@pytest.mark.parametrize("command", ["train", "evaluate", "report"])
def test_every_command_refuses_cpu_7(checkpoint, tmp_path, capsys, command):
    argv = {"train": ["train", "--out", str(tmp_path / "run.safetensors"), "--d", "2", "--k", "2", "--n", "8"],
            "evaluate": ["evaluate", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "out"),
                         *QUICK_EVALUATE],
            "report": ["report", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "r.html")]}[command]
    line = refused([*argv, "--device", "cpu:7"], capsys)
    assert "--device 'cpu:7': this machine has one CPU device" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_estimator_refuses_cpu_7():
    import numpy as np

    from interp.estimator import InContextKMeans

    with pytest.raises(InvalidInput, match="device 'cpu:7': this machine has one CPU device"):
        InContextKMeans(n_clusters=2, device="cpu:7").fit(np.random.RandomState(0).rand(20, 3))


# ----- every count option bounded at parse time, naming its flag -------------------------------------------------
COUNTS = [  # (command and its other arguments, flag, the least value, the largest value)
    (["verify"], "--tasks", 1, MAX_TASKS),
    (["verify"], "--layers", 1, MAX_STEPS),
    (["evaluate", "--checkpoint", "main-onehot", "--out", "OUT"], "--tasks", 1, MAX_TASKS),
    (["evaluate", "--checkpoint", "main-onehot", "--out", "OUT"], "--steps", 1, MAX_STEPS),
    (["evaluate", "--checkpoint", "main-onehot", "--out", "OUT"], "--n", 1, None),
    (["report", "--checkpoint", "main-onehot", "--out", "OUT"], "--tasks", 1, MAX_TASKS),
    *((["train", "--out", "OUT"], flag, 1, None) for flag in ("--d", "--k", "--n", "--batch")),
    (["train", "--out", "OUT"], "--steps", 1, MAX_TRAIN_STEPS),
    (["train", "--out", "OUT"], "--eval-every", 1, MAX_TRAIN_STEPS),
    (["train", "--out", "OUT"], "--val-tasks", 1, MAX_TASKS),
    (["train", "--out", "OUT"], "--plateau-patience", 0, MAX_TRAIN_STEPS),
    (["train", "--out", "OUT"], "--unroll", 1, MAX_STEPS),
    (["train", "--out", "OUT"], "--rollout", 0, MAX_STEPS),
    (["train", "--out", "OUT"], "--eval-steps", 1, MAX_STEPS),
    *(([command, *rest], "--threads", 1, os.cpu_count()) for command, rest in (
        ("train", ["--out", "OUT"]), ("evaluate", ["--checkpoint", "main-onehot", "--out", "OUT"]),
        ("report", ["--checkpoint", "main-onehot", "--out", "OUT"]))),
]


@pytest.mark.parametrize("argv, flag, least, largest", COUNTS, ids=[f"{c[0][0]}{c[1]}" for c in COUNTS])
def test_every_count_option_is_bounded_at_parse_time(tmp_path, capsys, monkeypatch, argv, flag, least, largest):
    import interp.cli

    def no_work(args):
        raise AssertionError("the command ran: the value was not refused when the options were parsed")

    for name in ("_verify", "_train", "_evaluate", "_report"):
        monkeypatch.setattr(interp.cli, name, no_work)
    argv = [str(tmp_path / "out") if part == "OUT" else part for part in argv]
    too_small = refused([*argv, flag, str(least - 1)], capsys)
    assert f"error: argument {flag}: expected an integer" in too_small and f"got {least - 1}" in too_small, too_small
    assert refused([*argv, flag, "x"], capsys).endswith(f"argument {flag}: expected an integer, got 'x'")
    if largest is not None:
        too_large = refused([*argv, flag, str(largest + 1)], capsys)
        assert f"error: argument {flag}: expected " in too_large and f"{largest:,}" in too_large, too_large


def test_verify_tasks_0_is_refused_at_once(capsys):
    line = refused(["verify", "--tasks", "0"], capsys)
    assert line.endswith("argument --tasks: expected an integer >= 1, got 0"), line


# ----- clustering steps a user or a file supplies are at most MAX_STEPS ----------------------------------------
@pytest.mark.parametrize("field, least", [("unroll", 1), ("rollout", 0), ("eval_steps", 1)])
def test_training_step_counts_are_bounded(field, least):
    from interp.training.config import TrainConfig

    TrainConfig(**{field: least})
    TrainConfig(**{field: MAX_STEPS})
    for value in (MAX_STEPS + 1, 10**9, 2**70):
        with pytest.raises(InvalidInput, match=f"{field} must be at most 10,000, got {value:,}"):
            TrainConfig(**{field: value})
    with pytest.raises(InvalidInput, match=f"{field} must be >= {least}"):
        TrainConfig(**{field: least - 1})


def test_evaluation_counts_are_bounded():
    from interp.evaluate import EvalConfig

    with pytest.raises(InvalidInput, match="steps must be at most 10,000, got 1,000,000,000"):
        EvalConfig(steps=10**9)
    with pytest.raises(InvalidInput, match="n_tasks must be at most 1,000,000, got 2,000,000"):
        EvalConfig(n_tasks=2_000_000)


def test_inference_steps_are_bounded():
    from interp.model.config import InferenceSettings

    assert InferenceSettings(steps=MAX_STEPS).steps == MAX_STEPS
    for value in (MAX_STEPS + 1, 10**9, 2**70):
        with pytest.raises(InvalidInput, match=f"steps must be at most 10,000, got {value:,}"):
            InferenceSettings(steps=value)


def _with_inference(path: Path, inference) -> Path:
    """The tiny model's checkpoint with ``inference`` metadata (a valid digest: save_checkpoint computes it)."""
    from interp.model import KMeansTransformer
    from interp.model.checkpoint import model_tensors, save_checkpoint
    from interp.model.config import learned_model_config

    model = KMeansTransformer(learned_model_config(2, 3, "onehot"))
    return save_checkpoint(path, model_tensors(model), {"model_config": model.config.to_dict(),
                                                        "inference": inference})


@pytest.mark.parametrize("steps", [10**9, 2**70])
def test_a_checkpoint_recommending_too_many_steps_is_refused_on_load(tmp_path, steps):
    from interp.model.checkpoint import load_model

    path = _with_inference(tmp_path / "steps.safetensors", {"steps": steps})
    with pytest.raises(InvalidInput, match=rf"{path}: invalid inference settings \(metadata 'inference'\): steps "
                                           "must be at most 10,000"):
        load_model(path)


@pytest.mark.parametrize("text", ["{steps: 3", '{"steps": 1' + "0" * 5000 + "}"],
                         ids=["not-json", "an-integer-of-5001-digits"])
def test_inference_metadata_that_is_not_json_is_named(tmp_path, text):
    from safetensors.torch import save_file

    from interp.model import KMeansTransformer
    from interp.model.checkpoint import FORMAT, load_model, model_tensors
    from interp.model.config import learned_model_config

    model = KMeansTransformer(learned_model_config(2, 3, "onehot"))
    path = tmp_path / "not_json.safetensors"
    save_file({name: tensor.contiguous() for name, tensor in model_tensors(model).items()}, str(path),
              metadata={"format": FORMAT, "model_config": json.dumps(model.config.to_dict()),
                        "inference": text})
    with pytest.raises(InvalidInput, match=f"{path} has corrupt metadata: its 'inference' entry is not JSON"):
        load_model(path)


# ----- a checkpoint is recognised by its content, not by its name ---------------------------------------------
def test_a_papers_file_named_safetensors_loads_as_what_it_is(tmp_path):
    from test_hostile_files import papers_file

    from interp.model.checkpoint import load_model

    original = papers_file(tmp_path / "papers.pt")
    renamed = tmp_path / "papers.safetensors"
    renamed.write_bytes(original.read_bytes())
    expected, got = load_model(original).state_dict(), load_model(renamed).state_dict()
    assert expected.keys() == got.keys() and all(torch.equal(expected[name], got[name]) for name in expected)


def test_an_interp_checkpoint_named_pt_loads(checkpoint, tmp_path):
    from interp.model.checkpoint import load_model

    renamed = tmp_path / "tiny.pt"
    renamed.write_bytes(checkpoint.read_bytes())
    assert load_model(renamed).config == load_model(checkpoint).config


def test_a_torch_save_file_of_another_layout_says_what_it_is(tmp_path):
    from interp.model import KMeansTransformer
    from interp.model.checkpoint import load_model
    from interp.model.config import learned_model_config

    path = tmp_path / "state.safetensors"
    torch.save(KMeansTransformer(learned_model_config(2, 3, "onehot")).state_dict(), path)
    with pytest.raises(InvalidInput) as caught:
        load_model(path)
    message = str(caught.value)
    assert "header too large" not in message and "truncated or damaged" not in message, message
    assert f"{path} is a torch.save file" in message and "not a safetensors file" in message, message


# ----- the explanation checks what it writes before any work -----------------------------------------------------
@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"models": [1]}', '{"models": {"construction": 3}}',
                                     '{"models": {"construction": {"seconds": []}}}'])
def test_explain_refuses_an_out_it_cannot_merge_into_before_any_work(tmp_path, capsys, monkeypatch, content):
    from analyses.studies.explain import measure as explain
    from interp._arguments import run

    def no_work(*args, **kwargs):
        raise AssertionError("the explanation started its work before checking --out")

    monkeypatch.setattr(explain, "load", no_work)
    out = tmp_path / "explain.json"
    out.write_text(content)
    code = run(explain.main, explain.PROG, ["--quick", "--models", "construction", "--out", str(out)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"{explain.PROG}: error: --out {out}: ") and "results of" in lines[0], lines
    assert out.read_text() == content


def test_explain_refuses_an_existing_folder_as_out_before_any_work(tmp_path, capsys, monkeypatch):
    from analyses.studies.explain import measure as explain
    from interp._arguments import run

    monkeypatch.setattr(explain, "load", lambda *args: pytest.fail("work started"))
    code = run(explain.main, explain.PROG, ["--models", "construction", "--out", str(tmp_path)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and lines == [f"{explain.PROG}: error: --out {tmp_path} is a folder; give the path of a file "
                                   "to write"], lines
