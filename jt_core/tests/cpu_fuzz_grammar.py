"""Element-wise Triton expressions for the CPU fuzzer: generated as typed trees, written out as kernel source (one
assignment per node) and evaluated with NumPy as Triton means them (`cpu_fuzz_semantics`).

Every value carries an error bound beside it: zero where the operation is exact (the result must then match bit for
bit), a few units in the last place after a transcendental function, propagated through the operations after it,
and infinite ("any result") where an inexact value decides a comparison, a rounding to an integer or a branch
within its error. Known divergences that a path is allowed for now (``slack``) widen the bounds the same way.

The programs avoid undefined behaviour: divisors are never zero (nor -1 under the type's minimum), shift amounts
are masked below the width, floats are converted to integers only inside the target's range, and float-to-int
bitcasts only move loaded bits (NaN payloads after arithmetic are unspecified).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from cpu_fuzz_semantics import (
    F32,
    F64,
    FLOAT,
    I1,
    I32,
    I64,
    NEGATES_BY_SUBTRACTION,
    PROMOTES_BF16,
    Ty,
    computation_type,
    convert,
    fma32,
    largest,
    literal_fits,
    literal_type,
    mulhi,
    round_f64,
    shift_right,
    smallest_normal,
    trunc_div,
    trunc_rem,
    ty,
    ulp,
)
from hypothesis import strategies as st


@dataclasses.dataclass(frozen=True, eq=False)
class Node:
    """One value of an expression: ``op`` on ``args``, of type ``ty``; ``literal`` for Python literals."""

    op: str
    args: tuple[Node, ...]
    ty: Ty
    literal: bool = False
    attr: Any = None


@dataclasses.dataclass
class Val:
    """A value as the reference computes it: elements, type, whether a literal, and the error bound per element."""

    v: np.ndarray
    ty: Ty
    literal: bool
    err: np.ndarray


ARITH = ("+", "-", "*")
INT_ONLY = ("//", "&", "|", "^", "<<", ">>")
COMPARE = ("==", "!=", "<", "<=", ">", ">=")
#: ``tl.math`` functions whose results are rounded correctly on every path.
EXACT_MATH = ("floor", "ceil", "sqrt", "sqrt_rn", "abs")
#: Transcendental functions: a few units in the last place apart, by implementation.
INEXACT_MATH = ("exp", "exp2", "log", "log2", "sin", "cos", "rsqrt", "erf")
LIBDEVICE_FLOAT = ("round", "rint", "trunc")
FLOAT_LITERALS = (0.5, 2.0, -3.0, 0.25, 1.5, -0.75, 100.0, 0.1, -2.5, float("inf"), float("-inf"))
INT_LITERALS = (0, 2, 3, 5, 7, -1, -2, -7, 100, 127, 255, 1000, -129, 65536, 2**31 - 1, 3_000_000_000, -(2**40))


# -- generation -----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Leaves:
    """What an expression may start from: the loaded blocks and the kernel's scalar arguments (name, type)."""

    loads: tuple[tuple[str, Ty], ...]
    scalars: tuple[tuple[str, Ty], ...] = ()


def _cast(x: Node, target: Ty) -> Node:
    return x if x.ty == target and not x.literal else Node("cast", (x,), target)


def _float_arg(x: Node) -> Node:
    """``x`` as an argument of a ``tl.math`` function, which takes float32 and float64 only."""
    return x if x.ty in (F32, F64) and not x.literal else _cast(x, F32)


@st.composite
def literals(draw: Any, kind: str) -> Node:
    value = draw(st.sampled_from(FLOAT_LITERALS if kind == "float" else INT_LITERALS))
    return Node("lit", (), literal_type(value), True, value)


@st.composite
def expressions(draw: Any, leaves: Leaves, depth: int, avoid: frozenset[str]) -> Node:
    """A typed expression tree over ``leaves``, at most ``depth`` operations deep."""
    if depth <= 0 or draw(st.integers(0, 4)) == 0:
        if leaves.scalars and draw(st.integers(0, 5)) == 0:
            name, t = draw(st.sampled_from(leaves.scalars))
            return Node("scalar", (), t, attr=name)
        name, t = draw(st.sampled_from(leaves.loads))
        return Node("load", (), t, attr=name)
    family = draw(st.sampled_from(("binary", "binary", "binary", "unary", "cast", "where", "math", "compare")))
    sub = expressions(leaves, depth - 1, avoid)
    a = draw(sub)
    if family == "unary":
        if a.ty == I1:
            a = _cast(a, I32)
        ops = ["neg", "abs"] + (["invert"] if a.ty.is_int and (a.ty.signed or "invert_unsigned" not in avoid) else [])
        return _unary(draw(st.sampled_from(ops)), a)
    if family == "cast":
        return draw(casts(a, avoid))
    if family == "math":
        return draw(math_calls(a, sub, avoid))
    b = draw(st.one_of(sub, literals("float" if a.ty.is_float else "int"))) if draw(st.booleans()) else draw(sub)
    if family == "where":
        c = draw(sub)
        return _binary("where", a, b, draw, avoid, cond=truthy(c))
    if family == "compare":
        return _binary(draw(st.sampled_from(COMPARE)), a, b, draw, avoid)
    ops = ARITH + ARITH + INT_ONLY + ("/", "%", "minimum", "maximum")
    return _binary(draw(st.sampled_from(ops)), a, b, draw, avoid)


