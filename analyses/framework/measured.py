"""What a measurement with committed predictions shares: its record's head (command, predictions and the commit that
holds them), each model's verdicts, the predictions table of its section, and writing the record and the section.
The circuits, causal_abstraction and dictionaries studies use it."""

from __future__ import annotations

import json
from collections.abc import Callable
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
