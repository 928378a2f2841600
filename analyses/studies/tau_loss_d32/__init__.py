"""Loss x temperature again at d = 32, the papers' second dimension (paper 2 Figs. 2, 9, 14)."""

from analyses.framework.grid import GridStudy

STUDY = GridStudy("Loss (NE softmax vs L2 sparsemax) x temperature tau", {"d": 32, "k": 6, "n": 128},
                  {"loss": ["softmin", "sparsemax"], "tau": [1.0, 0.25, 0.14, 0.1]},
                  "paper 2 Figs. 2, 9, 14 (d in {4, 32}, k = 6, n = 512, 10,000 steps, 10 seeds)", "tau_loss")
