"""The options every call carries, whatever its backend, and how static values are compared.

`static_key` keys a static value (a scalar operand, a constexpr, an option) so that two values are equal
exactly when they compile and run alike; `ExactEquality` gives the call model's dataclasses that equality.
`CompileOptions` are the compile options every backend takes (`TritonOptions` reads them as Triton's
names), `LaunchOptions` how a call becomes an operation on any platform.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import struct
from collections.abc import Hashable, Mapping
from typing import Any, Self

import numpy as np

from jt_core.errors import KernelCallTypeError, KernelCallValueError, short_repr

__all__ = [
    "OPTION_NAMES",
    "CompileOptions",
    "ExactEquality",
    "LaunchOptions",
    "TritonOptions",
    "exact_form",
    "flag_value",
    "static_key",
]

#: The compiler options ``triton_call`` takes as arguments of its own.
OPTION_NAMES = ("num_warps", "num_stages", "num_ctas", "enable_fp_fusion", "debug")


#: Types whose values key themselves: equal values of one of them compile and run alike, and no key of another
#: type equals one of them.
_SELF_KEYED = frozenset({str, int, bytes, type(None)})


def static_key(value: Any) -> Hashable:
    """A key of a static value (a scalar operand, a constexpr, an option) that is equal for two values exactly when
    they compile and run alike: the value's type, with the bits of a number.

    Python's equality is not that: ``-0.0 == 0.0`` and ``1 == 1.0 == True``, yet each gives a kernel other results,
    and ``float("nan") != float("nan")``, yet two NaNs of the same bits give the same kernel. Tuples, lists and
    dataclasses are keyed by their parts; other values by their type and their own equality.
    """
    kind = type(value)
    if kind in _SELF_KEYED:
        return value
    if kind is tuple:
        return (tuple, tuple(static_key(item) for item in value))
    if isinstance(value, ExactEquality):
        return value
    if isinstance(value, np.generic):
        return (kind, value.tobytes())
    if isinstance(value, float):
        return (kind, struct.pack("<d", value))
    if isinstance(value, complex):
        return (kind, struct.pack("<dd", value.real, value.imag))
    if isinstance(value, (tuple, list)):
        return (kind, tuple(static_key(item) for item in value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (kind, tuple(static_key(getattr(value, name)) for name in _field_names(kind)))
    return (kind, value)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def exact_form(value: Any) -> Any:
    """A JSON form of a value (a static value, an option, a target) for keys kept on disk or compared between
    processes: equal for two values exactly when they compile and run alike, as `static_key` is, and the same in
    every process.

    Numbers are written by their type and their exact bits, never by ``repr``, which gives every NaN the text
    ``nan`` whatever its payload; tuples, lists, mappings and dataclasses by their parts; other objects by their type
    and ``repr``, object addresses left out.
    """
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return [kind.__name__, value]
    if isinstance(value, np.generic):
        return [kind.__name__, value.tobytes().hex()]
    if isinstance(value, float):
        return [kind.__name__, struct.pack("<d", value).hex()]
    if isinstance(value, complex):
        return [kind.__name__, struct.pack("<dd", value.real, value.imag).hex()]
    if isinstance(value, bytes):
        return [kind.__name__, value.hex()]
    if isinstance(value, (tuple, list)):
        return [kind.__name__, [exact_form(item) for item in value]]
    if isinstance(value, Mapping):
        items = [[exact_form(key), exact_form(item)] for key, item in value.items()]
        return ["mapping", sorted(items, key=lambda pair: json.dumps(pair[0], sort_keys=True))]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [
            kind.__qualname__,
            {field.name: exact_form(getattr(value, field.name)) for field in dataclasses.fields(value)},
        ]
    return [kind.__qualname__, _ADDRESS.sub("", repr(value))]


_field_names_of: dict[type, tuple[str, ...]] = {}


def _field_names(kind: type) -> tuple[str, ...]:
    names = _field_names_of.get(kind)
    if names is None:
        names = _field_names_of[kind] = tuple(field.name for field in dataclasses.fields(kind))
    return names


class ExactEquality:
    """Equality and hash of a frozen dataclass (declared with ``eq=False``) by the `static_key` of its fields:
    a call made with ``-0.0`` is not the call made with ``0.0``, and a call made with a NaN is the call made again
    with a NaN of the same bits. JAX's caches of compiled calls and jt's own memos compare calls this way."""

    @functools.cached_property
    def _static_key(self) -> tuple[Any, ...]:
        return tuple(static_key(getattr(self, name)) for name in _field_names(type(self)))

    @functools.cached_property
    def _static_hash(self) -> int:
        return hash(self._static_key)

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, ExactEquality)
        return self._static_hash == other._static_hash and self._static_key == other._static_key

    def __hash__(self) -> int:
        return self._static_hash


@dataclasses.dataclass(frozen=True, eq=False)
class CompileOptions(ExactEquality):
    """Compiler options of one kernel configuration.

    Attributes:
        num_warps: Warps per program.
        num_stages: Software-pipelining stages.
        num_ctas: Programs per cluster (CUDA sm90+).
        enable_fp_fusion: Whether multiply-adds may be fused.
        debug: Compile with Triton's debug checks and print the IRs.
        extra: Further backend-specific options (``backend_options=``), as sorted ``(name, value)`` pairs.
    """

    num_warps: int = 4
    num_stages: int = 3
    num_ctas: int = 1
    enable_fp_fusion: bool = True
    debug: bool = False
    extra: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        """Checks the options every backend takes (a backend checks what its target allows on top)."""

        def integer(value: Any) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        warps, stages, ctas = self.num_warps, self.num_stages, self.num_ctas
        if not integer(warps) or warps < 1 or warps & (warps - 1):
            raise KernelCallValueError(f"num_warps must be a positive power of two, got {warps!r}")
        if not integer(stages) or stages < 0:
            raise KernelCallValueError(f"num_stages must be a non-negative int, got {stages!r}")
        if not integer(ctas) or not 1 <= ctas <= 8:
            raise KernelCallValueError(f"num_ctas must be an int from 1 to 8 (a cluster has at most 8), got {ctas!r}")

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> CompileOptions:
        """The options a configuration's values give (the rest keep their defaults): those named in
        `OPTION_NAMES` checked here, the others kept in `extra` for the backend to check.

        Raises:
            KernelCallValueError, KernelCallTypeError: For a value out of range, or an extra one that is not
                hashable, naming it.
        """
        extra = {key: value for key, value in values.items() if key not in OPTION_NAMES}
        for key, value in extra.items():
            try:
                hash(value)
            except TypeError:
                raise KernelCallTypeError(
                    f"backend_options[{key!r}] must be hashable, got {short_repr(value)} ({type(value).__name__}); "
                    "use a tuple or a frozen mapping"
                ) from None
        known = {key: values[key] for key in OPTION_NAMES if key in values}
        for flag in ("enable_fp_fusion", "debug"):
            if flag in known:
                known[flag] = flag_value(flag, known[flag])
        return cls(**known, extra=tuple(sorted(extra.items())))

    def as_dict(self) -> dict[str, Any]:
        """The options as the keyword arguments Triton's backends take."""
        out: dict[str, Any] = {
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
            "num_ctas": self.num_ctas,
            "enable_fp_fusion": self.enable_fp_fusion,
            "debug": self.debug,
        }
        out.update(self.extra)
        return out


