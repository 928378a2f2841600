"""One writer per checkpoint: an operating-system lock beside the file, held for a training run's whole lifetime.

``checkpoint_lock(path)`` takes ``flock(LOCK_EX | LOCK_NB)`` on ``.{name}.lock`` in the checkpoint's folder before the
run reads or writes anything, so two runs started together on one path cannot both pass the start-up checks: the
second is refused at once with ``CheckpointBusy``. The operating system releases the lock when its holder exits or
is killed, so a lock left by a killed run never blocks a later one. While it holds the lock a run removes the
temporary files a killed writer of the same checkpoint left behind (``stale_temporaries``), and on a normal exit
it deletes the lock file (still holding the lock; a process that opened the old file meanwhile sees that it was
unlinked and opens a new one). Platforms without ``fcntl`` (Windows) run unlocked.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from interp._checks import InvalidInput
from interp._io import remove_on_exit
from interp.model.checkpoint import stale_temporaries

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


class CheckpointBusy(InvalidInput):
    """Another process (or another run in this process) is writing the same checkpoint."""


def lock_path(path: str | os.PathLike) -> Path:
    """The lock file of the checkpoint ``path``: ``.{name}.lock`` beside it."""
    path = Path(path)
    return path.parent / f".{path.name}.lock"


def _holder(lock: Path) -> str:
    """'process N' from the lock file, or 'another process' when it cannot be read."""
    try:
        text = lock.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return "another process"
    return f"process {text}" if text.isdigit() else "another process"


@contextmanager
def checkpoint_lock(path: str | os.PathLike) -> Iterator[Path]:
    """Hold the exclusive lock of checkpoint ``path`` (refused with ``CheckpointBusy`` if another run holds it);
    on entry remove the stale temporary files of ``path``."""
    path = Path(path)
    if fcntl is None:  # pragma: no cover - Windows
        yield path
        return
    lock = lock_path(path)
    while True:
        descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise CheckpointBusy(f"{path} is being written by {_holder(lock)} (it holds {lock}); wait for that run "
                                 "to finish, or pass another path") from None
        except BaseException:
            os.close(descriptor)
            raise
        try:
            current = os.stat(lock)
        except FileNotFoundError:
            current = None
        if current is not None and os.path.samestat(os.fstat(descriptor), current):
            break
        os.close(descriptor)  # the previous holder unlinked the file we opened: lock the new one
    try:
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        remove_on_exit(lock)  # also where an exit skips this block's finally (a Ctrl-C inside an import)
        for stale in stale_temporaries(path):
            stale.unlink(missing_ok=True)
        yield path
    finally:
        remove_on_exit(lock, keep=False)
        try:
            os.unlink(lock)
        except FileNotFoundError:
            pass
        finally:
            os.close(descriptor)
