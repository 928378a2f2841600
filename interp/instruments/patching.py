"""Activation patching and ablations (TransformerLens ``run_with_hooks``).

* ``patch_run``: run the model on a *corrupted* start (other initial centroids) while overwriting one
  activation with its value from the *clean* run. For the exact construction, patching the clean assignment
  slots of ``blocks.{l}.hook_points_resid_post`` restores the clean centroids from layer l on exactly (the
  centre update reads only points and assignments, paper 1 Thm 2.1).
* ``patching_sweep``: per layer and per site (assignment slots, centroid stream, each attention's output), the
  fraction of the clean-vs-corrupted objective gap that the patch restores.
* ``ablation_sweep``: zero- and mean-ablation of each attention's output, effect on the objective.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from interp._checks import InvalidInput, check_choice, check_points_centroids, check_positive_int
from interp.algorithms import log_objective
from interp.model import KMeansTransformer

ATTENTIONS = ("attn_xc", "attn_xx", "attn_cx", "attn_cc")


@dataclass(frozen=True)
class PatchEffect:
    """Mean log objective after the run, and the fraction of the clean/corrupted gap a patch restores."""

    site: str  # hook name that was patched or ablated
    layer: int
    kind: str  # "assignments", "centroids", an attention name, or "zero:<attn>" / "mean:<attn>"
    log_objective: float
    restored: float  # (corrupted - patched) / (corrupted - clean); 1 = fully restored, 0 = no effect


def _site(model: KMeansTransformer, layer: int, kind: str) -> tuple[str, slice]:
    """Hook name and feature slice of a patch site."""
    config = model.config
    if kind == "assignments":
        if config.embedding == "none":
            return f"blocks.{layer}.attn_xc.hook_out", slice(None)
        return f"blocks.{layer}.hook_points_resid_post", slice(config.d, config.d + config.scratch_width)
    if kind == "centroids":
        return f"blocks.{layer}.hook_centroids_resid_post", slice(None)
    check_choice(kind, "kind", ("assignments", "centroids") + ATTENTIONS)
    return f"blocks.{layer}.{kind}.hook_out", slice(None)


def patch_run(model: KMeansTransformer, points: Tensor, corrupted_init: Tensor, clean_cache, layer: int,
              kind: str = "assignments", steps: int | None = None):
    """Run from ``corrupted_init`` with the site (layer, kind) overwritten by its value in ``clean_cache``."""
    points, corrupted_init = check_points_centroids(points, corrupted_init, d=model.config.d)
    name, features = _site(model, layer, kind)
    if name not in clean_cache.cache_dict:
        raise InvalidInput(f"the clean cache has no {name}: run the clean model with at least {layer + 1} steps")
    clean_value = clean_cache[name]

    def overwrite(activation: Tensor, hook) -> Tensor:
        patched = activation.clone()
        patched[..., features] = clean_value[..., features]
        return patched

    return model.run_with_hooks(points, corrupted_init, steps=steps, fwd_hooks=[(name, overwrite)], slot_order="fixed")


def collapsed_init(init: Tensor, jitter: float = 0.01, seed: int = 0) -> Tensor:
    """A corrupted start: every centroid at the first one, plus small seeded jitter (b, k, d). One step from here is
    far worse than from ``init``, so the clean/corrupted gap that patches are scored against is large."""
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(init.shape, generator=generator, dtype=init.dtype)
    return init[:, :1].expand_as(init) + jitter * noise


def _mean_log_objective(points: Tensor, centroids: Tensor) -> float:
    return log_objective(points, centroids).mean().item()


@torch.no_grad()
def patching_sweep(model: KMeansTransformer, points: Tensor, clean_init: Tensor, corrupted_init: Tensor,
                   steps: int | None = None, kinds: tuple[str, ...] = ("assignments", "centroids") + ATTENTIONS
                   ) -> list[PatchEffect]:
    """Every (layer, kind) patch from the clean run into the corrupted run, scored by the final objective."""
    steps = model.config.n_layers if steps is None else check_positive_int(steps, "steps")
    clean, cache = model.run_with_cache(points, clean_init, steps=steps, slot_order="fixed")
    corrupted = model(points, corrupted_init, steps=steps, slot_order="fixed")
    clean_value = _mean_log_objective(points, clean.centroids)
    corrupted_value = _mean_log_objective(points, corrupted.centroids)
    gap = corrupted_value - clean_value
    effects = []
    for layer in range(steps):
        for kind in kinds:
            out = patch_run(model, points, corrupted_init, cache, layer, kind, steps)
            value = _mean_log_objective(points, out.centroids)
            restored = (corrupted_value - value) / gap if gap != 0 else float("nan")
            effects.append(PatchEffect(_site(model, layer, kind)[0], layer, kind, value, restored))
    return effects


@torch.no_grad()
def ablation_sweep(model: KMeansTransformer, points: Tensor, init: Tensor, steps: int | None = None) -> list[dict]:
    """Zero- and mean-ablate each attention's output at every step; rows {attention, ablation, log_objective,
    change} where change = ablated - intact mean log objective (positive = the attention was helping)."""
    points, init = check_points_centroids(points, init, d=model.config.d)
    steps = model.config.n_layers if steps is None else check_positive_int(steps, "steps")
    intact = _mean_log_objective(points, model(points, init, steps=steps, slot_order="fixed").centroids)
    rows = [{"attention": "none", "ablation": "intact", "log_objective": intact, "change": 0.0}]
    for attention in ATTENTIONS:
        for ablation in ("zero", "mean"):
            def ablate(activation: Tensor, hook) -> Tensor:
                if ablation == "zero":
                    return torch.zeros_like(activation)
                return activation.mean(dim=(0, 1), keepdim=True).expand_as(activation)

            hooks = [(f"blocks.{step}.{attention}.hook_out", ablate) for step in range(steps)]
            ablated = model.run_with_hooks(points, init, steps=steps, fwd_hooks=hooks,
                                           slot_order="fixed").centroids  # (b, k, d)
            value = _mean_log_objective(points, ablated)
            rows.append({"attention": attention, "ablation": ablation, "log_objective": value,
                         "change": value - intact})
    return rows
