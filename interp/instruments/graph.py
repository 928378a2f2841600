"""The k-means transformer's computational graph, edge by edge: what circuit discovery and attribution patching read.

The residual stream is a sum ("A Mathematical Framework for Transformer Circuits", Elhage et al. 2021, §2), so every
input a component reads is the sum of what the nodes upstream of it wrote into its stream. The **nodes** are the
writers: the embeddings and, per step l, the four attentions (and the FFNs of the dot-product construction). With
X_l, C_l the streams entering step l (paper 2, Eq. 4):

    X_l  = points_embed  + sum of the points writers of the steps before l        (re-embedding: points_embed alone)
    C_l  = centroids_embed + sum of the centroid writers before l                 (re-embedding: their first d features)
    attn_xc_l (q: X_l; k, v: C_l)    attn_xx_l (q, k, v: X_l)         ffn_points_l (in: X_l + attn_xc_l + attn_xx_l)
    attn_cx_l (q: C_l; k, v: X_l' = X_l + attn_xc_l + attn_xx_l [+ ffn_points_l])    attn_cc_l (q, k, v: C_l)
    ffn_centroids_l (in: C_l + attn_cx_l + attn_cc_l)                 output = the first d features of C_T

An **edge** is a node and an input it feeds: an attention's query, key or value ("q", "k", "v"; an identity
self-attention reads only its values), an FFN's input ("in") or the output. ``run_graph`` gives each edge e a weight
a_e in [0, 1]: its input receives a_e u + (1 - a_e) u~ of node u, where u is u's value in this run and u~ its value on
a corrupted input (activation patching per edge, as ACDC does: Conmy et al. 2023, "Towards Automated Circuit
Discovery for Mechanistic Interpretability", §3). a = 1 everywhere is the model itself (to the rounding of the sums'
order); a_e = 0 removes edge e; the gradient in a at a = 1 is edge attribution patching (``interp.instruments.
attribution``).

Corruptions (``CORRUPTIONS``): ``"tasks"``, each task's input replaced by the next task's (points and starts; the batch
rolled by one); ``"starts"``, the same points from other initial centroids (a seeded random k-subset of the points,
the protocol's start); ``"shuffled_points"``, each task's points permuted (seeded), its starts kept: the centroid
stream is then unchanged (the model is equivariant in the points' order), the points stream's tokens are another
point's; ``"mean"``, every node's value replaced by its mean over the tasks and tokens of the clean run (mean
ablation); or a corrupted input of one's own, a (points, centroids) pair of the clean input's shapes.

Metrics (``METRICS``), each a damage measured against the full model's output C* on the clean input (0 for the full
model), averaged over tasks: ``"objective"``, ln Phi(C) - ln Phi(C*) (Phi the k-means objective of the clean points,
paper 2 Eq. 1); ``"distance"``, the mean over centroids of ||c_j - c*_j||^2; ``"assignment_kl"``, the mean over points
of KL(p*_i || p_i), p_ij = softmax_j(-beta ||x_i - c_j||^2) the soft assignment the output centroids induce, with
beta = 1 / (mean over points of min_j ||x_i - c*_j||^2) per task (so the temperature is in the task's units);
``"corrupted_share"``, <C - C*, C~ - C*> / ||C~ - C*||^2, how far the output moved towards the corrupted run's C~ (0 for
the full model, 1 for the corrupted run; linear in the output, as a logit difference is in a language model's
patching; a task whose corrupted output is C* to rounding counts 0).

Every run uses the fixed slot order, in the streams' coordinates (a construction's task translated by its anchor, as
its forward computes; the metrics are translation invariant). A model that re-embeds with a norm slot (its
re-embedded norm is not a sum of the nodes) is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from interp._checks import InvalidInput, check_choice, check_points_centroids, check_positive_int, check_seed
from interp.algorithms import squared_distances
from interp.model import KMeansTransformer
from interp.model.attention import Attention, normalise
from interp.model.projections import project

ATTENTIONS = ("attn_xc", "attn_xx", "attn_cx", "attn_cc")
CORRUPTIONS = ("tasks", "starts", "shuffled_points", "mean")
METRICS = ("objective", "distance", "assignment_kl", "corrupted_share")
POINTS_WRITERS = ("attn_xc", "attn_xx", "ffn_points")
CENTROID_WRITERS = ("attn_cx", "attn_cc", "ffn_centroids")
MAX_GRAPH_STEPS = 64  # every step adds a stream's writers to every later input: the edges grow as steps^2
TINY = 1e-300  # clamps a probability before its logarithm


@dataclass(frozen=True, order=True)
class Node:
    """A writer into a residual stream: ``points_embed`` / ``centroids_embed`` (step 0) or a step's attention or
    FFN."""

    step: int
    name: str

    @property
    def stream(self) -> str:
        """"points" or "centroids": the stream the node writes into."""
        return "points" if self.name in ("points_embed", *POINTS_WRITERS) else "centroids"

    @property
    def hook(self) -> str:
        """The model's hook point holding this node's value."""
        if self.name.endswith("_embed"):
            return f"hook_{self.name}"
        return f"blocks.{self.step}.{self.name}.hook_out"

    def __str__(self) -> str:
        return self.name if self.name.endswith("_embed") else f"blocks.{self.step}.{self.name}"


@dataclass(frozen=True, order=True)
class Input:
    """What a component reads: ``role`` "q", "k", "v" of an attention, "in" of an FFN, or the "output" (step T - 1)."""

    step: int
    component: str
    role: str

    def __str__(self) -> str:
        return "output" if self.component == "output" else f"blocks.{self.step}.{self.component}.{self.role}"


@dataclass(frozen=True)
class Edge:
    """Node ``source`` feeding input ``target``."""

    source: Node
    target: Input

    def __str__(self) -> str:
        return f"{self.source} -> {self.target}"


@dataclass(frozen=True)
class Graph:
    """Every node, input and edge of ``steps`` steps of a model, edges grouped by target in the forward's order."""

    steps: int
    reembed: bool
    nodes: tuple[Node, ...]
    inputs: tuple[Input, ...]
    edges: tuple[Edge, ...]
    index: dict = field(repr=False, compare=False, default_factory=dict)  # Edge -> its position in ``edges``
    into: dict = field(repr=False, compare=False, default_factory=dict)  # Input -> positions of its edges

    def edges_into(self, target: Input) -> list[int]:
        """Positions of the edges feeding ``target``."""
        return self.into[target]

    def edges_from(self, source: Node) -> list[int]:
        """Positions of the edges leaving ``source``."""
        return [i for i, edge in enumerate(self.edges) if edge.source == source]


