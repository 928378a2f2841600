"""One learned model for every k <= 16: how it fills a narrower task's coordinates and how many Lloyd steps follow
its own, chosen on validation tasks by the rule committed in analyses/predictions/any_k.json, then scored once on a
grid of (k, d) cells and on the main configuration beside best, Lloyd and scikit-learn's KMeans, and on the
evaluation protocol per k.

Tasks: Gaussian mixtures (normal family, scale 0.1, n = 512) drawn as ``interp evaluate`` draws them (float32 from
the seed, ``interp.evaluate.evaluation_tasks``), random starts (a uniform random k-subset, seed + 1), slot orders from
seed + 2; every algorithm scored in float64 (ln Phi). Cells: k in ``KS`` x d in ``DS``; cell c's seed is base + 10 c.

Stages (``--stage``): ``all`` runs ``validation`` (384 grid tasks: the candidates; 320 main-configuration tasks:
any-k in the chosen settings against best), ``test`` (1,536 grid tasks and 640 main-configuration tasks, once),
``protocol`` (``interp.evaluate`` per k at d = 32: main, length, shift and family, 64 tasks per setting) and writes
the record; ``ship`` writes the chosen settings into the any-k checkpoint's ``inference`` and copies it to
interp/pretrained (as best when the shipping rule says so, else as any-k).

    python -m analyses run any_k --budget paper      (about ten minutes at one thread)
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from analyses import _studies as S
from analyses.framework import clustering, measured
from analyses.framework.preregistration import load_predictions, prediction_of, verdict
from interp._checks import check_output_file
from interp._io import write_text_atomically

PROG = "python -m analyses.studies.any_k.measure"
ROOT = S.HERE.parent
PREDICTIONS = S.HERE / "predictions" / "any_k.json"
DEFAULT_OUT = S.HERE / "results" / "any_k.json"
TRAINED = ROOT / "runs" / "multik" / "any-k.safetensors"
SECTION_KEY = "any_k"
N, MAIN_D, MAIN_K = 512, 32, 10


@dataclass(frozen=True)
class Budget:
    """The study's sizes and seeds: the registered ones, or a smoke run's (``--quick``: other seeds, a few tasks)."""

    ks: tuple[int, ...] = (2, 4, 7, 10, 13, 16)
    ds: tuple[int, ...] = (2, 8, 16, 32)
    validation_seed: int = 20270510
    main_validation_seed: int = 20270520
    test_seed: int = 20270530
    main_test_seeds: tuple[int, ...] = (20270540, 20270550)
    validation_per_cell: int = 16
    test_per_cell: int = 64
    main_validation: int = 320
    main_test_per_seed: int = 320
    protocol_tasks: int = 64
    attempt_tasks: int = 64


PAPER = Budget()
QUICK = Budget(ks=(2, 16), ds=(2, 32), validation_seed=1, main_validation_seed=2, test_seed=3, main_test_seeds=(4,),
               validation_per_cell=3, test_per_cell=3, main_validation=4, main_test_per_seed=4, protocol_tasks=2,
               attempt_tasks=2)
B = PAPER  # the budget of this run (main sets it)
NARROW, LLOYD_STEPS = ("pad", "tile"), (0, 1, 2)
STEPS, CHUNK, WIN_SES, WITHIN_X1 = 20, 64, 2.0, 0.02
DECIMALS = 6  # per-task ln Phi as recorded (and scored): the record stays small


# ----- tasks and runs ------------------------------------------------------------------------------------------------
def cells() -> list[tuple[int, int]]:
    return [(k, d) for k in B.ks for d in B.ds]


def draw(k: int, d: int, seed: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` tasks (count, n, d) and random starts (count, k, d) in float64, drawn as ``interp evaluate`` does."""
    return clustering.draw(N, d, k, seed, count)


def log_phi(points: torch.Tensor, centroids: torch.Tensor) -> np.ndarray:
    """ln Phi (V,), float64, to DECIMALS decimals (as recorded and scored)."""
    return np.round(clustering.log_phi(points, centroids), DECIMALS)


@torch.no_grad()
def learned(model, points, starts, seed: int, narrow: str, lloyd_steps: int) -> torch.Tensor:
    """The centroid trajectories (V, 20 + L + 1, k, d) of ``interp.hybrid.hybrid`` with ``narrow`` and L Lloyd steps."""
    import dataclasses

    from interp.hybrid import hybrid

    model.eval()
    model.inference = dataclasses.replace(model.inference, narrow_tasks=narrow)
    orders = torch.Generator().manual_seed(seed + 2)
    return torch.cat([hybrid(model, points[i : i + CHUNK], starts[i : i + CHUNK], steps=STEPS,
                             lloyd_steps=lloyd_steps, slot_order="shuffle", generator=orders).centroid_trajectory
                      for i in range(0, len(points), CHUNK)])


