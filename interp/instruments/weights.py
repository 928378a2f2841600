"""Learned weights beside the construction's (paper 1 Thm 2.1 and its weight figures; paper 2 Thm 2.1, App. B).

Each attention scores a query token z against a key token z' by

    -||Q z + b_Q - K z' - b_K||^2 = -z^T Q^T Q z  +  2 z^T (Q^T K) z'  -  z'^T K^T K z'  + (bias terms)

The first term depends on the query only, so softmax and hardmax ignore it; the cross term's bilinear form
Q^T K (D x D, rows = query-side features, columns = key-side features) is what the papers plot (Fig. 5), and
it removes the common orthogonal rotation Q, K -> R Q, R K that leaves every score unchanged. The key-side
form K^T K also enters the scores (``attention_matrices`` returns it and Q^T Q too). There is no output
matrix: an attention writes V z' into the residual stream, so the OV circuit is W_V (rows = output features,
columns = input features).

``attention_circuits`` returns the same circuits as TransformerLens ``FactoredMatrix`` objects in TransformerLens's
orientation (tokens are rows: QK = W_Q^T W_K, the matrix above, and OV = W_V^T), read through
``model.blocks[step].attn_xc.QK`` / ``.OV``; ``attention_matrices`` returns their products (``.AB``), OV in the
paper's orientation W_V, which the heatmaps and figures of similarity read.

The reference for a learned model of (d, k, embedding) is the Euclidean AHAT construction of the same d, k
and embedding (``lloyd_transformer(d, k, 1, embedding, centroid_update="hardmax")``, paper 1 Thm 2.1, paper 2 Thm 2.1):
Euclidean attention everywhere, like the learned model. Learned models without scratch features
(``embedding="none"``, D = d) have no construction; they are compared with the d x d data block of the one-hot
construction. There attn_xc's and attn_xx's V, and attn_cx's and attn_cc's Q^T K, are zero (the construction
routes them through the scratch features), so their cosine is undefined (NaN) and all of the learned
weight counts as outside the construction's blocks.

Figures of similarity per attention x matrix (``compare_weights``):

* ``cosine``: <A, R> / (||A|| ||R||) of the flattened matrices (sign matters; scale does not).
* ``scale``: <A, R> / ||R||^2, the best multiple of the reference (for Q^T K the effective inverse temperature
  relative to the construction's, before the learned model's 1/sqrt(D)).
* ``diagonal_dominance``: ||diag B||^2 / ||B||^2 of the d x d data block B (1 for a diagonal block).
* ``outside_fraction``: share of ||A||_F^2 outside the reference's nonzero entries.
* ``unused_fraction``: share of ||A||_F^2 on features that are zero at the input of a (re-embedded) step, the
  point stream's scratch features [x; 0] (re-embedding, paper 2 App. C): such weights never act in the trained
  one-step model and keep their random initial values.

``heatmap_matrices`` lists the matrices that ``interp.report.plots.weight_heatmaps`` draws side by side with
the data | scratch boundary; ``attention_map_data`` computes the four attention patterns of the construction
(sigma_inf) and of the learned model (sigma_gamma, as trained) for one task, points sorted by their true mixture
component, which ``interp.report.plots.attention_maps`` draws (paper 1 Fig. 6).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import Tensor
from transformer_lens.FactoredMatrix import FactoredMatrix

from interp._checks import InvalidInput, InvalidInputType
from interp.model import KMeansTransformer
from interp.model.constructions import lloyd_transformer

ATTENTIONS = ("attn_xc", "attn_xx", "attn_cx", "attn_cc")
MATRICES = ("QK", "QQ", "KK", "OV")
# which stream each attention reads as (queries, keys = values); "points" = the raw point stream [x; 0; ...]
_STREAMS = {
    "attn_xc": ("points", "centroids"),
    "attn_xx": ("points", "points"),
    "attn_cx": ("centroids", "updated points"),
    "attn_cc": ("centroids", "centroids"),
}


@dataclass(frozen=True)
class WeightSimilarity:
    """Similarity of one matrix of one attention to the reference construction's (module docstring).

    Fractions and cosines are plain floats; NaN where undefined (a zero matrix or zero data block)."""

    attention: str  # attn_xc, attn_xx, attn_cx or attn_cc
    matrix: str  # "QK" (Q^T K), "OV" (W_V), "QQ" or "KK"
    cosine: float  # <A, R> / (||A|| ||R||), flattened
    scale: float  # <A, R> / ||R||^2
    diagonal_dominance: float  # ||diag B||^2 / ||B||^2, B = A[:d, :d]
    reference_diagonal_dominance: float  # the same for the reference R
    outside_fraction: float  # ||A outside supp(R)||^2 / ||A||^2
    unused_fraction: float  # ||A on features zero at a step's input||^2 / ||A||^2

    def as_dict(self) -> dict:
        return asdict(self)


# ----- matrices ---------------------------------------------------------------------------------------


def _check_model(model: object, name: str = "model") -> KMeansTransformer:
    if not isinstance(model, KMeansTransformer):
        raise InvalidInputType(f"{name} must be a KMeansTransformer, got {type(model).__name__}")
    return model


def attention_circuits(model: KMeansTransformer, step: int = 0) -> dict[str, dict[str, FactoredMatrix]]:
    """{attention: {"QK", "QQ", "KK", "OV"}} of the weights step ``step`` uses, as TransformerLens ``FactoredMatrix``
    objects (D, D) in TransformerLens's orientation (tokens are rows x), detached, float64 on the CPU.

    QK = W_Q^T W_K (x QK x'^T the scores' bilinear form, ``Attention.QK`` without its head axis), QQ = W_Q^T W_Q and
    KK = W_K^T W_K (the query-only and key-only forms of a euclidean score), OV = W_V^T (a key row x' adds x' OV;
    ``Attention.OV``). ``.AB`` is the matrix, ``.svd()``, ``.eigenvalues`` and ``.norm()`` are TransformerLens's. A
    shared-weight model's steps all use one layer; a model with unshared layers has one per step."""
    _check_model(model)
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < len(model.blocks):
        raise InvalidInput(f"step must be an int in [0, {len(model.blocks) - 1}], got {step!r}")
    block = model.blocks[step]
    out = {}
    for name in ATTENTIONS:
        attention = getattr(block, name)
        QK, OV = attention.QK[0], attention.OV[0]  # (D, D) each
        W_Q, W_K = (_cpu64(factor) for factor in QK.pair)  # W_Q^T (D_in, D), W_K (D, D_in)
        out[name] = {
            "QK": FactoredMatrix(W_Q, W_K),  # (D_query, D_key)
            "QQ": FactoredMatrix(W_Q, W_Q.T),  # (D_query, D_query)
            "KK": FactoredMatrix(W_K.T, W_K),  # (D_key, D_key)
            "OV": FactoredMatrix(*(_cpu64(factor) for factor in OV.pair)),  # (D_in, D_out)
        }
    return out


