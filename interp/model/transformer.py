"""KMeansTransformer: a TransformerLens HookedRootModule whose layers are clustering steps (paper 1; paper 2, Eq. 4).

``model(points, centroids)`` takes points (b, n, d) and initial centroids (b, k, d) and returns a
:class:`~interp.result.ClusteringOutput`. Per step l the cache has ``blocks.{l}.*``,
also when one shared layer runs T steps: a run longer than the model's standing blocks (one per layer, or per step of
its recommended use) borrows blocks for its hook points, which share the layer's weights, and gives them back after
the call, so the hook points are the same before and after any run. ``steps`` is at most
``interp._checks.MAX_STEPS``.

Coordinates. A model with ``config.centre_tasks`` (the translation-invariant constructions) computes on each task
translated by its anchor a (b, 1, d) (``interp.primitives.task_anchor``: 0 for tasks near the origin, such as tasks
min-max scaled to the unit cube): ``hook_anchor`` holds a, the embeddings and residual streams hold x - a and c - a,
and the output centroids are translated back. Other models (learned ones) see the input coordinates; a model with an
``input_range`` warns (:class:`OutOfTrainingRange`, once per call) on coordinates far outside it or on a task spread
over less than half of it (``SMALL_SPREAD``), and refuses (``InvalidInput``) to return non-finite centroids computed
outside it. Coordinates whose squared distances would overflow the dtype are refused (``InvalidInput`` naming points
or centroids).

Caching. ``run_with_cache()`` with the default ``names_filter=None`` caches every hook point except the scores and
pattern of identity self-attentions (``AttentionConfig.identity``): those are (b, n, n) and never formed unless
asked for. A str, list or callable ``names_filter`` is honoured as given; naming such a hook point (or hooking it
with ``run_with_hooks``) materialises 2 b n^2 entries for it (``attention.DenseIdentityPattern`` warns above
256 MiB).
"""

from __future__ import annotations

import re
import warnings
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn
from transformer_lens.ActivationCache import ActivationCache
from transformer_lens.hook_points import HookPoint
from transformer_lens.HookedRootModule import HookedRootModule

from interp._checks import (
    InvalidInput,
    InvalidInputType,
    MemoryNeed,
    check_choice,
    check_generator,
    check_memory,
    check_points_centroids,
    check_steps,
)
from interp._runtime import apply_defaults
from interp.algorithms import assign
from interp.model.block import Block, LayerWeights
from interp.model.config import SLOT_ORDERS, InferenceSettings, ModelConfig
from interp.model.embedding import centroid_codes, decode_assignments, embed_centroids, embed_points
from interp.model.kernels import dispatch, labelled, training_step
from interp.primitives import centre_tasks, refuse_overflowing, uniform
from interp.result import ClusteringOutput

apply_defaults()  # the allocator setting the batched kernels need to be fast (interp._runtime; opt out by env)

_IDENTITY_HOOK = re.compile(r"blocks\.\d+\.(attn_xx|attn_cc)\.hook_(scores|pattern)$")


class OutOfTrainingRange(UserWarning):
    """A model with an ``input_range`` (a learned one) got coordinates far outside the range it was trained on, or
    tasks spread over much less of it than its training tasks."""


# A task whose widest coordinate range is below SMALL_SPREAD x (high - low) of the training range warns. Every training
# task spans its range exactly (min-max scaled), and the shipped models degrade below half of it: on 32 tasks of
# TaskConfig(n=512, d=32, k=10) scaled by s, mean ln Phi(model) - ln Phi(Lloyd) after 20 steps from the same random
# start rises from -0.28 / -0.26 / +0.04 (one-hot / binary / d-only) at s = 1 to +0.00 / +0.14 / +0.79 at s = 0.5,
# +1.7 / +1.5 / +4.2 at 0.1 and +9.9 / +8.3 / +13.7 at 0.001 (docs/learned_model.md, "Scales").
SMALL_SPREAD = 0.5
# Spare blocks a shared-weight model keeps for reuse (``KMeansTransformer._release_blocks``): a run longer than the
# model's standing blocks borrows blocks for its hook points and gives them back after the call.
SPARE_BLOCKS = 64
TRAJECTORY_CHECK_BYTES = 256 * 2**20  # a forward checks the memory of its trajectories above this


