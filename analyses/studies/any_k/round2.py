"""The any-k study's second round: the shipped any-k or its fine-tune on tiled narrow tasks, with 2 or 5 Lloyd steps,
chosen on fresh validation tasks by the rule committed in analyses/predictions/any_k_round2.json, then scored once on
fresh test tasks (the (k, d) grid and the main configuration beside best, Lloyd and scikit-learn's KMeans).
Tasks, starts, scoring and the paired statistics are round one's (``analyses.studies.any_k.measure``).

    python -m analyses.studies.any_k.round2 --results-md      (a few minutes at one thread)
    python -m analyses.studies.any_k.round2 --stage ship      (the chosen weights and Lloyd steps as any-k)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import torch

from analyses import _studies as S
from analyses.framework import clustering, measured
from analyses.framework.preregistration import load_predictions, prediction_of, verdict
from analyses.studies.any_k import measure as M
from interp._checks import check_output_file
from interp._io import write_text_atomically

PREDICTIONS = S.HERE / "predictions" / "any_k_round2.json"
DEFAULT_OUT = S.HERE / "results" / "any_k_round2.json"
SECTION_KEY = "any_k_round2"
FINE_TUNED = M.ROOT / "runs" / "multik" / "any-k-ft.safetensors"
SHIPPED = M.ROOT / "interp" / "pretrained" / "any-k.safetensors"
MODELS = ("any-k", "any-k-ft")
LLOYD_STEPS = (2, 5)
VALIDATION_SEED, TEST_SEED, MAIN_TEST_SEEDS = 20270610, 20270630, (20270640, 20270650)


def candidates(models: dict, points, starts, seed: int) -> dict[str, np.ndarray]:
    """ln Phi (V,) of every candidate "<model>+L<l>", narrower tasks tiled: one run with 5 Lloyd steps per model."""
    out = {}
    for name, model in models.items():
        trajectory = M.learned(model, points, starts, seed, "tile", max(LLOYD_STEPS))
        for lloyd_steps in LLOYD_STEPS:
            out[f"{name}+L{lloyd_steps}"] = M.log_phi(points, trajectory[:, M.STEPS + lloyd_steps])
    return out


def choose(values: dict[str, np.ndarray]) -> dict:
    """The committed rule: lowest mean; within one SE of it, any-k before any-k-ft, then fewer Lloyd steps."""
    return M.choose(values, lambda name: (MODELS.index(name.split("+L")[0]), int(name.split("+L")[1])))


def run(out: Path, results_md: bool) -> dict:
    from interp.model.checkpoint import load_model

    head = measured.record_head(PREDICTIONS)
    head["predictions"] = load_predictions(PREDICTIONS)
    models = {"any-k": load_model(SHIPPED), "any-k-ft": load_model(FINE_TUNED)}
    best = load_model("best")
    values: dict[str, list] = {}
    for index, (k, d) in enumerate(M.cells()):
        seed = VALIDATION_SEED + 10 * index
        points, starts = M.draw(k, d, seed, M.B.validation_per_cell)
        for name, found in candidates(models, points, starts, seed).items():
            values.setdefault(name, []).append(found)
    values = {name: np.concatenate(parts) for name, parts in values.items()}
    choice = choose(values)
    name, lloyd_steps = choice["chosen"].split("+L")
    model, lloyd_steps = models[name], int(lloyd_steps)
    print(f"chosen {choice['chosen']}; test ...", flush=True)
    grid = []
    for index, (k, d) in enumerate(M.cells()):
        seed = TEST_SEED + 10 * index
        points, starts = M.draw(k, d, seed, M.B.test_per_cell)
        trajectory = M.learned(model, points, starts, seed, "tile", lloyd_steps)
        rows = {"learned": M.log_phi(points, trajectory[:, -1]),
                "learned_20": M.log_phi(points, trajectory[:, M.STEPS]), "lloyd": M.lloyd_values(points, starts),
                **M.sklearn_values(points, k, seed)}
        grid.append({"k": k, "d": d, "seed": seed, "values": {key: v.tolist() for key, v in rows.items()}})
    main: dict[str, list] = {}
    for seed in MAIN_TEST_SEEDS:
        points, starts = M.draw(M.MAIN_K, M.MAIN_D, seed, M.B.main_test_per_seed)
        rows = {"any_k": M.log_phi(points, M.learned(model, points, starts, seed, "tile", lloyd_steps)[:, -1]),
                "best": M.log_phi(points, M.learned(best, points, starts, seed, best.inference.narrow_tasks,
                                                    best.inference.lloyd_steps)[:, -1]),
                "lloyd": M.lloyd_values(points, starts), **M.sklearn_values(points, M.MAIN_K, seed)}
        for key, v in rows.items():
            main.setdefault(key, []).extend(v.tolist())
    record = {**head, "validation": {**choice, "values": {key: v.tolist() for key, v in values.items()}},
              "test": {"grid": grid, "main": main}}
    figures = M.figures({**record, "validation": {**record["validation"], "chosen": f"tile+L{lloyd_steps}",
                                                  "ships_as_best": False}})
    measured_values = {"chosen_is_ft": float(name == "any-k-ft"), "chosen_lloyd_steps": float(lloyd_steps),
                       "cells_below_lloyd": figures["measured"]["cells_below_lloyd"],
                       "cells_within_x1": figures["measured"]["cells_within_x1"],
                       "grid_goal_cells": float(sum(cell["goal_met"] for cell in figures["cells"])),
                       "main_minus_best": figures["measured"]["main_minus_best"]}
    record["figures"] = {"cells": figures["cells"], "main": figures["main"], "measured": measured_values}
    record["verdicts"] = {key: {"measured": measured_values[key],
                                "verdict": verdict(prediction_of(entry), measured_values[key])}
                          for key, entry in record["predictions"]["predictions"].items()}
    write_text_atomically(out, clustering.dumps(record))
    print(f"wrote {out}")
    if results_md:
        S.write_section(SECTION_KEY, results_section(record))
    return record


def results_section(record: dict) -> str:
    fig, validation = record["figures"], record["validation"]
    lines = [f"## One learned model for every k up to 16, second round (`{record['command']}`)", "",
             "The shipped any-k (round one) against any-k-ft, any-k fine-tuned on tasks of d' in 2..32 tiled "
             "(`interp train --init-from any-k.safetensors --d-least 2 --narrow-tasks tile --lr 0.001 --steps 3000`), "
             "each with 2 or 5 Lloyd steps after 20 shuffled steps, narrower tasks tiled; chosen on fresh validation "
             f"tasks by the rule committed first (`{record['predictions_file']}` "
             f"({record['prediction_commit']['commit'][:7]})), then tested once on fresh tasks.", "",
             "| candidate | validation mean ln Phi |", "|---|---|"]
    lines += [f"| {name} | {M._f(mean)} |" for name, mean in validation["means"].items()]
    met = sum(cell["goal_met"] for cell in fig["cells"])
    lines += ["", f"Chosen: **{validation['chosen']}**.", "", *M.grid_table(fig["cells"])]
    main = fig["main"]
    lines += ["", f"Goal (every cell below Lloyd and within {M.WITHIN_X1} of k-means++ x1): met in {met} of "
              f"{len(fig['cells'])} cells.", "",
              f"Main configuration ({len(record['test']['main']['any_k'])} tasks): chosen "
              f"{M._f(main['any_k']['mean'])} ± {M._f(main['any_k']['se'])}, best "
              f"{M._f(main['best']['mean'])} ± {M._f(main['best']['se'])}; the chosen minus:", "",
              *M.minus_table(main["any_k"]), "", *M.predictions_table(record)]
    return "\n".join(lines)


def section() -> str:
    return results_section(json.loads(DEFAULT_OUT.read_text()))


def ship(out: Path) -> Path | None:
    """The committed shipping rule: the chosen weights and Lloyd steps as any-k, unless any-k + L2 was chosen."""
    from interp.model.checkpoint import load_checkpoint, save_checkpoint

    record = json.loads(out.read_text())
    name, lloyd_steps = record["validation"]["chosen"].split("+L")
    if (name, int(lloyd_steps)) == ("any-k", 2):
        print("any-k stays as shipped")
        return None
    source = SHIPPED if name == "any-k" else FINE_TUNED
    tensors, meta = load_checkpoint(source)
    tensors = {key: tensor for key, tensor in tensors.items() if key.startswith("model.")}
    meta = {key: meta[key] for key in ("model_config", "train_config", "history", "step")}
    meta["source"] = (f"{M.TRAINING_COMMAND} (10,000 steps), then interp train --init-from any-k.safetensors "
                      "--d-least 2 --narrow-tasks tile --lr 0.001 --steps 3000" if name == "any-k-ft"
                      else f"{M.TRAINING_COMMAND} (10,000 steps)")
    meta["inference"] = dataclasses.asdict(_inference(int(lloyd_steps)))
    staged = SHIPPED.with_suffix(".staged")
    save_checkpoint(staged, tensors, meta)
    staged.replace(SHIPPED)
    print(f"wrote {SHIPPED}")
    return SHIPPED


def _inference(lloyd_steps: int):
    from interp.model.config import InferenceSettings

    return InferenceSettings(steps=M.STEPS, slot_order="shuffle", lloyd_steps=lloyd_steps, narrow_tasks="tile")


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(prog="python -m analyses.studies.any_k.round2", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=["all", "ship"], default="all")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--results-md", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = check_output_file(args.out, "--out")
    return ship(out) if args.stage == "ship" else run(out, args.results_md)


if __name__ == "__main__":
    main()
