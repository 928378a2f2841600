"""``interp report``: one self-contained HTML page about one model (plotly.js embedded once, opens offline).

Sections: findings (a few generated sentences); configuration and training history; the papers' evaluation
against Lloyd; linear probes; weights beside the construction's (Q^T K, OV, similarity); attention maps; activation
patching and ablations; the surrogate answer to "what did it learn?"; the decomposition of the update by path with its
slot-symmetric and slot-specific parts; the slot-specific part on one crowded pair (two centroids that start in one
true component, their moves with their slots as given and swapped); the distilled algorithm. The instrument figures
come from ``run_instruments``, which ``python -m analyses.instruments`` also calls, so the page and the committed JSON
show the same numbers; the decomposition, the crowded pair and the distilled algorithm are computed live
(``explain_model``, ``crowded_pair_section``) at the small sizes of ``ExplanationSettings`` (stated on the page).
Every figure is at most ``plots.MAX_WIDTH`` = 1350 px wide, so the page fits a 1400-px window.
"""

from __future__ import annotations

import html
import json
import math
import reprlib
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from plotly.offline import get_plotlyjs
from torch import Tensor

from interp._checks import (
    InvalidInput,
    check_output_file,
    check_outputs_spare_inputs,
    check_positive_int,
    check_seed,
)
from interp._io import write_text_atomically
from interp.algorithms import lloyd, log_objective
from interp.evaluate import EvalConfig, evaluate, summarise
from interp.instruments import plots
from interp.instruments.decompose import PathShare, decompose_update, path_statistics, r2_score, variance_share
from interp.instruments.distill import FAMILIES, attention_kernel, euclidean_kernel, fit_distilled
from interp.instruments.patching import PatchEffect, ablation_sweep, collapsed_init, patching_sweep
from interp.instruments.probes import ProbeResult, probe_table, run_probes
from interp.instruments.surrogate import SurrogateFit, fit_surrogates, reference_objectives
from interp.instruments.symmetry import (
    CrowdedPair,
    crowded_pair,
    model_step,
    permuted_outputs,
    slot_averaged_run,
    slot_permutations,
    specific_by_path,
    split_from_outputs,
)
from interp.instruments.weights import WeightSimilarity, compare_weights
from interp.model import KMeansTransformer
from interp.model.checkpoint import load_model, read_header, resolve
from interp.model.paper_format import is_torch_save_file, load_paper_checkpoint
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


# ----- decomposition, slot dependence and the distilled algorithm ---------------------------------------------


@dataclass(frozen=True)
class ExplanationSettings:
    """Sizes of the report's live explanation (small, so that each part takes seconds at 2 threads; the full-size
    figures are ``python -m analyses.explain``'s): ``tasks`` unseen tasks of n points (seed ``seed``, random initial
    centroids) for the decomposition, the symmetric split, the distilled scores and the 20-step objectives;
    ``fit_tasks`` other tasks (seed ``seed + 2``) the distilled families are fitted on; ``permutations`` random slot
    permutations (all k! when that is fewer); the slot-specific part by path on the first ``path_tasks`` tasks; the
    slot-averaged model with ``average_permutations`` permutations per step; ``steps`` steps; the crowded pair's
    symmetric part (``crowded_pair``, one task) over ``pair_permutations`` slot orders (all k! if fewer)."""

    tasks: int = 16
    fit_tasks: int = 4
    permutations: int = 16
    path_tasks: int = 4
    average_permutations: int = 2
    steps: int = 20
    n: int = 512
    seed: int = 13
    pair_permutations: int = 256

    def __post_init__(self) -> None:
        for name in ("tasks", "fit_tasks", "permutations", "path_tasks", "average_permutations", "steps", "n",
                     "pair_permutations"):
            check_positive_int(getattr(self, name), name)
        if self.path_tasks > self.tasks:
            raise InvalidInput(f"path_tasks must be <= tasks ({self.tasks}), got {self.path_tasks}")
        check_seed(self.seed, "seed")

    def describe(self) -> str:
        return (f"{self.tasks} unseen tasks (n = {self.n}, random initial centroids, seed {self.seed}), "
                f"{self.permutations} random slot permutations (all k! if fewer), slot-specific part by path on "
                f"{self.path_tasks} tasks, distilled families fitted on {self.fit_tasks} other tasks, slot-averaged "
                f"model with {self.average_permutations} permutations per step, {self.steps} steps")


