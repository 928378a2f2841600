"""The plotly figures of ``interp report``, ``interp evaluate`` and the notebooks: builders take computed rows or
results, never a model run of their own (except ``weight_heatmaps`` and ``attention_maps``, which read a model's
weights or one forward through ``interp.instruments.weights``). The instrument modules are imported where a figure
needs them, so that ``evaluation_figure`` (also drawn by ``python -m analyses.figures``) imports plotly only.

Widths are at most ``MAX_WIDTH`` = 1350 px, so that every figure fits the 1400-px column of ``interp report``
and a laptop window. The learning studies' figures are ``analyses/_plots.py``'s.

Figures, by caller:

* evaluation (``interp evaluate``, the report): ``evaluation_figure``, ``write_evaluation_page``;
* the report: ``training_history_figure``, ``probe_figure``, ``similarity_figure``, ``weight_heatmaps``,
  ``attention_maps``, ``ablation_figure``, ``decomposition_figure`` (the update by path), ``crowded_pair_figure``
  (the slot-specific part on one crowded pair), ``distilled_figure``, ``attribution_figure`` (node attribution
  patching against exact patching);
* the notebooks: ``edge_effects_figure`` (the largest exact edge-patching effects).
"""

from __future__ import annotations

import math
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp._io import write_text_atomically

MAX_WIDTH = 1350  # px: the report's column is 1400 px
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#17becf",
           "#bcbd22"]
DESCRIPTIONS = {
    "attn_xc": "points → centroids",
    "attn_xx": "points → points",
    "attn_cx": "centroids → updated points",
    "attn_cc": "centroids → centroids",
}
SIMILARITY_METRICS = ("cosine", "diagonal_dominance", "outside_fraction", "unused_fraction")
_METRIC_TITLES = {
    "cosine": "cosine with the construction",
    "diagonal_dominance": "diagonal dominance of the data block",
    "outside_fraction": "weight outside the construction's blocks",
    "unused_fraction": "weight on features unused in a step",
}
_SYMBOLS = {"QK": "QᵀK", "QQ": "QᵀQ", "KK": "KᵀK", "OV": "OV = V"}
_AXIS_TITLES = {  # (x, y) of a heatmap of each matrix
    "QK": ("key-side feature", "query-side feature"),
    "QQ": ("query-side feature", "query-side feature"),
    "KK": ("key-side feature", "key-side feature"),
    "OV": ("input feature", "output feature"),
}


# ----- evaluation and training ----------------------------------------------------------------------------------


def evaluation_figure(summary: list[dict], title: str) -> go.Figure:
    """One panel per (protocol, setting, init) of ``interp.evaluate.summarise`` rows: median curve and band of the
    transformer and of Lloyd over the steps."""
    panels = list(dict.fromkeys((row["protocol"], row["setting"], row["init"]) for row in summary))
    columns = min(3, len(panels))
    rows_needed = (len(panels) + columns - 1) // columns
    figure = make_subplots(rows=rows_needed, cols=columns,
                           subplot_titles=[f"{p}: {s} ({i} init)" for p, s, i in panels])
    colours = {"model": "#d62728", "lloyd": "#1f77b4"}
    for index, panel in enumerate(panels):
        r, c = index // columns + 1, index % columns + 1
        points = sorted((row for row in summary if (row["protocol"], row["setting"], row["init"]) == panel),
                        key=lambda row: int(row["step"]))
        steps = [int(row["step"]) for row in points]
        for method, label in (("model", "transformer"), ("lloyd", "Lloyd")):
            high = [float(row[f"{method}_high"]) for row in points]
            low = [float(row[f"{method}_low"]) for row in points]
            figure.add_trace(go.Scatter(x=steps + steps[::-1], y=high + low[::-1], fill="toself",
                                        fillcolor=colours[method], opacity=0.2, line=dict(width=0),
                                        showlegend=False, hoverinfo="skip"), row=r, col=c)
            figure.add_trace(go.Scatter(x=steps, y=[float(row[f"{method}_median"]) for row in points], mode="lines",
                                        name=label, line=dict(color=colours[method]), showlegend=index == 0),
                             row=r, col=c)
        figure.update_xaxes(title_text="step", row=r, col=c)
        figure.update_yaxes(title_text="mean log objective", row=r, col=c)
    figure.update_layout(title=title, height=320 * rows_needed, width=min(MAX_WIDTH, 420 * columns))
    return figure


