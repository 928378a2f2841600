"""Section ``embedding_d32_k6`` of analyses/RESULTS.md in words: every figure looked up in the committed rows."""

from __future__ import annotations

from analyses.framework import cell_readings as cells


def reading() -> str:
    return cells.embedding_pair("embedding_d32_k6")


READINGS = {"embedding_d32_k6": reading}