@dataclass(frozen=True)
class Explanation:
    """The report's explanation of one model's one-step update (``explain_model``)."""

    settings: ExplanationSettings
    equivariant: str | None  # why the model is exactly slot-equivariant (no codes / tied code blocks), else None
    update: Tensor  # (b, k, d) float64: the one-step update on the tasks
    parts: dict[str, Tensor]  # path -> (b, k, d) float64, summing to ``update`` (interp.instruments.decompose)
    paths: list[PathShare]  # variance share and cosine with Lloyd of every part
    sum_error: float  # max |sum of parts - update|
    n_permutations: int  # slot permutations of the symmetric split (0 for an equivariant model)
    symmetric: Tensor  # (b, k, d) float64: the symmetric part (= update for an equivariant model)
    r2_symmetric: float  # R^2 of the update by the symmetric part
    symmetric_share: float  # Cov(symmetric, update) / Var(update)
    specific_share: float  # 1 - symmetric_share
    monte_carlo_error: float  # V / (M Var(update)), 0 when exact
    permutation_change: float  # mean |change of the output| under a slot permutation (mean over the permutations)
    reversed_max_change: float  # max |change of the output| when the slot order is reversed (rounding if equivariant)
    mean_abs_update: float
    path_shares: dict[str, dict[str, float]]  # path -> {"symmetric": share, "specific": share} ({} if equivariant)
    fits: list[dict]  # family, kernel, parameters, r2_fit, r2_symmetric (held out), r2_update (held out)
    best: dict  # the fit with the largest held-out R^2 of the symmetric part, with its 20-step log_objective
    objectives: dict[str, float]  # mean log objective after ``steps``: initial, model, slot-averaged, Lloyd, distilled
    seconds: dict[str, float]  # time of each part


FIT_ITERATIONS = 20  # L-BFGS iterations of each distilled fit (the analyses' default is 100; the fits settle sooner)


def _equivariance(model: KMeansTransformer) -> str | None:
    """Why ``model``'s step is exactly slot-equivariant, or None: no slot codes (embedding "none") or code blocks tied
    (``ModelConfig.slot_equivariant``)."""
    if model.config.scratch_width == 0:
        return "it has no slot codes (embedding none): every token of a slot is its centroid alone"
    if model.config.slot_equivariant:
        return "its code blocks are tied (ModelConfig.slot_equivariant: a I + b 11^T, equal columns, rows and biases)"
    return None


def _permutations(k: int, count: int, seed: int) -> Tensor:
    """All k! slot permutations (M, k) when there are at most ``count``, else ``count`` random ones."""
    if math.factorial(k) <= count:
        return slot_permutations(k)
    return slot_permutations(k, count, seed)


