"""Real data at their own k: a learned model through InContextKMeans against Lloyd's algorithm and scikit-learn's
KMeans on scikit-learn's bundled data sets, from the same starts."""

from analyses.framework.study import MeasuredStudy


def section() -> str:
    from analyses.studies.real_data.measure import section

    return section()


STUDY = MeasuredStudy("Real data at their own k", "analyses.studies.real_data.measure",
                      {"quick": ("--model", "any-k", "--starts", "2", "--out", "runs/analyses/quick/real_data.json"),
                       "paper": ("--model", "any-k", "--results-md")},
                      {"real_data": section}, writes=("real_data.json",))
