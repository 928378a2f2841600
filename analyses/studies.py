"""The learning-factor studies of paper 2 (§3 and App. F) as named sweeps, each decided by committed rules.

Studies (grid; the paper's finding):
  tau_loss   loss {softmin (NE), sparsemax (L2)} x tau {1, 0.25, 0.14, 0.1} (Figs. 2, 9, 14)
  lr         lr {0.001, 0.01, 0.1, 1} at d = 32 (App. F: 0.01 best, 0.1 and 1.0 unstable)
  n          n {128, 256, 512, 1024} (no significant effect)
  k          k {6, 10, 16, 25} (Fig. 10a)
  d          d {4, 8, 16, 32} (Figs. 10b, 15)
  family     training family {normal, cauchy, gumbel, laplace, lognormal}, each model scored on all five (the
             5 x 5 transfer grid, Figs. 8/18) and the smoothed-vs-true loss gap per family (Fig. 5)

Each run writes analyses/results/studies/<study>.csv (one row per seed, via interp.training.sweep), beside it
<study>_histories.jsonl (each row's training curve) and <study>_training.json (median and interquartile band over
seeds of the training curves) and prints a markdown section: the table, the command, the budget, the command that
draws the figure from those files (``python -m analyses.figures --only <study>``) and each of the paper's claims
decided by its rule and control in ``analyses.claims`` (reproduced / not reproduced / undecided at this budget; the
rules are in docs/claims.md). A re-run whose rows are all in the CSV trains nothing: it scores the committed rows
and curves. ``--results-md`` puts the section into analyses/RESULTS.md.

Run: .venv/bin/python -m analyses.studies --study tau_loss --steps 10000 --seeds 153476998 235510766 205084180 \
        129959864 149896109 --eval-tasks 320 --workers 1 --results-md
(``python -m analyses.paper_budget`` runs every study at the papers' budget.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from analyses import _studies as S
from analyses import claims as C
from analyses.sweep import (
    RESUMABLE,
    add_run_arguments,
    add_set_argument,
    assignments,
    check_grid,
    check_outputs,
    grid_assignment,
    plan_text,
)
from interp import _arguments as arguments
from interp._checks import InvalidInput, check_output_folder

PROG = "python -m analyses.studies"


def transfer_grid(groups: dict) -> dict[tuple[str, str], float]:
    """(training family, test family) -> median over seeds of model - Lloyd final log objective."""
    grid = {}
    for label, rows in groups.items():
        train_family = label.split("=")[1]
        transfers = [json.loads(r["transfer"]) for r in rows]
        for test_family in transfers[0]:
            grid[(train_family, test_family)] = S.quantile(
                [t[test_family]["model"] - t[test_family]["lloyd"] for t in transfers], 0.5)
    return grid


def transfer_table(groups: dict) -> str:
    grid = transfer_grid(groups)
    if not grid:
        return ""
    tests = list(dict.fromkeys(test for _, test in grid))
    trains = list(dict.fromkeys(train for train, _ in grid))
    lines = ["Transfer grid: median (model - Lloyd) final log objective, rows = training family, columns = test "
             "family (< 0 beats Lloyd):", "", "| trained on \\ tested on | " + " | ".join(tests) + " |",
             "|---|" + "---|" * len(tests)]
    for train in trains:
        lines.append(f"| {train} | " + " | ".join(f"{grid[(train, test)]:+.3f}" for test in tests) + " |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Study:
    """A named study: fixed fields, the grid, the paper's finding and which claims of ``analyses.claims`` decide it
    (``claims``: a study of ``analyses.claims.STUDIES``; ``claim_prefix``: only its claims whose id starts so)."""

    title: str
    base: dict
    grid: dict
    paper: str
    claims: str
    claim_prefix: str = ""
    eval_families: tuple[str, ...] = ()
    extra: Callable[[dict], str] = field(default=lambda groups: "")


FAMILIES = ["normal", "cauchy", "gumbel", "laplace", "lognormal"]
STUDIES = {
    "tau_loss": Study("Loss (NE softmax vs L2 sparsemax) x temperature tau", {"d": 4, "k": 6, "n": 128},
                      {"loss": ["softmin", "sparsemax"], "tau": [1.0, 0.25, 0.14, 0.1]},
                      "paper 2 Figs. 2, 9, 14 (d in {4, 32}, k = 6, n = 512, 10,000 steps, 10 seeds)", "tau_loss"),
    "lr": Study("Learning rate at d = 32", {"d": 32, "k": 6, "n": 128}, {"lr": [0.001, 0.01, 0.1, 1.0]},
                "paper 2 App. F (k = 6, n = 512, M = 5,000 steps, 10 seeds)", "lr"),
    "n": Study("Training length n", {"d": 4, "k": 6}, {"n": [128, 256, 512, 1024]},
               "paper 2 §3 / App. F (k = 6, 10,000 steps, 10 seeds)", "n"),
    "k": Study("Number of clusters k", {"d": 32, "n": 128}, {"k": [6, 10, 16, 25]},
               "paper 2 Fig. 10a (d = 32, n = 512, 10,000 steps, 10 seeds)", "k"),
    "d": Study("Dimension d", {"k": 6, "n": 128}, {"d": [4, 8, 16, 32]},
               "paper 2 Figs. 10b, 15 (k = 6, n = 512, 10,000 steps, 10 seeds)", "d"),
    "family": Study("Training family, transfer grid and loss gap", {"d": 32, "k": 10, "n": 128},
                    {"family": FAMILIES}, "paper 2 Figs. 4, 5, 8, 16, 18 (d = 32, k = 10, n = 512, 10 seeds)",
                    "family", eval_families=tuple(FAMILIES), extra=transfer_table),
}


def decided(study: Study, rows: list[dict], histories: dict[str, list[list[dict]]] | None) -> list:
    """(claim, verdict) of each of the study's claims on ``rows`` (one run's rows) and ``histories`` (label -> the
    seeds' training curves, in the order of that label's rows; None: not kept for these rows, and a claim that
    reads the curves is then undecided, saying why)."""
    by_key = C.histories_by_key(rows, histories) if histories is not None else None
    out = []
    for claim in C.claims_of(study.claims):
        if not claim.id.startswith(study.claim_prefix):
            continue
        if by_key is None and (claim.rule.history_keys or claim.control.history_keys):
            out.append((claim, C.Verdict(C.UNDECIDED, "reads the training curves, which were not kept for these rows "
                                         "(runs from before the curves were stored)", "not evaluated")))
        else:
            out.append((claim, C.decide(claim, rows, by_key)))
    return out


def section(name: str, study: Study, rows: list[dict], histories: dict | None, budget: str, command: str,
            val_tasks: int, eval_steps: int) -> str:
    groups = S.by_label(rows)
    lengths = {json.loads(row["config"])["n"] for row in rows}
    at_n = f", n = {lengths.pop()}" if len(lengths) == 1 and "n = " not in study.title else ""  # the rows' n
    lines = [f"## Study `{name}`: {study.title}{at_n} (`{S.program(command)}`)", "",
             f"Command: `{command}`  ", f"Budget: {budget}  ", f"Paper: {study.paper}  ", S.figure_line(name), "",
             "Median [interquartile range] over seeds; relative objective = one step vs one Lloyd iteration on the "
             f"run's {val_tasks} validation tasks; log objectives after {eval_steps} re-embedded steps vs "
             f"{eval_steps} Lloyd iterations on unseen tasks (random init); loss gap = smoothed loss minus "
             "k-means objective after one step.", "", S.summary_table(rows), ""]
    extra = study.extra(groups)
    if extra:
        lines += [extra, ""]
    results = decided(study, rows, histories)
    if results:
        lines += [C.RULES_LINE, "", *C.verdict_lines(results)]
    else:
        lines.append(f"No claim of `analyses.claims` is made at this grid (study {study.claims!r}, claims "
                     f"{study.claim_prefix}*); docs/claims.md lists the grid points each claim reads.")
    return "\n".join(lines) + "\n"


def histories_by_label(table: Path, checkpoint_dir: Path, rows: list[dict]) -> dict[str, list[list[dict]]] | None:
    """label -> the training curves of its rows (in row order): from ``<study>_histories.jsonl`` beside ``table``,
    else from the rows' checkpoints in ``checkpoint_dir`` (the run's own: same config, same step); None when some row
    has neither (curves not kept)."""
    from interp.model.checkpoint import load_checkpoint
    from interp.training.sweep import config_key, read_histories

    stored = read_histories(table)
    out: dict[str, list[list[dict]]] = {}
    for row in rows:
        history = stored.get((row["name"], config_key(row["config"])))
        if history is None:
            path = Path(checkpoint_dir) / f"{row['name']}.safetensors"
            meta = load_checkpoint(path)[1] if path.exists() else None
            saved = meta.get("train_config") if meta is not None else None
            if not isinstance(saved, dict) or meta.get("step") != int(row["steps"]) or \
                    config_key(json.dumps(saved)) != config_key(row["config"]):
                return None  # no checkpoint, or one of another run under the same name
            history = meta["history"]
        out.setdefault(row["label"], []).append(history)
    return out


def tables_evidence(out: Path, tables: tuple[str, ...], steps: int, seeds, folder_of: Callable[[str], Path]
                    ) -> tuple[list[dict], dict | None]:
    """The rows of ``tables`` in ``out`` at ``steps`` steps and these seeds (the latest row of each name per table),
    and their training curves keyed by ``analyses.claims.row_key`` (None if some were not kept), a row's curve read
    from its table's ``_histories.jsonl`` or else its checkpoint in ``folder_of(table)``."""
    from interp.training.sweep import read_rows

    rows, histories = [], {}
    for table in tables:
        latest = {}
        for row in read_rows(out / f"{table}.csv"):
            if int(row["seed"]) in seeds and json.loads(row["config"])["steps"] == steps:
                latest[row["name"]] = row
        table_rows = list(latest.values())
        by_label = histories_by_label(out / f"{table}.csv", folder_of(table), table_rows)
        if by_label is None:
            histories = None
        elif histories is not None:
            histories.update(C.histories_by_key(table_rows, by_label))
        rows += table_rows
    return rows, histories