def _cpu64(tensor: Tensor) -> Tensor:
    return tensor.detach().to("cpu", torch.float64)


def attention_matrices(model: KMeansTransformer) -> dict[str, dict[str, Tensor]]:
    """{attention: {"QK": Q^T K, "QQ": Q^T Q, "KK": K^T K, "OV": W_V}}, each (D, D) float64 on the CPU.

    Q^T K is the bilinear form of the score's cross term 2 z^T Q^T K z' (``attention_circuits``' ``FactoredMatrix``
    products); rows index the query-side (or output) feature, columns the key-side (or input) feature: OV is in the
    paper's orientation, W_V = ``attention_circuits(model)[name]["OV"].AB.T``. A model with unshared layers
    contributes its first layer's weights."""
    circuits = attention_circuits(model)
    out = {}
    for name in ATTENTIONS:
        per = circuits[name]
        out[name] = {
            "QK": per["QK"].AB,  # (D_query, D_key)
            "QQ": per["QQ"].AB,  # (D_query, D_query)
            "KK": per["KK"].AB,  # (D_key, D_key)
            "OV": per["OV"].A.T.clone(),  # (D_out, D_in): W_V, the factor itself (OV = W_V^T I)
        }
    return out


def reference_construction(model: KMeansTransformer) -> KMeansTransformer:
    """The exact construction a model of ``model``'s (d, k, embedding) is compared with (module docstring):
    Euclidean AHAT everywhere (paper 1 Thm 2.1, paper 2 Thm 2.1), the dot-product one for a one-hot model with a
    norm slot (paper 1 Thm 2.2), the one-hot construction for ``embedding="none"``. Self-attentions are literal, so
    their patterns are computed, not assumed. One layer, float64, gamma = inf."""
    config = _check_model(model).config
    embedding = "onehot" if config.embedding == "none" else config.embedding
    attention = "dot" if config.norm_slot else "euclidean"
    if config.norm_slot and embedding != "onehot":
        raise InvalidInput(f"model has a norm slot with embedding={config.embedding!r}: "
                           "no construction to compare with")
    return lloyd_transformer(config.d, config.k, 1, embedding, attention=attention, centroid_update="hardmax",
                             self_attention="literal")