def candidates(model, points, starts, seed: int) -> dict[str, np.ndarray]:
    """ln Phi (V,) of every candidate "<narrow>+L<l>": one run with the most Lloyd steps per narrowing."""
    out = {}
    for narrow in NARROW:
        trajectory = learned(model, points, starts, seed, narrow, max(LLOYD_STEPS))
        for lloyd_steps in LLOYD_STEPS:
            out[f"{narrow}+L{lloyd_steps}"] = log_phi(points, trajectory[:, STEPS + lloyd_steps])
    return out


def lloyd_values(points, starts) -> np.ndarray:
    return log_phi(points, clustering.lloyd_centroids(points, starts, STEPS))


def sklearn_values(points, k: int, seed: int) -> dict[str, np.ndarray]:
    """ln Phi of scikit-learn's KMeans (k-means++, n_init 1 and 10, to convergence) in a process without torch."""
    from interp.compare import sklearn_in_fresh_process

    found = sklearn_in_fresh_process(points.numpy(), k, seed, n_inits=(1, 10), rounds=1, threads=1)
    return {f"kmeanspp_x{n}": log_phi(points, torch.from_numpy(found["centres"][n])) for n in (1, 10)}


def paired(a: np.ndarray, b: np.ndarray) -> dict:
    """a - b per task: mean, its standard error, median and the share of tasks where a is lower."""
    diff = np.asarray(a) - np.asarray(b)
    return {"mean": float(diff.mean()), "se": float(diff.std(ddof=1) / math.sqrt(len(diff))),
            "median": float(np.median(diff)), "won": float((diff < 0).mean())}


# ----- the committed rules -------------------------------------------------------------------------------------------
def choose(values: dict[str, np.ndarray], preference=None) -> dict:
    """The selection rule of the predictions file: lowest mean; among the candidates within one paired SE of it, the
    first by ``preference`` (a sort key on names; round one: fewest Lloyd steps, then pad)."""
    if preference is None:
        preference = lambda name: (int(name.split("+L")[1]), NARROW.index(name.split("+")[0]))  # noqa: E731
    means = {name: float(np.mean(v)) for name, v in values.items()}
    lowest = min(means, key=means.get)
    tied = [name for name in values if paired(values[name], values[lowest])["mean"]
            <= paired(values[name], values[lowest])["se"]]
    return {"means": means, "lowest": lowest, "within_one_se": tied, "chosen": min(tied, key=preference)}


def settings_of(name: str) -> tuple[str, int]:
    narrow, lloyd_steps = name.split("+L")
    return narrow, int(lloyd_steps)


# ----- stages --------------------------------------------------------------------------------------------------------
def stage_validation(model, best) -> dict:
    values: dict[str, list] = {}
    for index, (k, d) in enumerate(cells()):
        seed = B.validation_seed + 10 * index
        points, starts = draw(k, d, seed, B.validation_per_cell)
        for name, found in candidates(model, points, starts, seed).items():
            values.setdefault(name, []).append(found)
    values = {name: np.concatenate(parts) for name, parts in values.items()}
    choice = choose(values)
    narrow, lloyd_steps = settings_of(choice["chosen"])
    points, starts = draw(MAIN_K, MAIN_D, B.main_validation_seed, B.main_validation)
    any_k = log_phi(points, learned(model, points, starts, B.main_validation_seed, narrow, lloyd_steps)[:, -1])
    shipped = log_phi(points, learned(best, points, starts, B.main_validation_seed, best.inference.narrow_tasks,
                                      best.inference.lloyd_steps)[:, -1])
    versus = paired(any_k, shipped)
    return {**choice, "main_any_k_minus_best": versus,
            "ships_as_best": bool(versus["mean"] < -WIN_SES * versus["se"]),
            "values": {name: v.tolist() for name, v in values.items()}}


