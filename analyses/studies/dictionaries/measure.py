"""What a sparse dictionary's features on the learned models' points stream are, each feature's claimed role tested
by ablating it, against predictions committed before the run (analyses/predictions/dictionaries.json).

For main-onehot and main-binary (one step, fixed slot order): a dictionary (``interp.instruments.dictionary``, 40
features) fitted on ``blocks.0.hook_points_resid_post`` of 32 main-configuration tasks; on 32 other tasks each live
feature's role, the cluster (Lloyd's assignment: nearest initial centroid) holding the largest share of its
activation mass (its selectivity), and the intervention: every point's stream minus the feature's contribution, run
through the step, and which output centroid moves most. Writes analyses/results/dictionaries.json and the section
``dictionaries`` of analyses/RESULTS.md.

    python -m analyses run dictionaries --budget paper
"""

from __future__ import annotations

import json
import sys

import torch

from analyses import _studies as S
from analyses.framework import measured
from analyses.framework.formatting import fixed
from interp import _arguments as arguments

PROG = "python -m analyses.studies.dictionaries.measure"
DEFAULT_OUT = S.HERE / "results" / "dictionaries.json"
PREDICTIONS = S.HERE / "predictions" / "dictionaries.json"
MODELS = ("main-onehot", "main-binary", "best")
# best: predictions of its own, committed after main-onehot and main-binary were scored
OWN_PREDICTIONS = {"best": S.HERE / "predictions" / "dictionaries_best.json"}
HOOK = "blocks.0.hook_points_resid_post"
FIT_SEED, TEST_SEED, START_OFFSET, TASKS = 20261210, 20261211, 100, 32
FEATURES, LIVE, ASSIGNMENT = 40, 0.01, 0.5


def _tasks(seed: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    from interp.task_config import TaskConfig
    from interp.tasks import init_centroids, sample_tasks

    points = sample_tasks(TaskConfig(n=512, d=32, k=10), count, seed).points
    return points, init_centroids(points, 10, "random", seed + START_OFFSET)


def measure_model(name: str, count: int, steps: int) -> dict:
    """The dictionary's figures and every live feature's role and ablation on one model (module docstring)."""
    from interp.instruments import dictionary as D
    from interp.model.checkpoint import load_model

    model = load_model(name)
    fit_points, fit_init = _tasks(FIT_SEED, count)
    points, init = _tasks(TEST_SEED, count)
    found = D.fit_dictionary(D.stream_activations(model, fit_points, fit_init, HOOK),
                             D.DictionarySettings(n_features=FEATURES, steps=steps, seed=0))
    stream = D.stream_activations(model, points, init, HOOK)  # (b n, D)
    # R^2, mean L0 and dead features (the learned models have no known directions: one placeholder direction)
    score = D.score_dictionary(found, stream, torch.ones(1, stream.shape[1]))
    with torch.no_grad():
        clean = model(points, init, steps=1, slot_order="fixed")
        labels = clean.assignment_trajectory[:, 0].reshape(-1)  # (b n,): Lloyd's assignment
        activations = found.encode(stream).double()  # (b n, F)
        baseline = found.decode(torch.zeros_like(activations))  # (b n, D)
    features = []
    for f in range(found.n_features):
        mass = activations[:, f]
        if float((mass > 0).double().mean()) < LIVE:
            continue
        per_cluster = torch.zeros(10, dtype=torch.float64).index_add_(0, labels, mass)
        cluster = int(per_cluster.argmax())
        only = torch.zeros_like(activations)
        only[:, f] = activations[:, f]
        contribution = (found.decode(only) - baseline).reshape(points.shape[0], points.shape[1], -1)  # (b, n, D)
        with torch.no_grad():
            ablated = model.run_with_hooks(points, init, steps=1, slot_order="fixed", fwd_hooks=[
                (HOOK, lambda act, hook, c=contribution: act - c.to(act))]).centroids  # (b, k, d)
        moves = (ablated - clean.centroids).norm(dim=-1).double().mean(dim=0)  # (k,)
        data_share = float((found.features[f, : model.config.d].double() ** 2).sum())  # unit row: share in x slots
        features.append({"feature": f, "fires": float((mass > 0).double().mean()), "cluster": cluster,
                         "data_share": data_share,
                         "selectivity": float(per_cluster[cluster] / per_cluster.sum()),
                         "moves": moves.tolist(), "moved_most": int(moves.argmax())})
    assignment = [row for row in features if row["selectivity"] >= ASSIGNMENT]
    return {"r2": score.r2, "mean_l0": score.mean_l0, "dead": score.dead, "live": len(features),
            "assignment_share": len(assignment) / len(features) if features else float("nan"),
            "role_borne_out": (sum(row["moved_most"] == row["cluster"] for row in assignment) / len(assignment)
                               if assignment else float("nan")),
            "clusters_covered": len({row["cluster"] for row in assignment}),
            "mean_data_share": (sum(row["data_share"] for row in features) / len(features) if features
                                else float("nan")),
            "features": features}


def results_section(record: dict) -> str:
    """The RESULTS.md section ``dictionaries`` from the committed record."""
    lines = [
        "## Sparse dictionaries on the learned models' points stream",
        "",
        f"Command: `{record['command']}`  ",
        f"Budget: a dictionary of {FEATURES} features fitted on `{HOOK}` (every slot) of {record['tasks']} tasks of "
        f"the main configuration (seed {FIT_SEED}), {record['steps']} Adam steps; roles and ablations on "
        f"{record['tasks']} other tasks (seed {TEST_SEED}); a feature is live when it fires on at least "
        f"{fixed(100 * LIVE, 0)}% of the points, an assignment feature when one cluster (Lloyd's assignment) holds "
        f"at least {fixed(ASSIGNMENT, 1)} of its activation mass. Predictions: "
        "`analyses/predictions/dictionaries.json`, committed before the run (docs/dictionaries.md).",
        "",
        "| model | R² | mean L0 | live / dead features | assignment features | clusters they cover | "
        "ablation moves their cluster's centroid most | features' weight in the data slots (mean) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, m in record["models"].items():
        count = round(m["assignment_share"] * m["live"])
        lines.append(f"| {name} | {fixed(m['r2'])} | {fixed(m['mean_l0'], 1)} | {m['live']} / {m['dead']} | "
                     f"{count} ({fixed(m['assignment_share'], 2)}) | {m['clusters_covered']} of 10 | "
                     f"{fixed(m['role_borne_out'], 2)} | {fixed(m['mean_data_share'], 2)} |")
    lines += ["", *measured.predictions_table(record)]
    return "\n".join(lines) + "\n"


def section() -> str:
    return results_section(json.loads(DEFAULT_OUT.read_text()))


def main(argv: list[str] | None = None) -> dict:
    parser = measured.parser(PROG, __doc__, MODELS, DEFAULT_OUT)
    parser.add_argument("--tasks", type=arguments.count(1000), default=TASKS)
    parser.add_argument("--steps", type=arguments.count(10_000_000), default=3000, help="the dictionary's Adam steps")
    args = parser.parse_args(argv)
    return measured.run(args, PREDICTIONS, "dictionaries", "dictionary",
                        lambda name: measure_model(name, args.tasks, args.steps),
                        lambda figures, key: figures[key], results_section,
                        {"tasks": args.tasks, "steps": args.steps}, OWN_PREDICTIONS)


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
