"""One layer of the k-means transformer (paper 2, Eq. 4).

    X' = X + A(X, C; 1: attn_xc) + A(X, X; 2: attn_xx)          [+ FFN(X') when enabled]
    C' = C + A(C, X'; 3: attn_cx) + A(C, C; 4: attn_cc)        [+ FFN(C') when enabled]

Both terms of a line read the same input; the centroid line reads the *updated* points.

``Block.forward`` is that step as written, each term through its hook points: what a hooked step runs. An unhooked
step may run a kernel instead (``interp.model.kernels.dispatch.step_path``: the training step, the labelled stream,
or each part through its own kernel, ``kernels.per_part``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from interp.model.attention import Attention, AttentionWeights
from interp.model.config import ModelConfig
from interp.model.ffn import FFN, FFNWeights
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
        self._hook_points: tuple[HookPoint, ...] | None = None  # ``hook_points()``, listed on first use

    def forward(self, points: Tensor, centroids: Tensor, weights: LayerWeights, need_assignment_pattern: bool = False,
                generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
        """X' = X + A_xc(X, C) + A_xx(X, X) [+ FFN(X')], then C' = C + A_cx(C, X') + A_cc(C, C) [+ FFN(C')]: streams
        (b, n, D), (b, k, D) -> the updated streams and, if asked, attn_xc's pattern (b, n, k) (else None).
        ``generator`` drives the random draws (Gumbel noise, dropout in training mode; None: the global RNG), in
        the order attn_xc, attn_xx, attn_cx, attn_cc."""
        points = self.hook_points_resid_pre(points)  # (b, n, D)
        centroids = self.hook_centroids_resid_pre(centroids)  # (b, k, D)
        attn_xc_out, pattern = self.attn_xc(points, centroids, weights.attn_xc, need_assignment_pattern, generator)
        attn_xx_out, _ = self.attn_xx(points, points, weights.attn_xx, generator=generator)  # (b, n, D)
        points_mid = torch.add(points, attn_xc_out).add_(attn_xx_out)  # (b, n, D): (X + A_xc) + A_xx, one buffer
        if self.ffn:
            points_mid = points_mid + self.ffn_points(points_mid, weights.ffn_points)
        points_post = self.hook_points_resid_post(points_mid)  # (b, n, D)
        attn_cx_out, _ = self.attn_cx(centroids, points_post, weights.attn_cx, generator=generator)  # (b, k, D)
        attn_cc_out, _ = self.attn_cc(centroids, centroids, weights.attn_cc, generator=generator)  # (b, k, D)
        centroids_mid = torch.add(centroids, attn_cx_out).add_(attn_cc_out)  # (b, k, D): (C + A_cx) + A_cc
        if self.ffn:
            centroids_mid = centroids_mid + self.ffn_centroids(centroids_mid, weights.ffn_centroids)
        centroids_post = self.hook_centroids_resid_post(centroids_mid)  # (b, k, D)
        return points_post, centroids_post, (pattern if need_assignment_pattern else None)

    def bind_weights(self, layers: nn.ModuleList, index: int) -> None:
        """Bind this block's attentions to ``layers[index]``, the weights its step uses (``Attention.weights``,
        ``QK``, ``OV``); a plain reference, not a submodule, so the parameters stay registered once, in the model."""
        for name in ATTENTIONS:
            getattr(self, name).__dict__["_weights_source"] = (layers, index, name)

    def hook_points(self) -> tuple[HookPoint, ...]:
        """This block's hook points (its modules that are ``HookPoint``s), listed once: walking the module tree
        at every step of every forward costs more than the step's small ops."""
        if getattr(self, "_hook_points", None) is None:  # (a Block pickled before this attribute existed)
            self._hook_points = tuple(module for module in self.modules() if isinstance(module, HookPoint))
        return self._hook_points
