"""Resumable sweep runner over any TrainConfig field with seeds (groundwork for the learning-factor studies).

Every (grid point, seed) trains one model with ``interp.train.train`` (its own resumable checkpoint) and is
scored by the relative validation objective at its last step and by the papers' protocol (mean log objective after
``--eval-steps`` re-embedded steps vs as many Lloyd iterations, random init, unseen tasks). One CSV per study; a
re-run skips finished rows and resumes unfinished checkpoints. Jobs run in a local process pool sized to the
machine (one torch thread per worker).

Run: .venv/bin/python analyses/sweep.py --study lr --field lr=0.001,0.01,0.1,1 --seeds 0 1 \
        --steps 500 --set d=4 k=6 n=128 --out analyses/results/sweeps
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import dataclasses
import itertools
import json
import math
import os
from pathlib import Path

FIELDS = ("study", "name", "seed", "steps", "relative_objective", "model_log_objective", "lloyd_log_objective",
          "config")


def _convert(field: str, text: str):
    from interp.train import TrainConfig

    kind = type(getattr(TrainConfig(), field))
    if kind is bool:
        return text.lower() in ("1", "true", "yes")
    if field == "grad_clip":
        return None if text.lower() == "none" else float(text)
    return kind(text)


def jobs(study: str, base: dict, grid: dict[str, list], seeds: list[int]) -> list[dict]:
    """One job per grid point and seed: {'name', 'config' (TrainConfig kwargs)}."""
    from interp.train import TrainConfig

    names = list(grid)
    out = []
    for values in itertools.product(*(grid[name] for name in names)):
        for seed in seeds:
            overrides = dict(zip(names, values))
            config = {**base, **overrides, "seed": seed}
            TrainConfig(**config)  # validate now, not in a worker
            label = "_".join(f"{k}={v}" for k, v in overrides.items()) or "base"
            out.append({"study": study, "name": f"{label}_seed={seed}", "config": config})
    return out


def run_job(job: dict, out_dir: str, eval_tasks: int, eval_steps: int) -> dict:
    """Train (or resume) one job and score it; runs in a worker process."""
    import torch

    from interp.checkpoint import load_model
    from interp.evaluate import EvalConfig, objective_curves
    from interp.tasks import TaskConfig
    from interp.train import TrainConfig, train

    torch.set_num_threads(1)
    config = TrainConfig(**job["config"])
    path = Path(out_dir) / "checkpoints" / job["study"] / f"{job['name']}.safetensors"
    meta = train(config, path, progress=False)
    curves = objective_curves(load_model(path), TaskConfig(n=config.n, d=config.d, k=config.k, family=config.family),
                              EvalConfig(n_tasks=eval_tasks, steps=eval_steps, inits=("random",)), "random")
    return {"study": job["study"], "name": job["name"], "seed": config.seed, "steps": meta["step"],
            "relative_objective": meta["history"][-1]["relative_objective"],
            "model_log_objective": curves["model"][-1], "lloyd_log_objective": curves["lloyd"][-1],
            "config": json.dumps(dataclasses.asdict(config), sort_keys=True)}


def run_sweep(study: str, base: dict, grid: dict[str, list], seeds: list[int], out_dir: str | Path,
              workers: int | None = None, eval_tasks: int = 64, eval_steps: int = 20) -> Path:
    """Run every unfinished job of the study and append its row to ``out_dir/<study>.csv``; returns the CSV path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = out_dir / f"{study}.csv"
    done = set()
    if table.exists():
        with open(table) as handle:
            done = {row["name"] for row in csv.DictReader(handle)}
    todo = [job for job in jobs(study, base, grid, seeds) if job["name"] not in done]
    workers = workers or max(1, min(len(todo), os.cpu_count() or 1))
    if not table.exists():
        with open(table, "w", newline="") as handle:
            csv.DictWriter(handle, fieldnames=FIELDS).writeheader()
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run_job, job, str(out_dir), eval_tasks, eval_steps) for job in todo]
        for future in concurrent.futures.as_completed(futures):
            row = future.result()
            with open(table, "a", newline="") as handle:  # one row at a time: an interrupted sweep keeps them
                csv.DictWriter(handle, fieldnames=FIELDS).writerow(row)
            print(f"{row['name']}: relative {row['relative_objective']:.3f}, model {row['model_log_objective']:.3f}, "
                  f"Lloyd {row['lloyd_log_objective']:.3f}", flush=True)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", required=True)
    parser.add_argument("--field", action="append", default=[], help="NAME=v1,v2,... (repeatable): the grid")
    parser.add_argument("--set", nargs="*", default=[], help="NAME=value: fixed TrainConfig fields")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--eval-tasks", type=int, default=64)
    parser.add_argument("--eval-steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--out", default="analyses/results/sweeps")
    args = parser.parse_args()
    base = {"steps": args.steps}
    for item in args.set:
        name, _, value = item.partition("=")
        base[name] = _convert(name, value)
    grid = {}
    for item in args.field:
        name, _, values = item.partition("=")
        grid[name] = [_convert(name, v) for v in values.split(",")]
    table = run_sweep(args.study, base, grid, args.seeds, args.out, args.workers, args.eval_tasks, args.eval_steps)
    with open(table) as handle:
        rows = list(csv.DictReader(handle))
    assert all(math.isfinite(float(r["model_log_objective"])) for r in rows)
    print(f"{len(rows)} rows in {table}")


if __name__ == "__main__":
    main()
