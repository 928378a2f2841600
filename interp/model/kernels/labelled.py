"""The labelled points stream: exact inference of the constructions without (b, n, D) buffers.

A points stream held as ``LabelledTokens`` (z_i = [x_i; 0] + table[labels_i]) is never formed as (b, n, D) when
nothing needs it. One step of a block (``labelled_step``) then runs: attn_xc's hardmax is a new table (the values
V c_j + b_V and AHAT's means over tied arg-max sets) and each point's row of it (``assign``); attn_xx (identity)
erases the old table row exactly (``identity_table``, ``erases_exactly``); attn_cx is a segment sum over the labels
(``mean_over_labels``); attn_cc takes its own kernel (``per_part.attend``). Taken in an unhooked step (the
``kernels.dispatch`` rule) outside autograd, with no FFN and no assignment pattern asked for, and only when the erasure
is exact in floating point; otherwise the stream is materialised (the same numbers) and the step runs part by part
(``per_part.block_step``). ``interp.model.kernels.dispatch`` decides when a model may carry its stream labelled
(``labelled_stream``); tests/test_inference_fast_labelled.py and tests/test_literal_model.py check every step against
the reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from interp.model.embedding import decode_assignments
from interp.model.kernels import dispatch, hardmax, per_part
from interp.model.kernels.folded import shifted_scores
from interp.model.projections import as_layout, known_supports, project, supports_of
from interp.primitives import argmax_sets


@dataclass(frozen=True)
class LabelledTokens:
    """A token stream held factored, never formed as (b, n, D): token i is z_i = [x_i on ``base_columns``] +
    table[labels_i], where the table (b, t, D) is zero on ``base_columns`` and x_i is the row i of ``base``.

    The points stream of an exact construction has this form at every layer: [x_i; code of i's centre]
    (``interp.model.block``, the labelled step). Every consumer reads only what it needs: a range of columns
    (``tokens[..., columns]``), per-label sums (``label_sums``), decoded labels (``decode``), or the whole stream
    (``materialise``, the same numbers as the literal (b, n, D) stream).

    base (b, n, |B|), table (b, t, D), labels (b, n) int64 in [0, t). ``memo`` holds what the steps of one forward
    learned about their layers' weights (``layer_facts``); every stream of that forward shares it."""

    base: Tensor  # (b, n, |B|)
    base_columns: slice  # B, a contiguous range of the D features
    table: Tensor  # (b, t, D), zero on B
    labels: Tensor  # (b, n) int64
    memo: dict = field(default_factory=dict, compare=False, repr=False)  # id(weights) -> (key, LayerFacts)

    @classmethod
    def embedded(cls, points: Tensor, width: int) -> "LabelledTokens":
        """``embed_points`` without a norm slot, [x; 0_e] (b, n, width), as one zero table row for every point."""
        batch, n, d = points.shape
        table = points.new_zeros((batch, 1, width))  # (b, 1, D)
        labels = torch.zeros((batch, n), dtype=torch.int64, device=points.device)  # (b, n)
        return cls(points, slice(0, d), table, labels)

    @property
    def shape(self) -> torch.Size:
        """(b, n, D)"""
        return torch.Size((*self.labels.shape, self.table.shape[-1]))

    @property
    def dtype(self) -> torch.dtype:
        return self.base.dtype

    @property
    def device(self) -> torch.device:
        return self.base.device

    def _gather(self, table: Tensor) -> Tensor:
        """table[labels_i] per task: table (b, t, m) -> (b, n, m), one row gather."""
        batch, rows, width = table.shape
        flat = (self.labels + rows * torch.arange(batch, device=table.device)[:, None]).flatten()  # (b n,)
        return table.reshape(batch * rows, width).index_select(0, flat).view(batch, -1, width)

    def columns(self, columns: slice) -> Tensor:
        """The stream's features ``columns`` (b, n, m): a view of ``base`` inside B, a gather of the table outside."""
        width = self.table.shape[-1]
        start, stop, step = columns.indices(width)
        base_start, base_stop, _ = self.base_columns.indices(width)
        if step == 1 and base_start <= start and stop <= base_stop:
            return self.base[..., start - base_start : stop - base_start]
        if step == 1 and (stop <= base_start or start >= base_stop):
            return self._gather(self.table[..., start:stop])
        return self.materialise()[..., columns]

    def __getitem__(self, index) -> Tensor:
        """``tokens[..., columns]`` for a slice of columns (the only indexing the attention uses)."""
        if not (isinstance(index, tuple) and len(index) == 2 and index[0] is Ellipsis and isinstance(index[1], slice)):
            raise TypeError(f"LabelledTokens takes [..., columns], got {index!r}")
        return self.columns(index[1])

    def materialise(self) -> Tensor:
        """The stream (b, n, D): z_i = table[labels_i] with x_i written into B (the table is zero there)."""
        tokens = self._gather(self.table)  # (b, n, D)
        tokens[..., self.base_columns] = self.base
        return tokens

    def label_sums(self) -> tuple[Tensor, Tensor]:
        """Per label m: the sum of its tokens, sum_{i: labels_i = m} z_i (b, t, D) = [sum of x_i on B; c_m table_m],
        and the count c_m (b, t), by one scatter-add over the points (a segment sum, no (t x n) product)."""
        batch, rows, width = self.table.shape
        counts = torch.zeros((batch, rows), dtype=self.dtype, device=self.device)  # (b, t)
        counts.scatter_add_(1, self.labels, torch.ones_like(self.labels, dtype=self.dtype))
        sums = self.table * counts[..., None]  # (b, t, D): c_m table_m, zero on B
        base_sums = torch.zeros((batch, rows, self.base.shape[-1]), dtype=self.dtype, device=self.device)  # (b, t, |B|)
        base_sums.scatter_add_(1, self.labels[..., None].expand(-1, -1, self.base.shape[-1]), self.base)
        sums[..., self.base_columns] = base_sums
        return sums, counts

    def decode(self, scratch: slice, codes: Tensor) -> Tensor:
        """``decode_assignments`` of the features ``scratch`` (outside B), per table row then gathered: (b, n)."""
        per_row = decode_assignments(self.table[..., scratch], codes)  # (b, t)
        return torch.gather(per_row, 1, self.labels)


def assign(attention, queries: LabelledTokens, keys: Tensor, weights) -> tuple[Tensor, Tensor]:
    """Hard (AHAT) attention of ``attention`` (an ``Attention``) for labelled queries (b, q, D) over keys (b, r, D),
    as a table and labels: out_i = table[labels_i]. The table (b, r + u, D) holds the values V z'_j + b_V, then per
    task one row per distinct tied arg-max set A (several keys), AHAT's mean of the values over A; labels_i is the
    winning key or the row of its tied set. The same scores, arg-max sets and weights as the attention's hard path."""
    n_queries, n_keys = queries.shape[-2], keys.shape[-2]
    keys_major = attention.keys_major(n_queries, n_keys)
    scores = shifted_scores(attention, queries, keys, weights, keys_major)  # (b, r, q) or (b, q, r)
    sets, counts, index_sums = hardmax.winners(scores, keys_major, not scores.requires_grad)  # W, (b, q), (b, q)
    values = project(keys, weights.W_V, weights.b_V)  # (b, r, D)
    labels = hardmax.single_winner(counts, index_sums, n_keys)  # (b, q) or None
    if labels is not None:
        return values, labels
    if n_keys * torch.finfo(counts.dtype).eps > 1:  # key indices not exact in the dtype: recover them
        labels = as_layout(sets, keys_major).argmax(dim=-1)  # (b, q), right where |set| = 1
    else:
        labels = index_sums.long()  # (b, q), right where |set| = 1
    task, query = (counts > 1).nonzero(as_tuple=True)  # (T,), (T,): the tied queries
    tied = sets[task, :, query] if keys_major else sets[task, query, :]  # (T, r): 1 on each tied set
    distinct, row_of = torch.unique(torch.cat([task[:, None].to(tied.dtype), tied], dim=1), dim=0,
                                    return_inverse=True)  # (u, 1 + r) sorted by task, (T,)
    set_task = distinct[:, 0].long()  # (u,)
    per_task = torch.bincount(set_task, minlength=values.shape[0])  # (b,)
    first = torch.cumsum(per_task, 0) - per_task  # (b,): index of each task's first distinct set
    slot = torch.arange(len(distinct), device=values.device) - first[set_task]  # (u,): row among its task's sets
    weights_of_set = distinct[:, 1:] / distinct[:, 1:].sum(dim=1, keepdim=True)  # (u, r): AHAT's 1 / |set|
    means = (weights_of_set[:, None, :] @ values[set_task])[:, 0]  # (u, D)
    tied_rows = values.new_zeros((values.shape[0], int(per_task.max()), values.shape[-1]))  # (b, u_max, D)
    tied_rows[set_task, slot] = means
    labels[task, query] = n_keys + slot[row_of]
    return torch.cat([values, tied_rows], dim=1), labels  # (b, r + u_max, D), (b, q)


def identity_table(tokens: LabelledTokens, weights, reads_base: bool | None = None) -> Tensor | None:
    """The identity self-attention's output on a labelled stream, out_i = V z_i + b_V, as a table (b, t, D)
    indexed by the stream's labels: exact when V reads no column of the stream's base (W_V[:, B] = 0), else None.
    ``reads_base``: whether W_V[:, B] != 0, if known (``LayerFacts``)."""
    if reads_base is None:
        reads_base = bool(weights.W_V[:, tokens.base_columns].any())
    if reads_base:
        return None
    return project(tokens.table, weights.W_V, weights.b_V)  # (b, t, D)


def mean_over_labels(attention, queries: Tensor, keys: LabelledTokens, weights,
                     reads_base: bool | None = None) -> Tensor | None:
    """Attention of ``attention`` (an ``Attention``) for queries (b, q, D) over a labelled stream (b, n, D) whose
    keys are scored by their labels only (W_K[:, B] = 0, so s_ij = G_{i, labels_j}, G (b, q, t)), as segment sums
    over the labels:

        linear  out_i = sum_m (G_im + e_i) / (sum_m' c_m' G_im' + e_i n) S_m     (e_i = 1 on an all-zero row)
        AHAT    out_i = sum_{m in A_i} S_m / sum_{m in A_i} c_m,  A_i = arg-max of G_i. over labels with c_m > 0

    with S_m = sum_{labels_j = m} (V z_j + b_V) = V (sum of the label's tokens) + c_m b_V and counts c_m: the
    normaliser's exact weights (AHAT's ties included) summed per label, no (q x n) pattern. (b, q, D), or None
    when the scores read the base (W_K[:, B] != 0; ``reads_base``, if known)."""
    if reads_base is None:
        reads_base = bool(weights.W_K[:, keys.base_columns].any())
    if reads_base:
        return None
    table_scores = shifted_scores(attention, queries, keys.table, weights, keys_major=False)  # (b, q, t): G
    sums, counts = keys.label_sums()  # (b, t, D), (b, t)
    label_values = project(sums, weights.W_V, None)  # (b, t, D): V sum_j z_j
    if weights.b_V is not None:
        label_values = label_values + counts[..., None] * weights.b_V
    if attention.config.normaliser == "linear":
        total = table_scores @ counts[..., None]  # (b, q, 1): sum_j s_ij
        empty_row = (total == 0).to(total.dtype)  # an all-zero row becomes uniform (``normalise``)
        out = ((table_scores + empty_row) / (total + empty_row * keys.shape[1])) @ label_values  # (b, q, D)
    else:
        present = torch.where(counts[:, None, :] > 0, table_scores, torch.full_like(table_scores, -math.inf))
        members = argmax_sets(present, dim=-1)  # (b, q, t): 1 on A_i
        out = (members @ label_values) / (members @ counts[..., None])  # (b, q, D)
    return out


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


def _table_checks(new_table: Tensor, old: LabelledTokens, erased: Tensor) -> tuple[bool, float | None, float | None]:
    """In one sync: whether T or E is nonzero on the base columns or E != -U (the erasure cannot be exact), and
    ``_integer_bound`` of T and of U."""
    base = old.base_columns
    dtype = new_table.dtype
    spoiled = new_table[..., base].any() | erased[..., base].any() | (erased != -old.table).any()
    checks = torch.stack([spoiled.to(dtype), (new_table != new_table.round()).any().to(dtype),
                          (old.table != old.table.round()).any().to(dtype), new_table.abs().amax(),
                          old.table.abs().amax()])  # the tables are never empty (t >= 1 rows of D >= 1 features)
    spoiled, new_fractional, old_fractional, new_bound, old_bound = checks.tolist()
    return bool(spoiled), None if new_fractional else new_bound, None if old_fractional else old_bound


def erases_exactly(new_table: Tensor, old: LabelledTokens, erased: Tensor, weights,
                   facts: "LayerFacts | None" = None) -> bool:
    """Whether the literal update z_i + A_xc(z_i) + A_xx(z_i) = (T[a_i] + z_i) + E[l_i] equals [x_i; 0] + T[a_i]
    exactly, for the new table T (b, k', D), the old stream z_i = [x_i; 0] + U[l_i] and attn_xx's output per old label
    E = U V^T + b_V (b, t, D). Needs T and E zero on the base columns B and E = -U, with E exact per point (V a
    signed selector, or U, V, b_V integers with D |U| |V| + |b_V| <= 1 / eps); then either T and U are integers with
    |T| + |U| <= 1 / eps (every sum exact), or fl(fl(T_a + U_l) + E_l) = T_a is checked for every pair (a, l).
    ``facts``: what is known of attn_xx's weights (``LayerFacts``; computed here without it)."""
    spoiled, new_bound, old_bound = _table_checks(new_table, old, erased)
    if spoiled:
        return False
    exact = 1.0 / torch.finfo(new_table.dtype).eps
    selector = _signed_selector(weights.W_V, weights.b_V) if facts is None else facts.erase_selector
    if not selector:
        value_bound = _integer_bound(weights.W_V, weights.b_V) if facts is None else facts.erase_value_bound
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


def attention_ready(attention) -> bool:
    """Whether ``attention`` may run on a labelled stream: no dropout drawn, no output norm, and the normaliser one of
    AHAT (gamma = inf) or linear (the centre update)."""
    config = attention.config
    return (not attention.dropping() and config.output_norm == "none"
            and (config.hard or config.normaliser == "linear"))


@dataclass(frozen=True)
class LayerFacts:
    """What the labelled step reads of one layer's weights, found once per forward (``layer_facts``) instead of at
    every step (each a sync): the feature support of every weight matrix, whether attn_xx's W_V and attn_cx's W_K
    read the base columns, whether attn_xx's V is a signed selector and its integer bound."""

    supports: dict  # id -> (matrix, support), for ``projections.known_supports``
    erase_reads_base: bool  # attn_xx: W_V[:, B] != 0
    erase_selector: bool  # attn_xx: ``_signed_selector(W_V, b_V)``
    erase_value_bound: float | None  # attn_xx: ``_integer_bound(W_V, b_V)``
    mean_reads_base: bool  # attn_cx: W_K[:, B] != 0


def _weights_key(weights) -> tuple | None:
    """The version and storage of each of ``weights``' tensors (an in-place edit or a new ``.data`` changes it);
    None where a tensor keeps no version (an inference tensor)."""
    try:
        return tuple((p._version, p.data_ptr()) for p in weights.parameters())
    except RuntimeError:
        return None


def layer_facts(weights, tokens: LabelledTokens) -> LayerFacts:
    """``LayerFacts`` of ``weights`` (a ``LayerWeights``), kept in ``tokens.memo`` for the forward's later steps
    (the same layer, unchanged weights: a shared-weights model finds them once)."""
    key = _weights_key(weights)
    cached = tokens.memo.get(id(weights))
    if key is not None and cached is not None and cached[0] is weights and cached[1] == key:
        return cached[2]
    base = tokens.base_columns
    xx, cx = weights.attn_xx, weights.attn_cx
    matrices = [getattr(getattr(weights, name), matrix) for name in ("attn_xc", "attn_xx", "attn_cx", "attn_cc")
                for matrix in ("W_Q", "W_K", "W_V")]
    W_V, b_V = xx.W_V, xx.b_V
    facts = LayerFacts(supports_of(matrices), bool(W_V[:, base].any()), _signed_selector(W_V, b_V),
                       _integer_bound(W_V, b_V), bool(cx.W_K[:, base].any()))
    if key is not None:
        tokens.memo[id(weights)] = (weights, key, facts)
    return facts


def block_ready(block, points: LabelledTokens, centroids: Tensor, weights) -> bool:
    """The labelled step's dynamic conditions (in an unhooked step): no FFN, nothing needs gradients, and each
    attention ready (``attention_ready``)."""
    if block.ffn:
        return False
    if torch.is_grad_enabled() and (points.base.requires_grad or centroids.requires_grad
                                    or any(p.requires_grad for p in weights.parameters())):
        return False
    return (attention_ready(block.attn_xc) and block.attn_xx.config.identity
            and attention_ready(block.attn_cx))


def labelled_step(block, step: int | None, points: LabelledTokens, centroids: Tensor, weights,
                  need_assignment_pattern: bool = False, generator: torch.Generator | None = None,
                  ) -> tuple[LabelledTokens | Tensor, Tensor, Tensor | None]:
    """One unhooked step of ``block`` (a ``Block``) on a labelled points stream: the new stream [x_i; 0] + T[a_i],
    with T (b, k + u, D) attn_xc's values V c_j + b_V and tied-set means and a_i each point's row (``assign``), and
    the centroid stream (b, k, D); the step part by part (``per_part.block_step``) on the materialised stream (the
    same numbers) when the step's conditions fail, the erasure is not exact or attn_cx reads the base. Returns what
    ``Block.forward`` does."""
    if not need_assignment_pattern and block_ready(block, points, centroids, weights):
        facts = layer_facts(weights, points)
        with known_supports(facts.supports):
            stepped = _step(block, step, points, centroids, weights, facts, generator)
        if stepped is not None:
            return stepped
    return per_part.block_step(block, step, points.materialise(), centroids, weights, need_assignment_pattern,
                               generator)


def _step(block, step: int | None, points: LabelledTokens, centroids: Tensor, weights, facts: LayerFacts,
          generator: torch.Generator | None) -> tuple[LabelledTokens, Tensor, None] | None:
    """``labelled_step``'s step when the block is ready; None where it is not exact (the caller falls back)."""
    new_table, rows = assign(block.attn_xc, points, centroids, weights.attn_xc)  # (b, k + u, D), (b, n)
    erased = identity_table(points, weights.attn_xx, facts.erase_reads_base)  # (b, t, D): attn_xx's output per label
    if erased is None or not erases_exactly(new_table, points, erased, weights.attn_xx, facts):
        return None
    points_post = LabelledTokens(points.base, points.base_columns, new_table, rows, points.memo)  # factored
    attn_cx_out = mean_over_labels(block.attn_cx, centroids, points_post, weights.attn_cx,
                                   facts.mean_reads_base)  # (b, k, D)
    if attn_cx_out is None:
        return None
    dispatch.record(step, "block", "labelled_stream")
    attn_cc_out, _ = per_part.attend(block.attn_cc, centroids, centroids, weights.attn_cc, False, generator, step,
                                     "attn_cc")  # (b, k, D)
    return points_post, centroids + attn_cx_out + attn_cc_out, None
