"""What jt checks when a plugin registers a backend, launcher or dialect: that it fills its role
(`contract_problems`), and which names of earlier contracts it still uses (`retired_uses`).

As pluggy compares a hook implementation's arguments with its spec at ``register``, jt compares every override of a
contract method with the role's own signature, and the role's class attributes with their types, when the plugin
registers the component, not when it is first used: a plugin whose component breaks its role is refused as a whole.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import typing
from collections.abc import Mapping
from typing import Any, ClassVar

from jt_core.errors import short_repr
from jt_core.plugin.retired import Retired, sets_attribute
from jt_core.plugin.roles import (
    RETIRED_ATTRIBUTES,
    RETIRED_PARAMETERS,
    ROLES,
    contract_methods,
    keeps_default,
    role_of,
)
from jt_core.plugin.signatures import named_parameters

__all__ = [
    "PARAMETER_NAME_CUTOFF",
    "contract_attributes",
    "contract_problems",
    "retired_attributes",
    "retired_uses",
]


@functools.cache
def contract_attributes(role: type) -> Mapping[str, tuple[Any, bool]]:
    """The class attributes of ``role``, each with its type and whether a component must set it (the role gives it
    no value)."""
    hints = typing.get_type_hints(role)
    return {
        name: (typing.get_args(hint)[0] if typing.get_origin(hint) is ClassVar else hint, name not in vars(role))
        for name, hint in hints.items()
    }


def _fits(value: Any, kind: Any) -> bool:
    """Whether ``value`` is of the attribute type ``kind`` (``str``: a non-empty one; ``int``: not a bool;
    ``tuple[X, ...]``: of ``X`` items)."""
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        return isinstance(value, tuple) and all(_fits(v, item) for v in value)
    if kind is str:
        return isinstance(value, str) and value != ""
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _kind_text(kind: Any) -> str:
    """An attribute type in words (``"a non-empty string"``, ``"an int"``, ``"a tuple of non-empty strings"``)."""
    if typing.get_origin(kind) is tuple:
        item = _kind_text(typing.get_args(kind)[0]).split(" ", 1)[1]
        return f"a tuple of {item}s"
    if kind is str:
        return "a non-empty string"
    name = getattr(kind, "__name__", str(kind))
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def contract_problems(component: Any, registered_for: str | None = None) -> list[str]:
    """What keeps ``component`` from filling its role, checked when its plugin registers it: each problem as a
    clause that names the attribute or method, what is wrong and the fix; empty when it keeps the contract.

    Checked are the role's class attributes (`contract_attributes`: present, of their type), the platform it
    serves against the one it was registered for, and every contract method it overrides
    (`contract_methods`): each parameter it takes must be one jt offers the method, or have a default, or be
    ``*args`` / ``**kwargs`` (it may take fewer than jt offers). Retired names (`retired_uses`) are left to
    the caller.

    Args:
        component: A backend, launcher or dialect.
        registered_for: The platform the registration hook was asked for, or ``None`` when it was asked for every
            platform (or did not take the platform).
    """
    role = role_of(component)
    if role is None:
        return [f"is not a {' or '.join(r.__name__ for r in ROLES)}: subclass the role it fills (jt_core.plugin)"]
    problems = []
    for attribute, (kind, _) in contract_attributes(role).items():
        value = getattr(component, attribute, _UNSET)
        if value is _UNSET:
            problems.append(
                f"does not set {attribute}, {_kind_text(kind)} every {role.__name__} has: set it in the class body"
            )
        elif not _fits(value, kind):
            problems.append(
                f"sets {attribute} = {short_repr(value)}, which is not {_kind_text(kind)}: make it {_kind_text(kind)}"
            )
        elif attribute == "platform" and registered_for is not None and value != registered_for:
            problems.append(
                f"serves platform {value!r} but was returned when jt asked for platform {registered_for!r}: return "
                f"it only when asked for {value!r} (or for every platform, None), or set platform = "
                f"{registered_for!r}"
            )
    retired = RETIRED_PARAMETERS.get(role, {})
    for method, offered in contract_methods(role).items():
        problems += _signature_problems(component, role, method, offered, retired.get(method, {}))
    return problems


def _signature_problems(
    component: Any, role: type, method: str, offered: tuple[str, ...], retired: Mapping[str, Retired]
) -> list[str]:
    """What is wrong with ``component``'s override of a contract method: parameters jt cannot fill by name."""
    if keeps_default(component, method):
        return []
    own = getattr(component, method)
    if not callable(own):
        listed = ", ".join(offered)
        return [
            f"sets {method} = {short_repr(own)}, which is not a method: jt calls {role.__name__}.{method}({listed}); "
            "define it as a method"
        ]
    try:
        required = _required_parameters(own)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check against
        return []
    problems = []
    listed = ", ".join(offered) if offered else "no arguments"
    for name, positional_only in required:
        if name in retired or (name in offered and not positional_only):
            continue
        if positional_only:
            problems.append(
                f"has {method}{inspect.signature(own)}, whose parameter {name!r} is positional-only, but jt passes "
                f"{role.__name__}.{method}'s arguments by name ({listed}): drop the '/'"
            )
            continue
        close = [o for o in offered if o.startswith(name)] or difflib.get_close_matches(
            name, offered, n=1, cutoff=PARAMETER_NAME_CUTOFF
        )
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.append(
            f"has {method}{inspect.signature(own)}, whose parameter {name!r} jt does not offer{hint}: jt offers "
            f"{role.__name__}.{method} {'the arguments ' if offered else ''}{listed}. Rename the parameter to "
            f"{'one of those' if offered else 'nothing'}, give it a default, or drop it"
        )
    return problems