def training_history_figure(history: list[dict]) -> go.Figure:
    """Relative validation objective (one step of the model / one Lloyd step) against the training step."""
    figure = go.Figure(go.Scatter(x=[h["step"] for h in history], y=[h["relative_objective"] for h in history],
                                  mode="lines+markers", name="relative validation objective"))
    figure.add_hline(y=1.0, line_dash="dash", annotation_text="one Lloyd step")
    figure.update_layout(title="Training: objective after one step / objective after one Lloyd step",
                         xaxis_title="training step", yaxis_title="relative validation objective", yaxis_type="log",
                         width=MAX_WIDTH)
    return figure


# ----- instruments ------------------------------------------------------------------------------------------------


def probe_figure(results: list, title: str | None = None) -> go.Figure:
    """Grouped bars, one panel per target: held-out accuracy / R^2 of the probe on each hook (x axis, per step)
    next to the baseline probe on the input embedding. Values below -1 are clipped for display (hover shows
    the exact value). ``results``: ``ProbeResult`` rows of ``interp.instruments.probes.run_probes``."""
    from interp.instruments.probes import TARGETS, check_probe_results

    rows = check_probe_results(results)
    targets = [target for target in TARGETS if any(row.target == target for row in rows)]
    labels = {"assignment": "assignment (accuracy)", "distance": "distance to centroid (R²)",
              "centroid": "Lloyd centroid update (R²)"}
    fig = make_subplots(rows=1, cols=len(targets), subplot_titles=[labels[t] for t in targets],
                        horizontal_spacing=0.08)
    finite = [v for row in rows for v in (row.value, row.baseline) if math.isfinite(v)]
    low = min(0.0, max(-1.0, min(finite, default=0.0)))
    for col, target in enumerate(targets, start=1):
        subset = [row for row in rows if row.target == target]
        x = [f"L{row.step} {row.hook.split('.', 2)[-1]}" for row in subset]
        for name, key, colour in (("probe on hook", "value", "#1f77b4"),
                                  ("baseline: input embedding", "baseline", "#aaaaaa")):
            values = [getattr(row, key) for row in subset]
            fig.add_trace(go.Bar(x=x, y=[max(v, -1.0) for v in values], name=name, marker_color=colour,
                                 legendgroup=name, showlegend=col == 1, customdata=values,
                                 hovertemplate="%{x}<br>" + name + ": %{customdata:.4f}<extra></extra>"),
                          row=1, col=col)
        metric = subset[0].metric
        fig.update_yaxes(title_text="held-out accuracy" if metric == "accuracy" else "held-out R²",
                         range=[low - 0.05, 1.05], row=1, col=col)
        fig.update_xaxes(title_text="hook (step l)", tickangle=-35, row=1, col=col)
    fig.update_layout(barmode="group", title=title or "Linear probes per hook vs input-embedding baseline",
                      height=480, width=min(MAX_WIDTH, max(800, 330 * len(targets) + 220)),
                      legend=dict(x=1.01, y=1, yanchor="top"))
    return fig


