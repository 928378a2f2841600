"""Section ``d`` of analyses/RESULTS.md in words: every figure looked up in the committed rows."""

from __future__ import annotations

from analyses.framework import cell_readings as cells


def reading() -> str:
    return cells.grid("d", "d")


READINGS = {"d": reading}
