"""Running a kernel's TTIR with JAX: every program of the grid, as one computation XLA compiles.

:func:`run_grid` traces the kernel's body once, with the program id as a loop variable, inside a
``lax.fori_loop`` over the programs in the interpreter's order (the last grid axis varies fastest); each program
sees the stores of the programs before it, as in the interpreter. Control flow becomes JAX's: ``scf.for`` a
``fori_loop`` (its trip count known to XLA when the bounds are), ``scf.while`` a ``while_loop``, ``scf.if`` a
``cond``, or the branch itself when its condition is known at trace time; ``tt.call`` is inlined.

A construct this cannot express raises :class:`~jt_core.errors.UnsupportedKernelError` while tracing, naming the
operation and the kernel source line it comes from; the launcher then hands the call to the interpreter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core.cpu.compiled import control, lang
from jt_core.cpu.compiled.memory import Memory, Pointer, State
from jt_core.cpu.compiled.program import Block, Operation, Program, TensorType, parse_type
from jt_core.cpu.compiled.values import BlockPointer, Unsupported
from jt_core.errors import UnsupportedKernelError

__all__ = ["run_grid", "unsupported_operation"]


#: Operations the compiled path does not express, with what to call them in the one line that says why a kernel
#: runs in the interpreter instead.
_REFUSED = {
    "tt.elementwise_inline_asm": "inline asm (tl.inline_asm_elementwise)",
    "tt.print": "device printing (tl.device_print / print)",
    "tt.assert": "a device assertion (tl.device_assert)",
    "tt.int_to_ptr": "an integer turned into a pointer",
    "tt.ptr_to_int": "a pointer turned into an integer",
    "tt.dot_scaled": "a scaled dot product (tl.dot_scaled)",
    "cf.br": "a branch (an early return)",
    "cf.cond_br": "a branch (an early return)",
}

#: Operations whose effect is more than their results.
_EFFECTS = {"tt.store", "tt.atomic_rmw", "tt.atomic_cas", "tt.call", "tt.load"}

#: Operations with no effect on the CPU.
_NO_EFFECT = {"gpu.barrier", "tt.debug_barrier"}

_REDUCERS: dict[str, Callable[[jax.Array, int], jax.Array]] = {
    "arith.addf": lambda x, axis: jnp.sum(x, axis=axis),
    "arith.addi": lambda x, axis: jnp.sum(x, axis=axis, dtype=x.dtype),
    "arith.mulf": lambda x, axis: jnp.prod(x, axis=axis),
    "arith.muli": lambda x, axis: jnp.prod(x, axis=axis, dtype=x.dtype),
    "arith.maximumf": lambda x, axis: jnp.max(x, axis=axis),
    "arith.minimumf": lambda x, axis: jnp.min(x, axis=axis),
    "arith.maxsi": lambda x, axis: jnp.max(x, axis=axis),
    "arith.minsi": lambda x, axis: jnp.min(x, axis=axis),
    "arith.andi": lambda x, axis: jnp.all(x, axis=axis) if x.dtype == jnp.bool_ else _bitwise(lax.bitwise_and, x, axis),
    "arith.ori": lambda x, axis: jnp.any(x, axis=axis) if x.dtype == jnp.bool_ else _bitwise(lax.bitwise_or, x, axis),
    "arith.xori": lambda x, axis: _bitwise(lax.bitwise_xor, x, axis),
    "arith.maxnumf": lambda x, axis: _ignoring_nan(jnp.max, -jnp.inf, x, axis),
    "arith.minnumf": lambda x, axis: _ignoring_nan(jnp.min, jnp.inf, x, axis),
}

_SCANNERS: dict[str, Callable[[jax.Array, int, bool], jax.Array]] = {
    "arith.addf": lambda x, axis, reverse: lax.cumsum(x, axis=axis, reverse=reverse),
    "arith.addi": lambda x, axis, reverse: lax.cumsum(x, axis=axis, reverse=reverse),
    "arith.mulf": lambda x, axis, reverse: lax.cumprod(x, axis=axis, reverse=reverse),
    "arith.muli": lambda x, axis, reverse: lax.cumprod(x, axis=axis, reverse=reverse),
    "arith.maximumf": lambda x, axis, reverse: lax.cummax(x, axis=axis, reverse=reverse),
    "arith.maxsi": lambda x, axis, reverse: lax.cummax(x, axis=axis, reverse=reverse),
    "arith.minimumf": lambda x, axis, reverse: lax.cummin(x, axis=axis, reverse=reverse),
    "arith.minsi": lambda x, axis, reverse: lax.cummin(x, axis=axis, reverse=reverse),
}


def _bitwise(op: Callable[[jax.Array, jax.Array], jax.Array], x: jax.Array, axis: int) -> jax.Array:
    return lax.reduce(x, np.zeros((), x.dtype) if op is not lax.bitwise_and else np.array(-1, x.dtype), op, (axis,))


def _ignoring_nan(reduce: Callable[..., jax.Array], fill: float, x: jax.Array, axis: int) -> jax.Array:
    nan = jnp.isnan(x)
    value = reduce(jnp.where(nan, jnp.asarray(fill, x.dtype), x), axis=axis)
    return jnp.where(jnp.all(nan, axis=axis), jnp.asarray(jnp.nan, x.dtype), value)


def unsupported_operation(program: Program) -> Unsupported | None:
    """The first operation of ``program`` the compiled path refuses before tracing, or ``None``."""
    for op in program.operations():
        if op.name in _REFUSED:
            return Unsupported(_REFUSED[op.name], op.line)
    return None


class _Kernel:
    """Traces one program of a kernel; the grid loop calls :meth:`program` once, with traced program ids."""

    def __init__(self, program: Program, memory: Memory, grid: tuple[int, int, int], fuse: bool) -> None:
        self.ir = program
        self.fuse = fuse
        self.memory = memory
        self.grid = grid
        self.pids: tuple[Any, Any, Any] = (0, 0, 0)
        self.env: dict[int, Any] = {}
        self.used = _used_values(program)
        self.depth = 0

    # -- values ------------------------------------------------------------------------------------------------

    def type(self, value: int) -> TensorType:
        return self.ir.type_of(value)

    def get(self, value: int) -> Any:
        return self.env[value]

    def array(self, value: int) -> jax.Array:
        """A value as a JAX array of its type."""
        found = self.env[value]
        if isinstance(found, (Pointer, BlockPointer)):
            raise Unsupported("a pointer used as a number")
        return lang.as_array(found, self.type(value))

    # -- structure ---------------------------------------------------------------------------------------------

    def run_block(self, block: Block, args: Sequence[Any], state: State) -> tuple[list[Any], State]:
        """Runs a block's operations; returns what its terminator hands on, and the state."""
        for value, arg in zip(block.arguments, args, strict=True):
            self.env[value] = arg
        for op in block.operations:
            if op.name in ("scf.yield", "tt.return", "tt.reduce.return", "tt.scan.return", "scf.condition"):
                return [self.env[v] for v in op.operands], state
            try:
                state = self.operation(op, state)
            except Unsupported as exc:
                if exc.line is None and op.line is not None:
                    raise Unsupported(exc.what, op.line) from None
                raise
            except UnsupportedKernelError as exc:
                raise Unsupported(str(exc), op.line) from None
        return [], state

    def operation(self, op: Operation, state: State) -> State:
        name = op.name
        if op.results and not op.regions and name not in _EFFECTS and not any(r in self.used for r in op.results):
            return state  # nothing reads it (Triton's overflow checks without debug=True, say)
        if name in _REFUSED:
            raise Unsupported(_REFUSED[name], op.line)
        if name in _NO_EFFECT:
            return state
        handler = _HANDLERS.get(name)
        if handler is not None:
            return handler(self, op, state)
        self.elementwise(op)
        return state

    def elementwise(self, op: Operation) -> None:
        args = [self.env[v] for v in op.operands]
        result = self.type(op.results[0])
        types = [self.type(v) for v in op.operands]
        attr = op.attr("predicate")
        if op.name in ("tt.fp_to_fp", "arith.truncf"):
            attr = op.attr("rounding", op.attr("roundingmode"))
        if op.name == "tt.clampf":
            attr = op.attr("propagateNan")
        if any(isinstance(a, (Pointer, BlockPointer)) for a in args):
            self.pointer_arithmetic(op, args)
            return
        if all(lang.is_static(a) for a in args):
            folded = lang.fold(op.name, args, types, result, attr)
            if folded is not None:
                self.env[op.results[0]] = folded
                return
        arrays = [lang.as_array(a, t) for a, t in zip(args, types, strict=True)]
        if op.name == "tt.extern_elementwise":
            fn = lang.extern_function(str(op.attr("symbol", "")))
            if fn is None:
                raise Unsupported(f"the external function {op.attr('symbol')!r}", op.line)
            out = fn(*arrays).astype(lang.dtype_of(result.element))
        else:
            out = lang.elementwise(op.name, arrays, result, attr)
            if op.name == "arith.mulf" and not self.fuse:
                # XLA's CPU compiler contracts a product and a sum into one fused multiply-add, as GPUs do with
                # enable_fp_fusion=True; without it the product is rounded on its own.
                out = lax.optimization_barrier(out)
        self.env[op.results[0]] = out

    def pointer_arithmetic(self, op: Operation, args: Sequence[Any]) -> None:
        """``arith.select`` between pointers of one buffer, and the pointer comparisons."""
        if op.name == "arith.select" and isinstance(args[1], Pointer) and isinstance(args[2], Pointer):
            a, b = args[1], args[2]
            if a.buffer != b.buffer:
                raise Unsupported("a choice between pointers into different arguments", op.line)
            offset = jnp.where(self.array(op.operands[0]), jnp.asarray(a.offset), jnp.asarray(b.offset))
            self.env[op.results[0]] = Pointer(a.buffer, offset, a.pointee)
            return
        if op.name == "arith.cmpi" and all(isinstance(a, Pointer) for a in args) and args[0].buffer == args[1].buffer:
            x, y = jnp.asarray(args[0].offset), jnp.asarray(args[1].offset)
            self.env[op.results[0]] = lang.elementwise(
                "arith.cmpi", [x, y], self.type(op.results[0]), op.attr("predicate")
            )
            return
        raise Unsupported(f"pointer arithmetic through {op.name}", op.line)

    # -- calls -------------------------------------------------------------------------------------------------

    def call(self, name: str, args: Sequence[Any], state: State, line: str | None) -> tuple[list[Any], State]:
        function = self.ir.functions.get(name)
        if function is None:
            raise Unsupported(f"a call of {name}, which the module does not define", line)
        self.depth += 1
        if self.depth > 64:
            raise Unsupported("recursion", line)
        try:
            return self.run_block(function.body[0], args, state)
        finally:
            self.depth -= 1