def check_raw_range(points: Tensor, centroids: Tensor, input_range: tuple[float, float] | None) -> str | None:
    """For a model that computes on the input coordinates: refuse coordinates whose squared distances overflow
    (``refuse_overflowing``). With an ``input_range`` (low, high), w = high - low, warn once (``OutOfTrainingRange``)
    when a coordinate of points (b, n, d) or centroids (b, k, d) lies outside [low - w/2, high + w/2] ([-0.5, 1.5]
    for the unit cube), or a task's widest coordinate range max_m (max_i x_im - min_i x_im) is below
    SMALL_SPREAD w. Returns where the input lies (for the forward's refusal of non-finite centroids) when it lies
    outside [low - w/2, high + w/2], else None. One pass over each tensor and one device sync."""
    task_low, task_high = torch.aminmax(points.detach(), dim=1)  # (b, d) each
    centroids_low, centroids_high = torch.aminmax(centroids.detach())
    extremes = torch.stack([task_low.amin(), task_high.amax(), centroids_low, centroids_high,
                            (task_high - task_low).amax(dim=1).amin()])  # (5,)
    points_low, points_high, centroids_low, centroids_high, narrowest = extremes.tolist()
    refuse_overflowing(max(-points_low, points_high), "points", points.dtype, points.shape[-1])
    refuse_overflowing(max(-centroids_low, centroids_high), "centroids", points.dtype, points.shape[-1])
    if input_range is None:
        return None
    low, high = input_range
    margin = (high - low) / 2
    lowest, highest = min(points_low, centroids_low), max(points_high, centroids_high)
    outside = lowest < low - margin or highest > high + margin
    where = f"span [{lowest:.3g}, {highest:.3g}], outside [{low - margin:g}, {high + margin:g}]"
    problems = []
    if outside:
        problems.append(f"its input coordinates {where}")
    if narrowest < SMALL_SPREAD * (high - low):
        problems.append(f"a task's widest coordinate range is only {narrowest:.3g}, below {SMALL_SPREAD:g} of the "
                        f"{high - low:g} every training task spanned")
    if problems:
        warnings.warn(
            f"this model was trained on tasks filling [{low:g}, {high:g}] in their widest coordinate, and "
            f"{' and '.join(problems)}: a learned model is not translation or scale invariant, expect poor centroids "
            "(map each task into the unit cube first, as interp.InContextKMeans does)",
            OutOfTrainingRange, stacklevel=5)  # the caller of model(...)
    return where if outside else None


