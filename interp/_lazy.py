"""Package exports imported on first use (PEP 562), so that importing a package costs nothing until a name is used."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module


def lazy_exports(package: str, exports: dict[str, str], namespace: dict) -> tuple[Callable, Callable]:
    """``__getattr__`` and ``__dir__`` for ``package``: each name of ``exports`` (name -> module) is imported from its
    module on first access and stored in ``namespace`` (the package's globals), so later accesses are plain lookups."""

    def __getattr__(name: str):
        if name in exports:
            value = getattr(import_module(exports[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
