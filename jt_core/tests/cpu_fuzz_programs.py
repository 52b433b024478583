"""Generated kernels for the CPU fuzzer, each with the NumPy reference its generator builds beside it.

A `Program` is one kernel's structure (its source, the call's shapes, scalars, grid and metaparameters), compiled
once; `Program.instance` draws fresh data for it and computes what each output must hold. The categories: element-wise
expressions over nine types with masked loads (``other=``) and masked stores (`elementwise`), program ids over
grids of one to three axes (`grids`), Philox random numbers (`random_numbers`) and atomics (`atomics`);
`cpu_fuzz_blocks` holds reductions, scans, ``tl.dot``, shape operations and control flow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from cpu_fuzz_grammar import FLUSHED, Evaluator, Leaves, Node, Val, Writer, expressions, flush_subnormals
from cpu_fuzz_semantics import DATA_TYPES, F32, I32, I64, U32, Ty, convert, literal_type, philox, ty, uniform
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
    then ``scalars`` (in order), then one pointer per output, then ``constexprs``; output ``k`` starts as array
    operand ``k`` where ``aliases[k]`` names it."""

    category: str
    source: str
    scalars: dict[str, Any]
    outputs: list[tuple[tuple[int, ...], Ty]]
    aliases: dict[int, int]
    grid: tuple[int, ...]
    constexprs: dict[str, Any]
    make: Callable[[np.random.Generator], Instance]
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()
    features: frozenset[str] = frozenset()

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
    return [Expected(v, e, [(fv, fe)]) for (v, e), (fv, fe) in zip(main, flushed, strict=True)]


def stored(initial: np.ndarray, where: np.ndarray, value: Val, target: Ty) -> tuple[np.ndarray, np.ndarray]:
    """``initial`` after ``tl.store`` of ``value`` (converted to the pointer's type) where ``where`` holds."""
    value_v = np.broadcast_to(convert(value.v, value.ty, target), initial.shape)
    err = np.broadcast_to(value.err, initial.shape)
    if target.is_int and value.ty.is_float:
        err = np.where(err > 0, np.inf, 0.0)
    out = np.where(where, value_v, initial).astype(target.np)
    return out, np.where(where, err, 0.0)


# -- element-wise expressions, masked loads and stores --------------------------------------------------------------


@st.composite
def elementwise(draw: Any, avoid: frozenset[str], masked: bool = False) -> Program:
    """Up to three expressions over up to three loaded blocks and two scalars, each stored to its own output; with
    ``masked``, loads take masks and ``other=`` values and stores a mask that may depend on the data."""
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
    outputs = draw(st.lists(expressions(leaves, draw(st.integers(1, 4)), avoid), min_size=1, max_size=3))
    out_types = [
        e.ty if e.ty.name != "int1" and not draw(st.integers(0, 5)) == 0 else draw(_widening(e.ty)) for e in outputs
    ]
    load_masks = [draw(st.sampled_from(LOAD_MASKS)) if masked else "in" for _ in input_types]
    others = [draw(_other(t)) if masked else None for t in input_types]
    store_masks = [draw(st.sampled_from(("in", "in", "data"))) if masked else "in" for _ in outputs]
    conditions = [draw(expressions(leaves, 2, avoid)) if m == "data" else None for m in store_masks]

    write = Writer()
    names = [write(e) for e in outputs]
    stores = []
    for k, (name, mask, condition) in enumerate(zip(names, store_masks, conditions, strict=True)):
        where = "offs < n"
        if condition is not None:
            c = write(condition)
            where = f"({where}) & ({c} != 0)" if condition.ty.name != "int1" else f"({where}) & {c}"
        stores.append(f"    tl.store(out{k}_ptr + offs, {name}, mask={where})")
    loads = []
    for i, (mask, other) in enumerate(zip(load_masks, others, strict=True)):
        if mask == "in":
            loads.append(f"    x{i} = tl.load(x{i}_ptr + offs, mask=offs < n)")
        else:
            loads.append(f"    x{i} = tl.load(x{i}_ptr + offs, mask=(offs < n) & ({LOAD_MASKS[mask]}), other={other})")
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
            if other is not None and isinstance(other, str):
                fill = convert(np.asarray(float(other.split('"')[1])), F32, t)
            env[f"x{i}"] = Val(np.where(keep, padded(data[i], 0), fill).astype(t.np), t, False, np.zeros(total))
        for (name, t), value in zip(leaves.scalars, scalars.values(), strict=True):
            env[name] = Val(np.asarray(value).astype(t.np), t, False, np.zeros(()))
        return Instance(data + initial, lambda slack: references(evaluate, env, slack))

    return Program(
        "masked" if masked else "elementwise",
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
        return draw(st.sampled_from((0.0, -1.5, 'float("nan")', 'float("-inf")', 7.0)))
    return draw(st.sampled_from((0, 7, -1, 100)))


@st.composite
def _widening(draw: Any, t: Ty) -> Ty:
    """An output type the value converts to without undefined behaviour (any float type, or itself)."""
    return ty(draw(st.sampled_from(("fp16", "bf16", "fp32", "fp64")))) if t.name != "int1" else ty("int8")


def _module(params: list[str], body: list[str], libdevice: bool = False, extra: str = "") -> str:
    imports = HEADER + ("from triton.language.extra import libdevice\n" if libdevice else "")
    return f"{imports}{extra}\n\n@triton.jit\ndef kernel({', '.join(params)}):\n" + "\n".join(body) + "\n"


__all__ = ["HEADER", "I32", "U32", "Expected", "Instance", "Program", "elementwise", "philox", "uniform"]
