"""Shared pieces of the learning studies: summaries over seeds, training curves from checkpoints, RESULTS.md.

Summaries are the papers' (paper 2 §3): median over seeds and the interquartile band (25%-75%). A study's
committed data are its CSV (one row per seed) and ``<name>_training.json`` (median and band of the training
curves, written by ``write_training``); ``python -m analyses.figures`` draws its figure from those two files.
"""

from __future__ import annotations

import json
import shlex
import statistics
import sys
from pathlib import Path

from analyses.framework.formatting import band as fmt_band  # noqa: F401  (S.fmt_band in the studies)
from analyses.framework.statistics import band, interquartile, quantile  # noqa: F401  (S.quantile in the studies)
from interp._io import write_text_atomically

HERE = Path(__file__).resolve().parent
RESULTS_MD = HERE / "RESULTS.md"


def by_label(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows grouped by grid point, in first-seen order."""
    out: dict[str, list[dict]] = {}
    for row in rows:
        out.setdefault(row["label"], []).append(row)
    return out


def column(rows: list[dict], name: str) -> list[float]:
    return [float(r[name]) for r in rows]


def training_summary(histories: dict[str, list[list[dict]]]) -> dict[str, dict[str, list]]:
    """Per label: {"steps", "median", "q25", "q75"} of the seeds' relative validation objective (the union of
    their logged steps; a seed without a step counts as missing there)."""
    out = {}
    for label, seed_histories in histories.items():
        curves = [{h["step"]: h["relative_objective"] for h in history} for history in seed_histories]
        steps = sorted(set().union(*curves))
        median, low, high = interquartile([[curve.get(step, float("nan")) for step in steps] for curve in curves])
        out[label] = {"steps": steps, "median": median, "q25": low, "q75": high}
    return out


def training_path(out: Path, name: str) -> Path:
    """Where a study's training curves are stored: ``<out>/<name>_training.json``."""
    return Path(out) / f"{name}_training.json"


def write_training(out: Path, name: str, title: str, rows: list[dict], histories: dict[str, list[list[dict]]],
                   source: str) -> Path:
    """Store beside a study's CSV its figure title, which CSV rows belong to it ((name, steps) of each, since a CSV
    may also hold rows of other budgets) and the median / band of its training curves."""
    path = training_path(out, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"title": title, "source": source, "rows": [[row["name"], int(row["steps"])] for row in rows],
            "curves": training_summary(histories)}
    write_text_atomically(path, json.dumps(data, indent=1) + "\n")
    return path


def study_csv_rows(out: Path, name: str) -> list[dict]:
    """The CSV rows of the study ``name`` stored in ``out``: those listed in its ``_training.json`` (the latest of
    each (name, steps)), in the order of its training curves' labels (the grid order)."""
    from interp.training.sweep import read_rows

    stored = json.loads(training_path(out, name).read_text())
    wanted = [tuple(key) for key in stored["rows"]]
    latest = {(row["name"], int(row["steps"])): row for row in read_rows(Path(out) / f"{name}.csv")}
    missing = [key for key in wanted if key not in latest]
    if missing:
        raise FileNotFoundError(f"{Path(out) / name}.csv lacks the rows {missing} listed in its _training.json")
    order = {label: index for index, label in enumerate(stored["curves"])}
    return sorted((latest[key] for key in wanted), key=lambda row: order[row["label"]])


def summary_table(rows: list[dict]) -> str:
    """Markdown: per grid point, seeds (diverged), relative objective, final log objective vs Lloyd, loss gap."""
    lines = ["| grid point | seeds (diverged) | relative objective | model log-objective | Lloyd | model - Lloyd | "
             "loss gap (mean) |", "|---|---|---|---|---|---|---|"]
    for label, seeds in by_label(rows).items():
        diverged = sum(r["status"] != "ok" for r in seeds)
        gaps = [float(r["model_log_objective"]) - float(r["lloyd_log_objective"]) for r in seeds]
        lines.append(f"| {label} | {len(seeds)} ({diverged}) | {fmt_band(column(seeds, 'relative_objective'))} | "
                     f"{fmt_band(column(seeds, 'model_log_objective'))} | "
                     f"{statistics.median(column(seeds, 'lloyd_log_objective')):.3f} | {fmt_band(gaps)} | "
                     f"{fmt_band(column(seeds, 'loss_gap_mean'), 2)} |")
    return "\n".join(lines)


def figure_line(name: str) -> str:
    """The RESULTS.md line that names the command regenerating a section's figure from the committed files."""
    return (f"Figure: `python -m analyses.figures --only {name}` (from the committed CSV/JSON; writes "
            f"figures/{name}.html)")


RUNNING: list[str] = []  # the runner's command while it runs a study (``python -m analyses run NAME ...``)


def command_line() -> str:
    """The command that is running, as it is typed from the repository root: the runner's (``python -m analyses run
    NAME --budget B``) while it runs or renders a study, else ``python -m <module> ...`` (``running_module``)."""
    if RUNNING:
        return RUNNING[-1]
    return "python -m " + " ".join(shlex.quote(a) for a in [running_module(), *sys.argv[1:]])


def running_module() -> str:
    """The module of analyses that ``python -m`` runs: the ``__main__`` module's ``__spec__.name``
    (``analyses.studies.explain.measure``, also when an old name such as ``analyses.explain`` forwards to it), else
    (no spec, or another program's, as under pytest) ``analyses.<the script's stem>``."""
    name = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None)
    return name if name and name.startswith("analyses.") else "analyses." + Path(sys.argv[0]).stem


def program(command: str | None = None) -> str:
    """The program a section's title names, the one its Command line runs: ``python -m analyses run NAME`` or
    ``python -m analyses.<name>`` of ``command`` (default: the running command)."""
    words = (command or command_line()).split()
    return " ".join(words[:5] if words[2:4] == ["analyses", "run"] else words[:3])


def with_section(current: str, key: str, text: str) -> str:
    """``current`` (a RESULTS.md text) with ``text`` between the markers of ``key`` (appended when they are absent)."""
    begin, end = f"<!-- study:{key} -->", f"<!-- /study:{key} -->"
    block = f"{begin}\n{text.rstrip()}\n{end}\n"
    if begin in current and end in current:
        head, rest = current.split(begin, 1)
        _, tail = rest.split(end, 1)
        return head + block + ("\n" + tail.lstrip("\n") if tail.strip() else "")  # the last section: no blank
    return current.rstrip("\n") + "\n\n" + block


def write_section(key: str, text: str, path: Path = RESULTS_MD) -> None:
    """Put ``text`` in RESULTS.md between markers for ``key``: a re-run replaces its own section."""
    current = path.read_text() if path.exists() else "# Results of the analyses\n"
    write_text_atomically(path, with_section(current, key, text))


class MissingSection(LookupError):
    """A writer did not write the section it was asked for."""
