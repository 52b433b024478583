"""The rules of the element-wise operations (``arith``, ``math`` and a few ``tt`` ones): what each computes on JAX
arrays (`jt_core.translation.lang` and `jt_core.translation.integers` hold the functions), on NumPy values known when
tracing, and what it tells the analyses (an integer's affine form, a mask's box, a pointer chosen or compared).

One lowering serves them all (`lower`): it folds what is known when tracing, keeps the one value of a block known
then (XLA would see zeros there, which it simplifies at the cost of a zero's sign), fuses a product into the sum that
reads it where the numerics round as a GPU does (`jt_core.translation.analysis.products`), and calls libdevice's
functions for ``tt.extern_elementwise``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core.interpreter.libdevice import libdevice_name
from jt_core.translation import extern, folding, integers, lang
from jt_core.translation.analysis.affine import Affine
from jt_core.translation.analysis.facts import UNKNOWN, Fact
from jt_core.translation.analysis.masks import Mask, comparison
from jt_core.translation.lang import dtype_of, is_static
from jt_core.translation.memory import Choice, Pointer, State
from jt_core.translation.program import Operation, TensorType
from jt_core.translation.rules import RuleContext, add_rules
from jt_core.translation.values import Address, BlockPointer, Unsupported

__all__ = ["analyse", "chosen", "lower", "typed"]


# -- what the analyses learn -------------------------------------------------------------------------------------


def _widths(walk: Any, op: Operation) -> Callable[[int], int]:
    def width_of(index: int) -> int:
        return folding.width(walk.type(op.operands[index]).element)

    return width_of


def analyse(walk: Any, op: Operation) -> None:
    """An element-wise operation's result: its value where known when tracing, an integer's form, a mask's box, the
    buffers a chosen pointer points into; and the refusals (float8 arithmetic, an unknown libdevice function)."""
    result = walk.type(op.results[0])
    types = [walk.type(v) for v in op.operands]
    facts = [walk.fact(v) for v in op.operands]
    varies = any(f.varies for f in facts)
    if any(t.is_pointer for t in types):
        walk.set(op.results[0], _pointer_choice(walk, op, facts, varies))
        return
    if any(f.address for f in facts):
        if op.name != "arith.cmpi":
            walk.refuse(_ADDRESS_AS_NUMBER, op.line)
        walk.set(op.results[0], Fact(varies=varies))
        return
    _refusals(walk, op, types, result)
    statics = [walk.static(v) for v in op.operands]
    static = None
    if all(s is not None for s in statics) and not result.shape and not any(t.shape for t in types):
        static = folding.fold(op.name, statics, types, result, _attribute(op))
        if static is None and op.name != "tt.extern_elementwise":
            static = folding.evaluate(op.name, statics, types, result, _attribute(op))
    form = None
    if result.element.startswith("i") and result.element != "i1":
        if static is not None and not isinstance(static, bool):
            form = Affine.constant(int(static))
        else:

            def bounds(f: Affine) -> tuple[int, int] | None:
                return f.bounds(walk.grid, walk.ranges)

            found = integers.form_of(
                op.name, [f.form for f in facts], op.attr("predicate"), result.shape, bounds, _widths(walk, op)
            )
            form = walk.exact(found, result.element)
            if form is None and op.name == "arith.select" and facts[1].form == facts[2].form:
                form = facts[1].form
    mask = _mask(walk, op, facts, result) if result.element == "i1" else None
    walk.set(op.results[0], Fact(form=form, mask=mask, static=static, varies=varies))


def _refusals(walk: Any, op: Operation, types: Sequence[TensorType], result: TensorType) -> None:
    for ty in (*types, result):
        try:
            element = dtype_of(ty.element)
        except Exception:
            walk.refuse(f"values of type {ty.element}", op.line)
            return
        if not _of_name(op.name).picks_float8 and folding.is_float8(element):
            walk.refuse(f"{op.name} on float8 values", op.line)
            return
    if op.name == "tt.extern_elementwise":
        symbol = str(op.attr("symbol", ""))
        if not extern.computes(symbol):
            walk.refuse(f"{libdevice_name(symbol)} (the external function {symbol!r})", op.line)


def _mask(walk: Any, op: Operation, facts: Sequence[Fact], result: TensorType) -> Mask | None:
    """A boolean's mask: a comparison of affine integers, or the ``&`` of two masks."""
    if op.name == "arith.cmpi":
        lhs, rhs = facts[0].form, facts[1].form
        if lhs is None or rhs is None:
            return None
        signs = [f.bounds(walk.grid, walk.ranges) for f in (lhs, rhs)]
        unsigned_ok = all(b is not None and b[0] >= 0 for b in signs)
        return comparison(int(op.attr("predicate")), lhs, rhs, result.shape, unsigned_ok)
    if op.name == "arith.andi" and facts[0].mask is not None and facts[1].mask is not None:
        a, b = facts[0].mask, facts[1].mask
        if a.shape != result.shape:
            a = a.moved(lambda f: f.broadcast(result.shape), result.shape)  # type: ignore[assignment]
        if b.shape != result.shape:
            b = b.moved(lambda f: f.broadcast(result.shape), result.shape)  # type: ignore[assignment]
        return None if a is None or b is None else a.both(b)
    return None


