"""Replaced by the runner: ``python -m analyses run all --budget paper`` runs the papers' campaign (the list of
(study, budget) pairs in analyses/framework/budgets.py, in order; each study resumable, its grid points as Ray
tasks) and ``python -m analyses plan all`` prints what is left of it. This name is kept for this release and
forwards there: ``--dry-run`` is ``plan``, ``--lanes N`` is ``--workers N``, ``--only STUDY ...`` runs those
studies of the campaign (their folder names, ``python -m analyses list``).
"""

from __future__ import annotations

import argparse
import sys

from interp import _arguments as arguments

PROG = "python -m analyses.paper_budget"


def main(argv: list[str] | None = None) -> int:
    from analyses.framework import budgets, runner

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lanes", type=arguments.positive_int, default=None, help="grid points at once (--workers)")
    parser.add_argument("--only", nargs="+", default=None, choices=[study for study, _ in budgets.CAMPAIGN])
    parser.add_argument("--dry-run", action="store_true", help="python -m analyses plan: what is left to train")
    args = parser.parse_args(argv)
    verb = "plan" if args.dry_run else "run"
    workers = ["--workers", str(args.lanes)] if args.lanes else []
    for study in args.only or ["all"]:
        code = runner.main([verb, study, "--budget", "paper", *workers])
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG, interrupted="finished rows stay and checkpoints resume: run the same command "
                           "to continue"))
