"""Generated kernels for the CPU fuzzer, each with the NumPy reference its generator builds beside it.

A `Program` is one kernel's structure (its source, the call's shapes, scalars, grid and metaparameters), compiled
once; `Program.instance` draws fresh data for it and computes what each output must hold. The categories: element-wise
expressions over nine types with masked loads (``other=``) and masked stores (`elementwise`), program ids over
grids of one to three axes (`grids`), Philox random numbers (`random_numbers`) and atomics (`atomics`);
`cpu_fuzz_blocks` holds reductions, scans, ``tl.dot`` and shape operations, `cpu_fuzz_control` control flow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from cpu_fuzz_grammar import (
    FLUSHED,
    Evaluator,
    Leaves,
    Node,
    Val,
    Writer,
    expressions,
    flush_subnormals,
    truthy,
    where,
)
from cpu_fuzz_semantics import DATA_TYPES, F32, I1, I32, I64, U32, Ty, convert, literal_type, philox, ty, uniform
from hypothesis import strategies as st

HEADER = "import triton\nimport triton.language as tl\n"


@dataclasses.dataclass
class Expected:
    """What one output must hold: ``value`` within ``err`` per element (0: bit for bit, NaN matching any NaN;
    infinite: anything), or within one of the ``alternatives`` (other right answers, e.g. with subnormals flushed);
    ``None`` for a value only the two paths' agreement is checked on."""

    value: np.ndarray | None
    err: np.ndarray | None = None
    alternatives: list[tuple[np.ndarray, np.ndarray]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Instance:
    """One run's data: the array operands (inputs, then each output's initial contents) and the references, per
    set of allowed known divergences."""

    arrays: list[np.ndarray]
    reference: Callable[[frozenset[str]], list[Expected]]


@dataclasses.dataclass
class Program:
    """One generated kernel and its call: ``source`` defines ``kernel``, whose parameters are the array operands,
    then ``scalars`` (in order), then one pointer per output, then ``constexprs``. ``aliases`` maps an array
    operand to the output that starts with its contents; ``features`` names what may keep a path from running the
    kernel (``"libdevice"``); ``may_hand_over`` lets the compiled path hand the kernel to the interpreter (which then
    runs it for the compiled path's check) where it cannot take kernels of that kind yet."""

    category: str
    source: str
    scalars: dict[str, Any]
    outputs: list[tuple[tuple[int, ...], Ty]]
    aliases: dict[int, int]
    grid: tuple[int, ...]
    constexprs: dict[str, Any]
    make: Callable[[np.random.Generator], Instance]
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    features: frozenset[str] = frozenset()
    may_hand_over: bool = False

    def instance(self, seed: int) -> Instance:
        return self.make(np.random.default_rng(seed))

    def describe(self) -> str:
        outs = ", ".join(f"{t.name}{list(shape)}" for shape, t in self.outputs)
        return (
            f"grid={self.grid} constexprs={self.constexprs} scalars={self.scalars} outputs=[{outs}] "
            f"options={self.options}"
        )


# -- data -----------------------------------------------------------------------------------------------------------


def random_array(rng: np.random.Generator, t: Ty, shape: Any, avoid: frozenset[str], finite: bool = False) -> Any:
    """Fresh values of type ``t``: small and large, edge values of the type, and for floats signed zeros,
    infinities, NaN, halves (rounding ties) and, unless avoided, subnormals."""
    size = int(np.prod(shape))
    pick = rng.integers(0, 8, size)
    if t.is_int:
        info = np.iinfo(t.np) if t.name != "int1" else None
        if info is None:
            return rng.integers(0, 2, shape).astype(bool)
        low, high = int(info.min), int(info.max)
        full = rng.integers(low, high, size, endpoint=True, dtype=np.int64 if t.name != "uint64" else np.uint64)
        small = rng.integers(max(low, -12), min(high, 12), size, endpoint=True)
        moderate = rng.integers(max(low, -3000), min(high, 3000), size, endpoint=True)
        edges = np.array([v for v in (0, 1, -1, low, high, low + 1, high - 1, 2, -2) if low <= v <= high])
        edge = rng.choice(edges, size)
        out = np.where(pick < 2, full, np.where(pick < 5, small, np.where(pick < 7, moderate, edge)))
        return out.astype(t.np).reshape(shape)
    scale = float(rng.choice([1.0, 1.0, 100.0, 1e-3, 3e4]))
    normal = rng.standard_normal(size) * scale
    halves = rng.integers(-8, 8, size) + 0.5 * rng.integers(0, 2, size)
    edges = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0**-14 * 3, 65504.0, 1e30, -1e30]
    if not finite:
        edges += [np.inf, -np.inf, np.nan]
    if "subnormals" not in avoid and t.name in ("fp32", "fp64", "bf16"):
        edges += [1e-40, -3e-39] if t.name != "fp64" else [1e-310, -4e-320]
    edge = rng.choice(np.array(edges), size)
    out = np.where(pick < 4, normal, np.where(pick < 6, halves, edge))
    values = convert(out, ty("fp64"), t)
    if "subnormals" in avoid and t.name in FLUSHED:
        values = flush_subnormals(values, t)
    return values.reshape(shape)