def _pointer_choice(walk: Any, op: Operation, facts: Sequence[Fact], varies: bool) -> Fact:
    """``arith.select`` between pointers (into one buffer, or two), and pointer comparisons."""
    if op.name == "arith.select":
        a, b = facts[1], facts[2]
        if a.buffers is None or b.buffers is None:
            return UNKNOWN
        form = a.form if a.form == b.form else None
        return Fact(form=form, buffers=a.buffers | b.buffers, varies=varies)
    if op.name == "arith.cmpi":
        if facts[0].buffers != facts[1].buffers or facts[0].buffers is None or len(facts[0].buffers) != 1:
            walk.refuse("a comparison of pointers into different arguments", op.line)
        return Fact(varies=varies)
    walk.refuse(f"pointer arithmetic through {op.name}", op.line)
    return UNKNOWN


def _attribute(op: Operation) -> Any:
    if op.name in ("tt.fp_to_fp", "arith.truncf"):
        return op.attr("rounding", op.attr("roundingmode"))
    if op.name == "tt.clampf":
        return op.attr("propagateNan")
    return op.attr("predicate")


# -- the lowering ------------------------------------------------------------------------------------------------


def lower(ctx: RuleContext, state: State) -> State:
    """An element-wise operation: folded where every operand is known when tracing, else traced."""
    k = ctx.kernel
    op = ctx.op
    args = [k.get(v) for v in op.operands]
    result = k.type(op.results[0])
    types = [k.type(v) for v in op.operands]
    attr = _attribute(op)
    if any(isinstance(a, (Pointer, Choice, BlockPointer, Address)) for a in args):
        k.set(op.results[0], _pointer_arithmetic(k, op, args))
        return state
    if all(is_static(a) for a in args):
        folded = folding.fold(op.name, args, types, result, attr)
        if folded is not None:
            k.set(op.results[0], folded)
            return state
    known = [k.known(v) for v in op.operands]
    value = None
    if op.name != "tt.extern_elementwise" and all(x is not None for x in known):
        value = folding.evaluate(op.name, known, types, result, attr)
    k.set_known(op.results[0], value)
    if value is not None and _float_zero(value, result):
        # XLA computes the same zero from the same constants when it compiles, and its simplifier then turns
        # x + 0.0 into x, which keeps x = -0.0 negative: the zero is hidden from it as a zero constant is.
        zero = float(np.copysign(0.0, float(value)))
        k.set(op.results[0], lang.as_array(zero, result, op.results[0] not in k.sign_safe))
        return state
    found = _of_name(op.name)
    arrays = [
        lang.as_array(a, t, not _sign_safe(found.sign_safe, i))
        for i, (a, t) in enumerate(zip(args, types, strict=True))
    ]
    numbers = ctx.strategy.numerics
    if op.name == "tt.extern_elementwise":
        out = extern.extern_call(str(op.attr("symbol", "")), arrays, dtype_of(result.element))
    else:
        fused = k.products.fused(op, arrays, numbers)
        out = _compute(op.name, arrays, result, attr, numbers) if fused is None else fused
        out = k.products.kept(op, arrays, out)
    k.set(op.results[0], out)
    return state


def _sign_safe(operands: tuple[int, ...] | None, index: int) -> bool:
    return operands is None or index in operands


