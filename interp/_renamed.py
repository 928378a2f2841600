"""Renamed keyword arguments and classes: the old spelling keeps working for a while, with a ``FutureWarning``.

The number of clustering steps has one name across the API and the command line, ``steps`` (``model(points,
centroids, steps=...)``, ``lloyd(points, centroids, steps=...)``, ``InContextKMeans(steps=...)``, ``interp evaluate
--steps``); ``n_iter`` and ``n_steps`` are its old spellings.

The scikit-learn estimator is ``InContextKMeans`` (k-means computed in context by a transformer), distinct from the
model it runs, ``KMeansTransformer``; ``TransformerKMeans`` is its old name (:func:`renamed_class`).
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


def renamed_class(cls: type, old: str) -> type:
    """A subclass of ``cls`` named ``old`` whose construction warns (``FutureWarning``) that ``old`` is renamed
    ``cls.__name__``, and otherwise runs as ``cls``. Its ``__init__`` keeps the signature of ``cls.__init__``
    (``functools.wraps``), so scikit-learn's ``get_params`` and ``clone`` see the same parameters (a clone of the old
    name is built under the old name, and warns again)."""

    @functools.wraps(cls.__init__)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        warnings.warn(f"{old} was renamed {cls.__name__}; the old name will be removed", FutureWarning, stacklevel=2)
        cls.__init__(self, *args, **kwargs)

    __init__.__qualname__ = f"{old}.__init__"
    doc = f"Deprecated: the old name of :class:`{cls.__name__}` (a ``FutureWarning``; to be removed)."
    return type(old, (cls,), {"__init__": __init__, "__doc__": doc, "__module__": cls.__module__})