def scalar_value(draw: Any, t: Ty) -> Any:
    """A kernel scalar of type ``t`` (never 1, which Triton would specialise as a constant)."""
    if t == F32:
        return draw(st.sampled_from((0.5, -2.25, 3.0, 1e-3, -7.5, 0.1)))
    if t == I64:
        return draw(st.sampled_from((2**33 + 5, -(2**40) - 3, 2**62)))
    return draw(st.sampled_from((0, 2, -3, 7, 100, -(2**31), 2**31 - 1, 12345)))


def references(
    evaluate: Callable[[Evaluator], list[tuple[np.ndarray, np.ndarray]]],
    env: dict[str, Val],
    slack: frozenset[str],
) -> list[Expected]:
    """The outputs as ``evaluate`` computes them, with the flushed-subnormal computation as an alternative where
    ``"ftz"`` is allowed."""
    main = evaluate(Evaluator(env, slack))
    if "ftz" not in slack:
        return [Expected(v, e) for v, e in main]
    flushed = evaluate(Evaluator(env, slack, flush=True))
    at_use = evaluate(Evaluator(env, slack, flush="use"))
    return [
        Expected(v, e, [(fv, fe), (uv, ue)]) for (v, e), (fv, fe), (uv, ue) in zip(main, flushed, at_use, strict=True)
    ]


def stored(initial: np.ndarray, where: np.ndarray, value: Val, target: Ty) -> tuple[np.ndarray, np.ndarray]:
    """``initial`` after ``tl.store`` of ``value`` (converted to the pointer's type) where ``where`` holds."""
    value_v = np.broadcast_to(convert(value.v, value.ty, target), initial.shape)
    err = np.broadcast_to(value.err, initial.shape)
    if target.is_int and value.ty.is_float:
        err = np.where(err > 0, np.inf, 0.0)
    out = np.where(where, value_v, initial).astype(target.np)
    return out, np.where(where, err, 0.0)


# -- element-wise expressions, masked loads and stores --------------------------------------------------------------


#: What ``int1`` blocks are combined with, kept ``int1`` (`int1_values`).
INT1_OPS = ("+", "-", "*", "//", "%", "<<", ">>", "&", "|", "^")


@st.composite
def int1_values(draw: Any, leaves: Leaves, avoid: frozenset[str]) -> Node:
    """Conditions on the data (``int1`` blocks and scalars) combined as ``int1`` with `INT1_OPS`, unary ``-``,
    ``tl.abs`` and ``~`` and ``True``/``False`` literals, then kept, converted, compared or choosing between values."""
    conditions = [
        truthy(draw(expressions(leaves, draw(st.integers(0, 2)), avoid))) for _ in range(draw(st.integers(2, 3)))
    ]
    unary = ("neg", "abs") + (("invert",) if "invert_unsigned" not in avoid else ())

    def tree(depth: int) -> Node:
        if depth == 0 or draw(st.integers(0, 3)) == 0:
            return draw(st.sampled_from(conditions))
        if draw(st.integers(0, 4)) == 0:
            return Node(draw(st.sampled_from(unary)), (tree(depth - 1),), I1)
        a = tree(depth - 1)
        b = Node("lit", (), I1, True, draw(st.booleans())) if draw(st.integers(0, 4)) == 0 else tree(depth - 1)
        if draw(st.booleans()):
            a, b = b, a
        return Node(draw(st.sampled_from(INT1_OPS)), (a, b), I1)

    value = tree(draw(st.integers(1, 3)))
    use = draw(st.sampled_from(("keep", "keep", "convert", "choose", "compare")))
    if use == "convert":
        return Node("cast", (value,), ty(draw(st.sampled_from(("int8", "int32", "uint8", "fp16", "fp32")))))
    if use == "choose":
        a, b = (draw(expressions(leaves, 1, avoid)) for _ in range(2))
        return where(a, b, value, draw, avoid)
    if use == "compare":
        return Node(draw(st.sampled_from(("==", "!=", "<", ">="))), (value, draw(st.sampled_from(conditions))), I1)
    return value