def _compute(name: str, args: Sequence[jax.Array], result: TensorType, attr: Any, numbers: Any) -> jax.Array:
    """What an element-wise operation computes on arrays, with the platform's ``numbers`` where the choice is the
    platform's (`jt_core.translation.numerics`)."""
    out = dtype_of(result.element)
    found = _of_name(name)
    if not found.picks_float8 and any(folding.is_float8(a.dtype) for a in args):
        raise Unsupported(f"{name} on float8 values")
    if name in integers.INTEGER_OPERATIONS and not any(jnp.issubdtype(a.dtype, jnp.floating) for a in args):
        return integers.apply(integers.JAX, name, args, out, attr)
    if found.compute is None:
        raise Unsupported(f"the operation {name}")
    return found.compute(out, attr, numbers, *args)


def _float_zero(value: Any, ty: TensorType) -> bool:
    return (ty.element.startswith("f") or ty.element == "bf16") and not isinstance(value, bool) and float(value) == 0


_ADDRESS_AS_NUMBER = "a pointer's address used as a number (the compiled path only knows that it is not null)"

#: ``arith.cmpi`` predicates by number, and what each gives comparing a non-null address with zero (``None``: a
#: signed comparison, which depends on the address).
_VERSUS_NULL = {0: False, 1: True, 2: None, 3: None, 4: None, 5: None, 6: False, 7: False, 8: True, 9: True}


def _pointer_arithmetic(k: Any, op: Operation, args: Sequence[Any]) -> Any:
    """``arith.select`` between pointers of one buffer, and the pointer comparisons (of addresses too: with zero, or
    with another into the same buffer)."""
    if any(isinstance(a, Address) for a in args):
        if op.name != "arith.cmpi":
            raise Unsupported(_ADDRESS_AS_NUMBER, op.line)
        return _address_comparison(k, op, args)
    if op.name == "arith.select" and all(isinstance(a, (Pointer, Choice)) for a in args[1:]):
        a, b = args[1], args[2]
        if isinstance(a, Pointer) and isinstance(b, Pointer) and a.buffer == b.buffer:
            offset = jnp.where(k.array(op.operands[0]), jnp.asarray(a.offset), jnp.asarray(b.offset))
            return Pointer(a.buffer, offset, a.pointee, k.form(op.results[0]))
        return chosen(k.array(op.operands[0]), a, b)
    if op.name == "arith.cmpi" and all(isinstance(a, Pointer) for a in args) and args[0].buffer == args[1].buffer:
        x, y = jnp.asarray(args[0].offset), jnp.asarray(args[1].offset)
        return integers.apply(integers.JAX, "arith.cmpi", [x, y], np.dtype(bool), op.attr("predicate"))
    raise Unsupported(f"pointer arithmetic through {op.name}", op.line)


def chosen(condition: Any, a: Any, b: Any) -> Choice:
    """``a`` where ``condition`` holds, ``b`` elsewhere, for pointers (or choices of them) into different buffers."""
    first = a.pointers if isinstance(a, Choice) else (a,)
    second = b.pointers if isinstance(b, Choice) else (b,)
    which_a = a.which if isinstance(a, Choice) else 0
    which_b = (b.which if isinstance(b, Choice) else 0) + len(first)
    which = jnp.where(jnp.asarray(condition, bool), jnp.asarray(which_a, jnp.int32), jnp.asarray(which_b, jnp.int32))
    return Choice((*first, *second), which)


def _address_comparison(k: Any, op: Operation, args: Sequence[Any]) -> Any:
    """An ``arith.cmpi`` of an address (`Address`): with zero, it is what a non-null pointer gives; with the
    address of another pointer into the same buffer, the offsets' comparison (unsigned: byte addresses)."""
    shape = k.type(op.results[0]).shape
    predicate = int(op.attr("predicate"))
    if all(isinstance(a, Address) for a in args):
        a, b = args[0].pointer, args[1].pointer
        if isinstance(a, Pointer) and isinstance(b, Pointer) and a.buffer == b.buffer:
            x, y = jnp.asarray(a.offset), jnp.asarray(b.offset)
            return integers.apply(integers.JAX, "arith.cmpi", [x, y], np.dtype(bool), predicate)
        raise Unsupported("a comparison of the addresses of two arguments, which the compiled path does not know")
    other = op.operands[1] if isinstance(args[0], Address) else op.operands[0]
    if isinstance(args[1], Address):  # 0 < p is p > 0
        predicate = {2: 4, 3: 5, 4: 2, 5: 3, 6: 8, 7: 9, 8: 6, 9: 7}.get(predicate, predicate)
    known = _VERSUS_NULL.get(predicate)
    zero = k.get(other)
    if not is_static(zero) or int(zero) != 0 or known is None:
        raise Unsupported(_ADDRESS_AS_NUMBER)
    return known if not shape else jnp.full(shape, known)


