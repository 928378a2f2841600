"""The slot-specific part of the learned update, explained by interventions (predictions committed first)."""

import json

from analyses.framework.study import MeasuredStudy


def section() -> str:
    from analyses import _studies as S
    from analyses.studies.slots.measure import results_section

    return results_section(json.loads((S.HERE / "results" / "slots.json").read_text()))


STUDY = MeasuredStudy("The slot-specific part, explained by interventions", "analyses.studies.slots.measure",
                      {"quick": ("--quick", "--out", "runs/analyses/quick/slots.json"), "paper": ("--results-md",)},
                      {"slots": section}, writes=("slots.json",))