@dataclasses.dataclass(frozen=True)
class TritonOptions:
    """A base for a backend's own options when it compiles with one of Triton's backends
    (`jt_core.plugin.Backend.parse_options`): the options every backend takes, and the further ones for
    Triton's backend, passed as given.

    Attributes:
        num_warps: Warps per program.
        num_stages: Software-pipelining stages.
        num_ctas: Programs per cluster.
        enable_fp_fusion: Whether multiply-adds may be fused.
        debug: Compile with Triton's debug checks.
        triton: Further options of Triton's backend, as sorted ``(name, value)`` pairs.
    """

    num_warps: int = CompileOptions.num_warps
    num_stages: int = CompileOptions.num_stages
    num_ctas: int = CompileOptions.num_ctas
    enable_fp_fusion: bool = CompileOptions.enable_fp_fusion
    debug: bool = CompileOptions.debug
    triton: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, options: CompileOptions, leave_out: frozenset[str] = frozenset()) -> Self:
        """``options`` with their further options (``options.extra``) less the names in ``leave_out``."""
        return cls(
            num_warps=options.num_warps,
            num_stages=options.num_stages,
            num_ctas=options.num_ctas,
            enable_fp_fusion=options.enable_fp_fusion,
            debug=options.debug,
            triton=tuple((key, value) for key, value in options.extra if key not in leave_out),
        )

    def triton_options(self) -> dict[str, Any]:
        """The options as ``triton.compile`` takes them (Triton's backend fills in its defaults for the rest)."""
        named = {field.name: getattr(self, field.name) for field in dataclasses.fields(self) if field.name != "triton"}
        return {**named, **dict(self.triton)}


def flag_value(name: str, value: Any) -> bool:
    """``value`` as the bool it must be: ``True``, ``False`` (NumPy's too), or the ints 1 and 0.

    Raises:
        KernelCallTypeError: For anything else (a string such as ``"no"`` would otherwise read as true), naming it.
    """
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1)):
        return bool(value)
    raise KernelCallTypeError(f"{name} must be True or False, got {short_repr(value)} ({type(value).__name__})")


@dataclasses.dataclass(frozen=True, eq=False)
class LaunchOptions(ExactEquality):
    """How a call becomes an operation, on any platform.

    Attributes:
        launcher: The ``launcher=`` argument (``None``: the platform's launcher by priority).
        has_side_effect: Whether the call must never be removed.
        serialized_metadata: Opaque bytes carried into the lowered call.
        cost_estimate: ``(("bytes_accessed", n), ("flops", n), ...)`` or ``None``.
        vmap: The batching strategy under ``jax.vmap``: ``"auto"``, ``"grid"`` or ``"sequential"``.
    """

    launcher: str | None = None
    has_side_effect: bool = False
    serialized_metadata: bytes = b""
    cost_estimate: tuple[tuple[str, Any], ...] | None = None
    vmap: str = "auto"