def stage_test(model, best, chosen: str) -> dict:
    narrow, lloyd_steps = settings_of(chosen)
    grid = []
    for index, (k, d) in enumerate(cells()):
        seed = B.test_seed + 10 * index
        points, starts = draw(k, d, seed, B.test_per_cell)
        trajectory = learned(model, points, starts, seed, narrow, lloyd_steps)
        rows = {"learned": log_phi(points, trajectory[:, -1]), "learned_20": log_phi(points, trajectory[:, STEPS]),
                "lloyd": lloyd_values(points, starts), **sklearn_values(points, k, seed)}
        grid.append({"k": k, "d": d, "seed": seed, "values": {name: v.tolist() for name, v in rows.items()}})
        print(f"  k={k:2d} d={d:2d}: learned {np.mean(rows['learned']):.4f} lloyd {np.mean(rows['lloyd']):.4f} "
              f"x1 {np.mean(rows['kmeanspp_x1']):.4f}", flush=True)
    main = {}
    for seed in B.main_test_seeds:
        points, starts = draw(MAIN_K, MAIN_D, seed, B.main_test_per_seed)
        rows = {"any_k": log_phi(points, learned(model, points, starts, seed, narrow, lloyd_steps)[:, -1]),
                "best": log_phi(points, learned(best, points, starts, seed, best.inference.narrow_tasks,
                                                best.inference.lloyd_steps)[:, -1]),
                "lloyd": lloyd_values(points, starts), **sklearn_values(points, MAIN_K, seed)}
        for name, v in rows.items():
            main.setdefault(name, []).extend(v.tolist())
    return {"grid": grid, "main": main}


def stage_protocol(model, chosen: str) -> list[dict]:
    """``interp.evaluate.evaluate`` per k at d = 32 in the chosen settings (no scikit-learn columns)."""
    import dataclasses

    from interp.evaluate import EvalConfig, evaluate
    from interp.tasks import TaskConfig

    narrow, lloyd_steps = settings_of(chosen)
    model.inference = dataclasses.replace(model.inference, narrow_tasks=narrow, lloyd_steps=lloyd_steps)
    rows = []
    for k in B.ks:
        config = EvalConfig(n_tasks=B.protocol_tasks, steps=STEPS, inits=("random",), baselines=False, chunk=16,
                            protocols=("main", "length", "shift", "family"), slot_order="shuffle")
        for row in evaluate({"any-k": model}, TaskConfig(n=N, d=MAIN_D, k=k), config):
            if row["step"] == STEPS + lloyd_steps:
                rows.append({"k": k, "protocol": row["protocol"], "setting": row["setting"],
                             "learned": row["model"], "lloyd": row["lloyd"]})
    return rows


# ----- figures, verdicts, section ------------------------------------------------------------------------------------
def figures(record: dict) -> dict:
    cells_out = []
    for cell in record["test"]["grid"]:
        v = {name: np.asarray(x) for name, x in cell["values"].items()}
        vs_lloyd, vs_x1 = paired(v["learned"], v["lloyd"]), paired(v["learned"], v["kmeanspp_x1"])
        cells_out.append({"k": cell["k"], "d": cell["d"], "learned": float(v["learned"].mean()),
                          "learned_20": float(v["learned_20"].mean()), "lloyd": float(v["lloyd"].mean()),
                          "kmeanspp_x1": float(v["kmeanspp_x1"].mean()),
                          "kmeanspp_x10": float(v["kmeanspp_x10"].mean()),
                          "minus_lloyd": vs_lloyd, "minus_x1": vs_x1,
                          "goal_met": vs_lloyd["mean"] < 0 and vs_x1["mean"] <= WITHIN_X1})
    main = {name: np.asarray(x) for name, x in record["test"]["main"].items()}
    main_out = {name: {"mean": float(v.mean()), "se": float(v.std(ddof=1) / math.sqrt(len(v)))}
                for name, v in main.items()}
    for reference in ("best", "lloyd", "kmeanspp_x1", "kmeanspp_x10"):
        main_out["any_k"][f"minus_{reference}"] = paired(main["any_k"], main[reference])
    narrow, lloyd_steps = settings_of(record["validation"]["chosen"])
    measured_values = {"chosen_narrow_tasks_is_tile": float(narrow == "tile"), "chosen_lloyd_steps": float(lloyd_steps),
                       "cells_below_lloyd": float(sum(c["minus_lloyd"]["mean"] < 0 for c in cells_out)),
                       "cells_within_x1": float(sum(c["minus_x1"]["mean"] <= WITHIN_X1 for c in cells_out)),
                       "main_minus_best": main_out["any_k"]["minus_best"]["mean"],
                       "ships_as_best": float(record["validation"]["ships_as_best"])}
    return {"cells": cells_out, "main": main_out, "measured": measured_values}