# -- the rules ---------------------------------------------------------------------------------------------------


def _of_name(name: str) -> Any:
    from jt_core.translation.rules import rule_of

    found = rule_of(name)
    assert found is not None, name
    return found


def _plain(fn: Callable[..., jax.Array]) -> Callable[..., jax.Array]:
    """An operation computed by ``fn`` on the arrays, its bfloat16 results rounded as the numerics say."""

    def compute(out: np.dtype, attr: Any, numbers: Any, *args: jax.Array) -> jax.Array:
        return numbers.round_bfloat16(fn(*args))

    return compute


def _numeric(method: str) -> Callable[..., jax.Array]:
    """An operation whose result is the platform's choice: the numerics' ``method``."""

    def compute(out: np.dtype, attr: Any, numbers: Any, *args: jax.Array) -> jax.Array:
        return numbers.round_bfloat16(getattr(numbers, method)(*args))

    return compute


def typed(fn: Callable[..., jax.Array]) -> Callable[..., jax.Array]:
    """A conversion: ``fn(result dtype, *arrays)``."""

    def compute(out: np.dtype, attr: Any, numbers: Any, *args: jax.Array) -> jax.Array:
        return fn(out, *args)

    return compute


def _convert(out: np.dtype, attr: Any, numbers: Any, x: jax.Array) -> jax.Array:
    """``arith.truncf`` and ``tt.fp_to_fp``: a float conversion with the operation's rounding mode."""
    return lang.convert_float(lang.widen_fp8_source(x, out), out, attr if isinstance(attr, str) else None)


def _clamp(out: np.dtype, attr: Any, numbers: Any, x: jax.Array, low: jax.Array, high: jax.Array) -> jax.Array:
    """``tl.clamp``: NaN propagated from ``x`` only where ``propagate_nan`` says all."""
    clamped = jnp.minimum(jnp.maximum(x, low), high)
    if attr in ("ALL", 65535):
        return clamped
    return jnp.where(jnp.isnan(x), jnp.fmin(jnp.fmax(x, low), high), clamped)


def _compare(out: np.dtype, attr: Any, numbers: Any, a: jax.Array, b: jax.Array) -> jax.Array:
    return lang.compare_floats(int(attr), a, b)


