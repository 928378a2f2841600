"""The tests' child processes (``tests/child_processes.py``, ``tests/cli_zygote.py``) take Ctrl-C even when the suite
runs as a background job of a shell without job control (which starts it with SIGINT ignored), die with the block
that started them, and a child left running fails the session.

A background job is simulated by ignoring SIGINT in this process while a child starts: the child inherits that.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from child_processes import is_running, leftovers, popen, running, sigint_ignored, stop
from cli_zygote import Zygote

from interp.model.checkpoint import load_checkpoint

TESTS = Path(__file__).resolve().parent
HANDLER = "import signal; print(repr(signal.getsignal(signal.SIGINT)), flush=True)"
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def _until_ended(pids, timeout: float = 30) -> list[int]:
    """The ``pids`` still running after waiting up to ``timeout`` seconds for them to end."""
    deadline = time.monotonic() + timeout
    while any(map(is_running, pids)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return [pid for pid in pids if is_running(pid)]


def test_a_child_started_from_a_background_job_still_takes_ctrl_c():
    """A plain child inherits the ignored SIGINT (the failure this guards against); one started by ``running`` gets
    Python's KeyboardInterrupt handler and Ctrl-C ends it."""
    with sigint_ignored():
        plain = subprocess.run([sys.executable, "-c", HANDLER], capture_output=True, text=True, timeout=120)
        with running([sys.executable, "-c", HANDLER + "\nimport time; time.sleep(600)"], stdout=subprocess.PIPE,
                     text=True) as child:
            handler = child.stdout.readline().strip()
            child.send_signal(signal.SIGINT)
            rc = child.wait(timeout=60)
    assert plain.stdout.strip() == "<Handlers.SIG_IGN: 1>"  # the simulated background job is real
    assert handler == "<built-in function default_int_handler>"
    assert rc == -signal.SIGINT  # an uncaught KeyboardInterrupt ends Python through SIGINT


@pytest.mark.slow  # a zygote's imports and a real training run
def test_ctrl_c_interrupts_a_zygote_child_started_from_a_background_job(tmp_path):
    """The concurrent-writer test's Ctrl-C case, with the zygote started while SIGINT is ignored: the forked
    ``interp train`` still stops with its one line and exit 130."""
    out = tmp_path / "run.safetensors"
    with sigint_ignored():
        zygote = Zygote(tmp_path, preload=("interp.training.train",))
    with zygote:
        pid = zygote.start(["train", "--out", str(out), "--steps", "1000000", "--threads", "1", "--no-progress",
                            "--d", "2", "--k", "3", "--n", "32", "--batch", "8", "--val-tasks", "16",
                            "--eval-every", "5"])
        deadline = time.monotonic() + 120
        while not out.exists():
            assert time.monotonic() < deadline, "the run wrote no checkpoint"
            time.sleep(0.01)
        os.kill(pid, signal.SIGINT)
        rc, _, stderr = zygote.wait(pid, timeout=120)
    assert rc == 130, stderr
    assert stderr == f"interp train: interrupted; {out} holds the last saved step; run the same command to resume\n"
    assert load_checkpoint(out)[1]["step"] % 5 == 0


def test_running_kills_the_child_and_what_it_started_when_the_block_fails():
    """However the ``with`` block ends (here a failed assertion), the child and its own child are killed."""
    spawn = textwrap.dedent("""
        import subprocess, sys, time
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(grandchild.pid, flush=True)
        time.sleep(600)
    """)
    with pytest.raises(AssertionError, match="the test failed"):
        with running([sys.executable, "-c", spawn], stdout=subprocess.PIPE, text=True) as child:
            pids = [child.pid, int(child.stdout.readline())]
            assert all(map(is_running, pids))
            raise AssertionError("the test failed")
    assert child.returncode == -signal.SIGKILL
    assert _until_ended(pids) == []


@pytest.mark.slow  # a zygote's imports
def test_zygote_close_kills_the_children_not_waited_for(tmp_path):
    """A test that fails between starting a zygote child and waiting for it leaves no training run behind."""
    zygote = Zygote(tmp_path, preload=())
    try:
        pid = zygote.start(["train", "--out", str(tmp_path / "run.safetensors"), "--steps", "1000000",
                            "--threads", "1", "--no-progress", "--d", "2", "--k", "3", "--n", "32", "--batch", "8",
                            "--val-tasks", "16"])
        assert is_running(pid)
    finally:
        zygote.close()
    assert zygote.process.returncode is not None and zygote.outputs == {}
    assert _until_ended([pid]) == []


def test_a_process_a_test_leaves_running_fails_the_session(tmp_path):
    """A session (with this suite's conftest) whose test leaves a plain child and a ``popen`` child running ends in
    an error naming both, and neither is running afterwards."""
    (tmp_path / "test_leaky.py").write_text(textwrap.dedent(f"""
        import subprocess
        from child_processes import popen

        def test_leaks():
            pids = [subprocess.Popen({SLEEPER!r}).pid, popen({SLEEPER!r}).pid]
            print("pids", *pids)
    """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    with running([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-s", "-q",
                  "test_leaky.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                 text=True) as session:
        output, _ = session.communicate(timeout=120)
    pids = [int(pid) for pid in output.split("pids ", 1)[1].split("\n", 1)[0].split()]
    assert session.returncode == 1, output
    assert "1 passed, 1 error" in output and "processes left running by the tests (now killed):" in output, output
    for pid in pids:
        assert f"pid {pid} (parent " in output, output
    assert _until_ended(pids, timeout=5) == []


def test_leftovers_are_this_processs_children_and_its_sessions_members():
    """A plain child and a ``popen`` child's own child (whose parent is gone) are found; stopped ones are not."""
    spawn = textwrap.dedent(f"""
        import subprocess
        print(subprocess.Popen({SLEEPER!r}).pid, flush=True)
    """)
    with running(SLEEPER) as plain_session, subprocess.Popen(SLEEPER) as plain:
        orphaner = popen([sys.executable, "-c", spawn], stdout=subprocess.PIPE, text=True)
        try:
            orphan = int(orphaner.stdout.readline())
            orphaner.wait(timeout=60)
            found = {p.pid for p in leftovers()}
            assert {plain.pid, plain_session.pid, orphan} <= found
        finally:
            plain.kill()
            stop(orphaner)
    assert _until_ended([orphan, plain.pid]) == []
    assert not {plain.pid, plain_session.pid, orphan} & {p.pid for p in leftovers()}
