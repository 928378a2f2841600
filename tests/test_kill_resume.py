"""Randomized kill-and-resume: a real ``interp train`` process SIGKILLed at random moments, again and
again, then resumed to the end, gives the weights, optimiser, random states and history of an uninterrupted run,
bit for bit, and leaves no temporary or lock file behind.

Starting ``python -m interp.cli`` costs seconds of imports, so most runs are children forked from one "zygote"
process that imported torch and interp once and ran no torch operation (``tests/cli_zygote.py``); each child runs
the ``interp.cli`` module as ``__main__`` exactly as ``python -m interp.cli`` does. A few kills and the final resume
use plain subprocesses, so the interpreter's own start-up is among the moments a kill can hit. The delays are drawn
from a seeded RNG, uniform from 0 to a fraction of the run's length, so kills land in start-up (lock, stale-file
cleanup, loading and checking the checkpoint, the validation set), in training steps and inside checkpoint writes
(about a quarter of the run's time).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from child_processes import run, running
from cli_zygote import Zygote
from safetensors import safe_open

from interp.model.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parent.parent
STEPS = 200  # enough that the kills, each letting a resumed run go a few steps further, end before it does
ARGS = ["--threads", "1", "--no-progress", "--d", "2", "--k", "3", "--n", "32", "--batch", "8", "--val-tasks", "16",
        "--eval-every", "2", "--steps", str(STEPS)]
KILLS = 27  # at least 20 of them must interrupt a running process
SUBPROCESS_KILLS = 2  # the first kills hit a plain `python -m interp.cli` process, within its import time
PHASES = ("start-up", "training", "write")

def _step(path: Path) -> int:
    """The step of the checkpoint at ``path`` (-1: none yet)."""
    try:
        with safe_open(str(path), framework="pt") as handle:
            return int(handle.metadata()["step"])
    except Exception:
        return -1


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def _cli(out: Path) -> list[str]:
    return [sys.executable, "-m", "interp.cli", "train", "--out", str(out), *ARGS]


def _wait_for(condition, deadline: float) -> None:
    """Poll ``condition`` every 0.2 ms until it holds or ``deadline`` (perf_counter) passes."""
    while not condition() and time.perf_counter() < deadline:
        time.sleep(0.0002)


@pytest.mark.slow
def test_random_kills_then_resume_give_the_uninterrupted_run(tmp_path):
    """Each kill picks a phase with the seeded RNG: ``start-up`` (a delay below a child's start-up time),
    ``training`` (after the child wrote its first checkpoint, a delay of up to four steps) or ``write`` (as soon as
    the child's temporary checkpoint file appears). The first kills hit plain processes still importing."""
    reference_dir, run_dir = tmp_path / "reference", tmp_path / "run"
    reference_dir.mkdir(), run_dir.mkdir()
    reference, out = reference_dir / "ck.safetensors", run_dir / "ck.safetensors"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    rng = random.Random(20261212)
    argv = ["train", "--out", str(out), *ARGS]
    with Zygote(tmp_path) as zygote:  # closing it kills any child a failure left running
        started = time.perf_counter()
        assert zygote.run(["train", "--out", str(reference), *ARGS], timeout=None)[0] == 0
        length = time.perf_counter() - started  # the uninterrupted run, in a forked child
        started = time.perf_counter()
        assert zygote.run(["train", "--out", str(reference), *ARGS], timeout=None)[0] == 0
        start_up = time.perf_counter() - started  # a child that loads and checks a finished run, then exits
        step_time = max(length - start_up, 0.0) / STEPS  # training time per step (the run's length less start-up)
        outcomes = []  # (phase, exit code, delay, checkpoint step after, temporaries left)
        for index in range(KILLS):
            if index < SUBPROCESS_KILLS:
                with running(_cli(out), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL) as process:
                    delay = rng.uniform(0.0, zygote.import_time)
                    time.sleep(delay)
                    process.send_signal(signal.SIGKILL)
                    rc = process.wait()
                outcomes.append(("process start", rc, round(delay, 3), _step(out), _temporaries(run_dir)))
                continue
            phase = rng.choice(PHASES)
            step_before, temporaries_before = _step(out), set(_temporaries(run_dir))
            pid = zygote.start(argv)
            deadline = time.perf_counter() + 10 * length
            if phase == "start-up":
                delay = rng.uniform(0.0, start_up)
            elif phase == "training":
                _wait_for(lambda: _step(out) > step_before, deadline)
                delay = rng.uniform(0.0, 4 * step_time)
            else:
                _wait_for(lambda: set(_temporaries(run_dir)) - temporaries_before, deadline)
                delay = 0.0
            time.sleep(delay)
            os.kill(pid, signal.SIGKILL)
            outcomes.append((phase, zygote.wait(pid)[0], round(delay, 4), _step(out), _temporaries(run_dir)))
    final = run(_cli(out), cwd=ROOT, env=env, capture_output=True, text=True)
    report = (f"child start-up {start_up:.3f} s, run {length:.2f} s\n" + "\n".join(map(str, outcomes)))
    print(report)  # shown with pytest -s
    assert final.returncode == 0, final.stderr

    assert sum(rc == -signal.SIGKILL for _, rc, *_ in outcomes) >= 20, report
    assert all(sum(o[0] == phase for o in outcomes) >= 4 for phase in PHASES), report
    steps = [o[3] for o in outcomes]
    assert steps == sorted(steps), report  # a kill never loses a written checkpoint
    assert len(set(steps)) >= 4 and steps[-1] < STEPS, report  # kills spread over the run, all before its end
    assert any(o[4] for o in outcomes if o[0] == "write"), report  # kills inside a write left its temporary file
    assert sorted(p.name for p in run_dir.iterdir()) == ["ck.safetensors"], report  # temporaries and lock cleaned

    expected, expected_meta = load_checkpoint(reference)
    got, meta = load_checkpoint(out)
    assert meta == expected_meta  # step, history (losses, objectives, learning rates), optimiser and schedule
    assert sorted(got) == sorted(expected)
    for name in expected:  # weights, Adam moments and both random-number states, bit for bit
        assert got[name].dtype == expected[name].dtype and torch.equal(got[name], expected[name]), name