def similarity_figure(similarities: list) -> go.Figure:
    """Bars per attention, one panel per metric (cosine, diagonal dominance of the data block, weight outside
    the construction's blocks, weight on unused features), one bar colour per matrix. NaN shows as "n/a".
    ``similarities``: ``WeightSimilarity`` rows of ``interp.instruments.weights.compare_weights``."""
    from interp.instruments.weights import ATTENTIONS, check_similarities

    rows = check_similarities(similarities)
    matrices = list(dict.fromkeys(s.matrix for s in rows))
    attentions = [a for a in ATTENTIONS if any(s.attention == a for s in rows)]
    fig = make_subplots(rows=1, cols=len(SIMILARITY_METRICS),
                        subplot_titles=[_METRIC_TITLES[m] for m in SIMILARITY_METRICS], horizontal_spacing=0.06)
    palette = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728")
    for col, metric in enumerate(SIMILARITY_METRICS, start=1):
        for index, key in enumerate(matrices):
            lookup = {s.attention: getattr(s, metric) for s in rows if s.matrix == key}
            values = [lookup.get(a, math.nan) for a in attentions]
            fig.add_trace(go.Bar(
                x=attentions, y=[0.0 if math.isnan(v) else v for v in values],
                text=["n/a" if math.isnan(v) else f"{v:.2f}" for v in values], textposition="outside",
                textfont=dict(size=9),
                name=_SYMBOLS[key], legendgroup=key, showlegend=col == 1, marker_color=palette[index % 4],
            ), row=1, col=col)
        fig.update_xaxes(title_text="attention", row=1, col=col)
        low = -1.05 if metric == "cosine" else 0.0
        fig.update_yaxes(title_text=metric.replace("_", " "), range=[low, 1.15], row=1, col=col)
    fig.update_layout(barmode="group", height=420, width=MAX_WIDTH, title="Learned weights vs the construction")
    fig.update_annotations(font_size=11)
    return fig


def _colorbar(fig: go.Figure, row: int, col: int) -> dict:
    """A thin colour bar to the right of subplot (row, col)."""
    subplot = fig.get_subplot(row, col)
    x_domain, y_domain = subplot.xaxis.domain, subplot.yaxis.domain
    return dict(x=x_domain[1] + 0.004, y=(y_domain[0] + y_domain[1]) / 2, len=y_domain[1] - y_domain[0],
                thickness=8, tickfont=dict(size=8))


def _gamma_label(gamma: float) -> str:
    return "∞" if math.isinf(gamma) else f"{gamma:g}"


def weight_heatmaps(model, reference=None, matrices: tuple[str, ...] = ("QK", "OV")) -> go.Figure:
    """One row per attention: learned Q^T K | construction Q^T K | learned OV | construction OV (paper 1 Fig. 5).

    Every matrix has its own symmetric colour scale (0 white, red positive, blue negative), rows drawn top to
    bottom like a matrix, labelled axes (query-/key-side feature, output/input feature), tick labels x_i / y_j,
    and black lines at the data | scratch boundary (index d) and before a norm slot. Matrices and checks come
    from ``interp.instruments.weights.heatmap_matrices``."""
    from interp.instruments.weights import ATTENTIONS, block_boundaries, feature_labels, heatmap_matrices

    per_attention = heatmap_matrices(model, reference, matrices)
    labels = feature_labels(model)
    D = len(labels)
    bounds = block_boundaries(model)
    columns = list(per_attention[ATTENTIONS[0]])  # [(matrix, source), ...]
    titles = [f"{name} {_SYMBOLS[key]} ({source})" for name in ATTENTIONS for key, source in columns]
    fig = make_subplots(rows=len(ATTENTIONS), cols=len(columns), subplot_titles=titles,
                        horizontal_spacing=0.1, vertical_spacing=0.07)  # room for a colour bar and the next y title
    for row, name in enumerate(ATTENTIONS, start=1):
        for col, (key, source) in enumerate(columns, start=1):
            matrix = per_attention[name][(key, source)]  # (D, D)
            bound = float(matrix.abs().max()) or 1.0
            fig.add_trace(go.Heatmap(
                z=matrix.numpy(), x=labels, y=labels, colorscale="RdBu_r", zmid=0, zmin=-bound, zmax=bound,
                colorbar=_colorbar(fig, row, col),
                hovertemplate="row %{y}, column %{x}: %{z:.3g}<extra></extra>",
            ), row=row, col=col)
            x_title, y_title = _AXIS_TITLES[key]
            fig.update_xaxes(title_text=x_title, title_font=dict(size=10), tickfont=dict(size=7), row=row, col=col)
            fig.update_yaxes(title_text=y_title, title_font=dict(size=10), tickfont=dict(size=7),
                             autorange="reversed", row=row, col=col)
            for b in bounds:
                line = dict(color="black", width=1)
                fig.add_shape(type="line", x0=b - 0.5, x1=b - 0.5, y0=-0.5, y1=D - 0.5, line=line, row=row, col=col)
                fig.add_shape(type="line", x0=-0.5, x1=D - 0.5, y0=b - 0.5, y1=b - 0.5, line=line, row=row, col=col)
    gamma = _gamma_label(model.config.attn_xc.gamma)
    width = min(MAX_WIDTH, 390 * len(columns))
    fig.update_layout(
        height=round(width / len(columns) * 0.85) * len(ATTENTIONS), width=width,
        title=f"{model.config.embedding} model (γ = {gamma}) vs the construction: data | scratch boundary at d",
    )
    fig.update_annotations(font_size=11)
    return fig


