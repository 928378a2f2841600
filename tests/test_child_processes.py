"""The tests' child processes (``tests/child_processes.py``, ``tests/cli_zygote.py``) take Ctrl-C even when the suite
runs as a background job of a shell without job control (which starts it with SIGINT ignored), die with the block
that started them, and a child left running fails the session; and every test file starts its children through them.

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
from child_processes import is_running, leftovers, popen, run, running, sigint_ignored, stop
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


def test_run_kills_a_child_past_its_timeout_and_what_it_started():
    """``run``, as ``subprocess.run``, raises ``TimeoutExpired`` with the output so far, and leaves neither the child
    nor its own child running."""
    spawn = textwrap.dedent("""
        import os, subprocess, sys, time
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(os.getpid(), grandchild.pid, flush=True)
        time.sleep(600)
    """)
    with pytest.raises(subprocess.TimeoutExpired) as timed_out:
        run([sys.executable, "-c", spawn], timeout=5, capture_output=True, text=True)
    pids = [int(pid) for pid in timed_out.value.stdout.split()]
    assert len(pids) == 2 and _until_ended(pids, timeout=5) == []
    done = run([sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"], input="piped", text=True,
               capture_output=True, check=True)
    assert (done.returncode, done.stdout) == (0, "PIPED\n")


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


# The calls that start a process; a test file makes them only through child_processes (run, running, popen)
STARTERS = {"subprocess": {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"},
            "os": {"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "spawnl", "spawnle", "spawnlp",
                   "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe"},
            "pty": {"fork", "spawn"}, "asyncio": {"create_subprocess_exec", "create_subprocess_shell"}}
POOLS = {"Process", "Pool", "ProcessPoolExecutor"}  # multiprocessing and concurrent.futures, however reached
# (file, test) -> why it starts a plain child: the helper's own tests, where the plain child is the point
DELIBERATE = {
    ("test_child_processes.py", "test_a_child_started_from_a_background_job_still_takes_ctrl_c"):
        "a plain child inherits the ignored SIGINT: the failure the helper's reset guards against",
    ("test_child_processes.py", "test_leftovers_are_this_processs_children_and_its_sessions_members"):
        "a plain child that the leftover scan must find",
}


def _process_starts(path: Path) -> list[tuple[str, int, str]]:
    """(enclosing function, line, call) of each call in ``path`` that starts a process without child_processes."""
    import ast

    tree = ast.parse(path.read_text(), str(path))
    imported = {}  # a name bound by ``from subprocess import run [as x]`` -> "subprocess.run"
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in STARTERS:
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call):
                func, name = child.func, None
                if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
                        func.attr in STARTERS.get(func.value.id, ()):
                    name = f"{func.value.id}.{func.attr}"
                elif isinstance(func, ast.Name) and func.id in imported and \
                        imported[func.id].split(".")[1] in STARTERS[imported[func.id].split(".")[0]]:
                    name = imported[func.id]
                elif (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)) in POOLS:
                    name = ast.unparse(func)
                if name is not None:
                    found.append((function, child.lineno, name))
            visit(child, inner)

    visit(tree, "<module>")
    return found


def test_every_test_starts_its_processes_through_child_processes():
    """A child started any other way inherits an ignored SIGINT (a suite run as a background job) and can outlive
    its test; only the helper's own tests of plain children, listed in DELIBERATE, may."""
    offenders = []
    for path in sorted(TESTS.glob("*.py")):
        if path.name == "child_processes.py":
            continue
        for function, line, call in _process_starts(path):
            if (path.name, function) not in DELIBERATE:
                offenders.append(f"tests/{path.name}:{line} in {function}: {call}")
    assert not offenders, "start these through tests/child_processes.py (run, running or popen):\n" + \
        "\n".join(offenders)


def test_the_process_start_scan_finds_each_way(tmp_path):
    """The scan above sees every form it looks for (so an empty result means none is there)."""
    sample = tmp_path / "sample.py"
    sample.write_text("import os, subprocess, multiprocessing\nfrom subprocess import check_output as co\n"
                      "def test_x():\n    subprocess.run(['true'])\n    co(['true'])\n    os.system('true')\n"
                      "    multiprocessing.get_context('spawn').Process(target=print)\n"
                      "    subprocess.PIPE\n    print(os.system)\n")
    assert _process_starts(sample) == [("test_x", 4, "subprocess.run"), ("test_x", 5, "subprocess.check_output"),
                                       ("test_x", 6, "os.system"),
                                       ("test_x", 7, "multiprocessing.get_context('spawn').Process")]
