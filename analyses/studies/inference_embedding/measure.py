"""Inference benchmark.

1. Batch of 64 tasks, n=1024, d=8, k=16, 10 layers, float32, at 1 and 2 threads: the Lloyd construction's
   plain forward vs the batched reference Lloyd vs scikit-learn's KMeans looped over the tasks, and
   run_with_cache vs a plain forward. All timed in the same run, interleaved; medians and ratios.
2. One-hot vs binary embedding (paper 2 Table 1): forward time and peak memory of the one-layer learnable
   model (dense D x D weights, as trained), d=32, n=1024, 32 tasks, k in {6, 25, 100, 400, 1000}. Peak
   memory is the growth of the peak resident set of a fresh process running one forward.

3. One large task: n = 1,000,000, d = 10, k = 50, 10 layers, float32, batch 1: the Lloyd construction's
   plain forward (its points stream held labelled, never (n, D)) vs the reference Lloyd, medians of interleaved
   rounds, and the peak memory of each (peak-RSS growth of a fresh process running one call).

4. The papers' evaluation forward: T = 20 re-embedded steps of the shipped one-hot model (d = 32, k = 10) on 64 tasks
   of n = 512, float32, at 1 and 2 threads: interp's forward (the points self-attention computed once and reused by
   every step, ``interp.model.kernels.dispatch.reused_points_attention``) vs the same forward recomputing it at every
   step (``dispatch.without("reused_points_attention")``, which keeps every other kernel) vs the reference Lloyd's 20
   iterations; the footer says whether both forwards gave the same trajectories bit for bit.

5. ``--profile`` (only this table): where the time of table 1's forward, Lloyd and run_with_cache goes, at table 1's
   sizes, 1 and 2 threads: the unprofiled median of each, the aten operators each dispatches per call (nested ones
   included; torch.profiler), the four with the most self time, and for run_with_cache the entries and megabytes of
   the cache it returns.

Each printed table is also stored, cells as printed, in analyses/results/bench/inference_lloyd.json,
inference_large.json, inference_embeddings.json, inference_evaluation.json and inference_profile.json (``--json DIR``
elsewhere, ``--no-json`` not at all), from which the overview of analyses/RESULTS.md quotes it. The titles of the
Lloyd and profile tables give the machine's load average when the table began (``os.getloadavg``): other work on the
machine slows every competitor of a run alike, but not every run alike.

Run: .venv/bin/python -m analyses.studies.inference_embedding.measure [--rounds R] [--quick]
[--large-only | --no-large | --lloyd-only | --evaluation-only | --embeddings-only | --profile]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import torch
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits
from torch.profiler import ProfilerActivity, profile

from analyses import _shared, _studies
from analyses._timing import BENCH_RESULTS, check_json_folder, interleaved_medians, stored_table, table, write_table
from interp import _arguments as arguments
from interp._checks import InvalidInput, check_output_file
from interp._runtime import tune_allocator
from interp.algorithms import lloyd
from interp.model import KMeansTransformer, ModelConfig
from interp.model.checkpoint import load_model
from interp.model.constructions import lloyd_transformer
from interp.model.kernels import dispatch
from interp.tasks import TaskConfig, init_centroids, sample_tasks

PROG = "python -m analyses.bench_inference"
ROOT = _shared.ROOT  # the repository root: `python -m analyses.<name>` runs from it


def _lloyd_table_inputs(batch: int, n: int, d: int, k: int, layers: int):
    """Table 1's tasks (b, n, d) float32, their random initial centroids (b, k, d) and the Lloyd construction."""
    points = sample_tasks(TaskConfig(n=n, d=d, k=k), batch, 0).points  # (b, n, d) float32
    init = init_centroids(points, k, "random", 1)  # (b, k, d)
    return points, init, lloyd_transformer(d, k, n_layers=layers, dtype=torch.float32)