def _resolve_reference(model: KMeansTransformer, reference: KMeansTransformer | None) -> KMeansTransformer:
    if reference is None:
        return reference_construction(model)
    _check_model(reference, "reference")
    for field in ("d", "k"):
        mine, theirs = getattr(model.config, field), getattr(reference.config, field)
        if mine != theirs:
            raise InvalidInput(f"reference has {field}={theirs} but model has {field}={mine}")
    D, D_ref = model.config.d_model, reference.config.d_model
    if D != D_ref and not (model.config.embedding == "none" and not model.config.norm_slot):
        raise InvalidInput(
            f"reference has width D={D_ref} ({reference.config.embedding}) but model has D={D} "
            f"({model.config.embedding}); only a model with embedding='none' is compared with a data block"
        )
    return reference


def _reference_matrices(model: KMeansTransformer, reference: KMeansTransformer) -> dict[str, dict[str, Tensor]]:
    """The reference's matrices, cut to the model's d x d data block when the model has no scratch features."""
    matrices = attention_matrices(reference)
    D = model.config.d_model
    return {name: {key: m[:D, :D] for key, m in per.items()} for name, per in matrices.items()}


def _unused_mask(model: KMeansTransformer, attention: str, matrix: str) -> Tensor:
    """(D, D) bool: entries that multiply a feature which is zero at a step's input (the raw point stream's
    scratch features); rows for the query side (Q^T K, Q^T Q), columns for the key/value side."""
    config = model.config
    D, d, e = config.d_model, config.d, config.scratch_width
    dead = torch.zeros(D, dtype=torch.bool)  # (D,) scratch features of the raw point stream
    dead[d : d + e] = True
    query_stream, key_stream = _STREAMS[attention]
    row_dead = {"QK": query_stream, "QQ": query_stream, "KK": key_stream, "OV": None}[matrix] == "points"
    col_dead = {"QK": key_stream, "QQ": query_stream, "KK": key_stream, "OV": key_stream}[matrix] == "points"
    mask = torch.zeros(D, D, dtype=torch.bool)
    if row_dead:
        mask |= dead[:, None]
    if col_dead:
        mask |= dead[None, :]
    return mask


# ----- figures of similarity ---------------------------------------------------------------------------


def _ratio(numerator: Tensor, denominator: Tensor) -> float:
    denominator = float(denominator)
    return float(numerator) / denominator if denominator > 0 else math.nan


def _diagonal_dominance(matrix: Tensor, d: int) -> float:
    block = matrix[:d, :d]  # (d, d) data block
    return _ratio((block.diagonal() ** 2).sum(), (block**2).sum())


