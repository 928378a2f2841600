"""Exact path decomposition of one step's centroid update (the residual-stream decomposition of TransformerLens,
for this encoder-decoder; paper 2, Eq. 4).

One step reads the point stream P (b, n, D) and the centroid stream Z (b, k, D) and computes

    P' = P + XC + XX  [+ FFN_x(.)],          XC = attn_xc(P -> Z),   XX = attn_xx(P -> P)
    Z' = Z + CX + CC  [+ FFN_c(.)],          CX = attn_cx(Z -> P'),  CC = attn_cc(Z -> Z)

and the centroid update is the first d features of Z' - Z: Delta c = CX[:d] + CC[:d] (+ FFN_c[:d]). An attention's
output is A (V z' + b_V) with A its pattern, so with attn_cx's pattern A held at its value the update splits exactly
(linearity of the value path) into what attn_cx's values read from each source of P',

    CX[:d] = A (P V^T)[:d] + A (XC V^T)[:d] + A (XX V^T)[:d] (+ A (FFN_x V^T)[:d]) + (A 1) b_V[:d],

plus attn_cc's output (itself split by the feature block its values read: centroid data, code, bias). The parts sum to
Delta c up to rounding (computed in float64 from the cached activations). What the *pattern* reads is measured by
patching (``pattern_patching``): attn_cx's pattern recomputed from a key stream holding only some of P's sources.

Figures per part (``path_statistics``), over all entries (task, slot, coordinate) of a batch of tasks:

* ``variance_share``: Cov(part, Delta c) / Var(Delta c); the shares of all parts sum to 1;
* ``own_variance``: Var(part) / Var(Delta c) (parts can cancel, so this may exceed 1);
* ``cosine_lloyd``: <part, u> / (||part|| ||u||) with u Lloyd's update (hard cluster mean - c; an empty cluster
  keeps its centroid).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from interp._checks import InvalidInput, InvalidInputType, check_points_centroids, check_positive_int
from interp.algorithms import lloyd
from interp.model import KMeansTransformer

SOURCES = ("points", "attn_xc", "attn_xx", "ffn_points")  # what the updated point stream P' is the sum of


@dataclass(frozen=True)
class PathDecomposition:
    """The update of one step and its exact parts, each (b, k, d) float64 (module docstring)."""

    update: Tensor  # (b, k, d): Delta c of the step, as the model computed it
    parts: dict[str, Tensor]  # name -> (b, k, d); the parts sum to ``update``
    fine_parts: dict[str, Tensor]  # name[block] -> (b, k, d): each part split by the input feature block it reads
    lloyd_update: Tensor  # (b, k, d): Lloyd's update from the same centroids
    step: int

    @property
    def residual(self) -> float:
        """max |sum of parts - update|: the decomposition's exactness (rounding only)."""
        return float((sum(self.parts.values()) - self.update).abs().max())


@dataclass(frozen=True)
class PathShare:
    """One part's share of the update's variance, its own variance and its cosine with Lloyd's update."""

    name: str
    variance_share: float  # Cov(part, update) / Var(update); shares sum to 1
    own_variance: float  # Var(part) / Var(update)
    cosine_lloyd: float  # cosine of the part with Lloyd's update (NaN for a zero part)


@dataclass(frozen=True)
class PatternPatch:
    """Effect on the update of recomputing attn_cx's pattern from a key stream made of some of P's sources."""

    keys: str  # the sources summed into the key stream, e.g. "points + attn_xc"
    update_r2: float  # 1 - ||patched - update||^2 / ||update - mean||^2: how much of the update survives
    cosine_lloyd: float  # cosine of the patched update with Lloyd's update


# ----- statistics shared by the explanation instruments -------------------------------------------------------------


def centred(values: Tensor) -> Tensor:
    """values minus their mean over every entry (float64)."""
    values = values.double()
    return values - values.mean()


def variance_share(part: Tensor, total: Tensor) -> float:
    """Cov(part, total) / Var(total) over all entries: additive over parts that sum to ``total``."""
    reference = centred(total)
    return float((centred(part) * reference).sum() / (reference * reference).sum())


def own_variance(part: Tensor, total: Tensor) -> float:
    """Var(part) / Var(total) over all entries."""
    reference = centred(total)
    return float((centred(part) ** 2).sum() / (reference * reference).sum())


def r2_score(predicted: Tensor, target: Tensor) -> float:
    """1 - ||target - predicted||^2 / ||target - mean(target)||^2 over all entries (as the surrogates score)."""
    target = target.double()
    residual = ((target - predicted.double()) ** 2).sum()
    return float(1 - residual / (centred(target) ** 2).sum())


