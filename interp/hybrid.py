"""Hybrid inference: a model's learned steps, then Lloyd's iterations from where they end.

    c <- Lloyd^L(F_theta^T(X, c0))

After a learned model's 20 steps its centroids are not the means of their cells; one Lloyd step moves every centroid
to its cell's mean (on the hybrid study's validation tasks it lowers best's mean ln Phi: analyses/RESULTS.md,
"Hybrid inference"; docs/learned_model.md). ``hybrid`` is the one
implementation of "T learned steps, then L Lloyd steps": ``InContextKMeans``, ``interp evaluate`` and
``interp compare`` call it, and a checkpoint recommends its L in its ``inference`` metadata (``lloyd_steps``;
``InferenceSettings``). ``model(points, centroids)`` stays the transformer alone.
"""

from __future__ import annotations

import torch
from torch import Tensor

from interp._checks import InvalidInput, InvalidInputType, check_points_centroids, check_steps
from interp.algorithms import EMPTY_RULES, assign, check_precise, lloyd
from interp.primitives import centre_tasks
from interp.result import ClusteringOutput
from interp.tasks import untile, widen_task


def resolve_lloyd_steps(model, lloyd_steps: int | None) -> int:
    """L for ``model``: ``lloyd_steps`` checked (an int from 0 to ``MAX_STEPS``), or None: the model's recommendation
    (``model.inference.lloyd_steps``)."""
    if lloyd_steps is None:
        return model.inference.lloyd_steps
    return check_steps(lloyd_steps, "lloyd_steps", minimum=0)


def hybrid(model, points: Tensor, centroids: Tensor, steps: int | None = None, lloyd_steps: int | None = None, *,
           slot_order: str | None = None, generator: torch.Generator | int | None = None,
           reembed: bool | None = None, empty: str = "sklearn") -> ClusteringOutput:
    """T steps of a transformer, then L Lloyd iterations: c <- Lloyd^L(F_theta^T(X, c0)).

    Parameters
    ----------
    model : KMeansTransformer
        The model F_theta (a learned checkpoint or a construction), in evaluation mode for a deterministic run.
    points : Tensor
        X, (b, n, d') float32 or float64 with d' <= ``model.config.d``. Narrower tasks are zero-padded to the
        model's d for its steps (as ``InContextKMeans`` pads them) and its centroids cut back to d' (the padding
        discarded) before Lloyd's steps.
    centroids : Tensor
        c0, (b, k, d'), the start, in the points' dtype.
    steps : int or None
        T, the model's steps; None: its recommendation (``model.inference.steps``, else ``n_layers``).
    lloyd_steps : int or None
        L, 0 to ``MAX_STEPS``; None: the model's recommendation (``model.inference.lloyd_steps``).
    slot_order, generator, reembed
        Passed to ``model(...)`` (``KMeansTransformer.forward``).
    empty : str
        Lloyd's empty-cluster rule (``interp.algorithms.lloyd``; default scikit-learn's relocation).

    Returns
    -------
    ClusteringOutput
        In the points' dtype and width. ``centroid_trajectory`` (b, T + L + 1, k, d'): c0, the model's T steps, then
        Lloyd's L; ``assignment_trajectory`` and ``empty_clusters`` (b, T + L, ...): the E-step on each step's input
        centroids; ``assignments``: the nearest returned centroid; ``readout_trajectory``: the model's own read-outs
        of its T steps (Lloyd's steps have none). With L = 0 and tasks of the model's width and dtype this is
        ``model(points, centroids, ...)``'s output itself.

    Raises
    ------
    InvalidInput, InvalidInputType
        A bad ``lloyd_steps`` (one line naming it), tasks wider than the model, half-precision tasks, and whatever
        ``model(...)`` refuses.
    """
    from interp.model import KMeansTransformer

    if not isinstance(model, KMeansTransformer):
        raise InvalidInputType(f"model must be a KMeansTransformer, got {type(model).__name__}")
    lloyd_steps = resolve_lloyd_steps(model, lloyd_steps)
    if empty not in EMPTY_RULES:
        raise InvalidInput(f"empty must be one of {EMPTY_RULES}, got {empty!r}")
    points, centroids = check_points_centroids(points, centroids)
    check_precise(points)
    width, model_width, dtype = points.shape[2], model.config.d, model.codes.dtype
    if width > model_width:
        raise InvalidInput(f"points have d={width} but the model was built for d={model_width} (narrower tasks are "
                           "zero-padded, wider ones cannot be served)")
    narrow = model.inference.narrow_tasks  # how a narrower task fills the model's width: "pad" or "tile"
    model_points = widen_task(points.to(dtype), model_width, narrow)  # (b, n, d): the same tensor at the model's d
    model_centroids = widen_task(centroids.to(dtype), model_width, narrow)  # (b, k, d)
    learned = model(model_points, model_centroids, steps=steps, reembed=reembed, generator=generator,
                    slot_order=slot_order)
    if width < model_width:
        learned = _narrowed(learned, points, width, narrow)
    if lloyd_steps == 0 and learned.centroids.dtype == points.dtype:
        return learned
    learned_trajectory = learned.centroid_trajectory.to(points.dtype)  # (b, T + 1, k, d')
    if lloyd_steps == 0:
        return ClusteringOutput(centroids=learned_trajectory[:, -1], assignments=learned.assignments,
                                centroid_trajectory=learned_trajectory,
                                assignment_trajectory=learned.assignment_trajectory,
                                empty_clusters=learned.empty_clusters, readout_trajectory=learned.readout_trajectory)
    refined = lloyd(points, learned_trajectory[:, -1], lloyd_steps, empty=empty)
    return ClusteringOutput(
        centroids=refined.centroids,  # (b, k, d')
        assignments=refined.assignments,  # (b, n): nearest of the returned centroids
        centroid_trajectory=torch.cat([learned_trajectory, refined.centroid_trajectory[:, 1:]], dim=1),
        assignment_trajectory=torch.cat([learned.assignment_trajectory, refined.assignment_trajectory], dim=1),
        empty_clusters=torch.cat([learned.empty_clusters, refined.empty_clusters], dim=1),
        readout_trajectory=learned.readout_trajectory,  # (b, T, n): the model's steps only
    )


def _narrowed(output: ClusteringOutput, points: Tensor, width: int, narrow: str = "pad") -> ClusteringOutput:
    """A widened run's output on the tasks' own d' = ``width`` coordinates: the centroids cut to them (padded) or the
    mean of each coordinate's copies (tiled, ``interp.tasks.untile``), and the E-step fields recomputed from them on
    ``points`` (b, n, d') (the model's other coordinates no longer count)."""
    full = output.centroid_trajectory  # (b, T + 1, k, d)
    trajectory = (untile(full, width) if narrow == "tile" else full[..., :width]).to(points.dtype)  # (b, T+1, k, d')
    centred, _, anchor = centre_tasks(points, trajectory[:, 0])  # (b, n, d'), _, (b, 1, d')
    k = trajectory.shape[2]
    labels = torch.stack([assign(centred, trajectory[:, t] - anchor) for t in range(trajectory.shape[1] - 1)],
                         dim=1)  # (b, T, n)
    counts = torch.zeros(labels.shape[:2] + (k,), dtype=torch.int64, device=labels.device)  # (b, T, k)
    counts.scatter_add_(2, labels, torch.ones_like(labels))
    return ClusteringOutput(centroids=trajectory[:, -1], assignments=assign(centred, trajectory[:, -1] - anchor),
                            centroid_trajectory=trajectory, assignment_trajectory=labels, empty_clusters=counts == 0,
                            readout_trajectory=output.readout_trajectory)
