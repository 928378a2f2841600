"""``interp report``: one self-contained HTML page about one model (plotly.js embedded once, opens offline).

Sections: findings (a few generated sentences); configuration and training history; the papers' evaluation against
Lloyd; linear probes; weights beside the construction's (Q^T K, OV, similarity); attention maps; activation patching and
ablations; circuits (exact edge patching, ACDC's circuit, attribution patching against exact patching); sparse
dictionaries of the points stream against the construction's codes; interchange interventions on Lloyd's assignment;
the surrogate answer to "what did it learn?"; the decomposition of the update by path with its slot-symmetric and
slot-specific parts; the slot-specific part on one crowded pair (two centroids that start in one true component, their
moves with their slots as given and swapped); the distilled algorithm. The instrument figures come from
``run_instruments`` (``interp.report.instrument_run``), which ``python -m analyses.studies.instruments.measure`` also
calls, so the page and the committed JSON show the same numbers; the circuits are computed live
(``interp.report.circuits``) on the first few of the same tasks (``CircuitSettings``), and so are the dictionaries and
the interchange interventions (``interp.report.abstraction``, ``AbstractionSettings``); the decomposition, the crowded
pair and the distilled algorithm are computed live (``interp.report.explanation``) at the small sizes of
``ExplanationSettings`` (stated on the page). Every figure is at most ``plots.MAX_WIDTH`` = 1350 px wide, so the page
fits a 1400-px window.

Devices: ``build_report(..., device=...)`` (``interp report --device``) runs the evaluation against Lloyd, the
largest computation of the page, on that device; the instruments, the decomposition and the distilled algorithm
run on the CPU (the model is moved back after the evaluation).
"""

from __future__ import annotations

import html
import json
import reprlib
import sys
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm.auto import tqdm

from interp._checks import check_device, check_output_file, check_outputs_spare_inputs
from interp.evaluate import EvalConfig, evaluate, summarise
from interp.instruments.probes import probe_table
from interp.model import KMeansTransformer
from interp.model.checkpoint import load_model, load_torch_save_checkpoint, read_header, resolve
from interp.model.torch_save_file import is_torch_save_file
from interp.report import plots
from interp.report.abstraction import AbstractionSettings, abstraction_of_report
from interp.report.circuits import CircuitSettings, circuits_of_report
from interp.report.explanation import ExplanationSettings, explain_model
from interp.report.instrument_run import InstrumentSettings, instrument_tasks, run_instruments
from interp.report.page import Report, table
from interp.report.sections import (
    circuits_section,
    crowded_pair_section,
    decomposition_section,
    dictionary_section,
    distilled_section,
    findings,
    interchange_section,
)
from interp.tasks import TaskConfig

PAPERS_SETTINGS_SHOWN = 64  # cli_args entries the page lists (the papers' training script saves about 30)
# The sections in the order they are computed, with each one's share (%) of the whole: the progress bar's estimate,
# from the seconds each took for main-onehot at the defaults on one thread (about 16 s in all; mean of three runs)
REPORT_SECTIONS = {"evaluation": 15, "probes": 12, "weights": 1, "patching": 7, "ablations": 5, "surrogates": 17,
                   "surrogate references": 7, "circuits": 4, "dictionaries and interchange": 13, "figures": 5,
                   "explanation": 11, "crowded pair": 2, "page": 1}


class _Progress:
    """The report's progress bar (tqdm on stderr, drawn on a terminal only): ``start(section)`` counts the previous
    section done and names the next one."""

    def __init__(self, enabled: bool):
        self.bar = tqdm(total=sum(REPORT_SECTIONS.values()), unit="%", file=sys.stderr, dynamic_ncols=True,
                        disable=None if enabled else True)
        self.current: str | None = None

    def start(self, section: str) -> None:
        self._done()
        self.current = section
        self.bar.set_description(f"report: {section}")  # drawn at once (refresh)

    def _done(self) -> None:
        if self.current is not None:
            self.bar.update(REPORT_SECTIONS[self.current])

    def close(self, finished: bool) -> None:
        if finished:
            self._done()
            self.bar.set_description("report")
        self.bar.close()