def _roles(model: KMeansTransformer, name: str) -> tuple[str, ...]:
    """The inputs an attention reads: q, k, v, or v alone for an identity self-attention (its pattern is fixed)."""
    return ("v",) if getattr(model.config, name).identity else ("q", "k", "v")


def build_graph(model: KMeansTransformer, steps: int | None = None) -> Graph:
    """The graph of ``steps`` steps of ``model`` (default its ``n_layers``), as the module docstring draws it."""
    if not isinstance(model, KMeansTransformer):
        raise InvalidInput(f"model must be a KMeansTransformer, got {type(model).__name__}")
    config = model.config
    steps = model.cfg.n_layers if steps is None else check_positive_int(steps, "steps")
    if not config.shared_weights and steps > config.n_layers:
        raise InvalidInput(f"steps={steps} exceeds n_layers={config.n_layers} of a model without shared weights")
    if steps > MAX_GRAPH_STEPS:
        raise InvalidInput(f"steps must be at most {MAX_GRAPH_STEPS} for a graph (its edges grow as steps^2), "
                           f"got {steps}")
    if model.training and any(getattr(config, name).dropout > 0 for name in ATTENTIONS):
        raise InvalidInput("model is in training mode with attention dropout, which the graph does not draw: call "
                           "model.eval() first")
    if config.reembed and config.norm_slot:
        raise InvalidInput("a model that re-embeds with a norm slot recomputes ||c||^2 at each step, not a sum of the "
                           "nodes: its graph is not built")
    ffn = bool(config.ffn)
    points_embed, centroids_embed = Node(0, "points_embed"), Node(0, "centroids_embed")
    nodes, inputs, edges = [points_embed, centroids_embed], [], []
    points_writers: list[Node] = []  # of the steps before this one (not re-embedding)
    centroid_writers: list[Node] = []

    def feed(target: Input, sources: list[Node]) -> None:
        inputs.append(target)
        edges.extend(Edge(source, target) for source in sources)

    for step in range(steps):
        stream_x = [points_embed] + ([] if config.reembed else points_writers)
        stream_c = [centroids_embed] + centroid_writers
        xc, xx = Node(step, "attn_xc"), Node(step, "attn_xx")
        for role in _roles(model, "attn_xc"):
            feed(Input(step, "attn_xc", role), stream_x if role == "q" else stream_c)
        for role in _roles(model, "attn_xx"):
            feed(Input(step, "attn_xx", role), stream_x)
        updated = stream_x + [xc, xx]
        step_points = [xc, xx]
        if ffn:
            feed(Input(step, "ffn_points", "in"), updated)
            step_points.append(Node(step, "ffn_points"))
            updated = updated + [step_points[-1]]
        for role in _roles(model, "attn_cx"):
            feed(Input(step, "attn_cx", role), stream_c if role == "q" else updated)
        for role in _roles(model, "attn_cc"):
            feed(Input(step, "attn_cc", role), stream_c)
        step_centroids = [Node(step, "attn_cx"), Node(step, "attn_cc")]
        if ffn:
            feed(Input(step, "ffn_centroids", "in"), stream_c + step_centroids)
            step_centroids.append(Node(step, "ffn_centroids"))
        nodes.extend(step_points + step_centroids)
        points_writers = points_writers + step_points
        centroid_writers = centroid_writers + step_centroids
    feed(Input(steps - 1, "output", "out"), [centroids_embed] + centroid_writers)
    graph = Graph(steps, bool(config.reembed), tuple(nodes), tuple(inputs), tuple(edges))
    graph.index.update({edge: i for i, edge in enumerate(graph.edges)})
    for i, edge in enumerate(graph.edges):
        graph.into.setdefault(edge.target, []).append(i)
    return graph