# -- operation handlers ---------------------------------------------------------------------------------------


def _constant(k: _Kernel, op: Operation, state: State) -> State:
    k.env[op.results[0]] = lang.constant(op.attr("text"), op.attr("value"), k.type(op.results[0]))
    return state


def _poison(k: _Kernel, op: Operation, state: State) -> State:
    ty = k.type(op.results[0])
    k.env[op.results[0]] = jnp.zeros(ty.shape, lang.dtype_of(ty.element)) if not ty.is_pointer else None
    return state


def _program_id(k: _Kernel, op: Operation, state: State) -> State:
    k.env[op.results[0]] = k.pids[int(op.attr("axis", 0))]
    return state


def _num_programs(k: _Kernel, op: Operation, state: State) -> State:
    k.env[op.results[0]] = k.grid[int(op.attr("axis", 0))]
    return state


def _make_range(k: _Kernel, op: Operation, state: State) -> State:
    start, end = int(op.attr("start")), int(op.attr("end"))
    k.env[op.results[0]] = lax.iota(jnp.int32, end - start) + jnp.int32(start)
    return state


def _splat(k: _Kernel, op: Operation, state: State) -> State:
    value = k.get(op.operands[0])
    ty = k.type(op.results[0])
    if isinstance(value, Pointer):
        offset = value.offset if lang.is_static(value.offset) else jnp.broadcast_to(value.offset, ty.shape)
        k.env[op.results[0]] = Pointer(value.buffer, offset, value.pointee)
    else:
        k.env[op.results[0]] = jnp.broadcast_to(k.array(op.operands[0]), ty.shape)
    return state


