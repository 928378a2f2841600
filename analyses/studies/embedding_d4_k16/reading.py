"""Section ``embedding_d4_k16`` of analyses/RESULTS.md in words: every figure looked up in the committed rows."""

from __future__ import annotations

from analyses.framework import cell_readings as cells


def reading() -> str:
    return cells.embedding_pair("embedding_d4_k16")


READINGS = {"embedding_d4_k16": reading}
