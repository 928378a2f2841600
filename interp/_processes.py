"""Child processes that end when the process that started them ends, however it ends.

A sweep's worker processes and ``analyses.paper_budget``'s lane commands train for minutes to hours. Stopped in an
orderly way (Ctrl-C, SIGTERM) their parent stops them; but a parent that is SIGKILLed (by the out-of-memory killer, a
scheduler, ``kill -9``) runs no code, and without this its children would go on training, reparented to init, until
their last step. ``die_with(parent)``, called in the child, ties the child to its parent:

* Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``; the kernel SIGKILLs the child when its parent dies. The signal follows
  the *thread* that created the child: the child is killed when that thread ends, even if the rest of the parent
  lives on, so a spawner must create its children from a thread that outlives them (see each spawner). Since the
  parent may have died before the request took effect, the child then checks that it is still the parent's child.
* elsewhere (or where ``prctl`` fails): a daemon thread in the child that polls its parent process id and SIGKILLs
  the child when the parent is gone (within ``WATCH_INTERVAL`` seconds); only in a process that goes on running
  Python code, so not between fork and exec.

A child of multiprocessing's fork server (the ``forkserver`` start method) has the fork server as its parent; the
fork server is ``parent``'s own child and exits when ``parent`` does, so such a child is tied to ``parent`` too.

Standard library only (no torch): the pool initializer and ``preexec_fn`` run it early, and the tests' process
helper imports it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
WATCH_INTERVAL = 0.5  # seconds between two looks at the parent, where there is no PR_SET_PDEATHSIG

_prctl = None
if sys.platform.startswith("linux"):  # resolved at import: a child between fork and exec must not load libraries
    with contextlib.suppress(OSError, AttributeError):
        _prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl


def _parent_of(pid: int) -> int | None:
    """The parent process id of ``pid`` from /proc (None where it cannot be read: no /proc, or ``pid`` ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rpartition(b")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _started_by(parent: int) -> bool:
    """Whether this process is still ``parent``'s child (or the child of a fork server that is ``parent``'s child);
    False once ``parent`` has died and this process was reparented."""
    mine = os.getppid()
    if mine == parent:
        return True
    grandparent = _parent_of(mine)
    if grandparent is not None:
        return grandparent == parent
    try:  # no /proc: whether ``parent`` still exists at all
        os.kill(parent, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_myself() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _watch(ppid: int) -> None:
    """Until this process's parent id changes from ``ppid`` (the parent died: reparented), then SIGKILL it."""
    while os.getppid() == ppid:
        time.sleep(WATCH_INTERVAL)
    _kill_myself()


def die_with(parent: int, thread: bool = True) -> None:
    """End this process (SIGKILL) when process ``parent``, the one that started it, ends; at once if it already has.
    Call it in the child: a pool worker's ``initializer``, or ``preexec_fn`` between fork and exec (with
    ``thread=False``: a watching thread would not survive the exec; only ``PR_SET_PDEATHSIG`` does)."""
    if _prctl is not None and _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
        if not _started_by(parent):  # the parent died before the request took effect
            _kill_myself()
        return
    if not _started_by(parent):
        _kill_myself()
    if thread:
        threading.Thread(target=_watch, args=(os.getppid(),), name="die-with-parent", daemon=True).start()


def preexec(parent: int):
    """A ``preexec_fn`` for ``subprocess.Popen`` that ties the new child to ``parent`` (normally ``os.getpid()`` of
    the caller, taken before the call): Linux only, and only if ``Popen`` is called from a thread that waits for the
    child (``PR_SET_PDEATHSIG`` fires when the creating thread ends)."""
    def setup() -> None:
        die_with(parent, thread=False)
    return setup
