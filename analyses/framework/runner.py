"""The one runner of the studies: ``python -m analyses list | plan STUDY | run STUDY | render [--check]``.

* ``list``: every study of ``analyses/studies/`` with its kind, the sections it writes and its title.
* ``plan STUDY [--budget B]``: what ``run`` would do now: a grid study's seed runs whose rows its table still lacks;
  a measurement's command.
* ``run STUDY [--budget quick|paper] [--out DIR] [--address ADDRESS] [--workers N]``: a grid study trains the grid
  points that lack rows as Ray tasks (a local Ray instance by default, ``--address`` a cluster's; a local instance's
  workers die with the run, SIGKILL included), then writes its training summary and its section; a measurement runs
  its module at the budget. ``run all`` runs the papers' campaign (``framework.budgets.CAMPAIGN``) in order. A
  study's table is resumable (finished rows are skipped, checkpoints resumed): the same command continues an
  interrupted run. One run of a study at a time (a lock beside its table). Sections go into ``analyses/RESULTS.md``
  when the results go to the committed folder (the default at the paper budget), else into ``DIR/RESULTS.md``.
* ``render [--check]``: every section of RESULTS.md, its readings, the generated blocks of README.md and
  RESULTS.md, and docs/claims.md written again from the committed files and the claims' registry (no model is
  run); ``--check`` writes nothing and exits 1, printing the difference, when a document is not what they give.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from analyses import _studies as S
from analyses.framework import registry
from analyses.framework.budgets import CAMPAIGN, NAMES, budget
from analyses.framework.grid import GridStudy, arguments, check_study, run_study, section_from_files
from analyses.sweep import add_set_argument, assignments, check_outputs
from interp import _arguments as args_types
from interp._checks import InvalidInput, check_output_folder
from interp.training.config import MAX_TRAIN_STEPS

PROG = "python -m analyses"
RESULTS = S.HERE / "results"
COMMITTED = RESULTS / "studies"  # the committed rows of the grid studies
README = S.HERE.parent / "README.md"
CLAIMS_MD = S.HERE.parent / "docs" / "claims.md"


def command_of(name: str, budget_name: str) -> str:
    """The command a section names: the runner's, at its budget."""
    return f"{PROG} run {name} --budget {budget_name}"


@contextmanager
def running(command: str):
    """While inside: ``analyses._studies.command_line()`` is ``command`` (the Command line of the sections written)."""
    S.RUNNING.append(command)
    try:
        yield
    finally:
        S.RUNNING.pop()


def kind(study) -> str:
    return "grid" if isinstance(study, GridStudy) else "measured"


def list_text() -> str:
    lines = []
    for name, study in registry.studies().items():
        sections = ", ".join(study.sections if hasattr(study, "sections") else (name,)) or "none"
        lines.append(f"{name:24} {kind(study):9} {study.title}  [sections: {sections}]")
    return "\n".join(lines)


def chosen_budget(name: str, options: argparse.Namespace):
    """The budget of ``--budget`` with the command line's ``--steps``, ``--seeds``, ``--eval-tasks`` over it."""
    changed = {field: value for field, value in (("steps", options.steps), ("eval_tasks", options.eval_tasks),
                                                  ("eval_steps", options.eval_steps),
                                                  ("seeds", tuple(options.seeds or ()))) if value}
    return dataclasses.replace(budget(name, options.budget), **changed)


def canonical(name: str, options: argparse.Namespace) -> str:
    """The command a section names: the runner's, with what changes the results (budget, fixed fields, steps, seeds,
    evaluation tasks) and nothing that does not (workers, backend, address, folders)."""
    words = [PROG, "run", name, "--budget", options.budget]
    if options.set:
        words += ["--set", *(f"{field}={value}" for field, value in options.set)]
    for flag, value in (("--steps", options.steps), ("--eval-tasks", options.eval_tasks),
                        ("--eval-steps", options.eval_steps)):
        words += [flag, str(value)] if value else []
    if options.seeds:
        words += ["--seeds", *map(str, options.seeds)]
    return " ".join(words)