@st.composite
def elementwise(draw: Any, avoid: frozenset[str], masked: bool = False, int1: bool = False) -> Program:
    """Up to three expressions over up to three loaded blocks and two scalars, each stored to its own output; with
    ``masked``, loads take masks and ``other=`` values and stores a mask that may depend on the data; with ``int1``,
    the expressions compute on ``int1`` blocks (`int1_values`)."""
    block = draw(st.sampled_from((16, 32)))
    programs = draw(st.integers(1, 3))
    size = block * programs - (draw(st.integers(0, block - 1)) if masked else 0)
    input_types = [ty(n) for n in draw(st.lists(st.sampled_from(DATA_TYPES), min_size=1, max_size=3))]
    scalar_types = draw(st.lists(st.sampled_from((I32, I64, F32)), max_size=2))
    scalars = {f"s{i}": scalar_value(draw, t) for i, t in enumerate(scalar_types)}
    leaves = Leaves(
        tuple((f"x{i}", t) for i, t in enumerate(input_types)),
        tuple((name, literal_type(v) if not isinstance(v, float) else F32) for name, v in scalars.items()),
    )
    if int1:
        outputs = draw(st.lists(int1_values(leaves, avoid), min_size=1, max_size=2))
    else:
        outputs = draw(st.lists(expressions(leaves, draw(st.integers(1, 4)), avoid), min_size=1, max_size=3))
    out_types = [
        e.ty if e.ty.name != "int1" and draw(st.integers(0, 5)) != 0 else draw(_widening(e.ty)) for e in outputs
    ]
    load_masks = [draw(st.sampled_from(tuple(LOAD_MASKS))) if masked else "in" for _ in input_types]
    others = [draw(_other(t)) if masked else None for t in input_types]
    store_masks = [draw(st.sampled_from(("in", "in", "data"))) if masked else "in" for _ in outputs]
    conditions = [truthy(draw(expressions(leaves, 2, avoid))) if m == "data" else None for m in store_masks]

    write = Writer()
    names = [write(e) for e in outputs]
    stores = []
    for k, (name, condition) in enumerate(zip(names, conditions, strict=True)):
        where = "offs < n"
        if condition is not None:
            where = f"({where}) & {write(condition)}"
        stores.append(f"    tl.store(out{k}_ptr + offs, {name}, mask={where})")
    loads = []
    for i, (mask, other) in enumerate(zip(load_masks, others, strict=True)):
        if mask == "in":
            loads.append(f"    x{i} = tl.load(x{i}_ptr + offs, mask=offs < n)")
        else:
            text = repr(other) if not isinstance(other, float) or np.isfinite(other) else f'float("{other}")'
            loads.append(f"    x{i} = tl.load(x{i}_ptr + offs, mask=(offs < n) & ({LOAD_MASKS[mask]}), other={text})")
    params = [f"x{i}_ptr" for i in range(len(input_types))] + [f"init{k}_ptr" for k in range(len(outputs))]
    params += [*scalars, "n"] + [f"out{k}_ptr" for k in range(len(outputs))] + ["BLOCK: tl.constexpr"]
    body = [
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
        *loads,
        *write.lines,
        *stores,
    ]
    source = _module(params, body, write.uses_libdevice)
    n_inputs = len(input_types)
    total = block * programs

    def make(rng: np.random.Generator) -> Instance:
        data = [random_array(rng, t, size, avoid) for t in input_types]
        initial = [random_array(rng, t, size, avoid) for t in out_types]
        offs = np.arange(total)
        inside = offs < size

        def padded(a: np.ndarray, fill: Any) -> np.ndarray:
            return np.concatenate([a, np.full(total - size, fill, a.dtype)])

        def evaluate(ev: Evaluator) -> list[tuple[np.ndarray, np.ndarray]]:
            results = []
            for k, (e, t) in enumerate(zip(outputs, out_types, strict=True)):
                value = ev(e)
                where = inside.copy()
                condition = conditions[k]
                if condition is not None:
                    c = ev(condition)
                    where &= np.broadcast_to(c.v != 0, where.shape)
                    unsure = np.broadcast_to(c.err > 0, where.shape)
                else:
                    unsure = np.zeros(total, bool)
                out, err = stored(padded(initial[k], 0), where, value, t)
                results.append((out[:size], np.where(unsure, np.inf, err)[:size]))
            return results

        env = {}
        for i, (t, mask, other) in enumerate(zip(input_types, load_masks, others, strict=True)):
            keep = inside & _load_mask(mask, offs, block)
            fill = convert(np.asarray(other if other is not None else 0), literal_type(other or 0), t)
            env[f"x{i}"] = Val(np.where(keep, padded(data[i], 0), fill).astype(t.np), t, False, np.zeros(total))
        for (name, t), value in zip(leaves.scalars, scalars.values(), strict=True):
            env[name] = Val(np.asarray(value).astype(t.np), t, False, np.zeros(()))
        return Instance(data + initial, lambda slack: references(evaluate, env, slack))

    return Program(
        "int1_arithmetic" if int1 else "masked" if masked else "elementwise",
        source,
        {**scalars, "n": size},
        [((size,), t) for t in out_types],
        {n_inputs + k: k for k in range(len(outputs))},
        (programs,),
        {"BLOCK": block},
        make,
        {"enable_fp_fusion": False},
        features=frozenset({"libdevice"} if write.uses_libdevice else ()),
    )


