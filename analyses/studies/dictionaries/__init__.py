"""Sparse dictionaries on the learned models' points stream: what the features are, each claimed role tested by
ablating the feature, against predictions committed before the run."""

from analyses.framework.study import MeasuredStudy


def section() -> str:
    from analyses.studies.dictionaries.measure import section

    return section()


STUDY = MeasuredStudy("Sparse dictionaries on the learned models", "analyses.studies.dictionaries.measure",
                      {"quick": ("--tasks", "4", "--steps", "50", "--out", "runs/analyses/quick/dictionaries.json"),
                       "paper": ("--results-md",)},
                      {"dictionaries": section}, writes=("dictionaries.json",))