class KMeansTransformer(HookedRootModule):
    """Encoder-decoder k-means transformer with points and centroids as two token streams."""

    def __init__(self, config: ModelConfig):
        if not isinstance(config, ModelConfig):
            raise InvalidInputType(f"config must be a ModelConfig, got {type(config).__name__}")
        super().__init__()
        self.config = config
        n_weight_sets = 1 if config.shared_weights else config.n_layers
        self.layers = nn.ModuleList([LayerWeights(config) for _ in range(n_weight_sets)])
        self.register_buffer("codes", centroid_codes(config.k, config.embedding, torch.float32))  # (k, e)
        self.hook_anchor = HookPoint()  # (b, 1, d): the translation of each task (centre_tasks models only)
        self.hook_points_embed = HookPoint()  # (b, n, D)
        self.hook_centroids_embed = HookPoint()  # (b, k, D)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layers)])
        self._spare_blocks: list[Block] = []  # given back by runs longer than the standing blocks, for reuse
        self._inference = InferenceSettings()  # what a call without steps / slot_order runs (checkpoint ``inference``)
        self.setup()

    # ----- structure -------------------------------------------------------------------------------
    @property
    def d_model(self) -> int:
        return self.config.d_model

    @property
    def inference(self) -> InferenceSettings:
        """What a call without ``steps`` / ``slot_order`` runs (a checkpoint's ``inference`` metadata)."""
        return self._inference

    @inference.setter
    def inference(self, settings: InferenceSettings) -> None:
        if not isinstance(settings, InferenceSettings):
            raise InvalidInputType(f"inference must be an InferenceSettings, got {type(settings).__name__}")
        self._inference = settings
        self._ensure_blocks(self._standing_blocks())
        self._release_blocks()

    def _standing_blocks(self) -> int:
        """The blocks (and so the hook points) a model has between calls: one per layer, or one per step of its
        recommended use (``inference.steps``) if that is more."""
        return max(self.config.n_layers, self._inference.steps or 0)

    def _release_blocks(self) -> None:
        """After a call: give the blocks a longer run borrowed beyond ``_standing_blocks`` back to the spares, so the
        hook points are the same before and after any run; a block a caller put a hook on (and the ones before it)
        stays."""
        keep = self._standing_blocks()
        for index in range(len(self.blocks) - 1, keep - 1, -1):
            if _hooked(self.blocks[index].hook_points(), permanent=True):
                keep = index + 1
                break
        if len(self.blocks) > keep:
            released = list(self.blocks[keep:])
            del self.blocks[keep:]
            self._spare_blocks.extend(released[: max(0, SPARE_BLOCKS - len(self._spare_blocks))])
            self.setup()

    def _ensure_blocks(self, steps: int) -> None:
        """Blocks (their hook points) up to ``steps`` (shared weights only; spares first, then new ones), then re-run
        setup(); those beyond ``_standing_blocks`` are given back after the call (``_release_blocks``)."""
        if steps <= len(self.blocks):
            return
        if not self.config.shared_weights:
            raise InvalidInput(
                f"steps={steps} exceeds n_layers={self.config.n_layers} of a model without shared weights"
            )
        for _ in range(steps - len(self.blocks)):
            block = self._spare_blocks.pop() if self._spare_blocks else Block(self.config)
            block.train(self.training)
            self.blocks.append(block)
        self.setup()

    def _weights_for(self, step: int) -> LayerWeights:
        return self.layers[0 if self.config.shared_weights else step]

    def _resolve_steps(self, steps: int | None) -> int:
        if steps is None:
            steps = self.inference.steps or self.config.n_layers
        else:
            steps = check_steps(steps)
        self._ensure_blocks(steps)
        return steps

    # ----- TransformerLens entry points that must see every step's hook points -----------------------
    def default_cache_filter(self, name: str) -> bool:
        """``names_filter=None``: every hook point but the (b, n, n) scores and pattern of identity self-attentions."""
        match = _IDENTITY_HOOK.match(name)
        return match is None or not getattr(self.config, match.group(1)).identity

    def get_caching_hooks(self, names_filter: Any = None, *args: Any, **kwargs: Any):
        """As HookedRootModule.get_caching_hooks, with ``default_cache_filter`` for ``names_filter=None``."""
        return super().get_caching_hooks(self.default_cache_filter if names_filter is None else names_filter,
                                         *args, **kwargs)

    def add_caching_hooks(self, names_filter: Any = None, *args: Any, **kwargs: Any):
        """As HookedRootModule.add_caching_hooks, with ``default_cache_filter`` for ``names_filter=None``."""
        return super().add_caching_hooks(self.default_cache_filter if names_filter is None else names_filter,
                                         *args, **kwargs)

    def run_with_cache(self, *model_args: Any, **kwargs: Any) -> tuple[ClusteringOutput, ActivationCache]:
        """As HookedRootModule.run_with_cache, returning an ``ActivationCache``; ``names_filter=None`` caches
        every hook point but the identity self-attentions' (b, n, n) scores and pattern (module docstring)."""
        self._resolve_steps(_steps_argument(model_args, kwargs))
        try:
            out, cache_dict = super().run_with_cache(*model_args, **kwargs)
        finally:
            self._release_blocks()
        return out, ActivationCache(cache_dict, self)

    def run_with_hooks(self, *model_args: Any, **kwargs: Any) -> ClusteringOutput:
        """As HookedRootModule.run_with_hooks; every step's hook points exist for the call."""
        self._resolve_steps(_steps_argument(model_args, kwargs))
        try:
            return super().run_with_hooks(*model_args, **kwargs)
        finally:
            self._release_blocks()

    # ----- forward -----------------------------------------------------------------------------------
    def forward(
        self, points: Tensor, centroids: Tensor, steps: int | None = None, reembed: bool | None = None,
        generator: torch.Generator | int | None = None, slot_order: str | None = None,
    ) -> ClusteringOutput:
        """Run ``steps`` clustering steps on points (b, n, d) from centroids (b, k, d); ``steps`` and ``slot_order``
        default to ``self.inference`` (n_layers steps, fixed order, unless a checkpoint recommends others).

        ``slot_order="shuffle"``: at every embedding (every step of a re-embedding model, the first step otherwise)
        each task's centroids are put in a fresh uniformly random slot order pi (slot j holds centroid pi(j)), drawn
        from ``generator``; the step's centroids and labels are mapped back, so the output is in the caller's order.
        The streams and patterns a cache records are in slot order; ``blocks.{l}.hook_slot_order`` (b, k) holds pi.
        For a model equivariant to the slot order (d-only, slot-tied, the constructions) it equals "fixed" up to
        rounding; for the learned one-hot and binary models it removes the slot-specific part of the update on
        average (docs/learned_model.md, "Slot order").

        ``generator`` (or an int seed) drives the random draws: the slot orders, the Gumbel normaliser's noise and,
        in training mode, attention dropout; None uses torch's global RNG. With ``config.centre_tasks`` the steps
        run on the task translated by its anchor (module docstring, "Coordinates")."""
        try:
            return self._steps(points, centroids, steps, reembed, generator, slot_order)
        finally:
            self._release_blocks()

    def _steps(self, points: Tensor, centroids: Tensor, steps: int | None, reembed: bool | None,
               generator: torch.Generator | int | None, slot_order: str | None) -> ClusteringOutput:
        """The body of ``forward``: checks, embedding, the steps, the labels."""
        config = self.config
        slot_order = check_choice(self.inference.slot_order if slot_order is None else slot_order, "slot_order",
                                  SLOT_ORDERS)
        points, centroids = check_points_centroids(points, centroids, d=config.d)
        if centroids.shape[1] != config.k:
            raise InvalidInput(f"centroids have k={centroids.shape[1]} but the model was built for k={config.k}")
        model_dtype = self.codes.dtype
        if points.dtype != model_dtype:
            raise InvalidInputType(
                f"points dtype {points.dtype} differs from the model dtype {model_dtype}; use model.to()")
        steps = self._resolve_steps(steps)
        _check_trajectory_memory(points, config.k, steps)
        reembed = config.reembed if reembed is None else bool(reembed)
        need_pattern = config.embedding == "none"  # d-only: assignments read from attn_xc's pattern
        generator = check_generator(generator, device=points.device)
        anchor, outside = None, None
        stream_points, current = points, centroids  # (b, n, d), (b, k, d): the coordinates the streams hold
        if config.centre_tasks:
            stream_points, current, anchor = centre_tasks(points, centroids)  # anchor (b, 1, d)
            hooked = self.hook_anchor(anchor)
            if hooked is not anchor:  # a patched anchor: translate by it instead
                anchor = hooked
                stream_points, current = points - anchor, centroids - anchor
        else:
            outside = check_raw_range(points, centroids, config.input_range)

        embed = partial(embed_points, stream_points, config.scratch_width, config.norm_slot)  # () -> (b, n, D)
        # kernel (interp.model.kernels.labelled): with nothing hooked on the embedding, the exact constructions carry
        # the points stream factored, [x; 0] + code table[label], and form the (b, n, D) stream only where needed
        factored = not need_pattern and not self.hook_points_embed.fwd_hooks and dispatch.labelled_stream(config)
        if factored:
            embed = partial(labelled.LabelledTokens.embedded, stream_points, config.d_model)  # () -> factored (b, n, D)

        nearest = partial(_nearest_centroids, _precise(stream_points))  # (b, k, d) -> (b, n)
        shuffle = slot_order == "shuffle"
        order = None  # (b, k): slot j holds the caller's centroid order[:, j] ("shuffle" only)

        def embed_slots(step: int) -> Tensor:
            """The centroid stream (b, k, D) of ``current`` (caller's order), in a fresh slot order if shuffling."""
            nonlocal order
            slots = current
            if shuffle:
                draws = uniform(current.shape[:2], generator, None, current.device)  # (b, k)
                order = self.blocks[step].hook_slot_order(draws.argsort(dim=1))  # (b, k)
                slots = current.gather(1, order[..., None].expand_as(current))  # (b, k, d)
            return embed_centroids(slots, self.codes, config.norm_slot)  # (b, k, D)

        points_stream = embed() if factored else self.hook_points_embed(embed())  # (b, n, D)
        centroids_stream = self.hook_centroids_embed(embed_slots(0))
        trajectory, labels_per_step, readouts = [centroids], [], []
        scratch = slice(config.d, config.d + config.scratch_width)
        points_attention = None  # (b, n, D): attn_xx's output on the embedded points, where steps reuse it
        for step in range(steps):
            if reembed and step > 0:
                points_stream = embed()  # (b, n, D)
                centroids_stream = embed_slots(step)  # (b, k, D)
            labels_per_step.append(nearest(current))  # (b, n): Lloyd's E-step on the step's input centroids
            block, weights = self.blocks[step], self._weights_for(step)
            step_args = (points_stream, centroids_stream, weights, need_pattern, generator)
            # a hook on the block or the embeddings keeps the reference step
            hooked = partial(_hooked, (*block.hook_points(), self.hook_points_embed, self.hook_centroids_embed))
            kernel_step = dispatch.block_step(config, stream_points, step == 0 or reembed, self.training, hooked)
            if not isinstance(points_stream, labelled.LabelledTokens) and not kernel_step:  # the reference step
                xx_hooked = partial(_hooked, (self.hook_points_embed, *block.points_attention_hooks()))
                if dispatch.reused_points_attention(config, reembed, block.attn_xx.dropping(), xx_hooked):
                    if points_attention is None:  # kernel: the first such step computes attn_xx, later ones reuse it
                        points_attention, _ = block.attn_xx(points_stream, points_stream, weights.attn_xx,
                                                            generator=generator)  # (b, n, D)
                    points_stream, centroids_stream, pattern = block(*step_args, attn_xx_out=points_attention)
                else:
                    points_stream, centroids_stream, pattern = block(*step_args)
            elif kernel_step:  # kernel: the whole step as one hand-derived forward and backward, from [x, 0]
                points_stream, centroids_stream, pattern = training_step.block_step(
                    block, stream_points, centroids_stream, weights, need_pattern, generator)
            else:  # kernel: the labelled step, which falls back to the block's reference step where it must
                points_stream, centroids_stream, pattern = labelled.labelled_step(block, *step_args)
            current = centroids_stream[..., : config.d]  # (b, k, d) in stream coordinates and slot order
            if need_pattern:  # the model's read-out of the assignment (ClusteringOutput.readout_trajectory)
                readout = pattern.argmax(dim=-1)  # (b, n) slots
            elif isinstance(points_stream, labelled.LabelledTokens):
                readout = points_stream.decode(scratch, self.codes)  # (b, n): per code row, gathered
            else:
                readout = decode_assignments(points_stream[..., scratch], self.codes)  # (b, n)
            if order is not None:  # back to the caller's order: slot j is centroid order[:, j]
                current = current.gather(1, order.argsort(dim=1)[..., None].expand_as(current))  # (b, k, d)
                readout = order.gather(1, readout)  # (b, n)
            readouts.append(readout)
            trajectory.append(current if anchor is None else current + anchor)
        # refused out of range only: non-finite centroids inside it are the model's own failure (training reports
        # them as TrainingDiverged), not bad input
        if outside is not None and not bool(torch.isfinite(trajectory[-1]).all()):
            low, high = config.input_range
            raise InvalidInput(f"points and centroids {outside}, and this model's centroids are not finite there "
                               f"(its scores overflow {points.dtype}); it was trained on [{low:g}, {high:g}]: map each "
                               "task into the unit cube first, as interp.InContextKMeans does")
        labels = torch.stack(labels_per_step, dim=1)  # (b, T, n)
        counts = torch.zeros(labels.shape[:2] + (config.k,), dtype=torch.int64, device=labels.device)
        counts.scatter_add_(2, labels, labels.new_ones(()).expand_as(labels))  # no (b, T, n) buffer of ones
        return ClusteringOutput(
            centroids=trajectory[-1],
            assignments=nearest(current),  # (b, n): the final E-step on the returned centroids
            centroid_trajectory=torch.stack(trajectory, dim=1),
            assignment_trajectory=labels,
            empty_clusters=counts == 0,
            readout_trajectory=torch.stack(readouts, dim=1),  # (b, T, n)
        )


