"""Number of clusters k (paper 2 Fig. 10a)."""

from analyses.framework.grid import GridStudy

STUDY = GridStudy("Number of clusters k", {"d": 32, "n": 128}, {"k": [6, 10, 16, 25]},
                  "paper 2 Fig. 10a (d = 32, n = 512, 10,000 steps, 10 seeds)", "k")
