"""Hand-set weights that make the KMeansTransformer *be* Lloyd's algorithm (docs/constructions.md).

Euclidean constructions (Theorem 2.1, one-hot D = d + k; paper 2's binary D = d + ceil(log2 k)):

    attn 1 X->C  Q = K = I^{:d}   V = +I^{d+1:}   picks the nearest centre, writes its code
    attn 2 X->X  Q = K = I^{:d}   V = -I^{d+1:}   identity on distinct points, erases the old code
    attn 3 C->X  Q = K = I^{d+1:} V = +I^{:d}     mean of the members (linear or Euclidean AHAT)
    attn 4 C->C  Q = K = I^{d+1:} V = -I^{:d}     identity, erases the old centre

Dot-product construction (derived here): tokens [x; y; ||x||^2], q = [2x; -1], k = [c; ||c||^2] rank keys
like -||x - c||^2; V's also erase the norm slot, and a residual ReLU^2 FFN writes ||x||^2 back.

Empty clusters (docs/decisions.md): every construction pools, for an empty cluster j, the points whose code is nearest
to code j -- all points for one-hot codes (global mean), Hamming neighbours for binary codes. The reference
``interp.algorithms.lloyd(..., empty="nearest_code", codes=model.codes)`` applies the same rule, and the
model output flags it in ``empty_clusters``.

Translation: every construction here but the spherical one is translation invariant and is built with
``ModelConfig.centre_tasks``: it runs on each task translated by its anchor (``interp.primitives.task_anchor``, 0 for
tasks near the origin), as ``interp.algorithms.lloyd`` does, so both stay exact far from the origin.
``dtype`` is ``torch.float32`` / ``torch.float64`` or the strings ``"float32"`` / ``"float64"``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from interp._checks import InvalidInput, InvalidInputType, check_choice, check_positive_int
from interp.model import AttentionConfig, KMeansTransformer, ModelConfig

CENTROID_UPDATES = ("linear", "hardmax")
SELF_ATTENTIONS = ("identity", "literal")
DTYPES = {"float32": torch.float32, "float64": torch.float64, torch.float32: torch.float32,
          torch.float64: torch.float64}


def _resolve_dtype(dtype: object) -> torch.dtype:
    """torch.float32 / torch.float64, also from their names; anything else is refused naming ``dtype``."""
    if isinstance(dtype, (str, torch.dtype)) and dtype in DTYPES:
        return DTYPES[dtype]
    raise InvalidInput(f"dtype must be torch.float32, torch.float64, 'float32' or 'float64', got {dtype!r}")


def _check_positive(value: object, name: str, finite: bool = False) -> None:
    """Refuse bools, non-numbers, NaN, values <= 0 and (with ``finite``) inf, naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputType(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not (value > 0 and (math.isfinite(value) or not finite)):
        raise InvalidInput(f"{name} must be a positive {'finite number' if finite else 'number or inf'}, got {value!r}")


def _selector(width: int, start: int, stop: int, dtype: torch.dtype) -> Tensor:
    """I^{start:stop} (0-based, stop exclusive) as a (width, width) diagonal 0/1 matrix."""
    diag = torch.zeros(width, dtype=dtype)
    diag[start:stop] = 1
    return torch.diag(diag)


def lloyd_transformer(
    d: int,
    k: int,
    n_layers: int = 10,
    embedding: str = "onehot",
    *,
    attention: str = "euclidean",
    centroid_update: str | None = None,
    self_attention: str = "identity",
    gamma: float = math.inf,
    scale_by_sqrt_dim: bool = False,
    dtype: torch.dtype = torch.float64,
) -> KMeansTransformer:
    """A transformer whose every layer is one Lloyd step (docs/constructions.md).

    ``centroid_update``: ``"linear"`` (paper 1: normalised linear attention; one-hot default) or ``"hardmax"``
    (paper 2: Euclidean AHAT; the binary default and the only choice there). ``self_attention="identity"``
    (default) uses the gamma = inf value of attentions 2 and 4, exact also for duplicate points and O(n) not
    O(n^2); ``"literal"`` computes them. ``gamma`` < inf gives the softmax approximation (no 1/sqrt(D) unless
    ``scale_by_sqrt_dim``, as the authors' CModel).
    """
    check_positive_int(d, "d")
    check_positive_int(k, "k")
    check_positive_int(n_layers, "n_layers")
    check_choice(embedding, "embedding", ("onehot", "binary", "none"))
    check_choice(attention, "attention", ("euclidean", "dot"))
    check_choice(self_attention, "self_attention", SELF_ATTENTIONS)
    if embedding == "none":
        raise InvalidInput("embedding='none' has no exact construction: the points carry no assignment slots")
    if centroid_update is None:
        centroid_update = "linear" if embedding == "onehot" and attention == "euclidean" else "hardmax"
    check_choice(centroid_update, "centroid_update", CENTROID_UPDATES)
    if embedding == "binary" and centroid_update == "linear":
        raise InvalidInput("centroid_update='linear' needs one-hot codes; binary codes need 'hardmax'")
    if attention == "dot" and embedding != "onehot":
        raise InvalidInput("attention='dot' is constructed for embedding='onehot' only")
    if attention == "dot" and centroid_update == "linear":
        raise InvalidInput("attention='dot' uses a dot-product hardmax centre update; pass centroid_update='hardmax'")
    _check_positive(gamma, "gamma")
    dtype = _resolve_dtype(dtype)
    if attention == "dot":
        return _dot_product_construction(d, k, n_layers, self_attention, gamma, scale_by_sqrt_dim, dtype)
    return _euclidean_construction(d, k, n_layers, embedding, centroid_update, self_attention, gamma,
                                   scale_by_sqrt_dim, dtype)


def _attn(score: str, gamma: float, sqrt: bool, identity: bool = False, normaliser: str = "softmax",
          bias: bool = False) -> AttentionConfig:
    return AttentionConfig(score=score, normaliser=normaliser, gamma=gamma, scale_by_sqrt_dim=sqrt,
                           identity=identity, bias=bias, dropout=0.0)


def _set(weights, W_Q: Tensor, W_K: Tensor, W_V: Tensor, b_Q: Tensor | None = None) -> None:
    with torch.no_grad():
        weights.W_Q.copy_(W_Q)
        weights.W_K.copy_(W_K)
        weights.W_V.copy_(W_V)
        for name in ("b_Q", "b_K", "b_V"):
            bias = getattr(weights, name)
            if bias is not None:
                bias.zero_()
        if b_Q is not None:
            weights.b_Q.copy_(b_Q)


def _euclidean_construction(d, k, n_layers, embedding, centroid_update, self_attention, gamma, sqrt, dtype):
    identity = self_attention == "identity"
    linear = centroid_update == "linear"
    config = ModelConfig(
        d=d, k=k, embedding=embedding, n_layers=n_layers, shared_weights=True, reembed=False, centre_tasks=True,
        attn_xc=_attn("euclidean", gamma, sqrt),
        attn_xx=_attn("euclidean", gamma, sqrt, identity=identity),
        attn_cx=_attn("dot", gamma, sqrt, normaliser="linear") if linear else _attn("euclidean", gamma, sqrt),
        attn_cc=_attn("euclidean", gamma, sqrt, identity=identity),
    )
    model = KMeansTransformer(config).to(dtype)
    width = config.d_model
    data = _selector(width, 0, d, dtype)  # I^{:d}
    scratch = _selector(width, d, width, dtype)  # I^{d+1:}
    layer = model.layers[0]
    _set(layer.attn_xc, data, data, scratch)
    _set(layer.attn_xx, data, data, -scratch)
    _set(layer.attn_cx, scratch, scratch, data)
    _set(layer.attn_cc, scratch, scratch, -data)
    return model.requires_grad_(False).eval()


def _dot_product_construction(d, k, n_layers, self_attention, gamma, sqrt, dtype):
    identity = self_attention == "identity"
    config = ModelConfig(
        d=d, k=k, embedding="onehot", n_layers=n_layers, shared_weights=True, reembed=False, centre_tasks=True,
        norm_slot=True, ffn=True, ffn_hidden=2 * d,
        attn_xc=_attn("dot", gamma, sqrt, bias=True),
        attn_xx=_attn("dot", gamma, sqrt, identity=identity, bias=True),
        attn_cx=_attn("dot", gamma, sqrt),
        attn_cc=_attn("dot", gamma, sqrt, identity=identity),
    )
    model = KMeansTransformer(config).to(dtype)
    width = config.d_model  # d + k + 1
    slot = width - 1  # the squared-norm feature
    data = _selector(width, 0, d, dtype)
    codes = _selector(width, d, d + k, dtype)
    norm = _selector(width, slot, slot + 1, dtype)
    query_bias = torch.zeros(width, dtype=dtype)
    query_bias[slot] = -1.0
    layer = model.layers[0]
    # q = [2x; 0; -1], k = [c; 0; ||c||^2]: q.k = 2 x.c - ||c||^2 = -||x - c||^2 + ||x||^2
    _set(layer.attn_xc, 2 * data, data + norm, codes, b_Q=query_bias)
    _set(layer.attn_xx, 2 * data, data + norm, -codes - norm, b_Q=query_bias)
    _set(layer.attn_cx, codes, codes, data)
    _set(layer.attn_cc, codes, codes, -data - norm)
    with torch.no_grad():
        for ffn in (layer.ffn_points, layer.ffn_centroids):
            ffn.W_in.zero_()
            ffn.W_in[:d, :d] = torch.eye(d, dtype=dtype)  # ReLU(x)^2
            ffn.W_in[d:, :d] = -torch.eye(d, dtype=dtype)  # ReLU(-x)^2
            ffn.b_in.zero_()
            ffn.W_out.zero_()
            ffn.W_out[slot, :] = 1.0  # sum_m ReLU(x_m)^2 + ReLU(-x_m)^2 = ||x||^2
            ffn.b_out.zero_()
    return model.requires_grad_(False).eval()


# ----- variants: change one circuit part, get another algorithm (docs/variants.md) ------------------------------------
def _variant(d: int, k: int, n_layers: int, dtype: torch.dtype, attn_xc: AttentionConfig,
             attn_cx: AttentionConfig, cx_query_key: Tensor | None = None, xc_score: str = "euclidean",
             centre_tasks: bool = True) -> KMeansTransformer:
    """One-hot construction with attention 1 and 3 configurable; attentions 2 and 4 are the identity erasers."""
    config = ModelConfig(
        d=d, k=k, embedding="onehot", n_layers=n_layers, shared_weights=True, reembed=False, centre_tasks=centre_tasks,
        attn_xc=attn_xc, attn_xx=_attn(xc_score, math.inf, False, identity=True),
        attn_cx=attn_cx, attn_cc=_attn("euclidean", math.inf, False, identity=True),
    )
    model = KMeansTransformer(config).to(dtype)
    width = config.d_model
    data, scratch = _selector(width, 0, d, dtype), _selector(width, d, width, dtype)
    layer = model.layers[0]
    _set(layer.attn_xc, data, data, scratch)
    _set(layer.attn_xx, data, data, -scratch)
    query_key = scratch if cx_query_key is None else cx_query_key
    _set(layer.attn_cx, query_key, query_key, data)
    _set(layer.attn_cc, scratch, scratch, -data)
    return model.requires_grad_(False).eval()


def _check_variant(d: int, k: int, n_layers: int, dtype: object) -> torch.dtype:
    check_positive_int(d, "d")
    check_positive_int(k, "k")
    check_positive_int(n_layers, "n_layers")
    return _resolve_dtype(dtype)


def _weighted_selector(d: int, k: int, data_weight: float, code_weight: float, dtype: torch.dtype) -> Tensor:
    """diag(sqrt(data_weight) on data, sqrt(code_weight) on codes):
    -||Q c - K x||^2 = -(w_d ||c - x||^2 + w_c ||e - y||^2)."""
    diag = torch.cat([torch.full((d,), math.sqrt(data_weight), dtype=dtype),
                      torch.full((k,), math.sqrt(code_weight), dtype=dtype)])
    return torch.diag(diag)


def soft_kmeans_transformer(d: int, k: int, n_layers: int = 10, *, beta: float = 10.0,
                            dtype: torch.dtype = torch.float64) -> KMeansTransformer:
    """Soft k-means (MacKay; docs/variants.md): attention 1 is softmax at inverse temperature beta (it writes the
    responsibilities r_i into the code slots), attention 3 normalised linear attention: c_j = sum r_ij x_i / sum r_ij.
    Equals ``interp.algorithms.soft_kmeans(beta=beta)``."""
    dtype = _check_variant(d, k, n_layers, dtype)
    _check_positive(beta, "beta", finite=True)
    return _variant(d, k, n_layers, dtype, _attn("euclidean", beta, False),
                    _attn("dot", math.inf, False, normaliser="linear"))


def spherical_kmeans_transformer(d: int, k: int, n_layers: int = 10, *,
                                 dtype: torch.dtype = torch.float64) -> KMeansTransformer:
    """Spherical k-means (Dhillon-Modha; derived here): dot-product hardmax assignment (largest cosine on unit
    data), linear-attention mean, then RMSNorm (eps 0, gain 1/sqrt(D)) on attention 3's output:
    c_j = mu_j / ||mu_j||."""
    dtype = _check_variant(d, k, n_layers, dtype)
    cx = AttentionConfig(score="dot", normaliser="linear", gamma=math.inf, scale_by_sqrt_dim=False, identity=False,
                         bias=False, dropout=0.0, output_norm="unit")
    return _variant(d, k, n_layers, dtype, _attn("dot", math.inf, False), cx, xc_score="dot",
                    centre_tasks=False)  # cosines on unit-norm data: not translation invariant


def trimmed_kmeans_transformer(d: int, k: int, n_layers: int = 10, *, gamma: float = 10.0, alpha: float = math.inf,
                               code_weight: float | None = None,
                               dtype: torch.dtype = torch.float64) -> KMeansTransformer:
    """Trimmed k-means by alpha-normmax attention 3 (docs/variants.md; derived here): scores -gamma (||c_j - x_i||^2 +
    lam ||e_j - y_i||^2), lam large so only the own cluster competes. alpha = inf: uniform over the top-m members
    (``trimmed_kmeans(rule="normmax")`` exactly); finite alpha: entmax's ``normmax_bisect``, a softer trimming."""
    dtype = _check_variant(d, k, n_layers, dtype)
    _check_positive(gamma, "gamma", finite=True)
    if code_weight is not None:
        _check_positive(code_weight, "code_weight", finite=True)
    lam = code_weight if code_weight is not None else 100.0 * d * max(1.0, 1.0 / gamma)
    cx = AttentionConfig(score="euclidean", normaliser="normmax", gamma=gamma, alpha=alpha, scale_by_sqrt_dim=False,
                         identity=False, bias=False, dropout=0.0)
    return _variant(d, k, n_layers, dtype, _attn("euclidean", math.inf, False), cx,
                    cx_query_key=_weighted_selector(d, k, 1.0, lam, dtype))


def robust_kmeans_transformer(d: int, k: int, n_layers: int = 10, *, gamma: float = 0.01,
                              code_weight: float | None = None,
                              dtype: torch.dtype = torch.float64) -> KMeansTransformer:
    """Robust k-means by sparsemax attention 3:
    scores -gamma (||c_j - x_i||^2 / sqrt(d) + lam ||e_j - y_i||^2);
    sparsemax gives non-members exactly 0 once 2 gamma lam > 1 + gamma sqrt(d), so this equals the authors'
    ``robust_kmeans(gamma=gamma)``."""
    dtype = _check_variant(d, k, n_layers, dtype)
    _check_positive(gamma, "gamma", finite=True)
    if code_weight is not None:
        _check_positive(code_weight, "code_weight", finite=True)
    lam = code_weight if code_weight is not None else 10.0 * (1.0 / gamma + math.sqrt(d))
    cx = AttentionConfig(score="euclidean", normaliser="sparsemax", gamma=gamma, scale_by_sqrt_dim=False,
                         identity=False, bias=False, dropout=0.0)
    return _variant(d, k, n_layers, dtype, _attn("euclidean", math.inf, False), cx,
                    cx_query_key=_weighted_selector(d, k, 1.0 / math.sqrt(d), lam, dtype))


KMEDOIDS_MARGIN = 64.0  # code weight in the k-medoids transformer's attention 3: members outscore others by far


def kmedoids_transformer(d: int, k: int, n_layers: int = 10, *, gumbel_tau: float = 0.0,
                         dtype: torch.dtype = torch.float64) -> KMeansTransformer:
    """Randomized k-medoids by Gumbel attention 3 (docs/variants.md; derived here): members score 64, others -64 (codes
    scaled by 8), plus seeded Gumbel noise; the arg-max picks one member uniformly, so the centre becomes a data
    point. ``gumbel_tau`` > 0 gives the relaxed (Gumbel-softmax) version. Pass ``generator=`` to the forward;
    with the same seed it equals ``interp.algorithms.randomized_kmedoids``."""
    dtype = _check_variant(d, k, n_layers, dtype)
    cx = AttentionConfig(score="euclidean", normaliser="gumbel", gamma=1.0, gumbel_tau=gumbel_tau,
                         scale_by_sqrt_dim=False, identity=False, bias=False, dropout=0.0)
    return _variant(d, k, n_layers, dtype, _attn("euclidean", math.inf, False), cx,
                    cx_query_key=_weighted_selector(d, k, 0.0, KMEDOIDS_MARGIN, dtype))