def attention_maps(model, points, init, labels, reference=None, max_points: int = 256) -> go.Figure:
    """The four attention patterns of the construction (top row, sigma_inf: AHAT) and of ``model`` (bottom row,
    sigma_gamma at its own gamma, as trained) for one task (paper 1 Fig. 6), from
    ``interp.instruments.weights.attention_map_data`` (which documents the arguments and the ordering). Grey
    lines separate the true components; each map has its own colour scale from 0 to its maximum (a learned
    sigma_1 pattern is much flatter than a hardmax)."""
    from interp.instruments.weights import ATTENTIONS, attention_map_data

    data = attention_map_data(model, points, init, labels, reference, max_points)
    c_ticks = [f"c{j}" for j in data.centroid_order]
    starts = data.component_starts
    ends = starts[1:] + [data.shown_points]
    point_ticks = dict(tickvals=[(s + e - 1) / 2 for s, e in zip(starts, ends)],
                       ticktext=[f"true {label}" for label in data.component_labels])
    axes = {  # (x kind, y kind)
        "attn_xc": ("centroid", "point"), "attn_xx": ("point", "point"),
        "attn_cx": ("point", "centroid"), "attn_cc": ("centroid", "centroid"),
    }
    sources = ("construction", "learned")
    titles = [f"σ_{_gamma_label(data.gammas[source][name])} {name}: {DESCRIPTIONS[name]} ({source})"
              for source in sources for name in ATTENTIONS]
    fig = make_subplots(rows=2, cols=4, subplot_titles=titles, horizontal_spacing=0.1,
                        vertical_spacing=0.14)  # room for a colour bar and the next y title
    for row, source in enumerate(sources, start=1):
        for col, name in enumerate(ATTENTIONS, start=1):
            shown = data.patterns[source][name]  # (rows, cols)
            x_kind, y_kind = axes[name]
            x_index = list(range(shown.shape[1])) if x_kind == "point" else c_ticks
            y_index = list(range(shown.shape[0])) if y_kind == "point" else c_ticks
            fig.add_trace(go.Heatmap(
                z=shown.numpy(), x=x_index, y=y_index, colorscale="Viridis", zmin=0,
                zmax=float(shown.max()) or 1.0, colorbar=_colorbar(fig, row, col),
                hovertemplate="query %{y}, key %{x}: %{z:.3g}<extra></extra>",
            ), row=row, col=col)
            for axis, kind in (("x", x_kind), ("y", y_kind)):
                role = "key" if axis == "x" else "query"
                title = f"{role}: point (sorted by true cluster)" if kind == "point" else f"{role}: centroid"
                update = fig.update_xaxes if axis == "x" else fig.update_yaxes
                extra = point_ticks if kind == "point" else {}
                update(title_text=title, title_font=dict(size=10), tickfont=dict(size=8), row=row, col=col, **extra)
                if kind == "point":
                    other = shown.shape[0] if axis == "x" else shown.shape[1]
                    for s in starts[1:]:
                        coords = (dict(x0=s - 0.5, x1=s - 0.5, y0=-0.5, y1=other - 0.5) if axis == "x"
                                  else dict(x0=-0.5, x1=other - 0.5, y0=s - 0.5, y1=s - 0.5))
                        fig.add_shape(type="line", line=dict(color="lightgrey", width=0.5), row=row, col=col,
                                      **coords)
            fig.update_yaxes(autorange="reversed", row=row, col=col)
    fig.update_layout(height=800, width=MAX_WIDTH,
                      title=f"Attention maps for one task (n = {data.n}, shown {data.shown_points} points)")
    fig.update_annotations(font_size=10)
    return fig