def read_report_checkpoint(path: Path) -> tuple[KMeansTransformer, str, list[dict]]:
    """(model, the settings text the page shows, the training history it plots) of a checkpoint in any format
    ``load_model`` reads: an interp file's train_config and history, or a papers' file's cli_args (no history)."""
    if is_torch_save_file(path):  # by its content, whatever its name (load_model's rule)
        model, cli_args = load_torch_save_checkpoint(path)
        return model, papers_settings(cli_args), []
    model = load_model(path)  # checks the whole header first, the history included
    metadata, _ = read_header(path)
    return model, json.dumps(metadata.get("train_config", {}), indent=1), metadata.get("history") or []


def papers_settings(cli_args: Mapping | None) -> str:
    """What a papers' file says about its run: its ``cli_args``, one ``name: value`` a line, values shortened (the
    file is the papers' own, not interp's, and holds nothing else the page shows)."""
    lines = ["a checkpoint of the papers' own code (torch.save, read with weights_only=True); "
             + ("its cli_args:" if cli_args is not None else "it has no cli_args")]
    shorten = reprlib.Repr()
    shorten.maxstring = shorten.maxother = 80
    for key, value in list((cli_args or {}).items())[:PAPERS_SETTINGS_SHOWN]:
        lines.append(f"  {str(key)[:80]}: {shorten.repr(value)}")
    if cli_args is not None and len(cli_args) > PAPERS_SETTINGS_SHOWN:
        lines.append(f"  ... and {len(cli_args) - PAPERS_SETTINGS_SHOWN} more")
    return "\n".join(lines)


def build_report(name_or_path: str, out: str | Path, n_tasks: int = 128, seed: int = 11,
                 explanation_settings: ExplanationSettings = ExplanationSettings(),
                 device: str | torch.device = "cpu", progress: bool = False,
                 circuit_settings: CircuitSettings = CircuitSettings(),
                 abstraction_settings: AbstractionSettings = AbstractionSettings()) -> Path:
    """Write the report for one checkpoint (shipped name or path) to ``out``: it opens with the findings (bullets
    generated from the figures below), then the sections of the module docstring.

    Before any work: the device (``check_device``), the checkpoint exists, ``out`` can be written
    (``check_output_file``: its folder exists, nothing is created) and is not the checkpoint; ``evaluate`` then checks
    the memory its tasks need. ``device`` is where the evaluation against Lloyd runs (the rest on the CPU).
    ``progress``: a bar on stderr (on a terminal) naming each of ``REPORT_SECTIONS`` as it runs, with an estimate of
    the time left."""
    device = check_device(device, "device")
    path = resolve(name_or_path)
    check_outputs_spare_inputs({"out": [out]}, {"checkpoint": [path]})
    check_output_file(out, "out")
    model, settings, history = read_report_checkpoint(path)
    bar = _Progress(progress)
    finished = False
    try:
        written = _build(model, settings, history, path, name_or_path, out, n_tasks, seed, explanation_settings,
                         device, bar, circuit_settings, abstraction_settings)
        finished = True
    finally:
        bar.close(finished)
    return written


