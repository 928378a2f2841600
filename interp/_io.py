"""Writing files a user keeps: atomically, into a folder that exists (none is created), never over a special file.

A regular file (or a new name) is written through a temporary file beside it and a rename, so an interrupted write
leaves the previous file (or none), never half a file. A rename would replace whatever the path names, so the kind of
an existing path is looked at first (``stat``, nothing opened): a character device (/dev/null) is written straight
into where the caller allows it, and a folder, FIFO, socket or block device is refused. The commands check the
same before any work (``interp._checks.check_output_file``); this is the writers' own guard, with the same rules
for names (UTF-8 only) and links (no loop).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from interp._checks import InvalidInput, check_utf8_path, existing_kind

# Files a running command removes when it ends, however it ends: the lock files of the checkpoints it holds
# (``interp.training.lock``). An exit that skips the ``finally`` blocks (the command line's ``os._exit`` on a Ctrl-C
# inside an import) removes them through ``remove_on_exit_now``.
_REMOVE_ON_EXIT: set[str] = set()


def remove_on_exit(path: str | os.PathLike, keep: bool = True) -> None:
    """Register ``path`` (``keep``) or unregister it (``keep=False``) as a file to remove on an abrupt exit."""
    (_REMOVE_ON_EXIT.add if keep else _REMOVE_ON_EXIT.discard)(os.fspath(path))


def remove_on_exit_now() -> None:
    """Remove the registered files (missing ones ignored): the last thing before an exit that runs no cleanup."""
    for path in list(_REMOVE_ON_EXIT):
        try:
            os.unlink(path)
        except OSError:
            pass


def writes_straight(path: str | os.PathLike, devices: bool = True) -> bool:
    """Whether ``path`` is a character device to write straight into (``devices`` allows them); False for a regular
    file or a new name (written by rename); ``InvalidInput`` for anything else, which a rename would destroy, for a
    loop of symbolic links and for a name that is not UTF-8 (``check_utf8_path``: the rule of every writer)."""
    check_utf8_path(path, "output")
    kind = existing_kind(path)
    if kind == "character device" and devices:
        return True
    if kind not in (None, "file"):
        raise InvalidInput(f"cannot write {path}: it is a {kind}; give the path of a regular file")
    return False


def write_bytes_atomically(path: str | os.PathLike, payload: bytes, *, devices: bool = True,
                           sync: bool = False) -> Path:
    """Write ``payload`` to ``path`` in a folder that exists (none is created): a temporary file beside it
    (``.{name}.XXXXXXXX.tmp``), then a rename; ``sync`` flushes it to disk first. A character device is written
    straight where ``devices`` allows it (``writes_straight``)."""
    path = Path(path)
    if writes_straight(path, devices):
        with open(path, "wb") as stream:
            stream.write(payload)
        return path
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot write {path}: its folder {path.parent} does not exist")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(payload)
            if sync:
                stream.flush()
                os.fsync(stream.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp creates 0600; give the file ordinary permissions
        writes_straight(path, devices=False)  # still a file or nothing: never rename onto what appeared meanwhile
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def write_text_atomically(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` with ``write_bytes_atomically``."""
    return write_bytes_atomically(path, text.encode("utf-8"))