def sweep_config(key: str, study: Study, args: argparse.Namespace, overrides: dict):
    """The ``SweepConfig`` of a study run with these command-line arguments (``study_rows`` of it picks the rows
    of exactly this run from the CSV)."""
    from interp.training.sweep import SweepConfig

    base = {**study.base, "steps": args.steps, **overrides}
    checkpoints = Path(args.checkpoints) if args.checkpoints else Path("runs") / "studies" / key
    return SweepConfig(study=key, base=base, grid=study.grid, seeds=tuple(args.seeds), out=Path(args.out),
                       checkpoints=checkpoints, backend=args.backend, workers=args.workers,
                       eval_tasks=args.eval_tasks, eval_steps=args.eval_steps, eval_families=study.eval_families)


def restricted(config, only: dict):
    """``config`` training only the grid values in ``only`` (FIELD -> values, a subset of the study's own), so two
    runs can share one study's grid points; the section is still scored over the whole grid."""
    grid = dict(config.grid)
    for name, values in only.items():
        if name not in grid:
            raise InvalidInput(f"--only-grid: {name!r} is not a grid field of this study ({', '.join(grid)})")
        unknown = [value for value in values if value not in grid[name]]
        if unknown:
            raise InvalidInput(f"--only-grid: {name} values {unknown} are not in the study's grid {grid[name]}")
        grid[name] = [value for value in grid[name] if value in values]
    return dataclasses.replace(config, grid=grid)


