"""Shared pieces of the learning studies: summaries over seeds, curves from checkpoints, figures, RESULTS.md.

Summaries are the papers' (SPEC §3.3): median over seeds and the interquartile band (25%-75%).
"""

from __future__ import annotations

import json
import math
import shlex
import statistics
import sys
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

HERE = Path(__file__).resolve().parent
RESULTS_MD = HERE / "RESULTS.md"


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolation quantile of finite values (nan when there are none)."""
    finite = sorted(v for v in values if math.isfinite(v))
    if not finite:
        return float("nan")
    position = q * (len(finite) - 1)
    low = math.floor(position)
    high = min(low + 1, len(finite) - 1)
    return finite[low] + (finite[high] - finite[low]) * (position - low)


def band(values: list[float]) -> tuple[float, float, float]:
    """(median, 25% quantile, 75% quantile) over seeds."""
    return quantile(values, 0.5), quantile(values, 0.25), quantile(values, 0.75)


def fmt_band(values: list[float], digits: int = 3) -> str:
    median, low, high = band(values)
    if math.isnan(median):
        return "n/a"
    return f"{median:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def by_label(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows grouped by grid point, in first-seen order."""
    out: dict[str, list[dict]] = {}
    for row in rows:
        out.setdefault(row["label"], []).append(row)
    return out


def column(rows: list[dict], name: str) -> list[float]:
    return [float(r[name]) for r in rows]


def training_curves(histories: dict[str, list[list[dict]]]) -> dict[str, tuple[list[int], list[list[float]]]]:
    """Per label: (steps, per-seed relative validation objective at those steps) from the seeds' histories."""
    out = {}
    for label, seed_histories in histories.items():
        curves = [{h["step"]: h["relative_objective"] for h in history} for history in seed_histories]
        steps = sorted(set().union(*curves))
        out[label] = (steps, [[curve.get(step, float("nan")) for step in steps] for curve in curves])
    return out


def add_band(figure: go.Figure, x: list, per_seed: list[list[float]], name: str, color: str, row: int, col: int,
             showlegend: bool = True) -> None:
    """Median line and interquartile band over seeds."""
    per_x = list(zip(*per_seed))
    median = [quantile(list(v), 0.5) for v in per_x]
    low = [quantile(list(v), 0.25) for v in per_x]
    high = [quantile(list(v), 0.75) for v in per_x]
    figure.add_trace(go.Scatter(x=list(x) + list(x)[::-1], y=high + low[::-1], fill="toself", fillcolor=color,
                                opacity=0.2, line={"width": 0}, hoverinfo="skip", showlegend=False,
                                legendgroup=name), row=row, col=col)
    figure.add_trace(go.Scatter(x=list(x), y=median, name=name, line={"color": color}, legendgroup=name,
                                showlegend=showlegend), row=row, col=col)


PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#17becf",
           "#bcbd22"]


def study_figure(title: str, rows: list[dict], curves: dict, log_y_training: bool = True) -> go.Figure:
    """Left: relative validation objective during training; right: log objective over the 20 evaluation steps
    (re-embedded model vs Lloyd); median and interquartile band over seeds per grid point."""
    figure = make_subplots(rows=1, cols=2, subplot_titles=(
        "training: relative validation objective (< 1 beats one Lloyd step)",
        "evaluation: mean log objective per step (dashed: Lloyd)"))
    for index, (label, seeds) in enumerate(by_label(rows).items()):
        color = PALETTE[index % len(PALETTE)]
        steps, per_seed = curves[label]
        add_band(figure, steps, per_seed, label, color, 1, 1)
        model = [json.loads(r["model_curve"]) for r in seeds]
        lloyd = [json.loads(r["lloyd_curve"]) for r in seeds]
        add_band(figure, list(range(len(model[0]))), model, label, color, 1, 2, showlegend=False)
        figure.add_trace(go.Scatter(x=list(range(len(lloyd[0]))), y=[quantile(list(v), 0.5) for v in zip(*lloyd)],
                                    line={"color": color, "dash": "dash"}, name=f"Lloyd ({label})",
                                    legendgroup=label, showlegend=False), row=1, col=2)
    figure.add_hline(y=1.0, line={"color": "black", "dash": "dot"}, row=1, col=1)
    if log_y_training:
        figure.update_yaxes(type="log", row=1, col=1)
    figure.update_xaxes(title_text="training step", row=1, col=1)
    figure.update_xaxes(title_text="step (re-embedded)", row=1, col=2)
    figure.update_layout(title=title, height=520, width=1250)
    return figure


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


def command_line() -> str:
    """The command that is running, as it is typed from the repository root: ``python -m analyses.<name> ...``."""
    module = "analyses." + Path(sys.argv[0]).stem
    return "python -m " + " ".join(shlex.quote(a) for a in [module, *sys.argv[1:]])


def write_section(key: str, text: str, path: Path = RESULTS_MD) -> None:
    """Put ``text`` in RESULTS.md between markers for ``key``: a re-run replaces its own section."""
    begin, end = f"<!-- study:{key} -->", f"<!-- /study:{key} -->"
    block = f"{begin}\n{text.rstrip()}\n{end}\n"
    current = path.read_text() if path.exists() else "# Results of the analyses\n"
    if begin in current and end in current:
        head, rest = current.split(begin, 1)
        _, tail = rest.split(end, 1)
        current = head + block + "\n" + tail.lstrip("\n")
    else:
        current = current.rstrip("\n") + "\n\n" + block
    path.write_text(current)


def verdict(ok: bool | None) -> str:
    return "n/a (not enough finished seeds)" if ok is None else ("**reproduced**" if ok else "**not reproduced**")