@torch.no_grad()
def explain_model(model: KMeansTransformer, settings: ExplanationSettings = ExplanationSettings()) -> Explanation:
    """Decomposition of the one-step update by path, its symmetric and slot-specific parts, and the distilled
    algorithm (every family x kernel of ``interp.instruments.distill`` fitted to the symmetric part), at the small
    sizes of ``settings``; the model is left in eval mode."""
    model.eval()
    config = model.config
    task_config = TaskConfig(n=settings.n, d=config.d, k=config.k)
    dtype = model.codes.dtype
    points = sample_tasks(task_config, settings.tasks, settings.seed, dtype=dtype).points  # (b, n, d)
    init = init_centroids(points, config.k, "random", settings.seed + 1)  # (b, k, d)
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    decomposition = decompose_update(model, points, init)
    update = decomposition.update  # (b, k, d) float64
    paths = path_statistics(decomposition.parts, update, decomposition.lloyd_update)
    seconds["decomposition"] = time.perf_counter() - started

    started = time.perf_counter()
    equivariant = _equivariance(model)
    step = model_step(model)
    path_shares: dict[str, dict[str, float]] = {}
    reverse = torch.arange(config.k).flip(0)[None]  # (1, k): the slot order reversed, a check of equivariance
    reversed_change = (permuted_outputs(step, points, init, reverse)[0].double() - init.double() - update).abs()
    if equivariant:
        symmetric, n_permutations, error = update, 0, 0.0
        change = float(reversed_change.mean())
    else:
        permutations = _permutations(config.k, settings.permutations, settings.seed + 3)
        outputs = permuted_outputs(step, points, init, permutations)  # (M, b, k, d)
        split = split_from_outputs(update, outputs, init, exhaustive=len(permutations) == math.factorial(config.k))
        symmetric, n_permutations, error = split.symmetric, split.n_permutations, split.monte_carlo_error
        change = float((outputs.double() - init.double() - update).abs().mean())  # over permutations and entries
        by_path = specific_by_path(model, points[:settings.path_tasks], init[:settings.path_tasks], permutations)
        path_shares = {path: {"symmetric": by_path["symmetric_shares"][path],
                              "specific": by_path["specific_shares"][path]} for path in by_path["symmetric_shares"]}
        if all(math.isnan(shares["specific"]) for shares in path_shares.values()):  # rounding only (e.g. k = 1)
            equivariant, path_shares = "its slot-specific part is at rounding level (measured)", {}
    share = variance_share(symmetric, update)
    seconds["symmetric split"] = time.perf_counter() - started

    started = time.perf_counter()
    fit_points = sample_tasks(task_config, settings.fit_tasks, settings.seed + 2, dtype=dtype).points
    fit_init = init_centroids(fit_points, config.k, "random", settings.seed + 4)  # (b', k, d)
    if equivariant:
        fit_targets = step(fit_points, fit_init).double()  # (b', k, d): the symmetric part is the output
    else:
        fit_permutations = _permutations(config.k, settings.permutations, settings.seed + 5)
        fit_targets = permuted_outputs(step, fit_points, fit_init, fit_permutations).double().mean(0)
    kernels = {"euclidean": euclidean_kernel()}
    try:
        kernels["attn_xc"] = attention_kernel(model)
    except InvalidInput:  # a non-Euclidean attn_xc or a norm slot: the Euclidean kernel only
        pass
    steps = settings.steps

    def after_steps(centroids: Tensor) -> float:
        return float(log_objective(points, centroids.to(points.dtype)).mean())

    fits, algorithms = [], []
    for family in FAMILIES:
        for kernel_name, kernel in kernels.items():
            fit = fit_distilled(family, kernel, fit_points, fit_init, fit_targets, max_iter=FIT_ITERATIONS)
            predicted = fit.algorithm.step(points, init) - init.double()  # (b, k, d)
            fits.append({"family": family, "kernel": kernel_name, "parameters": fit.algorithm.parameters,
                         "r2_fit": fit.r2_fit, "r2_symmetric": r2_score(predicted, symmetric),
                         "r2_update": r2_score(predicted, update)})
            algorithms.append(fit.algorithm)
    index = max(range(len(fits)), key=lambda i: fits[i]["r2_symmetric"])
    best = {**fits[index], "log_objective": after_steps(algorithms[index].run(points.double(), init.double(),
                                                                               steps)[:, -1])}
    seconds["distilled algorithm"] = time.perf_counter() - started

    started = time.perf_counter()
    fixed_run = model(points, init, steps=steps, slot_order="fixed").centroids  # (b, k, d)
    objectives = {"initial": after_steps(init), "model": after_steps(fixed_run),
                  "Lloyd": after_steps(lloyd(points, init, steps).centroids)}
    if equivariant:
        objectives["slot-averaged model"] = objectives["model"]
    else:
        averaged = slot_averaged_run(model, points, init, steps, settings.average_permutations, settings.seed + 6)
        objectives["slot-averaged model"] = after_steps(averaged.trajectory[:, -1])
    objectives[f"distilled ({best['family']}, {best['kernel']})"] = best["log_objective"]
    seconds["20-step objectives"] = time.perf_counter() - started
    return Explanation(settings=settings, equivariant=equivariant, update=update, parts=decomposition.parts,
                       paths=paths, sum_error=decomposition.residual, n_permutations=n_permutations,
                       symmetric=symmetric, r2_symmetric=r2_score(symmetric, update), symmetric_share=share,
                       specific_share=1 - share, monte_carlo_error=error, permutation_change=change,
                       reversed_max_change=float(reversed_change.max()),
                       mean_abs_update=float(update.abs().mean()), path_shares=path_shares, fits=fits, best=best,
                       objectives=objectives, seconds=seconds)


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

    def opening(self, heading: str, bullets: list[str], note: str = "") -> None:
        """A section put first on the page (the findings): a heading and a list of HTML bullets."""
        items = "".join(f"<li>{bullet}</li>" for bullet in bullets)
        self.parts.insert(0, f"<h2>{html.escape(heading)}</h2><ul class='findings'>{items}</ul>"
                          + (f"<p>{note}</p>" if note else ""))

    def write(self, path: str | Path) -> Path:
        """The page, written atomically into a folder that exists (none is created)."""
        style = ("body{font-family:sans-serif;max-width:1400px;margin:auto;padding:1em;box-sizing:border-box}"
                 "table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;"
                 "text-align:right}th{background:#eee}pre{white-space:pre-wrap}ul.findings li{margin:0.3em 0}")
        page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
                f"<style>{style}</style><script type='text/javascript'>{get_plotlyjs()}</script></head>"
                f"<body><h1>{html.escape(self.title)}</h1>{''.join(self.parts)}</body></html>")
        return write_text_atomically(path, page)


