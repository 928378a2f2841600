"""Process-level speed settings, applied by default.

Importing the model (``interp.model.transformer``, which every computing entry point imports) calls
``apply_defaults()``: glibc's allocator keeps freed tensor memory for reuse (``tune_allocator``). Set the environment
variable ``INTERP_TUNE_ALLOCATOR=0`` before the import to keep the process's allocator as it is. Thread counts are
left to torch (``torch.set_num_threads``; the command line's ``--threads``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc's upper limit on 64-bit systems
ALLOCATOR_ENV = "INTERP_TUNE_ALLOCATOR"  # "0": leave the allocator alone
allocator_tuned: bool | None = None  # None: apply_defaults() not run yet; else whether the setting took effect


def tune_allocator() -> bool:
    """Keep freed tensor memory in the glibc heap instead of returning it to the OS after every op.

    The batched kernels here are memory-bound; with glibc's defaults every multi-MB temporary is a fresh
    mmap whose pages fault in again (measured: one construction layer at b=64, n=1024 went from 19 ms to
    7 ms at 2 threads). Same effect as running under jemalloc/tcmalloc. Returns False where not glibc.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok_mmap = libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
        ok_trim = libc.mallopt(_M_TRIM_THRESHOLD, 2**30)
    except (OSError, AttributeError):
        return False
    return bool(ok_mmap and ok_trim)


def apply_defaults() -> bool:
    """Tune the allocator once per process unless ``INTERP_TUNE_ALLOCATOR=0``; returns whether it is tuned."""
    global allocator_tuned
    if allocator_tuned is None:
        allocator_tuned = os.environ.get(ALLOCATOR_ENV, "1") != "0" and tune_allocator()
    return allocator_tuned
