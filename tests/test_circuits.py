"""Circuit discovery on circuits whose answer is known: the exact constructions.

The known circuit is computed here from the construction's weights alone, coordinate by coordinate, backwards from
the output (the first d features of the centroid stream): a node's output coordinate matters when an input that
matters reads it; an attention's query and key inputs matter whole when its output matters (they move the pattern);
its value input matters on the columns of W_V that feed an output coordinate that matters; an FFN's input on the
columns of W_in whose hidden units W_out sends to a coordinate that matters. An edge (node u -> input) is in the
circuit when u writes a coordinate the input needs, with values that vary over the tasks and tokens (a node that is the
same everywhere, like the first step's erasing self-attention on all-zero slots, equals its own mean). Node values
come from the model's own cache, not from the graph under test.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import make_tasks

from interp._checks import InvalidInput
from interp.instruments import graph as G
from interp.instruments.circuit_discovery import acdc, edge_auc, edge_effects
from interp.model.constructions import lloyd_transformer

SIZES = [(2, 3), (3, 5), (4, 8)]
CONSTRUCTIONS = {
    "onehot": {"embedding": "onehot"},
    "binary": {"embedding": "binary"},
    "dot": {"embedding": "onehot", "attention": "dot", "centroid_update": "hardmax"},
}


def _weights(model, step: int, component: str):
    return getattr(model.layers[0 if model.config.shared_weights else step], component)


def known_circuit(model, graph, points, init) -> torch.Tensor:
    """The boolean (E,) of the edges of the known circuit (module docstring)."""
    config, width = model.config, model.config.d_model
    _, cache = model.run_with_cache(points, init, steps=graph.steps, slot_order="fixed")
    needed: dict[str, torch.Tensor] = {}  # input -> the coordinates it needs (bool (D,))
    node_needs: dict[str, torch.Tensor] = {}  # node -> its output coordinates that matter
    output = torch.zeros(width, dtype=torch.bool)
    output[: config.d] = True
    needed["output"] = output

    def value(node) -> torch.Tensor:
        return cache[node.hook]  # (b, tokens, D)

    def nonzero(matrix: torch.Tensor) -> torch.Tensor:
        return matrix.detach().abs() > 0

    truth = {}
    for target in reversed(graph.inputs):
        key = str(target)
        if key != "output":
            component = f"blocks.{target.step}.{target.component}"
            out_needed = node_needs.get(component, torch.zeros(width, dtype=torch.bool))
            weights = _weights(model, target.step, target.component)
            if not out_needed.any():
                needed[key] = torch.zeros(width, dtype=torch.bool)
            elif target.role in ("q", "k"):
                needed[key] = nonzero(weights.W_Q if target.role == "q" else weights.W_K).any(0)
            elif target.role == "v":
                needed[key] = nonzero(weights.W_V)[out_needed].any(0)
            else:  # an FFN's input: the units that reach a needed coordinate, and what they read
                units = nonzero(weights.W_out)[out_needed].any(0)  # (H,)
                needed[key] = nonzero(weights.W_in)[units].any(0)
        for i in graph.edges_into(target):
            source = graph.edges[i].source
            coordinates = needed[key].clone()
            if graph.reembed and source.stream == "centroids" and source.name != "centroids_embed":
                coordinates[config.d:] = False
            part = value(source)[..., coordinates]
            varies = part.numel() > 0 and bool((part - part.mean(dim=(0, 1), keepdim=True)).abs().max() > 0)
            truth[i] = varies
            if varies:
                name = str(source)
                node_needs[name] = node_needs.get(name, torch.zeros(width, dtype=torch.bool)) | coordinates
    return torch.tensor([truth[i] for i in range(len(graph.edges))])


def _construction(kind: str, d: int, k: int, steps: int):
    return lloyd_transformer(d, k, n_layers=steps, **CONSTRUCTIONS[kind])


CASES = [pytest.param(kind, d, k, steps, marks=() if (kind, d, steps) == ("onehot", 2, 1) else pytest.mark.slow,
                      id=f"{kind}-d{d}-k{k}-T{steps}")
         for kind in sorted(CONSTRUCTIONS) for d, k in SIZES for steps in (1, 3)]


@pytest.mark.parametrize("kind,d,k,steps", CASES)
def test_exact_patching_and_acdc_recover_the_known_circuit(kind, d, k, steps):
    """Edge AUC 1.00 of the exact per-edge patching effects against the known circuit, and ACDC at a threshold below
    every true edge's effect keeps exactly the known circuit (mean ablation, the objective)."""
    model = _construction(kind, d, k, steps)
    points, init = make_tasks(60, d, k, batch=6, seed=11 + d)
    setting = G.prepare(model, points, init, metric="objective", corruption="mean")
    truth = known_circuit(model, setting.graph, points, init)
    assert 0 < int(truth.sum()) < len(truth)
    effects = edge_effects(model, points, init, setting=setting)
    assert edge_auc(effects.effects.abs(), truth) == 1.0
    assert float(effects.effects.abs()[~truth].max()) < 1e-12  # the other edges do nothing at all
    circuit = acdc(model, points, init, threshold=1e-9, setting=setting)
    kept = torch.tensor([edge in set(circuit.edges) for edge in setting.graph.edges])
    assert torch.equal(kept, truth)
    assert abs(circuit.log_objective - circuit.full_log_objective) < 1e-9  # the circuit alone is the model
    assert circuit.recovered == pytest.approx(1.0, abs=1e-9)


