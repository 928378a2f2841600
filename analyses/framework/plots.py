"""The plotly figures of the analyses' studies, drawn by ``python -m analyses.figures`` from the committed data:
``study_figure`` (learning studies), ``multistep_figure`` (re-embedding vs stacking), ``variants_figure``
(contaminated tasks); ``write_page`` writes a figure as an HTML page beside one shared ``plotly.min.js``."""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analyses.framework.statistics import interquartile
from interp._io import write_text_atomically
from interp.report.plots import MAX_WIDTH, PALETTE


def write_page(figure: go.Figure, path: str | Path) -> Path:
    """Write ``figure`` as an HTML page that loads the ``plotly.min.js`` written beside it (one copy per folder), both
    through ``interp._io`` (atomic, in a folder that exists, never over a special file)."""
    from plotly.offline import get_plotlyjs

    path = Path(path)
    page = figure.to_html(include_plotlyjs="directory", full_html=True)  # loads src="plotly.min.js"
    library = path.parent / "plotly.min.js"
    if not library.is_file():
        write_text_atomically(library, get_plotlyjs())
    return write_text_atomically(path, page)


def _add_band(figure: go.Figure, x: list, median: list[float], low: list[float], high: list[float], name: str,
              color: str, row: int, col: int, showlegend: bool = True) -> None:
    """Median line and a (low, high) band."""
    figure.add_trace(go.Scatter(x=list(x) + list(x)[::-1], y=list(high) + list(low)[::-1], fill="toself",
                                fillcolor=color, opacity=0.2, line={"width": 0}, hoverinfo="skip", showlegend=False,
                                legendgroup=name), row=row, col=col)
    figure.add_trace(go.Scatter(x=list(x), y=list(median), name=name, line={"color": color}, legendgroup=name,
                                showlegend=showlegend), row=row, col=col)


def study_figure(title: str, rows: list[dict], training: dict[str, dict], log_y_training: bool = True) -> go.Figure:
    """A learning study (``analyses/studies.py``). Left: relative validation objective during training, from
    ``training`` = {label: {"steps", "median", "q25", "q75"}}; right: log objective over the evaluation steps
    (re-embedded model vs Lloyd, dashed), from the CSV ``rows``; median and interquartile band over seeds per
    grid point."""
    figure = make_subplots(rows=1, cols=2, subplot_titles=(
        "training: relative validation objective (< 1 beats one Lloyd step)",
        "evaluation: mean log objective per step (dashed: Lloyd)"))
    labels = list(dict.fromkeys(row["label"] for row in rows))
    for index, label in enumerate(labels):
        seeds = [row for row in rows if row["label"] == label]
        color = PALETTE[index % len(PALETTE)]
        curve = training[label]
        _add_band(figure, curve["steps"], curve["median"], curve["q25"], curve["q75"], label, color, 1, 1)
        model = [json.loads(r["model_curve"]) for r in seeds]
        lloyd = [json.loads(r["lloyd_curve"]) for r in seeds]
        _add_band(figure, list(range(len(model[0]))), *interquartile(model), label, color, 1, 2, showlegend=False)
        figure.add_trace(go.Scatter(x=list(range(len(lloyd[0]))), y=interquartile(lloyd)[0],
                                    line={"color": color, "dash": "dash"}, name=f"Lloyd ({label})",
                                    legendgroup=label, showlegend=False), row=1, col=2)
    figure.add_hline(y=1.0, line={"color": "black", "dash": "dot"}, row=1, col=1)
    if log_y_training:
        figure.update_yaxes(type="log", row=1, col=1)
    figure.update_xaxes(title_text="training step", row=1, col=1)
    figure.update_xaxes(title_text="step (re-embedded)", row=1, col=2)
    figure.update_layout(title=title, height=520, width=1250)
    return figure


def multistep_figure(curves: dict[str, list[dict]]) -> go.Figure:
    """Re-embedding vs naive stacking (paper 2 Fig. 6): per embedding the median over checkpoints of the mean log
    objective per step, re-embedded (solid) and stacked (dotted), and Lloyd (black, dashed; median over all).
    ``curves`` = {embedding: [{"reembedded", "stacked", "lloyd"} per checkpoint]}
    (``analyses/studies/multistep/measure.py``)."""
    figure = go.Figure()
    styles = {"reembedded": "solid", "stacked": "dot"}
    for index, (embedding, runs) in enumerate(curves.items()):
        color = PALETTE[index % len(PALETTE)]
        for kind, dash in styles.items():
            figure.add_trace(go.Scatter(y=interquartile([r[kind] for r in runs])[0], name=f"{embedding} {kind}",
                                        line={"color": color, "dash": dash}))
    lloyd = interquartile([r["lloyd"] for runs in curves.values() for r in runs])[0]
    figure.add_trace(go.Scatter(y=lloyd, name="Lloyd", line={"color": "black", "dash": "dash"}))
    figure.update_layout(title="Multi-step inference: re-embedding vs naive stacking (paper 2 Fig. 6)",
                         xaxis_title="step", yaxis_title="mean log objective", height=520, width=900)
    return figure


def variants_figure(rows: list[dict]) -> go.Figure:
    """Contamination study (``analyses/studies/variants/measure.py``): per task distribution, grouped bars of every
    method's mean log inlier objective (left) and adjusted Rand index (right)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=["mean log inlier objective (lower is better)",
                                                          "ARI vs true components (higher is better)"])
    for name in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == name]
        fig.add_bar(x=[r["setting"] for r in mine], y=[float(r["log_inlier_objective"]) for r in mine], name=name,
                    legendgroup=name, row=1, col=1)
        fig.add_bar(x=[r["setting"] for r in mine], y=[float(r["ari"]) for r in mine], name=name, legendgroup=name,
                    showlegend=False, row=1, col=2)
    fig.update_xaxes(title_text="task distribution")
    fig.update_yaxes(title_text="mean log inlier objective", row=1, col=1)
    fig.update_yaxes(title_text="adjusted Rand index", row=1, col=2)
    fig.update_layout(barmode="group", height=650, width=MAX_WIDTH, legend=dict(orientation="h", y=-0.25),
                      title="Variants on contaminated and heavy-tailed tasks")
    return fig