def ablation_figure(ablations: list[dict]) -> go.Figure:
    """Bars of the change in mean log objective per attention, for zero- and mean-ablation
    (``interp.instruments.patching.ablation_sweep`` rows)."""
    figure = go.Figure()
    for kind in ("zero", "mean"):
        rows = [r for r in ablations if r["ablation"] == kind]
        figure.add_bar(x=[r["attention"] for r in rows], y=[r["change"] for r in rows], name=f"{kind}-ablation")
    figure.update_layout(title="Ablation effect", xaxis_title="attention",
                         yaxis_title="change in mean log objective", width=900)
    return figure


# ----- explanation -------------------------------------------------------------------------------------------


def decomposition_figure(paths: list, path_shares: dict[str, dict[str, float]] | None = None) -> go.Figure:
    """The one-step update by path (``interp.instruments.decompose``): each part's share of the update's variance and
    its cosine with Lloyd's update; with ``path_shares`` ({path: {"symmetric", "specific"}}, from
    ``interp.instruments.symmetry.specific_by_path``) a third panel: each path's share of the symmetric part's and of
    the slot-specific part's variance. ``paths``: ``PathShare`` rows."""
    titles = ["share of the update's variance", "cosine with Lloyd's update"]
    if path_shares:
        titles.append("share of the symmetric (blue) / slot-specific (red) part")
    fig = make_subplots(rows=1, cols=len(titles), subplot_titles=titles, horizontal_spacing=0.08)
    names = [row.name for row in paths]
    fig.add_trace(go.Bar(x=names, y=[row.variance_share for row in paths], marker_color=PALETTE[0],
                         name="variance share", showlegend=False), row=1, col=1)
    cosines = [row.cosine_lloyd for row in paths]
    fig.add_trace(go.Bar(x=names, y=[0.0 if math.isnan(v) else v for v in cosines], marker_color=PALETTE[2],
                         text=["n/a" if math.isnan(v) else f"{v:.2f}" for v in cosines], textposition="outside",
                         name="cosine", showlegend=False, cliponaxis=False), row=1, col=2)
    fig.update_yaxes(range=[-1.05, 1.05], row=1, col=2)
    if path_shares:
        for key, colour in (("symmetric", PALETTE[0]), ("specific", PALETTE[1])):
            values = [path_shares.get(name, {}).get(key, math.nan) for name in names]
            fig.add_trace(go.Bar(x=names, y=[0.0 if math.isnan(v) else v for v in values], marker_color=colour,
                                 name="symmetric part" if key == "symmetric" else "slot-specific part",
                                 showlegend=False), row=1, col=3)
    fig.update_xaxes(tickangle=-30, tickfont=dict(size=10))
    fig.update_layout(barmode="group", height=440, width=min(MAX_WIDTH, 450 * len(titles)),
                      title="The one-step update by path (patterns held at their values)")
    return fig


