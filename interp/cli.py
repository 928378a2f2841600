"""The ``interp`` command. Bad input prints one clear line and exits 2, never a traceback.

Bad input is exactly what the project's checks raise, :class:`~interp._checks.InvalidInput` (and its subclass
``InvalidInputType``), a ``FileNotFoundError`` for a missing checkpoint or input path, and an ``OSError`` for an
output path that cannot be written. Every other exception is an internal error and keeps its traceback (exit 1).
``interp verify`` exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import sys

from interp._checks import InvalidInput


def _runtime(args: argparse.Namespace) -> None:
    """Allocator tuning and the --threads option of the long-running commands."""
    import torch

    from interp._runtime import tune_allocator

    tune_allocator()
    if args.threads is not None:
        if args.threads < 1:
            raise InvalidInput(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)


def _verify(args: argparse.Namespace) -> int:
    from interp.verify import run_verify

    outcome = run_verify(n_layers=args.layers, n_tasks=args.tasks, gamma=args.gamma, quick=args.quick)
    print(outcome.report)
    return 0 if outcome.passed else 1


def _train(args: argparse.Namespace) -> None:
    import dataclasses

    from interp.training.train import TrainConfig, TrainingDiverged, train

    _runtime(args)
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)
              if getattr(args, f.name) is not None}
    config = TrainConfig(**values)
    try:
        meta = train(config, args.out, resume=not args.no_resume, progress=not args.no_progress)
    except TrainingDiverged as error:
        raise InvalidInput(str(error)) from None
    last = meta["history"][-1]
    print(f"step {meta['step']}: relative validation objective {last['relative_objective']:.4f} "
          f"(< 1 beats one Lloyd step); checkpoint {args.out}")


def _evaluate(args: argparse.Namespace) -> None:
    from pathlib import Path

    from interp.model.checkpoint import load_model
    from interp.evaluate import EvalConfig, evaluate, summarise, write_csv, write_figure
    from interp.tasks import TaskConfig

    _runtime(args)
    models = {str(name): load_model(name) for name in args.checkpoint}
    first = next(iter(models.values())).config
    config = EvalConfig(n_tasks=args.tasks, steps=args.steps, seed=args.seed, inits=tuple(args.inits),
                        protocols=tuple(args.protocols))
    base = TaskConfig(n=args.n, d=first.d, k=first.k)
    rows = evaluate(models, base, config)
    summary = summarise(rows)
    out = Path(args.out)
    write_csv(rows, out / "evaluation.csv")
    write_csv(summary, out / "summary.csv")
    write_figure(summary, out / "evaluation.html", f"{', '.join(models)}: mean log objective, {config.n_tasks} tasks")
    print(f"{'protocol':<9} {'setting':<16} {'init':<9} {'transformer':>11} {'Lloyd':>8} {'diff':>7}  "
          f"(step {config.steps}, median over {len(models)} checkpoint(s))")
    for row in summary:
        if row["step"] == config.steps:
            diff = row["model_median"] - row["lloyd_median"]
            print(f"{row['protocol']:<9} {row['setting']:<16} {row['init']:<9} {row['model_median']:>11.4f} "
                  f"{row['lloyd_median']:>8.4f} {diff:>+7.4f}")
    print(f"wrote {out / 'evaluation.csv'}, {out / 'summary.csv'}, {out / 'evaluation.html'}")


def _report(args: argparse.Namespace) -> None:
    from interp.instruments.report import build_report

    _runtime(args)
    path = build_report(args.checkpoint, args.out, n_tasks=args.tasks)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


def _add_train_options(parser: argparse.ArgumentParser) -> None:
    import dataclasses

    from interp.training.train import TrainConfig

    for field in dataclasses.fields(TrainConfig):
        default = field.default
        flag = "--" + field.name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, dest=field.name, type=_parse_bool,
                                default=None, metavar="BOOL", help=f"default {default}")
        elif field.name == "grad_clip":
            parser.add_argument(flag, dest=field.name, type=float, default=None, help="default: no clipping")
        else:
            parser.add_argument(flag, dest=field.name, type=type(default), default=None, help=f"default {default}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="interp", description="Transformers that run clustering algorithms.")
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser("verify", help="check the exact constructions against Lloyd, layer by layer")
    verify.add_argument("--layers", type=int, default=10, help="layers = Lloyd iterations (default 10)")
    verify.add_argument("--tasks", type=int, default=5, help="tasks per size (default 5)")
    verify.add_argument("--gamma", type=float, default=1e4, help="inverse temperature of the validation (1e4)")
    verify.add_argument("--quick", action="store_true", help="small sizes only")
    verify.set_defaults(func=_verify)
    train = commands.add_parser("train", help="train the one-layer model on a task distribution (resumable)")
    train.add_argument("--out", required=True, help="checkpoint path (.safetensors); an existing one is resumed")
    train.add_argument("--no-resume", action="store_true", help="start over even if --out exists")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument("--threads", type=int, default=None, help="torch threads")
    _add_train_options(train)
    train.set_defaults(func=_train)
    evaluate = commands.add_parser("evaluate", help="the papers' evaluation protocol against Lloyd")
    evaluate.add_argument("--checkpoint", nargs="+", required=True, help="shipped names or paths (several = seeds)")
    evaluate.add_argument("--out", required=True, help="folder for evaluation.csv, summary.csv, evaluation.html")
    evaluate.add_argument("--protocols", nargs="+", default=["main"], help="main length shift family")
    evaluate.add_argument("--inits", nargs="+", default=["random", "kmeans++", "gonzalez"])
    evaluate.add_argument("--tasks", type=int, default=320)
    evaluate.add_argument("--steps", type=int, default=20)
    evaluate.add_argument("--n", type=int, default=512, help="points per task")
    evaluate.add_argument("--seed", type=int, default=20261130)
    evaluate.add_argument("--threads", type=int, default=None)
    evaluate.set_defaults(func=_evaluate)
    report = commands.add_parser("report", help="one self-contained HTML report about a model")
    report.add_argument("--checkpoint", required=True, help="shipped name or path")
    report.add_argument("--out", required=True, help="HTML file to write")
    report.add_argument("--tasks", type=int, default=128, help="evaluation tasks (default 128)")
    report.add_argument("--threads", type=int, default=None)
    report.set_defaults(func=_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command: 0 on success, 1 when ``verify`` fails a check, 2 on bad input; other errors propagate."""
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
    except (InvalidInput, FileNotFoundError) as error:  # the project's input checks; a missing checkpoint/input
        print(f"interp {args.command}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # unwritable or clashing output paths (a file where a folder must be, permissions)
        where = f": {error.filename}" if error.filename else ""
        print(f"interp {args.command}: error: {error.strerror or error}{where}", file=sys.stderr)
        return 2
    return code or 0


if __name__ == "__main__":
    sys.exit(main())
