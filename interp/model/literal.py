"""The literal model: the k-means transformer as the papers write it, dense and unoptimised, for checking the model.

``LiteralModel.from_model(model)`` copies a ``KMeansTransformer``'s effective weights and computes, with nothing of
the model's own forward (no ``Attention``, ``Block``, kernel, projection or embedding helper), per step

    X' = X + A(X, C; attn_xc) + A(X, X; attn_xx) [+ FFN(X')],  C' = C + A(C, X'; attn_cx) + A(C, C; attn_cc) [+ FFN(C')]

(paper 2, Eq. 4; the centroid line reads the updated points), every attention as one dense (b, q, r) pattern:

    s_ij = -sum_m ((W_Q z_i + b_Q)_m - (W_K z'_j + b_K)_m)^2  or  (W_Q z_i + b_Q) . (W_K z'_j + b_K),  / sqrt(D)
    P = normaliser(gamma s) over j,     A(Z, Z')_i = sum_j P_ij (W_V z'_j + b_V)

with the squared differences summed term by term (no expansion, no folding, no layout choice). The embeddings are
[x; 0_e; (||x||^2)] and [c; code_j; (||c||^2)] with code_j = e_j (one-hot), the bits of j least significant first
(binary) or nothing (d-only); a re-embedding model re-embeds both before every step. A step's read-out is the
nearest code to each point's scratch features (ties to the lowest j), or the arg-max of attn_xc's pattern (d-only).

It expresses softmax, sparsemax and AHAT (gamma = inf: uniform on the exact arg-max set), linear attention (an
all-zero row uniform), the identity self-attention (pattern I), the unit output norm, ReLU^2 FFNs, the norm slot,
shared or per-layer weights, re-embedding, and attention dropout from given keep masks. It refuses (``InvalidInput``)
the random and iterative normalisers (Gumbel, normmax). It computes on the coordinates it is given and in the fixed
slot order: a ``centre_tasks`` model translates a task by its anchor first, which is 0 for tasks in the unit cube
(``interp.primitives.task_anchor``). Tests compare the model's kernels and its reference with it
(tests/test_literal_model.py, tests/test_fast_paths.py).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from entmax import sparsemax
from torch import Tensor, nn

from interp._checks import InvalidInput
from interp.model.config import AttentionConfig, ModelConfig

ATTENTIONS = ("attn_xc", "attn_xx", "attn_cx", "attn_cc")
ATTENTION_WEIGHTS = ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V")
FFN_WEIGHTS = ("W_in", "b_in", "W_out", "b_out")
CHUNK_ENTRIES = 1 << 22  # entries of the (b, q', r, D) differences formed at once


class LiteralOutput(NamedTuple):
    """The literal model's trajectories: centroids (b, T + 1, k, d) and read-outs (b, T, n)."""

    centroid_trajectory: Tensor
    readout_trajectory: Tensor


