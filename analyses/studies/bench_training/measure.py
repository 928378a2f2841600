"""Training-step benchmark.

Seconds per optimiser step for the main configuration (batch 32, n=512, d=32, k=10, one-hot, attention
dropout 0.01, softmin loss tau=0.1, Adam), 2 threads, against a reference formulation like the authors'
(torch.cdist distances, nn.Linear projections, materialised softmax, nn.Dropout on the pattern), timed in
the same run on the same batches, interleaved (our step's loss called as the training loop calls it, without
re-checking the tensors the forward produced); plus peak memory (peak-RSS growth of a fresh process) and the
length of a full 10,000-step run with our real training loop (validation every 50 steps included): measured with
``--loop-steps 10000``, else projected from a shorter run.

Second table (``--small``, the learning studies' sizes): seconds per step at d=4, k=6, n=128 and d=32, k=6,
n=128 (batch 32, one run), at 1 and 2 threads, for our step, our step without the block-step kernel (each attention
through the model's per-attention paths: ``interp.model.kernels.dispatch.without("training_step")``, the step interp
took before that kernel) and the reference formulation; all interleaved in one run.

The printed tables and loop line are also stored, cells as printed, in analyses/results/bench/training.json,
training_small.json and training_profile.json (``--json DIR`` elsewhere, ``--no-json`` not at all), from which
the overview of analyses/RESULTS.md quotes them.

Unrolled training (``--unroll``): at d=4, k=6, n=128 (batch 32, 2 threads), one training step whose loss is on the
centroids after T = 1, 2, 4, 8 re-embedded steps (``TrainConfig.unroll``), all interleaved in one run: ms per step
against T x the T = 1 step, and the peak resident memory the first such step adds in a fresh process (forward,
backward and Adam; a warm-up at a tiny size first) against T x that of T = 1; stored in training_unroll.json.

Third table (``--profile``): where a step's time goes at those sizes (torch.profiler, 1 thread): the shares of
forward, loss, backward and Adam, the aten operators dispatched per step and the operators with the most self time.

Run: .venv/bin/python -m analyses.studies.bench_training.measure [--rounds R] [--quick] [--small | --profile | --unroll]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from analyses import _shared
from analyses._timing import BENCH_RESULTS, check_json_folder, interleaved_medians, table, write_table
from interp import _arguments as arguments
from interp._runtime import tune_allocator
from interp.model import KMeansTransformer
from interp.model.embedding import centroid_codes
from interp.tasks import init_centroids, sample_tasks
from interp.training.losses import smoothed_loss
from interp.training.state import optimiser_and_schedule
from interp.training.train import TrainConfig, train

PROG = "python -m analyses.bench_training"
ROOT = _shared.ROOT  # the repository root: `python -m analyses.<name>` runs from it


class ReferenceAttention(nn.Module):
    """Authors'-style Euclidean attention: cdist, nn.Linear, materialised softmax, dropout on the pattern."""

    def __init__(self, width: int, gamma: float = 1.0, dropout: float = 0.01):
        super().__init__()
        self.query, self.key, self.value = nn.Linear(width, width), nn.Linear(width, width), nn.Linear(width, width)
        self.scale = gamma / math.sqrt(width)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys):
        distances = torch.cdist(self.query(queries), self.key(keys)) ** 2  # (b, q, r)
        pattern = self.dropout(torch.softmax(-self.scale * distances, dim=-1))  # (b, q, r)
        return pattern @ self.value(keys)  # (b, q, D)


class ReferenceModel(nn.Module):
    """One layer: X + A1(X, C) + A2(X, X), then C + A3(C, X') + A4(C, C); output the first d features."""

    def __init__(self, d: int, k: int, dropout: float = 0.01):
        super().__init__()
        self.d, self.k = d, k
        width = d + k
        self.attn = nn.ModuleList([ReferenceAttention(width, dropout=dropout) for _ in range(4)])
        self.register_buffer("codes", centroid_codes(k, "onehot", torch.float32))

    def forward(self, points, centroids):
        x = torch.cat([points, points.new_zeros(points.shape[:2] + (self.k,))], dim=-1)
        c = torch.cat([centroids, self.codes.expand(centroids.shape[0], -1, -1)], dim=-1)
        x = x + self.attn[0](x, c) + self.attn[1](x, x)
        c = c + self.attn[2](c, x) + self.attn[3](c, c)
        return c[..., : self.d]


