"""Where the learned models hold Lloyd's assignment causally: interchange interventions and DAS on main-onehot and
main-binary, against predictions committed before the run (analyses/predictions/causal_abstraction.json).

For each model (float32, one step, fixed slot order) on held-out base/source pairs of TaskConfig(n=256, d=32, k=10)
(``interp.instruments.causal_abstraction.sample_pairs``; training seed 20261208, held-out seed 20261209), the label
IIA (``IIAResult.assignment_accuracy``: the share of base points whose nearest output centroid agrees with the
counterfactual's) of four alignments of the assignment at ``blocks.0.hook_points_resid_post``: none (the model's own
output against Lloyd's step: the ceiling), the known one (the scratch slots), DAS's (e dimensions, e the codes' width)
and DAS's untrained random start. Writes analyses/results/causal_abstraction.json and its RESULTS.md section.

    python -m analyses run causal_abstraction --budget paper
"""

from __future__ import annotations

import json
import sys

import torch

from analyses import _studies as S
from analyses.framework import measured
from analyses.framework.formatting import fixed
from interp import _arguments as arguments

PROG = "python -m analyses.studies.causal_abstraction.measure"
DEFAULT_OUT = S.HERE / "results" / "causal_abstraction.json"
PREDICTIONS = S.HERE / "predictions" / "causal_abstraction.json"
MODELS = ("main-onehot", "main-binary", "best")
# best: predictions of its own, committed after main-onehot and main-binary were scored
OWN_PREDICTIONS = {"best": S.HERE / "predictions" / "causal_abstraction_best.json"}
TRAIN_SEED, HELD_OUT_SEED, PAIRS, N = 20261208, 20261209, 256, 256
DAS_STEPS = 300
ALIGNMENTS = ("none", "known", "das", "random")


def _iia_record(result) -> dict:
    return {"label_iia": result.assignment_accuracy, "iia": result.accuracy, "standard_error": result.standard_error,
            "pairs": result.pairs, "skipped": result.skipped, "tol": result.tol}


def measure_model(name: str, pairs: int, das_steps: int) -> dict:
    """The four alignments' label IIA on the held-out pairs (module docstring)."""
    from interp.instruments import causal_abstraction as CA
    from interp.model.checkpoint import load_model
    from interp.task_config import TaskConfig

    model = load_model(name)
    config = TaskConfig(n=N, d=32, k=10)
    train = CA.sample_pairs(config, pairs, TRAIN_SEED, dtype=torch.float32)
    held_out = CA.sample_pairs(config, pairs, HELD_OUT_SEED, dtype=torch.float32)
    base = (held_out.base_points, held_out.base_centroids)
    known = CA.known_alignment(model, "assignment")
    width = model.config.scratch_width
    found = CA.das(model, "assignment", train, held_out, CA.DASSettings(dim=width, steps=das_steps, seed=0))
    tol = found.iia.tol
    return {
        "scratch_width": width,
        "none": _iia_record(CA.iia(model, *base, *base, known, tol=tol)),  # a task swapped with itself: no change
        "known": _iia_record(CA.iia(model, held_out.base_points, held_out.base_centroids, held_out.source_points,
                                    held_out.source_centroids, known, tol=tol)),
        "das": _iia_record(found.iia),
        "random": _iia_record(found.initial_iia),
        "das_overlap_with_scratch": found.overlap,
        "das_final_loss": found.final_losses[0],
    }


def results_section(record: dict) -> str:
    """The RESULTS.md section ``causal_abstraction`` from the committed record."""
    lines = [
        "## Where the learned models hold Lloyd's assignment (interchange interventions, DAS)",
        "",
        f"Command: `{record['command']}`  ",
        f"Budget: {record['pairs']} training and {record['pairs']} held-out base/source pairs of TaskConfig(n = {N}, "
        f"d = 32, k = 10) (seeds {TRAIN_SEED}, {HELD_OUT_SEED}), one step, fixed slot order; DAS "
        f"{record['das_steps']} Adam steps at `blocks.0.hook_points_resid_post`. Label IIA: the share of base points "
        "whose nearest output centroid agrees with Lloyd's counterfactual (the probe's comparable figure: 0.595). "
        "Predictions: `analyses/predictions/causal_abstraction.json`, committed before the run "
        "(docs/causal_abstraction.md).",
        "",
        "| model | none (ceiling) | known: scratch slots | DAS | DAS's random start | DAS subspace inside the slots |",
        "|---|---|---|---|---|---|",
    ]
    for name, figures in record["models"].items():
        cells = [fixed(figures[a]["label_iia"]) for a in ALIGNMENTS]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {fixed(figures['das_overlap_with_scratch'])} |")
    lines += ["", *measured.predictions_table(record, 3)]
    return "\n".join(lines) + "\n"


def section() -> str:
    return results_section(json.loads(DEFAULT_OUT.read_text()))


def main(argv: list[str] | None = None) -> dict:
    parser = measured.parser(PROG, __doc__, MODELS, DEFAULT_OUT)
    parser.add_argument("--pairs", type=arguments.count(10_000), default=PAIRS)
    parser.add_argument("--das-steps", type=arguments.count(100_000), default=DAS_STEPS)
    args = parser.parse_args(argv)
    return measured.run(args, PREDICTIONS, "causal_abstraction", "causal abstraction",
                        lambda name: measure_model(name, args.pairs, args.das_steps),
                        lambda figures, key: figures[key]["label_iia"], results_section,
                        {"pairs": args.pairs, "das_steps": args.das_steps}, OWN_PREDICTIONS)


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
