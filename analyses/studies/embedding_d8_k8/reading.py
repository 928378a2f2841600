"""Section ``embedding_d8_k8`` of analyses/RESULTS.md in words: every figure looked up in the committed rows."""

from analyses.framework import cell_readings as cells


def reading() -> str:
    return cells.embedding_pair("embedding_d8_k8")  # the words every embedding cell shares, its figures looked up


READINGS = {"embedding_d8_k8": reading}