def bench_lloyd_vs_transformer(threads: int, rounds: int, batch: int, n: int, d: int, k: int, layers: int) -> list[str]:
    torch.set_num_threads(threads)
    points, init, model = _lloyd_table_inputs(batch, n, d, k, layers)
    points_np, init_np = points.numpy().astype("float64"), init.numpy().astype("float64")

    def sklearn_loop():
        with threadpool_limits(threads):
            for b in range(batch):
                KMeans(k, init=init_np[b], n_init=1, max_iter=layers, tol=0, algorithm="lloyd").fit(points_np[b])

    with torch.inference_mode():
        medians = interleaved_medians({
            "transformer forward": lambda: model(points, init),
            "reference Lloyd": lambda: lloyd(points, init, layers),
            "transformer run_with_cache": lambda: model.run_with_cache(points, init),
            "sklearn KMeans loop": sklearn_loop,
        }, rounds=rounds)
    base = medians["transformer forward"]
    return [
        [str(threads), name, f"{seconds * 1e3:.1f}", f"{seconds / base:.2f}"] for name, seconds in medians.items()
    ]


def profile_lloyd_table(threads: int, rounds: int, batch: int, n: int, d: int, k: int, layers: int) -> list[list[str]]:
    """Where the time of table 1's competitors goes at ``threads``: per competitor the unprofiled median ms (interleaved
    rounds), the aten operators dispatched per call (nested ones included) and the four with the most self time (ms
    per call, under the profiler, which adds its own cost per operator); for run_with_cache also its cache's entries
    and megabytes."""
    torch.set_num_threads(threads)
    points, init, model = _lloyd_table_inputs(batch, n, d, k, layers)
    competitors = {"transformer forward": lambda: model(points, init),
                   "reference Lloyd": lambda: lloyd(points, init, layers),
                   "transformer run_with_cache": lambda: model.run_with_cache(points, init)}
    rows = []
    with torch.inference_mode():
        medians = interleaved_medians(competitors, rounds=rounds)
        _, cache = model.run_with_cache(points, init)
        cache_mb = sum(tensor.numel() * tensor.element_size() for tensor in cache.values()) / 2**20
        for name, run in competitors.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(rounds):
                    run()
            aten = [event for event in prof.key_averages() if event.key.startswith("aten::")]
            top = sorted(aten, key=lambda event: event.self_cpu_time_total, reverse=True)[:4]
            cache_cell = f"{len(cache)} entries, {cache_mb:.1f} MB" if "cache" in name else ""
            rows.append([str(threads), name, f"{medians[name] * 1e3:.1f}",
                         f"{sum(event.count for event in aten) / rounds:.0f}",
                         ", ".join(f"{event.key.removeprefix('aten::')} {event.self_cpu_time_total / rounds / 1e3:.1f}"
                                   for event in top), cache_cell])
    return rows


def _forward_once(embedding: str, k: int, d: int, n: int, batch: int) -> None:
    model = KMeansTransformer(ModelConfig(d=d, k=k, embedding=embedding, n_layers=1)).eval()
    points = torch.rand(batch, n, d)
    init = points[:, :k].clone()
    with torch.inference_mode():
        model(points, init)


def peak_memory_mb(embedding: str, k: int, d: int, n: int, batch: int) -> float:
    """Peak resident memory (MB) that one forward adds, measured in a fresh process."""
    code = f"""
import torch, sys
torch.set_num_threads(1)
from analyses.studies.inference_embedding.measure import _forward_once
from analyses._timing import peak_memory_growth_mb
_forward_once('onehot', 6, 4, 64, 2)  # warm the imports
print(peak_memory_growth_mb(lambda: _forward_once({embedding!r}, {k}, {d}, {n}, {batch})))
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return float(result.stdout.strip().splitlines()[-1])


def _large_task(n: int, d: int, k: int):
    """One task (1, n, d) float32 and k random initial centroids (1, k, d), the same in every process."""
    points = sample_tasks(TaskConfig(n=n, d=d, k=k), 1, 0).points  # (1, n, d)
    return points, init_centroids(points, k, "random", 1)  # (1, k, d)


def _large_once(competitor: str, n: int, d: int, k: int, layers: int) -> None:
    points, init = _large_task(n, d, k)
    model = lloyd_transformer(d, k, n_layers=layers, dtype=torch.float32)
    with torch.inference_mode():
        if competitor == "transformer":
            model(points, init)
        else:
            lloyd(points, init, layers)


def large_peak_memory_mb(competitor: str, n: int, d: int, k: int, layers: int) -> float:
    """Peak resident memory (MB) one call adds (inputs and model built before the measurement), in a fresh process."""
    code = f"""