def _shaped(
    fn: Callable[[jax.Array, Operation, TensorType], jax.Array],
) -> Callable[[_Kernel, Operation, State], State]:
    """A handler for an operation that moves elements around (on numbers and on pointers alike)."""

    def handle(k: _Kernel, op: Operation, state: State) -> State:
        value = k.get(op.operands[0])
        ty = k.type(op.results[0])
        if isinstance(value, Pointer):
            moved = value.offset if lang.is_static(value.offset) else fn(jnp.asarray(value.offset), op, ty)
            k.env[op.results[0]] = Pointer(value.buffer, moved, value.pointee)
        else:
            k.env[op.results[0]] = fn(k.array(op.operands[0]), op, ty)
        return state

    return handle


def _broadcast(x: jax.Array, op: Operation, ty: TensorType) -> jax.Array:
    return jnp.broadcast_to(x, ty.shape)


def _expand_dims(x: jax.Array, op: Operation, ty: TensorType) -> jax.Array:
    return jnp.expand_dims(x, int(op.attr("axis")))


def _reshape(x: jax.Array, op: Operation, ty: TensorType) -> jax.Array:
    return jnp.reshape(x, ty.shape)


def _trans(x: jax.Array, op: Operation, ty: TensorType) -> jax.Array:
    order = op.attr("order")
    if order is None:
        if x.ndim != 2:
            raise Unsupported("a transposition whose order cannot be read", op.line)
        order = (1, 0)
    return jnp.transpose(x, tuple(order))


