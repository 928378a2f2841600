"""Circuits of the learned models: ACDC's circuit and its faithfulness, the construction's edges it keeps, and
attribution patching against exact patching, against predictions committed before the run."""

from analyses.framework.study import MeasuredStudy


def section() -> str:
    from analyses.studies.circuits.measure import section

    return section()


STUDY = MeasuredStudy("Circuits of the learned models", "analyses.studies.circuits.measure",
                      {"quick": ("--tasks", "8", "--out", "runs/analyses/quick/circuits.json"),
                       "paper": ("--results-md",)},
                      {"circuits": section}, writes=("circuits.json",))
