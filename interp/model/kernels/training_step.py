"""One block step of the learned model with a hand-derived backward pass (paper 2, Eq. 4): the training kernel.

    X1 = X0 + A(X0, C0; attn_xc) + A(X0, X0; attn_xx),     C1 = C0 + A(C0, X1; attn_cx) + A(C0, C0; attn_cc),

every A a euclidean softmax attention, s_ij = -||W_Q z_i + b_Q - W_K z'_j - b_K||^2 / sqrt(D), pattern
P = softmax_j(gamma s), attention dropout M (Bernoulli(1 - p) / (1 - p)) and out_i = sum_j M_ij P_ij (W_V z'_j + b_V).
Softmax ignores the per-query -||q_i||^2, so the logits are l_ij = alpha (2 q_i.k_j - ||k_j||^2), alpha = gamma /
sqrt(D).

The x~ factorisation. At a re-embedded step (and at step 0) the points stream is X0 = [x, 0_e], so every projection
of a point is affine in x: W z_i + b = W~ x~_i with x~ = [x, 1] (b, n, d + 1) and W~ = [W[:, :d], b] (D, d + 1).
The (n x n) self-attention's logits are then l = 2 alpha x~ G x~^T + kappa (G = W~_Q^T W~_K, (d + 1) x (d + 1);
kappa_j = -alpha ||W~_K x~_j||^2 a key-only term), its values x~ W~_V^T, so each (b, n, n) product contracts over
d + 1 features instead of D: forward = scores, softmax, P~ x~; backward = dP (the output gradient times x~^T, with
the softmax backward's row term subtracted in the same product), dS = P . (dP - row), x~^T dS. The last gives both
dG (its product with x~) and, from x~'s column of ones, the gradient of kappa; dW~_V needs no (n x n) product
(the forward's P~ x~ times the output gradient). The three small attentions (n x k, k x n, k x k) use the same
formulas on explicit q, k, v.

Dropout. Each attention's draw is made by ``Attention.draw_dropout`` (the rule the reference and fused paths use),
in the block's order attn_xc, attn_xx, attn_cx, attn_cc, from the forward's generator: the same numbers as the
reference step. Sampled dropped pairs (few) are zeroed in P, their weights kept for the softmax backward, and the
output divided by 1 - p; a dense keep mask multiplies P as the reference does.

The backward also takes the gradient of the points stream X1 (a model that does not re-embed reads it at its next
step); x gets none (``dispatch.training_step`` requires points that need no grad). Not twice differentiable.

``block_step`` is the entry the step loop calls where ``dispatch.training_step`` allows it; its gradients (every weight,
the centroid stream) and outputs equal the reference step's up to the order of float additions (tested in float64:
tests/test_training_step_kernel.py).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from interp.model.kernels import dispatch

ATTENTIONS = ("attn_xc", "attn_xx", "attn_cx", "attn_cc")
WEIGHT_NAMES = ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V")
# the kernel's layouts: attn_xc keys-major (b, k, n) (its softmax reduces a strided axis, which vectorises), the
# others queries-major (b, q, r)
KEYS_MAJOR = {"attn_xc": True, "attn_xx": False, "attn_cx": False, "attn_cc": False}


class Dropped:
    """An attention's dropout in the kernel's layout. Sparse (the sampled dropped pairs, few): ``flat`` (N,) flat
    positions in the (b, ., .) pattern, ``rows`` (N,) the index of each one's query in the (b, q) row terms, ``keep``
    = 1 - p. Dense (a keep mask was drawn): ``mask`` in the kernel's layout, 0 or 1 / (1 - p)."""

    def __init__(self, flat: Tensor | None = None, rows: Tensor | None = None, keep: float = 1.0,
                 mask: Tensor | None = None):
        self.flat, self.rows, self.keep, self.mask = flat, rows, keep, mask

    @classmethod
    def of(cls, draw: Tensor | tuple[Tensor, ...] | None, n_queries: int, n_keys: int, draw_keys_major: bool,
           keys_major: bool, p: float) -> Dropped | None:
        """From a draw of ``Attention.draw_dropout`` (None: nothing drawn): the dropped pairs (batch, query, key) of
        ``sample_dropped_pairs``, or a dense keep mask laid out (b, r, q) when ``draw_keys_major``."""
        if draw is None:
            return None
        if not isinstance(draw, tuple):
            return cls(mask=draw.transpose(1, 2) if draw_keys_major != keys_major else draw)
        batch, query, key = draw  # (N,) each
        flat = (batch * n_keys + key) * n_queries + query if keys_major else (batch * n_queries + query) * n_keys + key
        return cls(flat, batch * n_queries + query, 1.0 - p)


