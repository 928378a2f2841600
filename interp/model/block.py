"""One layer of the k-means transformer (paper 2, Eq. 4).

    X' = X + A(X, C; 1: attn_xc) + A(X, X; 2: attn_xx)          [+ FFN(X') when enabled]
    C' = C + A(C, X'; 3: attn_cx) + A(C, C; 4: attn_cc)        [+ FFN(C') when enabled]

Both terms of a line read the same input; the centroid line reads the *updated* points.

Labelled step (exact inference, ``_labelled_step``). A points stream held as ``LabelledTokens`` (z_i = [x_i; 0] +
table[labels_i]) is never formed as (b, n, D) when nothing needs it: attn_xc's hardmax is a new table (the values
V c_j + b_V and AHAT's means over tied arg-max sets) and each point's row of it; attn_xx (identity) erases the old
table row exactly; attn_cx is a segment sum over the labels (``Attention.mean_over_labels``). Taken outside
autograd, with no hook anywhere in the block, no FFN and no assignment pattern asked for, and only when the erasure
is exact in floating point (``_erases_exactly``); otherwise the stream is materialised (the same numbers) and the
literal step runs.

With the weights of S models stacked (``StackedLayerWeights``) the streams carry a leading model axis and the same
block runs all S (``interp.model.attention``, "Seed axis").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from interp._checks import InvalidInput
from interp.model.attention import Attention, AttentionWeights, Generators, StackedAttentionWeights
from interp.model.config import ModelConfig
from interp.model.embedding import LabelledTokens
from interp.model.ffn import FFN, FFNWeights, StackedFFNWeights
from interp.model.tied_weights import SlotTiedAttentionWeights

ATTENTIONS = ("attn_xc", "attn_xx", "attn_cx", "attn_cc")


class LayerWeights(nn.Module):
    """The parameters of one layer: four attentions (slot-tied with ``config.slot_equivariant``) and, optionally,
    two FFNs."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        width = config.d_model
        for name in ATTENTIONS:
            bias = getattr(config, name).bias
            weights = (SlotTiedAttentionWeights(config.d, config.scratch_width, bias) if config.slot_equivariant
                       else AttentionWeights(width, bias))
            setattr(self, name, weights)
        if config.ffn:
            self.ffn_points = FFNWeights(width, config.hidden_width)
            self.ffn_centroids = FFNWeights(width, config.hidden_width)


@dataclass(frozen=True)
class StackedLayerWeights:
    """One layer's weights of S models on a leading model axis: four attentions and, optionally, two FFNs."""

    attn_xc: StackedAttentionWeights
    attn_xx: StackedAttentionWeights
    attn_cx: StackedAttentionWeights
    attn_cc: StackedAttentionWeights
    ffn_points: StackedFFNWeights | None = None
    ffn_centroids: StackedFFNWeights | None = None

    @classmethod
    def stack(cls, layers: Sequence[LayerWeights]) -> "StackedLayerWeights":
        """The layers' weights stacked slot by slot (differentiable: each model's parameters get their own gradient)."""
        if len(layers) == 0:
            raise InvalidInput("stacking needs at least one layer")
        with_ffn = {hasattr(layer, "ffn_points") for layer in layers}
        if len(with_ffn) != 1:
            raise InvalidInput("stacked layers must all have FFNs or all have none")
        attentions = {name: StackedAttentionWeights.stack([getattr(layer, name) for layer in layers])
                      for name in ATTENTIONS}
        if not with_ffn.pop():
            return cls(**attentions)
        return cls(**attentions, ffn_points=StackedFFNWeights.stack([layer.ffn_points for layer in layers]),
                   ffn_centroids=StackedFFNWeights.stack([layer.ffn_centroids for layer in layers]))


def _owns(out: Tensor, attention: Attention, stream: Tensor) -> bool:
    """Whether the residual sum may be accumulated in place into an attention's output: outside autograd, with no
    hook on the attention's output (a cache would keep that tensor), and the output a buffer of its own."""
    return (not torch.is_grad_enabled() and not attention.hook_out.fwd_hooks and out.is_contiguous()
            and out.untyped_storage().data_ptr() != stream.untyped_storage().data_ptr())


PAIR_CHECK_LIMIT = 1 << 24  # entries of the (b, k, t, D) sums that check an erasure pair by pair