def _check_trajectory_memory(points: Tensor, k: int, steps: int) -> None:
    """Refuse (``InsufficientMemory``) a call whose per-step trajectories alone exceed the available memory: the
    (b, T + 1, k, d) centroids and three (b, T, n) int64 label tensors (E-step labels, read-outs, their counts).
    Checked only above TRAJECTORY_CHECK_BYTES, where reading the available memory costs nothing next to the run."""
    b, n, d = points.shape
    nbytes = b * (steps + 1) * k * d * points.element_size() + 3 * 8 * b * steps * n
    if nbytes > TRAJECTORY_CHECK_BYTES:
        check_memory("model(points, centroids)", [MemoryNeed(
            "the per-step centroid and label trajectories", {"batch": b, "steps": steps, "n": n, "k": k}, nbytes)])


def _precise(points: Tensor) -> Tensor:
    """Points (b, n, d) in float64 for the E-step (float32 rounds near-ties of ||x - c||^2 differently from an exact
    nearest-centre rule in about one point in 10^4); as they are on MPS, which has no float64."""
    return points if points.device.type == "mps" else points.to(torch.float64)


def _nearest_centroids(points: Tensor, centroids: Tensor) -> Tensor:
    """Lloyd's E-step a_i = argmin_j ||x_i - c_j||^2, ties to the lowest index: points (b, n, d) (``_precise``),
    centroids (b, k, d) in stream coordinates -> (b, n) int64. What ``ClusteringOutput``'s labels mean."""
    return assign(points, centroids.to(points.dtype))


def _hooked(points: tuple[HookPoint, ...], permanent: bool = False) -> bool:
    """Whether any of these hook points holds a forward or backward hook (or, with ``permanent``, any PyTorch hook
    at all, a permanent one or one added to the module directly)."""
    if permanent:
        return any(point._forward_hooks or point._backward_hooks or point._forward_pre_hooks for point in points)
    return any(point.fwd_hooks or point.bwd_hooks for point in points)


def _steps_argument(model_args: tuple, kwargs: dict) -> int | None:
    if "steps" in kwargs:
        return kwargs["steps"]
    return model_args[2] if len(model_args) > 2 else None
