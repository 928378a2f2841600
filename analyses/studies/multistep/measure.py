"""Multi-step inference: re-embedding vs naive stacking for T = 20 steps (paper 2 Fig. 6, §3).

One trained layer is applied T times. Re-embedding resets the streams to [X; 0] and [C_current; codes] before
every step (the papers' protocol); naive stacking lets the residual streams flow on (``reembed=False``). Both are
compared with T Lloyd iterations from the same random initial centroids on unseen tasks (mean log objective per
step), per embedding: median and interquartile band over the given checkpoints (seeds).

Default checkpoints: the shipped main models (n = 512, d = 32, k = 10, tau = 0.1, 10,000 steps: the paper's
Fig. 6 setting); add more with --checkpoints (paths or globs, e.g. the embedding ablation's seeds).

Writes <out>/<name>.json (the curves; ``python -m analyses.figures --only <name>`` draws the figure from it).

``--seed-rows PATH`` also writes one CSV row per checkpoint (``SEED_ROW_COLUMNS``: its training config and seed, the
three curves as JSON lists) and decides the claims of study ``multistep`` of ``analyses.claims`` on them (the
section then gives those registered rules' verdicts; without ``--seed-rows`` it only describes the paper's findings
on the medians of the checkpoints, with no verdict). It needs checkpoints written by
training (metadata ``train_config``), e.g. the embedding ablation's at d = 32, k = 10, n = 512. With
``--keep-rows`` the rows PATH already holds for other checkpoints stay (they must have been evaluated with the same
--tasks, --n, --steps and --seed), so seeds trained at different times, or on different machines, score together;
the section and the JSON then read every row. ``--keep-rows`` without ``--checkpoints`` evaluates nothing: it
rewrites the JSON and the section from PATH's rows.

Run: .venv/bin/python -m analyses.studies.multistep.measure --tasks 320 --steps 20 --results-md
     .venv/bin/python -m analyses.studies.multistep.measure --checkpoints runs/studies/embedding_d32_k10/*.safetensors \
        --seed-rows analyses/results/studies/multistep_seeds.csv --name multistep_seeds --results-md [--keep-rows]
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
from pathlib import Path

import torch

from analyses import _studies as S
from analyses import claims as C
from analyses._shared import (
    checkpoint_status,
    evaluation_settings,
    held_rows,
    kept_rows,
    scoring_settings,
    training_metadata,
    write_csv,
)
from analyses.framework import formatting
from analyses.framework.statistics import quantile
from interp import _arguments as arguments
from interp._checks import InvalidInput, check_output_file, check_output_folder
from interp._io import write_text_atomically

PROG = "python -m analyses.multistep"
DEFAULT_CHECKPOINTS = ("main-onehot", "main-binary", "main-none")
SHOWN_STEPS = (1, 2, 5, 10, 20)
SEED_ROW_COLUMNS = ("study", "name", "label", "seed", "steps", "status", "checkpoint", "tasks", "n", "eval_seed",
                    "model_curve", "stacked_curve", "lloyd_curve", "config")


@torch.no_grad()
def curves(model, n_tasks: int, steps: int, n: int, seed: int) -> dict[str, list[float]]:
    """Mean log objective after steps 0..T: re-embedded model, stacked model and Lloyd, same tasks and start; +inf
    from the step where a model's centroids overflow."""
    from interp.algorithms import lloyd, log_objective
    from interp.tasks import TaskConfig, init_centroids, sample_tasks

    config = model.config
    points = sample_tasks(TaskConfig(n=n, d=config.d, k=config.k), n_tasks, seed).points  # (V, n, d)
    init = init_centroids(points, config.k, "random", seed + 1)  # (V, k, d)

    def mean_log(centroids: torch.Tensor) -> float:
        """+inf once the centroids overflow (stacking may get there): not finite, or so far out that the objective
        refuses them (its squared distances would overflow the model's precision)."""
        if not bool(torch.isfinite(centroids).all()):
            return math.inf
        try:
            value = log_objective(points, centroids).double().mean().item()
        except InvalidInput:
            return math.inf
        return math.inf if math.isnan(value) else value

    out = {}
    for name, reembed in (("reembedded", True), ("stacked", False)):
        trajectory = model(points, init, steps=steps, reembed=reembed).centroid_trajectory  # (V, T+1, k, d)
        out[name] = [mean_log(trajectory[:, t]) for t in range(steps + 1)]
    reference = lloyd(points, init, steps).centroid_trajectory  # (V, T+1, k, d)
    out["lloyd"] = [mean_log(reference[:, t]) for t in range(steps + 1)]
    return out


