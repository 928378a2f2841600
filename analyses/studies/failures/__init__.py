"""The explanations' failure cases, each tested by an intervention against a committed prediction (Cauchy, Gonzalez
starts, the d-only model, the slot-specific part); their table is part of the ``explain`` section."""

from analyses.framework.study import MeasuredStudy

STUDY = MeasuredStudy("Failure cases, tested by interventions", "analyses.studies.failures.measure",
                      {"quick": ("--tasks", "4", "--out", "runs/analyses/quick/failures.json"), "paper": ()},
                      writes=("failures.json",))