def block_shares(matrix: Tensor, d: int) -> dict[str, float]:
    """Share of ||M||_F^2 in each block of a (D, D) matrix split at feature d: keys "row|column" over
    {"data", "scratch"} (rows = query side / output, columns = key side / input). NaN for a zero matrix."""
    if not isinstance(matrix, Tensor) or matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise InvalidInput(f"matrix must be a square 2-d tensor, got {getattr(matrix, 'shape', type(matrix).__name__)}")
    if isinstance(d, bool) or not isinstance(d, int) or not 0 < d <= matrix.shape[0]:
        raise InvalidInput(f"d must be an int in [1, {matrix.shape[0]}], got {d!r}")
    squared = matrix.detach().to(torch.float64) ** 2  # (D, D)
    total = squared.sum()
    parts = {"data": slice(0, d), "scratch": slice(d, None)}
    return {f"{r}|{c}": _ratio(squared[rs, cs].sum(), total) for r, rs in parts.items() for c, cs in parts.items()}


def compare_weights(
    model: KMeansTransformer,
    reference: KMeansTransformer | None = None,
    matrices: tuple[str, ...] = ("QK", "OV"),
) -> list[WeightSimilarity]:
    """Similarity of ``model``'s Q^T K and OV matrices (and optionally Q^T Q, K^T K) to ``reference``'s,
    one ``WeightSimilarity`` per attention x matrix, attentions in the order xc, xx, cx, cc.

    ``reference`` defaults to ``reference_construction(model)``; it must have the same d and k, and the same
    width D unless the model has ``embedding="none"`` (then its d x d data blocks are used)."""
    _check_model(model)
    reference = _resolve_reference(model, reference)
    if isinstance(matrices, str) or not all(m in MATRICES for m in matrices) or len(matrices) == 0:
        raise InvalidInput(f"matrices must be a non-empty tuple of {MATRICES}, got {matrices!r}")
    d = model.config.d
    mine, theirs = attention_matrices(model), _reference_matrices(model, reference)
    results = []
    for name in ATTENTIONS:
        for key in matrices:
            A, R = mine[name][key], theirs[name][key]  # (D, D) each, float64
            inner = (A * R).sum()
            total = (A**2).sum()
            results.append(WeightSimilarity(
                attention=name,
                matrix=key,
                cosine=_ratio(inner, A.norm() * R.norm()),
                scale=_ratio(inner, (R**2).sum()),
                diagonal_dominance=_diagonal_dominance(A, d),
                reference_diagonal_dominance=_diagonal_dominance(R, d),
                outside_fraction=_ratio((A[R == 0] ** 2).sum(), total),
                unused_fraction=_ratio((A[_unused_mask(model, name, key)] ** 2).sum(), total),
            ))
    return results


def check_similarities(similarities: object) -> list[WeightSimilarity]:
    """``similarities`` as a non-empty list of WeightSimilarity (one item is accepted), or a clear error."""
    if isinstance(similarities, WeightSimilarity):
        similarities = [similarities]
    if not isinstance(similarities, (list, tuple)) or len(similarities) == 0:
        raise InvalidInput("similarities must be a non-empty list of WeightSimilarity (from compare_weights)")
    for item in similarities:
        if not isinstance(item, WeightSimilarity):
            raise InvalidInputType(f"similarities must hold WeightSimilarity objects, got {type(item).__name__}")
    return list(similarities)


def format_similarities(similarities: list[WeightSimilarity]) -> str:
    """A plain-text table of ``compare_weights``' figures, one row per attention x matrix."""
    rows = check_similarities(similarities)
    header = f"{'attention':<9} {'matrix':<6} {'cosine':>7} {'scale':>8} {'diag':>6} {'ref diag':>8} " \
             f"{'outside':>7} {'unused':>6}"
    lines = [header, "-" * len(header)]
    for s in rows:
        lines.append(f"{s.attention:<9} {s.matrix:<6} {s.cosine:>7.3f} {s.scale:>8.3f} {s.diagonal_dominance:>6.3f} "
                     f"{s.reference_diagonal_dominance:>8.3f} {s.outside_fraction:>7.3f} {s.unused_fraction:>6.3f}")
    return "\n".join(lines)


