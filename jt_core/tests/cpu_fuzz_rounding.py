"""Generated conversions between float types for the CPU fuzzer: a loaded block narrowed once or twice, each step
with ``fp_downcast_rounding`` ``"rtne"``, ``"rtz"`` or none, over every narrowing pair of float16, bfloat16,
float32, float64 and the two float8 types Triton's NVIDIA front end takes, each step's result stored.

The data hold what rounding decides on: exact values of the target and the midpoints between neighbours (ties),
points just off a midpoint (where rounding twice, through a wider type, goes wrong), values past the target's range,
its subnormals, zeros of both signs, infinities and NaN. The reference (`cpu_fuzz_semantics.narrow`) rounds by the
definition, from float64.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from cpu_fuzz_grammar import FLUSHED, flush_subnormals
from cpu_fuzz_programs import Expected, Instance, Program, _module, random_array
from cpu_fuzz_semantics import Ty, narrow, round_f64, ty
from hypothesis import strategies as st

#: The float types each float type narrows to (float16 and bfloat16 have the same width: neither narrows the other).
NARROWER = {
    "fp64": ("fp32", "fp16", "bf16", "fp8e4nv", "fp8e5"),
    "fp32": ("fp16", "bf16", "fp8e4nv", "fp8e5"),
    "fp16": ("fp8e4nv", "fp8e5"),
    "bf16": ("fp8e4nv", "fp8e5"),
}
MODES = (None, "rtne", "rtz")


def _step(x: np.ndarray, source: Ty, target: Ty, mode: str | None, flush: bool) -> np.ndarray:
    """One conversion, and, with ``flush``, what a processor flushing subnormals gives where it rounds to nearest:
    the compiled path converts to nearest with XLA's conversions (whose subnormal float32, float64 and bfloat16
    operands and results are zeros) and toward zero on the bits."""
    if flush and mode != "rtz" and source.name in FLUSHED:
        x = flush_subnormals(x, source)
    out = narrow(x, target, mode == "rtz")
    if flush and mode != "rtz" and target.name in FLUSHED:
        out = flush_subnormals(out, target)
    return out


def edge_values(rng: np.random.Generator, source: Ty, target: Ty, size: int) -> np.ndarray:
    """float64 values of the type ``source`` where rounding to ``target`` decides: ``target``'s values, the
    midpoints between them, points a little off those (only where ``source`` holds them), beyond its largest value,
    and its subnormals."""
    info = ml_dtypes.finfo(target.np)
    nmant, low, high = int(info.nmant), int(info.minexp) - int(info.nmant), int(info.maxexp)
    exponent = rng.integers(low, high + 1, size)
    mantissa = rng.integers(2**nmant, 2 ** (nmant + 1), size).astype(np.float64)
    offset = rng.choice([0.0, 0.5, 0.5, 0.25, 0.75, 0.5 + 2.0**-30, 0.5 - 2.0**-30, 2.0**-30], size)
    scaled = np.ldexp(mantissa + offset, exponent - nmant - 1)
    beyond = float(info.max) * rng.choice([1.0, 1.0 + 2.0**-nmant / 4, 1.0 + 2.0**-nmant / 2, 1.5, 2.0], size)
    tiny = rng.integers(1, 2 ** (nmant + 1), size) * float(info.smallest_subnormal) * rng.choice([1.0, 0.5, 1.5], size)
    picked = np.where(rng.integers(0, 6, size) == 0, beyond, np.where(rng.integers(0, 5, size) == 0, tiny, scaled))
    signed = picked * rng.choice([-1.0, 1.0], size)
    with np.errstate(over="ignore"):
        return round_f64(signed, source).astype(np.float64)


@st.composite
def roundings(draw: Any, avoid: frozenset[str]) -> Program:
    """A block of one float type narrowed once or twice (a chain of narrower types), each result stored."""
    source = ty(draw(st.sampled_from(tuple(NARROWER))))
    chain = [source]
    while chain[-1].name in NARROWER and (len(chain) == 1 or draw(st.booleans())) and len(chain) < 3:
        chain.append(ty(draw(st.sampled_from(NARROWER[chain[-1].name]))))
    modes = [draw(st.sampled_from(MODES)) for _ in chain[1:]]
    spelled = [draw(st.booleans()) for _ in chain[1:]]  # x.to(...) or tl.cast(x, ...)
    block = draw(st.sampled_from((16, 32)))
    programs = draw(st.integers(1, 3))
    size = block * programs
    steps = len(chain) - 1

    body = ["    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", "    y0 = tl.load(x_ptr + offs)"]
    for k, (target, mode, method) in enumerate(zip(chain[1:], modes, spelled, strict=True)):
        rounding = "" if mode is None else f', fp_downcast_rounding="{mode}"'
        cast = f"y{k}.to({target.tl}{rounding})" if method else f"tl.cast(y{k}, {target.tl}{rounding})"
        body += [f"    y{k + 1} = {cast}", f"    tl.store(out{k}_ptr + offs, y{k + 1})"]
    params = ["x_ptr"] + [f"init{k}_ptr" for k in range(steps)] + [f"out{k}_ptr" for k in range(steps)]
    source_text = _module([*params, "BLOCK: tl.constexpr"], body)

    def make(rng: np.random.Generator) -> Instance:
        general = random_array(rng, source, size, avoid).astype(np.float64)
        edges = edge_values(rng, source, chain[rng.integers(1, len(chain))], size)
        x = np.where(rng.integers(0, 3, size) == 0, general, edges).astype(source.np)
        initial = [random_array(rng, t, size, avoid) for t in chain[1:]]

        def outputs(flush: bool) -> list[np.ndarray]:
            found, value = [], x
            for k, target in enumerate(chain[1:]):
                value = _step(value, chain[k], target, modes[k], flush)
                found.append(value)
            return found

        exact = outputs(False)

        def reference(slack: frozenset[str]) -> list[Expected]:
            if "ftz" not in slack:
                return [Expected(v, np.zeros(size)) for v in exact]
            flushed = outputs(True)
            return [Expected(v, np.zeros(size), [(f, np.zeros(size))]) for v, f in zip(exact, flushed, strict=True)]

        return Instance([x, *initial], reference)

    return Program(
        "roundings",
        source_text,
        {},
        [((size,), t) for t in chain[1:]],
        {1 + k: k for k in range(steps)},
        (programs,),
        {"BLOCK": block},
        make,
    )


__all__ = ["edge_values", "roundings"]
