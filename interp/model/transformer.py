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
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn
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
from interp.model.cache import KMeansActivationCache
from interp.model.cache import run_with_cache as cached_run
from interp.model.config import SLOT_ORDERS, InferenceSettings, ModelConfig
from interp.model.embedding import centroid_codes, decode_assignments, embed_centroids, embed_points
from interp.model.kernels import dispatch, labelled, per_part, training_step
from interp.model.tl_config import TLConfig
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
            OutOfTrainingRange, stacklevel=8)  # model(...)'s caller: past _coordinates, _task, _steps, forward, torch
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
        # the numbers of clusters it is meant for (least, k): k only, unless a checkpoint trained on many says so
        # (``TrainConfig.k_least``); the forward runs any k' <= k, the estimator serves this range
        self.served_k: tuple[int, int] = (config.k, config.k)
        self.setup()

    # ----- structure -------------------------------------------------------------------------------
    @property
    def d_model(self) -> int:
        return self.config.d_model

    @property
    def cfg(self) -> TLConfig:
        """What TransformerLens code reads from ``model.cfg`` (``interp.model.tl_config``): ``n_layers`` the steps a
        call without ``steps`` runs, one head of width D per attention, no layer norm; built from ``config``,
        ``inference`` and where the model's tensors are, on each access."""
        return TLConfig.of(self.config, self.inference.steps or self.config.n_layers, self.codes.device,
                           self.codes.dtype)

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
            if dispatch.hooked(self.blocks[index].hook_points()):
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

    def setup(self) -> None:
        """HookedRootModule.setup (the names of the hook points), then every block bound to the weights its step
        uses (``Block.bind_weights``), which ``model.blocks[l].attn_xc.QK`` and ``.OV`` read."""
        super().setup()
        for step, block in enumerate(self.blocks):
            block.bind_weights(self.layers, 0 if self.config.shared_weights else step)

    def _step_count(self, steps: int | None) -> int:
        """The steps a call runs: ``steps`` (at most ``MAX_STEPS``), else the recommended or n_layers."""
        return (self.inference.steps or self.config.n_layers) if steps is None else check_steps(steps)

    def _resolve_steps(self, steps: int | None) -> int:
        """``_step_count``, with the blocks (hook points) for that many steps."""
        steps = self._step_count(steps)
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

    def run_with_cache(self, *model_args: Any, **kwargs: Any) -> tuple[ClusteringOutput, KMeansActivationCache]:
        """As HookedRootModule.run_with_cache, returning a ``KMeansActivationCache`` (``interp.model.cache``: the
        ``(name, layer)`` shorthand, stacks and decompositions over this run's steps); ``names_filter=None`` caches
        every hook point but the identity self-attentions' (b, n, n) scores and pattern (module docstring).
        ``incl_bwd=True`` also caches each hook's gradient, ``{name}_grad``, of ``loss(out)`` (a callable of the
        ``ClusteringOutput`` returning a scalar), by default the mean over tasks of ln Phi of the output centroids."""
        steps = self._resolve_steps(_steps_argument(model_args, kwargs))
        try:
            return cached_run(self, super().run_with_cache, steps, model_args, kwargs)
        finally:
            self._release_blocks()

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
        """Run ``steps`` clustering steps on points (b, n, d) from centroids (b, k', d); ``steps`` and ``slot_order``
        default to ``self.inference`` (n_layers steps, fixed order, unless a checkpoint recommends others).

        A model built for k centroid codes serves any k' <= k: the k' centroids take k' of its k codes (the first k'
        in the fixed order; a uniformly random k'-subset, in random order, when shuffling), and no token stands for
        the others, so every attention runs over the k' centroids the task has (docs/learned_model.md, "Any k up to
        the model's").

        ``slot_order="shuffle"``: at every embedding (every step of a re-embedding model, the first step otherwise)
        each task's centroids are put in a fresh uniformly random slot order pi (slot j holds centroid pi(j)), drawn
        from ``generator``; the step's centroids and labels are mapped back, so the output is in the caller's order.
        The streams and patterns a cache records are in slot order; ``blocks.{l}.hook_slot_order`` (b, k) holds pi.
        For a model equivariant to the slot order (d-only, slot-tied, the constructions) it equals "fixed" up to
        rounding; for the learned one-hot and binary models it removes the slot-specific part of the update on
        average (docs/learned_model.md, "Slot order").

        ``generator`` (or an int seed) drives the random draws: the slot orders, the Gumbel normaliser's noise and,
        in training mode, attention dropout; None uses torch's global RNG. With ``config.centre_tasks`` the steps
        run on the task translated by its anchor (module docstring, "Coordinates").

        A step with any hook on it runs the reference (``Block.forward``), the others the kernels
        ``kernels.dispatch`` picks (docs/hooks.md, "Hooks and the kernels"; ``dispatch.trace()`` lists them)."""
        try:
            return self._steps(points, centroids, steps, reembed, generator, slot_order)
        finally:
            self._release_blocks()

    def _steps(self, points: Tensor, centroids: Tensor, steps: int | None, reembed: bool | None,
               generator: torch.Generator | int | None, slot_order: str | None) -> ClusteringOutput:
        """The body of ``forward``: the inputs, then per step its embedding (step 0, and every step of a re-embedding
        model), Lloyd's E-step on its input centroids, the block step and the step's read-out; then the output."""
        task = self._task(points, centroids, steps, reembed, generator, slot_order)
        nearest = partial(_nearest_centroids, _precise(task.points))  # (b, k, d) -> (b, n)
        current = task.centroids  # (b, k, d): stream coordinates, the caller's order
        trajectory, labels, readouts = [task.input_centroids], [], []
        for step in range(task.steps):
            hooked = self._step_hooked(step)
            if step == 0 or task.reembed:
                streams = self._embed(task, current, step, hooked)
            labels.append(nearest(current))  # (b, n): Lloyd's E-step on the step's input centroids
            streams, pattern = self._step(task, step, streams, hooked)
            current, readout = self._decode(streams, pattern)  # (b, k, d), (b, n)
            readouts.append(readout)
            trajectory.append(current if task.anchor is None else current + task.anchor)
        _refuse_non_finite(task, trajectory[-1], self.config.input_range)
        return _output(trajectory, labels, readouts, nearest(current), current.shape[1])

    def _task(self, points: Tensor, centroids: Tensor, steps: int | None, reembed: bool | None,
              generator: torch.Generator | int | None, slot_order: str | None) -> _Task:
        """The forward's arguments checked (slot order, shapes, k, dtype, steps and their memory, generator) and its
        task in the coordinates the streams hold (``_coordinates``)."""
        config = self.config
        slot_order = check_choice(self.inference.slot_order if slot_order is None else slot_order, "slot_order",
                                  SLOT_ORDERS)
        points, centroids = check_points_centroids(points, centroids, d=config.d)
        if centroids.shape[1] > config.k:
            raise InvalidInput(f"centroids have k={centroids.shape[1]} but the model was built for k={config.k} "
                               f"centroid codes: it serves 1 to {config.k} centroids")
        if points.dtype != self.codes.dtype:
            raise InvalidInputType(
                f"points dtype {points.dtype} differs from the model dtype {self.codes.dtype}; use model.to()")
        steps = self._step_count(steps)
        _check_trajectory_memory(points, config.k, steps)  # before the blocks for that many steps are made
        self._ensure_blocks(steps)
        reembed = config.reembed if reembed is None else bool(reembed)
        generator = check_generator(generator, device=points.device)
        stream_points, stream_centroids, anchor, outside = self._coordinates(points, centroids)
        return _Task(stream_points, stream_centroids, centroids, anchor, outside, steps, reembed,
                     slot_order == "shuffle", generator)

    def _coordinates(self, points: Tensor, centroids: Tensor) -> tuple[Tensor, Tensor, Tensor | None, str | None]:
        """Points (b, n, d) and centroids (b, k, d) in the coordinates the streams hold, the anchor a (b, 1, d) or None,
        and where the input lies outside the training range or None. With ``config.centre_tasks``: x - a and c - a,
        a through ``hook_anchor`` (a patched anchor translates by itself); else the input, after
        ``check_raw_range``."""
        if not self.config.centre_tasks:
            return points, centroids, None, check_raw_range(points, centroids, self.config.input_range)
        centred_points, centred_centroids, anchor = centre_tasks(points, centroids)  # anchor (b, 1, d)
        hooked = self.hook_anchor(anchor)  # (b, 1, d)
        if hooked is anchor:
            return centred_points, centred_centroids, anchor, None
        return points - hooked, centroids - hooked, hooked, None

    def _step_hooked(self, step: int) -> bool:
        """Whether step ``step`` has a hook on it (``dispatch.hooked``: then it runs the reference): on its block's
        hook points or, for step 0, on the embedding's (the only step whose input passes through them)."""
        hook_points = self.blocks[step].hook_points()
        if step == 0:
            hook_points = (*hook_points, self.hook_anchor, self.hook_points_embed, self.hook_centroids_embed)
        return dispatch.hooked(hook_points)

    def _embed(self, task: _Task, current: Tensor, step: int, hooked: bool) -> _Streams:
        """Step ``step``'s embedding: the points [x; 0_e; (||x||^2)] (b, n, D), held labelled where an unhooked step
        may run that kernel (``dispatch.labelled_stream``), and the centroids ``current`` (b, k, d) as
        [c; code; (||c||^2)] (b, k, D), in a fresh slot order if shuffling; step 0's through the embedding hooks."""
        config = self.config
        if not hooked and dispatch.labelled_stream(config):
            points = labelled.LabelledTokens.embedded(task.points, config.d_model)  # factored (b, n, D)
        else:
            points = embed_points(task.points, config.scratch_width, config.norm_slot)  # (b, n, D)
            points = self.hook_points_embed(points) if step == 0 else points
        order, codes = self._slot_order(task, current, step)  # (b, k') or None; (k', e) or (b, k', e)
        slots = current if order is None else current.gather(1, order[..., None].expand_as(current))  # (b, k', d)
        centroids = embed_centroids(slots, codes, config.norm_slot)  # (b, k', D)
        centroids = self.hook_centroids_embed(centroids) if step == 0 else centroids
        return _Streams(points, centroids, order, codes)

    def _slot_order(self, task: _Task, current: Tensor, step: int) -> tuple[Tensor | None, Tensor]:
        """The order the k' centroids of ``current`` (b, k', d) take in the stream and their codes. Fixed order:
        None and the first k' codes (k', e). ``slot_order="shuffle"``: a uniformly random order pi of the k slots per
        task (slot j holds centroid pi(j); with k' < k, pi(j) >= k' leaves slot j empty), through
        ``blocks.{step}.hook_slot_order``; the stream holds the occupied slots in slot order: their centroids
        order (b, k') and their codes (b, k', e) ((k, e) when k' = k, every slot occupied)."""
        k_task = current.shape[1]
        if not task.shuffle:
            return None, self.codes[:k_task]  # (k', e)
        draws = uniform((current.shape[0], self.config.k), task.generator, None, current.device)  # (b, k)
        order = self.blocks[step].hook_slot_order(draws.argsort(dim=1))  # (b, k): slot j holds centroid pi(j)
        if k_task == self.config.k:
            return order, self.codes  # (b, k), (k, e)
        occupied = (order < k_task).nonzero()[:, 1].view(order.shape[0], k_task)  # (b, k'): the slots, ascending
        return order.gather(1, occupied), self.codes[occupied]  # (b, k'), (b, k', e)

    def _step(self, task: _Task, step: int, streams: _Streams, hooked: bool) -> tuple[_Streams, Tensor | None]:
        """Step ``step``'s block on ``streams`` through the path ``dispatch.step_path`` picks (a ``hooked`` step: the
        reference, ``Block.forward``): the new streams and, for a d-only model, attn_xc's pattern (b, n, k)."""
        block, weights = self.blocks[step], self._weights_for(step)
        need_pattern = self.config.embedding == "none"  # d-only: the read-out is attn_xc's pattern
        labelled_points = isinstance(streams.points, labelled.LabelledTokens)
        path = dispatch.step_path(self.config, labelled_points, task.points, step == 0 or task.reembed,
                                  self.training, hooked)
        args = (streams.centroids, weights, need_pattern, task.generator)
        if path == "training_step":  # its points stream is [x, 0]: the kernel reads x
            points, centroids, pattern = training_step.block_step(block, step, task.points, *args)
        elif path == "labelled_stream":
            points, centroids, pattern = labelled.labelled_step(block, step, streams.points, *args)
        elif path == dispatch.PER_PART:
            reused = self._reused_points_attention(task, step, streams.points, weights)  # (b, n, D) or None
            points, centroids, pattern = per_part.block_step(block, step, streams.points, *args, attn_xx_out=reused)
        else:
            dispatch.record(step, "block", dispatch.REFERENCE)
            points = streams.points.materialise() if labelled_points else streams.points  # (b, n, D)
            points, centroids, pattern = block(points, *args)
        return _Streams(points, centroids, streams.order, streams.codes), pattern

    def _reused_points_attention(self, task: _Task, step: int, points: Tensor, weights: LayerWeights) -> Tensor | None:
        """attn_xx's output (b, n, D) on the embedded points (b, n, D) for a step that reuses it
        (``dispatch.reused_points_attention``): computed by the first such step, then reused; else None."""
        attn_xx = self.blocks[step].attn_xx
        if not dispatch.reused_points_attention(self.config, task.reembed, attn_xx.dropping()):
            return None
        if task.points_attention is None:
            task.points_attention, _ = per_part.attend(attn_xx, points, points, weights.attn_xx, False, task.generator,
                                                       step, "attn_xx")
        else:
            dispatch.record(step, "attn_xx", "reused_points_attention")
        return task.points_attention

    def _decode(self, streams: _Streams, pattern: Tensor | None) -> tuple[Tensor, Tensor]:
        """The step's centroids (b, k, d) (stream coordinates) and the model's read-out (b, n) of each point's
        centroid, both in the caller's order: the arg-max of attn_xc's pattern (d-only), else the nearest centroid
        code of the points' scratch features (``decode_assignments``)."""
        config = self.config
        current = streams.centroids[..., : config.d]  # (b, k, d) in slot order
        scratch = slice(config.d, config.d + config.scratch_width)
        if config.embedding == "none":
            readout = pattern.argmax(dim=-1)  # (b, n) slots
        elif isinstance(streams.points, labelled.LabelledTokens):
            readout = streams.points.decode(scratch, streams.codes)  # (b, n): per code row, gathered
        else:
            readout = decode_assignments(streams.points[..., scratch], streams.codes)  # (b, n)
        if streams.order is not None:  # back to the caller's order: slot j is centroid order[:, j]
            current = current.gather(1, streams.order.argsort(dim=1)[..., None].expand_as(current))  # (b, k, d)
            readout = streams.order.gather(1, readout)  # (b, n)
        return current, readout


