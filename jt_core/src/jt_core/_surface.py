"""A package's surface loaded on first use: each public name's module is imported only when the name is read, so
that importing the package stays cheap (PEP 562's module ``__getattr__``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_surface"]


def lazy_surface(
    package: str, surface: Mapping[str, str], names: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` whose public ``names`` each live in the module
    ``surface[name]`` of it (an empty module name: the name is a module of the package itself)."""

    def getattr_(name: str) -> Any:
        module = surface.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if not module:
            return importlib.import_module(f"{package}.{name}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def dir_() -> list[str]:
        return list(names)

    return getattr_, dir_