def _build(model: KMeansTransformer, settings: str, history: list[dict], path: Path, name_or_path: str,
           out: str | Path, n_tasks: int, seed: int, explanation_settings: ExplanationSettings, device: torch.device,
           bar: _Progress, circuit_settings: CircuitSettings = CircuitSettings(),
           abstraction_settings: AbstractionSettings = AbstractionSettings()) -> Path:
    """The page of ``build_report``, section by section (``bar.start`` names each)."""
    config = model.config
    report = Report(f"interp report: {name_or_path}")

    report.heading("Model", f"checkpoint <code>{html.escape(str(path))}</code>; embedding {config.embedding}, "
                   f"d={config.d}, k={config.k}, width D={config.d_model}")
    report.html(f"<pre>{html.escape(settings)}</pre>")
    if history:
        report.figure(plots.training_history_figure(history))

    task_config = TaskConfig(n=512, d=config.d, k=config.k)
    eval_config = EvalConfig(n_tasks=n_tasks, steps=20, inits=("random", "kmeans++"), seed=seed,
                             baselines=False)  # the page shows the model against Lloyd only
    bar.start("evaluation")
    try:  # the evaluation on the device, the rest of the page on the CPU (Module.to moves the model in place)
        summary = summarise(evaluate({str(name_or_path): model.to(device)}, task_config, eval_config, device))
    finally:
        model.to("cpu")
    report.heading("Evaluation against Lloyd (paper 2 App. C)",
                   f"{n_tasks} unseen tasks, 20 re-embedded steps vs 20 Lloyd iterations from the same centroids.")
    final = [{"init": r["init"], "transformer": r["model_median"], "Lloyd": r["lloyd_median"],
              "transformer - Lloyd": r["model_median"] - r["lloyd_median"]} for r in summary if r["step"] == 20]
    report.html(table(final))
    report.figure(plots.evaluation_figure(summary, "mean log objective per step"))

    settings = InstrumentSettings(seed=seed)
    tasks, init = instrument_tasks(model, settings)
    results = run_instruments(model, settings, starting=bar.start)
    bar.start("circuits")
    circuits = circuits_of_report(model, tasks.points, init, circuit_settings)
    bar.start("dictionaries and interchange")
    abstraction = abstraction_of_report(model, tasks.points, init, abstraction_settings)
    bar.start("figures")
    report.heading("Linear probes", "held-out accuracy / R^2 per hook, against the same probe on the input embedding")
    report.html(table(probe_table(results.probes)))
    report.figure(plots.probe_figure(results.probes))

    report.heading("Weights beside the construction (paper 1 Thm 2.1, paper 2 §3)",
                   "Q^T K and value maps of the four attentions; lines mark the data | scratch boundary.")
    report.html(table([asdict(s) for s in results.similarities]))
    report.figure(plots.similarity_figure(results.similarities))
    report.figure(plots.weight_heatmaps(model))
    report.heading("Attention maps: construction (gamma = inf) vs learned (gamma = 1)",
                   "one task, points sorted by true cluster")
    report.figure(plots.attention_maps(model, tasks.points[:1], init[:1], tasks.labels[:1]))

    report.heading("Activation patching (one step; clean = random init, corrupted = all centroids collapsed)",
                   "fraction of the clean-vs-corrupted objective gap restored by copying one site from the clean run")
    report.html(table([asdict(e) for e in results.patching]))
    report.heading("Ablations (one step)", "change in mean log objective when an attention's output is zeroed or "
                   "replaced by its mean; positive = the attention carries the algorithm")
    report.html(table(results.ablations))
    report.figure(plots.ablation_figure(results.ablations))
    circuits_section(report, circuits)
    dictionary_section(report, abstraction)
    interchange_section(report, abstraction)

    report.heading("What did it learn? Surrogates of the one-step update",
                   "held-out R^2 of the learned output centroids and of the update; each surrogate run as an "
                   "algorithm for 20 steps (mean log objective, same tasks as below)")
    report.html(table([{"surrogate": f.name,
                         "coefficients": json.dumps({k: round(v, 4) for k, v in f.coefficients.items()}),
                         "temperature": f.temperature if f.temperature is not None else "-",
                         "R2 centroids": f.r2_centroids, "R2 update": f.r2_update,
                         "log objective after 20 steps": f.log_objective_after_steps} for f in results.surrogates]))
    report.html(table([{"method": k, "log objective after 20 steps": v}
                        for k, v in results.surrogate_references.items()]))

    bar.start("explanation")
    explanation = explain_model(model, explanation_settings)
    decomposition_section(report, explanation)
    bar.start("crowded pair")
    crowded_pair_section(report, model, explanation_settings, explanation.equivariant)
    bar.start("page")
    distilled_section(report, explanation)
    report.opening("Findings", findings(summary, results.probes, explanation, n_tasks),
                   "Each line is generated from the figures of the sections below (the decomposition and the "
                   "distilled algorithm at the small sizes stated there; the full-size figures are "
                   "analyses/RESULTS.md's, from <code>python -m analyses.explain</code>).")
    return report.write(out)
