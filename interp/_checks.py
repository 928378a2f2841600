"""Input validation at the public boundary: clear errors that name the argument.

Every check of what a user passed raises :class:`InvalidInput` (a ``ValueError``) or :class:`InvalidInputType`
(also a ``TypeError``), so the command line can print exactly these as one line and exit 2, while any other
exception, an internal bug, keeps its traceback.
"""

from __future__ import annotations

import torch
from torch import Tensor


class InvalidInput(ValueError):
    """A value passed by the user is out of its allowed range or inconsistent with another one."""


class InvalidInputType(InvalidInput, TypeError):
    """A value passed by the user has the wrong type."""


def check_float_tensor(value: object, name: str, ndim: int, shape_hint: str) -> Tensor:
    """Raise TypeError/ValueError unless ``value`` is a finite, non-empty floating tensor of rank ``ndim``."""
    if not isinstance(value, Tensor):
        raise InvalidInputType(f"{name} must be a torch.Tensor of shape {shape_hint}, got {type(value).__name__}")
    if not value.is_floating_point():
        raise InvalidInputType(f"{name} must have a floating dtype (float32 or float64), got {value.dtype}")
    if value.ndim != ndim:
        raise InvalidInput(f"{name} must have shape {shape_hint} (rank {ndim}), got shape {tuple(value.shape)}")
    if value.numel() == 0:
        raise InvalidInput(f"{name} must not be empty, got shape {tuple(value.shape)}")
    if not torch.isfinite(value).all():
        raise InvalidInput(f"{name} contains NaN or inf values")
    return value


def check_points_centroids(
    points: object, centroids: object, d: int | None = None, k_at_most_n: bool = True
) -> tuple[Tensor, Tensor]:
    """Validate a batch of tasks: points (b, n, d) and centroids (b, k, d), with k <= n unless relaxed
    (objectives may be evaluated at any centroids)."""
    points = check_float_tensor(points, "points", 3, "(batch, n, d)")
    centroids = check_float_tensor(centroids, "centroids", 3, "(batch, k, d)")
    if centroids.shape[0] != points.shape[0]:
        raise InvalidInput(
            f"centroids batch size {centroids.shape[0]} does not match points batch size {points.shape[0]}"
        )
    if centroids.shape[2] != points.shape[2]:
        raise InvalidInput(f"centroids have d={centroids.shape[2]} but points have d={points.shape[2]}")
    if k_at_most_n and centroids.shape[1] > points.shape[1]:
        raise InvalidInput(f"k={centroids.shape[1]} centroids exceed n={points.shape[1]} points")
    if centroids.dtype != points.dtype:
        raise InvalidInputType(f"centroids dtype {centroids.dtype} differs from points dtype {points.dtype}")
    if d is not None and points.shape[2] != d:
        raise InvalidInput(f"points have d={points.shape[2]} but the model was built for d={d}")
    return points, centroids


def check_positive_int(value: object, name: str, minimum: int = 1) -> int:
    """Raise unless ``value`` is an int >= ``minimum`` (bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputType(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise InvalidInput(f"{name} must be >= {minimum}, got {value}")
    return value


def check_choice(value: object, name: str, choices: tuple[str, ...]) -> str:
    """Raise ValueError unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise InvalidInput(f"{name} must be one of {choices}, got {value!r}")
    return value  # type: ignore[return-value]
