"""The ``interp`` command. Bad input prints one clear line and exits 2, never a traceback."""

from __future__ import annotations

import argparse
import sys


def _verify(args: argparse.Namespace) -> None:
    from interp.verify import run_verify

    print(run_verify(n_layers=args.layers, n_tasks=args.tasks, gamma=args.gamma, quick=args.quick))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="interp", description="Transformers that run clustering algorithms.")
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser("verify", help="check the exact constructions against Lloyd, layer by layer")
    verify.add_argument("--layers", type=int, default=10, help="layers = Lloyd iterations (default 10)")
    verify.add_argument("--tasks", type=int, default=5, help="tasks per size (default 5)")
    verify.add_argument("--gamma", type=float, default=1e4, help="inverse temperature of the validation (1e4)")
    verify.add_argument("--quick", action="store_true", help="small sizes only")
    verify.set_defaults(func=_verify)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (ValueError, TypeError, FileNotFoundError, KeyError) as error:
        print(f"interp {args.command}: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
