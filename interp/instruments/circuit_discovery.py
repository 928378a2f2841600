"""Circuit discovery over the model's edges: exact edge patching and ACDC-style pruning.

On the graph of ``interp.instruments.graph`` (nodes: the embeddings, each step's attentions and FFNs; edges: a node
feeding an attention's query, key or value, an FFN's input or the output):

* ``edge_effects``: the metric's damage when one edge alone is patched from its corrupted value, for every edge
  (activation patching per edge; E runs of the graph);
* ``acdc``: Automatic Circuit DisCovery (Conmy et al. 2023, "Towards Automated Circuit Discovery for Mechanistic
  Interpretability", Algorithm 1): from the output backwards, for each input and each edge into it, remove the edge
  (patch it) when the size of the circuit's damage |M| grows by less than ``threshold``, else keep it (|M|: a circuit
  faithful to the model is no better at the objective than the model either); edges into a component
  that no longer reaches the output are removed with it. The circuit is the kept edges; its faithfulness is the
  k-means objective of its output against the full model's and the corrupted run's;
* ``edge_auc``: the ROC AUC of edge scores against a known set of edges (Conmy et al. §4: edge recovery).

Metrics and corruptions are the graph module's (``METRICS``, ``CORRUPTIONS``). On the exact constructions the true
circuit is known from the weights (what each node writes, what each input reads): tests/test_circuits.py recovers it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from interp._checks import InvalidInput
from interp.instruments.graph import Edge, Node, Setting, damage, edges_kept, prepare, run_graph
from interp.model import KMeansTransformer

MAX_THRESHOLD = 1e6


@dataclass(frozen=True)
class EdgeEffects:
    """Each edge's damage when it alone is patched: ``effects[e]`` (the metric's units; 0 = no effect), with the
    damage of the whole corrupted run for scale."""

    edges: tuple[Edge, ...]
    effects: Tensor  # (E,)
    metric: str
    corruption: str
    corrupted_damage: float

    def ranked(self) -> list[tuple[str, float]]:
        """(edge, effect) from the largest |effect| down."""
        order = self.effects.abs().argsort(descending=True).tolist()
        return [(str(self.edges[i]), float(self.effects[i])) for i in order]


def edge_effects(model: KMeansTransformer, points: Tensor, centroids: Tensor, steps: int | None = None,
                 metric: str = "objective", corruption: str = "mean", seed: int = 0,
                 setting: Setting | None = None) -> EdgeEffects:
    """Patch each edge alone (a_e = 0, every other edge kept) and measure the metric's damage; ``setting`` reuses a
    ``graph.prepare`` of the same arguments."""
    setting = setting or prepare(model, points, centroids, steps, metric, corruption, seed)
    count = len(setting.graph.edges)
    ones = torch.ones(count, dtype=setting.embeddings[0].dtype)
    effects = torch.empty(count, dtype=torch.float64)
    for i in range(count):
        kept = ones.clone()
        kept[i] = 0
        effects[i] = edges_kept(setting, kept)
    return EdgeEffects(setting.graph.edges, effects, setting.metric, setting.corruption,
                       float(damage(setting, setting.corrupted_output)))


@dataclass(frozen=True)
class Circuit:
    """The edges ACDC kept, and how faithful they are: the metric's damage of the circuit (the full model: 0; the
    corrupted run: ``corrupted_damage``) and the mean ln Phi of the k-means objective of the circuit's output on the
    clean points, with the full model's and the corrupted run's."""

    edges: tuple[Edge, ...]
    all_edges: int
    threshold: float
    metric: str
    corruption: str
    damage: float
    corrupted_damage: float
    log_objective: float
    full_log_objective: float
    corrupted_log_objective: float

    @property
    def nodes(self) -> tuple[Node, ...]:
        """The nodes that feed some kept edge."""
        return tuple(sorted({edge.source for edge in self.edges}))

    @property
    def recovered(self) -> float:
        """Share of the full model's gap to the corrupted run's objective the circuit keeps: (corrupted - circuit) /
        (corrupted - full); 1 = as good as the full model."""
        gap = self.corrupted_log_objective - self.full_log_objective
        return (self.corrupted_log_objective - self.log_objective) / gap if gap != 0 else float("nan")


def _mean_log_objective(setting: Setting, output: Tensor) -> float:
    from interp.algorithms import squared_distances

    return float(squared_distances(setting.points, output).amin(-1).sum(-1).log().mean())


def _reaches_output(setting: Setting, kept: Tensor) -> set[str]:
    """The components (``blocks.l.name``) with a path of kept edges to the output."""
    graph, reached = setting.graph, set()
    for target in reversed(graph.inputs):
        component = "output" if target.component == "output" else f"blocks.{target.step}.{target.component}"
        if component != "output" and component not in reached:
            continue
        for i in graph.edges_into(target):
            if kept[i] > 0:
                reached.add(str(graph.edges[i].source))
    return reached


def acdc(model: KMeansTransformer, points: Tensor, centroids: Tensor, steps: int | None = None,
         metric: str = "objective", corruption: str = "mean", threshold: float = 0.01, seed: int = 0,
         setting: Setting | None = None) -> Circuit:
    """ACDC's pruning (module docstring): a circuit whose damage stays within ``threshold`` of each step's."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= MAX_THRESHOLD:
        raise InvalidInput(f"threshold must be a number in [0, {MAX_THRESHOLD:g}], got {threshold!r}")
    setting = setting or prepare(model, points, centroids, steps, metric, corruption, seed)
    graph = setting.graph
    kept = torch.ones(len(graph.edges), dtype=setting.embeddings[0].dtype)
    current = edges_kept(setting, kept)
    for target in reversed(graph.inputs):
        component = f"blocks.{target.step}.{target.component}"
        into = list(reversed(graph.edges_into(target)))
        if target.component != "output" and component not in _reaches_output(setting, kept):
            kept[into] = 0  # the component no longer reaches the output: what it reads cannot matter
            continue
        for i in into:
            kept[i] = 0
            trial = edges_kept(setting, kept)
            if abs(trial) - abs(current) < threshold:  # faithful: the circuit may not be better than the model either
                current = trial
            else:
                kept[i] = 1
    output = circuit_output(setting, kept)
    edges = tuple(edge for edge, keep in zip(graph.edges, kept.tolist()) if keep > 0)
    return Circuit(edges, len(graph.edges), float(threshold), setting.metric, setting.corruption, current,
                   float(damage(setting, setting.corrupted_output)), _mean_log_objective(setting, output),
                   _mean_log_objective(setting, setting.full.output),
                   _mean_log_objective(setting, setting.corrupted_output))


def circuit_output(setting: Setting, kept: Tensor) -> Tensor:
    """The output centroids (b, k, d) (stream coordinates) of the graph with edge e weighted ``kept[e]``."""
    with torch.no_grad():
        return run_graph(setting.model, setting.graph, setting.embeddings, kept, setting.corrupted).output


def edge_auc(scores: Tensor, truth: Tensor) -> float:
    """ROC AUC of ``scores`` (E,) (higher = more likely in the circuit) against the boolean ``truth`` (E,)
    (scikit-learn's ``roc_auc_score``; 1 = every true edge ranked above every other)."""
    from sklearn.metrics import roc_auc_score

    truth = torch.as_tensor(truth).bool()
    if truth.all() or not truth.any():
        raise InvalidInput("truth must hold both edges in the circuit and edges outside it")
    return float(roc_auc_score(truth.numpy(), torch.as_tensor(scores, dtype=torch.float64).numpy()))


__all__ = ["EdgeEffects", "Circuit", "edge_effects", "acdc", "circuit_output", "edge_auc"]
