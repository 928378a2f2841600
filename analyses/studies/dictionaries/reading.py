"""Section ``dictionaries`` of analyses/RESULTS.md in words: every figure looked up in the committed record."""

import json

from analyses.framework import reading as R
from analyses.framework.reading import span


def reading() -> str:
    record = json.loads((R.HERE / "results" / "dictionaries.json").read_text())
    models = record["models"].values()

    def figures(key: str, digits: int = 3) -> str:
        return span([model[key] for model in models], digits)

    assignment = [row for model in models for row in model["features"] if row["selectivity"] >= 0.5]
    verdicts = " / ".join(sorted({found["assignment_share"]["verdict"] for found in record["verdicts"].values()}))
    return (
        f"Reading: at this L1 strength the dictionary is not sparse on the learned streams (mean L0 "
        f"{figures('mean_l0', 1)} of {record['models']['main-onehot']['live']} live features; R² {figures('r2')}), "
        "and its features are not per-cluster: a share of "
        f"{figures('assignment_share')} of them hold half their activation mass on one of Lloyd's clusters, against "
        f"the predicted half ({verdicts}). For the {len(assignment)} that do, ablating the feature (the stream minus "
        "its contribution, through the step) moves their own cluster's centroid most for "
        f"{sum(row['moved_most'] == row['cluster'] for row in assignment)} of them. As a description, not a "
        f"prediction: the features' decoder directions put {figures('mean_data_share', 2)} of their weight on the "
        "data slots, so they mostly "
        "describe where a point is, not which centroid it went to. Whether a sparser dictionary (a larger L1, more "
        "features) or the scratch slots alone give per-cluster features is a hypothesis not tested here; on the "
        "constructions' code slots the same instrument recovers every code direction (docs/dictionaries.md).\n")


READINGS = {"dictionaries": reading}
