"""``interp report`` on a tiny trained checkpoint: one page, plotly.js embedded once, every figure at most 1350 px
wide (the page's column is 1400 px), it opens with the findings, and the instrument tables are those of
``run_instruments``; the live explanation (decomposition, symmetric split, distilled algorithm) is checked against
independent re-computations that use only the model's forward; the circuits section shows what the instruments give
on the same tasks (the top edge, ACDC's circuit, Pearson by scipy), and its exact node patching is the model's own
forward with one hook patched."""

import itertools
import json
import math
import re

import numpy as np
import pytest
import torch

from interp.instruments.attribution import node_attribution
from interp.instruments.circuit_discovery import acdc, edge_effects
from interp.model import KMeansTransformer
from interp.model.checkpoint import load_model
from interp.model.config import learned_model_config
from interp.report.builder import build_report
from interp.report.circuits import CircuitSettings, circuits_of_report
from interp.report.explanation import ExplanationSettings, explain_model
from interp.report.instrument_run import InstrumentSettings, instrument_tasks, run_instruments
from interp.report.page import Report
from interp.report.plots import MAX_WIDTH
from interp.report.sections import circuits_section, decomposition_section
from interp.tasks import TaskConfig, init_centroids, sample_tasks
from interp.training.train import TrainConfig, train

# the tiny model (20 training steps) drifts out of the unit cube in 20-step runs and says so: expected here
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::interp.model.transformer.OutOfTrainingRange")]

SMALL = ExplanationSettings(tasks=6, fit_tasks=4, permutations=16, path_tasks=3, average_permutations=2, steps=5,
                            n=128, seed=5)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "tiny.safetensors"
    train(TrainConfig(d=4, k=3, n=64, steps=20, batch=8, val_tasks=16, eval_every=10), path, progress=False)
    return path


@pytest.fixture(scope="module")
def page(checkpoint, tmp_path_factory, one_torch_thread):
    out = tmp_path_factory.mktemp("page") / "report.html"
    return build_report(str(checkpoint), out, n_tasks=4, explanation_settings=SMALL).read_text()


@pytest.fixture(scope="module")
def explanation(checkpoint, one_torch_thread):
    return explain_model(load_model(checkpoint), SMALL)  # seeded: the report's numbers again


def _plotly_layouts(page: str) -> list[dict]:
    """The layout object of every ``Plotly.newPlot(id, data, layout, config)`` call of the page."""
    decoder = json.JSONDecoder()
    layouts = []
    for match in re.finditer(r'Plotly\.newPlot\(\s*"[^"]+",\s*', page):
        _, end = decoder.raw_decode(page, match.end())  # the data array
        start = re.compile(r",\s*").match(page, end).end()
        layout, _ = decoder.raw_decode(page, start)
        layouts.append(layout)
    return layouts


def test_report_page_embeds_plotly_once_and_fits_the_column(page):
    assert page.count("<script type='text/javascript'>") == 1  # plotly.js, once, in the head
    body = page.split("</head>", 1)[1]
    # history, evaluation, probes, similarity, heatmaps, attention maps, ablations, attribution patching,
    # decomposition, crowded pair, distilled
    assert body.count('class="plotly-graph-div"') == 11
    layouts = _plotly_layouts(body)
    assert len(layouts) == 11
    for layout in layouts:  # every figure fits a 1400-px window: an explicit width <= 1360 px, or autosized
        assert layout.get("width", 0) <= 1360 or layout.get("autosize") is True, layout.get("title")
    assert max(layout["width"] for layout in layouts) <= MAX_WIDTH == 1350
    for heading in ("Findings", "Linear probes", "Weights beside the construction", "Activation patching",
                    "Ablations", "Circuits", "What did it learn?", "Decomposition of the update",
                    "The slot-specific part on one crowded pair", "Distilled algorithm"):
        assert f"<h2>{heading}" in page
    assert re.search(r"paper [12]", body)  # headings cite the papers, not files outside the repository


def test_report_opens_with_findings_generated_from_its_figures(page, explanation):
    body = page.split("<body>", 1)[1]
    headings = re.findall(r"<h2>([^<]+)</h2>", body)
    assert headings[0] == "Findings" and headings[1] == "Model"
    findings = body.split("<h2>Findings</h2>", 1)[1].split("<h2>", 1)[0]
    bullets = re.findall(r"<li>(.*?)</li>", findings)
    assert 4 <= len(bullets) <= 7
    best = explanation.best
    assert f"R² {best['r2_symmetric']:.3f} of the symmetric part" in findings
    assert f"{explanation.r2_symmetric:.3f}" in findings  # a one-hot model reads slot identity: the split is stated
    assert f"within {explanation.sum_error:.1e}" in findings
    assert f"Lloyd {explanation.objectives['Lloyd']:.3f}" in findings
    sizes = f"{SMALL.tasks} unseen tasks (n = {SMALL.n}"
    assert sizes in body.split("<h2>Decomposition of the update</h2>", 1)[1]  # the page says its sizes