@dataclass
class _Task:
    """One forward's task as its steps see it (``KMeansTransformer._task``)."""

    points: Tensor  # (b, n, d): the coordinates the streams hold (x - a with ``centre_tasks``)
    centroids: Tensor  # (b, k, d): the initial centroids in those coordinates, the caller's order
    input_centroids: Tensor  # (b, k, d): the initial centroids as given (checked), the trajectory's first entry
    anchor: Tensor | None  # (b, 1, d): the translation (``centre_tasks``), else None
    outside: str | None  # where the input lies outside the training range (``check_raw_range``), else None
    steps: int
    reembed: bool
    shuffle: bool  # slot_order="shuffle": a fresh slot order at every embedding
    generator: torch.Generator | None
    points_attention: Tensor | None = None  # (b, n, D): attn_xx's output, where steps reuse it


@dataclass(frozen=True)
class _Streams:
    """The two token streams a step hands the next, and the slot order their centroids are in."""

    points: Tensor | labelled.LabelledTokens  # (b, n, D)
    centroids: Tensor  # (b, k', D), in slot order
    order: Tensor | None  # (b, k'): stream token j holds the caller's centroid order[:, j] ("shuffle"), else None
    codes: Tensor  # (k', e) or (b, k', e): the codes of the stream's centroid tokens


