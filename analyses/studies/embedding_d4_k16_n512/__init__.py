"""Embedding width at d = 4, k = 16 at the papers' n = 512 (paper 2 §3)."""

from analyses.framework.grid import embedding_cell

STUDY = embedding_cell(4, 16, n=512, claims="embedding_n512")
