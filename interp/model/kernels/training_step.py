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
reference step. The kernel zeroes the dropped entries of P (keeping their weights for the softmax backward) and
divides the output by 1 - p.

``block_step`` is the entry the step loop calls where ``dispatch.block_step`` allows it; its gradients (every weight,
the centroid stream) and outputs equal the reference step's up to the order of float additions (tested in float64:
tests/test_training_step_kernel.py).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from interp.model.kernels.fused import _narrow_product

ATTENTIONS = ("attn_xc", "attn_xx", "attn_cx", "attn_cc")
WEIGHT_NAMES = ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V")


def flat_dropped(draw: Tensor | tuple[Tensor, ...] | None, n_queries: int, n_keys: int,
                 keys_major: bool) -> Tensor | None:
    """The dropped positions of a dropout draw as flat indices into a (b, q, r) pattern (None: nothing drawn):
    from the dropped pairs (batch, query, key) of ``sample_dropped_pairs``, or from the zeros of a dense keep mask
    (laid out (b, r, q) when ``keys_major``)."""
    if draw is None:
        return None
    if isinstance(draw, tuple):
        batch, query, key = draw  # (N,) each
        return (batch * n_queries + query) * n_keys + key  # (N,)
    mask = draw.transpose(1, 2) if keys_major else draw  # (b, q, r)
    return (mask == 0).reshape(-1).nonzero().squeeze(1)  # (N,)


def _attend(left: Tensor, right: Tensor, key_term: Tensor, factor: float, values: Tensor,
            dropped: Tensor | None) -> tuple[Tensor, Tensor | None, Tensor]:
    """Logits l = key_term_j + factor left_i.right_j, P = softmax_j(l), the dropped entries zeroed: returns
    M . P (b, Lq, Lr) (M the 0/1 keep pattern), the weights P_ij of the dropped entries (N,) and (M . P) values
    (b, Lq, Ev). left (b, Lq, E), right (b, Lr, E), key_term (b, Lr), values (b, Lr, Ev)."""
    logits = torch.baddbmm(key_term[:, None, :], left, right.mT, alpha=factor)  # (b, Lq, Lr)
    kept = torch.softmax(logits, dim=-1)  # (b, Lq, Lr) P, then M . P in place
    weight = None
    if dropped is not None:
        flat = kept.view(-1)  # (b Lq Lr,)
        weight = flat.index_select(0, dropped)  # (N,)
        flat.index_fill_(0, dropped, 0.0)
    return kept, weight, _narrow_product(kept, values)  # (b, Lq, Ev)


