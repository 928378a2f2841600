"""What the learned models compute: decomposition, kernels, symmetry, distilled algorithms, failure cases."""

import json

from analyses.framework.study import MeasuredStudy


def section() -> str:
    from analyses import _studies as S
    from analyses.studies.explain.measure import FAILURES, results_section

    failures = json.loads(FAILURES.read_text()) if FAILURES.exists() else None
    return results_section(json.loads((S.HERE / "results" / "explain.json").read_text()), failures)


STUDY = MeasuredStudy("What the learned models compute", "analyses.studies.explain.measure",
                      {"quick": ("--quick", "--out", "runs/analyses/quick/explain.json"), "paper": ("--results-md",)},
                      {"explain": section}, writes=("explain.json",))
