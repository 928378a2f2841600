"""Length and shift generalisation of the one-hot model over seeds (paper 2 Fig. 7), decided by registered rules.

The checkpoints (the seeds of one model) are scored by the papers' evaluation protocol (``interp.evaluate``: unseen
tasks, T re-embedded model steps and T Lloyd iterations from the same random starts) under the protocols main
(in-distribution, n = --n), length (n in 128, 256, 1024, 2048) and shift (unequal weights, anisotropic, half and
double scale); or the ``evaluation.csv`` of an ``interp evaluate`` run on them is read (``--evaluation``). Each
(checkpoint, setting) becomes one row (``COLUMNS``: the checkpoint's training config and seed, the setting, the
model's and Lloyd's mean log objective after steps 0..T as JSON lists), and the claims of study ``generalisation`` of
``analyses.claims`` are decided on them. With ``--keep-rows`` the rows --out already holds for other checkpoints stay
(evaluated with the same --tasks, --n, --steps and --seed), so seeds trained at different times score together;
``--keep-rows`` without ``--checkpoints`` evaluates nothing and writes the section from --out's rows.

Writes analyses/results/studies/generalisation.csv (``--out``); --results-md puts the section into analyses/RESULTS.md.

Run: .venv/bin/python -m analyses.studies.main_seeds.generalisation --checkpoints \\
        'runs/studies/embedding_d32_k10/embedding=onehot_seed=*.safetensors' --tasks 320 --steps 20 --results-md \
        [--keep-rows]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from analyses import _studies as S
from analyses import claims as C
from analyses._shared import (
    checkpoint_status,
    evaluation_settings,
    held_rows,
    kept_rows,
    read_csv,
    scoring_settings,
    training_metadata,
    write_csv,
)
from analyses.framework import formatting
from analyses.studies.multistep.measure import checkpoints
from interp import _arguments as arguments
from interp._checks import InvalidInput, check_output_file

PROG = "python -m analyses.generalisation"
PROTOCOLS = ("main", "length", "shift")
INIT = "random"  # the papers' starts for the length and shift figures
COLUMNS = ("study", "name", "label", "seed", "steps", "status", "checkpoint", "protocol", "setting", "tasks", "n",
           "eval_seed", "model_curve", "lloyd_curve", "config")
SHOWN_STEPS = (1, 20)


def claim_rows(evaluation: list[dict], metadata: dict[str, dict], n: int, tasks: int,
               seed: int) -> list[dict]:
    """The rows of study ``generalisation`` (``COLUMNS``), one per (checkpoint, protocol, setting) of ``evaluation``
    (rows {checkpoint, protocol, setting, init, step, model, lloyd} as ``interp.evaluate.evaluate`` returns them or
    its evaluation.csv holds them; the random-start ones are read), in first-seen order. ``metadata``: each
    checkpoint's training metadata (``train_config``, ``step``); ``n``: the points per task of the main and shift
    settings (the length settings name theirs); ``tasks`` and ``seed``: the evaluation's tasks per setting and seed,
    written into each row. A row's ``config`` is its checkpoint's training config with the
    setting's ``protocol``, ``setting`` and ``eval_n``, so that ``analyses.claims`` selects cells by them."""
    groups: dict[tuple[str, str, str], dict[int, dict]] = {}
    for row in evaluation:
        if row["protocol"] not in PROTOCOLS:
            continue
        steps = groups.setdefault((str(row["checkpoint"]), str(row["protocol"]), str(row["setting"])), {})
        if row["init"] == INIT:
            steps[int(row["step"])] = row
    present = {key[0] for key in groups}
    if present != set(metadata):
        raise InvalidInput(f"the evaluation's checkpoints {sorted(present)} are not the ones given, "
                           f"{sorted(metadata)}: evaluate exactly the checkpoints given (--checkpoints, as typed)")
    out = []
    for (checkpoint, protocol, setting), by_step in groups.items():
        if sorted(by_step) != list(range(len(by_step))) or not by_step:
            raise InvalidInput(f"the evaluation of {checkpoint} ({protocol}, {setting}) lacks {INIT}-start rows for "
                               "every step 0..T: evaluate with --inits random first")
        meta = metadata[checkpoint]
        config = meta["train_config"]
        eval_n = int(setting.removeprefix("n=")) if protocol == "length" else n
        label = f"embedding={config['embedding']}_protocol={protocol}_setting={setting}"
        curve = [by_step[step] for step in range(len(by_step))]
        out.append({"study": "generalisation", "name": f"{label}_seed={config['seed']}", "label": label,
                    "seed": config["seed"], "steps": meta["step"], "status": checkpoint_status(meta),
                    "checkpoint": checkpoint,
                    "protocol": protocol, "setting": setting, "tasks": tasks, "n": n, "eval_seed": seed,
                    "model_curve": json.dumps([float(row["model"]) for row in curve]),
                    "lloyd_curve": json.dumps([float(row["lloyd"]) for row in curve]),
                    "config": json.dumps({**config, "protocol": protocol, "setting": setting, "eval_n": eval_n},
                                         sort_keys=True)})
    names = [row["name"] for row in out]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InvalidInput(f"several checkpoints give the rows {repeated[:3]}: give one checkpoint per embedding and "
                           "seed")
    return out