def truthy(c: Node) -> Node:
    """``c != 0`` as an int1 condition (``c`` itself when it is one); a 16-bit float is compared as float32,
    which gives the same answer."""
    if c.ty == I1:
        return c
    if c.ty.name in ("fp16", "bf16"):
        c = _cast(c, F32)
    return Node("!=", (c, Node("lit", (), I32, True, 0)), I1)


def where(a: Node, b: Node, cond: Node, draw: Any, avoid: frozenset[str]) -> Node:
    """``tl.where(cond, a, b)``, its operands promoted as Triton promotes them."""
    return _binary("where", a, b, draw, avoid, cond=cond)


def _unary(op: str, a: Node) -> Node:
    return Node(op, (a,), a.ty)


def _fit_literal(a: Node, b: Node, avoid: frozenset[str], div_or_mod: bool = False) -> tuple[Node, Node]:
    """Operands with any literal replaced by one Triton accepts in their computation type (and a bfloat16 operand
    meeting a literal taken as float32, where bfloat16 literals are avoided)."""
    for lit, other in ((a, b), (b, a)):
        meets = lit.literal and not other.literal and other.ty.name == "bf16" and "bf16_literal" in avoid
        if meets and computation_type(lit.ty, True, other.ty, False, div_or_mod).name == "bf16":
            a, b = (a, _cast(b, F32)) if lit is a else (_cast(a, F32), b)
    for lit, other in ((a, b), (b, a)):
        if lit.literal and not other.literal:
            target = computation_type(lit.ty, True, other.ty, False, div_or_mod)
            if not literal_fits(lit.attr, target) or (target.is_int and isinstance(lit.attr, float)):
                fixed = Node("lit", (), I32, True, 3 if target.is_int else 0.5)
                a, b = (fixed, b) if lit is a else (a, fixed)
    if a.literal and b.literal:
        a = _cast(a, I32 if a.ty.is_int else F32)
    return a, b


def _binary(op: str, a: Node, b: Node, draw: Any, avoid: frozenset[str], cond: Node | None = None) -> Node:
    if op in INT_ONLY or (op == "%" and (a.ty.is_int or b.ty.is_int)):
        a, b = _as_int(a), _as_int(b)
    if op in (*ARITH, "//", "%", "<<", ">>", "minimum", "maximum", "/", *COMPARE):
        a, b = (_cast(a, I32) if a.ty == I1 else a), (_cast(b, I32) if b.ty == I1 else b)
    if op in ("/", "//", "%") and a.ty.is_int and b.ty.is_int:
        # Triton refuses /, // and % between integers of different signedness, and a literal counts as signed.
        if a.literal or b.literal:
            lit, other = (a, b) if a.literal else (b, a)
            fixed = _cast(lit if literal_fits(lit.attr, other.ty) else Node("lit", (), I32, True, 3), other.ty)
            a, b = (fixed, b) if a.literal else (a, fixed)
        if a.ty.signed != b.ty.signed:
            b = _cast(b, a.ty)
    if op in ("<<", ">>"):
        a = _cast(a, I32) if a.literal else a
        b = Node("lit", (), I32, True, abs(b.attr) % 8) if b.literal else b
    a, b = _fit_literal(a, b, avoid, div_or_mod=op in ("/", "//", "%"))
    if op in ("minimum", "maximum") and PROMOTES_BF16:
        # After the literals are fitted: one put in place of a literal Triton refuses is a tensor to Triton 3.6 too.
        a, b = _promote_bf16(a), _promote_bf16(b)
    comp = computation_type(a.ty, a.literal, b.ty, b.literal, op in ("/", "//", "%"))
    if op == "where":
        assert cond is not None
        return Node("where", (cond, a, b), comp)
    if op in COMPARE:
        return Node(op, (a, b), I1)
    if op == "/":
        return Node("/", (a, b), comp if comp.is_float else F32)
    if op in ("minimum", "maximum"):
        return Node(op, (a, b), comp, attr=draw(st.sampled_from(("NONE", "ALL"))))
    return Node(op, (a, b), comp)


def _promote_bf16(x: Node) -> Node:
    """``x`` as Triton 3.6's minimum, maximum and clamp take it: bfloat16 as float32, and a literal as the tensor
    ``to_tensor`` makes of it (int32 or float32, promoted with the other operand as any tensor is)."""
    if x.literal:
        return _cast(x, F32 if isinstance(x.attr, float) else I32) if literal_fits(x.attr, I32) or x.ty.is_float else x
    return _cast(x, F32) if x.ty.name == "bf16" else x


def _as_int(x: Node) -> Node:
    if x.ty.is_int:
        return x
    return Node("lit", (), I32, True, 5) if x.literal else _safe_to_int(x, I32)


