"""What a study is, as its folder declares it: a grid of training runs (``framework.grid.GridStudy``) or a
measurement (``MeasuredStudy``: an explanation, a benchmark, the scoring of checkpoints).

A study folder ``analyses/studies/<name>/`` holds ``__init__.py`` with ``STUDY`` (one of the two kinds) and, when
the study registers claims of its own, ``claims.py`` with ``CLAIMS`` (``analyses.claims.Claim`` objects, found by
``analyses.claims`` like its own). ``python -m analyses run <name>`` runs it, ``render`` writes its sections from the
committed files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class MeasuredStudy:
    """A study that measures rather than trains a grid: ``python -m <module> <arguments>`` runs it at a budget
    (``arguments[budget]``); ``sections`` maps each RESULTS.md section it writes to the function that writes that
    section from the committed files alone (no model run), which ``render`` calls."""

    title: str
    module: str
    arguments: Mapping[str, tuple[str, ...]]  # budget name -> the module's command-line arguments
    sections: Mapping[str, Callable[[], str]] = field(default_factory=dict)
    writes: tuple[str, ...] = ()  # the committed files it writes, relative to analyses/results/

    def command(self, budget: str) -> list[str]:
        """The module and its arguments at ``budget`` (``python -m`` runs them)."""
        return [self.module, *self.arguments[budget]]


def section_written(key: str, write: Callable[[Path], object]) -> str:
    """The section ``key`` that ``write(path)`` puts into a RESULTS.md at ``path`` (a temporary file): how a
    measurement's own writer renders its section from the committed files without touching them."""
    import tempfile

    from analyses import _studies as S
    from interp._io import write_text_atomically

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "RESULTS.md"
        write_text_atomically(path, "")
        write(path)
        text = path.read_text()
    begin, end = f"<!-- study:{key} -->\n", f"\n<!-- /study:{key} -->"
    if begin not in text:
        raise S.MissingSection(f"the writer of {key} wrote no section {key}")
    return text.split(begin, 1)[1].split(end, 1)[0] + "\n"