import torch
torch.set_num_threads(1)
from analyses.studies.inference_embedding.measure import _large_task, lloyd, lloyd_transformer
from analyses._timing import peak_memory_growth_mb
points, init = _large_task({n}, {d}, {k})
model = lloyd_transformer({d}, {k}, n_layers={layers}, dtype=torch.float32)
with torch.inference_mode():
    small = points[:, :1000].clone(), init.clone()
    model(*small), lloyd(*small, {layers})  # warm the imports and kernels
    run = (lambda: model(points, init)) if {competitor!r} == "transformer" else (lambda: lloyd(points, init, {layers}))
    print(peak_memory_growth_mb(run))
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return float(result.stdout.strip().splitlines()[-1])


def bench_large(threads: int, rounds: int, memory: dict[str, float], n: int, d: int, k: int,
                layers: int) -> list[list[str]]:
    """The construction's forward vs the reference Lloyd on one task of n points: median ms, ratio, and the peak MB
    of ``memory`` (per competitor, from ``large_peak_memory_mb``: one thread, so the same for every thread count)."""
    torch.set_num_threads(threads)
    points, init = _large_task(n, d, k)
    model = lloyd_transformer(d, k, n_layers=layers, dtype=torch.float32)
    with torch.inference_mode():
        medians = interleaved_medians({
            "construction forward": lambda: model(points, init),
            "batched Lloyd": lambda: lloyd(points, init, layers),
        }, rounds=rounds, warmup=1)
    input_mb = points.numel() * points.element_size() / 2**20
    base = medians["batched Lloyd"]
    return [[str(threads), name, f"{seconds * 1e3:.0f}", f"{seconds / base:.2f}", f"{memory[name]:.0f}",
             f"{memory[name] / input_mb:.1f}"] for name, seconds in medians.items()]


def bench_evaluation(threads: int, rounds: int, batch: int, n: int, d: int, k: int,
                     steps: int) -> tuple[list[list[str]], bool]:
    """The evaluation forward (``steps`` re-embedded steps; the shipped main-onehot at d = 32, k = 10, else a freshly
    initialised one-layer model) with the points self-attention reused vs recomputed at every step, and Lloyd's
    ``steps`` iterations: rows (threads, competitor, median ms, x Lloyd) and whether both forwards' centroid and
    label trajectories are identical."""
    torch.set_num_threads(threads)
    points = sample_tasks(TaskConfig(n=n, d=d, k=k), batch, 0).points  # (b, n, d) float32
    init = init_centroids(points, k, "random", 1)  # (b, k, d)
    model = (load_model("main-onehot") if (d, k) == (32, 10)
             else KMeansTransformer(ModelConfig(d=d, k=k, reembed=True, input_range=(0.0, 1.0)))).eval()
    model._ensure_blocks(steps)

    def recomputed():
        with dispatch.without("reused_points_attention"):
            return model(points, init, steps=steps, reembed=True)

    with torch.inference_mode():
        reused = lambda: model(points, init, steps=steps, reembed=True)  # noqa: E731
        medians = interleaved_medians({"interp forward (attn_xx once)": reused,
                                       "forward recomputing attn_xx": recomputed,
                                       "Lloyd iterations": lambda: lloyd(points, init, steps)}, rounds=rounds, warmup=1)
        first, second = reused(), recomputed()
    same = (torch.equal(first.centroid_trajectory, second.centroid_trajectory)
            and torch.equal(first.assignment_trajectory, second.assignment_trajectory))
    base = medians["Lloyd iterations"]
    return [[str(threads), name, f"{seconds * 1e3:.1f}", f"{seconds / base:.2f}"]
            for name, seconds in medians.items()], same


