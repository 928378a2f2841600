"""Hybrid inference: best's learned steps, then Lloyd steps (``interp.hybrid``), chosen on validation tasks by a rule
committed before they were scored, tested once beside Lloyd, k-means++ in torch and scikit-learn's KMeans, timed."""

from analyses.framework.study import MeasuredStudy


def section() -> str:
    from analyses.studies.hybrid.measure import section

    return section()


STUDY = MeasuredStudy("Hybrid inference: best's learned steps, then Lloyd steps", "analyses.studies.hybrid.measure",
                      {"quick": ("--quick", "--out", "runs/analyses/quick/hybrid.json"),
                       "paper": ("--results-md",)},
                      {"hybrid": section}, writes=("hybrid.json", "hybrid_tasks.csv"))
