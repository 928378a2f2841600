"""KMeansTransformer: a TransformerLens HookedRootModule whose layers are clustering steps (paper 1; paper 2, Eq. 4).

``model(points, centroids)`` takes points (b, n, d) and initial centroids (b, k, d) and returns a
:class:`~interp.result.ClusteringOutput`. Per step l the cache has ``blocks.{l}.*``,
also when one shared layer runs T steps (blocks are added on demand and share the layer's weights).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from transformer_lens.ActivationCache import ActivationCache
from transformer_lens.HookedRootModule import HookedRootModule
from transformer_lens.hook_points import HookPoint

from interp._checks import InvalidInput, InvalidInputType, check_points_centroids, check_positive_int
from interp.model.block import Block, LayerWeights
from interp.model.config import ModelConfig
from interp.model.embedding import centroid_codes, decode_assignments, embed_centroids, embed_points
from interp.result import ClusteringOutput


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
        self.hook_points_embed = HookPoint()  # (b, n, D)
        self.hook_centroids_embed = HookPoint()  # (b, k, D)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layers)])
        self.setup()

    # ----- structure -------------------------------------------------------------------------------
    @property
    def d_model(self) -> int:
        return self.config.d_model

    def _ensure_blocks(self, steps: int) -> None:
        """Add hook-holding blocks up to ``steps`` (shared weights only), then re-run setup()."""
        if steps <= len(self.blocks):
            return
        if not self.config.shared_weights:
            raise InvalidInput(
                f"steps={steps} exceeds n_layers={self.config.n_layers} of a model without shared weights"
            )
        reference = next(self.parameters())
        for _ in range(steps - len(self.blocks)):
            block = Block(self.config).to(device=reference.device, dtype=reference.dtype)
            block.train(self.training)
            self.blocks.append(block)
        self.setup()

    def _weights_for(self, step: int) -> LayerWeights:
        return self.layers[0 if self.config.shared_weights else step]

    def _resolve_steps(self, steps: int | None) -> int:
        steps = self.config.n_layers if steps is None else check_positive_int(steps, "steps")
        self._ensure_blocks(steps)
        return steps

    # ----- TransformerLens entry points that must see every step's hook points -----------------------
    def run_with_cache(self, *model_args: Any, **kwargs: Any) -> tuple[ClusteringOutput, ActivationCache]:
        """As HookedRootModule.run_with_cache, returning an ``ActivationCache``."""
        self._resolve_steps(_steps_argument(model_args, kwargs))
        out, cache_dict = super().run_with_cache(*model_args, **kwargs)
        return out, ActivationCache(cache_dict, self)

    def run_with_hooks(self, *model_args: Any, **kwargs: Any) -> ClusteringOutput:
        self._resolve_steps(_steps_argument(model_args, kwargs))
        return super().run_with_hooks(*model_args, **kwargs)

    # ----- forward -----------------------------------------------------------------------------------
    def forward(
        self, points: Tensor, centroids: Tensor, steps: int | None = None, reembed: bool | None = None,
        generator: torch.Generator | int | None = None,
    ) -> ClusteringOutput:
        """Run ``steps`` clustering steps (default n_layers) on points (b, n, d) from centroids (b, k, d).

        ``generator`` (or an int seed) drives the random draws: the Gumbel normaliser's noise and, in training mode,
        attention dropout; None uses torch's global RNG."""
        config = self.config
        points, centroids = check_points_centroids(points, centroids, d=config.d)
        if centroids.shape[1] != config.k:
            raise InvalidInput(f"centroids have k={centroids.shape[1]} but the model was built for k={config.k}")
        model_dtype = self.codes.dtype
        if points.dtype != model_dtype:
            raise InvalidInputType(f"points dtype {points.dtype} differs from the model dtype {model_dtype}; use model.to()")
        steps = self._resolve_steps(steps)
        reembed = config.reembed if reembed is None else bool(reembed)
        need_pattern = config.embedding == "none"  # d-only: assignments read from attn_xc's pattern
        if isinstance(generator, int) and not isinstance(generator, bool):
            generator = torch.Generator(device=points.device).manual_seed(generator)

        points_stream = self.hook_points_embed(embed_points(points, config.scratch_width, config.norm_slot))
        centroids_stream = self.hook_centroids_embed(embed_centroids(centroids, self.codes, config.norm_slot))
        trajectory, labels_per_step = [centroids], []
        for step in range(steps):
            if reembed and step > 0:
                points_stream = embed_points(points, config.scratch_width, config.norm_slot)  # (b, n, D)
                centroids_stream = embed_centroids(trajectory[-1], self.codes, config.norm_slot)  # (b, k, D)
            points_stream, centroids_stream, pattern = self.blocks[step](
                points_stream, centroids_stream, self._weights_for(step), need_pattern, generator
            )
            trajectory.append(centroids_stream[..., : config.d])
            if need_pattern:
                labels_per_step.append(pattern.argmax(dim=-1))  # (b, n)
            else:
                scratch = points_stream[..., config.d : config.d + config.scratch_width]  # (b, n, e)
                labels_per_step.append(decode_assignments(scratch, self.codes))  # (b, n)
        labels = torch.stack(labels_per_step, dim=1)  # (b, T, n)
        counts = torch.zeros(labels.shape[:2] + (config.k,), dtype=torch.int64, device=labels.device)
        counts.scatter_add_(2, labels, torch.ones_like(labels))
        return ClusteringOutput(
            centroids=trajectory[-1],
            assignments=labels[:, -1],
            centroid_trajectory=torch.stack(trajectory, dim=1),
            assignment_trajectory=labels,
            empty_clusters=counts == 0,
        )


def _steps_argument(model_args: tuple, kwargs: dict) -> int | None:
    if "steps" in kwargs:
        return kwargs["steps"]
    return model_args[2] if len(model_args) > 2 else None
