"""``interp report`` on a tiny trained checkpoint: one page, plotly.js embedded once, every figure at most 1350 px
wide (the page's column is 1400 px), it opens with the findings, and the instrument tables are those of
``run_instruments``; the live explanation (decomposition, symmetric split, distilled algorithm) is checked against
independent re-computations that use only the model's forward; the circuits section shows what the instruments give
on the same tasks (the top edge, ACDC's circuit, Pearson by scipy), and its exact node patching is the model's own
forward with one hook patched; the sparse-dictionary section's matching, R^2 and L0 are recomputed here from the
dictionary's features and reconstruction, and the interchange section's label IIA by ``iia`` and, for the known
alignment and no intervention, by a hand-written hook and a NumPy Lloyd step."""

import itertools
import json
import math
import re

import numpy as np
import pytest
import torch

from interp.instruments.attribution import node_attribution
from interp.instruments.causal_abstraction import Alignment, iia, known_alignment, random_rotation
from interp.instruments.circuit_discovery import acdc, edge_effects
from interp.instruments.dictionary import feature_matching, fit_dictionary, random_dictionary
from interp.instruments.weights import reference_construction
from interp.model import KMeansTransformer
from interp.model.checkpoint import load_model
from interp.model.config import learned_model_config
from interp.report.abstraction import AbstractionSettings, abstraction_of_report
from interp.report.builder import build_report
from interp.report.circuits import CircuitSettings, circuits_of_report
from interp.report.explanation import ExplanationSettings, explain_model
from interp.report.instrument_run import InstrumentSettings, instrument_tasks, run_instruments
from interp.report.page import Report
from interp.report.plots import MAX_WIDTH
from interp.report.sections import (
    circuits_section,
    decomposition_section,
    dictionary_section,
    interchange_section,
)
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
                    "Ablations", "Circuits", "Sparse dictionaries on the points stream",
                    "Causal abstraction: interchange interventions", "What did it learn?",
                    "Decomposition of the update", "The slot-specific part on one crowded pair", "Distilled algorithm"):
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


# ----- sparse dictionaries and interchange interventions ----------------------------------------------------------
def _part(page: str, heading: str) -> str:
    return page.split(f"<h2>{heading}", 1)[1].split("<h2>", 1)[0]


def _table_row(part: str, *first_cells: str) -> list[str]:
    """The cells of the section's table row whose first cells are ``first_cells``."""
    for row in re.findall(r"<tr>(.*?)</tr>", part):
        cells = re.findall(r"<td>(.*?)</td>", row)
        if tuple(cells[: len(first_cells)]) == first_cells:
            return cells
    raise AssertionError(f"no row {first_cells} in the table")


def _onehot_directions(model) -> np.ndarray:
    """The construction's one-hot code directions written here: e_{d+j} - 1/k in the scratch slots, unit (k, D)."""
    d, k, width = model.config.d, model.config.k, model.config.d_model
    directions = np.zeros((k, width))
    directions[:, d:d + k] = np.eye(k) - 1.0 / k
    return directions / np.linalg.norm(directions, axis=1, keepdims=True)


def _report_rows(model, points, init, slots):
    """The points stream after step 0 as rows (N, D) from the model's own cache; the code slots alone if asked."""
    with torch.no_grad():
        _, cache = model.run_with_cache(points, init, steps=1, slot_order="fixed")
    rows = cache["blocks.0.hook_points_resid_post"].reshape(-1, model.config.d_model).clone()
    if slots == "scratch":
        d, e = model.config.d, model.config.scratch_width
        rows[:, :d], rows[:, d + e:] = 0, 0
    return rows


