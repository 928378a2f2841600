"""The command line never loses work: no command writes over its own input, outputs are checked before any work
and no folder tree is created, sizes that cannot fit in memory are refused from an estimate before anything is
allocated, and Ctrl-C is one line (exit 130) that leaves the checkpoint loadable.

The one-line messages of these cases are in the bad-input table (tests/test_bad_inputs.py, docs/bad_inputs.md);
here are what a table cannot show: the bytes of the inputs afterwards, what exists on disk, that nothing was
computed before a refusal, the estimates' numbers (by hand, and as lower bounds of measured peaks) and interrupts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from child_processes import run, running

import interp.evaluate
import interp.report.builder
from interp._checks import (
    InsufficientMemory,
    InvalidInput,
    MemoryNeed,
    available_memory,
    check_memory,
    check_output_file,
    check_output_folder,
    check_outputs_spare_inputs,
    same_file,
)
from interp.cli import main
from interp.evaluate import EvalConfig
from interp.tasks import TaskConfig
from interp.training.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A tiny learned model (d=2, k=3) saved as a checkpoint."""
    from interp.model import KMeansTransformer
    from interp.model.checkpoint import save_model
    from interp.model.config import learned_model_config

    torch.manual_seed(0)
    return save_model(tmp_path_factory.mktemp("cli_safety") / "tiny.safetensors",
                      KMeansTransformer(learned_model_config(2, 3, "onehot")))


def _copy(source: Path, target: Path) -> Path:
    target.write_bytes(source.read_bytes())
    return target


def _one_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


# ----- finding 1: no command writes over its own input --------------------------------------------------------
def _report_over(victim: Path, out: Path) -> list[str]:
    return ["report", "--checkpoint", str(victim), "--out", str(out), "--tasks", "2", "--threads", "1"]


def _evaluate_into(victim: Path, out: Path) -> list[str]:
    return ["evaluate", "--checkpoint", str(victim), "--out", str(out), "--tasks", "1", "--steps", "1", "--n", "16",
            "--inits", "random", "--threads", "1"]


def _link(kind: str, victim: Path, where: Path) -> Path:
    if kind == "symbolic":
        where.symlink_to(victim)
    elif kind == "hard":
        os.link(victim, where)
    return where if kind != "same" else victim


@pytest.mark.parametrize("kind", ["same", "symbolic", "hard", "dotted"])
def test_report_never_writes_over_its_checkpoint(checkpoint, tmp_path, capsys, kind):
    victim = _copy(checkpoint, tmp_path / "victim.safetensors")
    before = victim.read_bytes()
    if kind == "dotted":  # the same file named through another folder
        (tmp_path / "sub").mkdir()
        out = tmp_path / "sub" / ".." / "victim.safetensors"
    else:
        out = _link(kind, victim, tmp_path / "out.safetensors")
    assert main(_report_over(victim, out)) == 2
    message = _one_line(capsys)
    assert "--out would write" in message and "which is the --checkpoint input" in message
    assert victim.read_bytes() == before


def test_evaluate_never_writes_over_its_checkpoint(checkpoint, tmp_path, capsys):
    victim = _copy(checkpoint, tmp_path / "victim.safetensors")
    before = victim.read_bytes()
    assert main(_evaluate_into(victim, victim)) == 2  # --out is the checkpoint file itself
    assert "which is the --checkpoint input" in _one_line(capsys)
    folder = tmp_path / "results"
    folder.mkdir()
    inside = _copy(checkpoint, folder / "evaluation.csv")  # a checkpoint the folder's outputs would replace
    assert main(_evaluate_into(inside, folder)) == 2
    assert f"--out would write {inside}, which is the --checkpoint input" in _one_line(capsys)
    assert victim.read_bytes() == before and inside.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["evaluation.csv"]


def test_same_file_sees_links_and_other_spellings(tmp_path):
    original = tmp_path / "a.bin"
    original.write_bytes(b"x")
    (tmp_path / "sym").symlink_to(original)
    os.link(original, tmp_path / "hard")
    (tmp_path / "other.bin").write_bytes(b"x")
    (tmp_path / "d").mkdir()
    assert same_file(original, tmp_path / "sym") and same_file(tmp_path / "hard", original)
    assert same_file(original, tmp_path / "d" / ".." / "a.bin")
    assert not same_file(original, tmp_path / "other.bin")  # equal bytes, another file
    assert not same_file(tmp_path / "new.bin", original)  # an output that does not exist yet
    with pytest.raises(InvalidInput, match="--out would write .*, which is the --checkpoint input"):
        check_outputs_spare_inputs({"--out": [tmp_path / "d", tmp_path / "sym"]}, {"--checkpoint": [original]})
    check_outputs_spare_inputs({"--out": [tmp_path / "new.bin"]}, {"--checkpoint": [original]})


# ----- finding 10: outputs are checked before any work, and no folder tree is created ------------------------
def _no_work(*args, **kwargs):
    raise AssertionError("the command started computing before it checked its output")


@pytest.mark.parametrize("out", ["/proc/report.html", "{tmp}/missing/deep/report.html", "{tmp}",
                                 "{tmp}/a_file/report.html"])
