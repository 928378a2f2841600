"""Concurrent writers: one checkpoint, one writer. Two ``interp train`` runs on one ``--out``
started together used to both pass the start-up check before either had written and both claim the file; now the
second is refused with one clear line while the first trains on, and a lock left by a killed run blocks nothing.

The runs are real processes executing ``interp.cli`` as ``__main__`` (as ``python -m interp.cli`` does), forked from
one "zygote" process that imported the modules once (``tests/cli_zygote.py``). A child may wait for a gate file before
it runs: the test opens the gate once both children exist, so both reach ``train`` within about a millisecond.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from cli_zygote import Zygote

from interp._checks import InvalidInput
from interp.model.checkpoint import load_checkpoint, load_model
from interp.training.lock import CheckpointBusy, checkpoint_lock, lock_path
from interp.training.train import TrainConfig, train

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--threads", "1", "--no-progress", "--d", "2", "--k", "3", "--n", "32", "--batch", "8", "--val-tasks", "16",
        "--eval-every", "50"]
@pytest.fixture(scope="module")
def module_zygote(tmp_path_factory):
    with Zygote(tmp_path_factory.mktemp("cli")) as runner:
        yield runner


@pytest.fixture
def zygote(module_zygote):
    """The module's zygote; a run a test leaves (a failed assertion before its Ctrl-C) is killed when the test ends."""
    yield module_zygote
    module_zygote.kill_children()


def _train_argv(out: Path, seed: int, steps: int, *extra: str) -> list[str]:
    return ["train", "--out", str(out), "--seed", str(seed), "--steps", str(steps), *ARGS, *extra]


def _wait_for_checkpoint(path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, "the run wrote no checkpoint"
        time.sleep(0.002)


def _alive(pid: int) -> bool:
    """Whether the zygote's child ``pid`` is still running (not a zombie; without /proc: assumed)."""
    if not Path("/proc").is_dir():
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_two_runs_started_together_one_is_refused(zygote, tmp_path):
    """Different seeds, same --out, started at the same instant: exactly one trains, the other is refused with the
    lock's message (before: both passed the start-up check, both exited 0, the file held one of them).

    Both runs ask for far more steps than the test waits for, so neither can finish before the other starts, however
    the machine schedules them: the refused one exits by itself, then the test stops the winner with Ctrl-C
    (SIGINT, exit 130), which keeps its last checkpoint and releases the lock."""
    out, gate = tmp_path / "shared.safetensors", tmp_path / "gate"
    pids = {seed: zygote.start(_train_argv(out, seed, 100_000), gate) for seed in (1, 2)}
    gate.touch()
    deadline = time.monotonic() + 120
    while all(_alive(pid) for pid in pids.values()):
        assert time.monotonic() < deadline, "neither run was refused"
        time.sleep(0.005)
    refused_seed = next(seed for seed, pid in pids.items() if not _alive(pid))
    winner = 3 - refused_seed
    rc, _, refused = zygote.wait(pids[refused_seed], timeout=120)
    assert rc == 2, refused
    lines = refused.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in refused, refused
    assert lines[0].startswith(f"interp train: error: {out} is being written by process {pids[winner]} "), lines
    assert lines[0].endswith("wait for that run to finish, or pass another path"), lines
    _wait_for_checkpoint(out)
    assert _alive(pids[winner]), "the winner should still be training"
    os.kill(pids[winner], signal.SIGINT)
    assert zygote.wait(pids[winner], timeout=120)[0] == 130
    _, meta = load_checkpoint(out)
    assert meta["train_config"]["seed"] == winner and meta["train_config"]["steps"] == 100_000  # the winner's run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gate", "shared.safetensors"]  # no lock, no temporary


@pytest.mark.slow
def test_a_run_started_on_a_running_checkpoint_is_refused_and_a_killed_runs_lock_blocks_nothing(zygote, tmp_path):
    """--no-resume on a path another run is writing used to overwrite that run's file while it trained. Then the
    writer is SIGKILLed: its lock file stays, but the operating system released the lock, so a new run resumes."""
    out = tmp_path / "run.safetensors"
    running = zygote.start(_train_argv(out, 1, 100_000))
    _wait_for_checkpoint(out)
    rc, _, err = zygote.run(_train_argv(out, 2, 10, "--no-resume"))
    assert rc == 2 and f"{out} is being written by process {running} (it holds {lock_path(out)})" in err, err
    assert _alive(running), "the first run should still be training"
    os.kill(running, signal.SIGKILL)
    assert zygote.wait(running, timeout=120)[0] == -signal.SIGKILL
    _, meta = load_checkpoint(out)
    assert meta["train_config"]["seed"] == 1  # the intruder wrote nothing
    assert lock_path(out).exists()  # left by the killed run
    rc, _, err = zygote.run(_train_argv(out, 1, meta["step"] + 50))
    assert rc == 0, err
    _, resumed = load_checkpoint(out)
    assert resumed["step"] == meta["step"] + 50 and resumed["history"][: len(meta["history"])] == meta["history"]
    assert not lock_path(out).exists() and load_model(out).config.d == 2


def test_train_refuses_a_path_whose_lock_is_held(tmp_path, one_torch_thread):
    """In one process too: a second writer is refused before it reads or writes anything, naming the path."""
    config = TrainConfig(d=2, k=3, n=16, batch=4, val_tasks=8, steps=4, eval_every=2)
    held = tmp_path / "held.safetensors"
    with checkpoint_lock(held):
        with pytest.raises(CheckpointBusy, match=f"{held} is being written by process {os.getpid()}"):
            train(config, held, progress=False)
        assert not held.exists()  # nothing written by the refused run
    assert not lock_path(held).exists()
    assert train(config, held, progress=False)["step"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["held.safetensors"]
    assert isinstance(CheckpointBusy("x"), InvalidInput)  # the CLI prints it as one line and exits 2


def test_an_exit_that_skips_cleanup_still_removes_the_lock_file(tmp_path):
    """The command line's immediate exit on a Ctrl-C inside an import runs no ``finally``; the lock file of the
    checkpoint a run holds is registered and removed by ``remove_on_exit_now`` all the same, and forgotten after a
    normal release."""
    from interp._io import _REMOVE_ON_EXIT, remove_on_exit_now
    from interp.training.lock import checkpoint_lock, lock_path

    path = tmp_path / "run.safetensors"
    with checkpoint_lock(path):
        assert str(lock_path(path)) in _REMOVE_ON_EXIT and lock_path(path).exists()
        remove_on_exit_now()  # what the interrupt handler calls before os._exit(130)
        assert not lock_path(path).exists()
    assert str(lock_path(path)) not in _REMOVE_ON_EXIT