def bench_embeddings(rounds: int, ks: list[int], d: int, n: int, batch: int, threads: int) -> list[str]:
    torch.set_num_threads(threads)
    rows = []
    for k in ks:
        points = torch.rand(batch, n, d)
        init = points[:, :k].clone()
        models = {e: KMeansTransformer(ModelConfig(d=d, k=k, embedding=e, n_layers=1)).eval()
                  for e in ("onehot", "binary")}
        with torch.inference_mode():
            medians = interleaved_medians({e: (lambda m=m: m(points, init)) for e, m in models.items()}, rounds=rounds)
        memory = {e: peak_memory_mb(e, k, d, n, batch) for e in models}
        rows.append([
            str(k), f"{models['onehot'].config.scratch_width}/{models['binary'].config.scratch_width}",
            f"{medians['onehot'] * 1e3:.2f}/{medians['binary'] * 1e3:.2f}",
            f"{medians['onehot'] / medians['binary']:.2f}x",
            f"{memory['onehot']:.0f}/{memory['binary']:.0f}",
            f"{100 * (1 - memory['binary'] / memory['onehot']):.1f}%" if memory["onehot"] > 0 else "n/a",
        ])
    return rows


def _load() -> str:
    """The machine's 1-minute load average now, for a table's title ("" where the platform has none)."""
    try:
        return f"; load average {os.getloadavg()[0]:.2f} at the start"
    except (AttributeError, OSError):
        return ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=arguments.positive_int, default=15)
    parser.add_argument("--embedding-rounds", type=arguments.positive_int, default=3,
                        help="rounds for the k up to 1000 table")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (used by the test suite)")
    parser.add_argument("--embeddings-only", action="store_true", help="only the one-hot vs binary table")
    parser.add_argument("--large-only", action="store_true", help="only the one-task n = 1,000,000 table")
    parser.add_argument("--no-large", action="store_true", help="leave out the one-task n = 1,000,000 table")
    parser.add_argument("--lloyd-only", action="store_true",
                        help="only the construction forward vs Lloyd table (b=64, n=1024, d=8, k=16, 10 layers)")
    parser.add_argument("--evaluation-only", action="store_true",
                        help="only the evaluation forward table (20 re-embedded steps, attn_xx reused vs recomputed)")
    parser.add_argument("--profile", action="store_true",
                        help="only where the forward's, Lloyd's and run_with_cache's time goes (table 1's sizes)")
    parser.add_argument("--large-rounds", type=arguments.positive_int, default=3,
                        help="rounds for the n = 1,000,000 table")
    parser.add_argument("--json", default=str(BENCH_RESULTS), metavar="DIR", help="where the tables are stored")
    parser.add_argument("--no-json", action="store_true", help="do not store the tables")
    parser.add_argument("--results-md", nargs="?", const=str(_studies.RESULTS_MD),
                        default=None, metavar="PATH", help="put the one-hot vs binary table into analyses/RESULTS.md")
    args = parser.parse_args(argv)
    json_folder = check_json_folder(args, ["inference_large.json", "inference_lloyd.json", "inference_embeddings.json",
                                           "inference_evaluation.json", "inference_profile.json"])
    only = [flag for flag in ("embeddings_only", "large_only", "lloyd_only", "evaluation_only", "profile")
            if getattr(args, flag)]
    if len(only) > 1:
        raise InvalidInput(f"--{only[0].replace('_', '-')} and --{only[1].replace('_', '-')} exclude each other")
    if args.results_md:
        check_output_file(args.results_md, "--results-md")
    if args.quick:
        sizes = dict(batch=4, n=64, d=4, k=5, layers=3)
        ks, emb = [25], dict(d=8, n=64, batch=4)
        large = dict(n=20_000, d=4, k=5, layers=3)
        evaluation = dict(batch=4, n=64, d=4, k=5, steps=4)
    else:
        sizes = dict(batch=64, n=1024, d=8, k=16, layers=10)
        ks, emb = [6, 25, 100, 400, 1000], dict(d=32, n=1024, batch=32)
        large = dict(n=1_000_000, d=10, k=50, layers=10)
        evaluation = dict(batch=64, n=512, d=32, k=10, steps=20)
    tune_allocator()
    if args.profile:
        title = (f"torch {torch.__version__}; where the time goes, sizes {json.dumps(sizes)}{_load()}; unprofiled "
                 f"medians of {args.rounds} interleaved rounds; aten operators per call (nested included) and the four "
                 "with the most self time (ms per call under torch.profiler)")
        print(title)
        rows = [row for threads in (1, 2) for row in profile_lloyd_table(threads, args.rounds, **sizes)]
        header = ["threads", "competitor", "median ms", "aten ops/call", "most self time (ms)", "cache"]
        print(table(rows, header))
        write_table(json_folder, "inference_profile", title, header, rows)
        return
    if args.evaluation_only or not (args.embeddings_only or args.large_only or args.lloyd_only):
        evaluation_title = (f"torch {torch.__version__}; the evaluation forward, {json.dumps(evaluation)}, float32; "
                            f"{args.rounds} interleaved rounds, medians")
        print(evaluation_title)
        evaluation_rows, same = [], []
        for threads in (1, 2):
            rows, identical = bench_evaluation(threads, args.rounds, **evaluation)
            evaluation_rows += rows
            same.append(identical)
        evaluation_header = ["threads", "competitor", "median ms", "x Lloyd"]
        footer = ("centroid and label trajectories of both forwards identical: "
                  + ("yes" if all(same) else "NO") + " (1 and 2 threads)")
        print(table(evaluation_rows, evaluation_header))
        print(footer)
        print()
        write_table(json_folder, "inference_evaluation", evaluation_title, evaluation_header, evaluation_rows, footer)
        if args.evaluation_only:
            return
    if not (args.embeddings_only or args.lloyd_only or args.no_large):
        large_title = (f"one task, {json.dumps(large)}, float32, batch 1; {args.large_rounds} interleaved rounds, "
                       "medians; peak MB = peak-RSS growth of a fresh process running one call (1 thread)")
        print(large_title)
        large_rows = []
        memory = {"construction forward": large_peak_memory_mb("transformer", **large),
                  "batched Lloyd": large_peak_memory_mb("lloyd", **large)}  # one thread: measured once
        for threads in (1, 2):
            large_rows += bench_large(threads, args.large_rounds, memory, **large)
        large_header = ["threads", "competitor", "median ms", "x Lloyd", "peak MB", "peak / input"]
        print(table(large_rows, large_header))
        print()
        write_table(json_folder, "inference_large", large_title, large_header, large_rows)
        if args.large_only:
            return
    if not args.embeddings_only:
        title = (f"torch {torch.__version__}; sizes {json.dumps(sizes)}{_load()}; {args.rounds} interleaved rounds, "
                 "medians")
        print(title)
        rows = []
        for threads in (1, 2):
            rows += bench_lloyd_vs_transformer(threads, args.rounds, **sizes)
        header = ["threads", "competitor", "median ms", "x transformer"]
        print(table(rows, header))
        print()
        write_table(json_folder, "inference_lloyd", title, header, rows)
        if args.lloyd_only:
            return
    title = (f"one-hot vs binary, one-layer learnable model, {json.dumps(emb)}, 2 threads, median of "
             f"{args.embedding_rounds} interleaved rounds (paper 2 Table 1)")
    print(title)
    embedding_rows = bench_embeddings(args.embedding_rounds, ks, threads=2, **emb)
    header = ["k", "extra dims OH/BN", "forward ms OH/BN", "speed-up", "peak MB OH/BN", "memory saved"]
    print(table(embedding_rows, header))
    write_table(json_folder, "inference_embeddings", title, header, embedding_rows)
    if args.results_md:
        write_embedding_section(embedding_rows, header, emb, args.embedding_rounds, Path(args.results_md),
                                stored_table(title, header, embedding_rows))