def _addptr(k: _Kernel, op: Operation, state: State) -> State:
    pointer = k.get(op.operands[0])
    if not isinstance(pointer, Pointer):
        raise Unsupported("tt.addptr on something that is not a pointer", op.line)
    offset = k.get(op.operands[1])
    if lang.is_static(offset) and lang.is_static(pointer.offset):
        new: Any = int(pointer.offset) + int(offset)
    else:
        step = k.array(op.operands[1])
        base = pointer.offset
        if lang.is_static(base) and -(2**31) <= int(base) < 2**31:
            new = step if int(base) == 0 else step + np.asarray(base, step.dtype)
        else:
            base = jnp.asarray(base, jnp.int64) if lang.is_static(base) else base
            wide = jnp.int64 if jnp.int64 in (step.dtype, base.dtype) else jnp.int32
            new = base.astype(wide) + step.astype(wide)
    k.env[op.results[0]] = Pointer(pointer.buffer, new, pointer.pointee)
    return state


def _ptr_bitcast(k: _Kernel, op: Operation, state: State) -> State:
    value = k.get(op.operands[0])
    ty = k.type(op.results[0])
    if isinstance(value, Pointer):
        pointee = parse_type(ty.pointee or "").element if ty.is_pointer else None
        if pointee is None or lang.dtype_of(pointee).itemsize != lang.dtype_of(value.pointee).itemsize:
            raise Unsupported("a pointer cast to elements of another size")
        k.env[op.results[0]] = Pointer(value.buffer, value.offset, pointee)
        return state
    k.elementwise(op)
    return state


def _pointer_operand(k: _Kernel, op: Operation) -> Pointer:
    pointer = k.get(op.operands[0])
    if isinstance(pointer, BlockPointer):
        raise Unsupported("a block pointer here", op.line)
    if not isinstance(pointer, Pointer):
        raise Unsupported(f"{op.name} through something that is not a pointer", op.line)
    return pointer


def _load(k: _Kernel, op: Operation, state: State) -> State:
    target = k.get(op.operands[0])
    ty = k.type(op.results[0])
    if isinstance(target, BlockPointer):
        pointer, mask = _block_lanes(k, target, op.attr("boundaryCheck") or ())
        padding = op.attr("padding")
        other = jnp.nan if padding == 2 else None
        value, state = k.memory.load(state, pointer, mask, other, ty.shape)
        k.env[op.results[0]] = value
        return state
    pointer = _pointer_operand(k, op)
    mask = k.array(op.operands[1]) if len(op.operands) > 1 else None
    other = k.array(op.operands[2]) if len(op.operands) > 2 else None
    value, state = k.memory.load(state, pointer, mask, other, ty.shape)
    k.env[op.results[0]] = value
    return state


def _store(k: _Kernel, op: Operation, state: State) -> State:
    target = k.get(op.operands[0])
    value = k.array(op.operands[1])
    if isinstance(target, BlockPointer):
        pointer, mask = _block_lanes(k, target, op.attr("boundaryCheck") or ())
        return k.memory.store(state, pointer, value, mask, tuple(target.block))
    pointer = _pointer_operand(k, op)
    shape = k.type(op.operands[1]).shape
    mask = k.array(op.operands[2]) if len(op.operands) > 2 else None
    return k.memory.store(state, pointer, value, mask, shape)


