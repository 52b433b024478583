"""Running every call through both CPU paths and comparing them: ``JT_CPU_DIFFERENTIAL=1``.

With the switch on, a call the compiled path takes also runs in Triton's interpreter (through jt's FFI handler, with
the checks the call was made with: the race check too; subnormal floats flushed, as XLA's threads flush them for
the compiled path), and a custom call of the same handler compares the two
results before the computation goes on with the compiled ones; a difference fails the call with
`jt_core.errors.DifferentialMismatchError`, which `jt_core.errors.from_runtime_error` rebuilds. They must be equal
bit for bit (a NaN where the other has a NaN), unless the kernel sums or calls transcendental
functions in floating point (``tl.dot``, reductions and scans, ``math`` functions, external library functions),
where the order of the sums and the functions' last bits may differ: there they must agree to `TOLERANCE` of their
type. Products and sums are not fused into multiply-adds while comparing, as the interpreter fuses none. A call
lowered for several devices or processes is not compared.

The test suite, the examples and the docs' code run with the switch on in CI, so every kernel they hold is compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jt_core import settings
from jt_core.errors import DifferentialMismatchError
from jt_core.translation.program import Program

__all__ = ["TOLERANCE", "DifferentialMismatchError", "compare", "enabled", "tolerance"]

#: Relative and absolute tolerance by element size in bytes, where the results may differ in rounding.
TOLERANCE = {2: (1e-2, 1e-3), 4: (2e-5, 1e-6), 8: (1e-12, 1e-14)}

#: ``math`` operations whose results are correctly rounded on both paths.
_EXACT_MATH = {
    "math.absf",
    "math.absi",
    "math.floor",
    "math.ceil",
    "math.trunc",
    "math.round",
    "math.roundeven",
    "math.copysign",
    "math.sqrt",
    "math.ctlz",
    "math.cttz",
    "math.ctpop",
}


def enabled() -> bool:
    """Whether ``JT_CPU_DIFFERENTIAL`` is on."""
    return settings.flag("JT_CPU_DIFFERENTIAL")


def tolerance(program: Program) -> tuple[float, float] | None:
    """How close the two paths' results of ``program`` must be: ``None`` for bit for bit (it neither sums nor calls
    transcendental functions in floating point), else ``(rtol, atol)``, which `compare` loosens to
    `TOLERANCE`'s entry for types narrower than float32."""
    inexact = any(_inexact(program, op) for op in program.operations())
    return TOLERANCE[4] if inexact else None


def _inexact(program: Program, op: Any) -> bool:
    if op.name in ("tt.dot", "tt.extern_elementwise"):
        return True
    if op.name.startswith("math."):
        return op.name not in _EXACT_MATH
    floats = ("f", "bf")
    return op.name in ("tt.reduce", "tt.scan") and any(
        program.type_of(v).element.startswith(floats) for v in op.operands
    )


def compare(
    name: str, allowed: tuple[float, float] | None, compiled: Sequence[Any], interpreted: Sequence[Any]
) -> None:
    """Compares the two paths' outputs of one call: bit for bit when ``allowed`` is ``None`` (a NaN matches any
    NaN: their payloads are not compared), else to ``allowed`` (``(rtol, atol)``; for types other than float32,
    `TOLERANCE`'s entry for their size, or ``allowed`` where it is looser).

    Raises:
        DifferentialMismatchError: Naming the call, the output and the first elements that differ.
    """
    for index, (mine, theirs) in enumerate(zip(compiled, interpreted, strict=True)):
        a, b = np.asarray(mine), np.asarray(theirs)
        shape = list(a.shape)
        a, b = a.reshape(-1), b.reshape(-1)  # a 0-d array's bytes cannot be viewed
        floating = _is_float(a.dtype)
        wide_a = a.astype(np.float64) if floating else None
        wide_b = b.astype(np.float64) if floating else None
        if allowed is None or wide_a is None or wide_b is None:
            same = (a.view(np.uint8).reshape(a.size, -1) == b.view(np.uint8).reshape(b.size, -1)).all(axis=1)
            if wide_a is not None and wide_b is not None:
                same |= np.isnan(wide_a) & np.isnan(wide_b)
            if same.all():
                continue
            differ = np.flatnonzero(~same)
            how = "bit for bit"
        else:
            size_rtol, size_atol = TOLERANCE.get(a.dtype.itemsize, TOLERANCE[4])
            rtol, atol = max(allowed[0], size_rtol), max(allowed[1], size_atol)
            near = np.isclose(wide_a, wide_b, rtol=rtol, atol=atol, equal_nan=True)
            if near.all():
                continue
            differ = np.flatnonzero(~near)
            how = f"to rtol={rtol}, atol={atol}"
        shown = ", ".join(f"[{i}] {a[i]!r} (compiled) != {b[i]!r} (interpreter)" for i in differ[:4])
        raise DifferentialMismatchError(
            f"triton_call {name!r}: the compiled CPU path and Triton's interpreter disagree {how} on output {index} "
            f"({a.dtype}{shape}), at {differ.size} of {a.size} elements: {shown}"
        )


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or (dtype.kind == "V" and "float" in dtype.name) or "float" in dtype.name