def reference_loss(points, centroids, tau):
    r = torch.cdist(points, centroids) ** 2  # (b, n, k)
    return (torch.softmax(-r / tau, dim=-1) * r).sum(dim=(1, 2)).mean()


def make_steps(config: TrainConfig, n_batches: int = 4, steps: int = 1):
    generator = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(n_batches):
        points = sample_tasks(config.task_config, config.batch, generator).points
        batches.append((points, init_centroids(points, config.k, "first")))
    ours = KMeansTransformer(config.model_config()).train()
    reference = ReferenceModel(config.d, config.k, config.dropout).train()
    opt_ours = optimiser_and_schedule(ours, config)[0]  # the training runs' Adam
    opt_ref = torch.optim.Adam(reference.parameters(), lr=config.lr)
    counter = {"ours": 0, "reference": 0}

    def step_ours():  # the phases are named for --profile (record_function costs ~1 us when nothing profiles)
        points, init = batches[counter["ours"] % n_batches]
        counter["ours"] += 1
        with record_function("phase: forward"):
            centroids = ours(points, init, steps=steps).centroids  # (b, k, d): ``steps`` re-embedded steps
        with record_function("phase: loss"):
            loss = smoothed_loss(points, centroids, config.tau, config.loss, validate=False)  # as the training loop
        with record_function("phase: backward"):
            opt_ours.zero_grad(set_to_none=True)
            loss.backward()
        with record_function("phase: Adam"):
            opt_ours.step()

    def step_reference():
        points, init = batches[counter["reference"] % n_batches]
        counter["reference"] += 1
        loss = reference_loss(points, reference(points, init), config.tau)
        opt_ref.zero_grad(set_to_none=True)
        loss.backward()
        opt_ref.step()

    return step_ours, step_reference