LOAD_MASKS = {"in": "offs >= 0", "odd": "offs % 2 == 1", "head": "offs % BLOCK < 7", "tail": "offs % 5 >= 2"}


def _load_mask(mask: str, offs: np.ndarray, block: int) -> np.ndarray:
    return {"in": offs >= 0, "odd": offs % 2 == 1, "head": offs % block < 7, "tail": offs % 5 >= 2}[mask]


@st.composite
def _other(draw: Any, t: Ty) -> Any:
    if t.is_float:
        return draw(st.sampled_from((0.0, -1.5, float("nan"), float("-inf"), 7.0)))
    return draw(st.sampled_from((0, 7, -1, 100)))


@st.composite
def _widening(draw: Any, t: Ty) -> Ty:
    """An output type the value converts to without undefined behaviour (any float type, or itself)."""
    return ty(draw(st.sampled_from(("fp16", "bf16", "fp32", "fp64")))) if t.name != "int1" else ty("int8")


def _module(params: list[str], body: list[str], libdevice: bool = False, extra: str = "") -> str:
    imports = HEADER + ("from triton.language.extra import libdevice\n" if libdevice else "")
    return f"{imports}{extra}\n\n@triton.jit\ndef kernel({', '.join(params)}):\n" + "\n".join(body) + "\n"


# -- grids ----------------------------------------------------------------------------------------------------------