def converted(x: Node, target: Ty) -> Node:
    """``x.to(target)``, through the in-range guard where a float becomes an integer."""
    if x.ty == target and not x.literal:
        return x
    return _safe_to_int(x, target) if target.is_int and x.ty.is_float else _cast(x, target)


def _safe_to_int(x: Node, target: Ty) -> Node:
    """``x`` converted to the integer type ``target`` after zeroing what lies outside its range (and NaN)."""
    # Triton converts 16-bit floats to integers through float32: converting first changes nothing and keeps the
    # range checks' literals in float32.
    source = x.ty if x.ty.is_float and not x.literal and x.ty.bits >= 32 else F32
    x = _cast(x, source)
    return Node("safe_to_int", (x,), target)


@st.composite
def casts(draw: Any, a: Node, avoid: frozenset[str]) -> Node:
    target = ty(draw(st.sampled_from(("int8", "int32", "int64", "uint8", "uint32", "fp16", "bf16", "fp32", "fp64"))))
    if a.literal:
        a = _cast(a, I32 if a.ty.is_int else F32)
    if draw(st.integers(0, 4)) == 0:
        pairs = {"int32": "fp32", "uint32": "fp32", "fp32": "int32", "int64": "fp64", "fp64": "int64", "int8": "uint8"}
        pairs.update({"uint8": "int8"})
        if a.ty.name in pairs and (a.ty.is_int or a.op == "load"):
            return Node("bitcast", (a,), ty(pairs[a.ty.name]))
    if a.ty.is_float and target.is_int:
        if target in (I32, I64) and "out_of_range_float_to_int" not in avoid and draw(st.booleans()):
            return Node("saturate_to_int", (a,), target)
        return _safe_to_int(a, target)
    return _cast(a, target)


@st.composite
def math_calls(draw: Any, a: Node, sub: Any, avoid: frozenset[str]) -> Node:
    choice = draw(st.sampled_from(("exact", "exact", "inexact", "libdevice", "fma", "clamp", "div_rn", "mulhi")))
    if choice == "exact":
        fn = draw(st.sampled_from(EXACT_MATH))
        if fn == "abs":
            return (
                Node("abs", (a,), a.ty if a.ty != I1 else I32, attr="math")
                if a.ty != I1
                else _unary("abs", _cast(a, I32))
            )
        x = _float_arg(a) if fn != "sqrt_rn" else _cast(a, F32)
        return Node("math", (x,), x.ty, attr=fn)
    if choice == "inexact":
        x = _float_arg(a)
        return Node("math", (x,), x.ty, attr=draw(st.sampled_from(INEXACT_MATH)))
    if choice == "libdevice":
        fns = [f for f in LIBDEVICE_FLOAT if not (f == "round" and "libdevice_round" in avoid)]
        fn = draw(st.sampled_from([*fns, "copysign"]))
        x = _float_arg(a)
        if fn == "copysign":
            return Node("libdevice", (x, _cast(draw(sub), x.ty)), x.ty, attr=fn)
        return Node("libdevice", (x,), x.ty, attr=fn)
    if choice == "fma":
        x = _cast(a, F32)
        return Node("fma", (x, _cast(draw(sub), F32), _cast(draw(sub), F32)), F32)
    if choice == "div_rn":
        return Node("div_rn", (_cast(a, F32), _cast(draw(sub), F32)), F32)
    if choice == "clamp":
        if not a.ty.is_float or a.literal or (PROMOTES_BF16 and a.ty.name == "bf16"):
            a = _cast(a, F32)
        lo, hi = sorted(draw(st.sampled_from(((-1.0, 1.0), (0.0, 10.0), (-100.0, -0.5), (2.0, 2.0)))))
        return Node("clamp", (a,), a.ty, attr=(lo, hi, draw(st.sampled_from(("NONE", "ALL")))))
    t = ty(draw(st.sampled_from(("int32", "uint32", "int64") if "umulhi_64_bit" not in avoid else ("int32", "uint32"))))
    x = a if a.ty == t else (_cast(a, t) if a.ty.is_int else _safe_to_int(a, t))
    b = draw(sub)
    y = b if b.ty == t else (_cast(b, t) if b.ty.is_int else _safe_to_int(b, t))
    how = draw(st.sampled_from(("umulhi", "libdevice")))
    if how == "libdevice" and ("libdevice_mul64hi" if t.bits == 64 else "libdevice_mulhi") in avoid:
        how = "umulhi"
    return Node("mulhi", (x, y), t, attr=how)


# -- source ---------------------------------------------------------------------------------------------------------