# ----- what the heatmaps show ----------------------------------------------------------------------------


def feature_labels(model: KMeansTransformer) -> list[str]:
    """Names of the D features: x0..x{d-1} (data), y0..y{e-1} (scratch code), s (squared-norm slot)."""
    config = _check_model(model).config
    labels = [f"x{i}" for i in range(config.d)] + [f"y{i}" for i in range(config.scratch_width)]
    return labels + (["s"] if config.norm_slot else [])


def block_boundaries(model: KMeansTransformer) -> list[int]:
    """Feature indices where a block starts: the scratch features (index d) and a norm slot, when present."""
    config = _check_model(model).config
    bounds = [config.d] if config.scratch_width else []
    if config.norm_slot:
        bounds.append(config.d + config.scratch_width)
    return bounds


def heatmap_matrices(
    model: KMeansTransformer,
    reference: KMeansTransformer | None = None,
    matrices: tuple[str, ...] = ("QK", "OV"),
) -> dict[str, dict[tuple[str, str], Tensor]]:
    """{attention: {(matrix, "learned" | "construction"): (D, D) float64}}, attentions in the order xc, xx, cx, cc
    and per attention the columns learned M | construction M for each M in ``matrices`` (paper 1 Fig. 5).
    ``reference`` defaults to ``reference_construction(model)`` (cut to the d x d data block for D = d)."""
    _check_model(model)
    reference = _resolve_reference(model, reference)
    if isinstance(matrices, str) or not all(m in MATRICES for m in matrices) or len(matrices) == 0:
        raise InvalidInput(f"matrices must be a non-empty tuple of {MATRICES}, got {matrices!r}")
    mine, theirs = attention_matrices(model), _reference_matrices(model, reference)
    return {name: {(key, source): (mine if source == "learned" else theirs)[name][key]
                   for key in matrices for source in ("learned", "construction")} for name in ATTENTIONS}


# ----- attention maps -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionMapData:
    """The eight patterns of ``attention_map_data`` for one task, cut and ordered for display.

    ``patterns[source][attention]`` is (queries, keys) float64 for source "construction" / "learned": points
    sorted by true component (every (n / max_points)-th when subsampled), centroids in ``centroid_order``.
    ``gammas[source][attention]`` is that attention's inverse temperature; ``component_starts`` are the first
    shown index of each true component and ``component_labels`` its label; ``n`` points in the task."""

    patterns: dict[str, dict[str, Tensor]]
    gammas: dict[str, dict[str, float]]
    centroid_order: list[int]
    component_starts: list[int]
    component_labels: list[int]
    shown_points: int
    n: int


