"""Every HTML figure of the analyses, redrawn from the committed CSV/JSON in analyses/results/.

Committed results are data only (CSV and JSON); the figures are drawn from them, never committed, and the scripts
that write the data draw none. All pages are written into one folder beside one shared ``plotly.min.js``
(``include_plotlyjs="directory"``), so plotly.js is written once; the folder (default figures/ in the repository
root, outside analyses/) is git-ignored. The studies' figures and the pages are drawn by analyses/framework/plots.py,
the evaluation figure by ``interp.report.plots``.

Figures (name: source files):

* ``evaluation-main-onehot``, ``-binary``, ``-none``: ``eval-main-*/summary.csv`` (``interp evaluate``);
* ``variants``: ``variants.csv`` (``python -m analyses.studies.variants.measure``);
* one per learning study, e.g. ``lr``, ``tau_loss_d32``, ``embedding_d32_k10``: ``studies/<name>.csv`` and
  ``studies/<name>_training.json`` (``python -m analyses.studies`` / ``analyses.ablate_embedding``);
* ``multistep``, ``multistep_3000steps``: ``studies/<name>.json`` (``python -m analyses.studies.multistep.measure``).

Run: python -m analyses.figures [--out DIR] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

from analyses._shared import read_csv
from interp import _arguments as arguments
from interp._checks import InvalidInput, check_output_folder

PROG = "python -m analyses.figures"
DATA = "eval-*/summary.csv, variants.csv, studies/*_training.json or studies/multistep*.json"  # what available() reads
RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "figures"  # the repository's figures/, git-ignored


def evaluation_figure(folder: Path):
    """``interp evaluate``'s figure of one evaluation folder (summary.csv; the checkpoint names from evaluation.csv)."""
    from interp.report.plots import evaluation_figure as draw

    names = list(dict.fromkeys(row["checkpoint"] for row in read_csv(folder / "evaluation.csv")))
    return draw(read_csv(folder / "summary.csv"), f"{', '.join(names)}: mean log objective")


def study_figure(folder: Path, name: str, rows: list[dict] | None = None):
    """A learning study's figure from ``<name>.csv`` and ``<name>_training.json`` in ``folder`` (``rows``: the
    study's CSV rows when the caller already has them)."""
    from analyses._studies import study_csv_rows, training_path
    from analyses.framework.plots import study_figure as draw

    stored = json.loads(training_path(folder, name).read_text())
    return draw(stored["title"], rows if rows is not None else study_csv_rows(folder, name), stored["curves"])


def multistep_figure(path: Path):
    from analyses.framework.plots import multistep_figure as draw

    return draw(json.loads(path.read_text())["curves"])


def variants_figure(path: Path):
    from analyses.framework.plots import variants_figure as draw

    return draw(read_csv(path))


def available(results: Path = RESULTS) -> dict[str, Callable[[], object]]:
    """{figure name: a function drawing it} for every figure whose data are in ``results``."""
    figures: dict[str, Callable[[], object]] = {}
    for folder in sorted(results.glob("eval-*")):
        if (folder / "summary.csv").exists():
            figures["evaluation-" + folder.name.removeprefix("eval-")] = lambda f=folder: evaluation_figure(f)
    if (results / "variants.csv").exists():
        figures["variants"] = lambda: variants_figure(results / "variants.csv")
    studies = results / "studies"
    for path in sorted(studies.glob("*_training.json")):
        name = path.name.removesuffix("_training.json")
        figures[name] = lambda n=name: study_figure(studies, n)
    for path in sorted(studies.glob("multistep*.json")):
        figures[path.stem] = lambda p=path: multistep_figure(p)
    return figures


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="folder for the pages and the one plotly.min.js")
    parser.add_argument("--only", nargs="+", default=None, metavar="NAME", help="only these figures")
    parser.add_argument("--results", default=str(RESULTS), type=arguments.existing_folder,
                        help="where the committed CSV/JSON are")
    args = parser.parse_args(argv)
    figures = available(args.results)
    if not figures:
        raise InvalidInput(f"--results {args.results} holds no figure data (none of {DATA})")
    names = args.only or list(figures)
    unknown = [name for name in names if name not in figures]
    if unknown:
        raise InvalidInput(f"--only: no data for figure(s) {unknown} in {args.results}; known: {', '.join(figures)}")
    out = check_output_folder(args.out, [*(f"{name}.html" for name in names), "plotly.min.js"], "--out")
    out.mkdir(exist_ok=True)  # its parent exists (checked): at most this one folder is created
    from analyses.framework.plots import write_page

    written = [write_page(figures[name](), out / f"{name}.html") for name in names]
    for path in written:
        print(f"wrote {path}")
    return written


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
