"""The instrument figures quoted in the overview of analyses/RESULTS.md, computed on the shipped checkpoints and
written to a committed JSON.

For each of main-onehot, main-binary and main-none, and for ``construction-onehot`` (the exact construction that
main-onehot's weights are compared with: ``reference_construction``, Euclidean AHAT, float64), this runs
``interp.report.instrument_run.run_instruments`` — the function ``interp report`` calls, with the report's settings
(48 unseen tasks of n = 512 seeded 11, random initial centroids seeded 12, one step; surrogates on their own
192 + 192 tasks seeded 7) — and stores:

* ``probes``: held-out accuracy / R^2 of a linear probe per hook, and the same probe on the input embedding;
* ``weights``: cosine (and scale, diagonal dominance, outside / unused fractions) of Q^T K and OV per attention
  against the construction of the same d, k and embedding;
* ``ablations``: change in mean log objective when an attention's output is zeroed or mean-replaced;
* ``patching``: fraction of the clean-vs-collapsed objective gap restored by patching one site;
* ``surrogates``: the surrogate fits (R^2 of the update and of the centroids, 20-step objective as an algorithm)
  and the learned model's and Lloyd's 20-step objective on the same tasks.

NaN (an undefined cosine) is written as null. Run (a few minutes on one core):

    python -m analyses.studies.instruments.measure [--checkpoints main-onehot ...]
        [--out analyses/results/instruments.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict

import torch

from analyses import _studies
from interp import _arguments as arguments
from interp._checks import check_output_file
from interp._io import write_text_atomically

PROG = "python -m analyses.instruments"
HERE = _studies.HERE  # the analyses/ folder
DEFAULT_OUT = HERE / "results" / "instruments.json"
CHECKPOINTS = ("main-onehot", "main-binary", "main-none", "construction-onehot")
CONSTRUCTION_PREFIX = "construction-"  # construction-X: the construction that shipped main-X is compared with


def load(name: str):
    """A shipped checkpoint or path, or ``construction-<embedding>``: the exact construction that main-<embedding>
    is compared with (``interp.instruments.weights.reference_construction``)."""
    from interp.instruments.weights import reference_construction
    from interp.model.checkpoint import load_model

    if name.startswith(CONSTRUCTION_PREFIX):
        return reference_construction(load_model("main-" + name.removeprefix(CONSTRUCTION_PREFIX)))
    return load_model(name)


def instrument_checkpoint(text: str) -> str:
    """An argparse type: what ``load`` takes, a shipped checkpoint name or path, or ``construction-<embedding>``
    (whose main-<embedding> must be shipped)."""
    if text.startswith(CONSTRUCTION_PREFIX):
        arguments.checkpoint("main-" + text.removeprefix(CONSTRUCTION_PREFIX))
        return text
    return arguments.checkpoint(text)


def _finite_or_none(value):
    """JSON-safe: NaN and infinities become None, containers are converted recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(item) for item in value]
    return value


def instrument_record(name: str, settings) -> dict:
    """Every instrument's figures for the checkpoint ``name`` (shipped name or path) as plain JSON data."""
    from interp.report.instrument_run import run_instruments

    results = run_instruments(load(name), settings)
    return _finite_or_none({
        "probes": [{**asdict(row), "gain": row.gain} for row in results.probes],
        "weights": [asdict(row) for row in results.similarities],
        "ablations": results.ablations,
        "patching": [asdict(row) for row in results.patching],
        "surrogates": [asdict(fit) for fit in results.surrogates],
        "surrogate_references": results.surrogate_references,
    })


def main(argv: list[str] | None = None) -> dict:
    from interp.report.instrument_run import InstrumentSettings

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", nargs="+", default=list(CHECKPOINTS), type=instrument_checkpoint)
    parser.add_argument("--threads", type=arguments.threads, default=1)
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)
    out = check_output_file(args.out, "--out")
    torch.set_num_threads(args.threads)
    settings = InstrumentSettings()
    data = {
        "command": " ".join(["python -m analyses.instruments", *(sys.argv[1:] if argv is None else argv)]),
        "settings": {**asdict(settings), "surrogate_tasks": "192 fit + 192 test, seed 7, n = 512, 20 steps"},
        "checkpoints": {},
    }
    for name in args.checkpoints:
        print(f"instruments on {name} ...", flush=True)
        data["checkpoints"][name] = instrument_record(name, settings)
    write_text_atomically(out, json.dumps(data, indent=1) + "\n")
    print(f"wrote {out}")
    return data


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
