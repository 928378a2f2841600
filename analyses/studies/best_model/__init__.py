"""A learned default: main-onehot fine-tuned for how it is used, chosen on validation, tested once."""

import json

from analyses.framework.study import MeasuredStudy


def section() -> str:
    from analyses import _studies as S
    from analyses.studies.best_model.measure import results_section

    return results_section(json.loads((S.HERE / "results" / "best_model.json").read_text()))


STUDY = MeasuredStudy("A learned default", "analyses.studies.best_model.measure", {"paper": ("--results-md",)},
                      {"best_model": section}, writes=("best_model.json",))