@st.composite
def grids(draw: Any, avoid: frozenset[str]) -> Program:
    """A grid of one to three axes; each program finds its block from ``tl.program_id`` and ``tl.num_programs`` (in
    an order drawn per kernel) and stores an expression of its data, program ids and grid sizes."""
    axes = draw(st.integers(1, 3))
    grid = tuple(draw(st.integers(1, (4, 3, 2)[a])) for a in range(axes))
    full = (*grid, 1, 1)[:3]
    block = draw(st.sampled_from((8, 16)))
    t = ty(draw(st.sampled_from(DATA_TYPES)))
    order = draw(st.permutations(range(3)))
    scalars = tuple((name, I32) for name in ("p0", "p1", "p2", "g0", "g1", "g2"))
    value = draw(expressions(Leaves((("x", t),), scalars), draw(st.integers(1, 4)), avoid))
    write = Writer()
    v = write(value)
    a, b, c = order
    body = [
        *(f"    p{k} = tl.program_id({k})" for k in range(3)),
        *(f"    g{k} = tl.num_programs({k})" for k in range(3)),
        f"    linear = (p{a} * g{b} + p{b}) * g{c} + p{c}",
        "    offs = linear * BLOCK + tl.arange(0, BLOCK)",
        "    x = tl.load(x_ptr + offs)",
        *write.lines,
        f"    tl.store(out0_ptr + offs, {v})",
    ]
    source = _module(["x_ptr", "init0_ptr", "out0_ptr", "BLOCK: tl.constexpr"], body, write.uses_libdevice)
    programs = int(np.prod(full))
    out_t = value.ty if value.ty.name != "int1" else ty("int8")

    def make(rng: np.random.Generator) -> Instance:
        data = random_array(rng, t, programs * block, avoid)
        initial = random_array(rng, out_t, programs * block, avoid)

        def reference(slack: frozenset[str]) -> list[Expected]:
            variants: list[bool | str] = [False, True, "use"] if "ftz" in slack else [False]
            found = []
            for flush in variants:
                out, err = initial.copy(), np.zeros(initial.shape)
                for p in np.ndindex(*full):
                    linear = (p[a] * full[b] + p[b]) * full[c] + p[c]
                    at = slice(linear * block, (linear + 1) * block)
                    env = {"x": Val(data[at], t, False, np.zeros(block))}
                    env.update({f"p{k}": Val(np.asarray(p[k], np.int32), I32, False, np.zeros(())) for k in range(3)})
                    env.update(
                        {f"g{k}": Val(np.asarray(full[k], np.int32), I32, False, np.zeros(())) for k in range(3)}
                    )
                    got = Evaluator(env, slack, flush=flush)(value)
                    out[at], err[at] = stored(out[at], np.ones(block, bool), got, out_t)
                found.append((out, err))
            return [Expected(found[0][0], found[0][1], found[1:])]

        return Instance([data, initial], reference)

    return Program(
        "grids",
        source,
        {},
        [((programs * block,), out_t)],
        {1: 0},
        grid,
        {"BLOCK": block},
        make,
        {"enable_fp_fusion": False},
        features=frozenset({"libdevice"} if write.uses_libdevice else ()),
    )


# -- random numbers -------------------------------------------------------------------------------------------------


@st.composite
def random_numbers(draw: Any, avoid: frozenset[str]) -> Program:
    """``tl.rand``, ``tl.randint``, ``tl.randn``, ``tl.randint4x`` or ``tl.rand4x`` from a seed (a kernel scalar of
    32 or 64 bits, or a constant) at int32 or int64 offsets, with the default or a given number of rounds."""
    fn = draw(st.sampled_from(("rand", "randint", "randn", "randint4x", "rand4x")))
    block = draw(st.sampled_from((16, 32)))
    programs = draw(st.integers(1, 3))
    seed = draw(st.sampled_from((0, 12345, -7, 2**31 + 5, 2**40 + 3, -(2**35))))
    literal_seed = draw(st.booleans())
    wide = draw(st.booleans())
    base = draw(st.sampled_from((0, 1000, 2**33 + 17))) if wide else draw(st.sampled_from((0, 1000, -50)))
    rounds = draw(st.sampled_from((None, 7)))
    offset_t = I64 if wide else I32
    count = 4 if fn.endswith("4x") else 1
    out_t = U32 if fn.startswith("randint") else F32
    seed_text = repr(seed) if literal_seed else "seed"
    rounds_text = f", n_rounds={rounds}" if rounds else ""
    names = ", ".join(f"r{k}" for k in range(count))
    body = [
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
        f"    o = offs.to({offset_t.tl}) + {base}",
        f"    {names} = tl.{fn}({seed_text}, o{rounds_text})",
        *(f"    tl.store(out{k}_ptr + offs, r{k})" for k in range(count)),
    ]
    params = [f"init{k}_ptr" for k in range(count)] + (["seed"] if not literal_seed else [])
    params += [f"out{k}_ptr" for k in range(count)] + ["BLOCK: tl.constexpr"]
    source = _module(params, body)
    size = programs * block

    def make(rng: np.random.Generator) -> Instance:
        initial = [random_array(rng, out_t, size, avoid) for _ in range(count)]
        offsets = np.arange(size).astype(offset_t.np) + np.asarray(base).astype(offset_t.np)
        bits = philox(seed, offsets, offset_t, rounds or 10)
        if fn.startswith("randint"):
            values = [(b, np.zeros(size)) for b in bits[:count]]
        elif fn == "randn":
            values = [_normal(uniform(bits[0]), uniform(bits[1]))]
        else:
            values = [(uniform(b), np.zeros(size)) for b in bits[:count]]

        def reference(slack: frozenset[str]) -> list[Expected]:
            return [Expected(v.astype(out_t.np), e) for v, e in values]

        return Instance(initial, reference)

    return Program(
        "random_numbers",
        source,
        {} if literal_seed else {"seed": seed},
        [((size,), out_t)] * count,
        {k: k for k in range(count)},
        (programs,),
        {"BLOCK": block},
        make,
    )


