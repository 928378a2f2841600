"""Bad input to the analyses scripts: one clear line and exit 2, never a traceback, nothing created; and the argument
types of ``interp._arguments`` they share with the ``interp`` command.

Each case runs ``python -m analyses.<script> ARGV`` in this process, as ``-m`` does (``runpy`` with the module as
``__main__``; a ``SystemExit`` gives the exit code, an uncaught exception prints the interpreter's traceback and exit
1), so that torch is imported once; ``test_in_process_matches_a_real_subprocess`` checks that some cases give the same
exit code and the same stderr in a real subprocess. ``python tests/test_analyses_bad_inputs.py`` prints the table of
cases with the message each gets (markdown).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import runpy
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
from child_processes import run

from interp import _arguments as arguments
from interp._checks import InvalidInput

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = "100"  # argparse wraps its usage to the terminal's width: the same in both ways of running a case


@dataclass(frozen=True)
class Case:
    script: str  # analyses.<script>
    bad: str  # the bad input, in words
    argv: tuple[str, ...]  # {file}, {folder}, {empty}, {nowhere}, {markerless}, {tmp}: made by ``make_paths``
    needle: str  # regex the error line must contain
    argparse: bool = False  # argparse's own error: the usage, then the error line


def _case(script: str, bad: str, argv: str, needle: str) -> Case:
    """A case whose message is argparse's (an option's type refused its text)."""
    return Case(script, bad, tuple(argv.split()), needle, argparse=True)


def _line(script: str, bad: str, argv: str, needle: str) -> Case:
    """A case refused after parsing: the one line of ``interp._arguments.run``."""
    return Case(script, bad, tuple(argv.split()), needle)


MISSING_FOLDER = r"{nowhere}: its folder \S+ does not exist"
NOT_FOLDER = r"{file} is a file"
NOT_FILE = r"{folder} is a folder"

CASES = [
    # sweep (and the run options studies and ablate_embedding share)
    _case("sweep", "--seeds -1", "--study s --seeds -1",
          r"argument --seeds: expected an integer seed in \[0, 2\*\*63\), got -1"),
    _case("sweep", "--seeds x", "--study s --seeds x", r"argument --seeds: expected an integer seed .*got 'x'"),
    _case("sweep", "--steps 0", "--study s --steps 0", "argument --steps: expected an integer >= 1, got 0"),
    _case("sweep", "--plan --score-only", "--study s --plan --score-only",
          "argument --score-only: not allowed with argument --plan"),
    _case("sweep", "--eval-tasks 0", "--study s --eval-tasks 0", "argument --eval-tasks: expected an integer >= 1"),
    _case("sweep", "--eval-steps 0", "--study s --eval-steps 0", "argument --eval-steps: expected an integer >= 1"),
    _case("sweep", "--workers 0", "--study s --workers 0", "argument --workers: expected an integer >= 1, got 0"),
    _case("sweep", "--eval-families pareto", "--study s --eval-families pareto",
          "argument --eval-families: invalid choice: 'pareto'"),
    _case("sweep", "--study a/b", "--study a/b", r"argument --study: expected a name without '/'"),
    _case("sweep", "--set bias=maybe (not a boolean)", "--study s --set bias=maybe",
          "argument --set: bias=maybe: expected true/false, got 'maybe'"),
    _case("sweep", "--set sed=1 (unknown field)", "--study s --set sed=1",
          "argument --set: unknown training config field 'sed'; known: d, k, n"),
    _case("sweep", "--set seed=1 (seeds have their own option)", "--study s --set seed=1",
          "argument --set: seed is set by --seeds"),
    _case("sweep", "--set d=1.5 (not an integer)", "--study s --set d=1.5",
          "argument --set: d=1.5: expected an integer, got '1.5'"),
    _case("sweep", "--set tau=abc (not a number)", "--study s --set tau=abc",
          "argument --set: tau=abc: expected a number, got 'abc'"),
    _case("sweep", "--set grad_clip=off", "--study s --set grad_clip=off",
          "argument --set: grad_clip=off: expected a number or none, got 'off'"),
    _case("sweep", "--set d (no value)", "--study s --set d", "argument --set: expected NAME=value, got 'd'"),
    _line("sweep", "--set d=3 d=4 (a field twice)", "--study s --set d=3 d=4", r"--set names a field twice \(d\)"),
    _case("sweep", "--field lr=0.1,abc", "--study s --field lr=0.1,abc",
          "argument --field: lr=abc: expected a number, got 'abc'"),
    _case("sweep", "--field lr= (no values)", "--study s --field lr=", "argument --field: lr=: expected a number"),
    _line("sweep", "--set k=10 n=5 (k >= n)", "--study s --set k=10 n=5 --out {tmp}",
          r"--set, --field, --steps: k=10 must be less than n=5"),
    _line("sweep", "--seeds 0 0 (repeated)", "--study s --seeds 0 0 --out {tmp}", r"seeds must be distinct"),
    _line("sweep", "--out in a folder that does not exist", "--study s --out {nowhere}", "--out " + MISSING_FOLDER),
    _line("sweep", "--out a file", "--study s --out {file}", "--out " + NOT_FOLDER),
    _line("sweep", "--checkpoints in a folder that does not exist", "--study s --out {tmp} --checkpoints {nowhere}",
          "--checkpoints " + MISSING_FOLDER),
    # studies
    _case("studies", "--study nope", "--study nope", "argument --study: invalid choice: 'nope'"),
    _case("studies", "--name a/b", "--study d --name a/b", r"argument --name: expected a name without '/'"),
    _case("studies", "--set bias=maybe", "--study d --set bias=maybe", "argument --set: bias=maybe: expected true"),
    _case("studies", "--steps 0", "--study d --steps 0", "argument --steps: expected an integer >= 1, got 0"),
    _line("studies", "--only-grid k=6 (not a grid field)", "--study d --only-grid k=6",
          "--only-grid: 'k' is not a grid field of this study"),
    _line("studies", "--only-grid d=5 (not a grid value)", "--study d --only-grid d=5",
          r"--only-grid: d values \[5\] are not in the study's grid"),
    _line("studies", "--only-grid d=4 d=8 (a field twice)", "--study d --only-grid d=4 d=8",
          r"--only-grid names a field twice \(d\)"),
    _line("studies", "--set n=4 (n <= the grid's k)", "--study d --set n=4",
          "--set, --steps: k=6 must be less than n=4"),
    _line("studies", "--results-md in a folder that does not exist", "--study d --results-md {nowhere}",
          "--results-md " + MISSING_FOLDER),
    _line("studies", "--results-md a folder", "--study d --results-md {folder}", "--results-md " + NOT_FILE),
    _line("studies", "--out in a folder that does not exist", "--study d --out {nowhere}", "--out " + MISSING_FOLDER),
    # ablate_embedding
    _case("ablate_embedding", "--pairs 4 (not DxK)", "--pairs 4", r"argument --pairs: expected DxK, .*got '4'"),
    _case("ablate_embedding", "--pairs 0x6", "--pairs 0x6", r"argument --pairs: expected DxK with D, K >= 1"),
    _case("ablate_embedding", "--n 0", "--n 0", "argument --n: expected an integer >= 1, got 0"),
    _case("ablate_embedding", "--name embedding_n512 --n 128", "--name embedding_n512 --n 128",
          "--n: the study embedding_n512 is at n = 512, got 128"),
    _case("ablate_embedding", "--set bias=maybe", "--set bias=maybe", "argument --set: bias=maybe: expected true"),
    _line("ablate_embedding", "--pairs 4x6 32x10 --n 8 (k >= n in the second pair)", "--pairs 4x6 32x10 --n 8",
          "--pairs, --n, --set, --steps: k=10 must be less than n=8"),
    _line("ablate_embedding", "--out in a folder that does not exist", "--out {nowhere}", "--out " + MISSING_FOLDER),
    _line("ablate_embedding", "--results-md a folder", "--results-md {folder}", "--results-md " + NOT_FILE),
    _line("ablate_embedding", "--train-only --results-md", "--train-only --results-md",
          "--results-md: --train-only writes no section; score the rows with --score-only --results-md"),
    _case("ablate_embedding", "--train-only --plan", "--train-only --plan",
          "argument --plan: not allowed with argument --train-only"),
    _line("ablate_embedding", "--checkpoints in a folder that does not exist", "--checkpoints {nowhere}",
          "--checkpoints " + MISSING_FOLDER),
    # variants
    _case("variants", "--tasks 0", "--tasks 0", "argument --tasks: expected an integer >= 1, got 0"),
    _case("variants", "--n 0", "--n 0", "argument --n: expected an integer >= 1, got 0"),
    _case("variants", "--d 0", "--d 0", "argument --d: expected an integer >= 1, got 0"),
    _case("variants", "--k 0", "--k 0", "argument --k: expected an integer >= 1, got 0"),
    _case("variants", "--steps 0", "--steps 0", "argument --steps: expected an integer >= 1, got 0"),
    _case("variants", "--seed -1", "--seed -1", r"argument --seed: expected an integer seed in \[0, 2\*\*63\)"),
    _line("variants", "--k 10 --n 5 (k > n)", "--k 10 --n 5 --out {tmp}", "--n, --d, --k: k=10 must not exceed n=5"),
    _line("variants", "--out in a folder that does not exist", "--out {nowhere}", "--out " + MISSING_FOLDER),
    _line("variants", "--out a file", "--out {file}", "--out " + NOT_FOLDER),
    # figures
    _case("figures", "--results that does not exist", "--results {nowhere}", "argument --results: no folder"),
    _case("figures", "--results a file", "--results {file}", r"argument --results: {file} is a file"),
    _line("figures", "--results a folder without figure data", "--results {empty} --out {tmp}/f",
          r"--results {empty} holds no figure data"),
    _line("figures", "--only nope", "--only nope --out {tmp}/f", r"--only: no data for figure\(s\) \['nope'\]"),
    _line("figures", "--out in a folder that does not exist", "--out {nowhere}", "--out " + MISSING_FOLDER),
    _line("figures", "--out a file", "--out {file}", "--out " + NOT_FOLDER),
    # readme
    _case("readme", "--readme that does not exist", "--readme {nowhere}", "argument --readme: no file"),
    _case("readme", "--readme a folder", "--readme {folder}", r"argument --readme: {folder} is a folder"),
    _line("readme", "--readme without the generated markers", "--readme {markerless} --only headline",
          r"--readme {markerless}: the document must hold the marker <!-- generated:headline --> exactly once"),
    _case("readme", "--results-md a folder", "--results-md {folder}", r"argument --results-md: {folder} is a folder"),
    _line("readme", "--results-md without the generated markers", "--results-md {markerless} --only speed",
          r"--results-md {markerless}: the document must hold the marker <!-- generated:speed --> exactly once"),
    # instruments
    _case("instruments", "--threads 0", "--threads 0", "argument --threads: expected an integer >= 1, got 0"),
    _case("instruments", "--threads 100000", "--threads 100000", "argument --threads: expected at most the"),
    _case("instruments", "--checkpoints nope", "--checkpoints nope", "argument --checkpoints: no checkpoint 'nope'"),
    _case("instruments", "--checkpoints construction-nope", "--checkpoints construction-nope",
          "argument --checkpoints: no checkpoint 'main-nope'"),
    _line("instruments", "--out a folder", "--out {folder}", "--out " + NOT_FILE),
    _line("instruments", "--out in a folder that does not exist", "--out {nowhere}", "--out " + MISSING_FOLDER),
    # multistep
    _case("multistep", "--tasks 0", "--tasks 0", "argument --tasks: expected an integer >= 1, got 0"),
    _case("multistep", "--steps 0", "--steps 0", "argument --steps: expected an integer >= 1, got 0"),
    _case("multistep", "--n 0", "--n 0", "argument --n: expected an integer >= 1, got 0"),
    _case("multistep", "--seed -1", "--seed -1", r"argument --seed: expected an integer seed"),
    _case("multistep", "--threads 0", "--threads 0", "argument --threads: expected an integer >= 1, got 0"),
    _case("multistep", "--name a/b", "--name a/b", r"argument --name: expected a name without '/'"),
    _case("multistep", "--checkpoints that does not exist", "--checkpoints {tmp}/missing.safetensors",
          "argument --checkpoints: no checkpoint"),
    _case("multistep", "--checkpoints a pattern matching nothing", "--checkpoints {tmp}/*.nothing",
          r"argument --checkpoints: '\S+\*\.nothing' matches no file"),
    _line("multistep", "--n 5 (fewer points than the checkpoint's k = 10)", "--checkpoints main-onehot --n 5",
          "--n: k=10 must not exceed n=5"),
    _line("multistep", "--out in a folder that does not exist", "--out {nowhere}", "--out " + MISSING_FOLDER),
    _line("multistep", "--out a file", "--out {file}", "--out " + NOT_FOLDER),
    _line("multistep", "--results-md a folder", "--results-md {folder}", "--results-md " + NOT_FILE),
    _line("multistep", "--seed-rows a folder", "--seed-rows {folder}", "--seed-rows " + NOT_FILE),
    _line("multistep", "--seed-rows in a folder that does not exist", "--seed-rows {nowhere}",
          "--seed-rows " + MISSING_FOLDER),
    _line("multistep", "--seed-rows the JSON's own path", "--out {tmp} --name rows --seed-rows {tmp}/rows.json",
          r"--seed-rows \S+rows.json is also written as the JSON or --results-md"),
    _line("multistep", "--seed-rows with a file that is not a checkpoint", "--checkpoints {file} --out {tmp} "
          "--seed-rows {tmp}/rows.csv", r"{file} is not a readable safetensors checkpoint"),
    _line("multistep", "--seed-rows with one checkpoint twice", "--checkpoints main-onehot main-onehot --out {tmp} "
          "--seed-rows {tmp}/rows.csv", "--seed-rows: several checkpoints are onehot seed 153476998"),
    _line("multistep", "--keep-rows alone with no rows to keep", "--out {tmp} --seed-rows {tmp}/missing.csv "
          "--keep-rows", r"--keep-rows without --checkpoints writes the section from the rows of --seed-rows "
          r"\S+missing.csv, and there is no such file"),
    _line("multistep", "--keep-rows without --seed-rows", "--keep-rows",
          "--keep-rows keeps the rows of --seed-rows: give --seed-rows PATH"),
    _line("multistep", "--keep-rows with a --seed-rows file that is not a seed-rows CSV",
          "--checkpoints main-onehot --tasks 1 --steps 1 --out {tmp} --seed-rows {file} --keep-rows",
          r"--seed-rows {file} holds the columns \['a file'\], not \['study', "),
    # generalisation
    _line("generalisation", "no --checkpoints", "", r"--checkpoints: give the checkpoints to evaluate \(or --keep-rows "
          r"alone to write the section from the rows of --out\)"),
    _line("generalisation", "--keep-rows alone with no rows to keep", "--out {tmp}/missing.csv --keep-rows",
          r"--keep-rows without --checkpoints writes the section from the rows of --out \S+missing.csv, and there is "
          "no such file"),
    _case("generalisation", "--checkpoints that does not exist", "--checkpoints {tmp}/missing.safetensors",
          "argument --checkpoints: no checkpoint"),
    _case("generalisation", "--tasks 0", "--checkpoints main-onehot --tasks 0",
          "argument --tasks: expected an integer >= 1, got 0"),
    _case("generalisation", "--steps 0", "--checkpoints main-onehot --steps 0",
          "argument --steps: expected an integer >= 1, got 0"),
    _case("generalisation", "--n 0", "--checkpoints main-onehot --n 0", "argument --n: expected an integer >= 1"),
    _case("generalisation", "--seed -1", "--checkpoints main-onehot --seed -1",
          r"argument --seed: expected an integer seed"),
    _case("generalisation", "--threads 0", "--checkpoints main-onehot --threads 0",
          "argument --threads: expected an integer >= 1, got 0"),
    _case("generalisation", "--evaluation that does not exist", "--checkpoints main-onehot --evaluation {nowhere}",
          "argument --evaluation: no folder"),
    _line("generalisation", "--evaluation without an evaluation.csv",
          "--checkpoints main-onehot --evaluation {empty} --out {tmp}/rows.csv",
          r"--evaluation \S+empty holds no evaluation.csv"),
    _line("generalisation", "--n 5 (fewer points than the checkpoint's k = 10)",
          "--checkpoints main-onehot --n 5 --out {tmp}/rows.csv", "--n: k=10 must not exceed n=5"),
    _line("generalisation", "--out a folder", "--checkpoints main-onehot --out {folder}", "--out " + NOT_FILE),
    _line("generalisation", "--out in a folder that does not exist", "--checkpoints main-onehot --out {nowhere}",
          "--out " + MISSING_FOLDER),
    _line("generalisation", "--results-md a folder", "--checkpoints main-onehot --out {tmp}/rows.csv --results-md "
          "{folder}", "--results-md " + NOT_FILE),
    # explain
    _case("explain", "--tasks 0", "--tasks 0", "argument --tasks: expected an integer >= 1, got 0"),
    _case("explain", "--fit-tasks 0", "--fit-tasks 0", "argument --fit-tasks: expected an integer >= 1, got 0"),
    _case("explain", "--permutations 1", "--permutations 1", "argument --permutations: expected an integer >= 2"),
    _case("explain", "--convergence 0", "--convergence 0", "argument --convergence: expected an integer >= 1"),
    _case("explain", "--permutations 10**6", "--permutations 1000000",
          "argument --permutations: expected an integer from 2 to 100,000, got 1,000,000"),
    _case("explain", "--convergence 10**9", "--convergence 1000000000",
          "argument --convergence: expected an integer from 1 to 100,000, got 1,000,000,000"),
    _case("explain", "--threads 0", "--threads 0", "argument --threads: expected an integer >= 1, got 0"),
    _case("explain", "--models nope", "--models nope", "argument --models: no checkpoint 'nope'"),
    _case("explain", "--from-json without --results-md", "--from-json",
          "--from-json only writes the RESULTS.md section: add --results-md"),
    _case("learned_vs_lloyd", "--tasks 0", "--tasks 0", "argument --tasks: expected an integer >= 1, got 0"),
    _case("learned_vs_lloyd", "--hostile-seeds 10**9", "--hostile-seeds 1000000000",
          "argument --hostile-seeds: expected an integer from 1 to 1,000, got 1,000,000,000"),
    _case("learned_vs_lloyd", "--seed -1", "--seed -1", r"argument --seed: expected an integer seed in \[0, 2\*\*63\)"),
    _line("learned_vs_lloyd", "--out in a folder that does not exist", "--out {nowhere}", "--out " + MISSING_FOLDER),
    _line("explain", "--out a folder", "--out {folder}", "--out " + NOT_FILE),
    _line("explain", "--out in a folder that does not exist", "--out {nowhere}", "--out " + MISSING_FOLDER),
    _line("explain", "--from-json with an --out that does not exist", "--from-json --results-md --out {tmp}/none.json",
          r"--from-json reads --out \S+none.json, which does not exist"),
    # failures
    _case("failures", "--tasks 1", "--tasks 1", "argument --tasks: expected an integer >= 2, got 1"),
    _case("failures", "--threads 0", "--threads 0", "argument --threads: expected an integer >= 1, got 0"),
    _line("failures", "--out a folder", "--out {folder}", "--out " + NOT_FILE),
    _line("failures", "--out in a folder that does not exist", "--out {nowhere}", "--out " + MISSING_FOLDER),
    # slots
    _case("slots", "--tasks 3", "--tasks 3", "argument --tasks: expected an integer >= 4, got 3"),
    _case("slots", "--seed -1", "--seed -1", r"argument --seed: expected an integer seed"),
    _case("slots", "--threads 0", "--threads 0", "argument --threads: expected an integer >= 1, got 0"),
    _case("slots", "--models nope", "--models nope", "argument --models: invalid choice: 'nope'"),
    _line("slots", "--seed of the exploration tasks", "--seed 20261601",
          "--seed 20261601: the hypotheses were designed on the tasks of seed 20261601"),
    _line("slots", "--from-json without --results-md", "--from-json", "--from-json only writes the RESULTS.md section"),
    _line("slots", "--from-json with an --out that does not exist", "--from-json --results-md --out {tmp}/none.json",
          r"--from-json reads --out \S+none.json, which does not exist"),
    _line("slots", "--out a folder", "--out {folder}", "--out " + NOT_FILE),
    _line("slots", "--out in a folder that does not exist", "--out {nowhere}", "--out " + MISSING_FOLDER),
    # best_model
    _case("best_model", "--stage nope", "--stage nope", "argument --stage: invalid choice: 'nope'"),
    _case("best_model", "--threads 0", "--stage choose --threads 0", "argument --threads: expected an integer >= 1"),
    _case("best_model", "--protocol-tasks 0", "--stage protocol --protocol-tasks 0",
          "argument --protocol-tasks: expected an integer >= 1"),
    _line("best_model", "neither --stage nor --results-md", "", "give --stage"),
    _line("best_model", "--stage test before the choice", "--stage test --out {tmp}/new.json",
          "the test stage scores the validation's choice: run .* --stage choose first"),
    _line("best_model", "--out not a results file", "--stage ship --out {file}", "--out \\S+ is not a results file"),
    _line("best_model", "--out a folder", "--stage choose --out {folder}", "--out " + NOT_FILE),
    _line("best_model", "--out in a folder that does not exist", "--stage choose --out {nowhere}",
          "--out " + MISSING_FOLDER),
    # readings
    _case("readings", "--results-md that does not exist", "--results-md {tmp}/none.md",
          r"argument --results-md: no file"),
    _case("readings", "--results-md a folder", "--results-md {folder}", "argument --results-md: " + NOT_FILE),
    _line("readings", "--results-md without the study sections", "--results-md {markerless} --check",
          r"--results-md \S+markerless.md: it has no section '\w+'"),
    # benchmarks
    _case("bench_inference", "--rounds 0", "--rounds 0", "argument --rounds: expected an integer >= 1, got 0"),
    _case("bench_inference", "--embedding-rounds 0", "--embedding-rounds 0",
          "argument --embedding-rounds: expected an integer >= 1"),
    _case("bench_inference", "--large-rounds 0", "--large-rounds 0", "argument --large-rounds: expected an integer"),
    _line("bench_inference", "--json in a folder that does not exist", "--json {nowhere}", "--json " + MISSING_FOLDER),
    _line("bench_inference", "--json a file", "--json {file}", "--json " + NOT_FOLDER),
    _line("bench_inference", "--results-md in a folder that does not exist", "--results-md {nowhere}",
          "--results-md " + MISSING_FOLDER),
    _line("bench_inference", "two --*-only flags", "--large-only --evaluation-only",
          "--large-only and --evaluation-only exclude each other"),
    _line("bench_inference", "--profile with a --*-only flag", "--lloyd-only --profile",
          "--lloyd-only and --profile exclude each other"),
    _case("bench_training", "--rounds 0", "--rounds 0", "argument --rounds: expected an integer >= 1, got 0"),
    _case("bench_training", "--loop-steps 0", "--loop-steps 0", "argument --loop-steps: expected an integer >= 1"),
    _line("bench_training", "--json in a folder that does not exist", "--json {nowhere}", "--json " + MISSING_FOLDER),
    # main_seeds
    _case("main_seeds", "no --seeds", "", "the following arguments are required: --seeds"),
    _case("main_seeds", "--embeddings nope", "--seeds 1 --embeddings nope", "argument --embeddings: invalid choice"),
    _case("main_seeds", "--pair 0x3", "--seeds 1 --pair 0x3", "argument --pair: expected DxK with D, K >= 1"),
    _case("main_seeds", "--score-only with --plan", "--seeds 1 --score-only --plan",
          "argument --plan: not allowed with argument --score-only"),
    _line("main_seeds", "--out a file", "--seeds 1 --out {file}", "--out {file} is not a folder"),
    _line("main_seeds", "--results-md a folder", "--seeds 1 --results-md {folder}", "--results-md " + NOT_FILE),
    # paper_budget and claims
    _case("paper_budget", "--lanes 0", "--lanes 0", "argument --lanes: expected an integer >= 1, got 0"),
    _case("paper_budget", "--only nope", "--only nope", "argument --only: invalid choice: 'nope'"),
    _case("claims", "no --markdown", "", "say what to print: --markdown"),
    _line("dependence", "--out in a folder that does not exist", "--out {nowhere}", "--out " + MISSING_FOLDER),
    _line("dependence", "--out a folder", "--out {folder}", "--out " + NOT_FILE),
]

SCRIPTS = sorted(path.stem for path in (ROOT / "analyses").glob("*.py") if not path.stem.startswith("_"))
MOVED = {  # old name (kept for this release: a shim) -> the module in its study's folder, which the cases run
    "explain": "studies.explain.measure", "failures": "studies.failures.measure", "slots": "studies.slots.measure",
    "best_model": "studies.best_model.measure", "variants": "studies.variants.measure",
    "multistep": "studies.multistep.measure", "main_seeds": "studies.main_seeds.measure",
    "generalisation": "studies.main_seeds.generalisation", "learned_vs_lloyd": "studies.learned_vs_lloyd.measure",
    "instruments": "studies.instruments.measure", "dependence": "studies.dependence.measure",
    "bench_inference": "studies.inference_embedding.measure", "bench_training": "studies.bench_training.measure",
    "readings": "framework.reading",
}


def source_of(script: str) -> Path:
    """The file that holds a script's code: its study folder's module for a moved one."""
    return (ROOT / "analyses" / (MOVED[script].replace(".", "/") if script in MOVED else script)).with_suffix(".py")


# ----- running a case ------------------------------------------------------------------------------------------
def make_paths(tmp: Path) -> dict[str, str]:
    """The paths the cases name: an existing file and folder, an empty folder, a file without README markers, and a
    path two levels below a folder that does not exist (``{nowhere}``: no case may create ``tmp/nowhere``)."""
    (tmp / "a_file.txt").write_text("a file\n")
    (tmp / "a_folder").mkdir()
    (tmp / "empty").mkdir()
    (tmp / "markerless.md").write_text("# A README without generated blocks\n")
    return {"tmp": str(tmp), "file": str(tmp / "a_file.txt"), "folder": str(tmp / "a_folder"),
            "empty": str(tmp / "empty"), "markerless": str(tmp / "markerless.md"),
            "nowhere": str(tmp / "nowhere" / "deep" / "x")}


def argv_of(case: Case, paths: dict[str, str]) -> list[str]:
    return [item.format(**paths) for item in case.argv]


def needle_of(case: Case, paths: dict[str, str]) -> str:
    """The case's regex with the paths put in (escaped)."""
    return re.sub(r"\{(\w+)\}", lambda match: re.escape(paths[match.group(1)]), case.needle)