def budget_text(config, args: argparse.Namespace) -> str:
    """The budget line of a study section: fixed fields, seeds and evaluation tasks."""
    fixed = ", ".join(f"{k}={v}" for k, v in config.base.items())
    steps = int(config.base.get("steps", 0))
    size = ("the papers' 10,000 steps" if steps >= C.PAPER_STEPS else
            f"{steps} steps, fewer than the papers' 10,000")
    n_note = "; n = 128, the papers' 512 (the n study covers the difference)" if config.base.get("n") == 128 else ""
    return (f"{fixed}; {len(args.seeds)} seeds ({', '.join(map(str, args.seeds))}), "
            f"{args.eval_tasks} evaluation tasks; {size}{n_note}")


def run_study(key: str, study: Study, args: argparse.Namespace, overrides: dict) -> str:
    """Sweep ``study`` (resumably), write its CSV and training curves, return (and with --results-md store) its
    section; ``python -m analyses.figures --only KEY`` draws its figure from those files."""
    from interp.training.sweep import run_sweep, study_rows

    config = sweep_config(key, study, args, overrides)
    if getattr(args, "plan", False):
        text = plan_text(restricted(config, getattr(args, "only_grid", None) or {}))
        print(text)
        return text
    if not getattr(args, "score_only", False):
        run_sweep(restricted(config, getattr(args, "only_grid", None) or {}))
    if getattr(args, "train_only", False):  # rows only: the summary and section of a later --score-only run
        text = f"{config.table.name}: {len(study_rows(config))} rows of this run; summary and section not written"
        print(text)
        return text
    rows = study_rows(config)  # this grid, fixed fields and seeds only (a CSV may hold earlier budgets too)
    if not rows:
        raise InvalidInput(f"{config.table} has no rows of this grid, budget and seeds yet; run without "
                           "--score-only to train them")
    histories = histories_by_label(config.table, config.checkpoint_dir, rows)
    if getattr(args, "only_grid", None):  # a share of the grid: the whole-grid run writes the curves' summary
        print(f"note: --only-grid trains a share of the grid; {S.training_path(Path(args.out), key).name} is written "
              "by a run over the whole grid")
    elif histories is not None:
        fixed = ", ".join(f"{k}={v}" for k, v in config.base.items())
        title = f"{study.title}<br><sup>here: {fixed}, {len(args.seeds)} seeds; {study.paper}</sup>"
        S.write_training(Path(args.out), key, title, rows, histories,
                         source=f"{config.histories.name}: the rows' training curves (median and band over seeds)")
    else:  # rows from before the curves were stored: their committed _training.json stays as it is
        print(f"note: the training curves of some rows of {config.table} are in neither {config.histories.name} nor "
              f"{config.checkpoint_dir}; {S.training_path(Path(args.out), key).name} is left as it is")
    val_tasks = config.base.get("val_tasks", 320)
    text = section(key, study, rows, histories, budget_text(config, args), S.command_line(), val_tasks,
                   args.eval_steps)
    print(text)
    if args.results_md:
        S.write_section(key, text, Path(args.results_md))
    return text


def check_study(key: str, study: Study, args: argparse.Namespace, overrides: dict, flags: tuple[str, ...]) -> None:
    """Before any work: the runs of ``run_study`` with these arguments are valid TrainConfigs (a refusal names
    ``flags``) and --out can receive the study's CSV, curves and training summary."""
    config = restricted(sweep_config(key, study, args, overrides), getattr(args, "only_grid", None) or {})
    check_grid(config, flags)
    check_output_folder(config.out, [config.table.name, config.histories.name, S.training_path(config.out, key).name],
                        "--out")


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
    key, study, overrides = args.name or args.study, STUDIES[args.study], assignments(args.set, "--set")
    args.only_grid = assignments(args.only_grid, "--only-grid")
    check_study(key, study, args, overrides, ("--set", "--steps"))
    check_outputs(args)
    return run_study(key, study, args, overrides)


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG, interrupted=RESUMABLE))