def _drop(pattern: Tensor, dropped: Dropped | None) -> tuple[Tensor, Tensor | None, float]:
    """Dropout on a pattern P: (kept, aux, scale) with kept = M . P (in place for sparse drops), aux the dropped
    weights P_ij (N,) (sparse) or P (dense), and the output's scale (1 / (1 - p) for sparse drops, else 1)."""
    if dropped is None:
        return pattern, None, 1.0
    if dropped.mask is not None:
        return pattern * dropped.mask, pattern, 1.0
    flat = pattern.view(-1)
    weight = flat.index_select(0, dropped.flat)  # (N,)
    flat.index_fill_(0, dropped.flat, 0.0)
    return pattern, weight, 1.0 / dropped.keep


def _dense(dropped: Dropped | None) -> bool:
    return dropped is not None and dropped.mask is not None


def _grad_logits(left: Tensor, right: Tensor, row: Tensor, row_axis: int, kept: Tensor, aux: Tensor | None,
                 dropped: Dropped | None, folded: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """dL/dl for Y = (M . P) v, P = softmax(l): dl = P . (M . dP~ - row), with left @ right = dP~ = h v^T
    (h = dL/dY) and row_i = h_i.Y_i (laid along ``row_axis``). Without a dense mask M . P = kept and
    dl = kept . (dP~ - row), the dropped entries -P_ij row_i put back from their weights; ``folded``: two factors
    whose product is dP~ - row already."""
    if _dense(dropped):
        return torch.bmm(left, right).mul_(dropped.mask).sub_(row.unsqueeze(row_axis)).mul_(aux)
    grad = torch.bmm(*folded) if folded is not None else torch.baddbmm(row.unsqueeze(row_axis).neg(), left, right)
    grad.mul_(kept)
    if dropped is not None:
        values = row.reshape(-1).index_select(0, dropped.rows).mul_(aux).neg_()  # (N,)
        grad.view(-1).index_copy_(0, dropped.flat, values)
    return grad


class BlockStep(torch.autograd.Function):
    """One block step from x (b, n, d) (points stream [x, 0]) and the centroid stream C0 (b, k, D) with the 24
    effective weights (W_Q, W_K, W_V, b_Q, b_K, b_V of attn_xc, attn_xx, attn_cx, attn_cc; a bias may be None):
    returns C1 (b, k, D), X1 feature-major (D, b, n) (both differentiable) and, if asked, attn_xc's pattern before
    dropout laid out (b, k, n) (not differentiable; else an empty tensor). ``alphas``: gamma / sqrt(D) per
    attention; ``dropped``: a ``Dropped`` or None per attention. No gradient for x.

    Layouts: the points-side tensors are feature-major, (features, b n), so that each projection is one product
    with a wide output (torch's CPU matrix kernels are several times slower on a (., 10) output than on a (10, .)
    one), and are read per task as (b, features, n) views."""

    @staticmethod
    def forward(ctx, x, centroids, alphas, dropped, need_pattern, *weights):
        """Per attention: logits, P = softmax, dropout, Y = (M . P) v; X1 = [x, 0] + Y_xc + Y_xx, C1 = C0 + Y_cx +
        Y_cc (module docstring)."""
        b, n, d = x.shape
        k, width = centroids.shape[1:]
        e1, bn = d + 1, b * n
        zeros = centroids.new_zeros(width)  # (D,): a missing bias
        w = [t if t is not None else zeros for t in weights]
        a_xc, a_xx, a_cx, a_cc = alphas
        drop_xc, drop_xx, drop_cx, drop_cc = dropped
        # the six projections of the centroid stream in one product
        w_c = torch.stack([w[i] for i in _CENTROID_SIDE]).view(6 * width, width)  # (6D, D)
        b_c = torch.stack([w[i + 3] for i in _CENTROID_SIDE]).view(6 * width)  # (6D,)
        flat_centroids = centroids.reshape(b * k, width)  # (b k, D)
        q_cc, k_cc, v_cc, q_cx, k_xc, v_xc = torch.addmm(b_c, flat_centroids, w_c.T).view(b, k, 6, width).unbind(2)
        # the point-side maps x~ -> W [x, 0] + b: W~ = [W[:, :d], b] of attn_xc's Q and attn_xx's Q, K, V
        w_p = torch.cat([torch.stack([w[i] for i in _POINT_SIDE])[..., :d],
                         torch.stack([w[i + 3] for i in _POINT_SIDE])[..., None]], dim=-1)  # (4, D, d + 1)
        qa_xc, qa, ka, va = w_p.unbind(0)  # (D, d + 1) each
        xt = torch.cat([x.permute(2, 0, 1), x.new_ones(1, b, n)]).view(e1, bn)  # (d + 1, b n): x~^T
        xt_b = xt.view(e1, b, n).transpose(0, 1)  # (b, d + 1, n)
        # attn_xc, keys-major: l^T_ji = f_j.x~_i, f_j = 2 alpha W~_Q^T k_j - alpha ||k_j||^2 e_d (x~_i's 1)
        folded = (k_xc @ qa_xc).mul_(2 * a_xc)  # (b, k, d + 1)
        folded[..., d].sub_((k_xc * k_xc).sum(-1), alpha=a_xc)
        p_xc = torch.softmax(torch.bmm(folded, xt_b), dim=1)  # (b, k, n)
        pattern = p_xc.clone() if need_pattern else centroids.new_empty(0)  # P before dropout
        kept_xc, aux_xc, s_xc = _drop(p_xc, drop_xc)
        y_xc = torch.bmm(v_xc.mT, kept_xc)  # (b, D, n): Y^T = v^T (M . P)^T
        # attn_xx, factored: l_ij = [2 alpha G^T x~_i, 1].[x~_j, kappa_j], G = W~_Q^T W~_K,
        # kappa_j = -alpha x~_j^T H x~_j, H = W~_K^T W~_K
        pair = ka.T @ torch.cat([qa, ka], dim=1)  # (d + 1, 2(d + 1)): G^T, H
        unit = xt.new_zeros(1, e1)
        unit[0, d] = 1.0
        forms = torch.cat([pair[:, :e1] * (2 * a_xx), unit, pair[:, e1:]])  # (2(d + 1) + 1, d + 1)
        projected = forms @ xt  # (2(d + 1) + 1, b n)
        kappa = (projected[e1 + 1:] * xt).sum(0).mul_(-a_xx)  # (b n,)
        right = torch.cat([xt, kappa[None]]).view(e1 + 1, b, n).transpose(0, 1)  # (b, d + 2, n)
        left = projected[:e1 + 1].view(e1 + 1, b, n).permute(1, 2, 0)  # (b, n, d + 2)
        p_xx = torch.softmax(torch.bmm(left, right), dim=-1)  # (b, n, n)
        kept_xx, aux_xx, s_xx = _drop(p_xx, drop_xx)
        y_xx = torch.bmm(xt_b, kept_xx.mT).transpose(0, 1).reshape(e1, bn)  # (d + 1, b n): (M . P x~)^T
        points = torch.mm(va * s_xx, y_xx)  # (D, b n): X1 feature-major
        points_b = points.view(width, b, n)
        points_b.add_(y_xc.transpose(0, 1), alpha=s_xc)
        points_b[:d].add_(x.permute(2, 0, 1))  # X1 = [x, 0] + out_xc + out_xx
        # attn_cx: keys and values of the updated points in one product
        w_kv = torch.cat([w[i] for i in _CX_KEYS_VALUES])  # (2D, D)
        b_kv = torch.cat([w[i + 3] for i in _CX_KEYS_VALUES])  # (2D,)
        kv = torch.addmm(b_kv[:, None], w_kv, points).view(2 * width, b, n)  # (2D, b, n)
        k_cx, v_cx = kv[:width].transpose(0, 1), kv[width:].transpose(0, 1)  # (b, D, n) each
        key_term = (kv[:width] * kv[:width]).sum(0).mul_(-a_cx)  # (b, n)
        p_cx = torch.softmax(torch.baddbmm(key_term[:, None, :], q_cx, k_cx, alpha=2 * a_cx), dim=-1)  # (b, k, n)
        kept_cx, aux_cx, s_cx = _drop(p_cx, drop_cx)
        y_cx = torch.bmm(kept_cx, v_cx.mT)  # (b, k, D)
        # attn_cc
        key_term = (k_cc * k_cc).sum(-1).mul_(-a_cc)  # (b, k)
        p_cc = torch.softmax(torch.baddbmm(key_term[:, None, :], q_cc, k_cc.mT, alpha=2 * a_cc), dim=-1)  # (b, k, k)
        kept_cc, aux_cc, s_cc = _drop(p_cc, drop_cc)
        y_cc = torch.bmm(kept_cc, v_cc)  # (b, k, D)
        updated = torch.add(centroids, y_cx, alpha=s_cx).add_(y_cc, alpha=s_cc)  # C1 (b, k, D)
        ctx.mark_non_differentiable(pattern)
        ctx.save_for_backward(x, centroids)
        ctx.state = (w_c, w_p, w_kv, flat_centroids, xt, points, q_cc, k_cc, v_cc, q_cx, k_xc, v_xc, k_cx, v_cx,
                     kept_xc, kept_xx, kept_cx, kept_cc, aux_xc, aux_xx, aux_cx, aux_cc, y_xc, y_xx, y_cx, y_cc)
        ctx.scales, ctx.alphas, ctx.dropped = (s_xc, s_xx, s_cx, s_cc), alphas, dropped
        return updated, points_b, pattern

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_updated, grad_points, _grad_pattern):
        """Per attention, from h = dL/dY: dv = (M . P)^T h, dl = P . (M . h v^T - row) with row_i = h_i.Y_i, then
        dq = 2 alpha dl k, dk = 2 alpha (dl^T q - colsum(dl) k); attn_cc and attn_cx first (from dC1), then attn_xc
        and attn_xx from dX1 (+ what attn_cx's keys and values send back), and the weights' gradients from the
        projections' inputs."""
        x, centroids = ctx.saved_tensors
        b, n, d = x.shape
        k, width = centroids.shape[1:]
        e1, bn = d + 1, b * n
        (w_c, w_p, w_kv, flat_centroids, xt, points, q_cc, k_cc, v_cc, q_cx, k_xc, v_xc, k_cx, v_cx,
         kept_xc, kept_xx, kept_cx, kept_cc, aux_xc, aux_xx, aux_cx, aux_cc, y_xc, y_xx, y_cx, y_cc) = ctx.state
        a_xc, a_xx, a_cx, a_cc = ctx.alphas
        s_xc, s_xx, s_cx, s_cc = ctx.scales
        drop_xc, drop_xx, drop_cx, drop_cc = ctx.dropped
        qa_xc, qa, ka, va = w_p.unbind(0)
        xt_b = xt.view(e1, b, n).transpose(0, 1)  # (b, d + 1, n)
        if grad_updated is None:
            grad_updated = torch.zeros_like(centroids)
        # attn_cc (queries-major (b, k, k)): h = dL/dY, row_i = h_i.Y_i
        h = grad_updated * s_cc  # (b, k, D)
        dv_cc = torch.bmm(kept_cc.mT, h)  # (b, k, D)
        row = (h * y_cc).sum(-1)  # (b, k)
        dl = _grad_logits(h, v_cc.mT, row, -1, kept_cc, aux_cc, drop_cc)  # (b, k, k)
        dq_cc = torch.bmm(dl, k_cc).mul_(2 * a_cc)  # (b, k, D)
        column = dl.sum(1).mul_(-2 * a_cc)  # (b, k)
        dk_cc = torch.baddbmm(k_cc * column[..., None], dl.mT, q_cc, alpha=2 * a_cc)  # (b, k, D)
        # attn_cx (queries-major (b, k, n); keys and values (b, D, n))
        h = grad_updated * s_cx  # (b, k, D)
        dv_cx = torch.bmm(h.mT, kept_cx)  # (b, D, n)
        row = (h * y_cx).sum(-1)  # (b, k)
        dl = _grad_logits(h, v_cx, row, -1, kept_cx, aux_cx, drop_cx)  # (b, k, n)
        dq_cx = torch.bmm(dl, k_cx.mT).mul_(2 * a_cx)  # (b, k, D)
        column = dl.sum(1).mul_(-2 * a_cx)  # (b, n)
        dk_cx = torch.baddbmm(k_cx * column[:, None, :], q_cx.mT, dl, alpha=2 * a_cx)  # (b, D, n)
        dkv = torch.cat([dk_cx, dv_cx], dim=1).transpose(0, 1).reshape(2 * width, bn)  # (2D, b n)
        grad_kv = (dkv @ points.T, dkv.sum(1))  # (2D, D), (2D,)
        dpoints = w_kv.T @ dkv  # (D, b n): dL/dX1 feature-major
        if grad_points is not None:
            dpoints += grad_points.reshape(width, bn)
        # attn_xc (keys-major (b, k, n); output (b, D, n))
        h = dpoints.view(width, b, n).transpose(0, 1) * s_xc  # (b, D, n)
        dv_xc = torch.bmm(kept_xc, h.mT)  # (b, k, D)
        row = (h * y_xc).sum(1)  # (b, n)
        dl = _grad_logits(v_xc, h, row, 1, kept_xc, aux_xc, drop_xc)  # (b, k, n)
        d_folded = torch.bmm(dl, xt_b.mT).mul_(2 * a_xc)  # (b, k, d + 1)
        column = dl.sum(2).mul_(-2 * a_xc)  # (b, k): dkappa times -2 alpha
        dk_xc = torch.matmul(d_folded, qa_xc.T).add_(k_xc * column[..., None])  # (b, k, D)
        grad_qa_xc = k_xc.reshape(-1, width).T @ d_folded.view(-1, e1)  # (D, d + 1)
        # attn_xx, factored
        grad_va = (dpoints @ y_xx.T).mul_(s_xx)  # (D, d + 1)
        h = (va.T * s_xx) @ dpoints  # (d + 1, b n): dL/d(M . P x~)^T
        row = (h * y_xx).sum(0)  # (b n,)
        h_b = h.view(e1, b, n).transpose(0, 1).mT  # (b, n, d + 1)
        folded = None
        if not _dense(drop_xx):  # fold -row into x~'s feature of ones: (h_i - row_i e_d).x~_j = h_i.x~_j - row_i
            h[d].sub_(row)
            folded = (h_b, xt_b)
        dl = _grad_logits(h_b, xt_b, row.view(b, n), -1, kept_xx, aux_xx, drop_xx, folded)  # (b, n, n)
        gathered = torch.bmm(xt_b, dl).transpose(0, 1).reshape(e1, bn)  # (d + 1, b n): (x~^T dl), row d: dkappa
        factors = torch.cat([gathered * (2 * a_xx), xt * gathered[d].mul(-a_xx)])  # (2(d + 1), b n)
        grad_forms = factors @ xt.T  # (2(d + 1), d + 1): dG, dH
        grad_gram, grad_square = grad_forms[:e1], grad_forms[e1:]
        grad_qa = ka @ grad_gram.T  # (D, d + 1)
        grad_ka = qa @ grad_gram + ka @ (grad_square + grad_square.T)  # (D, d + 1)
        # the centroid stream and the six centroid-side projections
        dproj = torch.stack([dq_cc, dk_cc, dv_cc, dq_cx, dk_xc, dv_xc], dim=2).view(b * k, 6 * width)  # (bk, 6D)
        grad_centroids = None
        if ctx.needs_input_grad[1]:
            grad_centroids = torch.addmm(grad_updated.reshape(-1, width), dproj, w_c).view(b, k, width)  # (b, k, D)
        grad_c = (dproj.T @ flat_centroids, dproj.sum(0))  # (6D, D), (6D,)
        grad_p = torch.stack([grad_qa_xc, grad_qa, grad_ka, grad_va])  # (4, D, d + 1): W's columns past d read 0s
        grad_p = (torch.nn.functional.pad(grad_p[..., :d], (0, width - d)), grad_p[..., d].contiguous())
        grads: list[Tensor | None] = [None] * 24
        sides = ((_CENTROID_SIDE, grad_c), (_CX_KEYS_VALUES, grad_kv), (_POINT_SIDE, grad_p))
        for indices, (matrices, biases) in sides:
            shape = (len(indices), width)
            for i, matrix, bias in zip(indices, matrices.view(*shape, width).unbind(0), biases.view(shape).unbind(0)):
                grads[i], grads[i + 3] = matrix, bias
        grads = [g if needed else None for g, needed in zip(grads, ctx.needs_input_grad[5:])]
        return (None, grad_centroids, None, None, None, *grads)