def _select(out: np.dtype, attr: Any, numbers: Any, c: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.where(c, a, b)


_ALL = None  # every operand


def _register() -> None:
    """Registers every element-wise operation's rule: one table of each operation's functions and properties."""
    common: dict[str, Any] = {"analyse": analyse}
    # Integer operations: `jt_core.translation.integers` computes them; their properties are here. A choice and a
    # bit cast take floats too.
    integer_properties: dict[str, dict[str, Any]] = {
        "arith.cmpi": {"sign_safe": _ALL},
        "arith.select": {"sign_safe": _ALL, "compute": _select, "picks_float8": True},
        "arith.bitcast": {"compute": typed(lang.bitcast), "picks_float8": True},
    }
    for name in ("arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast", "arith.index_castui"):
        integer_properties[name] = {"passes_value": True}
    for name in sorted(integers.INTEGER_OPERATIONS):
        add_rules([name], lower, **integer_properties.get(name, {}), **common)
    table: list[tuple[str, Any, Any, dict[str, Any]]] = [
        ("arith.addf", _plain(lax.add), np.add, {"sums": True}),
        ("arith.subf", _plain(lax.sub), np.subtract, {"sums": True}),
        ("arith.mulf", _plain(lax.mul), np.multiply, {"sign_safe": _ALL}),
        ("arith.divf", _numeric("divide"), np.divide, {"sign_safe": _ALL}),
        ("tt.precise_divf", _numeric("divide"), np.divide, {"sign_safe": _ALL}),
        ("arith.remf", _plain(lax.rem), np.fmod, {}),
        ("arith.negf", _plain(lax.neg), np.negative, {}),
        ("arith.maxnumf", _plain(jnp.fmax), np.fmax, {"sign_safe": _ALL}),
        ("arith.minnumf", _plain(jnp.fmin), np.fmin, {"sign_safe": _ALL}),
        ("arith.maximumf", _plain(jnp.maximum), np.maximum, {"sign_safe": _ALL}),
        ("arith.minimumf", _plain(jnp.minimum), np.minimum, {"sign_safe": _ALL}),
        ("arith.cmpf", _compare, None, {"sign_safe": _ALL}),
        ("math.fma", _numeric("fma"), lambda x, y, z: (x.astype(np.float64) * y + z).astype(x.dtype), {"sums": True}),
        ("math.exp2", _numeric("exp2"), np.exp2, {}),
        ("tt.mulhiui", _plain(lang.mulhi), None, {}),
        ("tt.precise_sqrt", _plain(lax.sqrt), np.sqrt, {}),
        ("tt.clampf", _clamp, None, {}),
        ("math.exp", _plain(jnp.exp), np.exp, {}),
        ("math.expm1", _plain(jnp.expm1), np.expm1, {}),
        ("math.log", _plain(jnp.log), np.log, {}),
        ("math.log2", _plain(jnp.log2), np.log2, {}),
        ("math.log10", _plain(jnp.log10), np.log10, {}),
        ("math.log1p", _plain(jnp.log1p), np.log1p, {}),
        ("math.sqrt", _plain(lax.sqrt), np.sqrt, {}),
        ("math.rsqrt", _plain(lax.rsqrt), None, {}),
        ("math.cbrt", _plain(jnp.cbrt), np.cbrt, {}),
        ("math.sin", _plain(jnp.sin), np.sin, {}),
        ("math.cos", _plain(jnp.cos), np.cos, {}),
        ("math.tan", _plain(jnp.tan), np.tan, {}),
        ("math.asin", _plain(jnp.arcsin), np.arcsin, {}),
        ("math.acos", _plain(jnp.arccos), np.arccos, {}),
        ("math.atan", _plain(jnp.arctan), np.arctan, {}),
        ("math.atan2", _plain(jnp.arctan2), np.arctan2, {}),
        ("math.sinh", _plain(jnp.sinh), np.sinh, {}),
        ("math.cosh", _plain(jnp.cosh), np.cosh, {}),
        ("math.tanh", _plain(jnp.tanh), np.tanh, {}),
        ("math.asinh", _plain(jnp.arcsinh), np.arcsinh, {}),
        ("math.acosh", _plain(jnp.arccosh), np.arccosh, {}),
        ("math.atanh", _plain(jnp.arctanh), np.arctanh, {}),
        ("math.erf", _plain(lax.erf), None, {}),
        ("math.floor", _plain(jnp.floor), np.floor, {}),
        ("math.ceil", _plain(jnp.ceil), np.ceil, {}),
        ("math.trunc", _plain(jnp.trunc), np.trunc, {}),
        ("math.round", _plain(lang.round_half_away), _round_half_away_numpy, {}),
        ("math.roundeven", _plain(jnp.round), np.rint, {}),
        ("math.absf", _plain(jnp.abs), np.abs, {"picks_float8": True}),
        ("math.absi", _plain(jnp.abs), None, {}),
        ("math.copysign", _plain(jnp.copysign), np.copysign, {}),
        ("math.powf", _plain(jnp.power), np.power, {}),
        ("math.ctlz", _plain(lax.clz), None, {}),
        ("math.cttz", _plain(lang.count_trailing_zeros), None, {}),
        ("math.ctpop", _plain(lax.population_count), None, {}),
        ("arith.extf", typed(lang.float_cast), None, {"passes_value": True, "picks_float8": True}),
        ("arith.truncf", _convert, None, {"passes_value": True, "picks_float8": True}),
        ("tt.fp_to_fp", _convert, None, {"picks_float8": True}),
        ("arith.sitofp", typed(lang.int_to_float), None, {"passes_value": True}),
        ("arith.uitofp", typed(lang.uint_to_float), None, {"passes_value": True}),
        ("arith.fptosi", typed(lang.float_to_int), None, {}),
        ("arith.fptoui", typed(lang.float_to_uint), None, {}),
    ]
    for name, compute, evaluate, properties in table:
        add_rules([name], lower, compute=compute, evaluate=evaluate, **properties, **common)
    add_rules(["tt.extern_elementwise"], lower, **common)


def _round_half_away_numpy(x: np.ndarray) -> np.ndarray:
    return np.copysign(np.trunc(x) + np.where(np.abs(x - np.trunc(x)) >= 0.5, np.sign(x), 0), x)


_register()