def _integer_bound(*tensors: Tensor) -> float | None:
    """The largest magnitude among the entries of ``tensors`` if every entry is an integer, else None."""
    present = [t for t in tensors if t is not None and t.numel()]
    if not all(bool((t == t.round()).all()) for t in present):
        return None
    return max((float(t.abs().amax()) for t in present), default=0.0)


def _signed_selector(weight: Tensor, bias: Tensor | None) -> bool:
    """Whether z -> W z + b copies features with a sign: entries of W in {-1, 0, 1}, at most one nonzero per row,
    no bias. Every output is then exactly +-z_c or 0, whatever the numbers and the order of the additions."""
    return (bool((weight.abs() * (weight.abs() - 1) == 0).all()) and bool(((weight != 0).sum(dim=1) <= 1).all())
            and (bias is None or not bool(bias.any())))


def _erases_exactly(new_table: Tensor, old: LabelledTokens, erased: Tensor, weights: AttentionWeights) -> bool:
    """Whether the literal update z_i + A_xc(z_i) + A_xx(z_i) = (T[a_i] + z_i) + E[l_i] equals [x_i; 0] + T[a_i]
    exactly, for the new table T (b, k', D), the old stream z_i = [x_i; 0] + U[l_i] and attn_xx's output per old label
    E = U V^T + b_V (b, t, D). Needs T and E zero on the base columns B and E = -U, with E exact per point (V a
    signed selector, or U, V, b_V integers with D |U| |V| + |b_V| <= 1 / eps); then either T and U are integers with
    |T| + |U| <= 1 / eps (every sum exact), or fl(fl(T_a + U_l) + E_l) = T_a is checked for every pair (a, l)."""
    base = old.base_columns
    if bool(new_table[..., base].any()) or bool(erased[..., base].any()) or not torch.equal(erased, -old.table):
        return False
    exact = 1.0 / torch.finfo(new_table.dtype).eps
    new_bound, old_bound = _integer_bound(new_table), _integer_bound(old.table)
    if not _signed_selector(weights.W_V, weights.b_V):
        value_bound = _integer_bound(weights.W_V, weights.b_V)
        if old_bound is None or value_bound is None:
            return False
        if new_table.shape[-1] * old_bound * value_bound + value_bound > exact:
            return False
    if new_bound is not None and old_bound is not None and new_bound + old_bound <= exact:
        return True
    batch, rows, width = new_table.shape
    if batch * rows * old.table.shape[1] * width > PAIR_CHECK_LIMIT:
        return False
    pairs = (new_table[:, :, None, :] + old.table[:, None, :, :]) + erased[:, None, :, :]  # (b, k', t, D)
    return bool((pairs == new_table[:, :, None, :]).all())