def _one_task(value: object, name: str, ndim: int, hint: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise InvalidInputType(f"{name} must be a torch.Tensor of shape {hint}, got {type(value).__name__}")
    if value.ndim == ndim + 1:
        if value.shape[0] != 1:
            raise InvalidInput(f"{name} must hold one task, shape {hint} or (1, ...), got {tuple(value.shape)}")
        value = value[0]
    if value.ndim != ndim:
        raise InvalidInput(f"{name} must have shape {hint}, got {tuple(value.shape)}")
    return value


@torch.no_grad()
def _patterns(model: KMeansTransformer, points: Tensor, init: Tensor) -> tuple[dict[str, Tensor], Tensor]:
    """The four attention patterns of one step (eval mode, dropout off) and the assignments, for one task."""
    where = dict(device=model.codes.device, dtype=model.codes.dtype)  # float64 construction, float32 learned
    was_training = model.training
    model.eval()
    try:
        names = [f"blocks.0.{name}.hook_pattern" for name in ATTENTIONS]  # identity ones too: (n, n) for one task
        out, cache = model.run_with_cache(points[None].to(**where), init[None].to(**where), steps=1, slot_order="fixed",
                                          names_filter=names)
    finally:
        model.train(was_training)
    patterns = {name: cache[f"blocks.0.{name}.hook_pattern"][0].to("cpu", torch.float64) for name in ATTENTIONS}
    return patterns, out.assignment_trajectory[0, 0].cpu()  # {name: (queries, keys)}, (n,): nearest of init


def attention_map_data(
    model: KMeansTransformer,
    points: Tensor,
    init: Tensor,
    labels: Tensor,
    reference: KMeansTransformer | None = None,
    max_points: int = 256,
) -> AttentionMapData:
    """The four attention patterns of the construction (sigma_inf: AHAT) and of ``model`` (sigma_gamma at its own
    gamma, as trained) for one task, ordered for display (paper 1 Fig. 6).

    ``points`` (n, d) or (1, n, d), ``init`` (k, d) or (1, k, d) initial centroids, ``labels`` (n,) or (1, n)
    the true mixture component of each point. Points are sorted by true component and, when n > ``max_points``,
    every (n / max_points)-th sorted point is kept (attention is computed over all n; kept rows of the point-key
    maps then do not sum to 1). Centroids are ordered by the majority true component of the points the
    construction assigns to them."""
    _check_model(model)
    reference = _resolve_reference(model, reference)
    points = _one_task(points, "points", 2, "(n, d)")
    init = _one_task(init, "init", 2, "(k, d)")
    labels = _one_task(labels, "labels", 1, "(n,)")
    if not points.is_floating_point() or not init.is_floating_point():
        raise InvalidInputType("points and init must be floating tensors")
    n, d = points.shape
    if d != model.config.d:
        raise InvalidInput(f"points have d={d} but the model was built for d={model.config.d}")
    if init.shape != (model.config.k, d):
        raise InvalidInput(f"init must have shape (k={model.config.k}, d={d}), got {tuple(init.shape)}")
    if labels.shape != (n,) or labels.is_floating_point() or labels.dtype == torch.bool:
        raise InvalidInput(
            f"labels must be an integer tensor of shape (n={n},), got {labels.dtype} {tuple(labels.shape)}"
        )
    if isinstance(max_points, bool) or not isinstance(max_points, int) or max_points < 1:
        raise InvalidInput(f"max_points must be a positive int, got {max_points!r}")
    labels = labels.cpu()
    reference_patterns, reference_assignments = _patterns(reference, points, init)
    model_patterns, _ = _patterns(model, points, init)

    order = torch.argsort(labels, stable=True)  # (n,) points sorted by true component
    if n > max_points:
        order = order[torch.linspace(0, n - 1, max_points).round().long()]  # (m,)
    shown_labels = labels[order]  # (m,)
    k = model.config.k
    majority = []
    for j in range(k):
        members = labels[reference_assignments == j]
        majority.append(int(torch.mode(members).values) if len(members) else int(labels.max()) + 1 + j)
    centroid_order = sorted(range(k), key=lambda j: (majority[j], j))
    c_order = torch.tensor(centroid_order)  # (k,)
    change = (shown_labels[1:] != shown_labels[:-1]).nonzero().flatten() + 1  # first index of each new component
    starts = [0] + change.tolist()

    def cut(name: str, pattern: Tensor) -> Tensor:
        return {
            "attn_xc": lambda p: p[order][:, c_order],  # (m, k)
            "attn_xx": lambda p: p[order][:, order],  # (m, m)
            "attn_cx": lambda p: p[c_order][:, order],  # (k, m)
            "attn_cc": lambda p: p[c_order][:, c_order],  # (k, k)
        }[name](pattern)

    sources = {"construction": (reference, reference_patterns), "learned": (model, model_patterns)}
    return AttentionMapData(
        patterns={source: {name: cut(name, p[name]) for name in ATTENTIONS} for source, (_, p) in sources.items()},
        gammas={source: {name: getattr(m.config, name).gamma for name in ATTENTIONS}
                for source, (m, _) in sources.items()},
        centroid_order=centroid_order,
        component_starts=starts,
        component_labels=[int(shown_labels[s]) for s in starts],
        shown_points=len(order),
        n=n,
    )