PAPER_TABLE_1 = {  # paper 2 Table 1 (GPU; d = 32, 32 tasks, n = 1024): forward ms OH/BN [speed-up], memory saved
    6: ("4.25/4.83 [0.88x]", "0.9%"), 25: ("5.24/4.99 [1.05x]", "4.0%"), 100: ("9.76/4.52 [2.16x]", "16.1%"),
    400: ("38.68/7.89 [4.90x]", "51.5%"), 1000: ("193.07/15.90 [12.14x]", "69.3%"),
}


TABLE1_COLUMNS = ("study", "name", "label", "status", "k", "onehot_ms", "binary_ms", "speedup", "onehot_mb",
                  "binary_mb", "memory_saved", "title", "command", "config")


def _cell_numbers(text: str, suffix: str = "") -> list[float]:
    """The numbers of a printed cell ("53.13/41.66", "1.28x", "6.5%"); NaN for "n/a"."""
    if text == "n/a":
        return [math.nan]
    try:
        return [float(part.removesuffix(suffix)) for part in text.split("/")]
    except ValueError:
        raise InvalidInput(f"a Table 1 cell {text!r} is not a number{' with ' + suffix if suffix else ''}") from None


def table1_rows(data: dict) -> list[dict]:
    """The rows the claims of study ``table1`` (``analyses.claims``) read, one per k (``TABLE1_COLUMNS``), from the
    one-hot vs binary table as ``write_table`` stores it (inference_embeddings.json): the forward times (ms), the
    speed-up, the peak memory (MB) and the memory saved (%) as numbers, and the run's title and command (which say
    how it was timed)."""
    try:
        index = {name: data["header"].index(name) for name in ("k", "forward ms OH/BN", "speed-up", "peak MB OH/BN",
                                                                "memory saved")}
        title, command, cells = str(data["title"]), str(data["command"]), data["rows"]
    except (KeyError, ValueError, TypeError) as error:
        raise InvalidInput(f"not the stored one-hot vs binary table (inference_embeddings.json): {error}") from None
    rows = []
    for cell in cells:
        try:
            k = int(cell[index["k"]])
            onehot_ms, binary_ms = _cell_numbers(cell[index["forward ms OH/BN"]])
            onehot_mb, binary_mb = _cell_numbers(cell[index["peak MB OH/BN"]])
        except (ValueError, IndexError, TypeError):
            raise InvalidInput(f"a Table 1 row {cell!r} is not k, ..., one-hot/binary ms, ..., MB as printed") from None
        rows.append({"study": "table1", "name": f"k={k}", "label": f"k={k}", "status": "ok", "k": k,
                     "onehot_ms": onehot_ms, "binary_ms": binary_ms,
                     "speedup": _cell_numbers(cell[index["speed-up"]], "x")[0], "onehot_mb": onehot_mb,
                     "binary_mb": binary_mb, "memory_saved": _cell_numbers(cell[index["memory saved"]], "%")[0],
                     "title": title, "command": command, "config": json.dumps({"k": k})})
    return rows