def _tasks(model, settings):
    points = sample_tasks(TaskConfig(n=settings.n, d=model.config.d, k=model.config.k), settings.tasks,
                          settings.seed, dtype=model.codes.dtype).points
    return points, init_centroids(points, model.config.k, "random", settings.seed + 1)


def test_explanation_matches_independent_recomputations(checkpoint, explanation, one_torch_thread):
    model = load_model(checkpoint)
    points, init = _tasks(model, SMALL)
    with torch.no_grad():
        update = (model(points, init, steps=1).centroids - init).double()  # (b, k, d): a plain forward
    # the parts sum to the update (float32 model: 1e-5)
    assert (sum(explanation.parts.values()) - update).abs().max() < 1e-5
    assert sum(row.variance_share for row in explanation.paths) == pytest.approx(1.0, abs=1e-5)  # float32 parts
    # k = 3 <= 16 permutations: the symmetric part is the exact average over all 3! slot orders
    assert explanation.n_permutations == 6 and explanation.monte_carlo_error == 0.0
    outputs = []
    with torch.no_grad():
        for order in itertools.permutations(range(3)):
            order = list(order)
            out = model(points, init[:, order], steps=1).centroids.double()  # slot j holds init[:, order[j]]
            mapped = torch.empty_like(out)
            mapped[:, order] = out  # back to the original slots
            outputs.append(mapped - init.double())
    symmetric = torch.stack(outputs).mean(0)  # (b, k, d)
    assert (explanation.symmetric - symmetric).abs().max() < 1e-6
    residual = ((update - symmetric) ** 2).sum()
    total = ((update - update.mean()) ** 2).sum()
    assert explanation.r2_symmetric == pytest.approx(float(1 - residual / total), abs=1e-6)
    # Lloyd's objective after the steps, by a NumPy Lloyd written here (empty clusters keep their centre)
    x, c = points.double().numpy(), init.double().numpy().copy()
    for _ in range(SMALL.steps):
        labels = ((x[:, :, None, :] - c[:, None, :, :]) ** 2).sum(-1).argmin(-1)  # (b, n)
        for b in range(x.shape[0]):
            for j in range(c.shape[1]):
                members = x[b][labels[b] == j]
                if len(members):
                    c[b, j] = members.mean(0)
    objective = ((x[:, :, None, :] - c[:, None, :, :]) ** 2).sum(-1).min(-1).sum(-1)  # (b,)
    assert explanation.objectives["Lloyd"] == pytest.approx(float(np.log(objective).mean()), abs=1e-4)
    # the best family is the one with the largest held-out R^2 of the symmetric part, at most 6 parameters
    assert explanation.best["r2_symmetric"] == max(row["r2_symmetric"] for row in explanation.fits)
    assert all(len(row["parameters"]) <= 6 for row in explanation.fits)
    assert math.isfinite(explanation.best["log_objective"])


def test_model_without_codes_is_reported_as_exactly_equivariant(one_torch_thread):
    torch.manual_seed(0)
    model = KMeansTransformer(learned_model_config(4, 3, "none")).eval()
    explanation = explain_model(model, SMALL)
    assert explanation.equivariant and explanation.path_shares == {}
    assert explanation.specific_share == pytest.approx(0.0, abs=1e-12)
    points, init = _tasks(model, SMALL)
    order = [2, 0, 1]
    with torch.no_grad():  # the claim itself: permuting the initial centroids permutes the output
        permuted = model(points, init[:, order], steps=1).centroids
        plain = model(points, init, steps=1).centroids
    assert (permuted - plain[:, order]).abs().max() < 1e-5
    assert explanation.reversed_max_change < 1e-5
    report = Report("t")
    decomposition_section(report, explanation)
    text = "".join(report.parts)
    assert "Exactly slot-equivariant" in text and "share of the slot-specific part" not in text
    assert f"at most {explanation.reversed_max_change:.1e}" in text


def test_instrument_tasks_are_seeded_and_results_repeat(checkpoint, one_torch_thread):
    model = load_model(checkpoint)
    settings = InstrumentSettings(probe_tasks=6, n=64, seed=3)
    tasks, init = instrument_tasks(model, settings)
    again, init_again = instrument_tasks(model, settings)
    assert tasks.points.shape == (6, 64, 4) and init.shape == (6, 3, 4)
    assert (tasks.points == again.points).all() and (init == init_again).all()
    first, second = run_instruments(model, settings), run_instruments(model, settings)
    assert json.dumps([p.value for p in first.probes]) == json.dumps([p.value for p in second.probes])
    # the ablations' baseline is the model's mean log objective after its one step, recomputed here in NumPy
    intact = next(row for row in first.ablations if row["ablation"] == "intact")
    with torch.no_grad():
        stepped = model(tasks.points, init, steps=1).centroids.double().numpy()  # (b, k, d)
    x = tasks.points.double().numpy()
    objective = ((x[:, :, None, :] - stepped[:, None, :, :]) ** 2).sum(-1).min(-1).sum(-1)  # (b,)
    assert intact["log_objective"] == pytest.approx(float(np.log(objective).mean()), abs=1e-4)
    centroid_patch = next(e for e in first.patching if e.kind == "centroids")
    assert centroid_patch.restored == pytest.approx(1.0, abs=1e-9)  # the whole centroid stream restores the run


