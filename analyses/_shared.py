"""Helpers the analyses scripts share: tasks and model runs, CSV and JSON files, and the git lookup of a file's commit.

* ``draw_tasks``: seeded tasks of the main configuration in a model's precision; ``run_model``: a model's centroids
  after some steps, with hooks;
* ``read_csv``: a committed CSV as a list of rows; ``write_csv``: rows written atomically; ``held_rows``,
  ``kept_rows``: the rows a CSV of per-step curves holds, checked against the evaluation settings
  (``scoring_settings``), and new rows merged into them (checkpoints scored at different times); ``write_json``:
  results written atomically, NaN and infinities made JSON-safe (``finite_or_none``); ``section_from_json``: a
  RESULTS.md section written from committed results (``--from-json``);
* ``training_metadata``: the metadata of a checkpoint written by training (its ``train_config``), header only;
* ``file_commit``: the commit that last changed a file (a predictions file's, recorded beside the results).

Importing this module loads no torch (the scripts that only read committed files stay fast); the functions that run
a model import it themselves.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from interp._checks import InvalidInput
from interp._io import write_text_atomically

if TYPE_CHECKING:
    from torch import Tensor

EXPLAIN_TEST_SEED = 20261301  # the explanation's held-out tasks (studies/explain); studies/failures reads them too
ROOT = Path(__file__).resolve().parents[1]  # the repository root
STEPS = 20  # steps of a run from its starts: the papers' multi-step comparison with Lloyd's 20 iterations


# ----- tasks and model runs ------------------------------------------------------------------------------------------


def draw_tasks(model, count: int, seed: int) -> tuple[Tensor, Tensor]:
    """``count`` tasks of the main configuration (n = 512, the model's d and k) in the model's dtype: points (b, n, d)
    from ``seed`` and random-subset initial centroids (b, k, d) from ``seed + 1``."""
    from interp.tasks import TaskConfig, init_centroids, sample_tasks

    config = TaskConfig(n=512, d=model.config.d, k=model.config.k)
    points = sample_tasks(config, count, seed, dtype=model.codes.dtype).points
    return points, init_centroids(points, config.k, "random", seed + 1)


def run_model(model, points: Tensor, centroids: Tensor, steps: int = STEPS, hooks: list | None = None) -> Tensor:
    """The model's centroids (b, k, d) after ``steps`` steps in eval mode, without gradients, with ``hooks``
    (TransformerLens forward hooks) applied."""
    import torch

    model.eval()
    with torch.no_grad():
        return model.run_with_hooks(points, centroids, steps=steps, fwd_hooks=list(hooks or [])).centroids


# ----- files ---------------------------------------------------------------------------------------------------------


def read_csv(path: Path) -> list[dict]:
    """The rows of a CSV file with a header line, each a dict of strings."""
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def write_csv(rows: list[dict], columns: tuple[str, ...], path: str | Path) -> Path:
    """``rows`` as CSV with the header ``columns``, written atomically (whole or not at all) into a folder that
    exists."""
    import io

    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    return write_text_atomically(path, text.getvalue())


def scoring_settings(tasks: int | str, n: int | str, steps: int | str, seed: int | str) -> dict:
    """An evaluation's settings (tasks per setting, points per task, T steps, the tasks' seed) as the strings a CSV
    holds: rows of per-step curves score together only when these agree."""
    return {"tasks": str(tasks), "n": str(n), "T": str(steps), "seed": str(seed)}


def evaluation_settings(row: dict) -> dict:
    """The ``scoring_settings`` a row of per-step curves was written under (T: its model curve's length - 1)."""
    return scoring_settings(row["tasks"], row["n"], len(json.loads(row["model_curve"])) - 1, row["eval_seed"])


def checkpoint_status(metadata: dict) -> str:
    """A checkpoint's status from its metadata: ``diverged`` (marked so by its trainer), ``unfinished`` (saved
    before its configured steps) or ``ok``."""
    if metadata.get("diverged"):
        return "diverged"
    return "unfinished" if metadata["step"] < metadata["train_config"]["steps"] else "ok"


def checkpoint_order(row: dict) -> tuple:
    """A row's place among the rows of several checkpoints: by embedding (one-hot, binary, none), then seed."""
    from interp.model.config import EMBEDDINGS

    embedding = json.loads(row["config"])["embedding"]
    return EMBEDDINGS.index(embedding) if embedding in EMBEDDINGS else len(EMBEDDINGS), embedding, int(row["seed"])


def held_rows(path: str | Path, columns: tuple[str, ...], wanted: dict | None, option: str) -> list[dict]:
    """The rows the CSV ``path`` holds ([] while it does not exist), each written with the ``columns`` and under the
    evaluation settings ``wanted`` (``evaluation_settings``; None: those of its first row); otherwise an error naming
    ``option``. Call it before evaluating, so that a mismatch is refused before any work."""
    path = Path(path)
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        held = list(reader)
        if tuple(reader.fieldnames or ()) != columns:
            raise InvalidInput(f"{option} {path} holds the columns {list(reader.fieldnames or ())}, not "
                               f"{list(columns)}: give a CSV written by this command")
    wanted = wanted if wanted is not None or not held else evaluation_settings(held[0])

    def shown(settings: dict) -> str:
        return ", ".join(f"{key}={value}" for key, value in settings.items())

    for row in held:
        if (settings := evaluation_settings(row)) != wanted:
            raise InvalidInput(f"{option} {path}: its row {row['name']} was written with {shown(settings)}, this "
                               f"run with {shown(wanted)} (tasks per setting, n, T steps, seed): score with the same "
                               "settings, or write the rows anew")
    return held


def kept_rows(path: str | Path, rows: list[dict], columns: tuple[str, ...], option: str) -> list[dict]:
    """``rows`` merged into the rows the CSV ``path`` holds (``held_rows``, under the new rows' evaluation settings,
    or with no new rows under its first row's), all as the strings a CSV holds, sorted by ``checkpoint_order``
    (stable: the rows of one checkpoint keep their order), so that the file does not depend on which seed was scored
    first. A held row named as a new one is replaced; of new rows sharing a name the last is kept."""
    new = {row["name"]: {key: str(value) for key, value in row.items()} for row in rows}
    wanted = evaluation_settings(next(iter(new.values()))) if new else None
    merged = [new.pop(row["name"], row) for row in held_rows(path, columns, wanted, option)] + list(new.values())
    return sorted(merged, key=checkpoint_order)


def training_metadata(path: str, option: str) -> dict:
    """The metadata of the checkpoint ``path`` (a shipped name or a file), read from its header alone, which must
    hold the ``train_config`` it was trained under (its seed and budget); ``option`` names the command's option in
    the error."""
    from interp.model.checkpoint import read_header, resolve

    metadata, _ = read_header(resolve(path))
    if not isinstance(metadata.get("train_config"), dict):
        raise InvalidInput(f"{option}: checkpoint {path} has no train_config in its metadata: a row names the training "
                           "config and seed; give checkpoints written by training (interp train, the studies)")
    return metadata


def final_rows(summary: Path) -> dict[tuple[str, str, str], dict]:
    """{(protocol, setting, init): row} of an evaluation's summary.csv (``interp evaluate``) at its last step; the
    values are the CSV's strings."""
    rows = read_csv(summary)
    last = max(int(row["step"]) for row in rows)
    return {(r["protocol"], r["setting"], r["init"]): r for r in rows if int(r["step"]) == last}


def finite_or_none(value):
    """JSON-safe: NaN becomes None, infinities the strings "inf" / "-inf" (gamma = inf kernels); tuples become lists;
    containers are converted recursively."""
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(key): finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item) for item in value]
    return value


def write_json(data: dict, path: Path) -> None:
    """``data`` (``finite_or_none``) as JSON, written atomically (``interp._io.write_text_atomically``) into a folder
    created if missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps(finite_or_none(data), indent=1) + "\n")


def section_from_json(out: Path, write_results_md: Callable[[Path], str]) -> dict:
    """``--from-json``: write a script's RESULTS.md section from its committed results ``out`` (computing nothing),
    print the section and return the results."""
    if not out.is_file():
        raise InvalidInput(f"--from-json reads --out {out}, which does not exist or is not a file")
    print(write_results_md(out))
    return json.loads(out.read_text())


def file_commit(path: Path) -> dict:
    """The commit that last changed ``path`` and whether the file differs from it now: {"commit", "modified_since"},
    both None outside a git checkout."""
    relative = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    try:
        commit = subprocess.run(["git", "log", "-n", "1", "--format=%H", "--", relative], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout.strip() or None
        changed = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", relative], cwd=ROOT,
                                 capture_output=True).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "modified_since": None}
    return {"commit": commit, "modified_since": changed if commit else None}
