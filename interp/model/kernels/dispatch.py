"""Where a fast kernel replaces the reference computation: every such decision, in one place, and one switch.

The reference computation is the step as the papers write it (``Attention``: scores, normaliser, pattern, values;
``Block``: the two residual lines; ``KMeansTransformer.forward``: embed, step, decode). Five kernels replace parts
of it when they give the same numbers (up to the order of float additions) and nothing needs what they skip:

* ``fused_softmax``: a softmax attention at or above ``FUSED_MIN_PAIRS`` query x key pairs runs through
  ``kernels.fused.softmax_attention`` (a formed-pattern kernel or torch's flash kernel, dropout drawn sparsely)
  instead of forming scores and pattern; not for hard (gamma = inf) attention or a unit output norm, and on the CPU
  only (its flash kernel with dropout is torch's CPU one: other devices take the reference computation).
* ``hardmax_shortcut``: a hard (AHAT) attention without dropout takes its arg-max sets directly
  (``kernels.hardmax.hardmax_attention``: a row gather when every set is one key) instead of normalising a pattern.
* ``labelled_stream``: the exact constructions' points stream is carried as ``kernels.labelled.LabelledTokens`` (x
  plus a code-table row per point), never formed as (b, n, D), when the model is built for it (codes, no norm slot,
  no FFN, hard attn_xc, identity attn_xx, hard or linear attn_cx; ``kernels.labelled.block_ready`` checks the rest
  per step).
* ``reused_points_attention``: in a forward without grad of a re-embedding model with one shared layer, every step's
  points stream is the same embedding [x, 0] and its points self-attention attn_xx the same deterministic function
  of it, so steps after the first reuse the first step's attn_xx output instead of recomputing its (n x n) work
  (not where a hook reads or changes attn_xx's input or output at that step).
* ``block_step``: a training step of the learned one-layer model (every attention a euclidean softmax one, points
  stream [x, 0] at step 0 or re-embedded) runs as one ``autograd.Function`` with a hand-derived backward
  (``kernels.training_step``), its (n x n) products contracted over d + 1 features; with grad enabled, on the CPU.

A hook on a hook point a kernel would skip (scores, pattern, the embedded points stream, any hook of a block on the
labelled stream), or a pattern the caller asks for, always takes the reference computation: hooks observe and patch
what the papers describe. ``reference_only()`` (or the environment variable ``INTERP_REFERENCE=1`` at import)
switches every kernel off, for a user who wants the literal computation and for the tests that compare each kernel
with the reference at sizes that take it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import Tensor

from interp.model.config import AttentionConfig, ModelConfig

FUSED_MIN_PAIRS = 1 << 14  # query x key pairs from which the fused softmax kernel beats the literal computation
_REFERENCE_ONLY = ContextVar("interp_reference_only", default=os.environ.get("INTERP_REFERENCE", "") == "1")


@contextmanager
def reference_only(enabled: bool = True) -> Iterator[None]:
    """Within the block, every forward runs the reference computation (no kernel), or, with ``enabled=False``, the
    kernels again."""
    token = _REFERENCE_ONLY.set(bool(enabled))
    try:
        yield
    finally:
        _REFERENCE_ONLY.reset(token)


def kernels_allowed() -> bool:
    """False inside ``reference_only()`` (or with ``INTERP_REFERENCE=1``)."""
    return not _REFERENCE_ONLY.get()


def fused_softmax(config: AttentionConfig, n_queries: int, n_keys: int, device_type: str = "cpu") -> bool:
    """Whether an attention that needs no pattern and has no scores or pattern hook takes the fused softmax kernel
    (its inputs on a device of ``device_type``: the CPU only)."""
    return (kernels_allowed() and device_type == "cpu" and n_queries * n_keys >= FUSED_MIN_PAIRS
            and config.normaliser == "softmax" and not config.hard and config.output_norm == "none")


def hardmax_shortcut(config: AttentionConfig, dropping: bool) -> bool:
    """Whether a hard attention that needs no pattern and has no scores or pattern hook takes the arg-max sets
    directly (``kernels.hardmax.hardmax_attention``)."""
    return kernels_allowed() and config.hard and not dropping


def labelled_stream(config: ModelConfig) -> bool:
    """Whether a model of ``config`` may carry its points stream as ``LabelledTokens`` (the static conditions; the
    forward adds: no pattern asked for, no hook on the embedded points; each block: ``labelled.block_ready``)."""
    return (kernels_allowed() and config.embedding != "none" and not config.norm_slot and not config.ffn
            and config.attn_xc.hard and config.attn_xx.identity
            and (config.attn_cx.hard or config.attn_cx.normaliser == "linear"))


def reused_points_attention(config: ModelConfig, reembed: bool, dropping: bool, hooked: Callable[[], bool]) -> bool:
    """Whether the steps of a forward reuse one attn_xx output (b, n, D): kernels allowed, no grad, a re-embedding
    (``reembed``) model with shared weights, attn_xx drawing nothing (not ``dropping``: no dropout in training mode,
    no Gumbel noise) and nothing hooked that reads or changes attn_xx's input or output (``hooked()``, asked last:
    the embedded points, the step's points stream before the step, attn_xx's scores, pattern and output; a cache of
    other hook points keeps the reuse). The forward adds: the points stream not labelled (``labelled_stream``) and
    the step not the training kernel (``block_step``)."""
    return (kernels_allowed() and not torch.is_grad_enabled() and reembed and config.shared_weights and not dropping
            and config.attn_xx.normaliser != "gumbel" and not hooked())


def block_step(config: ModelConfig, points: Tensor, embedded_points: bool, training: bool,
               hooked: Callable[[], bool]) -> bool:
    """Whether a step takes ``kernels.training_step.block_step`` (one hand-derived forward and backward for the whole
    block) instead of the reference step: kernels allowed, the model in training mode (``training``: a gradient in
    eval mode, and every forward without grad, keep the reference, whose overflow behaviour far outside the unit cube
    the input checks rely on), grad enabled, the points stream the embedding [x, 0] of
    ``points`` (``embedded_points``: step 0 or a re-embedding model; no norm slot), ``points`` on the CPU (the
    kernel's ops are device-agnostic, but it is tested on the CPU only) and needing no grad, no FFN, every
    attention a euclidean softmax one with finite gamma, no identity attention, no output norm, and nothing hooked
    (``hooked()``, asked last: any forward or backward hook on a hook point of the block or of the embeddings)."""
    return (kernels_allowed() and training and torch.is_grad_enabled() and embedded_points
            and points.device.type == "cpu" and not points.requires_grad and not config.norm_slot and not config.ffn
            and all(_plain_softmax(getattr(config, name)) for name in ("attn_xc", "attn_xx", "attn_cx", "attn_cc"))
            and not hooked())


def _plain_softmax(config: AttentionConfig) -> bool:
    """A euclidean softmax attention with finite gamma, neither identity nor output-normed."""
    return (config.score == "euclidean" and config.normaliser == "softmax" and not config.hard
            and not config.identity and config.output_norm == "none")
