"""Attribution patching: the first-order estimate of every node's and edge's patching effect from one forward and
one backward pass, with the AtP* correction for saturated attention.

Patching edge e = (u -> input) moves the input by u~ - u (its corrupted minus its clean value), so to first order the
metric M changes by

    AtP(e) = (u~ - u) . dM/d(input)          (node u: (u~ - u) . dM/du, the sum over its edges)

(Nanda 2023, "Attribution Patching: Activation Patching At Industrial Scale"; edge attribution patching, Syed, Rager
and Conmy 2023, "Attribution Patching Outperforms Automated Circuit Discovery"). On the graph of
``interp.instruments.graph`` every AtP(e) is minus the gradient of M in the edge's weight a_e at a = 1: one backward
pass gives all of them. Near gamma = inf the attention pattern is saturated and its gradient in the scores vanishes,
so AtP misses what a query or key edge does; AtP*'s fix (Kramar, Lieberum, Shah and Nanda 2024, "AtP*: An efficient
and scalable method for localizing LLM behaviour to components", §3.1) recomputes the pattern exactly with the patched
query or key input, A', and linearises only after it:

    AtP*(e) = sum (A' - A) * dM/dA           (e into an attention's query or key; AtP(e) for every other edge)

``from_gradient_cache`` is the node-level estimate the TransformerLens way, from the model's own gradient cache
(``run_with_cache(incl_bwd=True)``) at each hook point. The metric (``LINEARISABLE``) is ``"corrupted_share"`` by
default (the share of the way to the corrupted output, linear in the output) or ``"objective"`` (ln Phi of the output
on the clean points, near-stationary at Lloyd's output, so its first-order term is small); the other two metrics are
divergences from the full model, whose gradient there is 0, and are refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from interp._checks import InvalidInput, check_choice
from interp.instruments.graph import Edge, Input, Node, Setting, damage, edges_kept, prepare, run_graph
from interp.model import KMeansTransformer
from interp.model.attention import normalise


@dataclass(frozen=True)
class EdgeAttribution:
    """Per edge: AtP (``plain``), AtP* (``corrected``: query and key edges through the exact pattern) and, when
    asked for, the exact patching effect; each the change of the metric when the edge alone is patched."""

    edges: tuple[Edge, ...]
    plain: Tensor  # (E,)
    corrected: Tensor  # (E,)
    exact: Tensor | None  # (E,)


@dataclass(frozen=True)
class NodeAttribution:
    """Per node: AtP, AtP* and the exact effect of patching the node everywhere (``node_attribution``)."""

    nodes: tuple[Node, ...]
    plain: Tensor  # (N,)
    corrected: Tensor  # (N,)
    exact: Tensor | None  # (N,)


LINEARISABLE = ("corrupted_share", "objective")  # metrics whose gradient at the full model is not 0 by construction


def _objective_setting(model: KMeansTransformer, points: Tensor, centroids: Tensor, steps: int | None,
                       corruption: str, seed: int, setting: Setting | None) -> Setting:
    if setting is None:
        return prepare(model, points, centroids, steps, "corrupted_share", corruption, seed)
    if setting.metric not in LINEARISABLE:
        raise InvalidInput(f"metric must be one of {LINEARISABLE} for attribution patching: the gradient of "
                           f"{setting.metric!r}, a divergence from the full model, is 0 there")
    return setting


def _forward_backward(setting: Setting):
    """One forward and one backward pass of the graph with every edge weight a = 1 as a leaf: the run (its patterns
    holding dM/dA in ``.grad``) and AtP of every edge, -dM/da_e (a_e from 1 to 0), (E,) float64."""
    keep = torch.ones(len(setting.graph.edges), dtype=setting.embeddings[0].dtype, requires_grad=True)
    run = run_graph(setting.model, setting.graph, setting.embeddings, keep, setting.corrupted)
    for pattern in run.patterns.values():
        pattern.retain_grad()
    damage(setting, run.output).backward()
    return run, -keep.grad.detach().to(torch.float64)


def edge_attribution(model: KMeansTransformer, points: Tensor, centroids: Tensor, steps: int | None = None,
                     corruption: str = "mean", seed: int = 0, exact: bool = False,
                     setting: Setting | None = None) -> EdgeAttribution:
    """AtP and AtP* of every edge from one forward and one backward pass of the graph (and the exact effect of each
    edge patched alone with ``exact``: one more run per edge)."""
    setting = _objective_setting(model, points, centroids, steps, corruption, seed, setting)
    graph, dtype = setting.graph, setting.embeddings[0].dtype
    run, plain = _forward_backward(setting)
    corrected = plain.clone()
    for i, edge in enumerate(graph.edges):
        if edge.target.role in ("q", "k"):
            corrected[i] = _pattern_estimate(setting, run, [edge])
    effects = None
    if exact:
        ones = torch.ones(len(graph.edges), dtype=dtype)
        effects = torch.tensor([edges_kept(setting, _without(ones, [i])) for i in range(len(graph.edges))],
                               dtype=torch.float64)
    return EdgeAttribution(graph.edges, plain, corrected, effects)


def _moved(setting: Setting, run, edge: Edge) -> Tensor:
    """What patching ``edge`` adds to its input: u~ - u (b, tokens, D), a re-embedded centroid writer's first d
    features only."""
    moved = setting.corrupted[edge.source] - run.values[edge.source]
    if setting.graph.reembed and edge.source.stream == "centroids" and edge.source.name != "centroids_embed":
        d = setting.model.config.d
        moved = torch.cat([moved[..., :d], torch.zeros_like(moved[..., d:])], dim=-1)
    return moved


@torch.no_grad()
def _pattern_estimate(setting: Setting, run, edges: list[Edge]) -> float:
    """AtP*'s estimate for query and key ``edges`` into one attention patched together: the pattern A' recomputed
    exactly from the patched query and key inputs, sum (A' - A) * dM/dA."""
    model, target = setting.model, edges[0].target
    attention = getattr(model.blocks[min(target.step, len(model.blocks) - 1)], target.component)
    weights = getattr(model.layers[0 if model.config.shared_weights else target.step], target.component)
    pattern = run.patterns[(target.step, target.component)]  # (b, q, r)
    inputs = {role: run.inputs[Input(target.step, target.component, role)] for role in ("q", "k")}  # (b, t, D)
    for edge in edges:
        inputs[edge.target.role] = inputs[edge.target.role] + _moved(setting, run, edge)
    patched = normalise(attention.scores(inputs["q"], inputs["k"], weights), attention.config, dim=-1)  # (b, q, r)
    return float(((patched - pattern) * pattern.grad).sum())


def _without(ones: Tensor, positions: list[int]) -> Tensor:
    kept = ones.clone()
    kept[positions] = 0
    return kept


def node_attribution(model: KMeansTransformer, points: Tensor, centroids: Tensor, steps: int | None = None,
                     corruption: str = "mean", seed: int = 0, exact: bool = True,
                     setting: Setting | None = None) -> NodeAttribution:
    """AtP of every node (the sum over its edges: (u~ - u) . dM/du), AtP* (its query and key edges into one attention
    patched together through the exact pattern, the rest linear) and, with ``exact``, the effect of patching the node
    everywhere (all its edges at once: one run per node)."""
    setting = _objective_setting(model, points, centroids, steps, corruption, seed, setting)
    graph = setting.graph
    run, edge_plain = _forward_backward(setting)
    nodes = tuple(node for node in graph.nodes if graph.edges_from(node))
    plain = torch.stack([edge_plain[graph.edges_from(node)].sum() for node in nodes])
    corrected = torch.empty(len(nodes), dtype=torch.float64)
    for n, node in enumerate(nodes):
        out = graph.edges_from(node)
        by_attention: dict[tuple[int, str], list[Edge]] = {}
        linear = 0.0
        for i in out:
            edge = graph.edges[i]
            if edge.target.role in ("q", "k"):
                by_attention.setdefault((edge.target.step, edge.target.component), []).append(edge)
            else:
                linear += float(edge_plain[i])
        corrected[n] = linear + sum(_pattern_estimate(setting, run, group) for group in by_attention.values())
    effects = None
    if exact:
        ones = torch.ones(len(graph.edges), dtype=setting.embeddings[0].dtype)
        effects = torch.tensor([edges_kept(setting, _without(ones, graph.edges_from(node))) for node in nodes],
                               dtype=torch.float64)
    return NodeAttribution(nodes, plain, corrected, effects)


def from_gradient_cache(model: KMeansTransformer, points: Tensor, centroids: Tensor, steps: int | None = None,
                        corruption: str = "mean", seed: int = 0) -> dict[str, float]:
    """Node-level AtP from the model's own caches: hook name -> sum over tasks' mean of (u~ - u) . dM/du at each
    attention's ``hook_out`` and the embeddings' hooks, dM/du from ``run_with_cache(incl_bwd=True)`` with M the mean
    ln Phi of the output (its default). Equal to ``node_attribution``'s ``plain`` for a model that does not re-embed
    (a re-embedding model's embedding hooks see only the first step)."""
    from interp.instruments.graph import corrupted_input

    check_choice(corruption, "corruption", ("tasks", "shuffled_points", "mean"))
    names = [name for name in model.hook_dict if name.endswith(".hook_out") or name.endswith("_embed")]
    names = [name for name in names if ".ffn" not in name or model.config.ffn]
    selected = lambda name: name in names  # noqa: E731
    _, clean = model.run_with_cache(points, centroids, steps=steps, slot_order="fixed", incl_bwd=True,
                                    names_filter=selected)
    if corruption == "mean":
        corrupt = {name: clean[name].mean(dim=(0, 1), keepdim=True) for name in clean.cache_dict
                   if not name.endswith("_grad")}
    else:
        with torch.no_grad():
            _, other = model.run_with_cache(*corrupted_input(points, centroids, corruption, seed), steps=steps,
                                            slot_order="fixed", names_filter=selected)
        corrupt = {name: other[name] for name in other.cache_dict}
    out = {}
    for name, value in clean.cache_dict.items():
        if name.endswith("_grad") or f"{name}_grad" not in clean.cache_dict:
            continue
        out[name] = float(((corrupt[name] - value) * clean[f"{name}_grad"]).sum())
    return out


__all__ = ["EdgeAttribution", "NodeAttribution", "edge_attribution", "node_attribution", "from_gradient_cache"]
