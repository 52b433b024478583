"""Tracing a kernel's TTIR with JAX: each operation as the JAX operations that compute it.

A `Kernel` runs a block's operations on JAX values: element-wise ones here
(`jt_core.translation.lang`), the rest through the handlers of `shapes`,
`accesses`, `reductions` and
`control`; ``tt.call`` is inlined. A construct it cannot express raises
`Unsupported` while tracing, naming the operation and the kernel source line
it comes from; the launcher then hands the call to the interpreter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core.errors import UnsupportedKernelError
from jt_core.interpreter import libdevice
from jt_core.interpreter.libdevice import libdevice_name
from jt_core.translation import (
    accesses,
    control,
    descriptors,
    extern,
    floats,
    folding,
    lang,
    mapped,
    masks,
    products,
    reductions,
    shapes,
)
from jt_core.translation.affine import Affine
from jt_core.translation.memory import Memory, Pointer, State
from jt_core.translation.program import Block, Operation, Program, TensorType
from jt_core.translation.relabeling import Relabeling
from jt_core.translation.strategy import CPU_STRATEGY, Strategy
from jt_core.translation.values import Address, BlockPointer, NotVectorizable, Unsupported

__all__ = ["HANDLERS", "Kernel", "unsupported_operation"]

#: Operations the compiled path does not express, with what to call them in the one line that says why a kernel
#: runs in the interpreter instead.
_REFUSED = {
    "tt.elementwise_inline_asm": "inline asm (tl.inline_asm_elementwise)",
    "tt.print": "device printing (tl.device_print / print)",
    "tt.assert": "a device assertion (tl.device_assert)",
    "tt.int_to_ptr": "an integer turned into a pointer",
    "tt.dot_scaled": "a scaled dot product (tl.dot_scaled)",
}

#: Operations whose effect is more than their results.
_EFFECTS = {"tt.store", "tt.atomic_rmw", "tt.atomic_cas", "tt.call", "tt.load"}

#: Operations with no effect on the CPU.
_NO_EFFECT = {"gpu.barrier", "ttg.barrier", "tt.debug_barrier"}

#: The operations whose result may be a mask known as a box of lanes (`Kernel._track_limits`).
_LIMITED = frozenset({"arith.cmpi", "arith.andi", "tt.broadcast", "tt.expand_dims", "tt.splat", "arith.constant"})

#: The integer operations that keep an affine form.
_AFFINE_OPS = {
    "arith.addi",
    "arith.subi",
    "arith.muli",
    "arith.extsi",
    "arith.trunci",
    "arith.index_cast",
    "arith.bitcast",  # between integers of one width (Triton's front end casts a loop's bounds so)
    "arith.remsi",  # by a constant, of values known to lie in [0, constant): the values themselves
    "arith.remui",
    "arith.divsi",  # by a constant, of values in [0, constant): zero
    "arith.divui",
}


def unsupported_operation(program: Program) -> Unsupported | None:
    """The first operation of ``program`` the compiled path refuses before tracing, or ``None``."""
    for op in program.operations():
        if op.name in _REFUSED:
            return Unsupported(_REFUSED[op.name], op.line)
    return None


class Kernel:
    """Traces the programs of a kernel: `jt_core.translation.grid` runs its entry block once per program, or
    once for many programs side by side.

    Args:
        program: The kernel's TTIR.
        memory: Its buffers.
        grid: The grid, three axes.
        fuse: Whether a product and a sum may be fused into one multiply-add (``enable_fp_fusion``).
        vector: Whether the programs run side by side (stores are recorded, and must be provably independent).
        strategy: The platform's choices.
        relabel: The tiles the programs run over instead of their launched ids, where they do.
        launch: The launched grid, where the programs run over another (``relabel``'s).
    """

    def __init__(
        self,
        program: Program,
        memory: Memory,
        grid: tuple[int, int, int],
        fuse: bool,
        vector: bool = False,
        strategy: Strategy = CPU_STRATEGY,
        relabel: Relabeling | None = None,
        launch: tuple[int, int, int] | None = None,
    ) -> None:
        self.ir = program
        self.strategy = strategy
        #: Where the programs run over the tiles their ids map to: the relabeling (`jt_core.translation.relabeling`).
        self.relabel = relabel
        #: The grid launched (``tl.num_programs``); `grid` is the one the programs' ids range over.
        self.launch = launch or grid
        self.fuse = fuse
        self.memory = memory
        self.grid = grid
        self.vector = vector
        self.pids: tuple[Any, Any, Any] = (0, 0, 0)
        self.env: dict[int, Any] = {}
        #: The affine form of the integer values that have one.
        self.affine: dict[int, Affine] = {}
        #: The masks known to be boxes of lanes, the same in every program (`jt_core.translation.masks`).
        self.limits: dict[int, masks.Limits] = {}
        #: Where both sides of a branch run (programs side by side), the condition of the side being traced: what
        #: its loads, stores and atomics are masked with (`jt_core.translation.control`).
        self.predicate: Any = None
        #: The sides of the branches being traced that way, as (branch, side) pairs, outermost first.
        self.path: tuple[tuple[int, bool], ...] = ()
        #: How deep inside loops and branches run as JAX's control flow the operation being traced is.
        self.region_depth = 0
        #: The stores of a vectorised run: the buffer and the affine form of the offsets.
        self.stores: list[tuple[int, Affine]] = []
        self.used = _used_values(program)
        #: The values XLA may see as constants whatever their value (`jt_core.translation.floats.sign_safe_values`).
        self.sign_safe = floats.sign_safe_values(program)
        #: The one value each element of a value holds where it is known at trace time: a block constant or splat,
        #: and what element-wise operations compute from those and static scalars alone (`known`).
        self.uniform: dict[int, Any] = {}
        self.depth = 0
        #: How many blocks early returns' branches traced so far (`control.cf_branch` bounds it).
        self.branched_blocks = 0
        #: The operands of the products an unrolled loop accumulates, by the dot's result (`control._unrolled`).
        self.deferred_dots: dict[int, list[tuple[jax.Array, jax.Array]]] = {}
        #: For the same products, the pointers their operands were loaded through, where each is a whole block
        #: loaded as it is (``None`` otherwise): what lets a loop's loads be read as one block (`control._unrolled`).
        self.dot_sources: dict[int, list[tuple[Pointer | None, Pointer | None]]] = {}
        #: The pointers of the blocks loaded whole (no mask), by the value loaded.
        self.loaded_from: dict[int, Pointer] = {}
        #: Which products the kernel's sums fuse, and which round alone (`jt_core.translation.products`), where the
        #: strategy rounds as a GPU does.
        self.fusions = products.fusions(program) if strategy.exact_rounding else None
        #: The factors of the products traced so far (a negated one's first factor negated), by value.
        self.factors: dict[int, tuple[jax.Array, jax.Array]] = {}
        #: The blocks of the region each block belongs to, by the block's identity: where a branch finds its target.
        self._regions = _regions(program)
        #: The values that are results of helper calls (``tt.call``).
        self.call_results = {r for op in program.operations() if op.name == "tt.call" for r in op.results}

    # -- values ------------------------------------------------------------------------------------------------

    def type(self, value: int) -> TensorType:
        return self.ir.type_of(value)

    def get(self, value: int) -> Any:
        return self.env[value]

    def affine_of(self, value: int) -> Affine | None:
        """The affine form of an integer value, where it is known: never for integers narrower than 32 bits, whose
        arithmetic wraps where the form, whose sums and products are modulo 2**32 at most, would not."""
        if _narrow(self.type(value)):
            return None
        known = self.affine.get(value)
        if known is not None:
            return known
        found = self.env.get(value)
        if isinstance(found, int) and not isinstance(found, bool):
            return Affine.constant(found).broadcast(self.type(value).shape)
        ty = self.type(value)
        if not ty.shape and ty.element.startswith("i") and ty.element != "i1":
            # A run-time scalar (a loop's counter): affine, with a base known only as a traced value.
            return Affine.unknown_scalar(None if found is None else jnp.asarray(found, jnp.int64))
        return None

    def known(self, value: int) -> Any:
        """The one value each element of ``value`` holds, where it is known at trace time (else ``None``)."""
        found = self.env.get(value)
        return found if lang.is_static(found) else self.uniform.get(value)

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
            if op.name in _TERMINATORS:
                return [self.env[v] for v in op.operands], state
            if op.name in control.BRANCHES:
                return control.cf_branch(self, op, self._regions[id(block)], state)
            try:
                state = self.operation(op, state)
            except Unsupported as exc:
                if exc.line is None and op.line is not None:
                    raise Unsupported(exc.what, op.line) from None
                raise
            except UnsupportedKernelError as exc:
                raise Unsupported(str(exc), op.line) from None
            except NotVectorizable:
                raise
            except Exception as exc:  # a construct this jt cannot trace: named with the line it comes from
                raise Unsupported(f"what it failed to trace ({type(exc).__name__}: {exc})", op.line) from exc
        return [], state

    def operation(self, op: Operation, state: State) -> State:
        name = op.name
        if op.results and not op.regions and name not in _EFFECTS and not any(r in self.used for r in op.results):
            return state  # nothing reads it (Triton's overflow checks without debug=True, say)
        if name in _REFUSED:
            raise Unsupported(_REFUSED[name], op.line)
        if name in _NO_EFFECT:
            return state
        handler = HANDLERS.get(name)
        if handler is not None:
            state = handler(self, op, state)
            if name in _UNIFORM_KEPT:
                self._keep_uniform(op)
        else:
            self.elementwise(op)
        if name in _LIMITED:
            self._track_limits(op)
        if name in products.PASSING_ON and op.operands and op.operands[0] in self.factors:
            shape = self.type(op.results[0]).shape
            a, b = self.factors[op.operands[0]]
            if name == "tt.expand_dims":
                axis = int(op.attr("axis"))
                self.factors[op.results[0]] = (jnp.expand_dims(a, axis), jnp.expand_dims(b, axis))
            else:
                self.factors[op.results[0]] = (jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape))
        if self.relabel is not None and op.results and op.results[0] in self.relabel.axes:
            axis = self.relabel.axes[op.results[0]]
            dtype = lang.dtype_of(self.type(op.results[0]).element)
            self.env[op.results[0]] = jnp.asarray(self.pids[axis]).astype(dtype)
            self.uniform.pop(op.results[0], None)
            unit = [0, 0, 0]
            unit[axis] = 1
            self.affine[op.results[0]] = Affine(0, (unit[0], unit[1], unit[2]))
        return state

    def _keep_uniform(self, op: Operation) -> None:
        """Records the one value of a block constant, or of a block an operation fills from one known value."""
        if op.name == "arith.constant":
            text = op.attr("text")
            ty = self.type(op.results[0])
            if ty.shape and isinstance(text, str) and "[" not in text and ty.element != "ptr":
                element = TensorType((), ty.element, None, ty.element)
                value = lang.constant(text, op.attr("value"), element)
                self._set_uniform(op.results[0], value if lang.is_static(value) else None)
            return
        self._set_uniform(op.results[0], self.known(op.operands[0]))

    def _set_uniform(self, value: int, known: Any) -> None:
        # A value traced again (a loop's body, iteration by iteration) may be known in one trace and not another.
        if known is None:
            self.uniform.pop(value, None)
        else:
            self.uniform[value] = known

    def start_program(self) -> None:
        """Forgets what the program traced before knew: its values and what is known of them."""
        self.env, self.affine, self.limits, self.stores, self.uniform = {}, {}, {}, [], {}
        self.loaded_from, self.factors = {}, {}
        self.predicate = None
        self.path = ()

    def _track_limits(self, op: Operation) -> None:
        """Keeps which lanes a mask has on, where that is a box the same in every program."""
        result = op.results[0]
        shape = self.type(result).shape
        if self.type(result).element != "i1":
            return
        value = self.env.get(result)
        if isinstance(value, (bool, np.bool_)):
            self.limits[result] = masks.full(shape) if value else tuple((0, 0) for _ in shape)
            return
        if op.name == "arith.cmpi":
            lhs, rhs = (self.affine_of(v) for v in op.operands)
            if lhs is None or rhs is None:
                return
            signs = [a.bounds(self.grid) for a in (lhs, rhs)]
            unsigned_ok = all(b is not None and b[0] >= 0 for b in signs)
            found = masks.compared(int(op.attr("predicate")), lhs, rhs, shape, self.grid, unsigned_ok)
        elif op.name == "arith.andi":
            known = [self.limits.get(v) for v in op.operands]
            found = None if any(k is None for k in known) else masks.intersect(*known)  # type: ignore[arg-type]
        elif op.name == "tt.broadcast":
            known_one = self.limits.get(op.operands[0])
            before = self.type(op.operands[0]).shape
            found = None if known_one is None else masks.broadcast(known_one, before, shape)
        elif op.name == "tt.expand_dims":
            known_one = self.limits.get(op.operands[0])
            found = None if known_one is None else masks.expanded(known_one, int(op.attr("axis")))
        else:
            found = None
        if found is not None:
            self.limits[result] = found

    def elementwise(self, op: Operation) -> None:
        args = [self.env[v] for v in op.operands]
        result = self.type(op.results[0])
        types = [self.type(v) for v in op.operands]
        attr = op.attr("predicate")
        if op.name in ("tt.fp_to_fp", "arith.truncf"):
            attr = op.attr("rounding", op.attr("roundingmode"))
        if op.name == "tt.clampf":
            attr = op.attr("propagateNan")
        if any(isinstance(a, (Pointer, BlockPointer, descriptors.Descriptor, Address)) for a in args):
            self.pointer_arithmetic(op, args)
            return
        self._track(op)
        if all(lang.is_static(a) for a in args):
            folded = folding.fold(op.name, args, types, result, attr)
            if folded is not None:
                self.env[op.results[0]] = folded
                return
        known = [self.known(v) for v in op.operands]
        value = None
        if op.name != "tt.extern_elementwise" and all(k is not None for k in known):
            value = folding.evaluate(op.name, known, types, result, attr)
        self._set_uniform(op.results[0], value)
        if value is not None and _float_zero(value, result):
            # XLA computes the same zero from the same constants when it compiles, and its simplifier then turns
            # x + 0.0 into x, which keeps x = -0.0 negative: the zero is hidden from it as a zero constant is.
            zero = float(np.copysign(0.0, float(value)))
            self.env[op.results[0]] = lang.as_array(zero, result, op.results[0] not in self.sign_safe)
            return
        arrays = [
            lang.as_array(a, t, not floats.sign_safe_use(op.name, i))
            for i, (a, t) in enumerate(zip(args, types, strict=True))
        ]
        if op.name == "tt.extern_elementwise":
            symbol = str(op.attr("symbol", ""))
            if not extern.computes(symbol):
                raise Unsupported(f"{libdevice_name(symbol)} (the external function {symbol!r})", op.line)
            out = extern.extern_call(symbol, arrays, lang.dtype_of(result.element))
        else:
            fused = self._fused(op, arrays)
            out = lang.elementwise(op.name, arrays, result, attr) if fused is None else fused
            if self.fusions is not None:
                out = self._keep_products(op, arrays, out)
        self.env[op.results[0]] = out

    def _fused(self, op: Operation, arrays: list[jax.Array]) -> jax.Array | None:
        """A sum or difference that fuses a product, rounded once (`jt_core.translation.products`), or ``None``."""
        if self.fusions is None or not self.fuse or op.name not in ("arith.addf", "arith.subf"):
            return None
        index = self.fusions.fused.get(id(op))
        if index is None or op.operands[index] not in self.factors:
            return None
        a, b = self.factors[op.operands[index]]
        other = arrays[1 - index]
        if op.name == "arith.subf":
            if index == 0:
                other = -other  # a * b - c
            else:
                a = -a  # c - a * b
        return floats.round_bfloat16(libdevice.fused_multiply_add(libdevice.jax_arrays(), a, b, other.astype(a.dtype)))

    def _keep_products(self, op: Operation, arrays: list[jax.Array], out: jax.Array) -> jax.Array:
        """Keeps a product's factors for the sums that fuse it; a product that rounds alone while a sum may read it
        is kept from XLA's own contraction (an optimisation barrier): XLA's CPU code fuses a float32 product and
        sum, and float16 ones where the processor has AVX-512 FP16, which would give other bits on other hosts."""
        if op.name == "arith.negf" and op.operands[0] in self.factors:
            a, b = self.factors[op.operands[0]]
            self.factors[op.results[0]] = (-a, b)
        if op.name != "arith.mulf":
            return out
        if self.fuse:
            self.factors[op.results[0]] = (arrays[0], arrays[1])
        if self.fusions is not None and op.results[0] in self.fusions.rounded:
            out = lax.optimization_barrier(out)
        return out

    def _track(self, op: Operation) -> None:
        """Keeps the affine form of a sum, difference or product with a constant of affine integers."""
        if op.name not in _AFFINE_OPS or _narrow(self.type(op.results[0])):
            return
        known = [self.affine_of(v) for v in op.operands]
        if any(a is None for a in known):
            return
        a = known[0]
        assert a is not None
        if op.name == "arith.bitcast" and self.type(op.operands[0]).element != self.type(op.results[0]).element:
            return
        if op.name in ("arith.extsi", "arith.trunci", "arith.index_cast", "arith.bitcast"):
            self.affine[op.results[0]] = a
            return
        b = known[1]
        assert b is not None
        if op.name in ("arith.remsi", "arith.remui", "arith.divsi", "arith.divui"):
            bounds = a.bounds(self.grid)
            if b.is_constant and b.const > 0 and bounds is not None and bounds[0] >= 0 and bounds[1] < b.const:
                rem = op.name.startswith("arith.rem")
                shape = self.type(op.results[0]).shape
                self.affine[op.results[0]] = a if rem else Affine.constant(0, shape)
            return
        if op.name == "arith.addi":
            self.affine[op.results[0]] = a.plus(b)
        elif op.name == "arith.subi":
            self.affine[op.results[0]] = a.plus(b, -1)
        elif b.is_constant:
            self.affine[op.results[0]] = a.times(b.const).broadcast(self.type(op.results[0]).shape)
        elif a.is_constant:
            self.affine[op.results[0]] = b.times(a.const).broadcast(self.type(op.results[0]).shape)

    def pointer_arithmetic(self, op: Operation, args: Sequence[Any]) -> None:
        """``arith.select`` between pointers of one buffer, and the pointer comparisons (of addresses too: with
        zero, or with another into the same buffer)."""
        if any(isinstance(a, Address) for a in args):
            if op.name != "arith.cmpi":
                raise Unsupported(_ADDRESS_AS_NUMBER, op.line)
            self.env[op.results[0]] = _address_comparison(self, op, args)
            return
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


_ADDRESS_AS_NUMBER = "a pointer's address used as a number (the compiled path only knows that it is not null)"

#: ``arith.cmpi`` predicates by number, and what each gives comparing a non-null address with zero (``None``: a
#: signed comparison, which depends on the address).
_VERSUS_NULL = {0: False, 1: True, 2: None, 3: None, 4: None, 5: None, 6: False, 7: False, 8: True, 9: True}


def _address_comparison(k: Kernel, op: Operation, args: Sequence[Any]) -> Any:
    """An ``arith.cmpi`` of an address (`Address`): with zero, it is what a non-null pointer gives; with the
    address of another pointer into the same buffer, the offsets' comparison (unsigned: byte addresses)."""
    shape = k.type(op.results[0]).shape
    predicate = int(op.attr("predicate"))
    if all(isinstance(a, Address) for a in args):
        a, b = args[0].pointer, args[1].pointer
        if isinstance(a, Pointer) and isinstance(b, Pointer) and a.buffer == b.buffer:
            return lang.elementwise(
                "arith.cmpi", [jnp.asarray(a.offset), jnp.asarray(b.offset)], k.type(op.results[0]), predicate
            )
        raise Unsupported("a comparison of the addresses of two arguments, which the compiled path does not know")
    other = op.operands[1] if isinstance(args[0], Address) else op.operands[0]
    if isinstance(args[1], Address):  # 0 < p is p > 0
        predicate = {2: 4, 3: 5, 4: 2, 5: 3, 6: 8, 7: 9, 8: 6, 9: 7}.get(predicate, predicate)
    known = _VERSUS_NULL.get(predicate)
    zero = k.affine_of(other)
    if zero is None or not zero.is_constant or zero.const != 0 or known is None:
        raise Unsupported(_ADDRESS_AS_NUMBER)
    return known if not shape else jnp.full(shape, known)


def _ptr_to_int(k: Kernel, op: Operation, state: State) -> State:
    pointer = k.get(op.operands[0])
    if not isinstance(pointer, Pointer):
        raise Unsupported("a pointer turned into an integer", op.line)
    k.env[op.results[0]] = Address(pointer)
    return state


def _call(k: Kernel, op: Operation, state: State) -> State:
    args = [k.get(v) for v in op.operands]
    chained = [i for i, v in enumerate(op.operands) if v in k.call_results and _is_block(args[i])]
    if chained:
        # A helper's result handed straight to another helper (the stages of a sorting network): materialized
        # between the two, XLA compiles each stage once; fused, it duplicates every earlier stage into each use of
        # a later one (a 512-element bitonic argsort took minutes to compile).
        kept = lax.optimization_barrier([args[i] for i in chained])
        for i, array in zip(chained, kept, strict=True):
            args[i] = array
    results, state = k.call(str(op.attr("callee")), args, state, op.line)
    for value, result in zip(op.results, results, strict=True):
        k.env[value] = result
    return state


HANDLERS = {
    **shapes.HANDLERS,
    **accesses.HANDLERS,
    **descriptors.HANDLERS,
    **reductions.HANDLERS,
    **mapped.HANDLERS,
    "tt.call": _call,
    "tt.ptr_to_int": _ptr_to_int,
    "scf.for": control.scf_for,
    "scf.if": control.scf_if,
    "scf.while": control.scf_while,
}


#: Operations whose result holds one known value where their operand does: constants, splats, and what moves a
#: block's elements around.
_UNIFORM_KEPT = frozenset({"arith.constant", "tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans"})


def _float_zero(value: Any, ty: TensorType) -> bool:
    return (ty.element.startswith("f") or ty.element == "bf16") and not isinstance(value, bool) and float(value) == 0


def _is_block(value: Any) -> bool:
    """Whether ``value`` is a JAX array of more than one dimension's worth of elements (a block, not a scalar)."""
    return isinstance(value, jax.Array) and value.ndim > 0


def _narrow(ty: TensorType) -> bool:
    """Whether ``ty`` is an integer type narrower than 32 bits."""
    return ty.element in ("i1", "i8", "i16")


_TERMINATORS = {"scf.yield", "tt.return", "tt.reduce.return", "tt.scan.return", "scf.condition", mapped.RETURN}


def _regions(program: Program) -> dict[int, tuple[Block, ...]]:
    found: dict[int, tuple[Block, ...]] = {}

    def visit(blocks: tuple[Block, ...]) -> None:
        for block in blocks:
            found[id(block)] = blocks
            for op in block.operations:
                for region in op.regions:
                    visit(region)

    for function in program.functions.values():
        visit(function.body)
    return found


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