class Block(nn.Module):
    """Hook points and computation of one step; weights are passed in (so shared layers keep per-step hooks)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        width = config.d_model
        self.hook_slot_order = HookPoint()  # (b, k) int64: slot j holds centroid [:, j] (slot_order="shuffle" only)
        self.hook_points_resid_pre = HookPoint()  # (b, n, D)
        self.hook_centroids_resid_pre = HookPoint()  # (b, k, D)
        self.attn_xc = Attention(config.attn_xc, width)  # points -> centroids: (b, n, k) pattern
        self.attn_xx = Attention(config.attn_xx, width)  # points -> points: (b, n, n) pattern
        self.attn_cx = Attention(config.attn_cx, width)  # centroids -> updated points: (b, k, n) pattern
        self.attn_cc = Attention(config.attn_cc, width)  # centroids -> centroids: (b, k, k) pattern
        self.ffn = config.ffn
        if config.ffn:
            self.ffn_points = FFN()
            self.ffn_centroids = FFN()
        self.hook_points_resid_post = HookPoint()  # (b, n, D)
        self.hook_centroids_resid_post = HookPoint()  # (b, k, D); [..., :d] = centroids after this step

    def forward(
        self, points: Tensor, centroids: Tensor, weights: LayerWeights | StackedLayerWeights,
        need_assignment_pattern: bool = False, generator: Generators = None,
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """Streams (b, n, D), (b, k, D) -> updated streams and, if asked, attn_xc's pattern (b, n, k).

        ``generator`` drives the random draws (Gumbel noise, dropout in training mode; None: the global RNG). With
        ``StackedLayerWeights`` of S models every tensor gains a leading model axis, (S, b, ...), and ``generator``
        may be a sequence of S generators, one per model (``Attention.forward``)."""
        if isinstance(points, LabelledTokens):
            if not need_assignment_pattern and self._labels_ready(points, centroids, weights):
                step = self._labelled_step(points, centroids, weights, generator)
                if step is not None:
                    return (*step, None)
            points = points.materialise()  # (b, n, D): the literal stream, the same numbers
        points = self.hook_points_resid_pre(points)  # (b, n, D)
        centroids = self.hook_centroids_resid_pre(centroids)  # (b, k, D)
        attn_xc_out, assignment_pattern = self.attn_xc(points, centroids, weights.attn_xc, need_assignment_pattern,
                                                       generator)
        attn_xx_out, _ = self.attn_xx(points, points, weights.attn_xx, generator=generator)
        if _owns(attn_xc_out, self.attn_xc, points):  # add into attn_xc's fresh output: no new (b, n, D) buffer
            points_mid = attn_xc_out.add_(points).add_(attn_xx_out)  # (b, n, D), the same numbers as below
        else:
            points_mid = points + attn_xc_out + attn_xx_out  # (b, n, D)
        if self.ffn:
            points_mid = points_mid + self.ffn_points(points_mid, weights.ffn_points)
        points_post = self.hook_points_resid_post(points_mid)  # (b, n, D)
        attn_cx_out, _ = self.attn_cx(centroids, points_post, weights.attn_cx, generator=generator)
        attn_cc_out, _ = self.attn_cc(centroids, centroids, weights.attn_cc, generator=generator)
        centroids_mid = centroids + attn_cx_out + attn_cc_out  # (b, k, D)
        if self.ffn:
            centroids_mid = centroids_mid + self.ffn_centroids(centroids_mid, weights.ffn_centroids)
        centroids_post = self.hook_centroids_resid_post(centroids_mid)  # (b, k, D)
        return points_post, centroids_post, assignment_pattern

    def _hooked(self) -> bool:
        """Whether any hook point of this block holds a forward hook."""
        return any(module.fwd_hooks for module in self.modules() if isinstance(module, HookPoint))

    def _labels_ready(self, points: LabelledTokens, centroids: Tensor, weights) -> bool:
        """The labelled step's dynamic conditions: single-model weights, nothing needs gradients, no hook in the
        block, and each attention ready (``Attention.labels_ready``)."""
        if not isinstance(weights, LayerWeights) or self.ffn or self._hooked():
            return False
        if torch.is_grad_enabled() and (points.base.requires_grad or centroids.requires_grad
                                        or any(p.requires_grad for p in weights.parameters())):
            return False
        return (self.attn_xc.labels_ready(weights.attn_xc) and self.attn_xx.config.identity
                and self.attn_cx.labels_ready(weights.attn_cx))

    def _labelled_step(self, points: LabelledTokens, centroids: Tensor, weights: LayerWeights,
                       generator: Generators = None) -> tuple[LabelledTokens, Tensor] | None:
        """One step on a labelled points stream (module docstring): the new stream [x_i; 0] + T[a_i], with T
        (b, k + u, D) attn_xc's values V c_j + b_V and tied-set means and a_i each point's row (``Attention.assign``),
        and the centroid stream (b, k, D). None, having changed nothing, when the erasure is not exact or attn_cx
        reads the base."""
        new_table, winners = self.attn_xc.assign(points, centroids, weights.attn_xc)  # (b, k + u, D), (b, n)
        erased = self.attn_xx.identity_table(points, weights.attn_xx)  # (b, t, D): attn_xx's output per old label
        if erased is None or not _erases_exactly(new_table, points, erased, weights.attn_xx):
            return None
        points_post = LabelledTokens(points.base, points.base_columns, new_table, winners)  # (b, n, D) factored
        attn_cx_out = self.attn_cx.mean_over_labels(centroids, points_post, weights.attn_cx)  # (b, k, D)
        if attn_cx_out is None:
            return None
        attn_cc_out, _ = self.attn_cc(centroids, centroids, weights.attn_cc, generator=generator)  # (b, k, D)
        return points_post, centroids + attn_cx_out + attn_cc_out
