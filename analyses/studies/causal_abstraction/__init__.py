"""Where the learned models hold Lloyd's assignment causally: label IIA of the scratch slots, of a DAS subspace and
of a random one, against predictions committed before the run."""

from analyses.framework.study import MeasuredStudy


def section() -> str:
    from analyses.studies.causal_abstraction.measure import section

    return section()


STUDY = MeasuredStudy("Where the learned models hold Lloyd's assignment", "analyses.studies.causal_abstraction.measure",
                      {"quick": ("--pairs", "32", "--das-steps", "5", "--out",
                                 "runs/analyses/quick/causal_abstraction.json"),
                       "paper": ("--results-md",)},
                      {"causal_abstraction": section}, writes=("causal_abstraction.json",))
