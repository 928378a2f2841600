"""What a measurement with committed predictions shares: its record's head (command, predictions and the commit that
holds them), each model's verdicts, the predictions table of its section, and writing the record and the section.
The circuits, causal_abstraction and dictionaries studies use it."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from pathlib import Path

from analyses import _studies as S
from analyses.framework.formatting import fixed
from analyses.framework.preregistration import load_predictions, prediction_of, verdict
from interp._io import write_text_atomically


def record_head(predictions_path: Path) -> dict:
    """The running command, the commit that last changed the predictions file (checked first: ``load_predictions``)
    and its content."""
    from analyses._shared import file_commit

    predictions = load_predictions(predictions_path)
    return {"command": S.command_line(), "prediction_commit": file_commit(predictions_path),
            "predictions_file": predictions_path.relative_to(S.HERE.parent).as_posix(), "predictions": predictions}


def model_head(predictions_path: Path) -> dict:
    """What a model's record holds when its predictions are in a file of its own (committed after the main one's
    models were scored): that file's commit, path and content."""
    head = record_head(predictions_path)
    return {key: head[key] for key in ("prediction_commit", "predictions_file", "predictions")}


def decide(record: dict, measured: Callable[[dict, str], float]) -> dict:
    """model -> prediction key -> {measured, verdict}, by the model's own predictions where its record holds them
    (``model_head``), else the record's; ``measured(figures, key)`` reads a model's figure (NaN: nothing to score,
    pending)."""
    out = {}
    for name, figures in record["models"].items():
        out[name] = {}
        predictions = figures.get("predictions", record["predictions"])
        for key, entry in predictions["predictions"].items():
            value = measured(figures, key)
            value = None if value != value else value
            out[name][key] = {"measured": value, "verdict": verdict(prediction_of(entry), value)}
    return out


def predictions_table(record: dict, digits: int = 2) -> list[str]:
    """The section's table: each prediction, its value, and per model the measured figure and its verdict."""
    lines = ["| prediction | value | " + " | ".join(record["models"]) + " |",
             "|---|---|" + "---|" * len(record["models"])]
    for key, entry in record["predictions"]["predictions"].items():
        cells = [f"{fixed(found[key]['measured'])} **{found[key]['verdict']}**"
                 for found in record["verdicts"].values()]
        lines.append(f"| {entry['quantity']} | {entry['kind'].replace('_', ' ')} {fixed(entry['value'], digits)} | "
                     + " | ".join(cells) + " |")
    return lines


def write(record: dict, out: Path, key: str, section: Callable[[dict], str], results_md: bool) -> None:
    """The record to ``out`` (JSON) and, with ``results_md``, its section ``key`` into analyses/RESULTS.md."""
    write_text_atomically(Path(out), json.dumps(record, indent=1) + "\n")
    print(f"wrote {out}")
    if results_md:
        S.write_section(key, section(record))


def parser(prog: str, doc: str, models: tuple[str, ...], default_out: Path) -> argparse.ArgumentParser:
    """The arguments every such measurement takes: --models, --out, --results-md, --threads (a study adds its own)."""
    from interp import _arguments as arguments

    found = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    found.add_argument("--models", nargs="+", default=list(models), type=arguments.checkpoint)
    found.add_argument("--out", default=str(default_out))
    found.add_argument("--results-md", action="store_true", help="put the section into analyses/RESULTS.md")
    found.add_argument("--threads", type=arguments.threads, default=1)
    return found


def run(args: argparse.Namespace, predictions: Path, key: str, label: str, measure: Callable[[str], dict],
        read: Callable[[dict, str], float], section: Callable[[dict], str], settings: Mapping = (),
        own_predictions: Mapping[str, Path] = ()) -> dict:
    """The measurement of every model of ``args.models`` (``measure(name)``: its figures), the output checked and the
    predictions read first; a model in ``own_predictions`` carries its own (``model_head``). Verdicts by ``read``
    (``decide``), then the record and, with --results-md, the section ``key`` (``write``)."""
    import torch

    from interp._checks import check_output_file

    out = check_output_file(args.out, "--out")
    record = {**record_head(predictions), **dict(settings), "models": {}}
    torch.set_num_threads(args.threads)
    own_predictions = dict(own_predictions)
    for name in args.models:
        print(f"{label} of {name} ...", flush=True)
        head = model_head(own_predictions[name]) if name in own_predictions else {}
        record["models"][name] = {**head, **measure(name)}
    record["verdicts"] = decide(record, read)
    write(record, out, key, section, args.results_md)
    return record
