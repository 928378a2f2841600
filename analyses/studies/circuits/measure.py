"""Circuits of the learned models, against predictions committed before the run (analyses/predictions/circuits.json).

For main-onehot, main-binary and best, one step (the step they were trained for) in the fixed slot order, on 64 tasks
of the main configuration (seed 20261206) from random starts (seed 20261207):

* ACDC (``interp.instruments.circuit_discovery.acdc``: metric "objective", corruption "tasks", threshold 0.01): the
  edges kept, the circuit's mean ln Phi against the full model's and the corrupted run's (``recovered``), which of
  the one-hot construction's circuit edges it keeps;
* every edge's exact patching effect (``edge_effects``, the same metric and corruption);
* node attribution patching against exact node patching (``node_attribution``, metric "corrupted_share"): Pearson
  over the nodes, AtP and AtP*.

Each registered prediction gets its verdict (``analyses.framework.preregistration.verdict``). Writes
analyses/results/circuits.json and the section ``circuits`` of analyses/RESULTS.md.

    python -m analyses run circuits --budget paper        (a few minutes on one core)
"""

from __future__ import annotations

import functools
import json
import sys

import torch

from analyses import _studies as S
from analyses.framework import measured
from analyses.framework.formatting import fixed
from interp import _arguments as arguments

PROG = "python -m analyses.studies.circuits.measure"
DEFAULT_OUT = S.HERE / "results" / "circuits.json"
PREDICTIONS = S.HERE / "predictions" / "circuits.json"
MODELS = ("main-onehot", "main-binary", "best")
TASK_SEED, START_SEED, TASKS = 20261206, 20261207, 64
THRESHOLD = 0.01
CONSTRUCTION_CIRCUIT = (  # the one-hot construction's one-step circuit (tests/test_circuits.py), by edge name
    "points_embed -> blocks.0.attn_xc.q", "centroids_embed -> blocks.0.attn_xc.k",
    "centroids_embed -> blocks.0.attn_xc.v", "centroids_embed -> blocks.0.attn_cx.q",
    "points_embed -> blocks.0.attn_cx.v", "blocks.0.attn_xc -> blocks.0.attn_cx.k",
    "centroids_embed -> blocks.0.attn_cc.v", "centroids_embed -> output", "blocks.0.attn_cx -> output",
    "blocks.0.attn_cc -> output")


def tasks(count: int = TASKS) -> tuple[torch.Tensor, torch.Tensor]:
    """The study's tasks (count, 512, 32) and random starts (count, 10, 32)."""
    from interp.task_config import TaskConfig
    from interp.tasks import init_centroids, sample_tasks

    points = sample_tasks(TaskConfig(n=512, d=32, k=10), count, TASK_SEED).points
    return points, init_centroids(points, 10, "random", START_SEED)


def measure_model(name: str, points: torch.Tensor, init: torch.Tensor) -> dict:
    """The figures of one model (module docstring)."""
    from scipy.stats import pearsonr

    from interp.instruments import graph as G
    from interp.instruments.attribution import node_attribution
    from interp.instruments.circuit_discovery import acdc, edge_effects
    from interp.model.checkpoint import load_model

    model = load_model(name)
    setting = G.prepare(model, points, init, steps=1, metric="objective", corruption="tasks")
    circuit = acdc(model, points, init, threshold=THRESHOLD, setting=setting)
    effects = edge_effects(model, points, init, setting=setting)
    kept = {str(edge) for edge in circuit.edges}
    nodes = node_attribution(model, points, init, steps=1, corruption="tasks")
    return {
        "edges": len(setting.graph.edges),
        "kept": sorted(kept),
        "kept_share": len(kept) / len(setting.graph.edges),
        "construction_edges_kept": sum(edge in kept for edge in CONSTRUCTION_CIRCUIT) / len(CONSTRUCTION_CIRCUIT),
        "construction_edges_missing": [edge for edge in CONSTRUCTION_CIRCUIT if edge not in kept],
        "recovered": circuit.recovered,
        "log_objective": {"circuit": circuit.log_objective, "full": circuit.full_log_objective,
                          "corrupted": circuit.corrupted_log_objective},
        "edge_effects": dict(effects.ranked()),
        "nodes": {str(node): {"atp": float(a), "atp_star": float(b), "exact": float(c)}
                  for node, a, b, c in zip(nodes.nodes, nodes.plain, nodes.corrected, nodes.exact)},
        "atp_pearson": float(pearsonr(nodes.plain.numpy(), nodes.exact.numpy())[0]),
        "atp_star_pearson": float(pearsonr(nodes.corrected.numpy(), nodes.exact.numpy())[0]),
    }


def results_section(record: dict) -> str:
    """The RESULTS.md section ``circuits`` from the committed record."""
    lines = [
        "## Circuits of the learned models",
        "",
        f"Command: `{record['command']}`  ",
        f"Budget: {TASKS} tasks of the main configuration (n = 512, d = 32, k = 10; seed {TASK_SEED}), random starts "
        f"(seed {START_SEED}), one step in the fixed slot order; ACDC with the objective metric, other tasks as the "
        f"corruption, threshold {THRESHOLD}; node attribution with the corrupted-share metric. Predictions: "
        "`analyses/predictions/circuits.json`, committed before the run (docs/circuits.md).",
        "",
        "| model | edges kept | construction's edges kept | mean ln Φ: circuit / full / corrupted | recovered | "
        "AtP vs exact (Pearson over nodes): AtP / AtP* |",
        "|---|---|---|---|---|---|",
    ]
    for name, figures in record["models"].items():
        objective = figures["log_objective"]
        lines.append(
            f"| {name} | {len(figures['kept'])} of {figures['edges']} | "
            f"{fixed(figures['construction_edges_kept'], 2)} | "
            f"{fixed(objective['circuit'])} / {fixed(objective['full'])} / {fixed(objective['corrupted'])} | "
            f"{fixed(figures['recovered'])} | {fixed(figures['atp_pearson'])} / {fixed(figures['atp_star_pearson'])} |")
    lines += ["", *measured.predictions_table(record), "",
              "Edges outside the construction's circuit that ACDC keeps, and the construction's edges it drops:",
              ""]
    for name, figures in record["models"].items():
        extra = [edge for edge in figures["kept"] if edge not in CONSTRUCTION_CIRCUIT]
        lines.append(f"* {name}: kept beyond the construction: {', '.join(f'`{e}`' for e in extra) or 'none'}; "
                     f"dropped: {', '.join(f'`{e}`' for e in figures['construction_edges_missing']) or 'none'}.")
    return "\n".join(lines) + "\n"


def section() -> str:
    """The section from the committed JSON (``render``)."""
    return results_section(json.loads(DEFAULT_OUT.read_text()))


def main(argv: list[str] | None = None) -> dict:
    parser = measured.parser(PROG, __doc__, MODELS, DEFAULT_OUT)
    parser.add_argument("--tasks", type=arguments.count(1000), default=TASKS, help="tasks (at most 1,000)")
    args = parser.parse_args(argv)
    shared = functools.cache(lambda: tasks(args.tasks))  # drawn once, after the output is checked
    return measured.run(args, PREDICTIONS, "circuits", "circuits", lambda name: measure_model(name, *shared()),
                        lambda figures, key: figures[key], results_section)


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