def _number(value: float, digits: int = 3, sign: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    value = round(float(value), digits) + 0.0
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _parameters(parameters: dict[str, float]) -> str:
    return ", ".join(f"{name} = {value:.3g}" for name, value in parameters.items())


def decomposition_section(report: "Report", explanation: Explanation) -> None:
    """The report's "Decomposition of the update" section: parts by path and the symmetric / slot-specific split."""
    settings = explanation.settings
    report.heading("Decomposition of the update",
                   "The centroid update Δc = c' − c of one step split exactly into what flows through attn_cc and "
                   "through attn_cx from each source of the point stream (raw points, what attn_xc wrote, what "
                   "attn_xx wrote, the value bias), each attention's pattern held at its value "
                   "(interp.instruments.decompose); then the update's slot-symmetric part (the output averaged over "
                   "slot permutations, mapped back) and the slot-specific rest (interp.instruments.symmetry). "
                   f"Sizes: {html.escape(settings.describe())}; "
                   f"{_seconds(explanation, 'decomposition', 'symmetric split')}.")
    rows = []
    for row in explanation.paths:
        entry = {"path": row.name, "share of Var(update)": row.variance_share, "Var(part) / Var(update)":
                 row.own_variance, "cosine with Lloyd's update": row.cosine_lloyd}
        if explanation.path_shares:
            entry["share of the symmetric part"] = explanation.path_shares[row.name]["symmetric"]
            entry["share of the slot-specific part"] = explanation.path_shares[row.name]["specific"]
        rows.append(entry)
    report.html(_table(rows))
    report.html(f"<p>The parts sum to the update within {explanation.sum_error:.1e} (max |sum of parts − update|); "
                "the shares sum to 1.</p>")
    if explanation.equivariant:
        report.html(f"<p><b>Exactly slot-equivariant:</b> {html.escape(explanation.equivariant)}, so permuting the "
                    "initial centroids permutes the output (checked: reversing the slot order changes the mapped-back "
                    f"output by at most {explanation.reversed_max_change:.1e}); the update is its own symmetric part "
                    "and there is no slot-specific part to split.</p>")
    else:
        report.html(_table([{"permutations": explanation.n_permutations,
                             "R2 of the update by its symmetric part": explanation.r2_symmetric,
                             "symmetric share": explanation.symmetric_share,
                             "slot-specific share": explanation.specific_share,
                             "Monte Carlo error": explanation.monte_carlo_error,
                             "mean |output change| under a slot permutation": explanation.permutation_change,
                             "max |output change|, slot order reversed": explanation.reversed_max_change,
                             "mean |update|": explanation.mean_abs_update}]))
        report.html(f"<p>Shares of the slot-specific part by path on the first {settings.path_tasks} tasks (the "
                    "same permutations).</p>")
    report.figure(plots.decomposition_figure(explanation.paths, explanation.path_shares or None))


@torch.no_grad()
def pair_of_report(model: KMeansTransformer, settings: ExplanationSettings) -> tuple[CrowdedPair | None, float]:
    """The crowded pair of the report's tasks (``explain_model``'s: the same seed, points and initial centroids, with
    their true components) and the seconds it took: ``interp.instruments.symmetry.crowded_pair`` over
    ``settings.pair_permutations`` slot orders; the model is left in eval mode."""
    started = time.perf_counter()
    model.eval()
    config = model.config
    tasks = sample_tasks(TaskConfig(n=settings.n, d=config.d, k=config.k), settings.tasks, settings.seed,
                         dtype=model.codes.dtype)
    init = init_centroids(tasks.points, config.k, "random", settings.seed + 1)  # (b, k, d)
    pair = crowded_pair(model, tasks.points, init, tasks.labels, settings.pair_permutations, settings.seed + 7)
    return pair, time.perf_counter() - started


def crowded_pair_sentences(pair: CrowdedPair | None, tasks: int, equivariant: str | None = None) -> str:
    """One or two sentences (HTML) on the crowded pair, generated from its measured numbers: how much of each move is
    slot-specific, which slot takes the shared points and whether the swap swaps the roles (the cosines); for a model
    without a slot-specific part (``equivariant``: why, if known), its measured size."""
    if pair is None:
        return (f"<p>No two initial centroids of the {tasks} tasks start in one true component: there is no crowded "
                "pair to show.</p>")
    i, j = pair.slots
    where = (f"task {pair.task} of the {tasks} tasks, slots {i} and {j}, {pair.distance:.2f} apart in true component "
             f"{pair.component}")
    if pair.at_rounding_level:
        reason = f" {html.escape(equivariant)}." if equivariant else ""
        return (f"<p><b>No slot-specific part:</b>{reason} Measured on the crowded pair ({where}): the slot-specific "
                f"parts are at most {float(pair.specific_fraction.max()):.1e} of the moves' length and swapping the "
                f"two slots changes the moves by at most {pair.swap_change:.1e}, rounding level; the two panels show "
                "the same moves.</p>")
    first, second = (float(value) for value in pair.specific_fraction)
    before, after = (float(value) for value in pair.slot_share)
    cosines = [float(value) for value in pair.swap_cosine]
    if min(cosines) > 0.5:
        verdict = "swaps the roles"
    elif max(cosines) < 0.5:
        verdict = "does not swap the roles here"
    else:
        verdict = "swaps the roles only in part"
    return (f"<p>On the crowded pair ({where}) the slot-specific part is {_number(first, 2)} of the move of A "
            f"(slot {i}) and {_number(second, 2)} of B's (slot {j}); slot {i} gets {_number(before, 2)} of the pair's "
            f"attn_xc weight on the component's points. Swapping the two slots {verdict}: each centroid's "
            f"slot-specific part then has cosine {_number(cosines[0], 2)} (A) and {_number(cosines[1], 2)} (B) with "
            f"the other's before the swap ({_number(pair.taken_over, 2)} of each other's slot-specific part taken "
            f"over), and slot {i}, now holding B, gets {_number(after, 2)} of the weight.</p>")


def crowded_pair_section(report: "Report", model: KMeansTransformer, settings: ExplanationSettings,
                         equivariant: str | None = None) -> CrowdedPair | None:
    """The report's "The slot-specific part on one crowded pair" section: the sentences of ``crowded_pair_sentences``
    and ``plots.crowded_pair_figure``; returns the pair."""
    pair, seconds = pair_of_report(model, settings)
    error = (f" (standard error of the symmetric moves from sampling the orders: "
             f"{float(pair.monte_carlo_error.max()):.2g}, in the units of the points)"
             if pair is not None and not pair.exhaustive else "")
    report.heading("The slot-specific part on one crowded pair",
                   "In a learned model with slot codes the one-step update depends most on the slot order where two "
                   "initial centroids start in one true component (analyses/RESULTS.md, &quot;The slot-specific "
                   "part, explained by interventions&quot;). The pair shown: over the tasks above, the two centroids "
                   "closest to each other whose nearest true component mean is the same "
                   "(interp.instruments.symmetry.crowded_pair); its moves with the slots as given and with the two "
                   "slots swapped (mapped back), attn_xc's weights of the component's points, and the symmetric "
                   f"part over {pair.n_permutations if pair else settings.pair_permutations} slot orders{error}; "
                   f"computed in {seconds:.1f} s.")
    report.html(crowded_pair_sentences(pair, settings.tasks, equivariant))
    if pair is not None:
        report.figure(plots.crowded_pair_figure(pair))
    return pair


def distilled_section(report: "Report", explanation: Explanation) -> None:
    """The report's "Distilled algorithm" section: every family x kernel fitted to the symmetric part, the best one's
    parameters and R^2, and the objectives after the steps."""
    settings, best = explanation.settings, explanation.best
    report.heading("Distilled algorithm",
                   "A soft assignment at one inverse temperature β (kernel: −‖x − c‖², or attn_xc's own data score), "
                   "a move λ to the soft cluster mean and a repulsion κ between centroids (interp.instruments.distill)"
                   f", fitted to the symmetric part of the update on {settings.fit_tasks} tasks and scored on the "
                   f"{settings.tasks} tasks above; "
                   f"{_seconds(explanation, 'distilled algorithm', '20-step objectives')}.")
    report.html(_table([{"family": row["family"], "kernel": row["kernel"], "parameters": _parameters(row["parameters"]),
                         "R2 fit": row["r2_fit"], "R2 symmetric part (held out)": row["r2_symmetric"],
                         "R2 raw update (held out)": row["r2_update"]} for row in explanation.fits]))
    report.html(f"<p><b>Best:</b> {html.escape(best['family'])} with the {html.escape(best['kernel'])} kernel, "
                f"{html.escape(_parameters(best['parameters']))}: R² {_number(best['r2_symmetric'])} of the symmetric "
                f"part, {_number(best['r2_update'])} of the raw update.</p>")
    report.html(_table([{"method": method, f"mean log objective after {settings.steps} steps": value}
                        for method, value in explanation.objectives.items()]))
    report.figure(plots.distilled_figure(explanation.fits, explanation.objectives))


def _seconds(explanation: Explanation, *parts: str) -> str:
    return "computed in " + ", ".join(f"{explanation.seconds[part]:.1f} s ({part})" for part in parts)


def findings(summary: list[dict], probes: list[ProbeResult], explanation: Explanation, n_tasks: int) -> list[str]:
    """The report's opening bullets (HTML), each generated from figures the report computed: the evaluation against
    Lloyd, the assignment probe, the largest path of the update, the slot dependence and the distilled algorithm."""
    bullets = []
    final = {row["init"]: row for row in summary if row["step"] == max(r["step"] for r in summary)}
    for init, row in final.items():
        gap = row["model_median"] - row["lloyd_median"]
        bullets.append(f"<b>Against Lloyd</b> ({init} initial centroids, {n_tasks} tasks, {row['step']} steps): mean "
                       f"log objective {_number(row['model_median'])} vs Lloyd's {_number(row['lloyd_median'])}, "
                       f"{'better' if gap < 0 else 'worse'} by {_number(abs(gap))}.")
    probe = next((p for p in probes if p.hook.endswith("attn_xc.hook_out") and p.target == "assignment"), None)
    if probe is not None:
        bullets.append(f"<b>Assignments:</b> a linear probe reads the nearest centroid from what attn_xc writes with "
                       f"held-out accuracy {_number(probe.value)} (input embedding: {_number(probe.baseline)}).")
    largest = max(explanation.paths, key=lambda row: abs(row.variance_share))
    bullets.append(f"<b>Update by path:</b> {html.escape(largest.name)} carries {_number(largest.variance_share)} of "
                   f"the update's variance (cosine with Lloyd's update {_number(largest.cosine_lloyd, 2)}); the parts "
                   f"sum to the update within {explanation.sum_error:.1e}.")
    if explanation.equivariant:
        bullets.append(f"<b>Slot order:</b> exactly slot-equivariant ({html.escape(explanation.equivariant)}; "
                       "reversing the slot order changes the output by at most "
                       f"{explanation.reversed_max_change:.1e}).")
    else:
        top = max(explanation.path_shares.items(), key=lambda item: item[1]["specific"])
        bullets.append(f"<b>Slot order matters:</b> the slot-symmetric part explains R² "
                       f"{_number(explanation.r2_symmetric)} of the update; the slot-specific part "
                       f"({_number(explanation.specific_share)} of its variance) flows mostly through "
                       f"{html.escape(top[0])} ({_number(top[1]['specific'])}). Slot-averaged over "
                       f"{explanation.settings.average_permutations} permutations per step, the model reaches "
                       f"{_number(explanation.objectives['slot-averaged model'])} after {explanation.settings.steps} "
                       f"steps vs {_number(explanation.objectives['model'])} alone.")
    best = explanation.best
    bullets.append(f"<b>Distilled algorithm:</b> {html.escape(best['family'])} ({html.escape(best['kernel'])} "
                   f"kernel; {html.escape(_parameters(best['parameters']))}) explains R² "
                   f"{_number(best['r2_symmetric'])} of the symmetric part and {_number(best['r2_update'])} of the "
                   f"raw update; after "
                   f"{explanation.settings.steps} steps it reaches {_number(best['log_objective'])} (model "
                   f"{_number(explanation.objectives['model'])}, Lloyd {_number(explanation.objectives['Lloyd'])}).")
    return bullets


PAPERS_SETTINGS_SHOWN = 64  # cli_args entries the page lists (the papers' training script saves about 30)


def read_report_checkpoint(path: Path) -> tuple[KMeansTransformer, str, list[dict]]:
    """(model, the settings text the page shows, the training history it plots) of a checkpoint in any format
    ``load_model`` reads: an interp file's train_config and history, or a papers' file's cli_args (no history)."""
    if is_torch_save_file(path):
        model, cli_args = load_paper_checkpoint(path)
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
                 explanation_settings: ExplanationSettings = ExplanationSettings()) -> Path:
    """Write the report for one checkpoint (shipped name or path) to ``out``: it opens with the findings (bullets
    generated from the figures below), then the sections of the module docstring.

    Before any work: the checkpoint exists, ``out`` can be written (``check_output_file``: its folder exists, nothing
    is created) and is not the checkpoint; ``evaluate`` then checks the memory its tasks need."""
    path = resolve(name_or_path)
    check_outputs_spare_inputs({"out": [out]}, {"checkpoint": [path]})
    check_output_file(out, "out")
    model, settings, history = read_report_checkpoint(path)
    config = model.config
    report = Report(f"interp report: {name_or_path}")

    report.heading("Model", f"checkpoint <code>{html.escape(str(path))}</code>; embedding {config.embedding}, "
                   f"d={config.d}, k={config.k}, width D={config.d_model}")
    report.html(f"<pre>{html.escape(settings)}</pre>")
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

    explanation = explain_model(model, explanation_settings)
    decomposition_section(report, explanation)
    crowded_pair_section(report, model, explanation_settings, explanation.equivariant)
    distilled_section(report, explanation)
    report.opening("Findings", findings(summary, results.probes, explanation, n_tasks),
                   "Each line is generated from the figures of the sections below (the decomposition and the "
                   "distilled algorithm at the small sizes stated there; the full-size figures are "
                   "analyses/RESULTS.md's, from <code>python -m analyses.explain</code>).")
    return report.write(out)
