"""Timing helpers for the benchmarks: competitors are timed in interleaved rounds, medians are reported."""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

from analyses._studies import running_module
from interp._checks import check_output_folder
from interp._io import write_text_atomically

BENCH_RESULTS = Path(__file__).resolve().parent / "results" / "bench"  # committed: the overview quotes them


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


def printed(data: dict) -> str:
    """The text a benchmark printed for one table stored by ``write_table``: title, table, optional footer."""
    lines = [data["title"], table(data["rows"], data["header"])]
    if data.get("footer"):
        lines.append(data["footer"])
    return "\n".join(lines)


def check_json_folder(args, files: list[str]) -> Path | None:
    """The folder of a benchmark's tables (``--json DIR``; None with ``--no-json``), checked before any work: it can
    receive ``files`` (a new folder: only its last level is made)."""
    if args.no_json:
        return None
    return check_output_folder(args.json, files, "--json")


def write_table(folder: str | Path | None, name: str, title: str, header: list[str], rows: list[list[str]],
                footer: str | None = None) -> Path | None:
    """Store a printed table as ``<folder>/<name>.json`` (cells as printed, with the command that ran), so that
    ``printed`` gives back exactly the printed text; nothing when ``folder`` is None."""
    if folder is None:
        return None
    path = Path(folder) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps(stored_table(title, header, rows, footer), indent=1) + "\n")
    return path


def stored_table(title: str, header: list[str], rows: list[list[str]], footer: str | None = None) -> dict:
    """A printed table as ``write_table`` stores it, with the command that is running."""
    command = " ".join(["python -m " + running_module(), *sys.argv[1:]])
    return {"command": command, "source": "written by that command", "title": title, "header": header, "rows": rows,
            "footer": footer}


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