class LiteralModel(nn.Module):
    """The dense, unoptimised k-means transformer of ``config`` (module docstring). ``layers[l][name][field]``
    holds a weight under the name ``KMeansTransformer.named_parameters`` gives it (``layers.0.attn_xc.W_Q``), so
    gradients compare name by name (the slot-tied model's free parameters excepted: this one holds their matrices)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        for name in ATTENTIONS:
            normaliser = getattr(config, name).normaliser
            if normaliser in ("gumbel", "normmax"):
                raise InvalidInput(f"the literal model has no {normaliser} normaliser ({name})")
        self.config = config
        self.register_buffer("codes", codes(config.k, config.embedding))  # (k, e)
        n_weight_sets = 1 if config.shared_weights else config.n_layers
        self.layers = nn.ModuleList(nn.ModuleDict() for _ in range(n_weight_sets))

    @classmethod
    def from_model(cls, model: nn.Module) -> LiteralModel:
        """The literal model of a ``KMeansTransformer``: its config and a copy of its effective weights (W_Q, ...,
        b_V of each attention, the FFNs' W_in, b_in, W_out, b_out), in its dtype and on its device."""
        literal = cls(model.config)
        for source, target in zip(model.layers, literal.layers):
            parts = {name: ATTENTION_WEIGHTS for name in ATTENTIONS}
            if model.config.ffn:
                parts.update(ffn_points=FFN_WEIGHTS, ffn_centroids=FFN_WEIGHTS)
            for part, fields in parts.items():
                tensors = {field: getattr(getattr(source, part), field) for field in fields}
                target[part] = nn.ParameterDict({field: nn.Parameter(tensor.detach().clone())
                                                 for field, tensor in tensors.items() if tensor is not None})
        return literal.to(model.codes)

    def forward(self, points: Tensor, centroids: Tensor, steps: int | None = None, reembed: bool | None = None,
                keep_masks: dict[tuple[int, str], Tensor] | None = None) -> LiteralOutput:
        """``steps`` steps (default ``n_layers``) on points (b, n, d) from centroids (b, k, d). ``keep_masks``: a
        dense (b, q, r) mask M per (step, attention name), multiplying that attention's pattern (dropout:
        M_ij in {0, 1 / (1 - p)}); none elsewhere."""
        config = self.config
        steps = config.n_layers if steps is None else steps
        reembed = config.reembed if reembed is None else reembed
        trajectory, readouts = [centroids], []
        for step in range(steps):
            if step == 0 or reembed:
                x, c = self.embed_points(points), self.embed_centroids(trajectory[-1])  # (b, n, D), (b, k, D)
            layer = self.layers[0 if config.shared_weights else step]
            masks = {name: (keep_masks or {}).get((step, name)) for name in ATTENTIONS}
            x, c, pattern = self.step(layer, x, c, masks)
            trajectory.append(c[..., : config.d])  # (b, k, d)
            readouts.append(self.readout(x, pattern))  # (b, n)
        return LiteralOutput(torch.stack(trajectory, dim=1), torch.stack(readouts, dim=1))

    def embed_points(self, points: Tensor) -> Tensor:
        """[x; 0_e; (||x||^2)]: points (b, n, d) -> (b, n, D)."""
        parts = [points, points.new_zeros((*points.shape[:2], self.codes.shape[1]))]
        if self.config.norm_slot:
            parts.append((points ** 2).sum(-1, keepdim=True))
        return torch.cat(parts, dim=-1)

    def embed_centroids(self, centroids: Tensor) -> Tensor:
        """[c_j; code_j; (||c_j||^2)]: centroids (b, k, d) -> (b, k, D)."""
        parts = [centroids, self.codes.to(centroids).expand(centroids.shape[0], -1, -1)]
        if self.config.norm_slot:
            parts.append((centroids ** 2).sum(-1, keepdim=True))
        return torch.cat(parts, dim=-1)

    def step(self, layer: nn.ModuleDict, x: Tensor, c: Tensor, masks: dict) -> tuple[Tensor, Tensor, Tensor]:
        """One step (Eq. 4) on streams x (b, n, D), c (b, k, D): the new streams and attn_xc's pattern (b, n, k)."""
        config = self.config
        out_xc, pattern = attention(config.attn_xc, layer["attn_xc"], x, c, masks["attn_xc"])
        out_xx, _ = attention(config.attn_xx, layer["attn_xx"], x, x, masks["attn_xx"])
        x = x + out_xc + out_xx  # (b, n, D)
        if config.ffn:
            x = x + ffn(layer["ffn_points"], x)
        out_cx, _ = attention(config.attn_cx, layer["attn_cx"], c, x, masks["attn_cx"])
        out_cc, _ = attention(config.attn_cc, layer["attn_cc"], c, c, masks["attn_cc"])
        c = c + out_cx + out_cc  # (b, k, D)
        if config.ffn:
            c = c + ffn(layer["ffn_centroids"], c)
        return x, c, pattern

    def readout(self, x: Tensor, pattern: Tensor) -> Tensor:
        """Each point's centroid (b, n): the arg-max of attn_xc's pattern (b, n, k) (d-only), else the code nearest
        its scratch features, argmin_j ||y_i - code_j||^2, ties to the lowest j."""
        if self.config.embedding == "none":
            return pattern.argmax(dim=-1)
        d, e = self.config.d, self.codes.shape[1]
        scratch = x[..., d : d + e]  # (b, n, e)
        return ((scratch[:, :, None, :] - self.codes.to(x)) ** 2).sum(-1).argmin(dim=-1)  # (b, n)


def codes(k: int, embedding: str) -> Tensor:
    """The centroid codes (k, e): the identity (one-hot), bit b of j in column b (binary, e = max(1, ceil(log2 k))),
    or none (d-only, e = 0), in float64."""
    if embedding == "onehot":
        return torch.eye(k, dtype=torch.float64)
    if embedding == "binary":
        width = max(1, math.ceil(math.log2(k)))
        return torch.tensor([[(j >> bit) & 1 for bit in range(width)] for j in range(k)], dtype=torch.float64)
    return torch.zeros((k, 0), dtype=torch.float64)


def attention(config: AttentionConfig, weights: nn.ParameterDict, queries: Tensor, keys: Tensor,
              keep_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """A(Z, Z') for queries (b, q, D), keys (b, r, D): the output (b, q, D) and the pattern P (b, q, r) (module
    docstring); ``keep_mask`` (b, q, r) multiplies P (dropout)."""
    values = linear(keys, weights["W_V"], weights.get("b_V"))  # (b, r, D)
    if config.identity:  # gamma = inf on distinct tokens: each token attends to itself
        pattern = torch.eye(keys.shape[1], dtype=keys.dtype, device=keys.device).expand(keys.shape[0], -1, -1)
    else:
        q = linear(queries, weights["W_Q"], weights.get("b_Q"))  # (b, q, D)
        k = linear(keys, weights["W_K"], weights.get("b_K"))  # (b, r, D)
        scores = -squared_distances(q, k) if config.score == "euclidean" else q @ k.transpose(1, 2)  # (b, q, r)
        if config.scale_by_sqrt_dim:
            scores = scores / math.sqrt(queries.shape[-1])
        pattern = normalise(config, scores)
    if keep_mask is not None:
        pattern = pattern * keep_mask
    out = pattern @ values  # (b, q, D)
    if config.output_norm == "unit":
        norm = out.norm(dim=-1, keepdim=True)  # (b, q, 1)
        out = out / torch.where(norm > 0, norm, torch.ones_like(norm))
    return out, pattern


def ffn(weights: nn.ParameterDict, tokens: Tensor) -> Tensor:
    """W_out ReLU(W_in z + b_in)^2 + b_out for every token (row): tokens (b, t, D) -> (b, t, D)."""
    hidden = torch.relu(linear(tokens, weights["W_in"], weights["b_in"])) ** 2  # (b, t, H)
    return linear(hidden, weights["W_out"], weights["b_out"])


def linear(tokens: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """W z + b for every token (row): tokens (b, t, D) -> (b, t, D_out)."""
    out = tokens @ weight.T
    return out if bias is None else out + bias


def squared_distances(q: Tensor, k: Tensor) -> Tensor:
    """||q_i - k_j||^2 = sum_m (q_im - k_jm)^2 for q (b, q, D), k (b, r, D) -> (b, q, r), the differences formed
    for a few queries at a time."""
    rows = max(1, CHUNK_ENTRIES // max(1, q.shape[0] * k.shape[1] * k.shape[2]))
    return torch.cat([((q[:, start : start + rows, None, :] - k[:, None, :, :]) ** 2).sum(-1)
                      for start in range(0, q.shape[1], rows)], dim=1)


def normalise(config: AttentionConfig, scores: Tensor) -> Tensor:
    """The pattern (b, q, r) of scores (b, q, r) under ``config``'s normaliser and gamma, over the keys."""
    if config.normaliser == "linear":  # w_ij = s_ij / sum_j s_ij; an all-zero row: uniform
        total = scores.sum(-1, keepdim=True)  # (b, q, 1)
        uniform = torch.full_like(scores, 1.0 / scores.shape[-1])
        return torch.where(total == 0, uniform, scores / torch.where(total == 0, torch.ones_like(total), total))
    if config.hard:  # AHAT: uniform on the exact arg-max set
        top = (scores == scores.amax(dim=-1, keepdim=True)).to(scores.dtype)  # (b, q, r)
        return top / top.sum(-1, keepdim=True)
    if config.normaliser == "softmax":
        return torch.softmax(config.gamma * scores, dim=-1)
    return sparsemax(config.gamma * scores, dim=-1)
