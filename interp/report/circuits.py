"""The report's circuit figures of one model's first step (``circuits_of_report``): exact per-edge patching, ACDC's
circuit and node attribution patching against exact node patching, on a few of the report's tasks.

Every figure names its intervention: an edge is *patched* when the input it feeds receives its node's value from the
corrupted run instead of the clean one (``interp.instruments.graph``); with the corruption ``"tasks"`` (the default)
the corrupted run is the model on the next task's points and initial centroids (resample ablation). The edge effects
and ACDC are measured with the ``"objective"`` metric (the change of ln Phi of the clean points), attribution patching
with ``"corrupted_share"`` (the share of the way to the corrupted run's output: docs/circuits.md measures AtP against
it; with ``"objective"`` AtP is poor at every gamma). A model whose graph is not built (a re-embedding model with a
norm slot) gets the reason instead of the figures.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass

from torch import Tensor

from interp._checks import InvalidInput, check_choice, check_positive_int
from interp.instruments import graph as G
from interp.instruments.attribution import NodeAttribution, node_attribution
from interp.instruments.circuit_discovery import MAX_THRESHOLD, Circuit, EdgeEffects, acdc, edge_effects
from interp.model import KMeansTransformer

STEPS = 1  # the report's instruments are of one step


@dataclass(frozen=True)
class CircuitSettings:
    """Sizes of the report's circuit section: the first ``tasks`` of the report's instrument tasks (n points each),
    ``corruption`` (one of ``graph.CORRUPTIONS``), ACDC's ``threshold`` (in ln Phi) and the ``top`` edges tabled."""

    tasks: int = 8
    corruption: str = "tasks"
    threshold: float = 0.005
    top: int = 8

    def __post_init__(self) -> None:
        check_positive_int(self.tasks, "tasks", minimum=2)  # "tasks" takes each task's input from the next one
        check_choice(self.corruption, "corruption", G.CORRUPTIONS)
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)) \
                or not 0 <= self.threshold <= MAX_THRESHOLD:
            raise InvalidInput(f"threshold must be a number in [0, {MAX_THRESHOLD:g}], got {self.threshold!r}")
        check_positive_int(self.top, "top")

    def describe(self, n: int) -> str:
        return (f"the first {self.tasks} of the tasks above (n = {n}, random initial centroids), one step, "
                f"corruption {self.corruption!r}, ACDC threshold {self.threshold:g} (ln Φ)")


@dataclass(frozen=True)
class CircuitFigures:
    """What the report's circuit section shows; ``unavailable`` (why the model has no graph) instead of the rest."""

    settings: CircuitSettings
    n: int  # points per task
    unavailable: str | None = None
    effects: EdgeEffects | None = None  # exact per-edge patching, metric "objective"
    circuit: Circuit | None = None  # ACDC's, metric "objective"
    nodes: NodeAttribution | None = None  # AtP, AtP* and exact node patching, metric "corrupted_share"
    pearson: float = math.nan  # AtP against exact, over the nodes
    pearson_corrected: float = math.nan  # AtP* against exact
    seconds: float = 0.0

    def top_edges(self) -> list[tuple[str, float]]:
        """(edge, effect) of the ``settings.top`` largest |effect|, largest first (``EdgeEffects.ranked``)."""
        return self.effects.ranked()[: self.settings.top] if self.effects is not None else []


def pearson(x: Tensor, y: Tensor) -> float:
    """scipy's Pearson correlation of two (N,) tensors; nan when it is undefined (N < 2 or a constant side)."""
    from scipy.stats import pearsonr

    x, y = x.double().numpy(), y.double().numpy()
    if len(x) < 2 or x.std() == 0 or y.std() == 0:
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(pearsonr(x, y)[0])


def circuits_of_report(model: KMeansTransformer, points: Tensor, init: Tensor,
                       settings: CircuitSettings = CircuitSettings()) -> CircuitFigures:
    """The circuit figures (module docstring) of ``model``'s first step on the first ``settings.tasks`` of
    ``points`` (b, n, d) / ``init`` (b, k, d); the model is left in eval mode."""
    started = time.perf_counter()
    model.eval()
    points, init = points[: settings.tasks], init[: settings.tasks]
    n = points.shape[1]
    try:
        G.build_graph(model, STEPS)
    except InvalidInput as error:
        return CircuitFigures(settings, n, unavailable=str(error), seconds=time.perf_counter() - started)
    objective = G.prepare(model, points, init, STEPS, "objective", settings.corruption)
    effects = edge_effects(model, points, init, setting=objective)
    circuit = acdc(model, points, init, threshold=settings.threshold, setting=objective)
    share = G.prepare(model, points, init, STEPS, "corrupted_share", settings.corruption)
    nodes = node_attribution(model, points, init, setting=share, exact=True)  # one forward and backward pass
    return CircuitFigures(settings, n, effects=effects, circuit=circuit, nodes=nodes,
                          pearson=pearson(nodes.plain, nodes.exact),
                          pearson_corrected=pearson(nodes.corrected, nodes.exact),
                          seconds=time.perf_counter() - started)
