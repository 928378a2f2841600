"""Lloyd's variants on contaminated tasks: robust, trimmed, spherical, soft (docs/variants.md)."""

from analyses.framework.study import MeasuredStudy

PAPER = ("--tasks", "48", "--n", "400", "--results-md")


def section() -> str:
    from analyses import _studies as S
    from analyses._shared import read_csv
    from analyses.studies.variants.measure import markdown

    budget = "48 tasks per setting, n=400, d=2, k=5, 10 steps"
    return markdown(read_csv(S.HERE / "results" / "variants.csv"), S.command_line(), budget)


STUDY = MeasuredStudy("Variants on contaminated tasks", "analyses.studies.variants.measure",
                      {"quick": ("--tasks", "4", "--n", "64", "--out", "runs/analyses/quick"), "paper": PAPER},
                      {"variants": section}, writes=("variants.csv",))
