"""Training length n (paper 2 §3 / App. F: no significant effect)."""

from analyses.framework.grid import GridStudy

STUDY = GridStudy("Training length n", {"d": 4, "k": 6}, {"n": [128, 256, 512, 1024]},
                  "paper 2 §3 / App. F (k = 6, 10,000 steps, 10 seeds)", "n")
