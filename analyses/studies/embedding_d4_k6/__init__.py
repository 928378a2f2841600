"""Embedding width at d = 4, k = 6: one-hot vs binary vs none (paper 2 §3)."""

from analyses.framework.grid import embedding_cell

STUDY = embedding_cell(4, 6)