def run_in_process(script: str, argv: list[str]) -> tuple[int, str]:
    """(exit code, stderr) of ``python -m analyses.<script> ARGV``, run here as ``-m`` runs it."""
    saved, stderr = sys.argv, io.StringIO()
    sys.argv = [f"analyses/{script}.py", *argv]
    if script in MOVED:  # an old name imported here is the moved module, which runpy cannot run by that name: run the
        sys.modules.pop(f"analyses.{script}", None)  # shim itself, as in a new process
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "'analyses.* found in sys.modules", RuntimeWarning)  # imported already
            try:
                runpy.run_module(f"analyses.{script}", run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as stop:
                if stop.code is None or isinstance(stop.code, int):
                    code = stop.code or 0
                else:  # the interpreter prints a non-integer code and exits 1
                    print(stop.code, file=sys.stderr)
                    code = 1
            except Exception:
                traceback.print_exc()  # what the interpreter prints for an uncaught exception
                code = 1
    finally:
        sys.argv = saved
    return code, stderr.getvalue()


def run_in_subprocess(script: str, argv: list[str]) -> tuple[int, str]:
    env = {**os.environ, "COLUMNS": COLUMNS, "OMP_NUM_THREADS": "1"}
    result = run([sys.executable, "-m", f"analyses.{script}", *argv], cwd=ROOT, env=env, capture_output=True,
                 text=True, timeout=120)
    return result.returncode, result.stderr


def check_result(case: Case, paths: dict[str, str], code: int, stderr: str) -> str:
    """The error line, after checking: exit 2, no traceback, one line (argparse's: usage, then one line)."""
    assert "Traceback" not in stderr, stderr
    assert code == 2, (code, stderr)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "no message"
    message = lines[-1]
    prog = f"python -m analyses.{case.script}"
    assert message.startswith(f"{prog}: error: "), message
    if case.argparse:
        assert lines[0].startswith(f"usage: {prog}"), stderr
    else:
        assert len(lines) == 1, stderr
    assert re.search(needle_of(case, paths), message), (case.needle, message)
    return message


@pytest.fixture
def paths(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", COLUMNS)
    monkeypatch.chdir(ROOT)
    return make_paths(tmp_path)


def _case_id(case: Case) -> str:
    return f"{case.script}: {case.bad}"


@pytest.mark.parametrize("case", CASES, ids=[_case_id(case) for case in CASES])
def test_bad_input_is_one_clear_line(paths, case):
    code, stderr = run_in_process(case.script, argv_of(case, paths))
    check_result(case, paths, code, stderr)
    assert not Path(paths["tmp"], "nowhere").exists(), "a script created a folder tree"


SUBPROCESS_CASES = [  # argparse's refusal, the wrapper's line after parsing, a refused output folder tree
    next(c for c in CASES if c.script == "variants" and c.bad == "--tasks 0"),
    next(c for c in CASES if c.script == "sweep" and c.bad.startswith("--set bias=maybe")),
    next(c for c in CASES if c.script == "variants" and c.bad == "--out in a folder that does not exist"),
    next(c for c in CASES if c.script == "readme" and c.bad.startswith("--readme without")),
]


@pytest.mark.parametrize("case", SUBPROCESS_CASES, ids=[_case_id(case) for case in SUBPROCESS_CASES])
def test_in_process_matches_a_real_subprocess(paths, case):
    argv = argv_of(case, paths)
    expected = run_in_subprocess(case.script, argv)
    assert run_in_process(case.script, argv) == expected
    check_result(case, paths, *expected)
    assert not Path(paths["tmp"], "nowhere").exists()


def test_every_script_with_options_has_cases():
    covered = {case.script for case in CASES}
    assert set(SCRIPTS) - covered == set(), "add bad-input cases for these scripts"


def test_every_script_runs_through_the_shared_wrapper():
    """Each script's ``__main__`` runs ``interp._arguments.run`` with its ``python -m`` name as prog."""
    for script in SCRIPTS:
        text = source_of(script).read_text()
        assert f'PROG = "python -m analyses.{script}"' in text, script
        assert "sys.exit(arguments.run(main, PROG" in text.split('if __name__ == "__main__":')[-1], script


def test_every_moved_script_keeps_its_old_name():
    """An old name is a shim: imported, it is the moved module itself; run, it runs the moved module (the same
    refusal, the same stderr, as the new name)."""
    import importlib

    assert set(MOVED) <= set(SCRIPTS)
    for old, new in MOVED.items():
        assert importlib.import_module(f"analyses.{old}") is importlib.import_module(f"analyses.{new}"), old
        assert len((ROOT / "analyses" / f"{old}.py").read_text().splitlines()) <= 12, old  # only the shim


@pytest.mark.parametrize("script", ["explain", "bench_training", "generalisation"])
def test_a_moved_script_refuses_the_same_by_either_name(paths, script):
    case = next(c for c in CASES if c.script == script)
    argv = argv_of(case, paths)
    assert run_in_process(MOVED[script], argv) == run_in_process(script, argv)
    check_result(case, paths, *run_in_process(MOVED[script], argv))


# ----- interp._arguments -----------------------------------------------------------------------------------------
def _refused(parse, text: str) -> str:
    with pytest.raises(argparse.ArgumentTypeError) as error:
        parse(text)
    return str(error.value)


def test_int_at_least():
    assert arguments.positive_int("3") == 3 and arguments.int_at_least(0)("0") == 0
    assert arguments.int_at_least(2)("2") == 2 and arguments.positive_int(" 7 ") == 7
    assert _refused(arguments.positive_int, "0") == "expected an integer >= 1, got 0"
    assert _refused(arguments.int_at_least(2), "1") == "expected an integer >= 2, got 1"
    assert _refused(arguments.positive_int, "1.5") == "expected an integer, got '1.5'"
    assert _refused(arguments.positive_int, "") == "expected an integer, got ''"


def test_threads_at_most_the_cores():
    cores = os.cpu_count() or 1
    assert arguments.threads(str(cores)) == cores
    assert _refused(arguments.threads, str(cores + 1)) == (f"expected at most the {cores} CPU cores of this machine, "
                                                          f"got {cores + 1}")
    assert _refused(arguments.threads, "0") == "expected an integer >= 1, got 0"


def test_floats():
    assert arguments.finite_float("-2.5") == -2.5 and arguments.positive_float("1e-3") == 1e-3
    assert arguments.fraction("0") == 0.0 and arguments.fraction("0.99") == 0.99
    for text in ("nan", "inf", "-inf"):
        assert _refused(arguments.finite_float, text) == f"expected a finite number, got {text!r}"
    assert _refused(arguments.finite_float, "abc") == "expected a number, got 'abc'"
    for text in ("0", "-1", "inf"):
        assert "expected a" in _refused(arguments.positive_float, text)
    for text in ("1", "-0.1", "nan"):
        assert _refused(arguments.fraction, text) == f"expected a number in [0, 1), got {text!r}"


def test_seed_as_the_interp_command_takes_it():
    assert arguments.seed("0") == 0 and arguments.seed(str(2**63 - 1)) == 2**63 - 1
    assert _refused(arguments.seed, "-1") == "expected an integer seed in [0, 2**63), got -1"
    assert _refused(arguments.seed, str(2**63)) == f"expected an integer seed in [0, 2**63), got {2**63}"
    assert _refused(arguments.seed, "1.0") == "expected an integer seed in [0, 2**63), got '1.0'"


def test_boolean_as_the_interp_command_takes_it():
    for text in ("1", "true", "True", "YES", "yes"):
        assert arguments.boolean(text) is True
    for text in ("0", "false", "FALSE", "no", "No"):
        assert arguments.boolean(text) is False
    for text in ("maybe", "", "2", "on", "y"):
        assert _refused(arguments.boolean, text) == f"expected true/false, got {text!r}"


def test_plain_name():
    assert arguments.plain_name("tau_loss") == "tau_loss"
    for text in ("", "a/b", "/abs", ".", ".."):
        assert "expected a name without '/'" in _refused(arguments.plain_name, text)


def test_existing_file_and_folder(tmp_path):
    file, folder = tmp_path / "f.txt", tmp_path / "d"
    file.write_text("x")
    folder.mkdir()
    assert arguments.existing_file(str(file)) == file and arguments.existing_folder(str(folder)) == folder
    assert _refused(arguments.existing_file, str(tmp_path / "none")) == f"no file {tmp_path / 'none'}"
    assert _refused(arguments.existing_file, str(folder)) == f"{folder} is a folder; give a file"
    assert _refused(arguments.existing_folder, str(tmp_path / "none")) == f"no folder {tmp_path / 'none'}"
    assert _refused(arguments.existing_folder, str(file)) == f"{file} is a file; give a folder"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert _refused(arguments.existing_file, str(fifo)) == f"{fifo} is a fifo, not a regular file"


def test_checkpoint(tmp_path):
    assert arguments.checkpoint("main-onehot") == "main-onehot"
    assert _refused(arguments.checkpoint, "main-nothing").startswith("no checkpoint 'main-nothing': not a file")
    assert _refused(arguments.checkpoint, str(tmp_path)).startswith(f"no checkpoint '{tmp_path}'")


def test_about_names_the_options():
    with pytest.raises(InvalidInput, match=r"^--n, --k: k=3 must not exceed n=2$"):
        with arguments.about("--n", "--k"):
            raise InvalidInput("k=3 must not exceed n=2")
    with pytest.raises(KeyError):  # anything else passes through unchanged
        with arguments.about("--n"):
            raise KeyError("n")


def _raising(error: BaseException):
    def main(argv):
        raise error
    return main


@pytest.mark.parametrize("error,line", [
    (InvalidInput("--tasks must be >= 1, got 0"), "prog: error: --tasks must be >= 1, got 0"),
    (FileNotFoundError("no checkpoint 'x'"), "prog: error: no checkpoint 'x'"),
    (IsADirectoryError(21, "Is a directory", "/tmp/out"), "prog: error: Is a directory: /tmp/out"),
    (PermissionError(13, "Permission denied"), "prog: error: Permission denied"),
])
def test_run_prints_bad_input_as_one_line(capsys, error, line):
    assert arguments.run(_raising(error), "prog", []) == 2
    captured = capsys.readouterr()
    assert captured.err == line + "\n" and captured.out == ""


def test_run_on_ctrl_c(capsys):
    assert arguments.run(_raising(KeyboardInterrupt()), "prog", []) == 130
    assert capsys.readouterr().err == "prog: interrupted\n"
    assert arguments.run(_raising(KeyboardInterrupt()), "prog", [], interrupted="rows are kept") == 130
    assert capsys.readouterr().err == "prog: interrupted; rows are kept\n"


def test_run_keeps_the_traceback_of_an_internal_error():
    for error in (RuntimeError("a bug"), KeyError("x"), ValueError("not a checked input")):
        with pytest.raises(type(error)):
            arguments.run(_raising(error), "prog", [])


def test_run_exit_codes_and_argv():
    seen = []

    def main(argv):
        seen.append(argv)
        return {"data": 1}

    assert arguments.run(main, "prog", ["--x"]) == 0 and seen == [["--x"]]
    assert arguments.run(lambda argv: 1, "prog") == 1
    assert arguments.run(lambda argv: None, "prog") == 0
    assert arguments.run(lambda argv: True, "prog") == 0  # a bool is a result, not an exit code


# ----- the table of cases ------------------------------------------------------------------------------------------
def table() -> str:
    """Markdown: script, bad input and the error line it gets (paths shortened to their placeholders: TMP, and
    <repo> for the checkout)."""
    import tempfile

    lines = ["| script | bad input | error line |", "|---|---|---|"]
    with tempfile.TemporaryDirectory() as folder:
        paths = make_paths(Path(folder))
        os.environ["COLUMNS"] = COLUMNS
        for case in CASES:
            code, stderr = run_in_process(case.script, argv_of(case, paths))
            message = stderr.strip().splitlines()[-1] if stderr.strip() else f"(exit {code}, no message)"
            message = (message.replace(folder, "TMP").replace(str(ROOT), "<repo>")
                       .removeprefix(f"python -m analyses.{case.script}: error: "))
            cell = message.replace("|", r"\|")
            lines.append(f"| {case.script} | `{case.bad}` | {cell} |")
    return "\n".join(lines)


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))  # ``python tests/...`` puts tests/ first, not the repository
    print(table())
