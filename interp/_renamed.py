"""Renamed keyword arguments: the old spelling keeps working for a while, with a ``FutureWarning``.

The number of clustering steps has one name across the API and the command line, ``steps`` (``model(points,
centroids, steps=...)``, ``lloyd(points, centroids, steps=...)``, ``TransformerKMeans(steps=...)``, ``interp evaluate
--steps``); ``n_iter`` and ``n_steps`` are its old spellings.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

from interp._checks import InvalidInput


def renamed_keyword(old: str, new: str) -> Callable:
    """A decorator: ``function(..., old=v)`` runs as ``function(..., new=v)`` and warns (``FutureWarning``, shown to
    users by default); giving both is refused with ``InvalidInput`` naming them."""

    def wrap(function: Callable) -> Callable:
        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                if new in kwargs:
                    raise InvalidInput(f"give {new}= only: {old}= is its old name")
                warnings.warn(f"{function.__name__}({old}=...) is renamed {new}=...; {old}= will be removed",
                              FutureWarning, stacklevel=2)
                kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return call

    return wrap