# ----- circuits ---------------------------------------------------------------------------------------------------
def _circuits_part(page: str) -> str:
    return page.split("<h2>Circuits", 1)[1].split("<h2>", 1)[0]


def test_circuits_section_shows_what_the_instruments_give_on_the_report_tasks(page, checkpoint, one_torch_thread):
    """The report's defaults (seed 11, ``CircuitSettings()``): its first tasks, recomputed here, give the table's top
    edges, ACDC's edge count and the Pearson correlation (scipy) the page shows."""
    from scipy.stats import pearsonr

    settings = CircuitSettings()
    model = load_model(checkpoint).eval()
    tasks, init = instrument_tasks(model, InstrumentSettings(seed=11))
    points, init = tasks.points[:settings.tasks], init[:settings.tasks]
    part = _circuits_part(page)
    effects = edge_effects(model, points, init, steps=1, metric="objective", corruption=settings.corruption)
    ranked = effects.ranked()
    rows = re.findall(r"<tr><td>(\d+)</td><td>([^<]+)</td><td>([^<]+)</td>", part)
    assert [int(rank) for rank, _, _ in rows] == list(range(1, settings.top + 1))
    assert [html_edge.replace("&gt;", ">") for _, html_edge, _ in rows] == [edge for edge, _ in ranked[:settings.top]]
    assert float(rows[0][2]) == pytest.approx(ranked[0][1], abs=1e-4)  # the table's figures to 4 decimals
    circuit = acdc(model, points, init, steps=1, corruption=settings.corruption, threshold=settings.threshold)
    assert f"keeps <b>{len(circuit.edges)} of {circuit.all_edges} edges</b>" in part
    assert f"recovers {circuit.recovered:.4f}</b>" in part
    nodes = node_attribution(model, points, init, steps=1, corruption=settings.corruption)
    assert f"<b>{pearsonr(nodes.plain.numpy(), nodes.exact.numpy())[0]:.3f}</b> (AtP)" in part
    assert part.count('class="plotly-graph-div"') == 1  # the AtP vs exact scatter


def test_exact_node_patching_of_the_section_is_the_models_forward_with_one_hook_patched(checkpoint, one_torch_thread):
    """One step, corruption "tasks": patching a node on every input it feeds is replacing its hook's value by its
    value on the next task's input; the share of the way to the corrupted output, computed here from the model's
    own forward (per task <C - C*, C~ - C*> / ||C~ - C*||^2, the mean over tasks), is the section's exact column."""
    model = load_model(checkpoint).eval()
    tasks, init = instrument_tasks(model, InstrumentSettings(probe_tasks=4, n=64, seed=2))
    figures = circuits_of_report(model, tasks.points, init, CircuitSettings(tasks=4))
    points, starts = tasks.points.double(), init.double()
    model = model.double()
    other = (points.roll(1, dims=0), starts.roll(1, dims=0))
    with torch.no_grad():
        clean = model(points, starts, steps=1, slot_order="fixed").centroids  # (b, k, d)
        _, cache = model.run_with_cache(*other, steps=1, slot_order="fixed")
        corrupted = model(*other, steps=1, slot_order="fixed").centroids
        towards = corrupted - clean
        for node, exact in zip(figures.nodes.nodes, figures.nodes.exact.tolist()):
            patched = model.run_with_hooks(points, starts, steps=1, slot_order="fixed",
                                           fwd_hooks=[(node.hook, lambda act, hook: cache[hook.name])]).centroids
            share = ((patched - clean) * towards).sum(dim=(1, 2)) / (towards * towards).sum(dim=(1, 2))
            assert float(share.mean()) == pytest.approx(exact, abs=1e-4), str(node)
    assert math.isfinite(figures.pearson) and -1 <= figures.pearson <= 1


def test_a_model_without_a_graph_gets_the_reason_instead_of_the_circuits(one_torch_thread):
    """A re-embedding model with a norm slot has no graph (its re-embedded norm is not a sum of the nodes): the
    section says why and draws nothing."""
    from dataclasses import replace

    torch.manual_seed(0)
    model = KMeansTransformer(replace(learned_model_config(4, 3, "onehot"), norm_slot=True)).eval()
    points = sample_tasks(TaskConfig(n=32, d=4, k=3), 3, 0).points
    figures = circuits_of_report(model, points, init_centroids(points, 3, "random", 1), CircuitSettings(tasks=3))
    assert figures.unavailable and "norm slot" in figures.unavailable and figures.effects is None
    report = Report("t")
    circuits_section(report, figures)
    text = "".join(report.parts)
    assert "No graph for this model" in text and "norm slot" in text and "plotly-graph-div" not in text
