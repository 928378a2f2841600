"""Learning rate at d = 32 (paper 2 App. F: 0.01 best, 0.1 and 1.0 unstable)."""

from analyses.framework.grid import GridStudy

STUDY = GridStudy("Learning rate at d = 32", {"d": 32, "k": 6, "n": 128}, {"lr": [0.001, 0.01, 0.1, 1.0]},
                  "paper 2 App. F (k = 6, n = 512, M = 5,000 steps, 10 seeds)", "lr")
