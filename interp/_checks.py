"""Input validation at the public boundary: clear errors that name the argument.

Values (tensors, ints, choices, seeds), the paths a command will write (checked before any work: writable, in a
folder that exists, never one of the command's inputs, a regular file or a new name: folders, FIFOs, sockets and
block devices are refused by ``stat`` without being opened, a character device such as /dev/null is written
straight where a text output allows it, and a trailing slash names a folder) and the memory a computation needs
(estimated from its sizes before anything is allocated, against what the machine has available). Every check of
what a user passed raises :class:`InvalidInput` (a ``ValueError``; :class:`NonFiniteInput` for NaN or inf values)
or :class:`InvalidInputType` (also a ``TypeError``), so the command line can print exactly these as one line and
exit 2, while any other exception, an internal bug, keeps its traceback.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a tensor is checked: the command line's argument checks need none of it
    import torch
    from torch import Tensor


class InvalidInput(ValueError):
    """A value passed by the user is out of its allowed range or inconsistent with another one."""


class InvalidInputType(InvalidInput, TypeError):
    """A value passed by the user has the wrong type."""


class NonFiniteInput(InvalidInput):
    """A tensor holds NaN or inf values (``check_float_tensor``): bad input from a user, or a model's non-finite
    output handed on to a function that checks its inputs."""


def check_float_tensor(value: object, name: str, ndim: int, shape_hint: str) -> Tensor:
    """Raise TypeError/ValueError unless ``value`` is a finite, non-empty floating tensor of rank ``ndim``."""
    import torch

    if not isinstance(value, torch.Tensor):
        raise InvalidInputType(f"{name} must be a torch.Tensor of shape {shape_hint}, got {type(value).__name__}")
    if not value.is_floating_point():
        raise InvalidInputType(f"{name} must have a floating dtype (float32 or float64), got {value.dtype}")
    if value.ndim != ndim:
        raise InvalidInput(f"{name} must have shape {shape_hint} (rank {ndim}), got shape {tuple(value.shape)}")
    if value.numel() == 0:
        raise InvalidInput(f"{name} must not be empty, got shape {tuple(value.shape)}")
    if not torch.isfinite(value).all():
        raise NonFiniteInput(f"{name} contains NaN or inf values")
    return value


def check_points_centroids(
    points: object, centroids: object, d: int | None = None, k_at_most_n: bool = True
) -> tuple[Tensor, Tensor]:
    """Validate a batch of tasks: points (b, n, d) and centroids (b, k, d), with k <= n unless relaxed
    (objectives may be evaluated at any centroids)."""
    points = check_float_tensor(points, "points", 3, "(batch, n, d)")
    centroids = check_float_tensor(centroids, "centroids", 3, "(batch, k, d)")
    if centroids.shape[0] != points.shape[0]:
        raise InvalidInput(
            f"centroids batch size {centroids.shape[0]} does not match points batch size {points.shape[0]}"
        )
    if centroids.shape[2] != points.shape[2]:
        raise InvalidInput(f"centroids have d={centroids.shape[2]} but points have d={points.shape[2]}")
    if k_at_most_n and centroids.shape[1] > points.shape[1]:
        raise InvalidInput(f"k={centroids.shape[1]} centroids exceed n={points.shape[1]} points")
    if centroids.dtype != points.dtype:
        raise InvalidInputType(f"centroids dtype {centroids.dtype} differs from points dtype {points.dtype}")
    if d is not None and points.shape[2] != d:
        raise InvalidInput(f"points have d={points.shape[2]} but the model was built for d={d}")
    return points, centroids


def check_positive_int(value: object, name: str, minimum: int = 1) -> int:
    """Raise unless ``value`` is an int >= ``minimum`` (bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputType(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise InvalidInput(f"{name} must be >= {minimum}, got {value}")
    return value


# ----- counts ---------------------------------------------------------------------------------------------------
# The most clustering steps one call runs (a model's forward, its checkpoint's recommended ``inference`` steps, the
# estimator, training's unroll, rollout and evaluation steps). The papers run 1 to 50 steps and Lloyd converges
# within a few hundred on their tasks (scikit-learn's max_iter is 300); every step keeps a (b, k, d) centroid and a
# (b, n) label entry of the trajectories, so a count beyond this is a typo, not a study.
MAX_STEPS = 10_000
# The most tasks one evaluation or verification draws (each task is n x d coordinates, plus its starts).
MAX_TASKS = 1_000_000


def check_count(value: object, name: str, maximum: int, minimum: int = 1) -> int:
    """Raise unless ``value`` is an int in [``minimum``, ``maximum``] (bools rejected), naming ``name`` and the bound:
    a count a user or a file supplies is bounded before any work starts."""
    value = check_positive_int(value, name, minimum)
    if value > maximum:
        raise InvalidInput(f"{name} must be at most {maximum:,}, got {value:,}")
    return value


def check_steps(value: object, name: str = "steps", minimum: int = 1) -> int:
    """``check_count`` with the bound of clustering steps, ``MAX_STEPS``."""
    return check_count(value, name, MAX_STEPS, minimum)


def check_choice(value: object, name: str, choices: tuple[str, ...]) -> str:
    """Raise ValueError unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise InvalidInput(f"{name} must be one of {choices}, got {value!r}")
    return value  # type: ignore[return-value]


# ----- devices ------------------------------------------------------------------------------------------------
DEVICE_TYPES = ("cpu", "cuda", "mps")  # where the models and tasks may live


def check_device(value: object, name: str = "device") -> torch.device:
    """``value`` (a string such as "cpu", "cuda", "cuda:1" or "mps", or a ``torch.device``) as a ``torch.device`` of
    one of ``DEVICE_TYPES`` that this machine has: an unknown string, another device type, a CUDA/MPS device that is
    not available, a CUDA index beyond the machine's devices, or a CPU or MPS index other than 0 (there is one of
    each; torch would accept "cpu:7" and run on the CPU) is refused naming ``name``."""
    import torch

    if isinstance(value, str):
        try:
            device = torch.device(value)
        except RuntimeError:
            raise InvalidInput(f"{name} must be a torch device such as 'cpu', 'cuda' or 'cuda:0', "
                               f"got {value!r}") from None
    elif isinstance(value, torch.device):
        device = value
    else:
        raise InvalidInputType(f"{name} must be a device name (str) or a torch.device, got {type(value).__name__}")
    if device.type not in DEVICE_TYPES:
        raise InvalidInput(f"{name} must be a {', '.join(DEVICE_TYPES[:-1])} or {DEVICE_TYPES[-1]} device, got "
                           f"{str(device)!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise InvalidInput(f"{name} {str(device)!r}: CUDA is not available on this machine "
                               "(torch.cuda.is_available() is False); use 'cpu'")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise InvalidInput(f"{name} {str(device)!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise InvalidInput(f"{name} {str(device)!r}: MPS is not available on this machine "
                           "(torch.backends.mps.is_available() is False); use 'cpu'")
    if device.type in ("cpu", "mps") and device.index not in (None, 0):  # torch accepts any index and ignores it
        raise InvalidInput(f"{name} {str(device)!r}: this machine has one {device.type.upper()} device, "
                           f"{device.type!r} (or '{device.type}:0')")
    return device


# ----- seeds ------------------------------------------------------------------------------------------------
SEED_LIMIT = 2**63  # seeds are in [0, 2**63): torch's generators take 64-bit seeds, and seed + 1 must fit too


def check_seed(value: object, name: str = "seed") -> int:
    """Raise unless ``value`` is an int seed in [0, 2**63) (bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputType(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= value < SEED_LIMIT:
        raise InvalidInput(f"{name} must be in [0, 2**63), got {value}")
    return value


def check_generator(value: object, name: str = "generator", device: object = None,
                    allow_none: bool = True) -> torch.Generator | None:
    """``value`` as a random-number generator: a ``torch.Generator`` as it is, an int seed in [0, 2**63) as a fresh
    generator on ``device`` seeded with it, or None (torch's global RNG) where ``allow_none``. Anything else (a str,
    a float, a bool, a list, a negative or too large seed) is refused naming ``name``."""
    import torch

    if isinstance(value, torch.Generator) or (value is None and allow_none):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        kinds = "a torch.Generator, an int seed or None" if allow_none else "a torch.Generator or an int seed"
        raise InvalidInputType(f"{name} must be {kinds}, got {type(value).__name__} {str(value)[:40]!r}")
    if not 0 <= value < SEED_LIMIT:
        raise InvalidInput(f"{name} seed must be in [0, 2**63), got {value}")
    return torch.Generator(device=device if device is not None else "cpu").manual_seed(value)


# ----- paths a command writes: checked before any work, nothing created, nothing opened but regular files ------
# One rule for every writer (the commands, the report, the analyses, checkpoints): a UTF-8 name, no loop of symbolic
# links, a regular file or a new name (a character device where a text output allows it), in a folder that exists.
def path_kind(mode: int) -> str:
    """What a ``stat`` mode names, in words: file, folder, fifo, socket, character device, block device."""
    kinds = ((stat.S_ISREG, "file"), (stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"),
             (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"))
    return next((kind for test, kind in kinds if test(mode)), "special file")


LINK_LOOP = "a symbolic link on this path leads back to itself (a loop of links); give another path"


class SymlinkLoop(InvalidInput):
    """A path that cannot be followed: one of its symbolic links leads back to itself (``stat`` fails with ELOOP)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        super().__init__(f"{self.path}: {LINK_LOOP}")

    def named(self, name: str) -> InvalidInput:
        """The same refusal naming the option (``--out``) the path was given for."""
        return InvalidInput(f"{name} {self.path}: {LINK_LOOP}")


def existing_kind(path: str | os.PathLike) -> str | None:
    """``path_kind`` of what ``path`` names (links followed), or None when nothing is there (a dangling link
    included): found by ``stat`` alone, nothing is opened. A loop of symbolic links is ``SymlinkLoop``."""
    try:
        return path_kind(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise SymlinkLoop(path) from None
        raise


def _output_kind(path: str | os.PathLike, name: str) -> str | None:
    """``existing_kind`` of an output path, a loop of links refused naming the option ``name``."""
    try:
        return existing_kind(path)
    except SymlinkLoop as loop:
        raise loop.named(name) from None


def check_utf8_path(path: str | os.PathLike, name: str = "out") -> Path:
    """Refuse an output path whose name is not valid UTF-8 (a byte such as 0xff, which Linux allows in names): one
    rule for every writer. A checkpoint there could not be read back (safetensors opens UTF-8 paths only), and the
    path could not be printed or put in a page or a CSV file."""
    try:
        os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{name} {ascii(os.fsdecode(path))} is not a valid UTF-8 path; interp writes only "
                           "UTF-8 names (safetensors cannot open a checkpoint under another, and it cannot be printed "
                           "or put in a page): choose another name") from None
    return Path(path)


def _names_a_folder(path: str | os.PathLike) -> bool:
    """Whether the path as the user spelled it ends with a separator ("out/"), which ``Path`` would drop."""
    text = os.fspath(path)
    return isinstance(text, str) and text.endswith((os.sep, "/")) and text.rstrip("/" + os.sep) != ""


def _missing_folder(path: Path, name: str) -> InvalidInput:
    folder = path.parent
    if folder.exists():
        return InvalidInput(f"{name} {path}: {folder} is a {existing_kind(folder) or 'file'}, not a folder")
    return InvalidInput(f"{name} {path}: its folder {folder} does not exist; create it first (mkdir -p {folder})")


def _probe_folder(folder: Path, path: Path, name: str) -> None:
    """Create and delete an empty file in ``folder``: the one test that permissions, read-only mounts and special
    file systems all answer truthfully (``os.access`` says yes to root even where writing fails)."""
    blocked = hasattr(signal, "pthread_sigmask")  # a Ctrl-C now is handled once the probe is gone: none is left
    if blocked:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        try:
            handle, probe = tempfile.mkstemp(prefix=".interp-write-check.", dir=folder)
        except OSError as error:
            raise InvalidInput(f"{name} {path}: cannot write in {folder} ({error.strerror or error})") from None
        os.close(handle)
        os.unlink(probe)
    finally:
        if blocked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def check_output_file(path: str | os.PathLike, name: str = "out", *, devices: bool = True) -> Path:
    """``path`` as a file about to be written: a regular file or a new name, in a folder that exists (nothing is
    created) and can be written. With ``devices`` a character device (/dev/null) is accepted too: the writer
    (``interp._io``) writes straight into it. Folders, FIFOs, sockets and block devices are refused by ``stat``
    alone (opening a FIFO blocks); a trailing slash names a folder. An existing regular file must be writable
    (opened for appending, so nothing in it changes). A name that is not UTF-8 (``check_utf8_path``) and a loop of
    symbolic links are refused, as by every writer."""
    check_utf8_path(path, name)
    if _names_a_folder(path):
        raise InvalidInput(f"{name} {os.fspath(path)} ends with '/': it names a folder; give the path of a file")
    path = Path(path)
    kind = _output_kind(path, name)
    if kind == "folder":
        raise InvalidInput(f"{name} {path} is a folder; give the path of a file to write")
    if kind == "character device" and devices:
        return path
    if kind not in (None, "file"):
        raise InvalidInput(f"{name} {path} is a {kind}; give the path of a regular file")
    if not path.parent.is_dir():
        raise _missing_folder(path, name)
    _probe_folder(path.parent, path, name)
    if kind == "file":
        try:
            with open(path, "ab"):
                pass
        except OSError as error:
            raise InvalidInput(f"{name} {path}: cannot write this file ({error.strerror or error})") from None
    return path


def check_output_folder(path: str | os.PathLike, files: Sequence[str], name: str = "out") -> Path:
    """``path`` as a folder about to receive ``files``: an existing folder, or a new one whose parent exists (only
    the last level is ever created); it can be written, and each of ``files`` in it passes ``check_output_file``
    (a regular file or a new name; no device: the folder is the output). A name that is not UTF-8 and a loop of
    symbolic links are refused, as by ``check_output_file``."""
    path = check_utf8_path(path, name)
    kind = _output_kind(path, name)
    if kind is None:
        if not path.parent.is_dir():
            raise _missing_folder(path, name)
        _probe_folder(path.parent, path, name)
        return path
    if kind != "folder":
        raise InvalidInput(f"{name} {path} is a {kind}; give a folder (existing, or new in a folder that exists)")
    _probe_folder(path, path, name)
    for file in files:
        check_output_file(path / file, name, devices=False)
    return path


def same_file(first: str | os.PathLike, second: str | os.PathLike) -> bool:
    """Whether two paths name one file: equal after resolving links, or (both existing) one inode (hard links)."""
    if os.path.realpath(first) == os.path.realpath(second):  # a loop of links stays as spelled (Path.resolve raises)
        return True
    try:
        return os.path.samefile(first, second)
    except OSError:  # one of them does not exist (or cannot be examined): not the same existing file
        return False


def check_outputs_spare_inputs(outputs: Mapping[str, Sequence[str | os.PathLike]],
                               inputs: Mapping[str, Sequence[str | os.PathLike]]) -> None:
    """Refuse a command that would write over what it reads: ``outputs`` maps an output option to every path it
    writes (a folder and the files written in it), ``inputs`` an input option to the files it reads."""
    for out_name, written in outputs.items():
        for out_path in written:
            for in_name, read in inputs.items():
                for in_path in read:
                    if same_file(out_path, in_path):
                        raise InvalidInput(f"{out_name} would write {out_path}, which is the {in_name} input "
                                           f"{in_path}; choose another {out_name}")


# ----- memory: refuse what cannot fit before allocating it ---------------------------------------------------
@dataclass(frozen=True)
class MemoryNeed:
    """One buffer (or set of buffers) a computation must hold at once: what it is, the sizes it grows with, and
    its bytes."""

    what: str
    sizes: dict[str, int]
    nbytes: int


def format_bytes(count: float) -> str:
    """``count`` bytes in decimal units (kB, MB, GB, TB, PB, EB; larger counts stay in EB)."""
    units = ("B", "kB", "MB", "GB", "TB", "PB", "EB")
    value, unit = float(count), 0
    while value >= 1000 and unit < len(units) - 1:
        value, unit = value / 1000, unit + 1
    return f"{value:.0f} {units[unit]}" if unit == 0 else f"{value:.3g} {units[unit]}"


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def available_memory(meminfo: str | os.PathLike = "/proc/meminfo",
                     cgroup: str | os.PathLike = "/sys/fs/cgroup") -> int | None:
    """Bytes this process can still allocate: the kernel's MemAvailable, lowered to what the memory cgroup (v2
    ``memory.max - memory.current``, or v1 ``memory.limit_in_bytes - memory.usage_in_bytes``) leaves. Without
    /proc/meminfo, the physical memory; None when nothing is known."""
    available = None
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024  # reported in kB
                break
    except (OSError, ValueError, IndexError):
        available = None
    if available is None:
        try:
            available = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            available = None
    cgroup = Path(cgroup)
    for limit_file, usage_file in (("memory.max", "memory.current"),
                                   ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        limit, usage = _read_int(cgroup / limit_file), _read_int(cgroup / usage_file)
        if limit is not None and usage is not None:
            left = max(limit - usage, 0)
            available = left if available is None else min(available, left)
            break
    return available


class InsufficientMemory(InvalidInput):
    """A computation (``work``) would need more memory than is available; ``needs`` says where it goes."""

    def __init__(self, work: str, needs: Sequence[MemoryNeed], available: int):
        self.work, self.needs, self.available = work, tuple(needs), available
        super().__init__(self.describe())

    def describe(self, names: Mapping[str, str] | None = None) -> str:
        """The message, with each size named by ``names`` (e.g. {"n_tasks": "--tasks"}) where given."""
        names = names or {}
        total = sum(need.nbytes for need in self.needs)
        largest = max(self.needs, key=lambda need: need.nbytes)
        sizes = ", ".join(f"{names.get(key, key)}={value}" for key, value in largest.sizes.items())
        return (f"{self.work} needs at least {format_bytes(total)} of memory and {format_bytes(self.available)} is "
                f"available; the largest part is {largest.what}, {format_bytes(largest.nbytes)} ({sizes}): choose "
                "smaller sizes")


def check_memory(work: str, needs: Sequence[MemoryNeed], available: int | None = None) -> None:
    """Raise ``InsufficientMemory`` when the buffers ``needs`` of ``work`` (held at once) exceed ``available`` bytes
    (default: ``available_memory()``; no check when that is unknown)."""
    if available is None:
        available = available_memory()
    if available is not None and sum(need.nbytes for need in needs) > available:
        raise InsufficientMemory(work, needs, available)