def _normal(u1: np.ndarray, u2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``tl.randn``'s Box-Muller transform, computed in float64 from the float32 steps it rounds exactly."""
    u1 = np.maximum(np.float32(1.0e-7), u1)
    th = (np.float32(6.283185307179586) * u2).astype(np.float32).astype(np.float64)
    r = np.sqrt(-2.0 * np.log(u1.astype(np.float64)))
    value = r * np.cos(th)
    return value.astype(np.float32), 2.0**-18 * (1 + np.abs(value)) + 2.0**-20 * r


# -- atomics --------------------------------------------------------------------------------------------------------

ATOMIC_TYPES = {
    "add": ("int32", "uint32", "int64", "fp32", "fp64", "fp16"),
    "max": ("int32", "uint32", "int64", "fp32", "fp64"),
    "min": ("int32", "uint32", "int64", "fp32", "fp64"),
    "and": ("int32", "uint32", "int64"),
    "or": ("int32", "uint32", "int64"),
    "xor": ("int32", "uint32", "int64"),
    "xchg": ("int32", "uint32", "int64", "fp32", "fp64"),
    "cas": ("int32", "int64", "fp32"),
}


@st.composite
def atomics(draw: Any, avoid: frozenset[str]) -> Program:
    """``tl.atomic_add``/``max``/``min``/``and``/``or``/``xor``/``xchg``/``cas`` from every lane of one to three
    programs into a few slots (lanes and programs contend), masked, with the returned old values stored or not."""
    op = draw(st.sampled_from(tuple(ATOMIC_TYPES)))
    types = ATOMIC_TYPES[op]
    if op == "xchg" and "float_xchg" in avoid:
        types = tuple(n for n in types if not n.startswith("fp"))
    t = ty(draw(st.sampled_from(types)))
    block = draw(st.sampled_from((8, 16)))
    programs = draw(st.integers(1, 3))
    size = block * programs - draw(st.integers(0, block - 1))
    slots = draw(st.sampled_from((1, 3, 8, block)))
    stride = draw(st.sampled_from((1, 3)))
    returned = draw(st.booleans())
    if returned and t.name == "fp64" and op in ("max", "min") and "f64_atomic_min_max_return" in avoid:
        returned = False
    # The memory may hold another type of the same width than the pointer the atomic goes through.
    memory_t = t
    others = REINTERPRETED.get(t.name, ())
    if others and op != "cas" and (returned or "atomic_reinterpreted_pointer" not in avoid) and draw(st.booleans()):
        memory_t = ty(draw(st.sampled_from(others)))
    sem = draw(st.sampled_from(("", ', sem="relaxed"', ', sem="acq_rel"')))
    lanes = "offs < n"
    base = "out0_ptr" if memory_t == t else f"out0_ptr.to(tl.pointer_type({t.tl}))"
    ptr = f"{base} + (offs * {stride}) % SLOTS"
    if op == "cas":
        call = f"tl.atomic_cas({ptr}, tl.load(c_ptr + offs, mask={lanes}, other=0), val{sem})"
    else:
        call = f"tl.atomic_{op}({ptr}, val, mask={lanes}{sem})"
    body = [
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
        f"    val = tl.load(v_ptr + offs, mask={lanes}, other=0)",
        f"    old = {call}" if returned else f"    {call}",
    ]
    if returned:
        body.append(f"    tl.store(out1_ptr + offs, old, mask={lanes})")
    count = 2 if returned else 1
    params = ["v_ptr", "c_ptr"] + [f"init{k}_ptr" for k in range(count)] + ["n"]
    params += [f"out{k}_ptr" for k in range(count)] + ["BLOCK: tl.constexpr", "SLOTS: tl.constexpr"]
    source = _module(params, body)
    total = block * programs

    def make(rng: np.random.Generator) -> Instance:
        values = _atomic_values(rng, t, size, op, avoid)
        compare = _atomic_values(rng, t, size, op, avoid)
        memory = _atomic_values(rng, memory_t, slots, op, avoid).view(t.np)
        if op == "cas":
            compare = np.where(rng.integers(0, 2, size) == 0, memory[(np.arange(size) * stride) % slots], compare)
        olds = random_array(rng, t, size, avoid)
        mem = memory.copy()
        got_old = olds.copy()
        vals = np.concatenate([values, np.zeros(total - size, t.np)])
        cmps = np.concatenate([compare, np.zeros(total - size, t.np)])
        for program in range(programs):
            lanes = range(program * block, (program + 1) * block)
            # A float max or min is two atomics over the program's lanes: the non-negative ones on the bits as
            # signed integers, then the negative ones on the bits as unsigned integers.
            passes = [lanes]
            if t.is_float and op in ("max", "min"):
                negative = np.signbit(vals)
                passes = [[k for k in lanes if not negative[k]], [k for k in lanes if negative[k]]]
            for number, lanes_of_pass in enumerate(passes):
                for lane in lanes_of_pass:
                    if lane >= size and op != "cas":
                        continue
                    slot = (lane * stride) % slots
                    before = mem[slot]
                    mem[slot] = _atomic_apply(op, before, vals[lane], cmps[lane], t, number)
                    if lane < size:
                        got_old[lane] = before
        outputs = [mem.view(memory_t.np)] + ([got_old] if returned else [])

        def reference(slack: frozenset[str]) -> list[Expected]:
            return [Expected(o, np.zeros(o.shape)) for o in outputs]

        return Instance([values, compare, memory.view(memory_t.np)] + ([olds] if returned else []), reference)

    return Program(
        "atomics",
        source,
        {"n": size},
        [((slots,), memory_t)] + ([((size,), t)] if returned else []),
        {2 + k: k for k in range(count)},
        (programs,),
        {"BLOCK": block, "SLOTS": slots},
        make,
    )


#: Types of the same width an atomic's memory may hold instead of its pointer's.
REINTERPRETED = {"int32": ("uint32", "fp32"), "uint32": ("int32", "fp32"), "int64": ("fp64",)}


def _atomic_values(rng: np.random.Generator, t: Ty, size: int, op: str, avoid: frozenset[str]) -> np.ndarray:
    """Values whose sums are exact (small integers for floats); other floats with signed zeros and, unless
    avoided, NaNs of both signs."""
    if t.is_float:
        if op == "add":
            return rng.integers(-8, 9, size).astype(t.np)
        values = rng.standard_normal(size) * 100
        specials = [0.0, -0.0] if op != "cas" or "cas_float_values" not in avoid else [1.0]
        if "atomic_nan_in_memory" not in avoid and (op != "cas" or "cas_float_values" not in avoid):
            specials += [np.nan, -np.nan]
        values = np.where(rng.integers(0, 6, size) == 0, rng.choice(specials, size), values)
        return values.astype(t.np)
    info = np.iinfo(t.np)
    small = rng.integers(max(int(info.min), -50), 50, size, endpoint=True)
    full = rng.integers(int(info.min), int(info.max), size, endpoint=True, dtype=np.int64)
    return np.where(rng.integers(0, 3, size) == 0, full, small).astype(t.np)


def _atomic_apply(op: str, old: Any, val: Any, cmp: Any, t: Ty, number: int = 0) -> Any:
    """Memory after one lane's atomic; ``number`` is the pass of a float max or min (0: signed, 1: unsigned)."""
    with np.errstate(over="ignore"):
        if t.is_float and op in ("max", "min"):
            bits = np.dtype(f"{'i' if number == 0 else 'u'}{t.bits // 8}")
            o, v = np.asarray(old).view(bits), np.asarray(val).view(bits)
            larger = (op == "max") == (number == 0)
            return (np.maximum(o, v) if larger else np.minimum(o, v)).view(t.np)
        if op == "add":
            return (np.asarray(old) + np.asarray(val)).astype(t.np)
        if op == "max":
            return np.maximum(old, val)
        if op == "min":
            return np.minimum(old, val)
        if op == "and":
            return old & val
        if op == "or":
            return old | val
        if op == "xor":
            return old ^ val
        if op == "xchg":
            return val
    same = np.asarray(old).view(f"u{t.bits // 8}") == np.asarray(cmp).view(f"u{t.bits // 8}")
    return val if same else old


__all__ = ["Expected", "Instance", "Program", "atomics", "elementwise", "grids", "random_numbers"]