def decide(record: dict) -> dict:
    return {key: {"measured": record["figures"]["measured"][key],
                  "verdict": verdict(prediction_of(entry), record["figures"]["measured"][key])}
            for key, entry in record["predictions"]["predictions"].items()}


def _f(value: float, digits: int = 4, sign: bool = False) -> str:
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def grid_table(cells: list[dict]) -> list[str]:
    """The test grid: per cell the means, the paired differences to Lloyd and to x1 (± SE, share won), the goal."""
    lines = ["| k | d | learned | 20 steps alone | Lloyd | k-means++ x1 | x10 | learned - Lloyd | won | "
             "learned - x1 | won | goal |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        lines.append(f"| {c['k']} | {c['d']} | {_f(c['learned'])} | {_f(c['learned_20'])} | {_f(c['lloyd'])} | "
                     f"{_f(c['kmeanspp_x1'])} | {_f(c['kmeanspp_x10'])} | "
                     f"{_f(c['minus_lloyd']['mean'], sign=True)} ± {_f(c['minus_lloyd']['se'])} | "
                     f"{c['minus_lloyd']['won']:.2f} | {_f(c['minus_x1']['mean'], sign=True)} ± "
                     f"{_f(c['minus_x1']['se'])} | {c['minus_x1']['won']:.2f} | "
                     f"{'met' if c['goal_met'] else 'missed'} |")
    return lines


def minus_table(figures: dict) -> list[str]:
    """The main configuration: the learned model minus each reference, paired per task."""
    lines = ["| reference | mean ± SE | median | share won |", "|---|---|---|---|"]
    for reference in ("best", "lloyd", "kmeanspp_x1", "kmeanspp_x10"):
        p = figures[f"minus_{reference}"]
        lines.append(f"| {reference} | {_f(p['mean'], sign=True)} ± {_f(p['se'])} | {_f(p['median'], sign=True)} | "
                     f"{p['won']:.2f} |")
    return lines


def predictions_table(record: dict) -> list[str]:
    lines = ["| prediction | predicted | measured | verdict |", "|---|---|---|---|"]
    for key, entry in record["predictions"]["predictions"].items():
        found = record["verdicts"][key]
        lines.append(f"| {key} | {entry['kind'].replace('_', ' ')} {entry['value']:g} (tolerance "
                     f"{entry['tolerance']:g}) | {found['measured']:.4g} | {found['verdict']} |")
    return lines