class Writer:
    """Writes expressions as one assignment per node (each node once), returning the name that holds a value."""

    def __init__(self, prefix: str = "v", indent: str = "    ") -> None:
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self.prefix = prefix
        self.indent = indent
        self.uses_libdevice = False

    def emit(self, text: str) -> str:
        name = f"{self.prefix}{len(self.lines)}"
        self.lines.append(f"{self.indent}{name} = {text}")
        return name

    def __call__(self, node: Node) -> str:
        key = id(node)
        if key not in self.names:
            self.names[key] = self._write(node)
        return self.names[key]

    def _write(self, n: Node) -> str:
        op, t = n.op, n.ty
        if op == "lit":
            return repr(n.attr) if not isinstance(n.attr, float) or np.isfinite(n.attr) else f'float("{n.attr}")'
        if op in ("load", "scalar"):
            return str(n.attr)
        args = [self(a) for a in n.args]
        if op == "cast":
            if n.args[0].literal:
                return self.emit(f"tl.full([], {args[0]}, {t.tl})")
            return self.emit(f"{args[0]}.to({t.tl})")
        if op == "bitcast":
            return self.emit(f"{args[0]}.to({t.tl}, bitcast=True)")
        if op == "saturate_to_int":
            return self.emit(f"{args[0]}.to({t.tl})")
        if op == "safe_to_int":
            low, high = _int_range_in(n.args[0].ty, t)
            keep = f"({args[0]} >= {low!r}) & ({args[0]} {high[0]} {high[1]!r})"
            return self.emit(f"tl.where({keep}, {args[0]}, 0.0).to({t.tl})")
        if op == "neg":
            return self.emit(f"-{args[0]}")
        if op == "invert":
            return self.emit(f"~{args[0]}")
        if op == "abs":
            return self.emit(f"tl.abs({args[0]})")
        if op in COMPARE + ARITH + ("&", "|", "^", "/"):
            return self.emit(f"{args[0]} {op} {args[1]}")
        if op in ("//", "%", "<<", ">>") and n.ty.name == "int1":
            return self.emit(f"{args[0]} {op} {args[1]}")  # defined for every int1 divisor and shift (above)
        if op in ("//", "%") and n.ty.is_int:
            a, b = self._safe_division(n, args)
            return self.emit(f"{a} {op} {b}")
        if op == "%":
            return self.emit(f"{args[0]} % {args[1]}")
        if op in ("<<", ">>"):
            if n.args[1].literal:
                return self.emit(f"{args[0]} {op} {args[1]}")
            return self.emit(f"{args[0]} {op} ({args[1]} & {t.bits - 1})")
        if op in ("minimum", "maximum"):
            return self.emit(f"tl.{op}({args[0]}, {args[1]}, propagate_nan=tl.PropagateNan.{n.attr})")
        if op == "where":
            return self.emit(f"tl.where({args[0]}, {args[1]}, {args[2]})")
        if op == "math":
            return self.emit(f"tl.math.{n.attr}({args[0]})" if n.attr != "abs" else f"tl.abs({args[0]})")
        if op == "libdevice":
            self.uses_libdevice = True
            return self.emit(f"libdevice.{n.attr}({', '.join(args)})")
        if op == "fma":
            return self.emit(f"tl.fma({args[0]}, {args[1]}, {args[2]})")
        if op == "div_rn":
            return self.emit(f"tl.math.div_rn({args[0]}, {args[1]})")
        if op == "clamp":
            lo, hi, nan = n.attr
            return self.emit(f"tl.clamp({args[0]}, {lo!r}, {hi!r}, propagate_nan=tl.PropagateNan.{nan})")
        if op == "mulhi":
            if n.attr == "libdevice":
                self.uses_libdevice = True
                return self.emit(f"libdevice.mulhi({args[0]}, {args[1]})")
            return self.emit(f"tl.umulhi({args[0]}, {args[1]})")
        raise AssertionError(op)

    def _safe_division(self, n: Node, args: list[str]) -> tuple[str, str]:
        """Operands of an integer ``//`` or ``%`` in their common type, the divisor made nonzero and the dividend
        moved off the type's minimum where the divisor is -1 (both undefined)."""
        t = n.ty
        a, b = args
        if n.args[0].ty != t:
            a = self.emit(f"{a}.to({t.tl})")
        if n.args[1].ty != t:
            b = self.emit(f"{b}.to({t.tl})")
        b = self.emit(f"{b} + ({b} == 0).to({t.tl})")
        if t.signed:
            a = self.emit(f"{a} + (({a} == {-(2 ** (t.bits - 1))}) & ({b} == -1)).to({t.tl})")
        return a, b


def _int_range_in(source: Ty, target: Ty) -> tuple[float, tuple[str, float]]:
    """Bounds, exact in ``source``, of the values that convert to ``target`` in range: ``x >= low`` and
    ``x < high`` (or ``x <= largest finite`` where ``high`` exceeds the type)."""
    if target.name == "int1":
        return -1.0, ("<", 2.0)
    low = -(2.0 ** (target.bits - 1)) if target.signed else 0.0
    high = 2.0 ** (target.bits - 1) if target.signed else 2.0**target.bits
    limit = largest(source)
    if high > limit:
        return max(low, -limit), ("<=", limit)
    return low, ("<", high)


# -- evaluation -----------------------------------------------------------------------------------------------------


