"""Command-line argument types and the entry-point wrapper shared by the ``interp`` command and the analyses scripts.

Each ``type=`` callable turns an option's text into a checked value or raises ``argparse.ArgumentTypeError``, which
argparse prints after the usage as ``<prog>: error: argument --flag: <message>`` (exit 2). :func:`run` calls a
``main`` and prints the bad input it raises later (``InvalidInput``, ``FileNotFoundError``, an ``OSError`` of an
output path) as one line ``<prog>: error: <message>`` (exit 2) and Ctrl-C as one line (exit 130); any other
exception is an internal error and keeps its traceback. Importing this module imports no torch (``checkpoint``
imports the checkpoint loader, and so torch, when it is first used).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from interp._checks import MAX_STEPS, MAX_TASKS, SEED_LIMIT, InvalidInput, SymlinkLoop, existing_kind


# ----- numbers ------------------------------------------------------------------------------------------------
def integer(text: str) -> int:
    """An argparse type: any integer."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        value = integer(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    parse.__name__ = f"int_at_least_{minimum}"
    return parse


positive_int = int_at_least(1)


def count(maximum: int | None = None, minimum: int = 1) -> Callable[[str], int]:
    """An argparse type: a count from ``minimum`` to ``maximum`` (``interp._checks.check_count``'s bounds, refused
    when the options are parsed, naming the flag). ``maximum`` None: a size bounded later by the memory estimate of
    the work it sizes (``interp._checks.check_memory``)."""

    def parse(text: str) -> int:
        value = integer(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"expected an integer from {minimum} to {maximum:,}, got {value:,}")
        return value

    parse.__name__ = f"count_{minimum}_to_{maximum}"
    return parse


tasks = count(MAX_TASKS)  # tasks an evaluation or a verification draws
steps = count(MAX_STEPS)  # clustering steps (a model's, Lloyd's, a training example's)
lloyd_steps = count(MAX_STEPS, minimum=0)  # Lloyd steps after a model's (interp.hybrid): 0 allowed


def threads(text: str) -> int:
    """An argparse type: a number of threads, from 1 to the machine's CPU cores."""
    value = positive_int(text)
    cores = os.cpu_count() or 1
    if value > cores:
        raise argparse.ArgumentTypeError(f"expected at most the {cores} CPU cores of this machine, got {value}")
    return value


def number(text: str) -> float:
    """An argparse type: any number (nan and inf included; see ``finite_float``)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def finite_float(text: str) -> float:
    """An argparse type: a finite number (no nan or inf)."""
    value = number(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    value = finite_float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text!r}")
    return value


def fraction(text: str) -> float:
    """An argparse type: a number in [0, 1)."""
    value = number(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")
    return value


def seed(text: str) -> int:
    """An argparse type: an integer seed in [0, 2**63), the range torch's generators take (with seed + 1)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed in [0, 2**63), got {text!r}") from None
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"expected an integer seed in [0, 2**63), got {text}")
    return value


def boolean(text: str) -> bool:
    """An argparse type: true/yes/1 or false/no/0 (any case); anything else is refused."""
    lowered = text.lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


# ----- names and input paths ----------------------------------------------------------------------------------
def plain_name(text: str) -> str:
    """An argparse type: a results name that is one file name (no folder part), e.g. ``tau_loss``."""
    if not text or "/" in text or "\0" in text or text in (".", ".."):
        raise argparse.ArgumentTypeError(f"expected a name without '/' (it names files), got {text!r}")
    return text


def existing_file(text: str) -> Path:
    """An argparse type: a regular file that exists (read as input; a FIFO or device is refused unopened)."""
    try:
        kind = existing_kind(text)
    except SymlinkLoop as loop:
        raise argparse.ArgumentTypeError(str(loop)) from None
    if kind is None:
        raise argparse.ArgumentTypeError(f"no file {text}")
    if kind == "folder":
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file")
    if kind != "file":
        raise argparse.ArgumentTypeError(f"{text} is a {kind}, not a regular file")
    return Path(text)


def existing_folder(text: str) -> Path:
    """An argparse type: a folder that exists (read as input)."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no folder {text}")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file; give a folder")
    return path


def checkpoint(text: str) -> str:
    """An argparse type: a shipped checkpoint name (``main-onehot``) or a checkpoint file; the text is returned."""
    from interp.model.checkpoint import resolve  # imports torch, once a checkpoint is named

    try:
        resolve(text)
    except FileNotFoundError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


@contextmanager
def about(*flags: str) -> Iterator[None]:
    """Name the options whose values a check inside reads: its ``InvalidInput`` becomes "--n, --k: <message>"."""
    try:
        yield
    except InvalidInput as error:
        raise InvalidInput(f"{', '.join(flags)}: {error}") from None


# ----- the entry point ----------------------------------------------------------------------------------------
def run(main: Callable[[list[str] | None], object], prog: str, argv: list[str] | None = None,
        interrupted: str | Callable[[], str] | None = None) -> int:
    """``main(argv)``'s exit code: its int result (anything else is 0), 2 on bad input (one line on stderr), 130 on
    Ctrl-C (one line, with ``interrupted`` saying what is kept: a text, or a function asked at that moment); other
    errors propagate with their traceback."""
    try:
        code = main(argv)
    except KeyboardInterrupt:
        note = interrupted() if callable(interrupted) else interrupted
        print(f"{prog}: interrupted" + (f"; {note}" if note else ""), file=sys.stderr)
        return 130
    except (InvalidInput, FileNotFoundError) as error:  # the project's input checks; a missing input path
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # unwritable or clashing output paths (a file where a folder must be, permissions)
        where = f": {error.filename}" if error.filename else ""
        print(f"{prog}: error: {error.strerror or error}{where}", file=sys.stderr)
        return 2
    return code if isinstance(code, int) and not isinstance(code, bool) else 0