def _arrow(start, move, name: str, color: str, dash: str = "solid", width: float = 3, **kwargs) -> go.Scatter:
    """A 2-D arrow from ``start`` (2,) along ``move`` (2,): a line with an arrow head at its end."""
    x0, y0 = float(start[0]), float(start[1])
    x1, y1 = x0 + float(move[0]), y0 + float(move[1])
    return go.Scatter(x=[x0, x1], y=[y0, y1], mode="lines+markers", name=name,
                      line=dict(color=color, width=width, dash=dash),
                      marker=dict(symbol="arrow", angleref="previous", size=[0, 14], color=color),
                      hovertemplate=name + ": move (%{x:.3f}, %{y:.3f})<extra></extra>", **kwargs)


def crowded_pair_figure(pair, model_name: str | None = None) -> go.Figure:
    """The slot-specific part on one crowded pair (``interp.instruments.symmetry.crowded_pair``): two panels in the
    plane of the pair's moves, the slots as given (left) and with the pair's two slots swapped (right). Colours follow
    the slots, letters the centroids: the shared component's points coloured by the slot that gets more of their
    attn_xc weight, the two centroids (A, B) and their moves under one step (arrows, true length), the symmetric
    part (grey dotted: the move averaged over slot orders, the same in both panels), the component's mean and the
    components where moves end. If the roles follow the slots, the two panels show the same colours doing the same
    thing from swapped positions."""
    i, j = pair.slots
    colours = {i: PALETTE[0], j: PALETTE[1]}
    orders = (("given", (i, j), pair.moves_2d, pair.attention),
              ("swapped", (j, i), pair.swapped_moves_2d, pair.swapped_attention))
    titles = [f"slots as given: A in slot {i}, B in slot {j}", f"slots swapped: A in slot {j}, B in slot {i}"]
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles, horizontal_spacing=0.07)
    where = f"component {pair.component}"
    for col, (_, slot_of, moves, attention) in enumerate(orders, start=1):
        first = col == 1  # legend entries once
        for index, component in enumerate(pair.destinations):
            held = "held a centroid at the start" if pair.destination_covered[index] else "no centroid at the start"
            label = f"component {component} ({held})"
            shown = pair.destination_points_2d[index]
            fig.add_trace(go.Scatter(x=shown[:, 0].tolist(), y=shown[:, 1].tolist(), mode="markers", name=label,
                                     legendgroup=label, showlegend=first, hoverinfo="skip",
                                     marker=dict(size=4, color="#b0b0b0", opacity=0.6)), row=1, col=col)
            mean = pair.destination_means_2d[index]
            fig.add_trace(go.Scatter(x=[float(mean[0])], y=[float(mean[1])], mode="markers+text",
                                     text=[f"mean of component {component}"], textposition="bottom center",
                                     textfont=dict(size=10, color="#606060"), name=label, legendgroup=label,
                                     showlegend=False, marker=dict(symbol="x", size=9, color="#606060")),
                          row=1, col=col)
        takes_b = attention[:, 1] > attention[:, 0]  # (m,): the point gives more of its weight to B than to A
        for centroid, chosen in ((0, ~takes_b), (1, takes_b)):
            slot = slot_of[centroid]
            shown = pair.points_2d[chosen]
            fig.add_trace(go.Scatter(x=shown[:, 0].tolist(), y=shown[:, 1].tolist(), mode="markers",
                                     name=f"points slot {slot} takes (more of their attn_xc weight)",
                                     legendgroup=f"points {slot}", showlegend=first,
                                     marker=dict(size=6, color=colours[slot], opacity=0.45),
                                     hovertemplate=f"{where}: taken by slot {slot}<extra></extra>"), row=1, col=col)
        mean = pair.component_mean_2d
        fig.add_trace(go.Scatter(x=[float(mean[0])], y=[float(mean[1])], mode="markers",
                                 name=f"mean of {where} (A and B start in it)", legendgroup="mean", showlegend=first,
                                 marker=dict(symbol="x", size=11, color="black")), row=1, col=col)
        for centroid in (0, 1):
            fig.add_trace(_arrow(pair.centroids_2d[centroid], pair.symmetric_moves_2d[centroid],
                                 f"symmetric part (move averaged over {pair.n_permutations} slot orders)", "#7f7f7f",
                                 dash="dot", width=2, legendgroup="symmetric", showlegend=first and centroid == 0),
                          row=1, col=col)
        for centroid, letter in ((0, "A"), (1, "B")):
            slot = slot_of[centroid]
            fig.add_trace(_arrow(pair.centroids_2d[centroid], moves[centroid], f"slot {slot}", colours[slot],
                                 legendgroup=f"slot {slot}", showlegend=first), row=1, col=col)
            start = pair.centroids_2d[centroid]
            fig.add_trace(go.Scatter(x=[float(start[0])], y=[float(start[1])], mode="markers+text", text=[letter],
                                     textposition="middle left", textfont=dict(size=14, color=colours[slot]),
                                     name=f"slot {slot}", legendgroup=f"slot {slot}", showlegend=False,
                                     marker=dict(symbol="diamond", size=12, color=colours[slot],
                                                 line=dict(color="black", width=1)),
                                     hovertemplate=f"centroid {letter} in slot {slot}<extra></extra>"),
                          row=1, col=col)
    everything = [pair.points_2d, pair.centroids_2d, pair.component_mean_2d[None], pair.destination_means_2d,
                  *pair.destination_points_2d]
    for moves in (pair.moves_2d, pair.swapped_moves_2d, pair.symmetric_moves_2d):
        everything.append(pair.centroids_2d + moves)
    shown = [values.reshape(-1, 2) for values in everything if values.numel()]
    low = [min(float(values[:, axis].min()) for values in shown) for axis in (0, 1)]
    high = [max(float(values[:, axis].max()) for values in shown) for axis in (0, 1)]
    pad = 0.08 * max(high[0] - low[0], high[1] - low[1]) + 1e-9
    for col in (1, 2):  # the same ranges in both panels, one unit the same length on both axes
        fig.update_xaxes(range=[low[0] - pad, high[0] + pad], constrain="domain",
                         title_text=f"axis 1 of the moves' plane (towards {where}'s mean)", row=1, col=col)
        fig.update_yaxes(range=[low[1] - pad, high[1] + pad], constrain="domain",
                         scaleanchor="x" if col == 1 else "x2", scaleratio=1, title_text="axis 2 of the moves' plane",
                         row=1, col=col)
    subject = f"{model_name}: " if model_name else ""
    fig.update_layout(
        title=dict(text=f"{subject}the slot-specific part on one crowded pair: centroids A and B start "
                        f"{pair.distance:.2f} apart in true {where} (task {pair.task})<br><sup>colours follow the "
                        "slots, letters the centroids; arrows: one step of the model, at true length</sup><br><sup>"
                        "2-D view: the plane through A and B's midpoint that holds the most of the six moves "
                        f"({pair.plane_share:.0%} of their squared length)</sup>"),
        height=640, width=MAX_WIDTH, legend=dict(orientation="h", y=-0.22, x=0, yanchor="top"),
        margin=dict(t=130, b=160))
    fig.update_annotations(font_size=12)
    return fig