def results_section(record: dict) -> str:
    fig, validation = record["figures"], record["validation"]
    narrow, lloyd_steps = settings_of(validation["chosen"])
    met = sum(cell["goal_met"] for cell in fig["cells"])
    lines = [f"## One learned model for every k up to 16 (`{record['command']}`)", "",
             f"A one-hot model with 16 codes trained on tasks of every k' from 2 to 16 (d = 32, n = 512; "
             f"`{record['training']['command']}`, {record['training']['steps']:,} steps, "
             f"{record['training']['wall_minutes']:.0f} minutes at one thread; `interp.training.task_mix`), its "
             f"settings chosen on validation tasks by the rule committed first (`{record['predictions_file']}` "
             f"({record['prediction_commit']['commit'][:7]})).", "",
             "Validation (384 grid tasks; mean ln Phi, 20 shuffled steps from random starts, then L Lloyd steps):",
             "", "| candidate | mean ln Phi |", "|---|---|"]
    lines += [f"| {name} | {_f(mean)} |" for name, mean in validation["means"].items()]
    versus = validation["main_any_k_minus_best"]
    lines += ["", f"Chosen: **{validation['chosen']}** (narrower tasks {WORDS[narrow]}, {lloyd_steps} Lloyd step(s)). "
              f"On the 320 main-configuration validation tasks any-k minus best is {_f(versus['mean'], sign=True)} "
              f"± {_f(versus['se'])}: "
              + ("**any-k ships as best**." if validation["ships_as_best"] else "best stays the default; any-k ships "
                 "beside it as `any-k`."), "",
              f"Test, per cell ({B.test_per_cell} tasks each; the paired differences per task, ± standard error, and "
              "the share of tasks where the learned model is lower):", "",
              *grid_table(fig["cells"])]
    main = fig["main"]
    lines += ["", f"Goal (every cell below Lloyd and within {WITHIN_X1} of k-means++ x1): met in {met} of "
              f"{len(fig['cells'])} cells.", "",
              f"Main configuration ({len(B.main_test_seeds) * B.main_test_per_seed} tasks, "
              f"{len(B.main_test_seeds)} sampler "
              "seed(s)): any-k "
              f"{_f(main['any_k']['mean'])} ± {_f(main['any_k']['se'])}, best {_f(main['best']['mean'])} ± "
              f"{_f(main['best']['se'])}, Lloyd {_f(main['lloyd']['mean'])}, k-means++ x1 "
              f"{_f(main['kmeanspp_x1']['mean'])}, x10 {_f(main['kmeanspp_x10']['mean'])}; any-k minus:", "",
              *minus_table(main["any_k"])]
    lines += ["", f"Evaluation protocol per k (d = 32, {B.protocol_tasks} tasks per setting, chosen settings; mean ln "
              "Phi, learned / Lloyd from the same random starts):", "",
              "| setting | " + " | ".join(f"k = {k}" for k in B.ks) + " |", "|---|" + "---|" * len(B.ks)]
    settings = list(dict.fromkeys((row["protocol"], row["setting"]) for row in record["protocol"]))
    for protocol, setting in settings:
        cells_text = []
        for k in B.ks:
            row = next(r for r in record["protocol"] if (r["k"], r["protocol"], r["setting"]) == (k, protocol, setting))
            cells_text.append(f"{row['learned']:.3f} / {row['lloyd']:.3f}")
        lines.append(f"| {protocol}: {setting} | " + " | ".join(cells_text) + " |")
    lines += ["", *predictions_table(record)]
    lines += ["", f"Every training attempt ({B.attempt_tasks} tasks per cell, seed {ATTEMPT_SEED} + 10 x cell; 20 "
              "learned steps then one Lloyd step, narrower tasks filled as the run was trained; mean ln Phi, learned "
              "/ Lloyd from the same random starts):", "",
              "| attempt | what it changed | steps | " + " | ".join(f"k = {k}, d = {d}" for k, d in ATTEMPT_CELLS)
              + " |", "|---|---|---|" + "---|" * len(ATTEMPT_CELLS)]
    for attempt in record["attempts"]:
        lines.append(f"| {attempt['name']} | {attempt['description']} | {attempt['steps']:,} | "
                     + " | ".join(f"{c['learned']:.3f} / {c['lloyd']:.3f}" if c["learned"] == c["learned"]
                                  else f"(k beyond the model's) / {c['lloyd']:.3f}" for c in attempt["cells"]) + " |")
    return "\n".join(lines)


def section() -> str:
    return results_section(json.loads(DEFAULT_OUT.read_text()))


# ----- the runner ----------------------------------------------------------------------------------------------------
def training_record(path: Path, wall_minutes: float) -> dict:
    from interp.model.checkpoint import read_header

    meta, _ = read_header(path)
    return {"command": TRAINING_COMMAND, "steps": meta["step"], "wall_minutes": wall_minutes,
            "final_relative_objective": meta["history"][-1]["relative_objective"]}


TRAINING_COMMAND = ("interp train --out any-k.safetensors --d 32 --k 16 --n 512 --k-least 2 --slot-order shuffle "
                    "--plateau-patience 20")
WORDS = {"pad": "zero-padded", "tile": "tiled"}
# every run trained toward this model, in order (runs/multik/<name>.safetensors, git-ignored): what it changed from
# the papers' recipe besides 16 codes, shuffled slots and tasks of many sizes, and how narrower tasks filled d
ATTEMPTS = (
    ("attempt1-local-paper", "n' 64..2048, d' 1..32 zero-padded, attn_xx the identity (O(n)); learning rate halved "
     "to 8e-5 by the plateau schedule", "pad"),
    ("full-shuffle", "full attn_xx, n' 64..512, d' 1..32 zero-padded", "pad"),
    ("rel-shuffle", "as full-shuffle, each task's loss divided by its one-step Lloyd objective (unstable)", "pad"),
    ("scaled-shuffle", "as full-shuffle, a task of d' coordinates scaled by sqrt(32 / d') before padding (scored "
     "padded, without the scaling)", "pad"),
    ("e2-d", "k = 10 only, d' 1..32 scaled as scaled-shuffle, plateau patience 20 (scored padded)", "pad"),
    ("tiled", "d' 1..32 tiled (coordinates repeated to 32), plateau patience 20", "tile"),
    ("attempt-k1", "d = 32 only, k' 1..16, n' 64..512, plateau patience 20", "tile"),
    ("any-k-ft", "after this study, not a candidate: any-k fine-tuned on d' 2..32 tiled, lr 0.001, 3,000 steps "
     "(`interp train --init-from any-k.safetensors --d-least 2 --narrow-tasks tile --lr 0.001 --steps 3000`)", "tile"),
)
ATTEMPT_CELLS, ATTEMPT_SEED = ((10, 32), (4, 8), (16, 2)), 20270560


