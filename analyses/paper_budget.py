"""The learning studies at the papers' budget: 10,000 steps, the authors' first five seeds, n = 128, and the
contested cells again at the papers' n = 512.

Replaced by ``python -m analyses run all --budget paper`` (the campaign of analyses/framework/budgets.py, each
study's grid points as Ray tasks); this module and its lanes are kept for this release.

First the cells whose verdicts go against the paper at n = 128, at n = 512 (embedding at d = 4, k = 16; the
stability study at d = 32, k = 25; one command per embedding and seed, so that each finished seed is a committed
row); they also decide whether n matters at d = 4, k = 16 (study n_d4k16). Then the main configuration's
10,000-step seeds (d = 32, k = 10, n = 512, one command per embedding and seed: ``analyses.main_seeds`` trains each
and scores its checkpoint at once into the multistep and generalisation rows, so no checkpoint has to outlive its
command). Then, in order: a: embedding width, b: tau x loss, c: d and k, d: training family with the
transfer grid, e: one-hot vs binary stability without gradient clipping at d = 32, k = 25, ten seeds; then the n and
lr studies at the same budget, and tau x loss at d = 32, their grids split over several commands. The commands run
on ``--lanes`` cores at once, one training thread per lane: each lane takes the next command when its current one
ends.
Every command is resumable (the sweep CSVs skip finished rows; a grid point's checkpoints resume where they stopped),
so re-running this module continues where an interrupted run stopped (Ctrl-C starts no further command and stops the
running ones, ``Lanes``), and on a fresh clone with every row committed
it only scores (no training). Commands run without ``--results-md`` (two lanes must not rewrite RESULTS.md at once),
and the parts of a split study (the n = 512 cells, n, lr, tau x loss at d = 32) with ``--train-only``, so that only the
study's section command writes its summary;
``--results-md`` runs them one at a time with it, which, once their rows are in, writes the sections from the
committed rows and curves.

Run: python -m analyses.paper_budget [--lanes 2] [--only embedding tau_loss ...] [--dry-run] [--results-md]
     [--score-only] (with --results-md: the sections of the rows written so far, a grid point without rows leaving
     its claims undecided by their controls; a study without any row yet stops with a message and writes nothing)
``--dry-run`` prints each command with the seed runs it would train now (the command's ``--plan``: the seeds whose
rows its table lacks), so what is left of the budget is read off the committed rows.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from analyses import _studies as S
from interp import _arguments as arguments
from interp._processes import preexec

PROG = "python -m analyses.paper_budget"
SEEDS = (153476998, 235510766, 205084180, 129959864, 149896109)  # the authors' first five (paper 2's code)
MORE_SEEDS = (140439608, 145017219, 162518970, 245293503, 152674004)  # their other five: the stability study
STEPS = 10_000
RESULTS = S.HERE / "results" / "studies"
COMMON = ["--steps", str(STEPS), "--eval-tasks", "320", "--workers", "1"]


def _seeds(seeds: tuple[int, ...]) -> list[str]:
    return ["--seeds", *map(str, seeds)]


def _embedding(pair: str) -> list[str]:
    return ["analyses.ablate_embedding", "--pairs", pair, "--n", "128", *_seeds(SEEDS), *COMMON]


def _study(name: str, *extra: str, seeds: tuple[int, ...] = SEEDS) -> list[str]:
    return ["analyses.studies", "--study", name, *extra, *_seeds(seeds), *COMMON]


def _at_paper_n(name: str, pair: str, embedding: str, seeds: tuple[int, ...] = SEEDS) -> list[str]:
    return ["analyses.ablate_embedding", "--name", name, "--pairs", pair, "--n", "512", "--embeddings", embedding,
            *_seeds(seeds), *COMMON]


# (study of analyses.claims, command after `python -m`), in order of priority; a long command last
COMMANDS: list[tuple[str, list[str]]] = [
    # the contested cells at the papers' n = 512 first: they decide the verdicts that go against the paper at n = 128
    # one seed per command (about 30 min each at n = 512), so that each finished seed is a committed row
    *(("embedding_n512", _at_paper_n("embedding_n512", "4x16", name, (seed,)))
      for name in ("onehot", "binary", "none") for seed in SEEDS),
    *(("stability_n512", _at_paper_n("stability_n512", "32x25", name, (seed,)))
      for name in ("onehot", "binary") for seed in SEEDS + MORE_SEEDS),
    # the main configuration's seeds (d = 32, k = 10, n = 512, 10,000 steps), one command per embedding and seed:
    # each trained (a row of embedding_d32_k10.csv) and scored at once into the multistep and generalisation rows
    *(("multistep", ["analyses.main_seeds", "--embeddings", name, *_seeds((seed,))])
      for name in ("onehot", "binary", "none") for seed in SEEDS),
    ("embedding", _embedding("4x6")),
    ("embedding", _embedding("4x16")),
    ("embedding", _embedding("32x6")),
    ("tau_loss", _study("tau_loss")),
    ("d", _study("d")),
    ("k", _study("k")),
    ("family", _study("family")),
    ("stability", ["analyses.ablate_embedding", "--name", "stability", "--pairs", "32x25", "--n", "128",
                   "--embeddings", "onehot", "binary", *_seeds(SEEDS + MORE_SEEDS), *COMMON]),
    # n at the papers' budget (is n = 128 enough? it decides every study above), then lr
    # (the papers: 5,000 steps; here the same 10,000 as the rest), split so that two lanes share them; n = 1024
    # (about 30 min a seed at one thread) one seed per command, so that each finished seed is a committed row
    ("n", _study("n", "--only-grid", "n=512")),
    ("n", _study("n", "--only-grid", "n=128,256")),
    *(("n", _study("n", "--only-grid", "n=1024", seeds=(seed,))) for seed in SEEDS),
    ("lr", _study("lr", "--only-grid", "lr=0.001,0.01")),
    ("lr", _study("lr", "--only-grid", "lr=0.1,1.0")),
    # tau x loss again at d = 32 (the papers' second dimension; its section's earlier runs: 3,000 steps, 3 seeds)
    *(("tau_loss_d32", _study("tau_loss", "--name", "tau_loss_d32", "--set", "d=32", "--only-grid", f"loss={loss}"))
      for loss in ("softmin", "sparsemax")),
]

# the studies whose training is split over several commands write their section from one command over the whole grid
SECTION_COMMANDS = {
    "n": _study("n"), "lr": _study("lr"), "tau_loss_d32": _study("tau_loss", "--name", "tau_loss_d32", "--set", "d=32"),
    "embedding_n512": ["analyses.ablate_embedding", "--name", "embedding_n512", "--pairs", "4x16", "--n", "512",
                       *_seeds(SEEDS), *COMMON],
    "stability_n512": ["analyses.ablate_embedding", "--name", "stability_n512", "--pairs", "32x25", "--n", "512",
                       "--embeddings", "onehot", "binary", *_seeds(SEEDS + MORE_SEEDS), *COMMON],
    "multistep": ["analyses.main_seeds", *_seeds(SEEDS)],  # the multistep_seeds and generalisation sections
}



def trains_rows_only(study: str, command: list[str]) -> bool:
    """Whether ``command`` trains one part of a split study (SECTION_COMMANDS), so runs with ``--train-only``: its rows
    and curves only, the study's summary and section left to the section command over the whole grid (a part
    would rewrite the committed ``<table>_training.json`` from its own rows). ``main_seeds`` trains so already."""
    return study in SECTION_COMMANDS and command[0] in ("analyses.studies", "analyses.ablate_embedding")


def section_commands(results_md: bool) -> list[tuple[str, list[str]]]:
    """COMMANDS, or with ``results_md`` (writing sections, or scoring only) one command per RESULTS.md section (a
    split study's whole grid, once)."""
    if not results_md:
        return COMMANDS
    out = []
    for study, command in COMMANDS:
        whole = (study, SECTION_COMMANDS.get(study, command))
        if whole not in out:
            out.append(whole)
    return out


def plan(command: list[str]) -> list[str]:
    """What ``command`` (a module and its arguments, as in COMMANDS) would train now: its ``--plan`` lines, one per
    table, computed in this process from the committed rows."""
    import importlib
    import io

    options = [option for option in command[1:] if option != "--train-only"]  # --plan excludes it
    with contextlib.redirect_stdout(io.StringIO()):
        module = importlib.import_module(command[0])  # a package runs its __main__ (analyses.studies)
        module = module if hasattr(module, "main") else importlib.import_module(f"{command[0]}.__main__")
        texts = module.main([*options, "--plan"])
    return [texts] if isinstance(texts, str) else list(texts)


def has_rows(study: str) -> bool:
    """Whether any table of ``study`` (its tables in ``analyses.claims.STUDIES``, else the table of its name) holds a
    row trained for STEPS steps."""
    from analyses import claims as C
    from interp.training.sweep import read_rows

    tables = C.STUDIES[study].tables if study in C.STUDIES else (study,)
    return any(json.loads(row["config"]).get("steps") == STEPS for table in tables
               for row in read_rows(RESULTS / f"{table}.csv") if "config" in row)


class Lanes:
    """The queue of (study, command) run on ``count`` lanes at once, each lane starting the next command when its
    current one ends. Each command runs in its own process group, so a terminal's Ctrl-C reaches this process only;
    an interrupt (Ctrl-C, SIGTERM or SIGHUP, as ``KeyboardInterrupt`` in ``run``) stops the lanes taking commands,
    sends each running command's process group (the command and its worker processes, as a terminal's Ctrl-C would)
    SIGINT once and waits for them to stop; a further interrupt while waiting sends SIGTERM, then SIGKILL. Every
    command is resumable, so the same run continues later where they stopped. SIGINT is caught even when this
    process started with it ignored (a background job of a shell without job control), so that ``kill -INT`` works
    and the commands, which would inherit the ignored SIGINT, start with it at its default. A command dies with this
    process however it ends, SIGKILL included (``interp._processes``, Linux: ``PR_SET_PDEATHSIG``, which follows the
    thread that started the command: its lane thread, which waits for it), and its worker processes with it."""

    ESCALATION = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)

    def __init__(self, queue: list[tuple[str, list[str]]], count: int, log) -> None:
        self.queue, self.count, self.log = list(queue), count, log
        self.lock, self.stopping = threading.Lock(), threading.Event()
        self.running: set[subprocess.Popen] = set()
        self.failures: list[tuple[str, int]] = []

    def _lane(self) -> None:
        while True:
            with self.lock:  # a command starts under the lock, so none starts once stopping is set
                if not self.queue or self.stopping.is_set():
                    return
                study, command = self.queue.pop(0)
                text = f"python -m {' '.join(command)}"
                print(f"[start] {study}: {text}", file=self.log, flush=True)
                child = subprocess.Popen([sys.executable, "-m", *command], stdout=self.log, stderr=subprocess.STDOUT,
                                         process_group=0, preexec_fn=preexec(os.getpid()))
                self.running.add(child)
            started = time.monotonic()
            code = child.wait()
            with self.lock:
                self.running.discard(child)
            print(f"[end {code}] {study} after {time.monotonic() - started:.0f} s: {text}", file=self.log, flush=True)
            if code != 0 and not self.stopping.is_set():
                self.failures.append((study, code))

    def _signal_running(self, signum: int) -> int:
        with self.lock:
            self.stopping.set()
            children = list(self.running)
        for child in children:  # to its whole process group, as a terminal's Ctrl-C: its worker processes too
            with contextlib.suppress(ProcessLookupError):  # a group whose processes have all ended
                os.killpg(child.pid, signum)
        return len(children)

    def run(self) -> list[tuple[str, int]]:
        """Run every command; the (study, exit code) of those that failed. Re-raises ``KeyboardInterrupt`` after
        the running commands stopped."""
        lanes = [threading.Thread(target=self._lane, daemon=True) for _ in range(self.count)]
        with _interrupted_by(signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGINT too: see the class
            for lane in lanes:
                lane.start()
            try:
                _wait_for(lanes)
                return self.failures
            except KeyboardInterrupt:
                count = self._signal_running(signal.SIGINT)
                print(f"interrupted: stopping {count} running command(s)", file=self.log, flush=True)
            for signum in self.ESCALATION[1:]:
                try:
                    _wait_for(lanes)
                    break
                except KeyboardInterrupt:  # interrupted again while waiting: insist
                    count = self._signal_running(signum)
                    print(f"interrupted again: {signal.Signals(signum).name} to {count} command(s)", file=self.log,
                          flush=True)
            else:
                _wait_for(lanes)  # SIGKILL was sent: they end at once
        raise KeyboardInterrupt


@contextmanager
def _interrupted_by(*signums: int) -> Iterator[None]:
    """Within the block, each of ``signums`` raises ``KeyboardInterrupt`` in the main thread as Ctrl-C does (only when
    called from the main thread; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, interrupt) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _wait_for(threads: list[threading.Thread]) -> None:
    """Until every thread has ended, polling (an interrupted ``Thread.join`` can return early when called again)."""
    while any(thread.is_alive() for thread in threads):
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lanes", type=arguments.positive_int, default=2, help="commands at once, one training "
                        "thread each")
    parser.add_argument("--only", nargs="*", default=None, choices=list(dict.fromkeys(study for study, _ in COMMANDS)),
                        help="studies to run (default: all, in order)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the commands only, each with the seed runs it would train now (its --plan)")
    parser.add_argument("--results-md", action="store_true",
                        help="one lane, each command with --results-md: write the RESULTS.md sections")
    parser.add_argument("--score-only", action="store_true",
                        help="each command with --score-only: train nothing, score the rows already written")
    args = parser.parse_args(argv)
    extra = ["--results-md"] * args.results_md + ["--score-only"] * args.score_only
    training = not (args.results_md or args.score_only)
    queue = [(study, command + extra + ["--train-only"] * (training and trains_rows_only(study, command)))
             for study, command in section_commands(not training)  # scoring: each split study's whole grid once
             if args.only is None or study in args.only]
    if args.score_only:  # a study none of whose rows exist yet has nothing to score: named, not run
        waiting = sorted({study for study, _ in queue if not has_rows(study)})
        if waiting:
            print(f"no rows at {STEPS} steps yet (nothing to score): {', '.join(waiting)}", flush=True)
        queue = [(study, command) for study, command in queue if study not in waiting]
    lanes = 1 if args.results_md else args.lanes
    if args.dry_run:
        for study, command in queue:
            plans = ["--score-only: trains nothing"] if args.score_only else plan(command)
            print(f"{study}: python -m {' '.join(command)}\n    {'; '.join(plans)}", flush=True)
        return 0
    failures = Lanes(queue, lanes, sys.stdout).run()
    if failures:
        print(f"failed: {failures}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG, interrupted="every command is resumable: run the same command to continue"))
