"""Names of earlier contracts: what replaced each, and the jt-core version that refuses it.

jt-core retires a name of its plugin contract in two steps, as pytest retires a hook's argument: a component that
still uses the name keeps working for one minor version, its plugin warned with a ``DeprecationWarning`` naming the
replacement and the version that refuses it (`Retired`); from that version on (`is_removed`), the plugin
is refused, naming the replacement. The names of each role are listed here (`BACKEND_ATTRIBUTES`, ...);
`jt_core.plugin.roles` keys them by the role classes (``RETIRED_ATTRIBUTES``, ``RETIRED_PARAMETERS``), and
`jt_core.plugin.validation` finds the ones a component uses.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

from jt_core import _version as jt_version
from jt_core.plugin.signatures import call_with_names

__all__ = [
    "BACKEND_ATTRIBUTES",
    "BACKEND_PARAMETERS",
    "DIALECT_ATTRIBUTES",
    "LAUNCHER_ATTRIBUTES",
    "Retired",
    "is_removed",
    "sets_attribute",
]


@dataclasses.dataclass(frozen=True)
class Retired:
    """A name of an earlier contract: a class attribute, or a parameter of a contract method.

    A component that still uses it keeps working for one minor version of jt-core: its plugin is warned when it
    registers it (a ``DeprecationWarning`` naming the replacement and `removed_in`), and jt honours the name
    where it can. From `removed_in` on, the plugin is refused, naming the replacement.

    Attributes:
        replacement: What replaced it, as messages name it.
        removed_in: The jt-core version that refuses it.
        question: The contract method it belongs to: the one whose answer the attribute gave (of the role that
            asks it now), or the one that took the parameter.
        offered: What jt still offers `question` for it, beside the contract's own arguments, until
            `removed_in`: the retired parameter itself, or what `answer` reads. A method is passed
            such an argument only when it names it.
        answer: How jt answers `question` from the attribute, ``answer(component, arguments)``, for a
            component that keeps the role's default for the question (one that answers it itself is asked).
        amend: How jt completes the answer `question` gave from the attribute,
            ``amend(component, answer)``.
        unhonoured: Why jt-core cannot honour the attribute (for one it neither answers from nor amends with).
    """

    replacement: str
    removed_in: str
    question: str
    offered: tuple[str, ...] = ()
    answer: Callable[[Any, Mapping[str, Any]], Any] | None = None
    amend: Callable[[Any, Any], Any] | None = None
    unhonoured: str = ""


#: The version of the retirements below: jt-core 0.1 retired these names, and 0.2 refuses them.
_REMOVED_IN = "0.2.0"


def _answer_from(attribute: str) -> Callable[[Any, Mapping[str, Any]], Any]:
    """An answer that is the attribute's value."""
    return lambda component, arguments: getattr(component, attribute)


def _validated_options(component: Any, arguments: Mapping[str, Any]) -> Any:
    """``parse_options`` for a backend still written with ``validate_options(options, call, target)``: the
    options, as given, once that method accepted them."""
    call_with_names(component.validate_options, arguments)
    return arguments["options"]


def _with_without_it(component: Any, spec: Any) -> Any:
    """The launcher's library spec, its ``without_it`` taken from ``without_native`` where it says nothing."""
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type) and getattr(spec, "without_it", None) == "":
        return dataclasses.replace(spec, without_it=component.without_native)  # type: ignore[type-var]
    return spec


