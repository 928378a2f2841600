"""``python -m analyses.studies --study NAME ...``: the learning studies' command line before the runner, kept for
one release; ``python -m analyses run NAME --budget quick|paper`` replaces it (same tables, same sections).

Studies: tau_loss, lr, n, k, d, family (their folders in analyses/studies/). ``--set`` overrides fixed fields,
``--only-grid`` trains a share of the grid, ``--results-md`` puts the section into analyses/RESULTS.md.
"""

from __future__ import annotations

import argparse
import sys

from analyses import _studies as S
from analyses.framework import registry
from analyses.framework.grid import check_study, run_study
from analyses.sweep import RESUMABLE, add_run_arguments, add_set_argument, assignments, check_outputs, grid_assignment
from interp import _arguments as arguments

PROG = "python -m analyses.studies"
STUDIES = ("tau_loss", "lr", "n", "k", "d", "family")


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", required=True, choices=sorted(STUDIES))
    parser.add_argument("--name", default=None, type=arguments.plain_name,
                        help="results name (CSV, figure, section); default the study's")
    add_set_argument(parser, "override fixed fields (smaller budgets)")
    parser.add_argument("--only-grid", nargs="*", default=[], type=grid_assignment, metavar="NAME=v1,v2",
                        help="train only these values of a grid field (the section still shows the whole grid)")
    parser.add_argument("--results-md", nargs="?", const=str(S.RESULTS_MD), default=None, metavar="PATH",
                        help="put the section into analyses/RESULTS.md (or PATH)")
    add_run_arguments(parser, study=True)
    parser.set_defaults(out=str(S.HERE / "results" / "studies"))
    args = parser.parse_args(argv)
    key, study, overrides = args.name or args.study, registry.get(args.study), assignments(args.set, "--set")
    args.only_grid = assignments(args.only_grid, "--only-grid")
    check_study(key, study, args, overrides, ("--set", "--steps"))
    check_outputs(args)
    return run_study(key, study, args, overrides)


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG, interrupted=RESUMABLE))