def _logit_gradient(grad_mixed: Tensor, mixed: Tensor, values: Tensor, kept: Tensor, weight: Tensor | None,
                    dropped: Tensor | None) -> Tensor:
    """dL/dl (b, Lq, Lr) for Y = (M . P) values, P = softmax(l), given dL/dY (b, Lq, Ev): with
    row_i = sum_j P_ij dP_ij = dY_i.Y_i, dl_ij = P_ij (M_ij dY_i.v_j - row_i); the dropped entries (M = 0) are
    -P_ij row_i, restored from their weights."""
    row = (grad_mixed * mixed).sum(-1)  # (b, Lq)
    grad_logits = torch.baddbmm(row[..., None].neg(), grad_mixed, values.mT)  # (b, Lq, Lr) dY.v - row
    grad_logits.mul_(kept)  # P (dP - row) at kept entries, 0 at dropped ones
    if dropped is not None:
        n_keys = kept.shape[-1]
        restored = row.reshape(-1).index_select(0, dropped // n_keys).mul_(weight).neg_()  # (N,)
        grad_logits.view(-1).index_copy_(0, dropped, restored)
    return grad_logits


def _affine(tokens: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """tokens W^T + b: tokens (b, L, D_in), weight (D_out, D_in), bias (D_out,) -> (b, L, D_out)."""
    return torch.addmm(bias, tokens.reshape(-1, tokens.shape[-1]), weight.T).view(*tokens.shape[:-1], weight.shape[0])


def _outer_sum(grad: Tensor, tokens: Tensor) -> Tensor:
    """sum over batch and tokens of grad_t tokens_t^T: grad (b, L, D_out), tokens (b, L, D_in) -> (D_out, D_in)."""
    return grad.reshape(-1, grad.shape[-1]).T @ tokens.reshape(-1, tokens.shape[-1])


class _Small:
    """Saved state of one explicit-q, k, v attention (attn_xc, attn_cx, attn_cc)."""

    def __init__(self, q, k, v, kept, weight, mixed, dropped, alpha, keep):
        self.q, self.k, self.v = q, k, v  # (b, Lq, D), (b, Lr, D), (b, Lr, D)
        self.kept, self.weight, self.mixed, self.dropped = kept, weight, mixed, dropped  # M . P, (N,), Y (b, Lq, D)
        self.alpha, self.keep = alpha, keep

    @classmethod
    def run(cls, q: Tensor, k: Tensor, v: Tensor, alpha: float, dropped: Tensor | None, keep: float):
        """out_i = sum_j M_ij P_ij v_j / keep, P = softmax_j(alpha (2 q_i.k_j - ||k_j||^2)): (state, out)."""
        key_term = (k * k).sum(-1).mul_(-alpha)  # (b, Lr)
        kept, weight, mixed = _attend(q, k, key_term, 2 * alpha, v, dropped)
        return cls(q, k, v, kept, weight, mixed, dropped, alpha, keep), mixed / keep  # (b, Lq, D)

    def backward(self, grad_out: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """dq (b, Lq, D), dk, dv (b, Lr, D) from dL/dout (b, Lq, D): dv = (M . P)^T g / keep,
        dq = 2 alpha dl k, dk = 2 alpha dl^T q - 2 alpha colsum(dl) k."""
        grad = grad_out / self.keep  # (b, Lq, D) dL/dY
        grad_v = torch.bmm(self.kept.mT, grad)  # (b, Lr, D)
        grad_logits = _logit_gradient(grad, self.mixed, self.v, self.kept, self.weight, self.dropped)
        factor = 2 * self.alpha
        grad_q = torch.bmm(grad_logits, self.k).mul_(factor)  # (b, Lq, D)
        column = grad_logits.sum(1).mul_(-factor)  # (b, Lr)
        grad_k = torch.baddbmm(column[..., None] * self.k, grad_logits.mT, self.q, alpha=factor)  # (b, Lr, D)
        return grad_q, grad_k, grad_v


def _augmented(weight: Tensor, bias: Tensor, d: int) -> Tensor:
    """W~ = [W[:, :d], b] (D, d + 1): the map x~ = [x, 1] -> W [x, 0] + b."""
    return torch.cat([weight[:, :d], bias[:, None]], dim=1)


def _widened(grad_augmented: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """(dW (D, width), db (D,)) from dW~ (D, d + 1): W's columns past d read only zeros, so their gradient is 0."""
    d = grad_augmented.shape[1] - 1
    return torch.nn.functional.pad(grad_augmented[:, :d], (0, width - d)), grad_augmented[:, d]


class BlockStep(torch.autograd.Function):
    """One block step from x (b, n, d) (points stream [x, 0]) and the centroid stream C0 (b, k, D) with the 24
    effective weights (W_Q, W_K, W_V, b_Q, b_K, b_V of attn_xc, attn_xx, attn_cx, attn_cc; a bias may be None):
    returns C1 (b, k, D), X1 (b, n, D) (both differentiable) and, if asked, attn_xc's pattern before dropout
    (b, n, k) (not differentiable; else an empty tensor). ``alphas``: gamma / sqrt(D) per attention; ``dropped``:
    flat dropped positions per attention (None: no dropout); ``keeps``: 1 - p per attention. No gradient for x."""

    @staticmethod
    def forward(ctx, x, centroids, alphas, dropped, keeps, need_pattern, *weights):
        b, n, d = x.shape
        width = centroids.shape[-1]
        zeros = centroids.new_zeros(width)  # (D,): a missing bias
        params = [[w if w is not None else zeros for w in weights[6 * a: 6 * a + 6]] for a in range(4)]
        xt = torch.cat([x, x.new_ones(b, n, 1)], dim=-1)  # (b, n, d + 1) x~
        # attn_xc: queries from points (affine in x~), keys and values from centroids
        w_q, w_k, w_v, b_q, b_k, b_v = params[0]
        q_xc = xt @ _augmented(w_q, b_q, d).T  # (b, n, D)
        xc, out_xc = _Small.run(q_xc, _affine(centroids, w_k, b_k), _affine(centroids, w_v, b_v), alphas[0],
                                dropped[0], keeps[0])  # out (b, n, D)
        pattern = centroids.new_empty(0)
        if need_pattern:  # P before dropout: restore the dropped weights in a copy
            pattern = xc.kept.clone()  # (b, n, k)
            if dropped[0] is not None:
                pattern.view(-1).index_copy_(0, dropped[0], xc.weight)
        # attn_xx: everything affine in x~ (module docstring)
        w_q, w_k, w_v, b_q, b_k, b_v = params[1]
        qa, ka, va = _augmented(w_q, b_q, d), _augmented(w_k, b_k, d), _augmented(w_v, b_v, d)  # (D, d + 1)
        keys_xx = xt @ ka.T  # (b, n, D)
        key_term = (keys_xx * keys_xx).sum(-1).mul_(-alphas[1])  # (b, n) kappa
        gram = qa.T @ ka  # (d + 1, d + 1) G
        left = xt @ gram  # (b, n, d + 1)
        kept_xx, weight_xx, mixed_xx = _attend(left, xt, key_term, 2 * alphas[1], xt, dropped[1])  # P~ x~
        va_scaled = va / keeps[1]  # (D, d + 1)
        points = torch.baddbmm(xc.mixed, mixed_xx, va_scaled.T.expand(b, -1, -1), beta=1 / keeps[0])  # (b, n, D)
        points[..., :d] += x  # X1 = [x, 0] + out_xc + out_xx
        # attn_cx: queries from centroids, keys and values from the updated points
        w_q, w_k, w_v, b_q, b_k, b_v = params[2]
        cx, out_cx = _Small.run(_affine(centroids, w_q, b_q), _affine(points, w_k, b_k), _affine(points, w_v, b_v),
                                alphas[2], dropped[2], keeps[2])  # out (b, k, D)
        # attn_cc
        w_q, w_k, w_v, b_q, b_k, b_v = params[3]
        cc, out_cc = _Small.run(_affine(centroids, w_q, b_q), _affine(centroids, w_k, b_k),
                                _affine(centroids, w_v, b_v), alphas[3], dropped[3], keeps[3])  # out (b, k, D)
        updated = centroids + out_cx + out_cc  # (b, k, D) C1
        ctx.mark_non_differentiable(pattern)
        ctx.save_for_backward(centroids, points, *(w for w in weights if w is not None))
        ctx.present = [w is not None for w in weights]
        ctx.small = (xc, cx, cc)
        ctx.xx = (xt, qa, ka, va, keys_xx, gram, left, kept_xx, weight_xx, mixed_xx, dropped[1], alphas[1], keeps[1])
        ctx.d, ctx.width = d, width
        return updated, points, pattern

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_updated, grad_points, _grad_pattern):
        centroids, points, *present = ctx.saved_tensors
        it = iter(present)
        weights = [next(it) if here else None for here in ctx.present]
        d, width = ctx.d, ctx.width
        zeros = centroids.new_zeros(width)
        params = [[w if w is not None else zeros for w in weights[6 * a: 6 * a + 6]] for a in range(4)]
        xc, cx, cc = ctx.small
        if grad_updated is None:
            grad_updated = torch.zeros_like(centroids)
        grads: list[Tensor | None] = [None] * 24
        # attn_cc and attn_cx: C1 = C0 + out_cx + out_cc
        dq_cc, dk_cc, dv_cc = cc.backward(grad_updated)
        dq_cx, dk_cx, dv_cx = cx.backward(grad_updated)
        w_q, w_k, w_v = params[3][:3]
        grad_centroids = grad_updated + dq_cc @ w_q + dk_cc @ w_k + dv_cc @ w_v  # (b, k, D)
        grads[18:24] = [_outer_sum(dq_cc, centroids), _outer_sum(dk_cc, centroids), _outer_sum(dv_cc, centroids),
                        dq_cc.sum((0, 1)), dk_cc.sum((0, 1)), dv_cc.sum((0, 1))]
        w_q, w_k, w_v = params[2][:3]
        grad_centroids += dq_cx @ w_q
        grads[12:18] = [_outer_sum(dq_cx, centroids), _outer_sum(dk_cx, points), _outer_sum(dv_cx, points),
                        dq_cx.sum((0, 1)), dk_cx.sum((0, 1)), dv_cx.sum((0, 1))]
        grad_points = dk_cx @ w_k + dv_cx @ w_v + (grad_points if grad_points is not None else 0)  # (b, n, D)
        # attn_xc: X1 = X0 + out_xc + out_xx
        xt, qa, ka, va, keys_xx, gram, left, kept_xx, weight_xx, mixed_xx, dropped_xx, alpha, keep = ctx.xx
        dq_xc, dk_xc, dv_xc = xc.backward(grad_points)
        w_q, w_k, w_v = params[0][:3]
        grad_centroids += dk_xc @ w_k + dv_xc @ w_v
        grads[0], grads[3] = _widened(_outer_sum(dq_xc, xt), width)
        grads[1:3] = [_outer_sum(dk_xc, centroids), _outer_sum(dv_xc, centroids)]
        grads[4:6] = [dk_xc.sum((0, 1)), dv_xc.sum((0, 1))]
        # attn_xx, factored: out = P~ x~ W~_V^T / keep
        grad_va = _outer_sum(grad_points, mixed_xx) / keep  # (D, d + 1)
        grad_mixed = grad_points @ (va / keep)  # (b, n, d + 1)
        grad_logits = _logit_gradient(grad_mixed, mixed_xx, xt, kept_xx, weight_xx, dropped_xx)  # (b, n, n)
        gathered = torch.bmm(xt.mT, grad_logits)  # (b, d + 1, n): x~^T dl; its last row sum_i dl_ij = dkappa
        grad_gram = (gathered.transpose(0, 1).reshape(d + 1, -1) @ xt.reshape(-1, d + 1)).mul_(2 * alpha)  # dG
        grad_keys = keys_xx * gathered[:, d, :, None].mul(-2 * alpha)  # (b, n, D) via kappa
        grad_qa = ka @ grad_gram.T  # (D, d + 1)
        grad_ka = qa @ grad_gram + _outer_sum(grad_keys, xt)  # (D, d + 1)
        grads[6], grads[9] = _widened(grad_qa, width)
        grads[7], grads[10] = _widened(grad_ka, width)
        grads[8], grads[11] = _widened(grad_va, width)
        grads = [g if ctx.needs_input_grad[6 + i] else None for i, g in enumerate(grads)]
        return (None, grad_centroids if ctx.needs_input_grad[1] else None, None, None, None, None, *grads)


def block_step(block, points: Tensor, centroids: Tensor, weights, need_pattern: bool,
               generator: torch.Generator | None) -> tuple[Tensor, Tensor, Tensor | None]:
    """The step of ``block`` (a ``Block``) through ``BlockStep``: points (b, n, d) (the stream is [x, 0]), the
    centroid stream (b, k, D), the layer's weights -> (points stream X1 (b, n, D), centroid stream C1 (b, k, D),
    attn_xc's pattern (b, n, k) if ``need_pattern`` else None), as ``Block.forward`` returns them. Dropout is drawn
    from ``generator`` by each attention's ``draw_dropout``, in the block's order."""
    batch, n = points.shape[:2]
    k, width = centroids.shape[1:]
    sizes = {"attn_xc": (n, k), "attn_xx": (n, n), "attn_cx": (k, n), "attn_cc": (k, k)}
    alphas, dropped, keeps, tensors = [], [], [], []
    for name in ATTENTIONS:
        attention, config = getattr(block, name), getattr(block, name).config
        n_queries, n_keys = sizes[name]
        literal = need_pattern and name == "attn_xc"  # the reference forms (and draws for) a returned pattern
        draw = attention.draw_dropout((batch,), n_queries, n_keys, points, generator, literal)
        dropped.append(flat_dropped(draw, n_queries, n_keys, attention.keys_major(n_queries, n_keys)))
        keeps.append(1.0 - config.dropout if draw is not None else 1.0)
        alphas.append(config.gamma / (math.sqrt(width) if config.scale_by_sqrt_dim else 1.0))
        attention_weights = getattr(weights, name)
        tensors.extend(getattr(attention_weights, field) for field in WEIGHT_NAMES)
    updated, stream, pattern = BlockStep.apply(points, centroids, tuple(alphas), tuple(dropped), tuple(keeps),
                                               need_pattern, *tensors)
    return stream, updated, (pattern if need_pattern else None)
