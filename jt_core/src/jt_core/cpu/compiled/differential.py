"""Running every call through both CPU paths and comparing them: ``JT_CPU_DIFFERENTIAL=1``.

With the switch on, a call the compiled path takes also runs in Triton's interpreter (through jt's FFI handler, with
the checks the call was made with: the race check too), and a host callback compares the two results before the
computation goes on with the compiled ones. They must be equal bit for bit, NaNs included, unless the kernel sums
or calls transcendental functions in floating point (``tl.dot``, reductions and scans, ``math`` functions, external
library functions), where the order of the sums and the functions' last bits may differ: there they must agree to
:data:`TOLERANCE` of their type. Products and sums are not fused into multiply-adds while comparing, as the
interpreter fuses none.

The test suite, the examples and the docs' code run with the switch on in CI, so every kernel they hold is compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jt_core import settings
from jt_core.cpu.compiled.program import Program
from jt_core.errors import KernelRuntimeError

__all__ = ["TOLERANCE", "DifferentialMismatchError", "compare", "enabled", "exact"]

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


class DifferentialMismatchError(KernelRuntimeError):
    """The compiled CPU path and Triton's interpreter computed different results for one call."""


def enabled() -> bool:
    """Whether ``JT_CPU_DIFFERENTIAL`` is on."""
    return settings.flag("JT_CPU_DIFFERENTIAL")


def exact(program: Program) -> bool:
    """Whether the two paths must agree bit for bit on ``program`` (it neither sums nor calls transcendental
    functions in floating point)."""
    for op in program.operations():
        if op.name in ("tt.dot", "tt.extern_elementwise"):
            return False
        if op.name.startswith("math.") and op.name not in _EXACT_MATH:
            return False
        if op.name in ("tt.reduce", "tt.scan") and any(
            program.type_of(v).element.startswith(("f", "bf")) for v in op.operands
        ):
            return False
    return True


def compare(name: str, bitwise: bool, compiled: Sequence[Any], interpreted: Sequence[Any]) -> None:
    """Compares the two paths' outputs of one call.

    Raises:
        DifferentialMismatchError: Naming the call, the output and the first elements that differ.
    """
    for index, (mine, theirs) in enumerate(zip(compiled, interpreted, strict=True)):
        a, b = np.asarray(mine), np.asarray(theirs)
        if bitwise or not _is_float(a.dtype):
            same = a.view(np.uint8).reshape(-1) == b.view(np.uint8).reshape(-1)
            if same.all():
                continue
            differ = np.flatnonzero(~same.reshape(a.size, -1).all(axis=1)) if a.size else np.array([], int)
            how = "bit for bit"
        else:
            rtol, atol = TOLERANCE.get(a.dtype.itemsize, TOLERANCE[4])
            wide_a, wide_b = a.astype(np.float64).reshape(-1), b.astype(np.float64).reshape(-1)
            near = np.isclose(wide_a, wide_b, rtol=rtol, atol=atol, equal_nan=True)
            if near.all():
                continue
            differ = np.flatnonzero(~near)
            how = f"to rtol={rtol}, atol={atol}"
        shown = ", ".join(
            f"[{i}] {a.reshape(-1)[i]!r} (compiled) != {b.reshape(-1)[i]!r} (interpreter)" for i in differ[:4]
        )
        raise DifferentialMismatchError(
            f"triton_call {name!r}: the compiled CPU path and Triton's interpreter disagree {how} on output {index} "
            f"({a.dtype}{list(a.shape)}), at {differ.size} of {a.size} elements: {shown}"
        )


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or (dtype.kind == "V" and "float" in dtype.name) or "float" in dtype.name