def _atomic_rmw(k: _Kernel, op: Operation, state: State) -> State:
    pointer = _pointer_operand(k, op)
    shape = k.type(op.results[0]).shape
    value = k.array(op.operands[1])
    mask = k.array(op.operands[2]) if len(op.operands) > 2 else None
    kind = str(op.attr("atomic_rmw_op"))
    used = op.results[0] in k.used
    found, state = k.memory.atomic(state, kind, pointer, [value], mask, shape, used)
    k.env[op.results[0]] = found
    return state


def _atomic_cas(k: _Kernel, op: Operation, state: State) -> State:
    pointer = _pointer_operand(k, op)
    shape = k.type(op.results[0]).shape
    compare, value = k.array(op.operands[1]), k.array(op.operands[2])
    found, state = k.memory.atomic(state, "CAS", pointer, [compare, value], None, shape, True)
    k.env[op.results[0]] = found
    return state


def _make_block_ptr(k: _Kernel, op: Operation, state: State) -> State:
    base = k.get(op.operands[0])
    if not isinstance(base, Pointer):
        raise Unsupported("a block pointer on something that is not a pointer", op.line)
    rank = (len(op.operands) - 1) // 3
    values = [k.get(v) for v in op.operands[1:]]
    pointee = parse_type(k.type(op.results[0]).pointee or "")
    k.env[op.results[0]] = BlockPointer(
        base.buffer,
        base.offset,
        tuple(values[:rank]),
        tuple(values[rank : 2 * rank]),
        tuple(values[2 * rank :]),
        pointee.shape,
        pointee.element,
    )
    return state


def _advance(k: _Kernel, op: Operation, state: State) -> State:
    block = k.get(op.operands[0])
    steps = [k.get(v) for v in op.operands[1:]]
    offsets = tuple(_add(a, b) for a, b in zip(block.offsets, steps, strict=True))
    k.env[op.results[0]] = dataclasses.replace(block, offsets=offsets)
    return state


def _add(a: Any, b: Any) -> Any:
    if lang.is_static(a) and lang.is_static(b):
        return int(a) + int(b)
    return jnp.asarray(a, jnp.int64) + jnp.asarray(b, jnp.int64)


def _block_lanes(k: _Kernel, block: BlockPointer, checked: Sequence[int]) -> tuple[Pointer, Any]:
    """The lanes of a block pointer: one pointer per element of the block, and the mask of the checked axes."""
    offset: Any = jnp.asarray(block.base, jnp.int64)
    mask: Any = None
    rank = len(block.block)
    for axis, size in enumerate(block.block):
        shape = [1] * rank
        shape[axis] = size
        index = jnp.asarray(block.offsets[axis], jnp.int64) + lax.iota(jnp.int64, size).reshape(shape)
        offset = offset + index * jnp.asarray(block.strides[axis], jnp.int64)
        if axis in checked:
            inside = (index >= 0) & (index < jnp.asarray(block.shape[axis], jnp.int64))
            mask = inside if mask is None else mask & inside
    offset = jnp.broadcast_to(offset, block.block)
    if mask is not None:
        mask = jnp.broadcast_to(mask, block.block)
    return Pointer(block.buffer, offset, block.pointee), mask


def _dot(k: _Kernel, op: Operation, state: State) -> State:
    a, b, acc = (k.array(v) for v in op.operands[:3])
    a, b = lang.widen_for_dot(a), lang.widen_for_dot(b)
    precision = op.attr("inputPrecision", "IEEE")
    if precision == "TF32":
        a, b = lang.round_to_tf32(a), lang.round_to_tf32(b)
    product = lax.dot_general(
        a,
        b,
        (((a.ndim - 1,), (b.ndim - 2,)), (tuple(range(a.ndim - 2)), tuple(range(b.ndim - 2)))),
        precision=lax.Precision.HIGHEST,
        preferred_element_type=acc.dtype,
    )
    k.env[op.results[0]] = product + acc
    return state


