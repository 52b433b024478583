"""Calling a function by name: the arguments it takes by keyword, and a call with only those.

jt calls every hook and contract method with the arguments its signature names and no others, so that a method can
gain arguments without breaking the plugins that override it (the compatibility rule of `jt_core.plugin`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

__all__ = ["call_with_names", "named_parameters"]


def call_with_names(function: Any, arguments: Mapping[str, Any]) -> Any:
    """``function`` called with the ``arguments`` it names (all of them when it takes ``**kwargs``)."""
    names, takes_any = named_parameters(getattr(function, "__func__", function))
    return function(**(arguments if takes_any else {n: v for n, v in arguments.items() if n in names}))


@functools.lru_cache(maxsize=1024)
def named_parameters(function: Any) -> tuple[frozenset[str], bool]:
    """The names ``function`` takes by keyword, and whether it takes any (``**kwargs``)."""
    parameters = inspect.signature(function).parameters.values()
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return (
        frozenset(p.name for p in parameters if p.kind in keyword),
        any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters),
    )