def checkpoints(text: str) -> list[str]:
    """An argparse type: a shipped checkpoint name or path, or a glob pattern, as the checkpoints it names."""
    if not any(ch in text for ch in "*?["):
        return [arguments.checkpoint(text)]
    matches = sorted(glob.glob(text))
    if not matches:
        raise argparse.ArgumentTypeError(f"{text!r} matches no file")
    return [arguments.checkpoint(match) for match in matches]


def checks(by_embedding: dict[str, list[dict]], steps: int) -> list[tuple[str, str, bool]]:
    med = {e: {kind: [quantile([c[kind][t] for c in runs], 0.5) for t in range(steps + 1)]
               for kind in ("reembedded", "stacked", "lloyd")} for e, runs in by_embedding.items()}
    claims = []
    rises = {e: m["stacked"][steps] - m["stacked"][1] for e, m in med.items()}
    claims.append(("naive stacking diverges after step 1 (its objective at step T is worse than at step 1)",
                   ", ".join(f"{e}: {v:+.3f}" for e, v in rises.items()), all(v > 0 for v in rises.values())))
    beat = {e: med[e]["reembedded"][steps] - med[e]["lloyd"][steps] for e in ("onehot", "binary") if e in med}
    if beat:
        claims.append((f"re-embedded one-hot and binary beat Lloyd's iterations (step {steps})",
                       ", ".join(f"{e}: {v:+.3f}" for e, v in beat.items()), all(v < 0 for v in beat.values())))
    if "none" in med:
        m = med["none"]
        claims.append(("re-embedded none improves but stays worse than Lloyd",
                       f"step 0 {m['reembedded'][0]:.3f} -> step {steps} {m['reembedded'][steps]:.3f}; "
                       f"Lloyd {m['lloyd'][steps]:.3f}",
                       m["reembedded"][steps] < m["reembedded"][0] and m["reembedded"][steps] > m["lloyd"][steps]))
    return claims


def curve_lines(by_embedding: dict[str, list[dict]], steps: int) -> list[str]:
    """The section's table: objective after the shown steps per embedding and mode."""
    shown = [t for t in SHOWN_STEPS if t <= steps] or [steps]
    lines = ["Mean log objective after step t, median [interquartile range] over checkpoints:", "",
             "| embedding (checkpoints) | mode | " + " | ".join(f"t={t}" for t in shown) + " |",
             "|---|---|" + "---|" * len(shown)]
    for embedding, runs in by_embedding.items():
        for kind in ("reembedded", "stacked", "lloyd"):
            cells = [formatting.band([r[kind][t] for r in runs]) for t in shown]
            lines.append(f"| {embedding} ({len(runs)}) | {kind} | " + " | ".join(cells) + " |")
    return lines


def table_lines(by_embedding: dict[str, list[dict]], steps: int) -> list[str]:
    """The section's tables: objective after the shown steps per embedding and mode, then the paper's findings
    checked on the medians of these checkpoints, a description and not a verdict (``--seed-rows`` decides the
    registered rules over seeds instead)."""
    return [*curve_lines(by_embedding, steps), "",
            "The paper's findings checked on the medians of these checkpoints: a description, not a verdict (the "
            "registered rules decide them over seeds, study `multistep_seeds`).", "",
            "| paper's finding | measured here | holds on these checkpoints |", "|---|---|---|",
            *(f"| {finding} | {measured} | {'yes' if holds else 'no'} |"
              for finding, measured, holds in checks(by_embedding, steps))]