def cosine(first: Tensor, second: Tensor) -> float:
    """<a, b> / (||a|| ||b||) of the flattened tensors; NaN when either is zero."""
    first, second = first.double().reshape(-1), second.double().reshape(-1)
    norms = first.norm() * second.norm()
    return float(first @ second / norms) if norms > 0 else float("nan")


def lloyd_update(points: Tensor, centroids: Tensor) -> Tensor:
    """Lloyd's update m_j - c_j (b, k, d), m_j the mean of the points nearest to c_j; an empty cluster keeps c_j."""
    return lloyd(points, centroids, 1, empty="keep").centroids - centroids


def path_statistics(parts: dict[str, Tensor], update: Tensor, lloyd_direction: Tensor) -> list[PathShare]:
    """``PathShare`` of every part (module docstring)."""
    return [PathShare(name, variance_share(part, update), own_variance(part, update), cosine(part, lloyd_direction))
            for name, part in parts.items()]


# ----- the decomposition --------------------------------------------------------------------------------------------


def _check_model(model: object) -> KMeansTransformer:
    if not isinstance(model, KMeansTransformer):
        raise InvalidInputType(f"model must be a KMeansTransformer, got {type(model).__name__}")
    for name in ("attn_cx", "attn_cc"):
        if getattr(model.config, name).output_norm != "none":
            norm = getattr(model.config, name).output_norm
            raise InvalidInput(f"{name} normalises its output (output_norm={norm!r}): its value path is not linear, "
                               "so the update has no exact path decomposition")
    return model


def _blocks(model: KMeansTransformer) -> dict[str, slice]:
    """Feature blocks of the residual stream: data [0, d), scratch / code [d, d + e), norm slot [d + e, D)."""
    config = model.config
    d, e = config.d, config.scratch_width
    blocks = {"data": slice(0, d)}
    if e:
        blocks["scratch"] = slice(d, d + e)
    if config.norm_slot:
        blocks["norm"] = slice(d + e, d + e + 1)
    return blocks


def _hook_names(model: KMeansTransformer, step: int) -> list[str]:
    prefix = f"blocks.{step}."
    names = ["hook_points_resid_pre", "hook_centroids_resid_pre", "attn_xc.hook_out", "attn_xx.hook_out",
             "hook_points_resid_post", "attn_cx.hook_pattern", "attn_cx.hook_out", "attn_cc.hook_pattern",
             "attn_cc.hook_out", "hook_centroids_resid_post"]
    if model.config.ffn:
        names += ["ffn_points.hook_out", "ffn_centroids.hook_out"]
    return [prefix + name for name in names]


def _layer_weights(model: KMeansTransformer, step: int):
    return model.layers[0 if model.config.shared_weights else step]


def _check_inputs(model: KMeansTransformer, points: Tensor, centroids: Tensor, step: int) -> tuple[Tensor, Tensor]:
    points, centroids = check_points_centroids(points, centroids, d=model.config.d)
    check_positive_int(step, "step", minimum=0)
    return points, centroids


def _run_cached(model: KMeansTransformer, points: Tensor, centroids: Tensor, step: int, generator):
    """Run step + 1 steps in eval mode (dropout off, so the cached pattern is the one applied) with the hooks cached."""
    was_training = model.training
    model.eval()
    try:
        out, cache = model.run_with_cache(points, centroids, steps=step + 1, generator=generator,
                                          names_filter=_hook_names(model, step), slot_order="fixed")
    finally:
        model.train(was_training)
    return out, cache


def _value_parts(label: str, pattern: Tensor, sources: dict[str, Tensor], attention, blocks: dict[str, slice],
                 d: int) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """pattern (b, q, r) times each source's values (V z + b_V), first d output features: the parts
    ``label<-source`` and ``label<-bias``, and each source's part split by the input feature block it reads,
    ``label<-source[block]``; all (b, q, d) float64."""
    W_V = attention.W_V.detach().double()[:d]  # (d, D): only the data features of the output are the update
    parts: dict[str, Tensor] = {}
    fine: dict[str, Tensor] = {}
    for source, stream in sources.items():
        mixed = pattern @ stream  # (b, q, D)
        pieces = {block: mixed[..., features] @ W_V[:, features].T for block, features in blocks.items()}  # (b, q, d)
        fine.update({f"{label}<-{source}[{block}]": piece for block, piece in pieces.items()})
        parts[f"{label}<-{source}"] = sum(pieces.values())
    if attention.b_V is not None:
        parts[f"{label}<-bias"] = pattern.sum(-1, keepdim=True) * attention.b_V.detach().double()[:d]  # (b, q, d)
        fine[f"{label}<-bias"] = parts[f"{label}<-bias"]
    return parts, fine


