"""Ctrl-C at any moment of ``interp evaluate`` and ``interp report`` is the one-line interrupt (exit 130): while the
command imports torch and checks its inputs as well as while it works, never a traceback, a RecursionError or a
half-imported numpy.

A SIGINT is sent at delays spread over the first 0.6 s. The interpreter itself needs some tens of milliseconds to
start (a bare ``python -c pass`` prints a KeyboardInterrupt traceback for a SIGINT 10-30 ms after it starts), and no
code of the project runs before that; a run whose traceback has no frame in the project's files was interrupted
there and is counted apart. Every other run must end with the one line and exit 130 (or finish), leave no file
behind, and most runs must be of that kind.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from child_processes import run, running

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = Path(sys.executable).parent / "interp"  # the console script a user runs
DELAYS = [round(0.02 + i * (0.6 - 0.02) / 13, 3) for i in range(14)]  # 0.02 .. 0.6 s


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    from interp.model import KMeansTransformer
    from interp.model.checkpoint import save_model
    from interp.model.config import learned_model_config

    torch.manual_seed(0)
    return save_model(tmp_path_factory.mktemp("early_interrupt") / "tiny.safetensors",
                      KMeansTransformer(learned_model_config(2, 3, "onehot")))


def _before_the_project(stderr: str) -> bool:
    """A traceback of Python's own start-up: no frame in the project's files (interp/, analyses/) but the package's
    ``interp/__init__.py``, which Python runs before any module of the command (two lines, a few milliseconds: no
    handler can be installed earlier without one for every ``import interp``)."""
    frames = re.findall(r'File "([^"]+)"', stderr)
    ours = [frame for frame in frames if Path(frame).resolve().is_relative_to(ROOT / "interp")
            and Path(frame).resolve() != ROOT / "interp" / "__init__.py"]
    return "Traceback" in stderr and stderr.rstrip().endswith("KeyboardInterrupt") and not ours


def _interrupt(argv: list[str], delay: float) -> tuple[int, str]:
    with running(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT) as process:
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=300)
    return process.returncode, stderr


@pytest.mark.slow  # about 30 fresh processes
@pytest.mark.parametrize("command", ["evaluate", "report"])
def test_ctrl_c_from_the_very_start_is_one_line(checkpoint, tmp_path, command):
    outcomes = {"interrupted": [], "finished": [], "before the project's code": []}
    bad = []
    for index, delay in enumerate(DELAYS):
        out = tmp_path / (f"out{index}" if command == "evaluate" else f"report{index}.html")
        argv = [str(PROGRAM), command, "--checkpoint", str(checkpoint), "--out", str(out), "--tasks", "2",
                "--threads", "1"]
        code, stderr = _interrupt(argv, delay)
        lines = [line for line in stderr.splitlines() if line.strip()]
        if code == 130 and len(lines) == 1 and lines[0].startswith(f"interp {command}: interrupted"):
            outcomes["interrupted"].append(delay)
        elif code == 0 and "Traceback" not in stderr:
            outcomes["finished"].append(delay)
        elif _before_the_project(stderr):
            outcomes["before the project's code"].append(delay)
        else:
            start = max(0, stderr.find("Traceback") - 200)  # the traceback itself, not only the last warnings
            bad.append(f"at {delay} s: exit {code}: {stderr[start:start + 1500]}")
    assert not bad, "\n".join(bad)
    assert len(outcomes["interrupted"]) >= len(DELAYS) // 2, outcomes
    if not outcomes["finished"]:  # an interrupted command leaves nothing: no output, probe or temporary file
        assert sorted(p.name for p in tmp_path.iterdir()) == []


SWALLOWING_COMMAND = """
import os, signal, sys, threading, time
import interp.cli as cli

cli._guard_interrupts("interp x: interrupted; nothing was done")

class SlowFinaliser:
    def __del__(self):
        time.sleep(1.0)  # the Ctrl-C lands here: Python prints "Exception ignored in ..." and goes on

def command(_):
    with cli._handling_interrupts():
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        SlowFinaliser()  # collected at once: its __del__ runs now
        time.sleep(3)
        print("finished")

sys.exit(cli.run(command, "interp x"))
"""


def test_a_ctrl_c_swallowed_by_a_finaliser_still_interrupts(tmp_path):
    """A KeyboardInterrupt raised inside a ``__del__`` cannot propagate: Python prints it as unraisable and the
    command would go on and finish (exit 0 with a traceback on stderr). The command's interrupt handling sends it again,
    so the run ends with the one line and 130."""
    done = run([sys.executable, "-c", SWALLOWING_COMMAND], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "interp x: interrupted\n")
