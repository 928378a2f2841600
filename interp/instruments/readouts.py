"""Readouts: from an ActivationCache to per-step assignments, centroids and objective.

The same functions serve constructions and learned models: hard assignments decode the point stream's
scratch features (nearest centroid code; for ``embedding="none"`` the arg-max of attn_xc's pattern), soft
assignments are attn_xc's pattern, centroids are the first d features of the centroid stream.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

from interp._checks import InvalidInput
from interp.algorithms import kmeans_objective
from interp.model import KMeansTransformer, decode_assignments


def cached_steps(cache) -> int:
    """Number of steps T whose block outputs are in the cache."""
    names = cache.cache_dict if hasattr(cache, "cache_dict") else cache
    steps = {int(m.group(1)) for name in names if (m := re.match(r"blocks\.(\d+)\.hook_centroids_resid_post$", name))}
    if not steps:
        raise InvalidInput("the cache holds no blocks.{l}.hook_centroids_resid_post: run model.run_with_cache first")
    return max(steps) + 1


def hard_assignments(cache, model: KMeansTransformer) -> Tensor:
    """(b, T, n) int64: each step's assignment as the model itself carries it, read from the cache: the scratch slots
    of the points stream after the step decoded as the nearest centroid code, or attn_xc's arg-max for d-only models
    (``ClusteringOutput.readout_trajectory``). For the exact constructions this is Lloyd's assignment; for a learned
    model it is a read-out to compare with it (``assignment_trajectory``), not a clustering."""
    config = model.config
    labels = []
    for step in range(cached_steps(cache)):
        if config.embedding == "none":
            labels.append(cache[f"blocks.{step}.attn_xc.hook_pattern"].argmax(dim=-1))
        else:
            stream = cache[f"blocks.{step}.hook_points_resid_post"]  # (b, n, D)
            labels.append(decode_assignments(stream[..., config.d : config.d + config.scratch_width], model.codes))
    return torch.stack(labels, dim=1)


def soft_assignments(cache) -> Tensor:
    """(b, T, n, k): attn_xc's pattern per step, the soft assignment of every point to every centroid."""
    return torch.stack([cache[f"blocks.{step}.attn_xc.hook_pattern"] for step in range(cached_steps(cache))], dim=1)


def centroid_trajectory(cache, model: KMeansTransformer, init: Tensor) -> Tensor:
    """(b, T + 1, k, d): the initial centroids, then the first d features of the centroid stream per step, shifted
    back by the task's anchor (``hook_anchor``, zero for unit-cube tasks) when the model centres its tasks."""
    d = model.config.d
    anchor = cache["hook_anchor"] if "hook_anchor" in cache.cache_dict else 0  # (b, 1, d) or 0
    steps = [cache[f"blocks.{step}.hook_centroids_resid_post"][..., :d] + anchor for step in range(cached_steps(cache))]
    return torch.stack([init, *steps], dim=1)


def objective_trajectory(points: Tensor, trajectory: Tensor) -> Tensor:
    """(b, T + 1): the k-means objective (a sum over points) after every step of a centroid trajectory."""
    return torch.stack([kmeans_objective(points, trajectory[:, t]) for t in range(trajectory.shape[1])], dim=1)