@dataclass(frozen=True)
class GraphRun:
    """One run of the graph: each node's value, each input's value, each non-identity attention's pattern (keyed by
    (step, name)) and the output centroids (b, k, d) in stream coordinates."""

    values: dict[Node, Tensor]
    inputs: dict[Input, Tensor]
    patterns: dict[tuple[int, str], Tensor]
    output: Tensor  # (b, k, d)


def attend(attention: Attention, weights, queries: Tensor, keys: Tensor, values: Tensor,
           pattern: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """An attention with its three inputs apart: pattern = normaliser(gamma s(Q queries, K keys)) (or the ``pattern``
    given), out_i = sum_j pattern_ij (V values_j + b_V); an identity self-attention: out_i = V values_i + b_V.
    Queries (b, q, D), keys and values (b, r, D) -> out (b, q, D) and the pattern (b, q, r) (None for an identity)."""
    if attention.config.identity:
        return project(values, weights.W_V, weights.b_V), None  # (b, q, D)
    if pattern is None:
        pattern = normalise(attention.scores(queries, keys, weights), attention.config, dim=-1)  # (b, q, r)
    return attention.output_norm(attention.mix(pattern, values, weights)), pattern


def _received(graph: Graph, target: Input, values: dict[Node, Tensor], corrupted: dict[Node, Tensor] | None,
              keep: Tensor | None, d: int) -> Tensor:
    """The value of ``target``: sum over its edges e = (u, target) of a_e u + (1 - a_e) u~, a re-embedded centroid
    writer of an earlier step through its first d features."""
    total = None
    for i in graph.edges_into(target):
        source = graph.edges[i].source
        value = values[source]
        if keep is not None:
            value = corrupted[source] + keep[i] * (value - corrupted[source])
        if graph.reembed and source.stream == "centroids" and source.name != "centroids_embed":
            value = torch.cat([value[..., :d], torch.zeros_like(value[..., d:])], dim=-1)
        total = value if total is None else total + value
    return total


def run_graph(model: KMeansTransformer, graph: Graph, embeddings: tuple[Tensor, Tensor],
              keep: Tensor | None = None, corrupted: dict[Node, Tensor] | None = None) -> GraphRun:
    """Run ``graph`` on the embedded streams ``embeddings`` = (points (b, n, D), centroids (b, k, D)), edge e weighted
    ``keep[e]`` (a tensor (E,), default all 1: the model) between its node's value here and in ``corrupted``."""
    if keep is not None and (corrupted is None or keep.shape != (len(graph.edges),)):
        raise InvalidInput(f"keep must be a tensor of shape ({len(graph.edges)},) with the corrupted values")
    d = model.config.d
    values: dict[Node, Tensor] = {graph.nodes[0]: embeddings[0], graph.nodes[1]: embeddings[1]}
    inputs: dict[Input, Tensor] = {}
    patterns: dict[tuple[int, str], Tensor] = {}

    def read(target: Input) -> Tensor:
        inputs[target] = _received(graph, target, values, corrupted, keep, d)
        return inputs[target]

    for step in range(graph.steps):
        # a shared layer's blocks differ only in their hook points: a step beyond the standing blocks uses the last
        block = model.blocks[min(step, len(model.blocks) - 1)]
        weights = model.layers[0 if model.config.shared_weights else step]
        for name in ATTENTIONS:
            attention = getattr(block, name)
            roles = _roles(model, name)
            given = {role: read(Input(step, name, role)) for role in roles}  # (b, tokens, D) each
            out, pattern = attend(attention, getattr(weights, name), given.get("q"), given.get("k"), given["v"])
            values[Node(step, name)] = out
            if pattern is not None:
                patterns[(step, name)] = pattern
            if name == "attn_xx" and model.config.ffn:
                hidden = read(Input(step, "ffn_points", "in"))  # (b, n, D)
                values[Node(step, "ffn_points")] = block.ffn_points(hidden, weights.ffn_points)
        if model.config.ffn:
            hidden = read(Input(step, "ffn_centroids", "in"))  # (b, k, D)
            values[Node(step, "ffn_centroids")] = block.ffn_centroids(hidden, weights.ffn_centroids)
    output = read(Input(graph.steps - 1, "output", "out"))[..., :d]  # (b, k, d)
    return GraphRun(values, inputs, patterns, output)


def embed(model: KMeansTransformer, points: Tensor, centroids: Tensor) -> tuple[Tensor, Tensor]:
    """The embedded streams (b, n, D), (b, k, D) the model's first step reads (``hook_points_embed``,
    ``hook_centroids_embed``), in its coordinates, fixed slot order."""
    points, centroids = check_points_centroids(points, centroids, d=model.config.d)
    names = ("hook_points_embed", "hook_centroids_embed")
    with torch.no_grad():
        _, cache = model.run_with_cache(points, centroids, steps=1, slot_order="fixed",
                                        names_filter=lambda name: name in names)
    return cache[names[0]], cache[names[1]]


def corrupted_input(points: Tensor, centroids: Tensor, corruption: str, seed: int = 0) -> tuple[Tensor, Tensor]:
    """The corrupted input of ``"tasks"`` (the batch rolled by one), ``"starts"`` (other starts: a seeded random
    k-subset of each task's points) or ``"shuffled_points"`` (each task's points in a seeded random order, its starts
    kept)."""
    check_choice(corruption, "corruption", ("tasks", "starts", "shuffled_points"))
    if corruption == "tasks":
        if points.shape[0] < 2:
            raise InvalidInput("corruption='tasks' needs at least 2 tasks (each task takes the next one's input)")
        return points.roll(1, dims=0), centroids.roll(1, dims=0)
    if corruption == "starts":
        from interp.tasks import init_centroids

        return points, init_centroids(points, centroids.shape[1], "random", check_seed(seed))
    generator = torch.Generator().manual_seed(check_seed(seed))
    order = torch.argsort(torch.rand(points.shape[:2], generator=generator), dim=1).to(points.device)  # (b, n)
    return points.gather(1, order[..., None].expand_as(points)), centroids


@dataclass(frozen=True)
class Setting:
    """A clean input, its full run, the corrupted values of every node and the metric's reference: what a discovery
    or attribution run is measured on."""

    model: KMeansTransformer
    graph: Graph
    embeddings: tuple[Tensor, Tensor]
    full: GraphRun
    corrupted: dict[Node, Tensor]
    corrupted_output: Tensor  # (b, k, d): the full model on the corrupted input (the mean run for "mean")
    metric: str
    corruption: str

    @property
    def points(self) -> Tensor:
        """The clean points (b, n, d) in stream coordinates."""
        return self.embeddings[0][..., : self.full.output.shape[-1]]


def prepare(model: KMeansTransformer, points: Tensor, centroids: Tensor, steps: int | None = None,
            metric: str = "objective", corruption: str | tuple[Tensor, Tensor] = "mean", seed: int = 0) -> Setting:
    """The graph of ``steps`` steps, the clean run, and every node's corrupted value under ``corruption``."""
    check_choice(metric, "metric", METRICS)
    if isinstance(corruption, tuple):
        given = check_points_centroids(*corruption, d=model.config.d) if len(corruption) == 2 else None
        if given is None or given[0].shape != points.shape or given[1].shape != centroids.shape:
            raise InvalidInput("corruption must be one of " + ", ".join(CORRUPTIONS) + " or a (points, centroids) "
                               "pair of the clean input's shapes")
    else:
        check_choice(corruption, "corruption", CORRUPTIONS)
    graph = build_graph(model, steps)
    embeddings = embed(model, points, centroids)
    with torch.no_grad():
        full = run_graph(model, graph, embeddings)
        if corruption == "mean":
            corrupted = {node: value.mean(dim=(0, 1), keepdim=True).expand_as(value)
                         for node, value in full.values.items()}
            keep = torch.zeros(len(graph.edges), dtype=embeddings[0].dtype)
            corrupted_output = run_graph(model, graph, embeddings, keep, corrupted).output
        else:
            other_input = corruption if isinstance(corruption, tuple) else corrupted_input(points, centroids,
                                                                                            corruption, seed)
            other = run_graph(model, graph, embed(model, *other_input))
            corrupted, corrupted_output = other.values, other.output
    name = "given" if isinstance(corruption, tuple) else corruption
    return Setting(model, graph, embeddings, full, corrupted, corrupted_output, metric, name)


def damage(setting: Setting, output: Tensor) -> Tensor:
    """The metric of ``output`` (b, k, d) against the full run's output, mean over tasks: a 0-d tensor (0 for the full
    model), differentiable in ``output``."""
    points, reference = setting.points, setting.full.output  # (b, n, d), (b, k, d)
    if setting.metric == "corrupted_share":
        towards = setting.corrupted_output - reference  # (b, k, d)
        scale = (towards * towards).sum(dim=(1, 2))  # (b,)
        moved = scale > torch.finfo(scale.dtype).eps * (reference * reference).sum(dim=(1, 2))  # (b,): beyond rounding
        share = ((output - reference) * towards).sum(dim=(1, 2)) / scale.clamp_min(TINY)  # (b,)
        return torch.where(moved, share, torch.zeros_like(share)).mean()
    if setting.metric == "distance":
        return ((output - reference) ** 2).sum(-1).mean()
    distances = squared_distances(points, output)  # (b, n, k)
    reference_distances = squared_distances(points, reference)  # (b, n, k)
    if setting.metric == "objective":
        return (distances.amin(-1).sum(-1).log() - reference_distances.amin(-1).sum(-1).log()).mean()
    beta = 1.0 / reference_distances.amin(-1).mean(-1).clamp_min(TINY)  # (b,)
    log_p = torch.log_softmax(-beta[:, None, None] * distances, dim=-1)  # (b, n, k)
    log_q = torch.log_softmax(-beta[:, None, None] * reference_distances, dim=-1)  # (b, n, k)
    return (log_q.exp() * (log_q - log_p)).sum(-1).mean()


def edges_kept(setting: Setting, kept: Tensor) -> float:
    """The metric of the graph run with edge e weighted ``kept[e]`` (a float tensor (E,))."""
    with torch.no_grad():
        run = run_graph(setting.model, setting.graph, setting.embeddings, kept, setting.corrupted)
    return float(damage(setting, run.output))
