"""The stability study at the papers' n = 512 (paper 2 §3.5)."""

from analyses.framework.grid import stability_cell

STUDY = stability_cell(32, 25, n=512, claims="stability_n512")