def test_dictionary_section_shows_what_its_features_give_on_the_report_tasks(page, checkpoint, one_torch_thread):
    """The report's defaults (seed 11, ``AbstractionSettings()``): the code-slot dictionary refitted here on the rows
    of the model's own cache, its best cosines with the one-hot codes computed in NumPy from its decoder rows (the
    live ones), its R^2 and L0 from its reconstruction, and the untrained control's, are the page's."""
    settings = AbstractionSettings()
    model = load_model(checkpoint).eval()
    tasks, init = instrument_tasks(model, InstrumentSettings(seed=11))
    points, init = tasks.points[:settings.dictionary_tasks], init[:settings.dictionary_tasks]
    rows = _report_rows(model, points, init, "scratch")
    part = _part(page, "Sparse dictionaries on the points stream")
    truth = _onehot_directions(model)
    shown = {}
    for name, dictionary in (("fitted", fit_dictionary(rows, settings.dictionary(model.config.k))),
                             ("untrained (control)", random_dictionary(rows.shape[1], 2 * model.config.k,
                                                                       settings.seed, rows.dtype, activations=rows))):
        with torch.no_grad():
            active = dictionary.encode(rows) > 0  # (N, F)
            residual = float(((rows - dictionary.reconstruct(rows)).double() ** 2).sum())
        features = dictionary.features[active.any(0)].double().numpy()  # the live features
        features = features / np.linalg.norm(features, axis=1, keepdims=True)
        best = (truth @ features.T).max(axis=1)  # (k,): best signed cosine per code
        assert float(best.mean()) == pytest.approx(
            feature_matching(torch.from_numpy(features), torch.from_numpy(truth)).mean_best_cosine, abs=1e-12)
        x = rows.double()
        r2 = 1 - residual / float(((x - x.mean(0)) ** 2).sum())
        cells = _table_row(part, "model, code (scratch) slots", name)
        assert cells[2:4] == [str(2 * model.config.k), str(rows.shape[0])]
        assert float(cells[4]) == pytest.approx(r2, abs=1e-4)
        assert float(cells[5]) == pytest.approx(float(active.sum(1).double().mean()), abs=1e-4)
        assert int(cells[6]) == int((~active.any(0)).sum())
        assert float(cells[7]) == pytest.approx(float(best.mean()), abs=1e-4)
        assert float(cells[8]) == pytest.approx(float(best.min()), abs=1e-4)
        shown[name] = float(best.mean())
    assert f"mean best cosine of <b>{shown['fitted']:.3f}</b>" in part
    assert f"the untrained control {shown['untrained (control)']:.3f}" in part
    # the positive control: the construction's own code slots, where the answer is known, are recovered
    construction = _table_row(part, "construction, code (scratch) slots", "fitted")
    assert float(construction[7]) > 0.9
    assert part.count('class="plotly-graph-div"') == 0


