"""The "Reading" paragraphs of analyses/RESULTS.md: the machinery every study folder's ``reading.py`` uses.

A reading says in words what a study section's table means. A study folder's ``reading.py`` declares
``READINGS = {section: function}``; each function looks every figure it quotes up by key in the committed rows
(``study(name)``: a grid point and a metric of ``analyses/results/studies/<study>.csv``) and formats it with the
functions here; no figure is typed by hand (``tests/test_results_files.py`` checks that the readings' texts hold no
decimal figure and that RESULTS.md holds exactly what they render). Statements about mechanisms name the measurement
or intervention behind them, or are called hypotheses. ``python -m analyses render`` writes them after their
sections; ``python -m analyses.readings [--check]``, the old command, still does for this release.
"""

from __future__ import annotations

import argparse
import functools
import re
import statistics
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from analyses import _studies as S
from analyses import claims as C
from analyses.framework.statistics import quantile, rank_sum_p
from interp import _arguments as arguments
from interp._checks import InvalidInput

PROG = "python -m analyses.readings"  # the old name of ``render``'s readings step, kept for this release
HERE = Path(__file__).resolve().parents[1]  # analyses/
STUDIES = HERE / "results" / "studies"
MINUS = "−"

METRICS: dict[str, Callable] = {
    "rel": C.final_relative,  # one model step / one Lloyd iteration on the run's validation tasks
    "gap20": C.twenty_step_gap,  # mean log objective after 20 re-embedded steps minus Lloyd's 20 iterations
    "loss": C.loss_gap("loss_gap_mean"),  # smoothed loss minus k-means objective after one step, mean over tasks
    "loss_max": C.loss_gap("loss_gap_max"),
    "area": C.curve_area,  # mean relative objective over the training curve (lower: converges sooner)
    "settle": C.settling_step,
    "model": lambda ev, row: float(row["model_log_objective"]),  # mean log objective after 20 steps
    "lloyd": lambda ev, row: float(row["lloyd_log_objective"]),
}


# ----- formatting --------------------------------------------------------------------------------------------------
MARKS = ("⟦", "⟧")  # around every formatted figure while ``marked`` is on: the test that no figure is typed by hand
_marking = [False]


def marked(on: bool) -> None:
    """Wrap every figure the formatters below write in MARKS (on) or not (off, the default)."""
    _marking[0] = on


def figure(text: str) -> str:
    return f"{MARKS[0]}{text}{MARKS[1]}" if _marking[0] else text


