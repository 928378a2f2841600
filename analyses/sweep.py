"""Command line for ``interp.training.sweep``: a resumable sweep over any TrainConfig field with seeds.

One CSV per study (one row per seed, with its 20-step curves, loss gap and transfer scores); finished rows are
skipped and checkpoints resumed on a re-run. Seeds of a grid point train together (``--no-batch-seeds`` trains
them one by one); ``--backend ray`` runs the grid points as Ray tasks (the cluster in RAY_ADDRESS, else a local
Ray instance).

Run: .venv/bin/python -m analyses.sweep --study lr --field lr=0.001,0.01,0.1,1 --seeds 0 1 \
        --steps 500 --set d=4 k=6 n=128 --out runs/sweeps
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path


def convert(field: str, text: str):
    """A TrainConfig field's value from its command-line text."""
    from interp.training.train import TrainConfig

    if field == "grad_clip":
        return None if text.lower() == "none" else float(text)
    if field not in TrainConfig.__dataclass_fields__:
        raise SystemExit(f"error: unknown training config field {field!r}")
    kind = type(getattr(TrainConfig(), field))
    if kind is bool:
        return text.lower() in ("1", "true", "yes")
    try:
        return kind(text)
    except ValueError:
        raise SystemExit(f"error: {field}={text!r} is not a {kind.__name__}") from None


def parse_assignments(items: list[str], many: bool) -> dict:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"error: expected NAME=value, got {item!r}")
        out[name] = [convert(name, v) for v in value.split(",")] if many else convert(name, value)
    return out


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--eval-tasks", type=int, default=64)
    parser.add_argument("--eval-steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--backend", choices=("local", "ray"), default="local")
    parser.add_argument("--no-batch-seeds", action="store_true", help="train a grid point's seeds one by one")
    parser.add_argument("--out", default="runs/sweeps", help="CSV folder (default runs/sweeps, git-ignored)")
    parser.add_argument("--checkpoints", default=None, help="checkpoint folder (default OUT/checkpoints/STUDY)")
    parser.add_argument("--score-only", action="store_true",
                        help="train nothing: score the rows already in the CSV (a grid point without rows stays empty)")


def main() -> None:
    from interp.training.sweep import SweepConfig, read_rows, run_sweep

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", required=True)
    parser.add_argument("--field", action="append", default=[], help="NAME=v1,v2,... (repeatable): the grid")
    parser.add_argument("--set", nargs="*", default=[], help="NAME=value: fixed TrainConfig fields")
    parser.add_argument("--eval-families", nargs="*", default=[])
    add_run_arguments(parser)
    args = parser.parse_args()
    try:
        config = SweepConfig(study=args.study, base={"steps": args.steps, **parse_assignments(args.set, False)},
                             grid=parse_assignments(args.field, True), seeds=tuple(args.seeds), out=Path(args.out),
                             checkpoints=args.checkpoints, backend=args.backend, workers=args.workers,
                             batch_seeds=not args.no_batch_seeds, eval_tasks=args.eval_tasks,
                             eval_steps=args.eval_steps, eval_families=tuple(args.eval_families))
    except (TypeError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    table = run_sweep(config)
    rows = read_rows(table)
    unfinished = [r["name"] for r in rows if not math.isfinite(float(r["model_log_objective"])) and r["status"] == "ok"]
    if unfinished:
        raise SystemExit(f"error: rows marked ok without a finite score: {unfinished}")
    print(f"{len(rows)} rows in {table}")


if __name__ == "__main__":
    main()
