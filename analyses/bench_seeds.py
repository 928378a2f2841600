"""Seed-batching benchmark: S seeds of one small configuration trained together (interp.training.seed_batch) vs one
after another with train(), timed in the same run in interleaved rounds (medians), per thread count.

Both ways do the whole job: validation sets, training steps, validation every 50 steps and checkpoints. The
benchmark also checks that they computed the same thing (largest difference of the seeds' final relative
validation objectives). Target: >= 3x faster for 10 seeds of d=4, k=6, n=128.

Run: .venv/bin/python -m analyses.bench_seeds [--seeds 10] [--steps 200] [--rounds 3] [--threads 1 2]
        [--n 128 32] [--quick]

The printed table is also stored, cells as printed, in analyses/results/bench/seeds.json (``--json DIR``
elsewhere, ``--no-json`` not at all), from which the overview of analyses/RESULTS.md quotes it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import torch

from analyses._timing import BENCH_RESULTS, check_json_folder, interleaved_medians, table, write_table
from interp import _arguments as arguments
from interp._runtime import tune_allocator
from interp.training.seed_batch import train_seeds
from interp.training.train import TrainConfig, train

PROG = "python -m analyses.bench_seeds"


def competitors(config: TrainConfig, seeds: list[int], folder: Path, finals: dict):
    def one_by_one():
        finals["one after another"] = [
            train(dataclasses.replace(config, seed=seed), folder / f"single{seed}.safetensors", resume=False,
                  progress=False)["history"][-1]["relative_objective"] for seed in seeds]

    def together():
        metas = train_seeds(config, seeds, [folder / f"batched{seed}.safetensors" for seed in seeds], resume=False,
                            progress=False)
        finals["together"] = [meta["history"][-1]["relative_objective"] for meta in metas]

    return {"one after another": one_by_one, "together": together}


def configs(args: argparse.Namespace) -> list[TrainConfig]:
    """The benchmarked configuration at each --n (tiny batches and validation with --quick)."""
    out = []
    for n in args.n:
        with arguments.about("--d", "--k", "--n"):
            config = TrainConfig(d=args.d, k=args.k, n=n, steps=args.steps)
        out.append(dataclasses.replace(config, batch=4, val_tasks=16, eval_every=5) if args.quick else config)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=arguments.positive_int, default=10, help="how many seeds (1, 2, ...)")
    parser.add_argument("--steps", type=arguments.positive_int, default=200)
    parser.add_argument("--rounds", type=arguments.positive_int, default=3)
    parser.add_argument("--threads", type=arguments.threads, nargs="+", default=[1, 2])
    parser.add_argument("--n", type=arguments.positive_int, nargs="+", default=[128])
    parser.add_argument("--d", type=arguments.positive_int, default=4)
    parser.add_argument("--k", type=arguments.positive_int, default=6)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (for the test suite)")
    parser.add_argument("--json", default=str(BENCH_RESULTS), metavar="DIR", help="where the table is stored")
    parser.add_argument("--no-json", action="store_true", help="do not store the table")
    args = parser.parse_args(argv)
    sized = configs(args)
    json_folder = check_json_folder(args, ["seeds.json"])
    tune_allocator()
    seeds = list(range(1, args.seeds + 1))
    rows = []
    for n, config in zip(args.n, sized):
        for threads in args.threads:
            torch.set_num_threads(threads)
            finals: dict[str, list[float]] = {}
            with tempfile.TemporaryDirectory() as folder:
                medians = interleaved_medians(competitors(config, seeds, Path(folder), finals), args.rounds, warmup=0)
            gap = max(abs(a - b) for a, b in zip(finals["one after another"], finals["together"]))
            seed_steps = len(seeds) * config.steps
            sequential, batched = medians["one after another"], medians["together"]
            rows.append([f"d={config.d} k={config.k} n={n}", str(threads), f"{sequential:.2f}", f"{batched:.2f}",
                         f"{1000 * sequential / seed_steps:.2f}", f"{1000 * batched / seed_steps:.2f}",
                         f"{sequential / batched:.2f}x", f"{gap:.1e}"])
    title = (f"{len(seeds)} seeds x {args.steps} steps (batch {config.batch}, validation every {config.eval_every} "
             f"steps on {config.val_tasks} tasks, checkpoints included), median of {args.rounds} interleaved rounds")
    header = ["config", "threads", "one-by-one s", "together s", "ms/seed-step 1by1", "ms/seed-step together",
              "speed-up", "max |d rel obj|"]
    print(title)
    print(table(rows, header))
    write_table(json_folder, "seeds", title, header, rows)


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