def _at(attention: str, field: str) -> int:
    """The position of ``attention``'s weight ``field`` among ``BlockStep``'s 24 weights (its bias: 3 further on)."""
    return len(WEIGHT_NAMES) * ATTENTIONS.index(attention) + WEIGHT_NAMES.index(field)


_CENTROID_SIDE = tuple(_at(attention, field) for attention, field in (
    ("attn_cc", "W_Q"), ("attn_cc", "W_K"), ("attn_cc", "W_V"), ("attn_cx", "W_Q"), ("attn_xc", "W_K"),
    ("attn_xc", "W_V")))  # projections of the centroid stream
_POINT_SIDE = tuple(_at(attention, field) for attention, field in (
    ("attn_xc", "W_Q"), ("attn_xx", "W_Q"), ("attn_xx", "W_K"), ("attn_xx", "W_V")))  # projections of [x, 0]
_CX_KEYS_VALUES = (_at("attn_cx", "W_K"), _at("attn_cx", "W_V"))  # attn_cx's projections of the updated points


def block_step(block, step: int | None, points: Tensor, centroids: Tensor, weights, need_pattern: bool,
               generator: torch.Generator | None) -> tuple[Tensor, Tensor, Tensor | None]:
    """The step of ``block`` (a ``Block``) through ``BlockStep``: points (b, n, d) (the stream is [x, 0]), the
    centroid stream (b, k, D), the layer's weights -> (points stream X1 (b, n, D), centroid stream C1 (b, k, D),
    attn_xc's pattern (b, n, k) if ``need_pattern`` else None), as ``Block.forward`` returns them. Dropout is drawn
    from ``generator`` by each attention's ``draw_dropout``, in the block's order: the numbers the reference step
    draws."""
    dispatch.record(step, "block", "training_step")
    batch, n = points.shape[:2]
    k, width = centroids.shape[1:]
    sizes = {"attn_xc": (n, k), "attn_xx": (n, n), "attn_cx": (k, n), "attn_cc": (k, k)}
    alphas, dropped, tensors = [], [], []
    for name in ATTENTIONS:
        attention, config = getattr(block, name), getattr(block, name).config
        n_queries, n_keys = sizes[name]
        draw = attention.draw_dropout((batch,), n_queries, n_keys, points, generator,
                                      need_pattern and name == "attn_xc")
        dropped.append(Dropped.of(draw, n_queries, n_keys, attention.keys_major(n_queries, n_keys), KEYS_MAJOR[name],
                                  config.dropout))
        alphas.append(config.gamma / (math.sqrt(width) if config.scale_by_sqrt_dim else 1.0))
        attention_weights = getattr(weights, name)
        tensors.extend(getattr(attention_weights, field) for field in WEIGHT_NAMES)
    updated, stream, pattern = BlockStep.apply(points, centroids, tuple(alphas), tuple(dropped), need_pattern,
                                               *tensors)
    return stream.permute(1, 2, 0), updated, (pattern.mT if need_pattern else None)