def registered_lines(by_embedding: dict[str, list[dict]], steps: int, rows: list[dict]) -> list[str]:
    """The ``--seed-rows`` section's tables: the curves' table, then the claims of study ``multistep`` decided by
    ``analyses.claims`` on the seed rows."""
    verdicts = C.verdict_lines(C.decide_study("multistep", rows))
    return [*curve_lines(by_embedding, steps), "", C.RULES_LINE, "", *verdicts]


def seed_row(path: str, metadata: dict, curve: dict[str, list[float]], tasks: int, n: int, seed: int) -> dict:
    """One checkpoint's CSV row (``SEED_ROW_COLUMNS``): status ``ok``, ``diverged`` (marked so by its trainer) or
    ``unfinished`` (saved before its configured steps); the evaluation's tasks, n and seed; the curves as JSON lists
    over steps 0..T."""
    config = metadata["train_config"]
    label = f"embedding={config['embedding']}"
    return {"study": "multistep", "name": f"{label}_seed={config['seed']}", "label": label, "seed": config["seed"],
            "steps": metadata["step"], "status": checkpoint_status(metadata), "checkpoint": path, "tasks": tasks,
            "n": n, "eval_seed": seed,
            "model_curve": json.dumps(curve["reembedded"]), "stacked_curve": json.dumps(curve["stacked"]),
            "lloyd_curve": json.dumps(curve["lloyd"]), "config": json.dumps(config, sort_keys=True)}


def row_curves(rows: list[dict]) -> dict[str, list[dict]]:
    """The seed rows' curves per embedding, as ``curves`` returns them: {embedding: [{reembedded, stacked, lloyd}]}."""
    by_embedding: dict[str, list[dict]] = {}
    for row in rows:
        by_embedding.setdefault(json.loads(row["config"])["embedding"], []).append(
            {kind: json.loads(row[column]) for kind, column in
             (("reembedded", "model_curve"), ("stacked", "stacked_curve"), ("lloyd", "lloyd_curve"))})
    return by_embedding


