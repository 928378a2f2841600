"""Which claims read the same training runs: the overview's count over independent evidence."""

from analyses.framework.study import MeasuredStudy

STUDY = MeasuredStudy("Shared training runs between claims", "analyses.studies.dependence.measure", {"paper": ()},
                      writes=("studies/dependence.json",))
