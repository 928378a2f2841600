"""``interp report``: one self-contained HTML page about one model (plotly.js embedded once, opens offline).

Sections: configuration and training history; the papers' evaluation against Lloyd; linear probes; weights
beside the construction's (Q^T K, OV, similarity); attention maps; activation patching and ablations; the
surrogate answer to "what did it learn?". The instrument figures come from ``run_instruments``, which
``python -m analyses.instruments`` also calls, so the page and the committed JSON show the same numbers.
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from plotly.offline import get_plotlyjs

from interp._checks import check_output_file, check_outputs_spare_inputs, check_positive_int, check_seed
from interp._io import write_text_atomically
from interp.evaluate import EvalConfig, evaluate, summarise
from interp.instruments import plots
from interp.instruments.patching import PatchEffect, ablation_sweep, collapsed_init, patching_sweep
from interp.instruments.probes import ProbeResult, probe_table, run_probes
from interp.instruments.surrogate import SurrogateFit, fit_surrogates, reference_objectives
from interp.instruments.weights import WeightSimilarity, compare_weights
from interp.model import KMeansTransformer
from interp.model.checkpoint import load_checkpoint, load_model, resolve
from interp.tasks import TaskConfig, init_centroids, sample_tasks


@dataclass(frozen=True)
class InstrumentSettings:
    """Tasks the instruments run on: ``probe_tasks`` unseen tasks of n points (seeded by ``seed``, random initial
    centroids seeded by ``seed + 1``) for probes, patching and ablations, one step; the surrogates use their own
    192 + 192 tasks (``fit_surrogates`` defaults)."""

    probe_tasks: int = 48
    n: int = 512
    seed: int = 11

    def __post_init__(self) -> None:
        check_positive_int(self.probe_tasks, "probe_tasks", minimum=2)
        check_positive_int(self.n, "n")
        check_seed(self.seed, "seed")


@dataclass(frozen=True)
class InstrumentResults:
    """Every instrument's figures for one model (one step from random initial centroids)."""

    probes: list[ProbeResult]
    similarities: list[WeightSimilarity]
    patching: list[PatchEffect]  # clean = random init, corrupted = all centroids collapsed onto one
    ablations: list[dict]  # {attention, ablation, log_objective, change}
    surrogates: list[SurrogateFit]
    surrogate_references: dict[str, float]  # learned model, Lloyd and initial centroids after 20 steps


def instrument_tasks(model: KMeansTransformer, settings: InstrumentSettings = InstrumentSettings()):
    """The seeded tasks of ``run_instruments``: (tasks with points (b, n, d) and labels (b, n), init (b, k, d))."""
    config = model.config
    generator = torch.Generator().manual_seed(settings.seed)
    tasks = sample_tasks(TaskConfig(n=settings.n, d=config.d, k=config.k), settings.probe_tasks, generator,
                         dtype=model.codes.dtype)
    init = init_centroids(tasks.points, config.k, "random", settings.seed + 1)  # (b, k, d)
    return tasks, init


def run_instruments(model: KMeansTransformer, settings: InstrumentSettings = InstrumentSettings()) -> InstrumentResults:
    """Probes, weight similarities, patching, ablations and surrogates of ``model`` on seeded unseen tasks, in
    eval mode (dropout off; the model is left in eval mode)."""
    model.eval()
    tasks, init = instrument_tasks(model, settings)
    points = tasks.points  # (b, n, d)
    corrupted = collapsed_init(init, seed=settings.seed)  # (b, k, d)
    return InstrumentResults(
        probes=run_probes(model, points, init, steps=1),
        similarities=compare_weights(model),
        patching=patching_sweep(model, points, init, corrupted, steps=1),
        ablations=ablation_sweep(model, points, init, steps=1),
        surrogates=fit_surrogates(model),
        surrogate_references=reference_objectives(model),
    )


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

    def figure(self, figure) -> None:
        self.parts.append(figure.to_html(full_html=False, include_plotlyjs=False))

    def write(self, path: str | Path) -> Path:
        """The page, written atomically into a folder that exists (none is created)."""
        style = ("body{font-family:sans-serif;max-width:1400px;margin:auto;padding:1em}"
                 "table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;"
                 "text-align:right}th{background:#eee}")
        page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
                f"<style>{style}</style><script type='text/javascript'>{get_plotlyjs()}</script></head>"
                f"<body><h1>{html.escape(self.title)}</h1>{''.join(self.parts)}</body></html>")
        return write_text_atomically(path, page)