def _combiner(k: _Kernel, op: Operation) -> str | None:
    """The single element-wise operation a reduction's or scan's combining region applies, or ``None``."""
    block = op.regions[0][0]
    body = block.operations
    if len(body) == 2 and body[0].name == "tt.call" and body[0].operands == block.arguments:
        callee = k.ir.functions.get(str(body[0].attr("callee")))
        if callee is None or body[1].operands != body[0].results:
            return None
        inner = callee.body[0]
        body, block = inner.operations, inner
    if len(body) != 2 or len(block.arguments) != 2:
        return None
    first, last = body
    if first.operands != block.arguments or last.operands != first.results:
        return None
    return first.name


def _region_function(k: _Kernel, op: Operation) -> Callable[..., Any]:
    """A reduction's or scan's combining region as a function of arrays (applied element by element)."""

    def combine(*args: Any) -> Any:
        values, _ = k.run_block(op.regions[0][0], list(args), _NO_STATE)
        return tuple(values)

    return combine


_NO_STATE = State((), np.zeros((), bool))  # type: ignore[arg-type]


def _reduce(k: _Kernel, op: Operation, state: State) -> State:
    axis = int(op.attr("axis"))
    inputs = [k.array(v) for v in op.operands]
    combiner = _combiner(k, op) if len(inputs) == 1 else None
    if combiner in _REDUCERS:
        out = [_REDUCERS[combiner](inputs[0], axis).astype(inputs[0].dtype)]
    else:
        out = _tree_reduce(_region_function(k, op), inputs, axis)
    for value, array in zip(op.results, out, strict=True):
        k.env[value] = array
    return state


def _tree_reduce(combine: Callable[..., Any], inputs: list[jax.Array], axis: int) -> list[jax.Array]:
    """Reduces ``inputs`` along ``axis`` with any associative ``combine``: halves combined pairwise, first half on the
    left, until one element is left (block sizes are powers of two)."""
    values = inputs
    while values[0].shape[axis] > 1:
        half = values[0].shape[axis] // 2
        left = [lax.slice_in_dim(v, 0, half, axis=axis) for v in values]
        right = [lax.slice_in_dim(v, half, 2 * half, axis=axis) for v in values]
        values = [jnp.asarray(v) for v in combine(*left, *right)]
    return [jnp.squeeze(v, axis=axis) for v in values]


def _scan(k: _Kernel, op: Operation, state: State) -> State:
    axis = int(op.attr("axis"))
    reverse = bool(op.attr("reverse", False))
    inputs = [k.array(v) for v in op.operands]
    combiner = _combiner(k, op) if len(inputs) == 1 else None
    if combiner in _SCANNERS:
        out = [_SCANNERS[combiner](inputs[0], axis, reverse)]
    else:
        fn = _region_function(k, op)
        n = len(inputs)

        def pairwise(a: Any, b: Any) -> Any:
            return fn(*a, *b) if not reverse else fn(*b, *a)

        out = list(lax.associative_scan(lambda a, b: tuple(pairwise(a, b)), tuple(inputs), reverse=reverse, axis=axis))
        assert len(out) == n
    for value, array in zip(op.results, out, strict=True):
        k.env[value] = array
    return state


def _call(k: _Kernel, op: Operation, state: State) -> State:
    args = [k.get(v) for v in op.operands]
    results, state = k.call(str(op.attr("callee")), args, state, op.line)
    for value, result in zip(op.results, results, strict=True):
        k.env[value] = result
    return state


def _cat(k: _Kernel, op: Operation, state: State) -> State:
    k.env[op.results[0]] = jnp.concatenate([k.array(v) for v in op.operands], axis=0)
    return state


def _join(k: _Kernel, op: Operation, state: State) -> State:
    k.env[op.results[0]] = jnp.stack([k.array(v) for v in op.operands], axis=-1)
    return state


def _split(k: _Kernel, op: Operation, state: State) -> State:
    x = k.array(op.operands[0])
    k.env[op.results[0]] = x[..., 0]
    k.env[op.results[1]] = x[..., 1]
    return state


def _gather(k: _Kernel, op: Operation, state: State) -> State:
    source, index = k.array(op.operands[0]), k.array(op.operands[1])
    k.env[op.results[0]] = jnp.take_along_axis(source, index, axis=int(op.attr("axis")), mode="clip")
    return state