class Evaluator:
    """Computes expressions with NumPy over named leaf values, with the error bounds described above.

    ``slack`` names the known divergences the path being checked is allowed:

    * ``"bf16_excess"``: a bfloat16 result may be unrounded;
    * ``"minnum_nan"``: ``tl.minimum``, ``tl.maximum`` and ``tl.clamp`` may give NaN for a NaN operand;
    * ``"fma_rounding"``: an ``fma`` may round its product before the sum;
    * ``"add_zero"``: ``x + 0`` may keep ``x``'s sign of zero where the zero is a scalar or a block of zeros;
    * ``"scalar_division"``: a division by a scalar (an argument or a constant) may be one rounding off.

    With ``flush``, it computes as a processor that flushes subnormal float32, float64 and bfloat16 operands and
    results to zero: every value (``True``), or, with ``"use"``, the operands and results of what computes (the
    compiled path's loads, stores, ``tl.where``, bit casts, negations, absolute values and conversions to and from
    narrower floats keep them).
    """

    def __init__(self, env: dict[str, Val], slack: frozenset[str] = frozenset(), flush: bool | str = False) -> None:
        self.flush = flush
        self.env = env if flush == "use" else {name: self.flushed(val) for name, val in env.items()}
        self.slack = slack
        self.memo: dict[int, Val] = {}

    def flushed(self, val: Val) -> Val:
        """``val`` with subnormals made zeros of their sign, when this evaluator flushes them."""
        if not self.flush or val.ty.name not in FLUSHED:
            return val
        return Val(flush_subnormals(val.v, val.ty), val.ty, val.literal, val.err)

    def __call__(self, node: Node) -> Val:
        if id(node) not in self.memo:
            self.memo[id(node)] = self._eval(node)
        return self.memo[id(node)]

    def _exact(self, v: np.ndarray, t: Ty, literal: bool = False) -> Val:
        return Val(np.asarray(v), t, literal, np.zeros(np.shape(v)))

    def _eval(self, n: Node) -> Val:
        op, t = n.op, n.ty
        if op == "lit":
            return self._exact(np.asarray(n.attr), t, True)
        if op in ("load", "scalar"):
            return self.env[n.attr]
        args = [self(a) for a in n.args]
        computes = self.flush != "use" or _computes(n, args)
        if computes and self.flush == "use":
            args = [self.flushed(a) for a in args]
        with np.errstate(all="ignore"):
            result = self._slacken(n, self._compute(n, args), args)
        return self.flushed(result) if computes else result

    def _in(self, x: Val, t: Ty) -> np.ndarray:
        """``x`` converted to ``t`` as an operand (a literal's value rounded once to ``t``)."""
        if x.literal:
            if t.is_float:
                return round_f64(np.asarray(float(x.v)), t)
            return np.asarray(int(x.v)).astype(np.int64).astype(t.np)
        return convert(x.v, x.ty, t)

    def _compute(self, n: Node, args: list[Val]) -> Val:
        op, t = n.op, n.ty
        if op == "cast":
            x = args[0]
            out = self._in(x, t)
            return Val(out, t, False, self._carry(out, t, x.err, rounds=x.ty.is_float or t.is_float))
        if op == "bitcast":
            return Val(np.ascontiguousarray(args[0].v).view(t.np), t, False, _unknown_where(args[0].err))
        if op == "safe_to_int":
            x = args[0]
            low, (cmp, high) = _int_range_in(x.ty, t)
            wide = x.v.astype(np.float64)
            keep = (wide >= low) & ((wide < high) if cmp == "<" else (wide <= high))
            out = convert(np.where(keep, x.v, 0), x.ty, t)
            near = _near_integer_step(wide, x.err) | ((np.abs(wide - low) <= x.err) | (np.abs(wide - high) <= x.err))
            return Val(out, t, False, np.where(near & (x.err > 0), np.inf, 0.0))
        if op == "saturate_to_int":
            # Out of range, a conversion to int32 or int64 saturates and NaN becomes 0, as PTX's cvt.rzi does.
            x = args[0]
            wide = np.trunc(x.v.astype(np.float64))
            info = np.iinfo(t.np)
            high, low, nan = wide >= 2.0 ** (t.bits - 1), wide < -(2.0 ** (t.bits - 1)), np.isnan(wide)
            inside = np.where(high | low | nan, 0.0, wide).astype(np.int64)
            result = np.where(high, info.max, np.where(low, info.min, inside)).astype(t.np)
            near = _near_integer_step(x.v.astype(np.float64), x.err)
            return Val(result, t, False, np.where(near & (x.err > 0), np.inf, 0.0))
        if op in ("neg", "invert", "abs") and t.name == "int1":
            # int1 is unsigned and wraps modulo 2: -p is 0 - p, which is p; abs keeps it; ~p is its logical not.
            x = args[0]
            v = np.asarray(x.v).astype(bool)
            return Val(~v if op == "invert" else v.copy(), t, False, x.err.copy())
        if op in ("neg", "invert", "abs"):
            x = args[0]
            v = x.v.astype(t.np)
            out = {"neg": lambda: (-v).astype(t.np), "invert": lambda: ~v, "abs": lambda: np.abs(v).astype(t.np)}[op]()
            if op == "neg" and t.is_float and NEGATES_BY_SUBTRACTION:
                out = (np.zeros((), t.np) - v).astype(t.np)
            if op == "abs" and t.is_float:
                out = np.copysign(v.astype(np.float64), 1.0).astype(t.np)
            return Val(out, t, False, x.err.copy())
        if op in COMPARE:
            a, b = args
            comp = computation_type(a.ty, a.literal, b.ty, b.literal)
            x, y = self._in(a, comp), self._in(b, comp)
            out = _compare(op, x, y)
            err = a.err + b.err
            close = (err > 0) & ~(np.abs(x.astype(np.float64) - y.astype(np.float64)) > err)
            return Val(out, I1, False, np.where(close, np.inf, 0.0))
        if op == "where":
            c, a, b = args
            x, y = self._in(a, t), self._in(b, t)
            out = np.where(c.v.astype(bool), x, y)
            err = np.where(c.v.astype(bool), a.err, b.err)
            unsure = c.err > 0
            same = x.astype(np.float64) == y.astype(np.float64)
            return Val(out.astype(t.np), t, False, np.where(unsure & ~same, np.inf, np.maximum(err, 0)))
        if op in ("minimum", "maximum"):
            return self._min_max(n, args)
        if op in (*ARITH, "&", "|", "^", "<<", ">>", "//", "%", "/"):
            return self._arith(n, args)
        if op == "math":
            return self._math(n, args[0])
        if op == "libdevice":
            return self._libdevice(n, args)
        if op == "fma":
            a, b, c = args
            out = fma32(a.v, b.v, c.v)
            err = np.abs(a.v.astype(np.float64)) * b.err + np.abs(b.v.astype(np.float64)) * a.err + c.err
            if "fma_rounding" in self.slack:
                # Rounding the product first is off by half an ulp of the product, which may be far larger than
                # the result where the sum cancels.
                err = err + ulp(out, F32) + ulp(a.v.astype(np.float64) * b.v.astype(np.float64), F32)
            return Val(out, F32, False, self._carry(out, F32, err))
        if op == "div_rn":
            a, b = args
            out = (a.v.astype(np.float32) / b.v.astype(np.float32)).astype(np.float32)
            return Val(out, F32, False, self._carry(out, F32, _div_err(a, b)))
        if op == "clamp":
            (x,) = args
            lo, hi, nan = n.attr
            low, high = np.asarray(lo, t.np), np.asarray(hi, t.np)
            out = np.fmin(np.fmax(x.v, low), high) if nan == "NONE" else np.minimum(np.maximum(x.v, low), high)
            err = x.err.copy()
            if nan == "NONE" and "minnum_nan" in self.slack:
                err = np.where(np.isnan(x.v.astype(np.float64)), np.inf, err)
            return Val(out.astype(t.np), t, False, err)
        if op == "mulhi":
            a, b = args
            if n.attr == "libdevice" and t.signed:
                if t.bits == 32:
                    out = ((a.v.astype(np.int64) * b.v.astype(np.int64)) >> 32).astype(np.int32)
                else:
                    x, y = np.broadcast_arrays(np.asarray(a.v), np.asarray(b.v))
                    pairs = zip(x.ravel(), y.ravel(), strict=True)
                    out = np.array([(int(p) * int(q)) >> 64 for p, q in pairs], np.int64).reshape(x.shape)
            else:
                out = mulhi(a.v, b.v, t)
            return Val(out, t, False, _unknown_where(a.err + b.err))
        raise AssertionError(op)

    def _arith(self, n: Node, args: list[Val]) -> Val:
        op = n.op
        a, b = args
        div_or_mod = op in ("/", "//", "%")
        comp = computation_type(a.ty, a.literal, b.ty, b.literal, div_or_mod)
        if op == "/" and not comp.is_float:
            comp = F32
        x, y = self._in(a, comp), self._in(b, comp)
        err = np.zeros(np.broadcast(x, y).shape)
        if comp.name == "int1":
            return Val(int1_arithmetic(op, x, y), comp, False, _unknown_where(a.err + b.err))
        if comp.is_int:
            if op == "+":
                out = x + y
            elif op == "-":
                out = x - y
            elif op == "*":
                out = x * y
            elif op == "&":
                out = x & y
            elif op == "|":
                out = x | y
            elif op == "^":
                out = x ^ y
            elif op == "<<":
                amount = y if n.args[1].literal else y & (comp.bits - 1)
                out = np.left_shift(x, amount.astype(x.dtype))
            elif op == ">>":
                amount = y if n.args[1].literal else y & (comp.bits - 1)
                out = shift_right(x, amount, comp, arithmetic=a.ty.signed)
            else:
                y = y + (y == 0).astype(comp.np)
                if comp.signed:
                    minimum = np.asarray(-(2 ** (comp.bits - 1))).astype(comp.np)
                    x = x + ((x == minimum) & (y == -1)).astype(comp.np)
                out = trunc_div(x, y, comp) if op == "//" else trunc_rem(x, y, comp)
            return Val(np.asarray(out).astype(comp.np), comp, False, _unknown_where(a.err + b.err))
        if op == "+":
            out = x + y
            err = a.err + b.err
            zeros = [is_scalar(node) or not np.any(v) for node, v in zip(n.args, (x, y), strict=True)]
            if "add_zero" in self.slack and any(zeros):
                zero = np.broadcast_to((x == 0) | (y == 0), np.shape(out))
                err = np.where(zero & (np.asarray(out) == 0), np.maximum(err, 5e-324), err)
        elif op == "-":
            out = x - y
            err = a.err + b.err
        elif op == "*":
            out = x * y
            err = np.abs(x.astype(np.float64)) * b.err + np.abs(y.astype(np.float64)) * a.err + a.err * b.err
        elif op == "/":
            out = x / y
            err = _div_err(Val(x, comp, False, a.err), Val(y, comp, False, b.err))
            if "scalar_division" in self.slack and is_scalar(n.args[1]):
                err = err + ulp(out, comp)
        else:
            out = np.fmod(x, y)
            err = np.where(
                _near_integer_step(x.astype(np.float64) / y.astype(np.float64), a.err + b.err), np.inf, a.err
            )
            err = np.where((a.err + b.err) > 0, err, 0.0)
        out = np.asarray(out).astype(comp.np)
        return Val(out, comp, False, self._carry(out, comp, err))

    def _min_max(self, n: Node, args: list[Val]) -> Val:
        a, b = args
        t = n.ty
        x, y = self._in(a, t), self._in(b, t)
        if t.is_int:
            out = np.minimum(x, y) if n.op == "minimum" else np.maximum(x, y)
            return Val(out, t, False, _unknown_where(a.err + b.err))
        if n.attr == "NONE":
            out = np.fmin(x, y) if n.op == "minimum" else np.fmax(x, y)
        else:
            out = np.minimum(x, y) if n.op == "minimum" else np.maximum(x, y)
        err = np.maximum(a.err, b.err)
        if n.attr == "NONE" and "minnum_nan" in self.slack:
            err = np.where(np.isnan(x.astype(np.float64)) | np.isnan(y.astype(np.float64)), np.inf, err)
        # Which zero the minimum of +0 and -0 is, is not specified: either sign is right.
        signed_zeros = (x == 0) & (y == 0) & (np.signbit(x) != np.signbit(y))
        err = np.where(signed_zeros, np.maximum(err, 5e-324), err)
        if self.flush and t.name in FLUSHED:
            # A processor flushing subnormals compares them as zeros and may hand on either operand's bits.
            raw = [np.abs(np.asarray(v.v).astype(np.float64)) for v in (a, b)]
            tiny = (raw[0] < smallest_normal(t)) & (raw[1] < smallest_normal(t))
            err = np.where(tiny, np.maximum(err, smallest_normal(t)), err)
        return Val(out.astype(t.np), t, False, err)

    def _math(self, n: Node, x: Val) -> Val:
        fn, t = n.attr, n.ty
        v = x.v.astype(np.float64)
        if fn in ("floor", "ceil"):
            out = (np.floor if fn == "floor" else np.ceil)(x.v).astype(t.np)
            err = np.where(_near_integer_step(v, x.err) & (x.err > 0), np.inf, 0.0)
            return Val(out, t, False, err)
        if fn in ("sqrt", "sqrt_rn"):
            out = np.sqrt(x.v).astype(t.np)
            err = np.where(x.err > 0, x.err / (2 * np.sqrt(np.abs(v)) + 1e-300), 0.0)
            return Val(out, t, False, self._carry(out, t, err))
        exact = {
            "exp": np.exp,
            "exp2": np.exp2,
            "log": np.log,
            "log2": np.log2,
            "sin": np.sin,
            "cos": np.cos,
            "rsqrt": lambda z: 1.0 / np.sqrt(z),
            "erf": _erf,
        }[fn](v)
        out = round_f64(exact, t)
        rel = 2.0**-20 if t == F32 else 2.0**-47
        err = rel * np.abs(exact) + ulp(exact, t) * 4
        if fn in ("sin", "cos"):
            err = err + rel * np.abs(v)
        if fn in ("log", "log2"):
            err = err + rel + x.err / np.maximum(np.abs(v), 1e-300)
        elif fn in ("exp", "exp2"):
            err = err + np.abs(exact) * x.err * 1.5
        else:
            err = err + x.err * 2 * (1 + np.abs(exact))
        overflow = np.abs(exact) > largest(t) / 2
        err = np.where(overflow | ~np.isfinite(exact), np.inf, err)
        err = np.where(np.isnan(exact) & (x.err == 0), 0.0, err)
        return Val(out, t, False, err)

    def _libdevice(self, n: Node, args: list[Val]) -> Val:
        fn, t = n.attr, n.ty
        x = args[0]
        v = x.v.astype(np.float64)
        if fn == "copysign":
            out = np.copysign(x.v, args[1].v).astype(t.np)
            return Val(out, t, False, np.where(args[1].err > 0, np.inf, x.err))
        if fn == "trunc":
            out = np.trunc(v)
        elif fn == "rint":
            out = np.rint(v)
        else:
            whole = np.trunc(v)
            out = np.where(np.abs(v - whole) >= 0.5, whole + np.sign(v), whole)
        err = np.where(_near_integer_step(v, x.err, half=fn != "trunc") & (x.err > 0), np.inf, 0.0)
        return Val(np.copysign(out, v).astype(t.np), t, False, err)

    def _carry(self, out: np.ndarray, t: Ty, err: np.ndarray, rounds: bool = True) -> np.ndarray:
        """The error bound of a rounded float result ``out`` from inputs off by ``err``: one more rounding apart."""
        if not t.is_float:
            return _unknown_where(err)
        wide = np.asarray(out, np.float64)
        err = np.where(err > 0, err + (ulp(wide, t) if rounds else 0), err)
        return np.where((err > 0) & (~np.isfinite(wide) | (np.abs(wide) > largest(t) / 2)), np.inf, err)

    def _slacken(self, n: Node, val: Val, args: list[Val]) -> Val:
        """``val`` with the bounds the path's known divergences allow."""
        if not val.ty.is_float or n.op in ("bitcast",):
            return val
        err = val.err
        bf16 = val.ty.name == "bf16" or any(a.ty.name == "bf16" for a in args)
        if "bf16_excess" in self.slack and bf16 and (n.op != "cast" or val.ty.name == "bf16"):
            err = np.maximum(err, 0) + ulp(val.v.astype(np.float64), ty("bf16")) * 2
        return Val(val.v, val.ty, val.literal, err)