def write_embedding_section(rows: list[list[str]], header: list[str], sizes: dict, rounds: int, path: Path,
                            stored: dict | None = None) -> None:
    """The one-hot vs binary table, with the paper's Table 1 beside it, as a RESULTS.md section; with ``stored``
    (the table as ``write_table`` stores it) also the claims of study ``table1`` decided by ``analyses.claims``."""
    from analyses import claims as C
    from analyses._studies import command_line, write_section

    lines = ["## One-hot vs binary embedding: inference time and memory (`python -m analyses.bench_inference`)", "",
             f"Command: `{command_line()}`  ",
             f"Budget: one-layer learnable model, {json.dumps(sizes)}, 2 threads, median of {rounds} interleaved "
             "rounds; peak memory = peak-RSS growth of a fresh process (CPU), the paper's is GPU memory", "",
             "| " + " | ".join(header) + " | paper 2 Table 1 forward ms OH/BN [speed-up] | paper memory saved |",
             "|" + "---|" * (len(header) + 2)]
    for row in rows:
        paper = PAPER_TABLE_1.get(int(row[0]), ("n/a", "n/a"))
        lines.append("| " + " | ".join(row) + f" | {paper[0]} | {paper[1]} |")
    speedups = [float(row[3].rstrip("x")) for row in rows]
    grows = all(b >= a for a, b in zip(speedups, speedups[1:]))
    lines += ["", f"Measured: the binary speed-up {'grows' if grows else 'does not grow monotonically'} with k "
              f"({speedups[0]:.2f}x at k = {rows[0][0]} to {speedups[-1]:.2f}x at k = {rows[-1][0]}); the paper's "
              f"GPU speed-up goes from 0.88x at k = 6 to 12.14x at k = 1000."]
    if stored is not None:
        lines += ["", C.RULES_LINE, "", *C.verdict_lines(C.decide_study("table1", table1_rows(stored)))]
    write_section("inference_embedding", "\n".join(lines) + "\n", path)


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