def stage_attempts(folder: Path) -> list[dict]:
    """Each attempt's checkpoint in ``folder`` on ``ATTEMPT_CELLS``: 20 steps then one Lloyd step, against Lloyd."""
    from interp.model.checkpoint import load_model, read_header

    found = []
    for name, description, narrow in ATTEMPTS:
        path = folder / f"{name}.safetensors"
        model, steps = load_model(path), read_header(path)[0]["step"]
        scored = []
        for index, (k, d) in enumerate(ATTEMPT_CELLS):
            seed = ATTEMPT_SEED + 10 * index
            points, starts = draw(k, d, seed, B.attempt_tasks)
            if k > model.config.k:
                scored.append({"k": k, "d": d, "learned": math.nan,
                               "lloyd": float(lloyd_values(points, starts).mean())})
                continue
            trajectory = learned(model, points, starts, seed, narrow, 1)
            scored.append({"k": k, "d": d, "learned": float(log_phi(points, trajectory[:, -1]).mean()),
                           "lloyd": float(lloyd_values(points, starts).mean())})
        found.append({"name": name, "description": description, "steps": steps, "narrow_tasks": narrow,
                      "cells": scored})
    return found


def run_all(out: Path, model_path: Path, results_md: bool, training_minutes: float) -> dict:
    from interp.model.checkpoint import load_model

    predictions = load_predictions(PREDICTIONS)
    head = measured.record_head(PREDICTIONS)
    head["predictions"] = predictions
    model, best = load_model(model_path), load_model("best")
    print("validation ...", flush=True)
    validation = stage_validation(model, best)
    print(f"chosen {validation['chosen']}; test ...", flush=True)
    test = stage_test(model, best, validation["chosen"])
    print("protocol ...", flush=True)
    protocol = stage_protocol(model, validation["chosen"])
    print("attempts ...", flush=True)
    attempts = stage_attempts(model_path.parent)
    record = {**head, "training": training_record(model_path, training_minutes), "validation": validation,
              "test": test, "protocol": protocol, "attempts": attempts}
    record["figures"] = figures(record)
    record["verdicts"] = decide(record)
    write_text_atomically(out, clustering.dumps(record))
    print(f"wrote {out}")
    if results_md:
        S.write_section(SECTION_KEY, results_section(record))
    return record


def ship(out: Path, model_path: Path) -> Path:
    """The chosen settings into the checkpoint's ``inference``, copied to interp/pretrained as best or any-k."""
    from interp.model.checkpoint import load_checkpoint, save_checkpoint

    record = json.loads(out.read_text())
    narrow, lloyd_steps = settings_of(record["validation"]["chosen"])
    tensors, meta = load_checkpoint(model_path)
    tensors = {name: tensor for name, tensor in tensors.items() if name.startswith("model.")}  # no optimiser state
    meta = {key: meta[key] for key in ("model_config", "train_config", "history", "step")}
    meta["source"] = f"{record['training']['command']} ({record['training']['steps']:,} steps)"
    meta["inference"] = {"steps": STEPS, "slot_order": "shuffle", "lloyd_steps": lloyd_steps, "narrow_tasks": narrow}
    name = "best" if record["validation"]["ships_as_best"] else "any-k"
    target = ROOT / "interp" / "pretrained" / f"{name}.safetensors"
    staged = target.with_suffix(".staged")
    save_checkpoint(staged, tensors, meta)
    shutil.move(staged, target)
    print(f"wrote {target}")
    return target


def main(argv: list[str] | None = None) -> dict | Path:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=["all", "ship"], default="all")
    parser.add_argument("--model", default=str(TRAINED), help="the trained any-k checkpoint")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--results-md", action="store_true")
    parser.add_argument("--training-minutes", type=float, default=math.nan)
    parser.add_argument("--quick", action="store_true", help="a smoke run: other seeds, a few tasks per cell")
    args = parser.parse_args(argv)
    global B
    B = QUICK if args.quick else PAPER
    torch.set_num_threads(1)
    out = check_output_file(args.out, "--out")
    if args.stage == "ship":
        return ship(out, Path(args.model))
    return run_all(out, Path(args.model), args.results_md, args.training_minutes)


if __name__ == "__main__":
    main()