FLUSHED = ("fp32", "fp64", "bf16")


def int1_arithmetic(op: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x op y`` on int1 (unsigned, one bit): wrapping modulo 2, a sum or difference is an exclusive or and a product
    an and; a quotient is its dividend, a remainder zero and a shift its shifted operand (what the divisor 1 and the
    shift 0 give, and what LLVM folds every int1 division, remainder and shift to)."""
    p, q = np.broadcast_arrays(np.asarray(x).astype(bool), np.asarray(y).astype(bool))
    table = {
        "+": lambda: p ^ q,
        "-": lambda: p ^ q,
        "*": lambda: p & q,
        "&": lambda: p & q,
        "|": lambda: p | q,
        "^": lambda: p ^ q,
        "//": lambda: p.copy(),
        "%": lambda: np.zeros_like(p),
        "<<": lambda: p.copy(),
        ">>": lambda: p.copy(),
    }
    return table[op]()


def _computes(n: Node, args: list[Val]) -> bool:
    """Whether the compiled path's processor computes ``n`` in the floating-point unit (flushing subnormals)."""
    if n.op == "neg":
        return NEGATES_BY_SUBTRACTION and n.ty.is_float  # Triton 3.6 negates a float as 0 - x
    if n.op in ("where", "bitcast", "abs"):
        return False
    if n.op == "cast":
        return args[0].ty.name in ("fp32", "fp64") and n.ty.name in ("fp32", "fp64") and args[0].ty != n.ty
    return True


def is_scalar(node: Node) -> bool:
    """Whether ``node`` is one value for the whole block (computed from scalars and literals only)."""
    return node.op != "load" and all(is_scalar(a) for a in node.args)


def flush_subnormals(v: np.ndarray, t: Ty) -> np.ndarray:
    wide = np.asarray(v).astype(np.float64)
    tiny = (wide != 0) & (np.abs(wide) < smallest_normal(t))
    return np.where(tiny, np.copysign(0.0, wide), wide).astype(t.np) if tiny.any() else np.asarray(v)


def _erf(x: np.ndarray) -> np.ndarray:
    import math

    return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x


def _compare(op: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return {
        "==": np.equal,
        "!=": np.not_equal,
        "<": np.less,
        "<=": np.less_equal,
        ">": np.greater,
        ">=": np.greater_equal,
    }[op](x, y)


def _unknown_where(err: np.ndarray) -> np.ndarray:
    return np.where(np.asarray(err) > 0, np.inf, 0.0)


def _near_integer_step(v: np.ndarray, err: np.ndarray, half: bool = False) -> np.ndarray:
    """Where ``v`` lies within ``err`` of a point where rounding to an integer jumps (integers, or halves)."""
    with np.errstate(all="ignore"):
        shifted = v - 0.5 if half else v
        gap = np.abs(shifted - np.round(shifted))
        return ~(gap > err) | ~np.isfinite(v)


def _div_err(a: Val, b: Val) -> np.ndarray:
    x, y = np.abs(a.v.astype(np.float64)), np.abs(b.v.astype(np.float64))
    with np.errstate(all="ignore"):
        err = (a.err + x / np.maximum(y, 1e-300) * b.err) / np.maximum(y - b.err, 0)
    return np.where((a.err + b.err) > 0, np.where(np.isfinite(err), err, np.inf), 0.0)


__all__ = [
    "FLOAT",
    "I64",
    "Evaluator",
    "int1_arithmetic",
    "Leaves",
    "Node",
    "Val",
    "Writer",
    "expressions",
    "where",
]