def grid_options(name: str, study: GridStudy, options: argparse.Namespace, **what) -> argparse.Namespace:
    """``run_study``'s options for ``study`` at the chosen budget, out folder, checkpoints and backend."""
    chosen = chosen_budget(name, options)
    out = Path(options.out) if options.out else (COMMITTED if options.budget == "paper" else
                                                  Path("runs") / "analyses" / options.budget)
    results_md = options.results_md or (str(S.RESULTS_MD) if out.resolve() == COMMITTED.resolve()
                                         else str(out / "RESULTS.md"))
    checkpoints = Path(options.checkpoints) if options.checkpoints else (  # never in the committed folder
        Path("runs") / "studies" / name if options.budget == "paper" else
        Path("runs") / "analyses" / options.budget / "checkpoints" / name)
    if not what.get("plan"):  # the default folders are made (a folder the user names must have its parent)
        for default, folder in ((options.checkpoints, checkpoints.parent), (options.out, out.parent)):
            if default is None:
                folder.mkdir(parents=True, exist_ok=True)
    return arguments(chosen, out, checkpoints, backend=options.backend, workers=options.workers,
                     results_md=None if what.get("plan") else results_md, **what)


@contextmanager
def study_lock(folder: Path, name: str):
    """One run of a study at a time: the operating-system lock ``.<name>.lock`` in its results folder."""
    from interp.training.lock import checkpoint_lock

    folder.mkdir(parents=True, exist_ok=True)
    with checkpoint_lock(folder / name):
        yield


def run_one(name: str, options: argparse.Namespace, plan: bool = False) -> str:
    study = registry.get(name)
    command = canonical(name, options)
    if isinstance(study, GridStudy):
        grid = grid_options(name, study, options, plan=plan)
        overrides = assignments(options.set, "--set")
        check_study(name, study, grid, overrides, ("--budget", "--set", "--steps", "--out"))
        if not plan:  # --out can be made (its last level), then the section's file beside the rows
            check_output_folder(grid.out, [], "--out").mkdir(exist_ok=True)
            check_outputs(grid)
        if options.address:
            os.environ["RAY_ADDRESS"] = options.address
        with running(command):
            if plan:
                return run_study(name, study, grid, overrides)
            with study_lock(Path(grid.out), name):
                return run_study(name, study, grid, overrides)
    if options.budget not in study.arguments:
        raise InvalidInput(f"--budget: {name} runs at {', '.join(study.arguments)}, not {options.budget}")
    changed = [flag for flag, value in (("--set", options.set), ("--steps", options.steps), ("--seeds", options.seeds),
                                        ("--eval-tasks", options.eval_tasks), ("--eval-steps", options.eval_steps))
               if value]
    if changed:
        raise InvalidInput(f"{changed[0]}: {name} is a measurement; its budget is --budget (its own options: "
                           f"python -m {study.module or 'analyses'} --help)")
    if not study.module:  # a study of other studies' rows: its sections, written from them
        texts = []
        with running(command):
            for key, write in study.sections.items():
                texts.append(f"{key}: written from the committed rows" if plan else write())
                if not plan:
                    S.write_section(key, texts[-1], Path(options.results_md or S.RESULTS_MD))
        print("\n".join(texts))
        return "\n".join(texts)
    if plan:
        text = f"{name}: python -m {' '.join(study.command(options.budget))}"
        print(text)
        return text
    import importlib

    if options.budget != "paper":  # where the declared arguments of the smaller budgets write
        (Path("runs") / "analyses" / options.budget).mkdir(parents=True, exist_ok=True)
    module = importlib.import_module(study.module)
    with running(command), study_lock(RESULTS, name):
        return module.main(list(study.arguments[options.budget]))