#: The class attributes of earlier contracts of `Backend`, each with what replaced it. A
#: component that still sets one keeps working, with a warning, until the version that refuses it (`Retired`);
#: jt answers the question from it meanwhile where it can.
BACKEND_ATTRIBUTES: Mapping[str, Retired] = {
    "interprets": Retired(
        "Backend.unsupported_dialect_reason(dialect)",
        _REMOVED_IN,
        "unsupported_dialect_reason",
        unhonoured="the dialects no longer say whether Triton's interpreter runs their kernels; the backend "
        "answers for each dialect",
    ),
    "cacheable": Retired(
        "Backend.may_keep_on_disk(request)", _REMOVED_IN, "may_keep_on_disk", answer=_answer_from("cacheable")
    ),
    "binary_suffix": Retired(
        "Backend.binary_file_suffix(kernel)",
        _REMOVED_IN,
        "binary_file_suffix",
        answer=_answer_from("binary_suffix"),
    ),
    "validate_options": Retired(
        "Backend.parse_options(options, backend_arguments, target, name, label), which returns the backend's "
        "own options",
        _REMOVED_IN,
        "parse_options",
        offered=("call",),
        answer=_validated_options,
    ),
}

#: The class attributes of earlier contracts of `Launcher` (as `BACKEND_ATTRIBUTES`).
LAUNCHER_ATTRIBUTES: Mapping[str, Retired] = {
    "supports_tensor_descriptors": Retired(
        "Launcher.passes_tensor_descriptors(call, parameters)",
        _REMOVED_IN,
        "passes_tensor_descriptors",
        answer=_answer_from("supports_tensor_descriptors"),
    ),
    "uses_host_callback": Retired(
        "Launcher.runs_through_host_callback(call)",
        _REMOVED_IN,
        "runs_through_host_callback",
        answer=_answer_from("uses_host_callback"),
    ),
    "single_config": Retired(
        "Launcher.needs_tuning_ahead(call)", _REMOVED_IN, "needs_tuning_ahead", answer=_answer_from("single_config")
    ),
    "without_native": Retired(
        "the without_it= of the LibrarySpec that Launcher.native_library() returns",
        _REMOVED_IN,
        "native_library",
        amend=_with_without_it,
    ),
}

#: The class attributes of earlier contracts of `Dialect` (as `BACKEND_ATTRIBUTES`).
DIALECT_ATTRIBUTES: Mapping[str, Retired] = {
    "interpretable": Retired(
        "Backend.unsupported_dialect_reason(dialect), asked of the backend that cannot run it",
        _REMOVED_IN,
        "unsupported_dialect_reason",
        unhonoured="the backend that runs a kernel decides which dialects it runs (jt-core's CPU backend runs "
        "plain Triton kernels only)",
    ),
    "tensor_descriptor_layout": Retired(
        "Dialect.requires_descriptor_layout(kernel)",
        _REMOVED_IN,
        "requires_descriptor_layout",
        answer=_answer_from("tensor_descriptor_layout"),
    ),
}

#: Parameters that methods of earlier contracts of `Backend` took and jt no longer offers, by
#: method, each with what replaced it. jt still passes one, to a method that names it, until the version that
#: refuses it (`Retired`).
BACKEND_PARAMETERS: Mapping[str, Mapping[str, Retired]] = {
    "target": {
        "call": Retired(
            "Backend.target(backend_arguments, device, name), offered instead of the call",
            _REMOVED_IN,
            "target",
            offered=("call",),
        )
    }
}


def _version_numbers(text: str) -> tuple[int, ...]:
    """A version's leading numbers: ``"0.2.0"`` -> ``(0, 2, 0)``, ``"0.2.0rc1"`` -> ``(0, 2, 0)``."""
    numbers = []
    for part in text.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        numbers.append(int(digits.group()))
    return tuple(numbers)


def is_removed(retired: Retired) -> bool:
    """Whether this jt-core (`jt_core._version.__version__`) is at or past the version that refuses
    ``retired``."""
    return _version_numbers(jt_version.__version__) >= _version_numbers(retired.removed_in)


def sets_attribute(component: Any, attribute: str) -> bool:
    """Whether ``component`` or a class of it sets ``attribute``."""
    owners = [getattr(component, "__dict__", {}), *(vars(cls) for cls in type(component).__mro__)]
    return any(attribute in owner for owner in owners)