def build_report(name_or_path: str, out: str | Path, n_tasks: int = 128, seed: int = 11) -> Path:
    """Write the report for one checkpoint (shipped name or path) to ``out``.

    Before any work: the checkpoint exists, ``out`` can be written (``check_output_file``: its folder exists, nothing
    is created) and is not the checkpoint; ``evaluate`` then checks the memory its tasks need."""
    path = resolve(name_or_path)
    check_outputs_spare_inputs({"out": [out]}, {"checkpoint": [path]})
    check_output_file(out, "out")
    _, metadata = load_checkpoint(path)
    model = load_model(path)
    config = model.config
    report = Report(f"interp report: {name_or_path}")

    report.heading("Model", f"checkpoint <code>{html.escape(str(path))}</code>; embedding {config.embedding}, "
                   f"d={config.d}, k={config.k}, width D={config.d_model}")
    report.html(f"<pre>{html.escape(json.dumps(metadata.get('train_config', {}), indent=1))}</pre>")
    history = metadata.get("history") or []
    if history:
        report.figure(plots.training_history_figure(history))

    task_config = TaskConfig(n=512, d=config.d, k=config.k)
    eval_config = EvalConfig(n_tasks=n_tasks, steps=20, inits=("random", "kmeans++"), seed=seed)
    summary = summarise(evaluate({str(name_or_path): model}, task_config, eval_config))
    report.heading("Evaluation against Lloyd (paper 2 App. C)",
                   f"{n_tasks} unseen tasks, 20 re-embedded steps vs 20 Lloyd iterations from the same centroids.")
    final = [{"init": r["init"], "transformer": r["model_median"], "Lloyd": r["lloyd_median"],
              "transformer - Lloyd": r["model_median"] - r["lloyd_median"]} for r in summary if r["step"] == 20]
    report.html(_table(final))
    report.figure(plots.evaluation_figure(summary, "mean log objective per step"))

    settings = InstrumentSettings(seed=seed)
    tasks, init = instrument_tasks(model, settings)
    results = run_instruments(model, settings)
    report.heading("Linear probes", "held-out accuracy / R^2 per hook, against the same probe on the input embedding")
    report.html(_table(probe_table(results.probes)))
    report.figure(plots.probe_figure(results.probes))

    report.heading("Weights beside the construction (paper 1 Thm 2.1, paper 2 §3)",
                   "Q^T K and value maps of the four attentions; lines mark the data | scratch boundary.")
    report.html(_table([asdict(s) for s in results.similarities]))
    report.figure(plots.similarity_figure(results.similarities))
    report.figure(plots.weight_heatmaps(model))
    report.heading("Attention maps: construction (gamma = inf) vs learned (gamma = 1)",
                   "one task, points sorted by true cluster")
    report.figure(plots.attention_maps(model, tasks.points[:1], init[:1], tasks.labels[:1]))

    report.heading("Activation patching (one step; clean = random init, corrupted = all centroids collapsed)",
                   "fraction of the clean-vs-corrupted objective gap restored by copying one site from the clean run")
    report.html(_table([asdict(e) for e in results.patching]))
    report.heading("Ablations (one step)", "change in mean log objective when an attention's output is zeroed or "
                   "replaced by its mean; positive = the attention carries the algorithm")
    report.html(_table(results.ablations))
    report.figure(plots.ablation_figure(results.ablations))

    report.heading("What did it learn? Surrogates of the one-step update",
                   "held-out R^2 of the learned output centroids and of the update; each surrogate run as an "
                   "algorithm for 20 steps (mean log objective, same tasks as below)")
    report.html(_table([{"surrogate": f.name,
                         "coefficients": json.dumps({k: round(v, 4) for k, v in f.coefficients.items()}),
                         "temperature": f.temperature if f.temperature is not None else "-",
                         "R2 centroids": f.r2_centroids, "R2 update": f.r2_update,
                         "log objective after 20 steps": f.log_objective_after_steps} for f in results.surrogates]))
    report.html(_table([{"method": k, "log objective after 20 steps": v}
                        for k, v in results.surrogate_references.items()]))
    return report.write(out)
