"""Dimension d (paper 2 Figs. 10b, 15)."""

from analyses.framework.grid import GridStudy

STUDY = GridStudy("Dimension d", {"k": 6, "n": 128}, {"d": [4, 8, 16, 32]},
                  "paper 2 Figs. 10b, 15 (k = 6, n = 512, 10,000 steps, 10 seeds)", "d")
