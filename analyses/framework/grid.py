"""Grid studies: a resumable sweep over ``TrainConfig`` fields and seeds, its summary over seeds and its section.

A ``GridStudy`` is declared in its folder (``analyses/studies/<name>/``): the fixed fields, the grid, the paper's
finding and the claims of ``analyses.claims`` that decide it. ``run`` trains the grid points that lack rows
(``interp.training.sweep``: one row per seed, training curves beside them; finished rows are skipped, checkpoints
resumed), then writes the median and interquartile band of the curves (``<name>_training.json``) and the section:
the summary table over seeds (paper 2 §3: median and 25%-75% band), the command, the budget and each claim decided by
its rule and control (reproduced / not reproduced / undecided at this budget; rules in docs/claims.md).
``section_from_files`` writes the same section from the committed rows and curves alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from analyses import _studies as S
from analyses import claims as C
from analyses.sweep import check_grid, plan_text
from interp._checks import InvalidInput, check_output_folder


@dataclass(frozen=True)
class GridStudy:
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


def embedding_cell(d: int, k: int, n: int = 128, claims: str = "embedding") -> GridStudy:
    """The embedding-width ablation at one (d, k): one-hot (D = d + k) vs binary (D = d + ceil(log2 k)) vs none
    (D = d), decided by the claims ``<claims>.d<d>k<k>.*`` (paper 2 §3)."""
    return GridStudy(f"Embedding width at d = {d}, k = {k}, n = {n}: one-hot (D = {d + k}) vs binary vs none (D = {d})",
                     {"d": d, "k": k, "n": n}, {"embedding": ["onehot", "binary", "none"]},
                     "paper 2 Figs. 2, 6, 10, 14 (n = 512, 10,000 steps, 10 seeds; onehot, binary < Lloyd < none)",
                     claims, claim_prefix=f"{claims}.d{d}k{k}.")


def stability_cell(d: int, k: int, n: int = 128, claims: str = "stability") -> GridStudy:
    """One-hot vs binary without gradient clipping at one (d, k) (paper 2 §3.5: one-hot unstable in 3 of 10 seeds at
    d = 32, k = 25; binary stable)."""
    return GridStudy(f"One-hot vs binary stability without gradient clipping at d = {d}, k = {k}, n = {n}",
                     {"d": d, "k": k, "n": n}, {"embedding": ["onehot", "binary"]},
                     "paper 2 §3.5 (one-hot unstable in 3 of 10 seeds without clipping, binary stable; n = 512, "
                     "10,000 steps)", claims)


def decided(study: GridStudy, rows: list[dict], histories: dict[str, list[list[dict]]] | None) -> list:
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


def section(name: str, study: GridStudy, rows: list[dict], histories: dict | None, budget: str, command: str,
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


def sweep_config(key: str, study: GridStudy, args: argparse.Namespace, overrides: dict):
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


def run_study(key: str, study: GridStudy, args: argparse.Namespace, overrides: dict) -> str:
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


def check_study(key: str, study: GridStudy, args: argparse.Namespace, overrides: dict, flags: tuple[str, ...]) -> None:
    """Before any work: the runs of ``run_study`` with these arguments are valid TrainConfigs (a refusal names
    ``flags``) and --out can receive the study's CSV, curves and training summary."""
    config = restricted(sweep_config(key, study, args, overrides), getattr(args, "only_grid", None) or {})
    check_grid(config, flags)
    check_output_folder(config.out, [config.table.name, config.histories.name, S.training_path(config.out, key).name],
                        "--out")


def arguments(budget, out: Path, checkpoints: Path | None = None, backend: str = "local",
              workers: int | None = None, **what) -> argparse.Namespace:
    """The options ``run_study`` reads, at ``budget`` (``framework.budgets.Budget``); ``what``: plan / score_only /
    train_only / results_md / only_grid."""
    return argparse.Namespace(steps=budget.steps, seeds=list(budget.seeds), eval_tasks=budget.eval_tasks,
                              eval_steps=budget.eval_steps, out=str(out), backend=backend, workers=workers,
                              checkpoints=str(checkpoints) if checkpoints else None,
                              **{"plan": False, "score_only": False, "train_only": False, "results_md": None,
                                 "only_grid": {}, **what})


def committed_budget(name: str, out: Path):
    """The budget of the rows ``<name>_training.json`` lists (by their steps), or None when none matches."""
    from analyses.framework.budgets import NAMES, budget

    steps = {int(step) for _, step in json.loads(S.training_path(out, name).read_text())["rows"]}
    return next((budget(name, b) for b in NAMES if {budget(name, b).steps} == steps), None)


def section_from_files(name: str, study: GridStudy, out: Path, command: str) -> str:
    """The section of ``study`` from the committed rows and curves in ``out`` alone (no checkpoint is read)."""
    chosen = committed_budget(name, out)
    if chosen is None:
        raise InvalidInput(f"{S.training_path(out, name)} lists rows of no registered budget")
    rows = S.study_csv_rows(out, name)
    histories = histories_by_label(out / f"{name}.csv", out / ".no-checkpoints", rows)
    config = sweep_config(name, study, arguments(chosen, out), {})
    return section(name, study, rows, histories, budget_text(config, arguments(chosen, out)), command,
                   config.base.get("val_tasks", 320), chosen.eval_steps)