def _refuse_non_finite(task: _Task, centroids: Tensor, input_range: tuple[float, float] | None) -> None:
    """Refuse (``InvalidInput``) non-finite final centroids (b, k, d) computed from input outside the training range
    (``task.outside``); inside it they are the model's own failure (training reports them as TrainingDiverged)."""
    if task.outside is None or bool(torch.isfinite(centroids).all()):
        return
    low, high = input_range
    raise InvalidInput(f"points and centroids {task.outside}, and this model's centroids are not finite there "
                       f"(its scores overflow {task.points.dtype}); it was trained on [{low:g}, {high:g}]: map each "
                       "task into the unit cube first, as interp.InContextKMeans does")


def _output(trajectory: list[Tensor], labels_per_step: list[Tensor], readouts: list[Tensor], assignments: Tensor,
            k: int) -> ClusteringOutput:
    """The ``ClusteringOutput`` of a forward: its T + 1 centroids (b, k, d), T E-step labels and T read-outs (b, n),
    the final E-step ``assignments`` (b, n), and the clusters left empty at each step (b, T, k)."""
    labels = torch.stack(labels_per_step, dim=1)  # (b, T, n)
    counts = torch.zeros(labels.shape[:2] + (k,), dtype=torch.int64, device=labels.device)  # (b, T, k)
    counts.scatter_add_(2, labels, labels.new_ones(()).expand_as(labels))  # no (b, T, n) buffer of ones
    return ClusteringOutput(
        centroids=trajectory[-1],
        assignments=assignments,  # (b, n): the final E-step on the returned centroids
        centroid_trajectory=torch.stack(trajectory, dim=1),  # (b, T + 1, k, d)
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


def _steps_argument(model_args: tuple, kwargs: dict) -> int | None:
    if "steps" in kwargs:
        return kwargs["steps"]
    return model_args[2] if len(model_args) > 2 else None
