"""Seeds of the main configuration, each trained and then scored at once, so that no checkpoint has to outlive its run.

The multi-step and generalisation claims (paper 2 Figs. 6 and 7) read checkpoints of the main configuration (d = 32,
k = 10, n = 512, tau = 0.1, 10,000 steps). Checkpoints are not committed, so a seed trained in one run and scored in
another is lost when the machine changes. For each of ``--seeds`` of each of ``--embeddings`` this command therefore

1. trains the seed with the embedding ablation (``analyses.ablate_embedding --pairs 32x10 --n 512 --train-only``: its
   row in ``embedding_d32_k10.csv`` and its curve in ``embedding_d32_k10_histories.jsonl``, its checkpoint in
   ``runs/studies/embedding_d32_k10/``; a finished row is not retrained; the study's training summary and section
   are left as they are);
2. scores the checkpoint into ``multistep_seeds.csv`` (``analyses.studies.multistep.measure --seed-rows --keep-rows``)
   and, for one-hot, ``generalisation.csv`` (``analyses.studies.main_seeds.generalisation --keep-rows``): the rows of
   the seeds scored before stay.

A seed whose rows are written for its training config (d, k, n, steps) is skipped; rows written under other scoring
settings (tasks, n, T = 20, the evaluation seed) are refused before any training. Scoring holds a lock on
the ``--out`` folder (``flock``), so two lanes can run this at once; ``--score-only`` scores only checkpoints whose
training row is written (not one still training). ``--results-md`` then writes the sections of the training rows
(``embedding_d32_k10``, with its training summary, over ``--embeddings`` x ``--seeds``, once each of their rows is
written), ``multistep_seeds`` and ``generalisation`` from the rows written so far (no checkpoint needed: with
``--score-only`` on a fresh clone it rewrites them from the committed rows).

Run: .venv/bin/python -m analyses.studies.main_seeds.measure --embeddings onehot --seeds 153476998 235510766
     [--results-md] [--score-only | --plan]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from analyses import _studies as S
from analyses import ablate_embedding
from analyses import claims as C
from analyses._shared import held_rows, scoring_settings
from analyses.studies.main_seeds import generalisation
from analyses.studies.multistep import measure as multistep
from interp import _arguments as arguments
from interp._checks import InvalidInput, check_output_file
from interp.evaluate import EVAL_SEED
from interp.model.config import EMBEDDINGS
from interp.training.sweep import read_rows

PROG = "python -m analyses.main_seeds"
SCORES = {"multistep": "multistep_seeds.csv", "generalisation": "generalisation.csv"}


def has_row(path: Path, embedding: str, seed: int, trained: dict) -> bool:
    """Whether the CSV ``path`` holds a row of ``embedding`` and ``seed`` whose training config has the ``trained``
    fields (e.g. d, k, n and the configured steps; a diverged seed's row counts: it was trained)."""
    return any(int(row["seed"]) == seed and all(config.get(key) == value for key, value in trained.items())
               and config.get("embedding") == embedding
               for row in read_rows(path) for config in [json.loads(row["config"])])


def scored(out: Path, embedding: str, seed: int, trained: dict) -> bool:
    """Whether the seed's checkpoint, trained under ``trained``, has its rows in ``multistep_seeds.csv`` and, for
    one-hot, in ``generalisation.csv``."""
    files = [SCORES["multistep"]] + [SCORES["generalisation"]] * (embedding == "onehot")
    return all(has_row(out / file, embedding, seed, trained) for file in files)


@contextmanager
def scoring_lock(folder: Path) -> Iterator[None]:
    """Wait for and hold an exclusive ``flock`` on the results folder itself (no file is written; no lock where
    ``fcntl`` is missing)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embeddings", nargs="+", choices=EMBEDDINGS, default=EMBEDDINGS)
    parser.add_argument("--seeds", nargs="+", type=arguments.seed, required=True)
    parser.add_argument("--pair", type=ablate_embedding.pair, default=(32, 10), metavar="DxK",
                        help="(d, k) of the configuration (default 32x10, the papers' Figs. 6 and 7)")
    parser.add_argument("--n", type=arguments.positive_int, default=512)
    parser.add_argument("--steps", type=arguments.positive_int, default=10_000, help="training steps")
    parser.add_argument("--eval-tasks", type=arguments.positive_int, default=320, help="training's validation tasks")
    parser.add_argument("--tasks", type=arguments.positive_int, default=320,
                        help="unseen tasks per setting of the scoring (default 320, the papers')")
    parser.add_argument("--threads", type=arguments.threads, default=1, help="threads of the scoring")
    parser.add_argument("--out", default=str(S.HERE / "results" / "studies"), help="the results folder")
    parser.add_argument("--checkpoints", default=None, metavar="DIR",
                        help="checkpoint folder (default runs/studies/embedding_d{d}_k{k})")
    parser.add_argument("--results-md", nargs="?", const=str(S.RESULTS_MD), default=None, metavar="PATH",
                        help="at the end, write the sections of the training rows, multistep_seeds and "
                        "generalisation in "
                        "analyses/RESULTS.md (or PATH) from the rows")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--score-only", action="store_true",
                      help="train nothing: score the seeds whose checkpoints are here and whose rows are missing")
    what.add_argument("--plan", action="store_true", help="train and score nothing: print the seeds to do")
    args = parser.parse_args(argv)
    d, k = args.pair
    out = Path(args.out)
    if not out.is_dir():
        raise InvalidInput(f"--out {args.out} is not a folder: give the results folder")
    if args.results_md:
        check_output_file(args.results_md, "--results-md")
    folder = Path(args.checkpoints) if args.checkpoints else Path("runs") / "studies" / f"embedding_d{d}_k{k}"
    table = out / f"embedding_d{d}_k{k}.csv"
    trained = {"d": d, "k": k, "n": args.n, "steps": args.steps}
    todo = [(embedding, seed) for embedding in args.embeddings for seed in args.seeds
            if not scored(out, embedding, seed, trained)]
    settings = scoring_settings(args.tasks, args.n, C.MULTISTEP_T, EVAL_SEED)
    held_rows(out / SCORES["multistep"], multistep.SEED_ROW_COLUMNS, settings, "--out")  # refused before training
    held_rows(out / SCORES["generalisation"], generalisation.COLUMNS, settings, "--out")
    if args.plan:
        text = (f"main seeds: {len(todo)} seed run{'s' if len(todo) != 1 else ''} to train and score"
                + (f" ({'; '.join(f'{e} {seed}' for e, seed in todo)})" if todo else ""))
        print(text)
        return [text]
    to_multistep = ["--seed-rows", str(out / SCORES["multistep"]), "--name", "multistep_seeds", "--out", str(out)]
    to_generalisation = ["--out", str(out / SCORES["generalisation"])]
    texts = []
    for embedding, seed in todo:
        checkpoint = folder / f"embedding={embedding}_seed={seed}.safetensors"
        if args.score_only and not (checkpoint.is_file() and has_row(table, embedding, seed, trained)):
            continue  # nothing trained here, or a checkpoint still training
        if not args.score_only:
            ablate_embedding.main(["--pairs", f"{d}x{k}", "--n", str(args.n), "--embeddings", embedding, "--seeds",
                                   str(seed), "--steps", str(args.steps), "--eval-tasks", str(args.eval_tasks),
                                   "--workers", "1", "--out", str(out), "--train-only",
                                   # the default folder: the sweep makes it
                                   *(["--checkpoints", str(folder)] if args.checkpoints else [])])
        if not checkpoint.is_file():
            raise InvalidInput(f"--seeds {seed}: its training row is written but its checkpoint {checkpoint} is not "
                               f"here (trained on another machine?): delete its {embedding} row from {table} to train "
                               "it again")
        common = ["--checkpoints", str(checkpoint), "--steps", str(C.MULTISTEP_T), "--tasks", str(args.tasks), "--n",
                  str(args.n), "--seed", str(EVAL_SEED), "--threads", str(args.threads), "--keep-rows"]
        with scoring_lock(out):
            texts.append(multistep.main([*common, *to_multistep]))
            if embedding == "onehot":
                texts.append(generalisation.main([*common, *to_generalisation]))
    if args.results_md:  # the sections of the rows written so far, from the rows alone
        missing = [f"{embedding} {seed}" for embedding in args.embeddings for seed in args.seeds
                   if not has_row(table, embedding, seed, trained)]
        if missing:  # a part of the grid would replace the committed section and summary with fewer seeds
            print(f"{table.name}: section and summary not written, rows missing ({'; '.join(missing)})", flush=True)
        else:
            texts.extend(ablate_embedding.main([  # the training rows' section and summary, over every seed at once
                "--pairs", f"{d}x{k}", "--n", str(args.n), "--embeddings", *args.embeddings, "--seeds",
                *map(str, args.seeds), "--steps", str(args.steps), "--eval-tasks", str(args.eval_tasks), "--workers",
                "1", "--out", str(out), "--score-only", "--results-md", args.results_md,
                *(["--checkpoints", str(folder)] if args.checkpoints else [])]))
        rows_only = ["--keep-rows", "--results-md", args.results_md]
        with scoring_lock(out):
            if (out / SCORES["multistep"]).is_file():
                texts.append(multistep.main([*rows_only, *to_multistep]))
            if (out / SCORES["generalisation"]).is_file():
                texts.append(generalisation.main([*rows_only, *to_generalisation]))
    return texts


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