def main(argv: list[str] | None = None) -> str:
    from interp.model.checkpoint import load_model
    from interp.tasks import TaskConfig

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", nargs="+", type=checkpoints, default=None, metavar="CHECKPOINT",
                        help=f"names, paths or globs (default {' '.join(DEFAULT_CHECKPOINTS)}; none with "
                        "--keep-rows)")
    parser.add_argument("--tasks", type=arguments.positive_int, default=320)
    parser.add_argument("--steps", type=arguments.positive_int, default=20)
    parser.add_argument("--n", type=arguments.positive_int, default=512)
    parser.add_argument("--seed", type=arguments.seed, default=20261130)
    parser.add_argument("--threads", type=arguments.threads, default=2)
    parser.add_argument("--out", default=str(S.HERE / "results" / "studies"))
    parser.add_argument("--name", default="multistep", type=arguments.plain_name,
                        help="results name (JSON, figure, section)")
    parser.add_argument("--results-md", nargs="?", const=str(S.RESULTS_MD), default=None, metavar="PATH",
                        help="put the section into analyses/RESULTS.md (or PATH)")
    parser.add_argument("--seed-rows", default=None, metavar="PATH",
                        help="also write one CSV row per checkpoint (checkpoints written by training) and decide the "
                        "registered claims of study multistep on them")
    parser.add_argument("--keep-rows", action="store_true",
                        help="with --seed-rows: keep the rows PATH holds for other checkpoints (evaluated with the "
                        "same --tasks, --n, --steps and --seed); the section reads them all. Without --checkpoints: "
                        "evaluate nothing, rewrite the JSON and section from PATH's rows")
    args = parser.parse_args(argv)
    if args.keep_rows and not args.seed_rows:
        raise InvalidInput("--keep-rows keeps the rows of --seed-rows: give --seed-rows PATH")
    paths = ([path for group in args.checkpoints for path in group] if args.checkpoints
             else [] if args.keep_rows else list(DEFAULT_CHECKPOINTS))
    out = check_output_folder(args.out, [f"{args.name}.json"], "--out")
    if args.results_md:
        check_output_file(args.results_md, "--results-md")
    metadata = []
    if args.seed_rows:
        check_output_file(args.seed_rows, "--seed-rows", devices=False)
        if not paths and not Path(args.seed_rows).is_file():
            raise InvalidInput(f"--keep-rows without --checkpoints writes the section from the rows of --seed-rows "
                               f"{args.seed_rows}, and there is no such file")
        others = [out / f"{args.name}.json", *([Path(args.results_md)] if args.results_md else [])]
        if any(Path(args.seed_rows).resolve() == other.resolve() for other in others):
            raise InvalidInput(f"--seed-rows {args.seed_rows} is also written as the JSON or --results-md: give it a "
                               "path of its own")
        if args.keep_rows and paths:  # refused before any evaluation
            held_rows(args.seed_rows, SEED_ROW_COLUMNS, scoring_settings(args.tasks, args.n, args.steps, args.seed),
                      "--seed-rows")
        metadata = [training_metadata(path, "--seed-rows") for path in paths]
        names = [f"{m['train_config']['embedding']} seed {m['train_config']['seed']}" for m in metadata]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise InvalidInput(f"--seed-rows: several checkpoints are {', '.join(repeated)}: give one checkpoint per "
                               "embedding and seed")
    models = [load_model(path) for path in paths]
    for model in models:
        with arguments.about("--n"):
            TaskConfig(n=args.n, d=model.config.d, k=model.config.k)
    torch.set_num_threads(args.threads)
    by_embedding: dict[str, list[dict]] = {}
    rows = []
    for path, model, meta in zip(paths, models, metadata or [None] * len(models)):
        curve = curves(model, args.tasks, args.steps, args.n, args.seed)
        by_embedding.setdefault(model.config.embedding, []).append(curve)
        if meta is not None:
            rows.append(seed_row(path, meta, curve, args.tasks, args.n, args.seed))
    if args.keep_rows:
        rows = kept_rows(args.seed_rows, rows, SEED_ROW_COLUMNS, "--seed-rows")
    tasks, n, steps = args.tasks, args.n, args.steps
    if args.seed_rows:  # the section reads the rows (with --keep-rows also those of earlier runs)
        if not rows:
            raise InvalidInput(f"--seed-rows {args.seed_rows} holds no row: give --checkpoints to evaluate")
        by_embedding, paths = row_curves(rows), [row["checkpoint"] for row in rows]
        settings = evaluation_settings(rows[0])
        tasks, n, steps = int(settings["tasks"]), int(settings["n"]), int(settings["T"])
    out.mkdir(exist_ok=True)  # its parent exists (checked): at most this one folder is created
    stored = {"checkpoints": paths, "curves": by_embedding}
    if args.seed_rows:
        write_csv(rows, SEED_ROW_COLUMNS, args.seed_rows)
        stored["seed_rows"] = os.path.relpath(Path(args.seed_rows).resolve(), out.resolve())
    write_text_atomically(out / f"{args.name}.json", json.dumps(stored, indent=1))
    lines = [f"## Study `{args.name}`: re-embedding vs naive stacking (`{S.program()}`)", "",
             f"Command: `{S.command_line()}`  ",
             f"Budget: {tasks} unseen tasks, n={n}, {steps} steps, random init; checkpoints "
             f"{', '.join(Path(p).name for p in paths)}  ",
             "Paper: paper 2 Fig. 6 (T = 20; trained n = 512, d = 32, k = 10, tau = 0.1; 10 seeds)  ",
             S.figure_line(args.name), "",
             *(registered_lines(by_embedding, steps, rows) if args.seed_rows
               else table_lines(by_embedding, steps))]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.results_md:
        S.write_section(args.name, text, Path(args.results_md))
    return text


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