def distilled_figure(fits: list[dict], objectives: dict[str, float]) -> go.Figure:
    """Distilled algorithms (``interp.instruments.distill``): held-out R^2 of the symmetric part and of the raw update
    per family and kernel (``fits`` rows with family, kernel, r2_symmetric, r2_update), and the mean log objective
    after the report's steps of each method (``objectives`` = {method: value})."""
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.1,
                        subplot_titles=["held-out R² of the one-step update: symmetric part (blue) / raw update "
                                        "(orange)", "mean log objective after the steps"])
    labels = [f"{row['family']}, {row['kernel']}" for row in fits]
    for key, name, colour in (("r2_symmetric", "symmetric part", PALETTE[0]),
                              ("r2_update", "raw update", PALETTE[4])):
        values = [row[key] for row in fits]
        fig.add_trace(go.Bar(x=labels, y=[max(v, -1.0) for v in values], name=name, marker_color=colour,
                             showlegend=False,
                             customdata=values, hovertemplate="%{x}: %{customdata:.4f}<extra>" + name + "</extra>"),
                      row=1, col=1)
    methods = list(objectives)
    fig.add_trace(go.Bar(x=methods, y=[objectives[m] for m in methods], marker_color=PALETTE[3], showlegend=False,
                         text=[f"{objectives[m]:.3f}" for m in methods], textposition="outside", cliponaxis=False),
                  row=1, col=2)
    finite = [v for v in objectives.values() if math.isfinite(v)]
    if finite:
        low, high = min(finite), max(finite)
        pad = 0.1 * (high - low) or 0.1
        fig.update_yaxes(range=[low - pad, high + 2 * pad], row=1, col=2)
    fig.update_yaxes(range=[min(0.0, *[max(row[k], -1.0) for row in fits for k in ("r2_symmetric", "r2_update")])
                            - 0.05, 1.05], row=1, col=1)
    fig.update_xaxes(tickangle=-30, tickfont=dict(size=10))
    fig.update_layout(barmode="group", height=460, width=1200, title="The distilled algorithm")
    return fig


