"""One learned model for every k <= 16: its narrowing and Lloyd steps chosen on validation by a committed rule, then
tested once on a (k, d) grid, on the main configuration beside best, and on the evaluation protocol per k."""

from analyses.framework.study import MeasuredStudy


def section() -> str:
    from analyses.studies.any_k.measure import section

    return section()


def round2_section() -> str:
    from analyses.studies.any_k.round2 import section

    return section()


STUDY = MeasuredStudy("One learned model for every k up to 16", "analyses.studies.any_k.measure",
                      {"paper": ("--results-md",)}, {"any_k": section, "any_k_round2": round2_section},
                      writes=("any_k.json", "any_k_round2.json"))
