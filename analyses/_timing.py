"""Timing helpers for the benchmarks: competitors are timed in interleaved rounds, medians are reported."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def interleaved_medians(competitors: dict[str, Callable[[], object]], rounds: int, warmup: int = 2) -> dict[str, float]:
    """Median wall seconds of each competitor; every round runs each once, in turn, so that load on a
    shared machine hits all of them alike."""
    for _ in range(warmup):
        for run in competitors.values():
            run()
    samples: dict[str, list[float]] = {name: [] for name in competitors}
    for _ in range(rounds):
        for name, run in competitors.items():
            start = time.perf_counter()
            run()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def table(rows: list[list[str]], header: list[str]) -> str:
    """A plain-text table with right-aligned columns."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    lines = ["  ".join(str(cell).rjust(width) for cell, width in zip(row, widths)) for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_memory_growth_mb(run: Callable[[], object]) -> float:
    """Peak resident memory added by ``run()`` in this process (MB): the kernel's high-water mark is reset
    (/proc/self/clear_refs, value 5) so memory inherited or used before does not count (Linux)."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    baseline = _status_kb("VmRSS")
    run()
    return (_status_kb("VmHWM") - baseline) / 1024