def test_the_graph_with_every_edge_kept_is_the_model():
    """run_graph with every edge kept gives the centroid stream the model's forward gives (the constructions, and a
    re-embedding learned model over several steps)."""
    from interp import load_model
    from interp.task_config import TaskConfig
    from interp.tasks import init_centroids, sample_tasks

    for model, steps, d in ((_construction("dot", 2, 3, 2), 2, 2), (_construction("binary", 3, 5, 3), 3, 3),
                            (load_model("main-onehot"), 4, 32)):
        if d == 32:
            tasks = sample_tasks(TaskConfig(n=64, d=32, k=10), 3, 0)
            points, init = tasks.points, init_centroids(tasks.points, 10, "random", 1)
        else:
            points, init = make_tasks(40, d, model.config.k, batch=3, seed=2)
        graph = G.build_graph(model, steps)
        run = G.run_graph(model, graph, G.embed(model, points, init))
        _, cache = model.run_with_cache(points, init, steps=steps, slot_order="fixed")
        stream = cache[f"blocks.{steps - 1}.hook_centroids_resid_post"][..., :d]
        torch.testing.assert_close(run.output, stream, rtol=0, atol=1e-5 if d == 32 else 1e-12)


@pytest.mark.parametrize("metric", G.METRICS)
@pytest.mark.parametrize("corruption", G.CORRUPTIONS)
def test_every_metric_and_corruption_scores_the_full_model_zero_and_the_corrupted_run_above_it(metric, corruption):
    model = _construction("onehot", 2, 3, 2)
    points, init = make_tasks(50, 2, 3, batch=4, seed=5)
    setting = G.prepare(model, points, init, metric=metric, corruption=corruption)
    assert float(G.damage(setting, setting.full.output)) == pytest.approx(0.0, abs=1e-12)
    corrupted = float(G.damage(setting, setting.corrupted_output))
    if corruption == "shuffled_points":  # equivariant in the points' order: the corrupted output is the clean one
        assert corrupted == pytest.approx(0.0, abs=1e-9)
    else:
        assert corrupted > 1e-3
    zero = torch.zeros(len(setting.graph.edges), dtype=torch.float64)
    assert G.edges_kept(setting, zero) == pytest.approx(corrupted, abs=1e-9)


def test_the_metrics_are_what_they_say():
    """Each metric against a hand computation on one task: the log ratio of objectives, the mean squared move, the
    KL of the soft assignments at beta = 1 / (the clean objective per point), and the projection of the move on the
    way to the corrupted output."""
    model = _construction("onehot", 2, 2, 1)
    points, init = make_tasks(30, 2, 2, batch=1, seed=4)
    x = G.embed(model, points, init)[0][0, :, :2].double()  # (n, 2) stream coordinates
    for metric in G.METRICS:
        setting = G.prepare(model, points, init, metric=metric)
        reference = setting.full.output[0]
        moved = reference + torch.tensor([[0.05, -0.02], [0.0, 0.1]], dtype=torch.float64)
        distances = torch.cdist(x, moved) ** 2  # (n, 2)
        clean = torch.cdist(x, reference) ** 2
        if metric == "objective":
            expected = math.log(distances.min(1).values.sum()) - math.log(clean.min(1).values.sum())
        elif metric == "distance":
            expected = float(((moved - reference) ** 2).sum(1).mean())
        elif metric == "corrupted_share":
            towards = setting.corrupted_output[0] - reference
            expected = float(((moved - reference) * towards).sum() / (towards * towards).sum())
        else:
            beta = 1 / float(clean.min(1).values.mean())
            p, q = torch.softmax(-beta * distances, 1), torch.softmax(-beta * clean, 1)
            expected = float((q * (q.log() - p.log())).sum(1).mean())
        assert float(G.damage(setting, moved[None])) == pytest.approx(expected, rel=1e-9)


def test_a_learned_model_gets_a_circuit_smaller_than_its_graph_and_its_faithfulness():
    from interp import load_model
    from interp.task_config import TaskConfig
    from interp.tasks import init_centroids, sample_tasks

    model = load_model("main-onehot")
    tasks = sample_tasks(TaskConfig(n=64, d=32, k=10), 4, 3)
    init = init_centroids(tasks.points, 10, "random", 4)
    circuit = acdc(model, tasks.points, init, steps=2, threshold=0.005, corruption="tasks")
    assert 0 < len(circuit.edges) < circuit.all_edges
    assert circuit.corrupted_log_objective > circuit.full_log_objective
    assert math.isfinite(circuit.recovered)


def test_a_learned_model_in_training_mode_is_refused():
    """Its attention dropout would make its forward differ from the graph, which draws none."""
    from interp import load_model

    model = load_model("main-onehot").train()
    with pytest.raises(InvalidInput, match="model.eval"):
        G.build_graph(model, 1)
    G.build_graph(model.eval(), 1)


@pytest.mark.parametrize("call,needle", [
    (lambda m, p, c: G.prepare(m, p, c, metric="loss"), "metric"),
    (lambda m, p, c: G.prepare(m, p, c, corruption="zero"), "corruption"),
    (lambda m, p, c: G.prepare(m, p[:1], c[:1], corruption="tasks"), "at least 2 tasks"),
    (lambda m, p, c: G.build_graph(m, 0), "steps"),
    (lambda m, p, c: G.build_graph(m, G.MAX_GRAPH_STEPS + 1), "steps must be at most"),
    (lambda m, p, c: G.prepare(m, p[..., :1], c), "d"),
    (lambda m, p, c: acdc(m, p, c, threshold=-1.0), "threshold"),
    (lambda m, p, c: acdc(m, p, c, threshold=float("nan")), "threshold"),
    (lambda m, p, c: edge_auc(torch.ones(3), torch.ones(3)), "truth"),
])
def test_bad_arguments_are_named(call, needle):
    model = _construction("onehot", 2, 3, 2)
    points, init = make_tasks(20, 2, 3, batch=2, seed=1)
    with pytest.raises(InvalidInput, match=needle):
        call(model, points, init)
