"""Where a fast kernel replaces the reference computation: every such decision, in one place, by one rule.

The reference computation is the model as the papers write it: ``Attention.forward`` (scores, normaliser, pattern,
values), ``Block.forward`` (the two residual lines), ``KMeansTransformer.forward`` (embed, step, decode). Seven
kernels replace parts of it where they give the same numbers up to the order of float additions (the same numbers
bit for bit for ``in_place_sum`` and ``reused_points_attention``):

* ``training_step`` (the whole block): a training step of the learned one-layer model (every attention a euclidean
  softmax one, points stream [x, 0] at step 0 or re-embedded) as one ``autograd.Function`` with a hand-derived
  backward (``kernels.training_step``), its (n x n) products contracted over d + 1 features.
* ``labelled_stream`` (the whole block): the exact constructions' points stream held as
  ``kernels.labelled.LabelledTokens`` (x plus a code-table row per point), never formed as (b, n, D).
* ``reused_points_attention`` (attn_xx): in a forward without grad of a re-embedding model with one shared layer,
  every step's points stream is the same embedding [x, 0], so steps after the first reuse the first one's attn_xx.
* ``fused_softmax`` (one attention): softmax attention at ``FUSED_MIN_PAIRS`` query x key pairs or more without
  forming scores or pattern (``kernels.fused``: a formed-pattern kernel or torch's flash kernel, dropout sparse).
* ``hardmax_sets`` (one attention): AHAT (gamma = inf) from its exact arg-max sets, a row gather when every set is one
  key (``kernels.hardmax``).
* ``folded_scores`` (one attention): scores up to the per-query constant every normaliser ignores, laid out
  keys-major (b, r, q) when there are fewer keys than queries, the projections folded onto the side with fewer
  tokens, the values mixed over the features W_V reads (``kernels.folded``).
* ``in_place_sum`` (the points' residual sum): accumulated into attn_xc's fresh output, no new (b, n, D) buffer.

The rule about hooks: **a step with any forward or backward hook on it runs the reference.** ``hooked`` is the one
test of hook presence: any PyTorch hook on a hook point (TransformerLens forward and backward hooks, permanent ones,
a hook registered on the module directly). A step's hook points are its block's (``Block.hook_points``) and, for
step 0, the embedding's (``hook_anchor``, ``hook_points_embed``, ``hook_centroids_embed``), which only step 0's input
passes through. So hooks observe and patch what the papers describe, and a step's numbers are the reference's
whenever it is observed; the other steps keep their kernels. ``reference_only()`` (or ``INTERP_REFERENCE=1`` in the
environment at import) runs the reference everywhere; ``without(name, ...)`` switches single kernels off.

``trace()`` records which path each part of a forward took: a list of ``Path(step, part, kernel)``, ``kernel`` a
name above or ``"reference"``. A step taken whole by one path gives one entry with part ``"block"`` (``reference``,
``training_step``, ``labelled_stream``; the labelled step also lists its attn_cc); a step whose parts take their own
kernels (``PER_PART``) gives one entry per part: ``attn_xc``, ``attn_xx``, ``points_sum``, ``attn_cx``, ``attn_cc``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import NamedTuple

import torch
from torch import Tensor, nn

from interp._checks import InvalidInput
from interp.model.config import AttentionConfig, ModelConfig

KERNELS = ("training_step", "labelled_stream", "reused_points_attention", "fused_softmax", "hardmax_sets",
           "folded_scores", "in_place_sum")
REFERENCE = "reference"
PER_PART = "per_part"  # a step whose attentions and sum each take their own kernel (``kernels.per_part``)
FUSED_MIN_PAIRS = 1 << 14  # query x key pairs from which the fused softmax kernel beats the literal computation
_REFERENCE_ONLY = ContextVar("interp_reference_only", default=os.environ.get("INTERP_REFERENCE", "") == "1")
_SWITCHED_OFF: ContextVar[frozenset[str]] = ContextVar("interp_kernels_off", default=frozenset())
_TRACE: ContextVar[list | None] = ContextVar("interp_kernel_trace", default=None)


class Path(NamedTuple):
    """What computed one part of one step: ``kernel`` is a name of ``KERNELS`` or ``"reference"``."""

    step: int
    part: str  # "block" (the whole step), "attn_xc", "attn_xx", "points_sum", "attn_cx" or "attn_cc"
    kernel: str


# ----- the rule ---------------------------------------------------------------------------------------------------
def hooked(hook_points: Iterable[nn.Module]) -> bool:
    """Whether any of ``hook_points`` holds a hook: a forward, forward-pre, backward or backward-pre PyTorch hook
    (every TransformerLens hook is one of these, permanent ones too). The one test of hook presence."""
    return any(point._forward_hooks or point._forward_pre_hooks or point._backward_hooks
               or point._backward_pre_hooks for point in hook_points)


def allowed(kernel: str) -> bool:
    """Whether ``kernel`` may run: not inside ``reference_only()`` (nor with ``INTERP_REFERENCE=1``) nor inside a
    ``without()`` naming it."""
    return not _REFERENCE_ONLY.get() and kernel not in _SWITCHED_OFF.get()


def kernels_allowed() -> bool:
    """False inside ``reference_only()`` (or with ``INTERP_REFERENCE=1``)."""
    return not _REFERENCE_ONLY.get()


@contextmanager
def reference_only(enabled: bool = True) -> Iterator[None]:
    """Within the block, every forward runs the reference computation (no kernel), or, with ``enabled=False``, the
    kernels again."""
    token = _REFERENCE_ONLY.set(bool(enabled))
    try:
        yield
    finally:
        _REFERENCE_ONLY.reset(token)


@contextmanager
def without(*kernels: str) -> Iterator[None]:
    """Within the block, the named kernels (of ``KERNELS``) are off: what they would replace runs the next kernel
    that applies, or the reference."""
    unknown = [name for name in kernels if name not in KERNELS]
    if unknown:
        raise InvalidInput(f"unknown kernel {unknown[0]!r}; the kernels are {', '.join(KERNELS)}")
    token = _SWITCHED_OFF.set(_SWITCHED_OFF.get() | frozenset(kernels))
    try:
        yield
    finally:
        _SWITCHED_OFF.reset(token)


@contextmanager
def trace() -> Iterator[list[Path]]:
    """Within the block, every step records the path each of its parts took: ``with trace() as paths: model(x, c)``
    leaves ``paths`` a list of ``Path(step, part, kernel)`` in the order they ran (module docstring)."""
    paths: list[Path] = []
    token = _TRACE.set(paths)
    try:
        yield paths
    finally:
        _TRACE.reset(token)


def record(step: int | None, part: str, kernel: str) -> None:
    """Note in the active ``trace()`` (if any) that ``part`` of ``step`` ran ``kernel``."""
    paths = _TRACE.get()
    if paths is not None and step is not None:
        paths.append(Path(step, part, kernel))


# ----- a step -----------------------------------------------------------------------------------------------------
def step_path(config: ModelConfig, labelled_points: bool, points: Tensor, embedded_points: bool, training: bool,
              step_hooked: bool) -> str:
    """How a step runs: ``REFERENCE`` when it is hooked (``step_hooked``) or the kernels are off; else
    ``"labelled_stream"`` when its points stream is held labelled (``labelled_points``; ``labelled.labelled_step``
    checks the rest and falls back to ``PER_PART``), ``"training_step"`` where ``training_step`` allows, or
    ``PER_PART``."""
    if step_hooked or _REFERENCE_ONLY.get():
        return REFERENCE
    if labelled_points:
        return "labelled_stream"
    if training_step(config, points, embedded_points, training):
        return "training_step"
    return PER_PART


def training_step(config: ModelConfig, points: Tensor, embedded_points: bool, training: bool) -> bool:
    """Whether an unhooked step takes ``kernels.training_step.block_step``: the model in training mode
    (``training``: a gradient in eval mode, and every forward without grad, keep the per-part step, whose overflow
    behaviour far outside the unit cube the input checks rely on), grad enabled, the points stream the embedding
    [x, 0] of ``points`` (``embedded_points``: step 0 or a re-embedding model; no norm slot), ``points`` on the CPU
    (the kernel's ops are device-agnostic, but it is tested on the CPU only) and needing no grad, no FFN, and every
    attention a euclidean softmax one with finite gamma, neither identity nor output-normed."""
    return (allowed("training_step") and training and torch.is_grad_enabled() and embedded_points
            and points.device.type == "cpu" and not points.requires_grad and not config.norm_slot and not config.ffn
            and all(_plain_softmax(getattr(config, name)) for name in ("attn_xc", "attn_xx", "attn_cx", "attn_cc")))


def labelled_stream(config: ModelConfig) -> bool:
    """Whether a model of ``config`` may hold its points stream as ``LabelledTokens`` (the static conditions: codes,
    no norm slot, no FFN, hard attn_xc, identity attn_xx, hard or linear attn_cx; the forward adds: step 0 unhooked;
    each step: unhooked and ``labelled.block_ready``)."""
    return (allowed("labelled_stream") and config.embedding != "none" and not config.norm_slot and not config.ffn
            and config.attn_xc.hard and config.attn_xx.identity
            and (config.attn_cx.hard or config.attn_cx.normaliser == "linear"))


def reused_points_attention(config: ModelConfig, reembed: bool, dropping: bool) -> bool:
    """Whether an unhooked per-part step reuses the forward's first attn_xx output (b, n, D): no grad, a
    re-embedding (``reembed``) model with shared weights, and attn_xx drawing nothing (not ``dropping``: no dropout
    in training mode, no Gumbel noise), so every step's attn_xx is the same deterministic function of [x, 0]."""
    return (allowed("reused_points_attention") and not torch.is_grad_enabled() and reembed and config.shared_weights
            and not dropping and config.attn_xx.normaliser != "gumbel")


def in_place_sum(out: Tensor, stream: Tensor) -> bool:
    """Whether an unhooked step may accumulate the residual sum into an attention's output ``out`` (b, t, D): outside
    autograd, ``out`` contiguous and a buffer of its own (not sharing ``stream``'s storage)."""
    return (allowed("in_place_sum") and not torch.is_grad_enabled() and out.is_contiguous()
            and out.untyped_storage().data_ptr() != stream.untyped_storage().data_ptr())


# ----- one attention ----------------------------------------------------------------------------------------------
def attention_kernel(config: AttentionConfig, n_queries: int, n_keys: int, device_type: str, need_pattern: bool,
                     dropping: bool) -> str:
    """The kernel an attention of an unhooked step takes: ``fused_softmax`` or ``hardmax_sets`` where no pattern is
    asked for (``need_pattern``) and they apply, else ``folded_scores``; ``REFERENCE`` for an identity attention
    (whose reference forms nothing (n, n) unless its scores or pattern are hooked) or with every kernel off."""
    if config.identity:
        return REFERENCE
    if not need_pattern and fused_softmax(config, n_queries, n_keys, device_type):
        return "fused_softmax"
    if not need_pattern and hardmax_sets(config, dropping):
        return "hardmax_sets"
    return "folded_scores" if allowed("folded_scores") else REFERENCE


def fused_softmax(config: AttentionConfig, n_queries: int, n_keys: int, device_type: str = "cpu") -> bool:
    """Whether a softmax attention that needs no pattern takes the fused kernel: at least ``FUSED_MIN_PAIRS`` pairs,
    finite gamma, no output norm, inputs on the CPU (its flash kernel with dropout is torch's CPU one)."""
    return (allowed("fused_softmax") and device_type == "cpu" and n_queries * n_keys >= FUSED_MIN_PAIRS
            and config.normaliser == "softmax" and not config.hard and config.output_norm == "none")


def hardmax_sets(config: AttentionConfig, dropping: bool) -> bool:
    """Whether a hard (AHAT) attention that needs no pattern and draws no dropout takes its arg-max sets directly."""
    return allowed("hardmax_sets") and config.hard and not dropping


def _plain_softmax(config: AttentionConfig) -> bool:
    """A euclidean softmax attention with finite gamma, neither identity nor output-normed."""
    return (config.score == "euclidean" and config.normaliser == "softmax" and not config.hard
            and not config.identity and config.output_norm == "none")
