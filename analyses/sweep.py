"""Command line for ``interp.training.sweep``: a resumable sweep over any TrainConfig field with seeds.

One CSV per study (one row per seed, with its 20-step curves, loss gap and transfer scores); finished rows are
skipped and checkpoints resumed on a re-run. A grid point's seeds train one by one (``--no-batch-seeds`` is
accepted for old command lines and changes nothing); ``--backend ray`` runs the grid points as Ray tasks (the
cluster in RAY_ADDRESS, else a local Ray instance).

Run: .venv/bin/python -m analyses.sweep --study lr --field lr=0.001,0.01,0.1,1 --seeds 0 1 \
        --steps 500 --set d=4 k=6 n=128 --out runs/sweeps
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

from interp import _arguments as arguments
from interp._checks import InvalidInput, check_output_file, check_output_folder

PROG = "python -m analyses.sweep"
DEFAULT_OUT = "runs/sweeps"  # git-ignored, beside the command's working folder
RESUMABLE = "finished rows stay in the CSV and checkpoints resume: run the same command to continue"


def _optional_number(text: str) -> float | None:
    if text.lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or none, got {text!r}") from None


READERS = {"int": arguments.integer, "float": arguments.number, "bool": arguments.boolean, "str": str,
           "float | None": _optional_number}  # TrainConfig's field annotations -> how a value is read


def convert(field: str, text: str):
    """A TrainConfig field's value from its command-line text, read by the field's type; an unknown field or a text
    that is not of that type is refused (ranges are TrainConfig's to check)."""
    from interp.training.config import TrainConfig

    kinds = {f.name: f.type for f in dataclasses.fields(TrainConfig)}
    if field == "seed":
        raise argparse.ArgumentTypeError("seed is set by --seeds")
    if field not in kinds:
        known = ", ".join(name for name in kinds if name != "seed")
        raise argparse.ArgumentTypeError(f"unknown training config field {field!r}; known: {known}")
    try:
        return READERS[kinds[field]](text)
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"{field}={text}: {error}") from None


def _split(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected NAME=value, got {text!r}")
    return name, value


def assignment(text: str) -> tuple[str, object]:
    """An argparse type: ``NAME=value``, one TrainConfig field and its value."""
    name, value = _split(text)
    return name, convert(name, value)


def grid_assignment(text: str) -> tuple[str, list]:
    """An argparse type: ``NAME=v1,v2,...``, one TrainConfig field and its grid values."""
    name, values = _split(text)
    return name, [convert(name, value) for value in values.split(",")]


def assignments(pairs: list[tuple[str, object]], flag: str) -> dict:
    """The (name, value) pairs of ``flag`` as a dict; a field named twice is refused."""
    out: dict = {}
    for name, value in pairs:
        if name in out:
            raise InvalidInput(f"{flag} names a field twice ({name}); give each field once")
        out[name] = value
    return out


def add_set_argument(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--set", nargs="*", default=[], type=assignment, metavar="NAME=value", help=help)


def add_run_arguments(parser: argparse.ArgumentParser, study: bool = False) -> None:
    """The options of a training run; ``study``: also ``--train-only``, for the modules that write a study's
    training summary and section after training."""
    parser.add_argument("--seeds", nargs="+", type=arguments.seed, default=[0])
    parser.add_argument("--steps", type=arguments.positive_int, default=500)
    parser.add_argument("--eval-tasks", type=arguments.positive_int, default=64)
    parser.add_argument("--eval-steps", type=arguments.positive_int, default=20)
    parser.add_argument("--workers", type=arguments.positive_int, default=None)
    parser.add_argument("--backend", choices=("local", "ray"), default="local")
    parser.add_argument("--no-batch-seeds", action="store_true",
                        help="accepted for old command lines: seeds always train one by one")
    parser.add_argument("--out", default=DEFAULT_OUT, help="CSV folder (default runs/sweeps, git-ignored)")
    parser.add_argument("--checkpoints", default=None, help="checkpoint folder (default OUT/checkpoints/STUDY)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--score-only", action="store_true",
                      help="train nothing: score the rows already in the CSV (a grid point without rows stays empty)")
    what.add_argument("--plan", action="store_true",
                      help="train and score nothing: print the seed runs whose rows the CSV still lacks")
    if study:
        what.add_argument("--train-only", action="store_true",
                          help="train the missing seed runs and write only their rows (CSV, training curves): the "
                          "study's training summary and section are left as they are, for a later --score-only run "
                          "over all its seeds (a share of a study run in lanes)")


def plan_text(config) -> str:
    """What ``run_sweep(config)`` would train: its table and the seeds each unfinished grid point lacks."""
    from interp.training.sweep import pending

    todo = pending(config)
    if not todo:
        return f"{config.table.name}: nothing to train (every seed's row is written)"
    runs = sum(len(group["seeds"]) for group in todo)
    return (f"{config.table.name}: {runs} seed run{'s' if runs != 1 else ''} to train ("
            + "; ".join(f"{group['label']}: {' '.join(map(str, group['seeds']))}" for group in todo) + ")")


def check_grid(config, flags: tuple[str, ...]) -> None:
    """Before any work: every grid point of ``config`` is a valid TrainConfig (a refusal names ``flags``)."""
    from interp.training.sweep import groups

    with arguments.about(*flags):
        groups(config)


def check_outputs(args: argparse.Namespace) -> None:
    """Before any work: a given --checkpoints folder can be made (only its last level) and a given --results-md
    file written."""
    if args.checkpoints is not None:
        check_output_folder(args.checkpoints, [], "--checkpoints")
    if getattr(args, "results_md", None):
        if getattr(args, "train_only", False):
            raise InvalidInput("--results-md: --train-only writes no section; score the rows with --score-only "
                               "--results-md")
        check_output_file(args.results_md, "--results-md")


def main(argv: list[str] | None = None) -> None:
    from interp.task_config import FAMILIES
    from interp.training.sweep import SweepConfig, read_rows, run_sweep

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", required=True, type=arguments.plain_name)
    parser.add_argument("--field", action="append", default=[], type=grid_assignment, metavar="NAME=v1,v2,...",
                        help="the grid (repeatable)")
    add_set_argument(parser, "fixed TrainConfig fields")
    parser.add_argument("--eval-families", nargs="*", default=[], choices=FAMILIES)
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    config = SweepConfig(study=args.study, base={"steps": args.steps, **assignments(args.set, "--set")},
                         grid=assignments(args.field, "--field"), seeds=tuple(args.seeds), out=Path(args.out),
                         checkpoints=args.checkpoints, backend=args.backend, workers=args.workers,
                         eval_tasks=args.eval_tasks, eval_steps=args.eval_steps,
                         eval_families=tuple(args.eval_families))
    check_grid(config, ("--set", "--field", "--steps"))
    if args.out == DEFAULT_OUT:
        Path(DEFAULT_OUT).parent.mkdir(exist_ok=True)  # the default's runs/ is made as before
    check_output_folder(config.out, [config.table.name, config.histories.name], "--out")
    check_outputs(args)
    if args.plan:
        print(plan_text(config))
        return
    table = config.table if args.score_only else run_sweep(config)
    rows = read_rows(table)
    unfinished = [r["name"] for r in rows if not math.isfinite(float(r["model_log_objective"])) and r["status"] == "ok"]
    if unfinished:
        raise SystemExit(f"error: rows marked ok without a finite score: {unfinished}")
    print(f"{len(rows)} rows in {table}")


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG, interrupted=RESUMABLE))
