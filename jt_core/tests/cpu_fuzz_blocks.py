"""Generated kernels over blocks for the CPU fuzzer: reductions, scans, ``tl.dot``, shape operations and control
flow, each with its NumPy reference (see `cpu_fuzz_programs` for the program model).

Float reductions, scans and dots may add in any order: their references are exact sums with a bound of ``(n - 1)``
roundings of the sum of magnitudes. Integer ones wrap and must match exactly.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from cpu_fuzz_grammar import FLUSHED, Evaluator, Leaves, Node, Val, Writer, expressions, flush_subnormals, is_scalar
from cpu_fuzz_programs import Expected, Instance, Program, _module, random_array, references, stored
from cpu_fuzz_semantics import DATA_TYPES, F32, I1, I32, PROMOTES_BF16, Ty, convert, largest, round_f64, ty, ulp
from hypothesis import strategies as st

UNIT = {"fp16": 2.0**-11, "bf16": 2.0**-8, "fp32": 2.0**-24, "fp64": 2.0**-53}

COMBINES = {
    "add": "return a + b",
    "max": "return tl.maximum(a, b).to(a.dtype)",
    "min": "return tl.minimum(a, b).to(a.dtype)",
    "mul": "return a * b",
    "xor": "return a ^ b",
    "or": "return a | b",
    "right": "return b",
    "twice_plus": "return a * 2 + b",
}
INT_ONLY_COMBINES = ("mul", "xor", "or", "twice_plus")
#: Associative but not commutative: a scan must keep its operands' order.
NON_COMMUTATIVE = ("right",)
#: Not associative: the result depends on how the reduction pairs the elements, which Triton leaves open; the two
#: CPU paths must still agree.
ORDER_SENSITIVE = ("twice_plus",)


def _combine_source(name: str) -> str:
    return f"\n\n@triton.jit\ndef combine_{name}(a, b):\n    {COMBINES[name]}\n"


PAIR_COMBINE = (
    "\n\n@triton.jit\ndef combine_pair(a0, a1, b0, b1):\n    return a0 + b0, tl.maximum(a1, b1).to(a1.dtype)\n"
)


@st.composite
def _block(draw: Any) -> tuple[int, int]:
    rows = draw(st.sampled_from((1, 2, 4, 8)))
    cols = draw(st.sampled_from((2, 4, 8, 16, 32)))
    return rows, cols


def _prepared(draw: Any, avoid: frozenset[str], t: Ty, depth: int) -> Node:
    leaves = Leaves((("x", t),))
    node = draw(expressions(leaves, depth, avoid)) if depth else Node("load", (), t, attr="x")
    if node.ty == I1 or is_scalar(node):
        node = Node("cast", (node,), I32) if not is_scalar(node) else Node("load", (), t, attr="x")
    return node


def _load_2d(rows: int, masked_other: Any) -> str:
    offsets = "pid * R * n_cols + rows * n_cols + cols"
    return (
        "    pid = tl.program_id(0)\n"
        "    rows = tl.arange(0, R)[:, None]\n"
        "    cols = tl.arange(0, C)[None, :]\n"
        f"    x = tl.load(x_ptr + {offsets}, mask=(cols < n_cols) & (rows < R), other={masked_other})"
    )


def _env(rng: np.random.Generator, t: Ty, programs: int, rows: int, cols: int, n_cols: int, other: Any, avoid: Any):
    data = random_array(rng, t, (programs * rows, n_cols), avoid)
    block = np.full(
        (programs, rows, cols), convert(np.asarray(other), ty("fp64") if isinstance(other, float) else I32, t)
    )
    block[:, :, :n_cols] = data.reshape(programs, rows, n_cols)
    return data, block.astype(t.np)


# -- reductions -----------------------------------------------------------------------------------------------------


@st.composite
def reductions(draw: Any, avoid: frozenset[str]) -> Program:
    """A masked 2D block, an element-wise expression of it, and one reduction (``tl.sum``, ``tl.max``, ``tl.min``,
    ``tl.argmax``, ``tl.argmin``, ``tl.xor_sum``, ``tl.reduce`` with a combine of its own, or of two values at once)
    along an axis or all of them, with or without ``keep_dims``."""
    rows, cols = draw(_block())
    programs = draw(st.integers(1, 2))
    n_cols = draw(st.integers(1, cols))
    t = ty(draw(st.sampled_from(DATA_TYPES)))
    value = _prepared(draw, avoid, t, draw(st.integers(0, 2)))
    op = draw(st.sampled_from(("sum", "max", "min", "argmax", "argmin", "xor_sum", "reduce", "reduce", "pair")))
    vt = value.ty
    if op == "xor_sum" and not vt.is_int:
        op = "sum"
    combine = None
    if op == "reduce":
        names = [n for n in COMBINES if (vt.is_int or n not in INT_ONLY_COMBINES)]
        if "order_sensitive_reduce" in avoid:
            names = [n for n in names if n not in ORDER_SENSITIVE]
        combine = draw(st.sampled_from(names))
    whole = op not in ("argmax", "argmin") and not (op == "pair" and "tuple_reduce_all_axes" in avoid)
    axis = draw(st.sampled_from((0, 1, None) if whole else (0, 1)))
    keep = draw(st.booleans())
    other = draw(st.sampled_from((0, 3))) if t.is_int else draw(st.sampled_from((0.0, -2.5, 1.5)))

    write = Writer()
    v = write(value)
    if op in ("argmax", "argmin") and vt.is_float:
        v = write.emit(f"tl.where({v} == {v}, {v}, 0.0)")  # argmax of NaN is undefined
    axis_text = f"axis={axis}, keep_dims={keep}"
    extra = ""
    if op == "reduce":
        extra = _combine_source(combine)
        call = f"tl.reduce({v}, {axis}, combine_{combine}, keep_dims={keep})"
    elif op == "pair":
        extra = PAIR_COMBINE
        call = f"tl.reduce(({v}, {v} * 2), {axis}, combine_pair, keep_dims={keep})"
    else:
        call = f"tl.{op}({v}, {axis_text})"
    shape = _reduced_shape(rows, cols, axis, keep)
    offsets = _store_offsets(rows, cols, axis, keep)
    body = [_load_2d(rows, other), *write.lines]
    result_types = _reduction_types(op, vt, combine)
    if op == "pair":
        body.append(f"    r0, r1 = {call}")
        body += [f"    tl.store(out{k}_ptr + {offsets}, r{k})" for k in range(2)]
    else:
        body.append(f"    r0 = {call}")
        body.append(f"    tl.store(out0_ptr + {offsets}, r0)")
    count = len(result_types)
    params = ["x_ptr"] + [f"init{k}_ptr" for k in range(count)] + ["n_cols"]
    params += [f"out{k}_ptr" for k in range(count)] + ["R: tl.constexpr", "C: tl.constexpr"]
    source = _module(params, body, write.uses_libdevice, extra)
    size = programs * int(np.prod(shape))
    zero_dimensional = programs == 1 and shape == () and "zero_dimensional_output" not in avoid

    def make(rng: np.random.Generator) -> Instance:
        data, block = _env(rng, t, programs, rows, cols, n_cols, other, avoid)
        initial = [random_array(rng, rt, () if zero_dimensional else size, avoid) for rt in result_types]

        def evaluate(ev: Evaluator) -> list[tuple[np.ndarray, np.ndarray]]:
            val = ev(value)
            values = np.broadcast_to(val.v, block.shape)
            errs = np.broadcast_to(val.err, block.shape)
            if op in ("argmax", "argmin") and vt.is_float:
                values = np.where(np.isnan(values.astype(np.float64)), np.zeros((), vt.np), values)
            outs = _reduce(op, combine, values, errs, vt, None if axis is None else axis + 1)
            if "minnum_nan" in ev.slack and (combine in ("max", "min") or op == "pair") and vt.is_float:
                nan = np.isnan(values.astype(np.float64))
                nan = nan.reshape(nan.shape[0], -1).any(axis=1) if axis is None else nan.any(axis=axis + 1)
                outs = [(r, np.where(nan, np.inf, e)) for r, e in outs]
            results = []
            for (r, e), rt in zip(outs, result_types, strict=True):
                out, err = stored(
                    np.zeros(size, rt.np), np.ones(size, bool), Val(r.reshape(-1), rt, False, e.reshape(-1)), rt
                )
                results.append((out.reshape(()), err.reshape(())) if zero_dimensional else (out, err))
            return results

        def reference(slack: frozenset[str]) -> list[Expected]:
            if combine in ORDER_SENSITIVE:
                return [Expected(None) for _ in result_types]
            return references(evaluate, {"x": Val(block, t, False, np.zeros(block.shape))}, slack)

        return Instance([data, *initial], reference)

    return Program(
        "reductions",
        source,
        {"n_cols": n_cols},
        [(() if zero_dimensional else (size,), rt) for rt in result_types],
        {1 + k: k for k in range(count)},
        (programs,),
        {"R": rows, "C": cols},
        make,
        {"enable_fp_fusion": False},
        features=frozenset({"libdevice"} if write.uses_libdevice else ()),
    )


def _reduced_shape(rows: int, cols: int, axis: int | None, keep: bool) -> tuple[int, ...]:
    if axis is None:
        return (1, 1) if keep else ()
    if axis == 0:
        return (1, cols) if keep else (cols,)
    return (rows, 1) if keep else (rows,)


def _store_offsets(rows: int, cols: int, axis: int | None, keep: bool) -> str:
    if axis is None:
        return "pid + tl.zeros([1, 1], tl.int32)" if keep else "pid"
    if axis == 0:
        return "pid * C + tl.arange(0, C)[None, :]" if keep else "pid * C + tl.arange(0, C)"
    return "pid * R + tl.arange(0, R)[:, None]" if keep else "pid * R + tl.arange(0, R)"


def _reduction_types(op: str, t: Ty, combine: str | None) -> list[Ty]:
    if op in ("argmax", "argmin"):
        return [I32]
    if op == "sum":
        if t.is_int and t.bits < 32:
            return [I32 if t.signed else ty("uint32")]
        return [t]
    if op in ("max", "min"):
        if t.bits < 32 or (t.name == "bf16"):
            return [F32 if t.is_float else I32]
        return [t]
    if op == "pair":
        return [t, t]
    return [t]


def _sum_bound(x: np.ndarray, err: np.ndarray, axis: Any, t: Ty) -> np.ndarray:
    n = x.shape[axis] if axis is not None else x.size
    magnitude = np.abs(np.where(np.isfinite(x), x, 0.0)).sum(axis=axis)
    return err.sum(axis=axis) + max(n - 1, 1) * UNIT[t.name] * magnitude * 1.01


def _reduce(op: str, combine: str | None, values: np.ndarray, errs: np.ndarray, t: Ty, axis: int | None) -> list:
    """``(result, error bound)`` of each output of the reduction of ``values`` (programs on axis 0) along ``axis``
    (``None``: all but the programs')."""
    if axis is None:
        values = values.reshape(values.shape[0], -1)
        errs = errs.reshape(errs.shape[0], -1)
        axis = 1
    kind = op if op not in ("reduce",) else combine
    if op == "pair":
        first = _reduce("reduce", "add", values, errs, t, axis)[0]
        second = _reduce("reduce", "max", _arith_same(values, 2, t), errs * 2, t, axis)[0]
        return [first, second]
    if kind in ("sum", "add"):
        out_t = _reduction_types("sum", t, None)[0] if op == "sum" else t
        x = convert(values, t, out_t)
        if out_t.is_int:
            total = np.sum(x.astype(np.int64) if out_t.signed or out_t.bits < 64 else x, axis=axis)
            return [(total.astype(out_t.np), _unknown(errs, axis))]
        return [_float_sum(x.astype(np.float64), errs, axis, out_t)]
    if kind in ("max", "min"):
        out_t = _reduction_types("max", t, None)[0] if op in ("max", "min") else t
        x = convert(values, t, out_t)
        if out_t.is_int:
            return [((np.max if kind == "max" else np.min)(x, axis=axis), _unknown(errs, axis))]
        wide = x.astype(np.float64)
        with np.errstate(invalid="ignore"):
            r = (np.fmax.reduce if kind == "max" else np.fmin.reduce)(wide, axis=axis)
        zero_signs = np.any((wide == 0) & np.signbit(wide), axis=axis) & np.any(
            (wide == 0) & ~np.signbit(wide), axis=axis
        )
        err = np.max(errs, axis=axis)
        err = np.where((r == 0) & zero_signs, np.maximum(err, 5e-324), err)
        return [(r.astype(out_t.np), err)]
    if kind in ("argmax", "argmin"):
        wide = values.astype(np.float64)
        best = (np.max if kind == "argmax" else np.min)(wide, axis=axis, keepdims=True)
        index = np.argmax(wide == best, axis=axis).astype(np.int32)
        near = (np.abs(wide - best) <= np.max(errs, axis=axis, keepdims=True)) & (
            np.max(errs, axis=axis, keepdims=True) > 0
        )
        unsure = np.sum(near, axis=axis) > 1
        return [(index, np.where(unsure, np.inf, 0.0))]
    if kind == "xor_sum" or kind == "xor":
        return [(np.bitwise_xor.reduce(values, axis=axis), _unknown(errs, axis))]
    if kind == "or":
        return [(np.bitwise_or.reduce(values, axis=axis), _unknown(errs, axis))]
    if kind == "mul":
        with np.errstate(over="ignore"):
            return [(np.multiply.reduce(values, axis=axis, dtype=t.np), _unknown(errs, axis))]
    if kind == "right":
        return [(np.take(values, -1, axis=axis), np.take(errs, -1, axis=axis))]
    raise AssertionError(kind)


def _arith_same(values: np.ndarray, factor: int, t: Ty) -> np.ndarray:
    """``values * factor`` in ``t`` (a literal takes the tensor's type)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if t.is_float:
            return (values.astype(np.float64) * factor).astype(t.np) if t.name != "fp64" else values * factor
        return (values * np.asarray(factor).astype(t.np)).astype(t.np)


def _unknown(errs: np.ndarray, axis: int) -> np.ndarray:
    return np.where(np.any(errs > 0, axis=axis), np.inf, 0.0)


def _float_sum(x: np.ndarray, errs: np.ndarray, axis: int, t: Ty) -> tuple[np.ndarray, np.ndarray]:
    exact = np.apply_along_axis(lambda v: math.fsum(v) if np.all(np.isfinite(v)) else np.sum(v), axis, x)
    # IEEE sums of zeros are -0.0 only where every addend is (math.fsum gives +0.0).
    exact = np.where(np.all((x == 0) & np.signbit(x), axis=axis), -0.0, exact)
    bound = _sum_bound(x, errs, axis, t)
    finite_magnitude = np.abs(np.where(np.isfinite(x), x, 0.0)).sum(axis=axis)
    bound = np.where(finite_magnitude > largest(t) / 2, np.inf, bound)
    r = round_f64(exact, t)
    bound = np.where(bound > 0, bound + ulp(exact, t), bound)
    return r, np.where(np.isnan(exact) & (bound < np.inf), 0.0, bound)


# -- scans ----------------------------------------------------------------------------------------------------------


@st.composite
def scans(draw: Any, avoid: frozenset[str]) -> Program:
    """``tl.cumsum``, ``tl.cumprod`` or ``tl.associative_scan`` with a combine of its own (associative, some not
    commutative), forward or reversed, along either axis of a masked 2D block."""
    rows, cols = draw(_block())
    programs = draw(st.integers(1, 2))
    n_cols = draw(st.integers(1, cols))
    t = ty(draw(st.sampled_from(DATA_TYPES)))
    value = _prepared(draw, avoid, t, draw(st.integers(0, 2)))
    vt = value.ty
    op = draw(st.sampled_from(("cumsum", "cumprod", "scan", "scan")))
    reverse = draw(st.booleans())
    combine = None
    if op == "scan":
        names = [n for n in COMBINES if (vt.is_int or n not in INT_ONLY_COMBINES) and n not in ORDER_SENSITIVE]
        if reverse and "reverse_scan_noncommutative" in avoid:
            names = [n for n in names if n not in NON_COMMUTATIVE]
        combine = draw(st.sampled_from(names))
    if op == "cumprod" and vt.is_float:
        op = "cumsum"
    axis = draw(st.sampled_from((0, 1)))
    other = 0 if t.is_int else 0.5
    write = Writer()
    v = write(value)
    extra = ""
    if op == "scan":
        extra = _combine_source(combine)
        call = f"tl.associative_scan({v}, {axis}, combine_{combine}, reverse={reverse})"
    else:
        call = f"tl.{op}({v}, axis={axis}, reverse={reverse})"
    out_t = _scan_type(op, vt)
    body = [_load_2d(rows, other), *write.lines, f"    r = {call}"]
    body.append("    tl.store(out0_ptr + pid * R * C + rows * C + cols, r)")
    params = ["x_ptr", "init0_ptr", "n_cols", "out0_ptr", "R: tl.constexpr", "C: tl.constexpr"]
    source = _module(params, body, write.uses_libdevice, extra)
    size = programs * rows * cols

    def make(rng: np.random.Generator) -> Instance:
        data, block = _env(rng, t, programs, rows, cols, n_cols, other, avoid)
        initial = random_array(rng, out_t, size, avoid)

        def evaluate(ev: Evaluator) -> list[tuple[np.ndarray, np.ndarray]]:
            val = ev(value)
            values = convert(np.broadcast_to(val.v, block.shape), vt, out_t)
            errs = np.broadcast_to(val.err, block.shape)
            r, e = _scan(op if op != "scan" else combine, values, errs, out_t, axis + 1, reverse)
            if "minnum_nan" in ev.slack and combine in ("max", "min") and out_t.is_float:
                nan = np.isnan(values.astype(np.float64))
                if reverse:
                    nan = np.flip(np.logical_or.accumulate(np.flip(nan, axis + 1), axis=axis + 1), axis + 1)
                else:
                    nan = np.logical_or.accumulate(nan, axis=axis + 1)
                e = np.where(nan, np.inf, e)
            return [
                stored(
                    np.zeros(size, out_t.np),
                    np.ones(size, bool),
                    Val(r.reshape(-1), out_t, False, e.reshape(-1)),
                    out_t,
                )
            ]

        return Instance(
            [data, initial],
            lambda slack: references(evaluate, {"x": Val(block, t, False, np.zeros(block.shape))}, slack),
        )

    return Program(
        "scans",
        source,
        {"n_cols": n_cols},
        [((size,), out_t)],
        {1: 0},
        (programs,),
        {"R": rows, "C": cols},
        make,
        {"enable_fp_fusion": False},
        features=frozenset({"libdevice"} if write.uses_libdevice else ()),
    )


def _scan_type(op: str, t: Ty) -> Ty:
    if op in ("cumsum", "cumprod"):
        if PROMOTES_BF16 and t.name == "bf16":
            return F32
        if op == "cumsum" or not PROMOTES_BF16:
            return _reduction_types("sum", t, None)[0]
    return t


def _scan(kind: str, values: np.ndarray, errs: np.ndarray, t: Ty, axis: int, reverse: bool) -> tuple:
    if reverse:
        r, e = _scan(kind, np.flip(values, axis), np.flip(errs, axis), t, axis, False)
        return np.flip(r, axis), np.flip(e, axis)
    if kind in ("cumsum", "add"):
        if t.is_int:
            with np.errstate(over="ignore"):
                return np.cumsum(values, axis=axis, dtype=t.np), _cum_unknown(errs, axis)
        x = values.astype(np.float64)
        exact = np.cumsum(x, axis=axis)  # float64: exact enough against the bound below
        finite = np.where(np.isfinite(x), x, 0.0)
        positions = np.cumsum(np.ones_like(x), axis=axis)
        bound = np.cumsum(errs, axis=axis) + positions * UNIT[t.name] * np.cumsum(np.abs(finite), axis=axis) * 1.01
        bound = bound + np.abs(exact) * 2.0**-50
        bound = np.where(np.cumsum(np.abs(finite), axis=axis) > largest(t) / 2, np.inf, bound)
        bound = np.where(bound > 0, bound + ulp(exact, t), bound)
        return round_f64(exact, t), bound
    if kind in ("cumprod", "mul"):
        with np.errstate(over="ignore"):
            return np.cumprod(values, axis=axis, dtype=t.np), _cum_unknown(errs, axis)
    ufunc = {"max": np.fmax, "min": np.fmin, "xor": np.bitwise_xor, "or": np.bitwise_or}.get(kind)
    if ufunc is not None:
        if t.is_float:
            wide = values.astype(np.float64)
            out = ufunc.accumulate(wide, axis=axis)
            negative = np.logical_or.accumulate((wide == 0) & np.signbit(wide), axis=axis)
            positive = np.logical_or.accumulate((wide == 0) & ~np.signbit(wide), axis=axis)
            err = np.maximum.accumulate(errs, axis=axis)
            return out.astype(t.np), np.where((out == 0) & negative & positive, np.maximum(err, 5e-324), err)
        return ufunc.accumulate(values, axis=axis), _cum_unknown(errs, axis)
    assert kind == "right"
    return values.copy(), errs.copy()


def _cum_unknown(errs: np.ndarray, axis: int) -> np.ndarray:
    return np.where(np.maximum.accumulate(errs, axis=axis) > 0, np.inf, 0.0)


# -- tl.dot ---------------------------------------------------------------------------------------------------------

DOT_INPUTS = ("fp32", "fp16", "bf16", "int8")


@st.composite
def dots(draw: Any, avoid: frozenset[str]) -> Program:
    """``tl.dot`` of an (M, K) and a (K, N) block (each at least 16), float32 (``input_precision="ieee"``),
    float16, bfloat16 or int8, with or without an accumulator, ``b`` loaded transposed or not, over one or two
    steps of K, stored as the accumulator's type or converted."""
    m, n, k = (draw(st.sampled_from((16, 32))) for _ in range(3))
    steps = draw(st.integers(1, 2))
    t = ty(draw(st.sampled_from(DOT_INPUTS)))
    acc_t = I32 if t.is_int else F32
    with_acc = draw(st.booleans())
    transposed = draw(st.booleans())
    precision = ""
    if t.name == "fp32":
        choices = ("ieee",) if "dot_default_precision" in avoid else ("ieee", None)
        chosen = draw(st.sampled_from(choices))
        precision = f", input_precision={chosen!r}" if chosen else ""
    out_t = acc_t if t.is_int or draw(st.booleans()) else ty(draw(st.sampled_from(("fp16", "bf16"))))
    b_offsets = "cols[None, :] * K_ALL + ks[:, None]" if transposed else "ks[:, None] * N + cols[None, :]"
    body = [
        "    rows = tl.arange(0, M)",
        "    cols = tl.arange(0, N)",
        "    acc = tl.load(c_ptr + rows[:, None] * N + cols[None, :])"
        if with_acc
        else f"    acc = tl.zeros([M, N], {acc_t.tl})",
        "    for step in range(STEPS):",
        "        ks = step * K + tl.arange(0, K)",
        "        a = tl.load(a_ptr + rows[:, None] * K_ALL + ks[None, :])",
        f"        b = tl.load(b_ptr + {b_offsets})",
        f"        acc = tl.dot(a, b, acc{precision}{', out_dtype=tl.int32' if t.is_int else ''})",
        f"    tl.store(out0_ptr + rows[:, None] * N + cols[None, :], acc.to({out_t.tl}))",
    ]
    params = ["a_ptr", "b_ptr", "c_ptr", "init0_ptr", "out0_ptr"]
    params += ["M: tl.constexpr", "N: tl.constexpr", "K: tl.constexpr", "K_ALL: tl.constexpr", "STEPS: tl.constexpr"]
    source = _module(params, body)
    k_all = k * steps

    def make(rng: np.random.Generator) -> Instance:
        a = _dot_operand(rng, t, (m, k_all))
        b = _dot_operand(rng, t, (k_all, n))
        c = _dot_operand(rng, acc_t, (m, n)) if with_acc else np.zeros((m, n), acc_t.np)
        initial = random_array(rng, out_t, m * n, avoid)
        b_stored = np.ascontiguousarray(b.T) if transposed else b
        wa, wb = a.astype(np.float64), b.astype(np.float64)
        if t.is_int:
            exact = (a.astype(np.int64) @ b.astype(np.int64) + c.astype(np.int64)).astype(np.int32)
            err = np.zeros((m, n))
        else:
            exact = wa @ wb + c.astype(np.float64)
            magnitude = np.abs(wa) @ np.abs(wb) + np.abs(c.astype(np.float64))
            err = (k_all + 2) * UNIT["fp32"] * magnitude * 1.01 + 1e-300
            if t.name == "fp32" and not precision:
                err = err + 2.0**-10 * magnitude  # float32 rounded to tf32 at the default precision
        value = Val(exact.reshape(-1), F32 if not t.is_int else I32, False, err.reshape(-1))
        if not t.is_int:
            value = Val(round_f64(exact, F32).reshape(-1), F32, False, (err + ulp(exact, F32)).reshape(-1))

        def reference(slack: frozenset[str]) -> list:
            out, e = stored(np.zeros(m * n, out_t.np), np.ones(m * n, bool), value, out_t)
            if out_t != value.ty:
                e = np.where(e > 0, e + ulp(out.astype(np.float64), out_t), e)
            return [Expected(out, e)]

        return Instance([a, b_stored, c, initial], reference)

    return Program(
        "dot",
        source,
        {},
        [((m * n,), out_t)],
        {3: 0},
        (1,),
        {"M": m, "N": n, "K": k, "K_ALL": k_all, "STEPS": steps},
        make,
        {"enable_fp_fusion": draw(st.booleans())},
    )


def _dot_operand(rng: np.random.Generator, t: Ty, shape: tuple[int, int]) -> np.ndarray:
    """Finite operands: int8 anywhere in range, floats of mixed magnitudes with exact zeros and halves."""
    if t.is_int:
        return rng.integers(-128, 128, shape).astype(t.np)
    values = rng.standard_normal(shape) * rng.choice([1.0, 8.0, 0.01], shape)
    values = np.where(rng.integers(0, 6, shape) == 0, np.round(values * 2) / 2, values)
    return convert(values, ty("fp64"), t)


# -- shape operations -----------------------------------------------------------------------------------------------


@st.composite
def shape_ops(draw: Any, avoid: frozenset[str]) -> Program:
    """A chain of shape operations on a loaded 2D block (``tl.trans``/``permute``, ``reshape``, ``expand_dims`` and
    ``broadcast_to``, ``join``/``split``/``interleave``, ``flip``, ``ravel``), then stored flat: exact."""
    t = ty(draw(st.sampled_from(DATA_TYPES)))
    rows, cols = draw(st.sampled_from((2, 4, 8))), draw(st.sampled_from((2, 4, 8)))
    programs = draw(st.integers(1, 2))
    shape: tuple[int, ...] = (rows, cols)
    lines: list[str] = []
    steps: list[tuple[str, Any]] = []
    for index in range(draw(st.integers(1, 4))):
        options = ["trans", "reshape", "flip", "join", "broadcast", "interleave"]
        if shape[-1] == 2 and len(shape) >= 2:
            options.append("split")
        if len(shape) >= 3:
            options.append("permute")
        if int(np.prod(shape)) * 2 > 256:
            options = [o for o in options if o not in ("join", "broadcast", "interleave")]
        op = draw(st.sampled_from(options))
        name, prev = f"v{index + 1}", f"v{index}"
        if op == "trans":
            perm = tuple(reversed(range(len(shape))))
            text = f"tl.trans({prev})" if len(shape) == 2 else f"tl.trans({prev}, {perm})"
            shape = tuple(shape[p] for p in perm)
            steps.append(("transpose", perm))
        elif op == "permute":
            perm = tuple(draw(st.permutations(range(len(shape)))))
            text = f"tl.permute({prev}, {perm})"
            shape = tuple(shape[p] for p in perm)
            steps.append(("transpose", perm))
        elif op == "reshape":
            shape = draw(_factorisation(int(np.prod(shape))))
            text = f"tl.reshape({prev}, {list(shape)})"
            steps.append(("reshape", shape))
        elif op == "flip":
            dim = draw(st.integers(0, len(shape) - 1))
            text = f"tl.flip({prev}, {dim})"
            steps.append(("flip", dim))
        elif op == "join":
            text = f"tl.join({prev}, {prev} * 2)"
            shape = (*shape, 2)
            steps.append(("join", None))
        elif op == "interleave":
            text = f"tl.interleave({prev}, {prev} * 2)"
            shape = (*shape[:-1], shape[-1] * 2)
            steps.append(("interleave", None))
        elif op == "split":
            left, right = f"{name}a", f"{name}b"
            lines.append(f"    {left}, {right} = tl.split({prev})")
            text = f"{left} + {right}" if t.is_float else f"{left} ^ {right}"
            shape = shape[:-1]
            steps.append(("split", None))
        else:
            axis = draw(st.integers(0, len(shape)))
            grown = (*shape[:axis], draw(st.sampled_from((2, 4))), *shape[axis:])
            lines.append(f"    {name}e = tl.expand_dims({prev}, {axis})")
            text = f"tl.broadcast_to({name}e, {list(grown)})"
            shape = grown
            steps.append(("broadcast", (axis, grown)))
        lines.append(f"    {name} = {text}")
    numel = int(np.prod(shape))
    last = f"v{len(steps)}"
    body = [
        "    pid = tl.program_id(0)",
        "    v0 = tl.load(x_ptr + pid * R * C + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])",
        *lines,
        f"    tl.store(out0_ptr + pid * NUMEL + tl.arange(0, NUMEL), tl.reshape({last}, [NUMEL]))",
    ]
    params = ["x_ptr", "init0_ptr", "out0_ptr", "R: tl.constexpr", "C: tl.constexpr", "NUMEL: tl.constexpr"]
    source = _module(params, body)

    def make(rng: np.random.Generator) -> Instance:
        data = random_array(rng, t, (programs * rows, cols), avoid)
        initial = random_array(rng, t, programs * numel, avoid)
        wants = []
        for flush in (False, True):
            outs = []
            for p in range(programs):
                v = data[p * rows : (p + 1) * rows]
                for kind, arg in steps:
                    v = _shape_step(kind, arg, v, t, flush)
                outs.append(np.ascontiguousarray(v).reshape(-1))
            wants.append(np.concatenate(outs).astype(t.np))
        want, flushed = wants

        def reference(slack: frozenset[str]) -> list[Expected]:
            alternatives = [(flushed, np.zeros(want.shape))] if "ftz" in slack else []
            return [Expected(want, np.zeros(want.shape), alternatives)]

        return Instance([data, initial], reference)

    return Program(
        "shapes",
        source,
        {},
        [((programs * numel,), t)],
        {1: 0},
        (programs,),
        {"R": rows, "C": cols, "NUMEL": numel},
        make,
    )


@st.composite
def _factorisation(draw: Any, numel: int) -> tuple[int, ...]:
    rank = draw(st.integers(1, 3))
    dims = []
    left = numel
    for _ in range(rank - 1):
        d = draw(st.sampled_from([2**e for e in range(int(math.log2(left)) + 1)]))
        dims.append(d)
        left //= d
    return (*dims, left)


def _shape_step(kind: str, arg: Any, v: np.ndarray, t: Ty, flush: bool = False) -> np.ndarray:
    """One step of `shape_ops` in NumPy; with ``flush``, its arithmetic flushes subnormal operands and results (moving
    elements keeps them)."""
    if flush and t.name in FLUSHED and kind in ("join", "interleave", "split"):
        return flush_subnormals(_shape_step(kind, arg, flush_subnormals(v, t), t), t)
    if kind == "transpose":
        return np.transpose(v, arg)
    if kind == "reshape":
        return np.reshape(v, arg)
    if kind == "flip":
        return np.flip(v, arg)
    if kind == "join":
        return np.stack([v, _arith_same(v, 2, t)], axis=-1)
    if kind == "interleave":
        joined = np.stack([v, _arith_same(v, 2, t)], axis=-1)
        return joined.reshape(*v.shape[:-1], v.shape[-1] * 2)
    if kind == "split":
        left, right = v[..., 0], v[..., 1]
        if t.is_float:
            with np.errstate(all="ignore"):
                return (
                    (left.astype(np.float64) + right.astype(np.float64)).astype(t.np)
                    if t.name != "fp64"
                    else left + right
                )
        return left ^ right
    axis, grown = arg
    return np.broadcast_to(np.expand_dims(v, axis), grown)