def _histogram(k: _Kernel, op: Operation, state: State) -> State:
    data = jnp.ravel(k.array(op.operands[0]))
    bins = k.type(op.results[0]).shape[0]
    keep = (data >= 0) & (data < bins)
    if len(op.operands) > 1:
        keep = keep & jnp.ravel(jnp.broadcast_to(k.array(op.operands[1]), k.type(op.operands[0]).shape))
    counts = jnp.zeros((bins,), jnp.int32).at[jnp.where(keep, data, bins)].add(1, mode="drop")
    k.env[op.results[0]] = counts.astype(lang.dtype_of(k.type(op.results[0]).element))
    return state


def _unsplat(k: _Kernel, op: Operation, state: State) -> State:
    k.env[op.results[0]] = jnp.reshape(k.array(op.operands[0]), ())
    return state


_HANDLERS: dict[str, Callable[[_Kernel, Operation, State], State]] = {
    "arith.constant": _constant,
    "ub.poison": _poison,
    "tt.get_program_id": _program_id,
    "tt.get_num_programs": _num_programs,
    "tt.make_range": _make_range,
    "tt.splat": _splat,
    "tt.broadcast": _shaped(_broadcast),
    "tt.expand_dims": _shaped(_expand_dims),
    "tt.reshape": _shaped(_reshape),
    "tt.trans": _shaped(_trans),
    "tt.addptr": _addptr,
    "tt.bitcast": _ptr_bitcast,
    "tt.load": _load,
    "tt.store": _store,
    "tt.atomic_rmw": _atomic_rmw,
    "tt.atomic_cas": _atomic_cas,
    "tt.make_tensor_ptr": _make_block_ptr,
    "tt.advance": _advance,
    "tt.dot": _dot,
    "tt.reduce": _reduce,
    "tt.scan": _scan,
    "tt.call": _call,
    "tt.cat": _cat,
    "tt.join": _join,
    "tt.split": _split,
    "tt.gather": _gather,
    "tt.histogram": _histogram,
    "tt.unsplat": _unsplat,
    "scf.for": control.scf_for,
    "scf.if": control.scf_if,
    "scf.while": control.scf_while,
}


_TERMINATORS = {"scf.yield", "tt.return", "tt.reduce.return", "tt.scan.return", "scf.condition"}


def _used_values(program: Program) -> set[int]:
    """The values something with an effect depends on (what the other values are computed for is nothing)."""
    operations = program.operations()
    live: set[int] = set()
    changed = True
    while changed:
        changed = False
        for op in operations:
            needed = op.name in _EFFECTS or op.name in _TERMINATORS or op.regions or not op.results
            if needed or any(r in live for r in op.results):
                for value in op.operands:
                    if value not in live:
                        live.add(value)
                        changed = True
    return live


def run_grid(
    program: Program,
    memory: Memory,
    grid: tuple[int, int, int],
    arguments: Sequence[Any],
    state: State,
    fuse: bool = True,
) -> State:
    """Runs every program of ``grid`` in order, each on the state the previous one left.

    Args:
        program: The kernel.
        memory: Its buffers.
        grid: The grid, three axes.
        arguments: The entry function's arguments: :class:`Pointer` for pointers, Python scalars for scalars.
        state: The initial state.
        fuse: Whether a product and a sum may be fused into one multiply-add (``enable_fp_fusion``).
    """
    kernel = _Kernel(program, memory, grid, fuse)
    entry = program.functions[program.entry]
    total = grid[0] * grid[1] * grid[2]

    def one(linear: Any, carried: State) -> State:
        kernel.env = {}
        memory.program = linear
        inner = grid[1] * grid[2]
        x = linear if inner == 1 else lax.div(linear, np.int32(inner))
        y = 0 if grid[1] == 1 else (linear if grid[2] == 1 else lax.div(linear, np.int32(grid[2]))) % np.int32(grid[1])
        z = 0 if grid[2] == 1 else lax.rem(linear, np.int32(grid[2]))
        kernel.pids = (x, y, z)
        _, carried = kernel.run_block(entry.body[0], list(arguments), carried)
        return carried

    if total == 0:
        return state
    if total == 1:
        return one(0, state)
    return lax.fori_loop(0, total, lambda i, s: one(i.astype(jnp.int32), s), state)