def peak_memory_mb(which: str, quick: bool) -> float:
    code = f"""
import sys, torch
torch.set_num_threads(2)
from analyses.studies.bench_training.measure import make_steps, _config
from analyses._timing import peak_memory_growth_mb
ours, ref = make_steps(_config({quick}))
step = {'ours' if which == 'ours' else 'ref'}
step()  # first step: optimiser state and allocator warm-up are not the step's working memory
print(peak_memory_growth_mb(lambda: [step() for _ in range(3)]))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def _config(quick: bool) -> TrainConfig:
    if quick:
        return TrainConfig(d=4, k=3, n=64, batch=8, val_tasks=16, eval_every=10, steps=20)
    return TrainConfig()


def bench_small(rounds: int, quick: bool) -> tuple[str, list[str], list[list[str]]]:
    """Per-step seconds at the studies' sizes: ours, ours without the block-step kernel, the reference; 1 and 2
    threads."""
    from interp.model.kernels import dispatch

    sizes = [TrainConfig(d=4, k=3, n=64, batch=8)] if quick else [TrainConfig(d=4, k=6, n=128),
                                                                   TrainConfig(d=32, k=6, n=128)]
    rows = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for config in sizes:
            ours, reference = make_steps(config)
            per_attention, _ = make_steps(config)

            def without_block_step(step=per_attention):
                with dispatch.without("training_step"):
                    step()

            medians = interleaved_medians({"ours": ours, "per-attention": without_block_step, "reference": reference},
                                          rounds=rounds)
            base = medians["ours"]
            rows.append([f"d={config.d} k={config.k} n={config.n}", str(threads), f"{base * 1e3:.2f}",
                         f"{medians['per-attention'] * 1e3:.2f}", f"{medians['reference'] * 1e3:.2f}",
                         f"{medians['per-attention'] / base:.2f}", f"{medians['reference'] / base:.2f}"])
    title = (f"torch {torch.__version__}; one training step (forward, smoothed loss, backward, Adam), batch "
             f"{sizes[0].batch}, one-hot, dropout {sizes[0].dropout}; {rounds} interleaved rounds, medians")
    header = ["size", "threads", "interp ms", "interp without block-step kernel ms", "reference ms",
              "without kernel / interp", "reference / interp"]
    return title, header, rows


UNROLLS = (1, 2, 4, 8)


def unroll_peak_mb(steps: int, quick: bool) -> float:
    """Peak resident memory (MB) that the first training step with ``steps`` re-embedded steps adds, in a fresh
    process, after a warm-up step at a tiny size (library start-up is not the step's memory)."""
    size = "d=4, k=3, n=64, batch=8" if quick else "d=4, k=6, n=128"
    code = f"""
import torch
torch.set_num_threads(2)
from analyses.studies.bench_training.measure import make_steps
from analyses._timing import peak_memory_growth_mb
from interp.training.train import TrainConfig
make_steps(TrainConfig(d=4, k=3, n=16, batch=2), steps={steps})[0]()
step = make_steps(TrainConfig({size}), steps={steps})[0]
print(peak_memory_growth_mb(step))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def bench_unroll(rounds: int, quick: bool) -> tuple[str, list[str], list[list[str]]]:
    """Unrolled training at the studies' size: ms per step and peak memory for T re-embedded steps, against T x
    those of one step; 2 threads."""
    config = TrainConfig(d=4, k=3, n=64, batch=8) if quick else TrainConfig(d=4, k=6, n=128)
    torch.set_num_threads(2)
    steps = {unroll: make_steps(config, steps=unroll)[0] for unroll in UNROLLS}
    medians = interleaved_medians({str(unroll): step for unroll, step in steps.items()}, rounds=rounds)
    memory = {unroll: unroll_peak_mb(unroll, quick) for unroll in UNROLLS}
    one_ms, one_mb = medians["1"], memory[1]
    rows = [[str(unroll), f"{medians[str(unroll)] * 1e3:.2f}", f"{medians[str(unroll)] / (unroll * one_ms):.2f}",
             f"{memory[unroll]:.1f}", f"{memory[unroll] / (unroll * one_mb):.2f}"] for unroll in UNROLLS]
    title = (f"torch {torch.__version__}, 2 threads; one training step with the loss after T re-embedded steps, "
             f"d={config.d}, k={config.k}, n={config.n}, batch {config.batch}, one-hot, dropout {config.dropout}; "
             f"{rounds} interleaved rounds, medians; peak MB = peak resident memory the first such step adds, in a "
             "fresh process")
    header = ["T", "ms/step", "ms / (T x one step)", "peak MB", "peak / (T x one step)"]
    return title, header, rows


PHASES = ("forward", "loss", "backward", "Adam")


def profile_small(steps: int, quick: bool) -> tuple[str, list[str], list[list[str]]]:
    """Where a step's time goes at the studies' sizes: torch.profiler over ``steps`` steps of our
    step, one thread; each phase's share of the profiled step, the aten operators dispatched per step (nested ones
    included) and the three operators with the most self time. The profiler adds its own cost per operator, so the
    unprofiled median step of the same run is printed beside the shares."""
    sizes = [TrainConfig(d=4, k=3, n=64, batch=8)] if quick else [TrainConfig(d=4, k=6, n=128),
                                                                   TrainConfig(d=32, k=6, n=128)]
    torch.set_num_threads(1)
    rows = []
    for config in sizes:
        step, _ = make_steps(config)
        plain_ms = interleaved_medians({"ours": step}, rounds=max(3, steps // 10))["ours"] * 1e3
        for _ in range(3):
            step()  # warm-up outside the profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                step()
        events = {event.key: event for event in prof.key_averages()}
        phase_us = {name: events[f"phase: {name}"].cpu_time_total / steps for name in PHASES}  # per step
        total_us = sum(phase_us.values())
        aten = [event for key, event in events.items() if key.startswith("aten::")]
        ops_per_step = sum(event.count for event in aten) / steps
        top = sorted(aten, key=lambda event: event.self_cpu_time_total, reverse=True)[:3]
        rows.append([f"d={config.d} k={config.k} n={config.n}", f"{plain_ms:.2f}", f"{total_us / 1e3:.2f}",
                     *(f"{100 * phase_us[name] / total_us:.0f}%" for name in PHASES), f"{ops_per_step:.0f}",
                     ", ".join(f"{event.key.removeprefix('aten::')} {event.self_cpu_time_total / steps / 1e3:.2f}"
                               for event in top)])
    title = (f"torch {torch.__version__}; where one training step's time goes (forward, smoothed loss, backward, "
             f"Adam), batch {sizes[0].batch}, one-hot, dropout {sizes[0].dropout}, 1 thread; torch.profiler over "
             f"{steps} steps")
    header = ["size", "step ms", "profiled ms", *(f"{name} share" for name in PHASES), "aten ops/step",
              "most self time (ms/step)"]
    return title, header, rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=arguments.positive_int, default=20)
    parser.add_argument("--loop-steps", type=arguments.positive_int, default=200,
                        help="steps of the real training loop to time")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (used by the test suite)")
    parser.add_argument("--json", default=str(BENCH_RESULTS), metavar="DIR", help="where the table is stored")
    parser.add_argument("--no-json", action="store_true", help="do not store the table")
    parser.add_argument("--small", action="store_true", help="only the studies' sizes table (d=4 and d=32, n=128)")
    parser.add_argument("--profile", action="store_true", help="only where a step's time goes at the studies' sizes")
    parser.add_argument("--unroll", action="store_true", help="only unrolled training: T re-embedded steps vs T x one")
    args = parser.parse_args(argv)
    tables = {  # one table only: its stored name and the function that measures it
        "profile": ("training_profile", lambda: profile_small(10 if args.quick else 200, args.quick)),
        "unroll": ("training_unroll", lambda: bench_unroll(args.rounds, args.quick)),
        "small": ("training_small", lambda: bench_small(args.rounds, args.quick)),
    }
    only = next((flag for flag in tables if getattr(args, flag)), None)
    json_folder = check_json_folder(args, [f"{tables[only][0] if only else 'training'}.json"])
    tune_allocator()
    if only is not None:
        name, measure = tables[only]
        title, header, rows = measure()
        print(title)
        print(table(rows, header))
        write_table(json_folder, name, title, header, rows, None)
        return
    torch.set_num_threads(2)
    config = _config(args.quick)
    step_ours, step_reference = make_steps(config)
    medians = interleaved_medians({"interp": step_ours,
                                   "reference (cdist, Linear, softmax, Dropout)": step_reference}, rounds=args.rounds)
    ours, reference = medians.values()
    memory = {"ours": peak_memory_mb("ours", args.quick), "reference": peak_memory_mb("reference", args.quick)}
    title = (f"torch {torch.__version__}, 2 threads; batch {config.batch}, n={config.n}, d={config.d}, k={config.k}, "
             f"one-hot, dropout {config.dropout}; {args.rounds} interleaved rounds, medians")
    header = ["formulation", "s/step", "x interp time", "peak MB"]
    rows = [["interp", f"{ours:.4f}", "1.00", f"{memory['ours']:.0f}"],
            ["reference", f"{reference:.4f}", f"{reference / ours:.2f}", f"{memory['reference']:.0f}"]]
    print(title)
    print(table(rows, header))
    loop_config = TrainConfig(**{**config.__dict__, "steps": args.loop_steps})
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        train(loop_config, f"{folder}/run.safetensors", resume=False, progress=False)
        elapsed = time.perf_counter() - start
    per_step = elapsed / args.loop_steps
    # a full run is timed as a whole (set-up included); a shorter one is scaled up, set-up and all
    length = (f"measured 10,000 steps: {elapsed / 60:.1f} min" if args.loop_steps == 10_000 else
              f"projected 10,000 steps: {per_step * 10_000 / 60:.1f} min")
    footer = (f"real training loop: {args.loop_steps} steps in {elapsed:.1f} s ({per_step:.4f} s/step incl. "
              f"validation every {config.eval_every} steps and checkpoints); {length}")
    print(footer)
    write_table(json_folder, "training", title, header, rows, footer)


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