def evaluate_checkpoints(paths: list[str], tasks: int, steps: int, n: int, seed: int) -> list[dict]:
    """The evaluation rows of ``paths`` under the protocols main, length and shift (random starts, no scikit-learn
    baselines), as ``interp evaluate`` computes them."""
    from interp.evaluate import EvalConfig, evaluate
    from interp.model.checkpoint import load_model
    from interp.tasks import TaskConfig

    models = {path: load_model(path) for path in paths}
    first = next(iter(models.values())).config
    config = EvalConfig(n_tasks=tasks, steps=steps, seed=seed, inits=(INIT,), protocols=PROTOCOLS, baselines=False)
    with arguments.about("--n"):
        base = TaskConfig(n=n, d=first.d, k=first.k)
    return evaluate(models, base, config)


def section_lines(rows: list[dict], budget: str) -> list[str]:
    """The RESULTS.md section: per setting the seeds and the model's and Lloyd's objective after the shown steps
    (median [interquartile range] over seeds), then the claims of study ``generalisation``."""
    lines = [f"## Study `generalisation`: length and shift generalisation (`{S.program()}`)", "",
             f"Command: `{S.command_line()}`  ", f"Budget: {budget}  ",
             "Paper: paper 2 Fig. 7 (trained n = 512, d = 32, k = 10, tau = 0.1; length and shift generalise, double "
             "scale starts slightly worse and overtakes later)", "",
             "Mean log objective after step t, median [interquartile range] over seeds:", "",
             "| embedding | protocol | setting | seeds | " + " | ".join(
                 f"model t={t} | Lloyd t={t}" for t in SHOWN_STEPS) + " |", "|---|---|---|---|" + "---|---|" * 2]
    for label, seeds in S.by_label(rows).items():
        config = json.loads(seeds[0]["config"])
        curves = {column: [json.loads(row[column]) for row in seeds] for column in ("model_curve", "lloyd_curve")}
        cells = [formatting.band([curve[t] if t < len(curve) else float("nan") for curve in curves[column]])
                 for t in SHOWN_STEPS for column in ("model_curve", "lloyd_curve")]
        lines.append(f"| {config['embedding']} | {config['protocol']} | {config['setting']} | {len(seeds)} | "
                     + " | ".join(cells) + " |")
    return [*lines, "", C.RULES_LINE, "", *C.verdict_lines(C.decide_study("generalisation", rows))]


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", nargs="+", type=checkpoints, default=None, metavar="CHECKPOINT",
                        help="checkpoints written by training (paths or globs): the seeds (none with --keep-rows)")
    parser.add_argument("--evaluation", type=arguments.existing_folder, default=None, metavar="DIR",
                        help="read DIR/evaluation.csv of `interp evaluate --checkpoint <the same checkpoints> "
                        "--protocols main length shift --inits random` instead of evaluating")
    parser.add_argument("--tasks", type=arguments.positive_int, default=320,
                        help="unseen tasks per setting (with --evaluation: its number, written into the rows)")
    parser.add_argument("--steps", type=arguments.positive_int, default=20)
    parser.add_argument("--n", type=arguments.positive_int, default=512,
                        help="points per task of the main and shift settings (with --evaluation: its --n)")
    parser.add_argument("--seed", type=arguments.seed, default=20261130,
                        help="the evaluation tasks' seed (with --evaluation: its seed)")
    parser.add_argument("--threads", type=arguments.threads, default=2)
    parser.add_argument("--out", default=str(S.HERE / "results" / "studies" / "generalisation.csv"), metavar="CSV",
                        help="the rows (default analyses/results/studies/generalisation.csv)")
    parser.add_argument("--results-md", nargs="?", const=str(S.RESULTS_MD), default=None, metavar="PATH",
                        help="put the section into analyses/RESULTS.md (or PATH)")
    parser.add_argument("--keep-rows", action="store_true",
                        help="keep the rows --out holds for other checkpoints (evaluated with the same --tasks, --n, "
                        "--steps and --seed); the section reads them all. Without --checkpoints: evaluate nothing, "
                        "write the section from --out's rows")
    args = parser.parse_args(argv)
    if not args.checkpoints and not args.keep_rows:
        raise InvalidInput("--checkpoints: give the checkpoints to evaluate (or --keep-rows alone to write the "
                           "section from the rows of --out)")
    paths = [path for group in args.checkpoints or [] for path in group]
    check_output_file(args.out, "--out", devices=False)
    if not paths and not Path(args.out).is_file():
        raise InvalidInput(f"--keep-rows without --checkpoints writes the section from the rows of --out {args.out}, "
                           "and there is no such file")
    if args.keep_rows and args.evaluation:
        raise InvalidInput(f"--evaluation {args.evaluation} with --keep-rows: an evaluation folder does not record its "
                           "tasks and seed, so its rows cannot be checked against the kept ones; evaluate here instead")
    if args.keep_rows and paths:  # refused before any evaluation
        held_rows(args.out, COLUMNS, scoring_settings(args.tasks, args.n, args.steps, args.seed), "--out")
    if args.results_md:
        check_output_file(args.results_md, "--results-md")
        if Path(args.results_md).resolve() == Path(args.out).resolve():
            raise InvalidInput(f"--out {args.out} is also --results-md: give each a path of its own")
    metadata = {path: training_metadata(path, "--checkpoints") for path in paths}
    evaluation, budget = [], None  # without --evaluation the budget is the rows' own evaluation settings
    if args.evaluation and paths:
        csv_path = args.evaluation / "evaluation.csv"
        if not csv_path.is_file():
            raise InvalidInput(f"--evaluation {args.evaluation} holds no evaluation.csv (written by interp evaluate)")
        evaluation = read_csv(csv_path)
        budget = f"the evaluation in {args.evaluation}, n = {args.n} (length: 128 to 2048), random starts"
    elif paths:
        import torch

        torch.set_num_threads(args.threads)
        evaluation = evaluate_checkpoints(paths, args.tasks, args.steps, args.n, args.seed)
    rows = claim_rows(evaluation, metadata, args.n, args.tasks, args.seed)
    if args.keep_rows:
        rows = kept_rows(args.out, rows, COLUMNS, "--out")
    if not rows:
        raise InvalidInput(f"--out {args.out} holds no row: give --checkpoints to evaluate")
    if budget is None:
        settings = evaluation_settings(rows[0])
        budget = (f"{settings['tasks']} unseen tasks per setting, n = {settings['n']} (length: 128 to 2048), "
                  f"{settings['T']} steps, random starts")
    budget += f"; checkpoints {', '.join(dict.fromkeys(Path(row['checkpoint']).name for row in rows))}"
    write_csv(rows, COLUMNS, args.out)
    text = "\n".join(section_lines(rows, budget)) + "\n"
    print(text)
    if args.results_md:
        S.write_section("generalisation", text, Path(args.results_md))
    return text


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