# ----- render ------------------------------------------------------------------------------------------------------
def rendered_sections() -> dict[str, str]:
    """Each registered section's text from the committed files, with the Command line of its runner command (what
    the writers print on the way is dropped)."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        return _rendered_sections()


def _rendered_sections() -> dict[str, str]:
    out = {}
    for key, name in registry.sections().items():
        study = registry.get(name)
        if isinstance(study, GridStudy):
            from analyses.framework.grid import committed_budget

            chosen = committed_budget(name, COMMITTED)
            command = command_of(name, chosen.name if chosen else "paper")
            with running(command):
                out[key] = section_from_files(name, study, COMMITTED, command)
        else:
            with running(command_of(name, "paper")):
                out[key] = study.sections[key]()
    return out


def render(check: bool) -> int:
    """Write (or with ``check`` compare) RESULTS.md's sections, then its readings, then the generated blocks of
    RESULTS.md and README.md, which read the verdict tables of the RESULTS.md on disk, and docs/claims.md."""
    from analyses import claims, readme
    from analyses.framework import reading as readings
    from interp._io import write_text_atomically

    committed = {path: path.read_text() for path in (S.RESULTS_MD, README, CLAIMS_MD)}
    text = committed[S.RESULTS_MD]
    for key, section in rendered_sections().items():
        text = S.with_section(text, key, section)
    text = readings.fill(text)
    if not check:
        write_text_atomically(S.RESULTS_MD, text)
    generated = readme.blocks()
    rendered = {S.RESULTS_MD: readme.fill(text, {n: b for n, b in generated.items() if n not in readme.IN_README}),
                README: readme.fill(committed[README], {n: generated[n] for n in readme.IN_README}),
                CLAIMS_MD: claims.markdown()}  # every registered claim, the study folders' included
    stale = 0
    for path, new in rendered.items():
        if committed[path] == new:
            print(f"{path.name}: as the committed files give it")
            continue
        stale += 1
        if check:
            sys.stdout.writelines(difflib.unified_diff(committed[path].splitlines(True), new.splitlines(True),
                                                       f"{path.name} (committed)", f"{path.name} (rendered)"))
        else:
            write_text_atomically(path, new)
            print(f"{path.name}: written")
    return 1 if check and stale else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the studies")
    for verb in ("plan", "run"):
        sub = commands.add_parser(verb, help=f"{verb} a study (run: 'all' runs the papers' campaign)")
        sub.add_argument("study", type=args_types.plain_name, metavar="STUDY")
        sub.add_argument("--budget", choices=NAMES, default="paper")
        sub.add_argument("--out", default=None, help="results folder (default: the committed one at the paper "
                         "budget, runs/analyses/<budget> otherwise)")
        sub.add_argument("--checkpoints", default=None, help="checkpoint folder (default runs/studies/<study>)")
        sub.add_argument("--results-md", default=None, metavar="PATH", help="where the section goes")
        sub.add_argument("--backend", choices=("ray", "local"), default="ray",
                         help="grid points as Ray tasks (default) or in a local process pool")
        sub.add_argument("--address", default=None, help="a Ray cluster's address (default: a local instance)")
        sub.add_argument("--workers", type=args_types.positive_int, default=None, help="grid points at once")
        add_set_argument(sub, "override fixed training fields of a grid study (NAME=value)")
        sub.add_argument("--steps", type=args_types.count(MAX_TRAIN_STEPS), default=None,
                         help="training steps instead of the budget's")
        sub.add_argument("--seeds", nargs="+", type=args_types.seed, default=None,
                         help="seeds instead of the budget's")
        sub.add_argument("--eval-tasks", type=args_types.tasks, default=None, help="validation tasks instead")
        sub.add_argument("--eval-steps", type=args_types.steps, default=None, help="scored steps instead of 20")
    render_parser = commands.add_parser("render", help="write RESULTS.md and README.md from the committed files")
    render_parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a document is stale")
    options = parser.parse_args(argv)
    if options.command == "list":
        print(list_text())
        return 0
    if options.command == "render":
        return render(options.check)
    names = ([study for study, at in CAMPAIGN if at == options.budget] if options.study == "all"
             else [options.study])
    for name in names:
        registry.get(name)  # every name known before any work
    for name in names:
        run_one(name, options, plan=options.command == "plan")
    return 0
