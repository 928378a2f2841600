"""Child processes for tests, started so that they behave the same however the suite is run, and stopped so that
none outlives its test.

* SIGINT at its default. A shell without job control starts a background job (``make test &``) with SIGINT ignored,
  every child inherits that, and Python installs its KeyboardInterrupt handler only when SIGINT is not ignored at
  start-up: a test's Ctrl-C would do nothing. ``restore_signals`` resets only SIGPIPE, SIGXFZ and SIGXFSZ, so the
  child resets SIGINT itself between fork and exec.
* Its own session (and process group), so that ``stop`` kills whatever the child started too.
* On Linux, killed when the test process dies (``PR_SET_PDEATHSIG``, ``interp._processes.die_with``), so even a
  SIGKILLed or timed-out pytest leaves nothing running. The signal follows the thread that started the child; tests
  start them from the main thread.

Every process a test starts goes through here: ``run`` (as ``subprocess.run``, with a timeout), ``running`` (a
``with`` block) or ``popen`` with ``stop`` in ``finally``; ``tests/test_child_processes.py`` fails on a test file that
starts one any other way.

``tests/conftest.py`` fails the session naming any child of the test process, or any process in a session started
here, still running at its end (``kill_leftovers``). No pytest here: the CLI zygote imports this module too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from interp._processes import die_with  # the library's own (no torch); the CLI zygote's forked children use it too

TIMEOUT = 600  # seconds: ``run``'s default limit on a child, so that a hung one fails its test instead of the suite

sessions: set[int] = set()  # the sessions started by ``popen``: their members are this run's processes


def _child_setup(parent: int, then) -> None:
    """Run in a new child between fork and exec: SIGINT at its default, tied to the test process, then ``then``."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    die_with(parent, thread=False)
    if then is not None:
        then()


def popen(args, preexec_fn=None, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(args, **kwargs)`` in a new session, with SIGINT at its default and (Linux) killed when the
    test process dies; a ``preexec_fn`` runs after that (a test that wants SIGINT ignored in the child sets it there).
    Prefer ``run`` or ``running``, which also stop it."""
    parent = os.getpid()
    process = subprocess.Popen(args, start_new_session=True, preexec_fn=lambda: _child_setup(parent, preexec_fn),
                               **kwargs)
    sessions.add(process.pid)
    return process


def run(args, *, timeout: float | None = TIMEOUT, input=None, capture_output: bool = False, check: bool = False,
        **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(args, ...)`` through ``popen``: the child (and whatever it started) is killed and reaped when
    it ends, when ``timeout`` seconds pass (``subprocess.TimeoutExpired``) or when the test is interrupted."""
    if capture_output:
        if "stdout" in kwargs or "stderr" in kwargs:
            raise ValueError("stdout and stderr may not be used with capture_output")
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        if "stdin" in kwargs:
            raise ValueError("stdin and input may not both be used")
        kwargs["stdin"] = subprocess.PIPE
    process = popen(args, **kwargs)
    try:
        stdout, stderr = process.communicate(input, timeout=timeout)
    finally:
        stop(process)
    done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    if check:
        done.check_returncode()
    return done


def stop(process: subprocess.Popen) -> None:
    """Kill the child's whole session (it and anything it started, also in process groups of their own, as
    ``analyses.paper_budget``'s commands), reap it and close its pipes."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # an empty group: all ended already
        os.killpg(process.pid, signal.SIGKILL)
    for member in session_members(process.pid):  # the other groups of the session (Linux)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(member.pid, signal.SIGKILL)
    sessions.discard(process.pid)  # ended: its number may be reused by a stranger's session
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    process.wait()


@contextlib.contextmanager
def running(args, **kwargs) -> Iterator[subprocess.Popen]:
    """``popen(args, **kwargs)`` for the ``with`` block; killed and reaped when it ends, however it ends."""
    process = popen(args, **kwargs)
    try:
        yield process
    finally:
        stop(process)


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored in this process for the block, as in a background job of a shell without job control."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclass(frozen=True)
class Leftover:
    pid: int
    ppid: int
    session: int
    args: str

    def __str__(self) -> str:
        return f"pid {self.pid} (parent {self.ppid}): {self.args}"


def _stat(pid: int | str) -> tuple[str, list[str]]:
    """(``pid (comm)``, the fields after it: state, ppid, pgrp, session, ...) from /proc/PID/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    head, _, rest = stat.rpartition(")")
    return head + ")", rest.split()


def is_running(pid: int) -> bool:
    """Whether ``pid`` is a running process (not ended, not a zombie waiting to be reaped); Linux only."""
    try:
        return _stat(pid)[1][0] not in "ZX"
    except FileNotFoundError:
        return False


def _processes() -> Iterator[Leftover]:
    """The running (not zombie) processes, from /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            head, fields = _stat(entry.name)
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # ended meanwhile
            continue
        if fields[0] not in "ZX":
            yield Leftover(int(entry.name), int(fields[1]), int(fields[3]), args or head)


# Python's own servers for ``multiprocessing`` (started once for the lifetime of the process that uses it, and gone
# when it exits): not a test's leak
MULTIPROCESSING_HELPERS = ("from multiprocessing.resource_tracker import main",
                           "from multiprocessing.forkserver import main")


def session_members(session: int) -> list[Leftover]:
    """The running processes of session ``session`` (a ``popen`` child's pid: it and everything it started, whose
    parent may be gone); empty where there is no /proc."""
    if not Path("/proc/self/stat").exists():
        return []
    return [p for p in _processes() if p.session == session]


def leftovers() -> list[Leftover]:
    """This process's running children, and the running members of the sessions ``popen`` started (grandchildren
    whose parent is gone included). Empty where there is no /proc."""
    if not Path("/proc/self/stat").exists():
        return []
    me = os.getpid()
    return [p for p in _processes() if p.pid != me and (p.ppid == me or p.session in sessions)
            and not any(helper in p.args for helper in MULTIPROCESSING_HELPERS)]


def kill_leftovers() -> list[Leftover]:
    """Kill (and reap, where they are this process's children) the ``leftovers``; returns them."""
    found = leftovers()
    for process in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if process.session == process.pid:  # a session leader: its whole group
                os.killpg(process.pid, signal.SIGKILL)
            else:
                os.kill(process.pid, signal.SIGKILL)
    for process in found:
        if process.ppid == os.getpid():
            with contextlib.suppress(ChildProcessError):
                os.waitpid(process.pid, 0)
    return found