def _lloyd_labels(points: np.ndarray, labels: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """The base points' nearest of the means of ``points`` (b, n, d) under ``labels`` (b, n) (an empty cluster keeps
    ``previous`` (b, k, d))."""
    means = previous.copy()
    for b in range(points.shape[0]):
        for j in range(previous.shape[1]):
            members = points[b][labels[b] == j]
            if len(members):
                means[b, j] = members.mean(0)
    return ((points[:, :, None, :] - means[:, None, :, :]) ** 2).sum(-1).argmin(-1)  # (b, n)


def test_interchange_section_shows_the_label_iia_of_its_runs(page, checkpoint, one_torch_thread):
    """The page's label IIA: by ``iia`` for each run (the construction's, the positive control, is 1), and for the
    known alignment and no intervention also by hand: the base run with the scratch slots of
    blocks.0.hook_points_resid_post copied from the source run (a hook written here), against the base points'
    nearest mean under the source's nearest initial centroids (NumPy)."""
    settings = AbstractionSettings()
    model = load_model(checkpoint).eval()
    tasks, init = instrument_tasks(model, InstrumentSettings(seed=11))
    base, starts = tasks.points[:settings.pairs], init[:settings.pairs]
    source, source_starts = base.roll(-1, dims=0), starts.roll(-1, dims=0)
    part = _part(page, "Causal abstraction: interchange interventions")
    hook, d, e = "blocks.0.hook_points_resid_post", model.config.d, model.config.scratch_width
    known = known_alignment(model, "assignment")
    basis = random_rotation(model.config.d_model, torch.Generator().manual_seed(settings.seed), base.dtype)[:, :e]
    results = {
        "known alignment": iia(model, base, starts, source, source_starts, known, tol=settings.tol),
        "random subspace": iia(model, base, starts, source, source_starts,
                               Alignment("assignment", hook, basis=basis.contiguous()), tol=settings.tol),
        "no intervention": iia(model, base, starts, base, starts, known, tol=settings.tol),
    }
    construction = reference_construction(model)  # the positive control: float64, gamma = inf
    results["known alignment, construction"] = iia(
        construction, base.double(), starts.double(), source.double(), source_starts.double(),
        known_alignment(construction, "assignment"), tol=settings.tol)
    assert results["known alignment, construction"].assignment_accuracy == 1.0
    for name, result in results.items():
        cells = _table_row(part, name)
        assert float(cells[2]) == pytest.approx(result.assignment_accuracy, abs=1e-4), name
        assert int(cells[4]) == result.pairs and int(cells[5]) == result.skipped == 0
    # by hand
    x, c = base.double().numpy(), starts.double().numpy()
    source_labels = ((source.double().numpy()[:, :, None] - source_starts.double().numpy()[:, None]) ** 2
                     ).sum(-1).argmin(-1)  # (b, n): the source's assignment, point i <- source point i
    own_labels = ((x[:, :, None] - c[:, None]) ** 2).sum(-1).argmin(-1)
    with torch.no_grad():
        _, cache = model.run_with_cache(source, source_starts, steps=1, slot_order="fixed")

        def copy(activation, hook):
            patched = activation.clone()
            patched[..., d:d + e] = cache[hook.name][..., d:d + e]
            return patched

        swapped = model.run_with_hooks(base, starts, steps=1, slot_order="fixed", fwd_hooks=[(hook, copy)])
        plain = model(base, starts, steps=1, slot_order="fixed")
    hand = {"known alignment": (swapped, _lloyd_labels(x, source_labels, c)),
            "no intervention": (plain, _lloyd_labels(x, own_labels, c))}
    for name, (output, lloyd) in hand.items():
        agreement = float((output.assignments.numpy() == lloyd).mean())
        assert agreement == pytest.approx(results[name].assignment_accuracy, abs=2e-4), name
    assert f"label IIA <b>{results['known alignment'].assignment_accuracy:.3f}</b>" in part
    assert f"Lloyd's step's on <b>{results['no intervention'].assignment_accuracy:.3f}</b>" in part


def test_a_model_without_codes_gets_the_reason_instead_of_the_matching(one_torch_thread):
    """embedding="none": no code slots, so no code directions and no known alignment; the sections say so, keep the
    whole-stream dictionary (R^2, L0, dead) and the no-intervention run, and do not fail."""
    torch.manual_seed(0)
    model = KMeansTransformer(learned_model_config(4, 3, "none")).eval()
    points = sample_tasks(TaskConfig(n=32, d=4, k=3), 3, 0).points
    init = init_centroids(points, 3, "random", 1)
    figures = abstraction_of_report(model, points, init, AbstractionSettings(dictionary_tasks=2, steps=50, pairs=3))
    assert figures.no_codes and "no code" in figures.no_codes and figures.directions is None
    assert [(row.slots, row.fitted) for row in figures.dictionaries] == [("all", True), ("all", False)]
    assert list(figures.interchange) == ["no intervention"]
    assert math.isfinite(figures.dictionaries[0].score.r2)
    report = Report("t")
    dictionary_section(report, figures)
    interchange_section(report, figures)
    text = "".join(report.parts)
    assert "No code directions" in text and "No known alignment" in text
    assert "mean best cosine" not in text and "known alignment</td>" not in text
    assert f"<b>{figures.interchange['no intervention'].assignment_accuracy:.3f}</b>" in text
