"""Where XLA would round a kernel's floats otherwise than Triton does, and what the compiled path does about it.

XLA's CPU compiler is free to do two things Triton's GPU compilers do not: turn a division by a broadcast value into a
product with its rounded reciprocal, and simplify arithmetic with constants in ways that lose a zero's sign (``x +
0.0`` becomes ``x``). The translation divides so that the quotient is correctly rounded where the strategy asks for
a GPU's bits (`divide_exactly`), and hides the kernel's zero constants from XLA's simplifier (`opaque_constants`).
(XLA's third liberty, bfloat16 arithmetic kept in float32, is `jt_core.translation.numerics`'.)
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax
from jax.custom_batching import custom_vmap

from jt_core.translation.program import Program
from jt_core.translation.rules import rule_of

__all__ = ["constant", "divide_exactly", "opaque_constants", "sign_safe_use", "sign_safe_values"]

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


#: The zero a traced kernel's positive float zeros are made opaque with (`opaque_constants`).
_ZERO: contextvars.ContextVar[jax.Array | None] = contextvars.ContextVar("jt_opaque_zero", default=None)


def opaque_zero() -> jax.Array:
    """A float32 zero XLA's simplifier cannot see: a constant behind an optimisation barrier, which XLA removes only
    after its simplifier ran. Plain StableHLO, so it stops no fusion and lowers for every platform (no custom call,
    no float64)."""
    return lax.optimization_barrier(jnp.zeros((), jnp.float32))


@contextlib.contextmanager
def opaque_constants(zero: jax.Array) -> Iterator[None]:
    """While tracing a kernel: its float constants equal to ``+0.0`` are ``0.0 - zero``, for a ``zero`` XLA cannot
    see (`opaque_zero`). XLA's simplifier turns ``x + 0.0`` into ``x``, which keeps ``x = -0.0`` negative
    where IEEE arithmetic (the device's, the interpreter's) makes it positive: an accumulator started with
    ``tl.zeros`` would keep the sign of a first ``-0.0``. Other constants stay constants XLA can fold: its rewrite of
    a division by one is undone by `divide`, and hiding them costs time (a sixth of a softmax's)."""
    token = _ZERO.set(zero)
    try:
        yield
    finally:
        _ZERO.reset(token)


def sign_safe_use(name: str, operand: int) -> bool:
    """Whether operand ``operand`` of an operation ``name`` may be a zero constant XLA sees: a comparison, a choice,
    a product, a quotient, a maximum or minimum, a store (its rule's ``sign_safe``). A difference is not: XLA makes
    ``x - c`` of a zero ``c`` into ``x``, which is right for ``+0.0`` but not for ``-0.0``, since ``-0.0 - -0.0`` is
    ``+0.0``. A constant hidden where it need not be only costs time: compared with a value XLA cannot see, a masked
    leaky ReLU ran at 2.6 times its time."""
    found = rule_of(name)
    if found is None:
        return False
    return found.sign_safe is None or operand in found.sign_safe


def _passes_value(name: str) -> bool:
    """Whether an operation passes a value on unchanged but for its shape or type (a splat, a conversion): a zero it
    makes is as safe as its uses."""
    found = rule_of(name)
    return found is not None and (found.passes_value or found.passes_product)


def sign_safe_values(program: Program) -> frozenset[int]:
    """The values whose every use is `sign_safe_use`, through the operations that pass a value on (a splat, a
    conversion): those stay constants XLA sees, whatever their value; the others, where they are zeros
    when the kernel is traced (a zero constant, or what the compiled path computes from constants alone), are hidden
    (`opaque_constants`)."""
    uses = program.users
    safe: dict[int, bool] = {}

    def is_safe(value: int) -> bool:
        if value not in safe:
            safe[value] = all(
                all(is_safe(result) for result in op.results)
                if _passes_value(op.name)
                else all(sign_safe_use(op.name, index) for index, used in enumerate(op.operands) if used == value)
                for op in uses.get(value, ())
            )
        return safe[value]

    return frozenset(value for op in program.operations() for value in op.results if is_safe(value))


def constant(value: np.ndarray, opaque: bool = True) -> jax.Array:
    """A kernel's constant as an array: hidden from XLA's simplifier where it is a zero (`opaque_constants`; ``-0.0``
    for a difference), unless ``opaque`` is false (every use of it is `sign_safe_use`)."""
    array = jnp.asarray(value)
    zero = _ZERO.get() if opaque else None
    floating = value.dtype.kind == "f" or value.dtype == _BFLOAT16
    if zero is None or not floating or value.dtype.itemsize == 1:
        return array
    if not (value.size and (value == 0).all()):
        return array
    return lax.sub(array, zero.astype(array.dtype))


def divide_exactly(x: jax.Array, y: jax.Array) -> jax.Array:
    """``x / y`` correctly rounded, as the interpreter divides.

    XLA rewrites a division by a broadcast value (``x / s`` for a scalar ``s``, a row's sum, a constant) into a
    product with the divisor's rounded reciprocal, one ulp off in about a tenth of the cases. Narrower floats are
    divided in float64, where that product is within 2**-52 of the quotient: closer than the quotient of two
    float32 values ever comes to a point where float32's rounding changes (about 2**-49), so rounding it to float32
    (and from there to a narrower type, for which float32 is as close again) gives the correctly rounded quotient.
    Float64 divisors are kept from being seen as broadcasts (or, alone, as constants) instead, also where the
    programs run side by side: ``jax.vmap`` would broadcast an unmapped divisor over the programs outside the
    barrier that hides it (`_hidden_divisor`).
    """
    if x.dtype == jnp.float64:
        zero = _ZERO.get()
        if y.ndim == 0 and zero is not None:
            y = lax.sub(y, zero.astype(y.dtype))  # a scalar constant, which the barrier alone would not hide
        return lax.div(x, _hidden_divisor(x, y))
    wide = lax.div(x.astype(jnp.float64), y.astype(jnp.float64)).astype(jnp.float32)
    return wide.astype(x.dtype)


@custom_vmap
def _hidden_divisor(x: jax.Array, y: jax.Array) -> jax.Array:
    """``y`` in ``x``'s shape, behind an optimisation barrier: XLA sees no broadcast in it. Under ``jax.vmap`` the
    broadcast over the mapped axis happens before the barrier too (`_hidden_divisor_vmap`)."""
    return lax.optimization_barrier(jnp.broadcast_to(y, x.shape))


@_hidden_divisor.def_vmap
def _hidden_divisor_vmap(axis_size: int, in_batched: list[bool], x: jax.Array, y: jax.Array) -> tuple[jax.Array, bool]:
    x = x if in_batched[0] else jnp.broadcast_to(x, (axis_size, *x.shape))
    y = y if in_batched[1] else jnp.broadcast_to(y, (axis_size, *y.shape))
    return _hidden_divisor(x, y), True
