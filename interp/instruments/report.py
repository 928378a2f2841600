"""``interp report``: one self-contained HTML page about one model (plotly.js embedded once, opens offline).

Sections: configuration and training history; the papers' evaluation against Lloyd; linear probes; weights
beside the construction's (Q^T K, OV, similarity); attention maps; activation patching and ablations; the
surrogate answer to "what did it learn?".
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict
from pathlib import Path

import plotly.graph_objects as go
import torch
from plotly.offline import get_plotlyjs

from interp.model.checkpoint import load_checkpoint, load_model, resolve
from interp.evaluate import EvalConfig, evaluate, evaluation_figure, summarise
from interp.instruments.patching import ablation_sweep, collapsed_init, patching_sweep
from interp.instruments.surrogate import fit_surrogates, reference_objectives
from interp.tasks import TaskConfig, init_centroids, sample_tasks


def _table(rows: list[dict], digits: int = 4) -> str:
    if not rows:
        return "<p>(none)</p>"
    def cell(value):
        if isinstance(value, float):
            return f"{value:.{digits}g}" if abs(value) < 1e-3 or abs(value) >= 1e4 else f"{value:.{digits}f}"
        return html.escape(str(value))
    head = "".join(f"<th>{html.escape(str(key))}</th>" for key in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row.values()) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class Report:
    """Collects sections (HTML and plotly figures) and writes one page."""

    def __init__(self, title: str):
        self.title = title
        self.parts: list[str] = []

    def heading(self, text: str, note: str = "") -> None:
        self.parts.append(f"<h2>{html.escape(text)}</h2>" + (f"<p>{note}</p>" if note else ""))

    def html(self, fragment: str) -> None:
        self.parts.append(fragment)

    def figure(self, figure: go.Figure) -> None:
        self.parts.append(figure.to_html(full_html=False, include_plotlyjs=False))

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        style = ("body{font-family:sans-serif;max-width:1400px;margin:auto;padding:1em}"
                 "table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;"
                 "text-align:right}th{background:#eee}")
        page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
                f"<style>{style}</style><script type='text/javascript'>{get_plotlyjs()}</script></head>"
                f"<body><h1>{html.escape(self.title)}</h1>{''.join(self.parts)}</body></html>")
        path.write_text(page, encoding="utf-8")
        return path


def build_report(name_or_path: str, out: str | Path, n_tasks: int = 128, seed: int = 11) -> Path:
    """Write the report for one checkpoint (shipped name or path) to ``out``."""
    from interp.instruments.probes import probe_figure, probe_table, run_probes
    from interp.instruments.weights import attention_maps, compare_weights, similarity_figure, weight_heatmaps

    path = resolve(name_or_path)
    _, metadata = load_checkpoint(path)
    model = load_model(path)
    config = model.config
    report = Report(f"interp report: {name_or_path}")

    report.heading("Model", f"checkpoint <code>{html.escape(str(path))}</code>; embedding {config.embedding}, "
                   f"d={config.d}, k={config.k}, width D={config.d_model}")
    report.html(f"<pre>{html.escape(json.dumps(metadata.get('train_config', {}), indent=1))}</pre>")
    history = metadata.get("history") or []
    if history:
        figure = go.Figure(go.Scatter(x=[h["step"] for h in history], y=[h["relative_objective"] for h in history],
                                      mode="lines+markers", name="relative validation objective"))
        figure.add_hline(y=1.0, line_dash="dash", annotation_text="one Lloyd step")
        figure.update_layout(title="Training: objective after one step / objective after one Lloyd step",
                             xaxis_title="training step", yaxis_title="relative validation objective", yaxis_type="log")
        report.figure(figure)

    task_config = TaskConfig(n=512, d=config.d, k=config.k)
    eval_config = EvalConfig(n_tasks=n_tasks, steps=20, inits=("random", "kmeans++"), seed=seed)
    summary = summarise(evaluate({str(name_or_path): model}, task_config, eval_config))
    report.heading("Evaluation against Lloyd (SPEC §2.7.5)",
                   f"{n_tasks} unseen tasks, 20 re-embedded steps vs 20 Lloyd iterations from the same centroids.")
    final = [{"init": r["init"], "transformer": r["model_median"], "Lloyd": r["lloyd_median"],
              "transformer - Lloyd": r["model_median"] - r["lloyd_median"]} for r in summary if r["step"] == 20]
    report.html(_table(final))
    report.figure(evaluation_figure(summary, "mean log objective per step"))

    generator = torch.Generator().manual_seed(seed)
    tasks = sample_tasks(task_config, 48, generator, dtype=model.codes.dtype)
    init = init_centroids(tasks.points, config.k, "random", seed + 1)
    probes = run_probes(model, tasks.points, init, steps=1)
    report.heading("Linear probes", "held-out accuracy / R^2 per hook, against the same probe on the input embedding")
    report.html(_table(probe_table(probes)))
    report.figure(probe_figure(probes))

    report.heading("Weights beside the construction (SPEC §2.3, §3.2)",
                   "Q^T K and value maps of the four attentions; lines mark the data | scratch boundary.")
    similarities = compare_weights(model)
    report.html(_table([asdict(s) for s in similarities]))
    report.figure(similarity_figure(similarities))
    report.figure(weight_heatmaps(model))
    report.heading("Attention maps: construction (gamma = inf) vs learned (gamma = 1)", "one task, points sorted by true cluster")
    report.figure(attention_maps(model, tasks.points[:1], init[:1], tasks.labels[:1]))

    corrupted = collapsed_init(init, seed=seed)
    effects = patching_sweep(model, tasks.points, init, corrupted, steps=1)
    report.heading("Activation patching (one step; clean = random init, corrupted = all centroids collapsed)",
                   "fraction of the clean-vs-corrupted objective gap restored by copying one site from the clean run")
    report.html(_table([asdict(e) for e in effects]))
    ablations = ablation_sweep(model, tasks.points, init, steps=1)
    report.heading("Ablations (one step)", "change in mean log objective when an attention's output is zeroed or "
                   "replaced by its mean; positive = the attention carries the algorithm")
    report.html(_table(ablations))
    figure = go.Figure()
    for kind in ("zero", "mean"):
        rows = [r for r in ablations if r["ablation"] == kind]
        figure.add_bar(x=[r["attention"] for r in rows], y=[r["change"] for r in rows], name=f"{kind}-ablation")
    figure.update_layout(title="Ablation effect", xaxis_title="attention", yaxis_title="change in mean log objective")
    report.figure(figure)

    fits = fit_surrogates(model)
    references = reference_objectives(model)
    report.heading("What did it learn? Surrogates of the one-step update",
                   "held-out R^2 of the learned output centroids and of the update; each surrogate run as an "
                   "algorithm for 20 steps (mean log objective, same tasks as below)")
    report.html(_table([{"surrogate": f.name, "coefficients": json.dumps({k: round(v, 4) for k, v in f.coefficients.items()}),
                         "temperature": f.temperature if f.temperature is not None else "-",
                         "R2 centroids": f.r2_centroids, "R2 update": f.r2_update,
                         "log objective after 20 steps": f.log_objective_after_steps} for f in fits]))
    report.html(_table([{"method": k, "log objective after 20 steps": v} for k, v in references.items()]))
    return report.write(out)