def test_report_checks_its_output_before_computing(checkpoint, tmp_path, capsys, monkeypatch, out):
    (tmp_path / "a_file").write_text("a file where a folder must be")
    monkeypatch.setattr(interp.report.builder, "evaluate", _no_work)
    monkeypatch.setattr(interp.report.builder, "load_model", _no_work)
    out = out.format(tmp=tmp_path)
    assert main(["report", "--checkpoint", str(checkpoint), "--out", out]) == 2
    assert _one_line(capsys).startswith("interp report: error: --out ")
    assert not (tmp_path / "missing").exists()


def test_evaluate_creates_no_folder_tree(checkpoint, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(interp.evaluate, "objective_curves", _no_work)
    out = tmp_path / "missing" / "deep" / "folder"
    assert main(_evaluate_into(checkpoint, out)) == 2
    assert f"its folder {out.parent} does not exist; create it first" in _one_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_evaluate_creates_only_the_last_level_of_its_folder(checkpoint, tmp_path, capsys):
    out = tmp_path / "results"
    assert main(_evaluate_into(checkpoint, out)) == 0
    assert sorted(p.name for p in out.iterdir()) == ["evaluation.csv", "evaluation.html", "summary.csv"]
    rows = (out / "summary.csv").read_text().splitlines()
    assert rows[0].startswith("protocol,setting,init,step,seeds") and len(rows) == 1 + 2  # steps 0 and 1


def test_output_checks_leave_nothing_behind(tmp_path):
    (tmp_path / "existing.html").write_text("old")
    check_output_file(tmp_path / "existing.html", "--out")
    check_output_file(tmp_path / "new.html", "--out")
    check_output_folder(tmp_path / "new_folder", ("a.csv",), "--out")
    check_output_folder(tmp_path, ("existing.html",), "--out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.html"]  # no probe file, no folder
    assert (tmp_path / "existing.html").read_text() == "old"


# ----- finding 6: memory estimated before allocating ---------------------------------------------------------
def test_train_memory_estimate_by_hand():
    # d=2, k=3, one-hot: D = 5; 4 attentions x (3 x 25 weights + 3 x 5 biases) = 360 parameters
    small = TrainConfig(d=2, k=3, n=32, batch=8, val_tasks=16)
    # drawing 16 tasks of 32 x 2 coordinates at 28 bytes = 28,672 > the update: 16 x 360 + 4 x (16 + 8) x 64 = 11,904
    assert [(need.what, need.nbytes) for need in small.memory_needs()] == [
        ("the validation tasks while they are drawn", 28_672)]
    wide = TrainConfig(d=1000, k=10, n=20, batch=1, val_tasks=1)
    # D = 1010: 4 x (3 x 1010^2 + 3 x 1010) = 12,253,320 parameters, 16 bytes each (weight, gradient, two moments)
    needs = {need.what.split(" (")[0]: need.nbytes for need in wide.memory_needs()}
    assert needs == {"the weights, gradients and Adam moments": 196_053_120, "the validation points": 80_000,
                     "one batch of points": 80_000}
    sparse = TrainConfig(d=2, k=3, n=1000, batch=4, val_tasks=1, normaliser="sparsemax")
    assert {need.what: need.nbytes for need in sparse.memory_needs()}[
        "the points-to-points attention pattern of one batch"] == 4 * 1000 * 1000 * 4


def test_evaluate_memory_estimate_by_hand():
    base = TaskConfig(n=100, d=4, k=3)
    # drawing: 10 x 100 x 4 coordinates at 28 bytes = 112,000 > running: 16,000 + 2 x 4 x 10 x 21 x 3 x 4 = 36,160
    assert [need.nbytes for need in EvalConfig(n_tasks=10, steps=20).memory_needs(base)] == [112_000]
    # 2 tasks, 1000 steps: running 3,200 + 2 x 4 x 2 x 1001 x 12 = 195,392 > drawing 22,400
    assert [need.nbytes for need in EvalConfig(n_tasks=2, steps=1000).memory_needs(base)] == [3_200, 192_192]
    lengths = EvalConfig(n_tasks=1, protocols=("main", "length"), lengths=(50, 3000)).memory_needs(base)
    assert lengths[0].nbytes == 28 * 3000 * 4 and lengths[0].sizes["n"] == 3000  # the largest task of the protocol


MEASURE = textwrap.dedent("""
    import json, resource, sys
    import torch
    torch.set_num_threads(1)
    from interp.evaluate import EvalConfig, evaluate
    from interp.model import KMeansTransformer
    from interp.model.config import learned_model_config
    from interp.tasks import TaskConfig
    from interp.training.config import TrainConfig
    from interp.training.train import train

    def resident() -> int:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * resource.getpagesize()

    kind, out = sys.argv[1], sys.argv[2]
    if kind == "train":
        config = TrainConfig(d=600, k=10, n=16, batch=2, val_tasks=2, eval_every=1, steps=1)
        before = resident()
        train(config, out, progress=False)
    else:
        config = EvalConfig(n_tasks=1500, steps=1, inits=("random",), baselines=False)  # no baselines: not counted
        base = TaskConfig(n=512, d=8, k=3)
        model = KMeansTransformer(learned_model_config(8, 3))
        before = resident()
        evaluate({"m": model}, base, config)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    needs = config.memory_needs() if kind == "train" else config.memory_needs(base)
    print(json.dumps({"grew": peak - before, "estimate": sum(need.nbytes for need in needs)}))
""")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["train", "evaluate"])
def test_memory_estimates_are_lower_bounds_of_the_measured_peak(tmp_path, kind):
    """A refusal is never wrong: what the estimate counts is really held (the peak resident memory grows by more)."""
    result = run([sys.executable, "-c", MEASURE, kind, str(tmp_path / "run.safetensors")], capture_output=True,
                 text=True, cwd=ROOT, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    assert measured["estimate"] > 50e6  # large enough to stand out from the allocator's noise
    assert measured["grew"] >= measured["estimate"], measured


def test_available_memory_reads_meminfo_and_the_cgroup(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       2000 kB\nMemFree:         100 kB\nMemAvailable:   1000 kB\n")
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    assert available_memory(meminfo, cgroup) == 1000 * 1024  # no cgroup limit
    (cgroup / "memory.max").write_text("max\n")
    (cgroup / "memory.current").write_text("100000\n")
    assert available_memory(meminfo, cgroup) == 1000 * 1024  # an unlimited cgroup
    (cgroup / "memory.max").write_text("500000\n")
    assert available_memory(meminfo, cgroup) == 400_000  # the cgroup leaves less than MemAvailable
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text("300000\n")
    (v1 / "memory" / "memory.usage_in_bytes").write_text("250000\n")
    assert available_memory(meminfo, v1) == 50_000


def test_check_memory_names_the_largest_part():
    needs = [MemoryNeed("the tasks", {"n_tasks": 10, "n": 5}, 3_000_000_000), MemoryNeed("the rest", {"k": 2}, 10)]
    check_memory("this run", needs, available=3_000_000_010)  # fits exactly
    with pytest.raises(InsufficientMemory) as refused:
        check_memory("this run", needs, available=2_000_000_000)
    assert str(refused.value) == ("this run needs at least 3 GB of memory and 2 GB is available; the largest part is "
                                  "the tasks, 3 GB (n_tasks=10, n=5): choose smaller sizes")
    assert "(--tasks=10, --n=5)" in refused.value.describe({"n_tasks": "--tasks", "n": "--n"})


def test_train_refuses_what_cannot_fit_before_allocating(tmp_path, capsys, monkeypatch):
    import interp.training.train

    monkeypatch.setattr(interp.training.train, "train", _no_work)
    assert main(["train", "--out", str(tmp_path / "run.safetensors"), "--d", "100000000"]) == 2
    message = _one_line(capsys)
    assert message.startswith("interp train: error: this training run needs at least ")
    assert "(--d=100000000, --k=10)" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ----- finding 9: degenerate training sizes -------------------------------------------------------------------
@pytest.mark.parametrize("sizes", [dict(k=3, n=3), dict(d=1, k=1, n=1), dict(k=5, n=4)])
def test_training_needs_more_points_than_centroids(sizes):
    with pytest.raises(InvalidInput, match=f"k={sizes['k']} must be less than n={sizes['n']}"):
        TrainConfig(**sizes)
    TrainConfig(d=1, k=1, n=2)  # two points in [0, 1]: one Lloyd step leaves objective 1/2 > 0


# ----- Ctrl-C --------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_ctrl_c_during_training_is_one_line_and_keeps_the_checkpoint(tmp_path):
    from interp.model.checkpoint import load_checkpoint, load_model

    out = tmp_path / "run.safetensors"
    with running([sys.executable, "-m", "interp.cli", "train", "--out", str(out), "--d", "2", "--k", "3", "--n", "32",
                  "--steps", "1000000", "--batch", "8", "--val-tasks", "16", "--eval-every", "5", "--no-progress",
                  "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT) as process:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:  # until the run has saved step 10 (atomically)
            if out.exists() and load_checkpoint(out)[1]["step"] >= 10:
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr == f"interp train: interrupted; {out} holds the last saved step; run the same command to resume\n"
    _, metadata = load_checkpoint(out)
    assert metadata["step"] >= 10 and metadata["step"] % 5 == 0
    load_model(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.safetensors"]  # no lock or temporary file left


@pytest.mark.parametrize("command", ["evaluate", "report"])
def test_ctrl_c_during_evaluate_or_report_is_one_line(checkpoint, tmp_path, capsys, monkeypatch, command):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(interp.evaluate, "objective_curves", interrupted)
    argv = _evaluate_into(checkpoint, tmp_path / "out") if command == "evaluate" else _report_over(
        checkpoint, tmp_path / "report.html")
    try:
        code = main(argv)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped main() (a traceback in a real process)")
    assert code == 130
    assert _one_line(capsys).startswith(f"interp {command}: interrupted; nothing half-written")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
