"""Learned models against Lloyd from the same starts: the estimator's self-check margin (docs/learned_model.md)."""

from analyses.framework.study import MeasuredStudy

STUDY = MeasuredStudy("Learned models against Lloyd from the same starts", "analyses.studies.learned_vs_lloyd.measure",
                      {"quick": ("--tasks", "8", "--hostile-seeds", "1", "--out",
                                 "runs/analyses/quick/learned_vs_lloyd.json"), "paper": ()},
                      writes=("learned_vs_lloyd.json",))