def num(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` decimals, a true minus sign for negatives."""
    text = f"{value:.{digits}f}"
    return figure(MINUS + text[1:] if text.startswith("-") else text)


def sci(value: float) -> str:
    """``value`` in scientific notation with two digits (1.2e-15)."""
    return figure(f"{value:.1e}")


def signed(value: float, digits: int = 3) -> str:
    """``value`` with its sign always shown (+0.096, −0.063)."""
    return num(value, digits) if value < 0 else figure("+") + num(value, digits)


def percent(value: float) -> str:
    """A fraction as a signed percentage with one decimal (+12.1%)."""
    return signed(100 * value, 1) + "%"


def span(values: Sequence[float], digits: int = 3, sign: bool = False) -> str:
    """"low–high" of ``values`` ("low to high" when one is negative; one value when they agree at this
    precision)."""
    show = signed if sign else num
    low, high = show(min(values), digits), show(max(values), digits)
    joint = " to " if min(values) < 0 else "–"
    return low if low == high else f"{low}{joint}{high}"


# ----- keyed figures of a study ------------------------------------------------------------------------------------
class Study:
    """The committed rows of one study and its seeds' training curves, with figures looked up by (label, metric)."""

    def __init__(self, name: str, studies: Path = STUDIES):
        from analyses.framework.grid import histories_by_label

        self.name = name
        self.rows = S.study_csv_rows(studies, name)
        self.groups = S.by_label(self.rows)
        by_label = histories_by_label(studies / f"{name}.csv", studies / "no-checkpoints", self.rows)
        histories = C.histories_by_key(self.rows, by_label) if by_label is not None else None
        self.evidence = C.Evidence(tuple(self.rows), histories)

    def label(self, **fields: object) -> str:
        """The one grid point whose label holds every ``name=value`` given (``embedding="onehot"``)."""
        wanted = [f"{name}={value}" for name, value in fields.items()]
        found = [label for label in self.groups if all(part in label.split("_") or part == label for part in wanted)]
        if len(found) != 1:
            raise KeyError(f"{self.name}: {fields} names {len(found)} grid points of {list(self.groups)}")
        return found[0]

    def values(self, label: str, metric: str) -> list[float]:
        """The metric of each seed of grid point ``label``."""
        function = METRICS[metric]
        return [function(self.evidence, row) for row in self.groups[label]]

    def median(self, label: str, metric: str = "rel") -> float:
        return statistics.median(self.values(label, metric))

    def best(self, label: str, metric: str = "rel") -> float:
        return min(self.values(label, metric))

    def quartile(self, label: str, metric: str, q: float) -> float:
        return quantile(self.values(label, metric), q)

    def seeds(self, label: str | None = None) -> int:
        return len(self.groups[label]) if label else len({row["seed"] for row in self.rows})

    def steps(self) -> str:
        return f"{int(self.rows[0]['steps']):,}"

    def below(self, label: str, metric: str = "rel", threshold: float = 1.0) -> int:
        """How many seeds of ``label`` have ``metric`` below ``threshold``."""
        return sum(value < threshold for value in self.values(label, metric))

    def p_less(self, label_a: str, label_b: str, metric: str) -> float:
        """One-sided rank test of "``label_a``'s seeds lower than ``label_b``'s" on ``metric``."""
        return rank_sum_p(self.values(label_a, metric), self.values(label_b, metric), "less")

    def config(self, field: str) -> object:
        import json

        return json.loads(self.rows[0]["config"])[field]

    def outcome(self, claim_id: str) -> str:
        """The registered claim ``claim_id``'s verdict on this study's rows (one of ``claims.OUTCOMES``)."""
        claim = next(claim for claim in C.all_claims() if claim.id == claim_id)
        return C.decide(claim, self.rows, self.evidence.histories).outcome

    def complete(self, embeddings: Sequence[str], minimum: int = C.MIN_SEEDS) -> bool:
        """Whether the grid point of each of ``embeddings`` (``embedding=<name>``) has rows of ``minimum`` seeds."""
        return all(len(self.groups.get(f"embedding={name}", ())) >= minimum for name in embeddings)


@functools.lru_cache(maxsize=None)
def study(name: str) -> Study:
    return Study(name)


# ----- RESULTS.md --------------------------------------------------------------------------------------------------
def after_section(text: str, name: str) -> re.Match | None:
    """The text between a study section's end marker and the next section (its reading, if any)."""
    return re.search(rf"<!-- /study:{re.escape(name)} -->\n(.*?)(?=<!-- study:|\Z)", text, re.S)


def readings_in(text: str) -> dict[str, str]:
    """name -> the reading that follows the section ``name`` in RESULTS.md (stripped), for the sections that have
    one."""
    out = {}
    for match in re.finditer(r"<!-- /study:(\w+) -->\n(.*?)(?=<!-- study:|\Z)", text, re.S):
        if match.group(2).strip():
            out[match.group(1)] = match.group(2).strip()
    return out


def wrap(text: str, width: int = 115) -> str:
    """Each line of ``text`` wrapped at ``width`` (a bullet's continuation indented), as RESULTS.md is written."""
    out = []
    for line in text.splitlines():
        indent = "  " if line.startswith("* ") else ""
        out.append(textwrap.fill(line, width, subsequent_indent=indent, break_long_words=False,
                                 break_on_hyphens=False) if line else "")
    return "\n".join(out)


def readings() -> dict[str, Callable[[], str]]:
    """RESULTS.md section -> the function that writes its reading: the ``READINGS`` of every study folder's
    ``reading.py`` (``analyses.framework.registry``), in the folders' name order."""
    from analyses.framework import registry

    return {section: write for module in registry.reading_modules() for section, write in module.READINGS.items()}


def render(name: str) -> str:
    """The reading of section ``name``, wrapped as RESULTS.md is written."""
    return wrap(readings()[name]().strip())


def stale(text: str) -> list[str]:
    """The readings of ``readings()`` that RESULTS.md ``text`` lacks or holds with other words or figures."""
    present = readings_in(text)
    return [name for name in readings() if present.get(name) != render(name)]


def fill(text: str) -> str:
    """RESULTS.md with every reading of ``readings()`` rendered after its section (a section must exist)."""
    for name in readings():
        match = after_section(text, name)
        if match is None:
            raise InvalidInput(f"it has no section {name!r} (<!-- study:{name} --> ... <!-- /study:{name} -->) to "
                               "follow with its reading")
        following = "\n\n" if match.end() < len(text) else "\n"
        text = text[:match.start(1)] + "\n" + render(name) + following + text[match.end():]
    return text


def main(argv: list[str] | None = None) -> int:
    from interp._io import write_text_atomically

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results-md", type=arguments.existing_file, default=S.RESULTS_MD,
                        help="the RESULTS.md to fill (default analyses/RESULTS.md)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the stale readings")
    args = parser.parse_args(argv)
    text = args.results_md.read_text(encoding="utf-8")
    with arguments.about(f"--results-md {args.results_md}"):
        new = fill(text)
    if args.check:
        names = stale(text)
        if names:
            print(f"{PROG}: stale readings: {', '.join(names)}", file=sys.stderr)
            return 1
        return 0
    if new != text:
        write_text_atomically(args.results_md, new)
    return 0


if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG))