def _required_parameters(function: Any) -> list[tuple[str, bool]]:
    """The parameters of ``function`` jt would have to fill (no default, neither ``*args`` nor ``**kwargs``), each
    with whether it is positional-only.

    Read from the code of a plain function or method: every override is checked when its plugin registers, and
    ``inspect.signature`` took 1.5-2 ms over the 19 overrides of a CPU call's components on a 2-core host (this,
    0.13-0.25 ms).

    Raises:
        TypeError, ValueError: Where no signature can be had (a builtin).
    """
    plain = getattr(function, "__func__", function)
    if not inspect.isfunction(plain) or hasattr(plain, "__wrapped__"):
        parameters = inspect.signature(function).parameters.values()
        return [
            (p.name, p.kind is inspect.Parameter.POSITIONAL_ONLY)
            for p in parameters
            if p.default is inspect.Parameter.empty
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        ]
    code = plain.__code__
    positional = code.co_varnames[: code.co_argcount]
    keyword_only = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    without_default = len(positional) - len(plain.__defaults__ or ())
    first = 1 if inspect.ismethod(function) else 0  # self, or cls
    found = [(name, i < code.co_posonlyargcount) for i, name in enumerate(positional[:without_default]) if i >= first]
    return found + [(name, False) for name in keyword_only if name not in (plain.__kwdefaults__ or {})]


#: How alike (``difflib`` ratio) a parameter jt does not offer and an offered one must be for the offered one to be
#: suggested (``kernel`` for ``kernels`` scores 0.92, ``target`` for ``device`` 0.17); an offered name that starts
#: with the parameter's (``specialization`` for ``spec``) is suggested too.
PARAMETER_NAME_CUTOFF = 0.6

_UNSET = object()


def retired_uses(component: Any) -> list[tuple[str, Retired]]:
    """The retired names ``component`` uses, each with its `Retired` entry: the attributes of
    `RETIRED_ATTRIBUTES` it or a class of it sets (``"cacheable"``), and the parameters of
    `RETIRED_PARAMETERS` its methods take (``"target(call)"``)."""
    role = role_of(component)
    if role is None:
        return []
    found = [
        (name, entry) for name, entry in RETIRED_ATTRIBUTES.get(role, {}).items() if sets_attribute(component, name)
    ]
    for method, parameters in RETIRED_PARAMETERS.get(role, {}).items():
        function = getattr(component, method, None)
        taken = _parameter_names(function) if callable(function) else frozenset()
        found += [(f"{method}({name})", entry) for name, entry in parameters.items() if name in taken]
    return found


def retired_attributes(component: Any) -> list[tuple[str, str]]:
    """The retired names ``component`` uses (`retired_uses`), each with what replaced it, as
    ``(name, replacement)`` pairs."""
    return [(name, entry.replacement) for name, entry in retired_uses(component)]


def _parameter_names(function: Any) -> frozenset[str]:
    """The names ``function`` takes by keyword (an empty set for a builtin without a signature)."""
    try:
        return named_parameters(getattr(function, "__func__", function))[0]
    except (TypeError, ValueError):
        return frozenset()