# ----- circuits ----------------------------------------------------------------------------------------------


def edge_effects_figure(ranked: list[tuple[str, float]], title: str, metric: str = "objective") -> go.Figure:
    """Horizontal bars of edges' exact patching effects (``EdgeEffects.ranked()`` rows, or its first few), the
    largest |effect| on top; ``metric`` names the axis."""
    names, values = [name for name, _ in ranked][::-1], [value for _, value in ranked][::-1]
    figure = go.Figure(go.Bar(x=values, y=names, orientation="h", marker_color=PALETTE[0],
                              hovertemplate="%{y}: %{x:.4g}<extra></extra>"))
    axis = "change of ln Φ (objective)" if metric == "objective" else f"damage ({metric})"
    figure.update_layout(title=title, xaxis_title=f"edge patched alone: {axis}", height=120 + 26 * len(names),
                         width=900, margin=dict(l=330))
    return figure


def attribution_figure(nodes, pearson: float, pearson_corrected: float, title: str | None = None,
                       metric: str = "corrupted_share") -> go.Figure:
    """Node attribution patching against exact node patching (``interp.instruments.attribution.NodeAttribution``
    with ``exact``, measured in ``metric``): one marker per node for AtP and one for AtP*, the diagonal dashed."""
    exact = nodes.exact.tolist()
    names = [str(node) for node in nodes.nodes]
    figure = go.Figure()
    for values, name, colour, symbol in ((nodes.plain.tolist(), f"AtP (Pearson {pearson:.3f})", PALETTE[0],
                                          "circle"),
                                         (nodes.corrected.tolist(), f"AtP* (Pearson {pearson_corrected:.3f})",
                                          PALETTE[1], "x")):
        figure.add_trace(go.Scatter(x=exact, y=values, mode="markers", name=name, text=names,
                                    marker=dict(color=colour, symbol=symbol, size=10),
                                    hovertemplate="%{text}<br>exact %{x:.4g}<br>estimate %{y:.4g}<extra></extra>"))
    finite = [v for v in exact + nodes.plain.tolist() + nodes.corrected.tolist() if math.isfinite(v)]
    low, high = (min(finite), max(finite)) if finite else (0.0, 1.0)
    figure.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines", name="estimate = exact",
                                line=dict(color="#999999", dash="dash"), hoverinfo="skip"))
    figure.update_layout(title=title or "Attribution patching vs exact patching, per node",
                         xaxis_title=f"exact: the node patched on all its edges ({metric})",
                         yaxis_title="first-order estimate", height=460, width=760)
    return figure


def write_evaluation_page(summary: list[dict], path: str | Path, title: str) -> Path:
    """A self-contained plotly HTML page (plotly.js embedded, opens offline) of ``evaluation_figure``, written
    atomically into a folder that exists."""
    page = evaluation_figure(summary, title).to_html(include_plotlyjs=True, full_html=True)
    return write_text_atomically(path, page)
