"""One-hot vs binary stability without gradient clipping at d = 32, k = 25 (paper 2 §3.5)."""

from analyses.framework.grid import stability_cell

STUDY = stability_cell(32, 25)