@torch.no_grad()
def decompose_update(model: KMeansTransformer, points: Tensor, centroids: Tensor, step: int = 0,
                     generator: torch.Generator | int | None = None) -> PathDecomposition:
    """Exact parts of the centroid update of step ``step`` (0-based) of ``model`` run from ``centroids`` (b, k, d) on
    ``points`` (b, n, d), in eval mode (module docstring). Lloyd's update starts from the centroids that step reads."""
    model = _check_model(model)
    points, centroids = _check_inputs(model, points, centroids, step)
    out, cache = _run_cached(model, points, centroids, step, generator)
    prefix, d = f"blocks.{step}.", model.config.d
    weights = _layer_weights(model, step)

    def cached(name: str) -> Tensor:
        return cache[prefix + name].double()

    update = (cached("hook_centroids_resid_post") - cached("hook_centroids_resid_pre"))[..., :d]  # (b, k, d)
    sources = {"points": cached("hook_points_resid_pre"), "attn_xc": cached("attn_xc.hook_out"),
               "attn_xx": cached("attn_xx.hook_out")}  # each (b, n, D)
    if model.config.ffn:
        sources["ffn_points"] = cached("ffn_points.hook_out")
    cx_parts, fine = _value_parts("attn_cx", cached("attn_cx.hook_pattern"), sources, weights.attn_cx,
                                  _blocks(model), d)  # pattern (b, k, n)
    cc_parts, cc_fine = _value_parts("attn_cc", cached("attn_cc.hook_pattern"),
                                     {"centroids": cached("hook_centroids_resid_pre")}, weights.attn_cc,
                                     _blocks(model), d)  # pattern (b, k, k)
    parts = {**cx_parts, "attn_cc": sum(cc_parts.values())}
    fine.update(cc_fine)
    if model.config.ffn:
        parts["ffn_centroids"] = cached("ffn_centroids.hook_out")[..., :d]
    read = out.centroid_trajectory[:, step]  # (b, k, d): the centroids this step reads
    return PathDecomposition(update=update, parts=parts, fine_parts=fine,
                             lloyd_update=lloyd_update(points, read).double(), step=step)


@torch.no_grad()
def pattern_patching(model: KMeansTransformer, points: Tensor, centroids: Tensor, step: int = 0,
                     generator: torch.Generator | int | None = None) -> list[PatternPatch]:
    """The update of step ``step`` when attn_cx's pattern is recomputed (and patched in through ``hook_pattern``) from
    a key stream holding only some of the updated point stream's sources: the raw point stream alone, the raw
    stream plus what attn_xc wrote, plus what attn_xx wrote, and all of them (the intact update, a check).
    Values, attn_cc and everything else keep their values."""
    model = _check_model(model)
    points, centroids = _check_inputs(model, points, centroids, step)
    out, cache = _run_cached(model, points, centroids, step, generator)
    prefix, d = f"blocks.{step}.", model.config.d
    lloyd_direction = lloyd_update(points, out.centroid_trajectory[:, step])  # (b, k, d)
    update = (cache[prefix + "hook_centroids_resid_post"] - cache[prefix + "hook_centroids_resid_pre"])[..., :d]
    sources = {"points": cache[prefix + "hook_points_resid_pre"], "attn_xc": cache[prefix + "attn_xc.hook_out"],
               "attn_xx": cache[prefix + "attn_xx.hook_out"]}
    if model.config.ffn:
        sources["ffn_points"] = cache[prefix + "ffn_points.hook_out"]
    variants = [("points",), ("points", "attn_xc"), ("points", "attn_xx"), tuple(sources)]
    queries = cache[prefix + "hook_centroids_resid_pre"]  # (b, k, D)
    attention = model.blocks[step].attn_cx
    weights = _layer_weights(model, step).attn_cx
    rows = []
    was_training = model.training
    model.eval()
    try:
        for variant in variants:
            keys = sum(sources[name] for name in variant)  # (b, n, D)
            _, pattern = attention(queries, keys, weights, need_pattern=True)  # (b, k, n)

            def patch(activation: Tensor, hook, pattern=pattern) -> Tensor:
                return pattern

            out = model.run_with_hooks(points, centroids, steps=step + 1, generator=generator,
                                       fwd_hooks=[(prefix + "attn_cx.hook_pattern", patch)], slot_order="fixed")
            patched = out.centroid_trajectory[:, step + 1] - out.centroid_trajectory[:, step]  # (b, k, d)
            rows.append(PatternPatch(" + ".join(variant), r2_score(patched, update), cosine(patched, lloyd_direction)))
    finally:
        model.train(was_training)
    return rows
