"""Every function of libdevice (``triton.language.extra.libdevice``, read from the installed Triton) on both CPU paths,
against references computed independently: exactly (Python's ``fractions`` and integers) for the exactly rounded
functions, with Python's ``math`` (or SciPy for the special functions) in float64 and a stated tolerance in ulps
for the transcendental ones.

The functions run in a few kernels, one per kind of first operand (float32, float64, integers, and the Bessel
functions, which the compiled path hands to the interpreter), each calling every function of its kind once on 128
values and storing each result in a row of an output of its type: four compiles instead of three hundred.
"""

from __future__ import annotations

import dataclasses
import decimal
import importlib.util
import inspect
import logging
import math
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import scipy.special
import triton
import triton.language as tl
import triton.language.extra.cuda.libdevice as cuda_libdevice
import triton.language.extra.libdevice as libdevice_stub
from triton.language import core
from triton.language.extra import libdevice

import jt_core as jt
from jt_core import _compat, settings
from jt_core.interpreter.libdevice import NUMPY_ONLY, implementation

BLOCK = 128
_TYPES = {"fp32": np.float32, "fp64": np.float64, "int32": np.int32, "uint32": np.uint32, "int64": np.int64}
_TYPES["uint64"] = np.uint64


@dataclasses.dataclass(frozen=True)
class Case:
    """One symbol of one libdevice function: ``name(*args) -> result`` through ``symbol``."""

    name: str
    args: tuple[str, ...]
    symbol: str
    result: str


class _Table(Exception):
    pass


def _cases() -> list[Case]:
    """Every function of ``triton.language.extra.libdevice`` with each of the symbols CUDA's library picks for it."""
    names = sorted(n for n, v in vars(libdevice_stub).items() if inspect.isfunction(v) and not n.startswith("_"))
    original = core.extern_elementwise

    def capture(lib_name: str, lib_path: str, args: Any, table: Any, is_pure: bool, _semantic: Any = None) -> Any:
        raise _Table(table)

    found = []
    core.extern_elementwise = capture
    try:
        for name in names:
            fn = getattr(cuda_libdevice, name, None)
            if fn is None:
                continue
            try:
                fn(*[None] * (len(inspect.signature(fn).parameters) - 1), _semantic=object())
            except _Table as table:
                for types, (symbol, result) in table.args[0].items():
                    found.append(Case(name, tuple(str(t) for t in types), symbol, str(result)))
    finally:
        core.extern_elementwise = original
    return found


CASES = _cases()


# -- inputs --------------------------------------------------------------------------------------------------------

#: The inputs each function reads, by name (default "any"): a float domain for each float operand.
DOMAINS = {
    "unit": ("acos", "asin", "atanh", "erfinv"),
    "ge1": ("acosh",),
    "pos": (
        "log",
        "log2",
        "log10",
        "log1p",
        "fast_logf",
        "fast_log2f",
        "fast_log10f",
        "sqrt",
        "rsqrt",
        "rsqrt_rn",
        "j0",
        "j1",
        "y0",
        "y1",
        "jn",
        "yn",
        "cyl_bessel_i0",
        "cyl_bessel_i1",
    ),
    "prob": ("normcdfinv",),
    "prob2": ("erfcinv",),
    "gamma": ("tgamma", "lgamma"),
    "moderate": (
        "exp",
        "exp2",
        "exp10",
        "expm1",
        "cosh",
        "sinh",
        "fast_expf",
        "fast_exp10f",
        "erfcx",
        "pow",
        "fast_powf",
    ),
    "wide": (
        *(n for n in {c.name for c in CASES} if "2" in n and ("int" in n or "ll" in n or "float_r" in n)),
        *("llrint", "llround", "round", "rint", "nearbyint", "trunc", "floor", "ceil"),
    ),
}
_DOMAIN_OF = {name: domain for domain, names in DOMAINS.items() for name in names}
_INT_DOMAINS = {"ldexp": "exponent", "scalbn": "exponent", "jn": "order", "yn": "order", "pow": "power"}


def _floats(domain: str, dtype: Any, rng: np.random.Generator) -> np.ndarray:
    tiny, huge = np.finfo(dtype).tiny, np.finfo(dtype).max
    below_half = np.nextafter(dtype(0.5), dtype(0))
    odd = dtype(2 ** (np.finfo(dtype).nmant + 1) - 1)  # the largest odd integer with a neighbour apart by 1
    specials = {
        "any": [0.0, -0.0, 0.5, -2.5, below_half, odd, np.inf, -np.inf, np.nan, tiny, -huge, 1e-30],
        "unit": [0.0, -0.0, 1.0, -1.0, 0.5, np.nan],
        "ge1": [1.0, np.inf, np.nan],
        "pos": [0.0, np.inf, np.nan, tiny],
        "prob": [0.5, np.nan],
        "prob2": [1.0, np.nan],
        "gamma": [1.0, 2.0, 0.5, -0.5, np.nan],
        "moderate": [0.0, -0.0, np.inf, -np.inf, np.nan],
        "wide": [
            0.5,
            -0.5,
            1.5,
            -2.5,
            below_half,
            odd,
            2.0**31,
            -(2.0**31),
            2.0**32,
            2.0**63,
            -(2.0**64),
            np.nan,
            np.inf,
        ],
    }[domain]
    count = BLOCK - len(specials)
    draw = {
        "any": lambda: 4 * rng.standard_normal(count),
        "unit": lambda: rng.uniform(-0.999, 0.999, count),
        "ge1": lambda: 1 + np.exp(rng.uniform(-6, 4, count)),
        "pos": lambda: np.exp(rng.uniform(-6, 4, count)),
        "prob": lambda: rng.uniform(1e-6, 1, count),
        "prob2": lambda: rng.uniform(1e-6, 1.999, count),
        "gamma": lambda: np.where(
            rng.random(count) < 0.3,
            -rng.integers(0, 5, count) - rng.uniform(0.1, 0.9, count),
            rng.uniform(0.1, 25, count),
        ),
        "moderate": lambda: rng.uniform(-20, 20, count),
        "wide": lambda: np.ldexp(rng.uniform(-1, 1, count), rng.integers(-4, 70, count)),
    }[domain]()
    return np.concatenate([np.asarray(specials, np.float64), draw]).astype(dtype)


def _integers(domain: str, dtype: Any, rng: np.random.Generator) -> np.ndarray:
    info = np.iinfo(dtype)
    if domain == "exponent":
        return rng.integers(-160, 160, BLOCK).astype(dtype)
    if domain == "order":
        return rng.integers(0, 6, BLOCK).astype(dtype)
    if domain == "power":
        return rng.integers(-5, 9, BLOCK).astype(dtype)
    edges = [0, 1, -1 if info.min < 0 else 2, info.min, info.max, info.max - 1]
    values = rng.integers(info.min, info.max, BLOCK - len(edges), dtype=dtype, endpoint=True)
    return np.concatenate([np.array(edges, dtype=dtype), values])


def _input_name(case: Case, index: int) -> str:
    kind = case.args[index]
    if kind.startswith("fp"):
        return f"{kind}_{_DOMAIN_OF.get(case.name, 'any')}"
    return f"{kind}_{_INT_DOMAINS.get(case.name, 'bits')}"


def _inputs(cases: list[Case]) -> dict[str, np.ndarray]:
    names = sorted({_input_name(c, i) for c in cases for i in range(len(c.args))})
    made = {}
    for seed, name in enumerate(names):
        kind, domain = name.split("_", 1)
        rng = np.random.default_rng(1000 + seed)
        dtype = _TYPES[kind]
        made[name] = _floats(domain, dtype, rng) if kind.startswith("fp") else _integers(domain, dtype, rng)
    return made


# -- kernels ---------------------------------------------------------------------------------------------------------

_OUTPUT_KIND = {
    "fp32": "fp32",
    "fp64": "fp64",
    "int32": "int32",
    "uint32": "int32",
    "int64": "int64",
    "uint64": "int64",
}
OUTPUTS = ("fp32", "fp64", "int32", "int64")


def _group(case: Case) -> str:
    if case.symbol in NUMPY_ONLY:
        return "bessel"
    return case.args[0] if case.args[0].startswith("fp") else "integer"


GROUPS = ("fp32", "fp64", "integer", "bessel")


@dataclasses.dataclass
class Kernel:
    """A generated kernel calling the functions of one group, and where each result goes."""

    name: str
    cases: list[Case]
    inputs: list[str]
    rows: dict[int, tuple[str, int]]  # case index -> (output, row)
    counts: dict[str, int]


_TL = {"fp32": "tl.float32", "fp64": "tl.float64", "int32": "tl.int32", "int64": "tl.int64"}
_FILL = {"fp32": 'float("nan")', "fp64": 'float("nan")', "int32": "-1", "int64": "-1"}


def _kernel_source(group: str, cases: list[Case]) -> tuple[str, Kernel]:
    """A kernel calling each function of ``cases`` once and gathering the results in one tile per output type, stored
    at the end: one store per output, since each store is a scatter the compiled path's XLA program carries."""
    inputs = sorted({_input_name(c, i) for c in cases for i in range(len(c.args))})
    counts = dict.fromkeys(OUTPUTS, 0)
    rows = {}
    lines = [f"    {name} = tl.load({name}_ptr + r)" for name in inputs]
    for index, case in enumerate(cases):
        output = _OUTPUT_KIND[case.result]
        rows[index] = (output, counts[output])
        value = f"libdevice.{case.name}({', '.join(_input_name(case, i) for i in range(len(case.args)))})"
        if case.result.startswith("uint"):
            value = f"{value}.to({_TL[output]}, bitcast=True)"
        lines.append(f"    {output} = tl.where(rows_{output} == {counts[output]}, ({value})[None, :], {output})")
        counts[output] += 1
    padded = {o: triton.next_power_of_2(max(1, c)) for o, c in counts.items()}
    head = [f"    rows_{o} = tl.arange(0, {padded[o]})[:, None]" for o in OUTPUTS]
    head += [f"    {o} = tl.full(({padded[o]}, BLOCK), {_FILL[o]}, {_TL[o]})" for o in OUTPUTS]
    tail = [f"    tl.store(out_{o} + rows_{o} * BLOCK + r[None, :], {o})" for o in OUTPUTS]
    parameters = ", ".join([f"{n}_ptr" for n in inputs] + [f"out_{o}" for o in OUTPUTS] + ["BLOCK: tl.constexpr"])
    body = "\n".join(["    r = tl.arange(0, BLOCK)", *head, *lines, *tail])
    source = f"@triton.jit\ndef libdevice_{group}({parameters}):\n{body}"
    return source, Kernel(f"libdevice_{group}", cases, inputs, rows, padded)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Kernel]]:
    """The generated kernels, written to a module Triton can read the source of."""
    sources, made = [], {}
    for group in GROUPS:
        source, kernel = _kernel_source(group, [c for c in CASES if _group(c) == group])
        sources.append(source)
        made[group] = kernel
    header = "import triton\nimport triton.language as tl\nfrom triton.language.extra import libdevice\n\n\n"
    path = Path(tmp_path_factory.mktemp("libdevice")) / "libdevice_walk_kernels.py"
    path.write_text(header + "\n\n\n".join(sources) + "\n")
    spec = importlib.util.spec_from_file_location("libdevice_walk_kernels", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return {group: (getattr(module, kernel.name), kernel) for group, kernel in made.items()}


def _run(kernel: Any, spec: Kernel, inputs: dict[str, np.ndarray], launcher: str) -> dict[str, np.ndarray]:
    shapes = [jax.ShapeDtypeStruct((spec.counts[o], BLOCK), _TYPES[o]) for o in OUTPUTS]
    arrays = [inputs[n] for n in spec.inputs]
    with jax.enable_x64(True):
        call = jax.jit(
            lambda *a: jt.triton_call(*a, kernel=kernel, out_shape=shapes, grid=1, BLOCK=BLOCK, launcher=launcher)
        )
        return dict(zip(OUTPUTS, (np.asarray(o) for o in call(*arrays)), strict=True))


# -- exact references ------------------------------------------------------------------------------------------------


def _rounded(q: Fraction, dtype: Any, mode: str) -> float:
    """The rational ``q`` rounded to ``dtype`` as ``mode`` (rn, rz, rd, ru) asks, exactly."""
    if q == 0:
        return 0.0
    info = np.finfo(dtype)
    precision, emin, largest = info.nmant + 1, info.minexp, Fraction(float(info.max))
    negative, a = q < 0, abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    ulp = Fraction(2) ** (max(e, emin) - precision + 1)
    m = a / ulp
    low = m.numerator // m.denominator
    rest = m - low
    away = (mode == "ru" and not negative) or (mode == "rd" and negative)
    if mode == "rn":
        up = rest > Fraction(1, 2) or (rest == Fraction(1, 2) and low % 2 == 1)
    else:
        up = away and rest != 0
    value = (low + int(up)) * ulp
    if value > largest:
        value = None if mode == "rn" or away else largest
    magnitude = math.inf if value is None else float(value)
    return -magnitude if negative else magnitude


def _whole(q: Fraction, mode: str) -> int:
    """``q`` rounded to an integer: rn (halves to even), rz, rd, ru, or ra (halves away from zero)."""
    low = q.numerator // q.denominator
    rest = q - low
    if mode == "rd" or rest == 0:
        return low
    if mode == "ru":
        return low + 1
    if mode == "rz":
        return low if q > 0 else low + 1
    if rest != Fraction(1, 2):
        return low + int(rest > Fraction(1, 2))
    if mode == "ra":
        return low + int(q > 0)
    return low + low % 2


def _wrap(value: int, kind: str) -> int:
    """An integer as the bits of the signed integer of ``kind``'s width."""
    bits = 8 * np.dtype(_TYPES[kind]).itemsize
    value %= 1 << bits
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _to_int(x: float, kind: str, mode: str) -> int:
    """A float converted to integer ``kind`` as NVIDIA's conversions do: rounded, saturated, NaN to 0."""
    info = np.iinfo(_TYPES[kind])
    if math.isnan(x):
        return 0
    if math.isinf(x):
        return int(info.max) if x > 0 else int(info.min)
    return min(max(_whole(Fraction(x), mode), int(info.min)), int(info.max))


def _ieee(op: str, dtype: Any, *xs: float) -> float:
    with np.errstate(all="ignore"):
        a = [dtype(x) for x in xs]
        if op == "add":
            return float(a[0] + a[1])
        if op == "mul":
            return float(a[0] * a[1])
        if op == "div":
            return float(a[0] / a[1])
        if op == "fma":
            return float(np.float64(a[0]) * np.float64(a[1]) + np.float64(a[2]))
        return float(np.sqrt(a[0]))


def _arith(op: str, mode: str, dtype: Any, *xs: float) -> float:
    if op == "sub":
        return _arith("add", mode, dtype, xs[0], -xs[1])
    if op == "rcp":
        return _arith("div", mode, dtype, 1.0, xs[0])
    if not all(math.isfinite(x) for x in xs) or (op == "div" and xs[1] == 0) or (op == "sqrt" and xs[0] <= 0):
        return _ieee(op, dtype, *xs)
    f = [Fraction(x) for x in xs]
    if op == "sqrt":
        return _sqrt(f[0], dtype, mode)
    exact = {"add": lambda: f[0] + f[1], "mul": lambda: f[0] * f[1], "div": lambda: f[0] / f[1]}.get(
        op, lambda: f[0] * f[1] + f[2]
    )()
    if exact == 0:
        terms = [xs[0], xs[1]] if op == "add" else [xs[0] * xs[1], xs[2]] if op == "fma" else []
        if op in ("mul", "div"):
            negative = (math.copysign(1, xs[0]) < 0) != (math.copysign(1, xs[1]) < 0)
        elif all(t == 0 and math.copysign(1, t) < 0 for t in terms):
            negative = True
        else:
            negative = mode == "rd" and not all(t == 0 and math.copysign(1, t) > 0 for t in terms)
        return -0.0 if negative else 0.0
    return _rounded(exact, dtype, mode)


def _sqrt(q: Fraction, dtype: Any, mode: str) -> float:
    """``sqrt(q)`` rounded as ``mode`` asks: the neighbours of NumPy's result checked by their exact squares."""
    guess = np.sqrt(dtype(float(q)))
    candidates = [np.nextafter(guess, dtype(0)), guess, np.nextafter(guess, dtype(np.inf))]
    if mode in ("rd", "rz"):
        return float(max(c for c in candidates if Fraction(float(c)) ** 2 <= q))
    if mode == "ru":
        return float(min(c for c in candidates if Fraction(float(c)) ** 2 >= q))
    for c in candidates:
        low = (Fraction(float(np.nextafter(c, dtype(0)))) + Fraction(float(c))) / 2
        high = (Fraction(float(c)) + Fraction(float(np.nextafter(c, dtype(np.inf))))) / 2
        if low**2 <= q <= high**2:
            return float(c)
    raise AssertionError(q)


def _rsqrt_rn(x: float) -> float:
    if not math.isfinite(x) or x <= 0:
        with np.errstate(all="ignore"):
            return float(np.float32(1) / np.sqrt(np.float32(x)))
    c = np.float32(1 / math.sqrt(x))
    for _ in range(4):
        below, above = np.nextafter(c, np.float32(0)), np.nextafter(c, np.float32(np.inf))
        low = (Fraction(float(below)) + Fraction(float(c))) / 2
        high = (Fraction(float(c)) + Fraction(float(above))) / 2
        # 1 / sqrt(x) lies between low and high exactly when low**2 * x <= 1 <= high**2 * x.
        if low**2 * Fraction(x) > 1:
            c = below
        elif high**2 * Fraction(x) < 1:
            c = above
        else:
            return float(c)
    raise AssertionError(x)


# -- references by function ------------------------------------------------------------------------------------------

_MATH = {
    "acos": math.acos,
    "acosh": math.acosh,
    "asin": math.asin,
    "asinh": math.asinh,
    "atan": math.atan,
    "atanh": math.atanh,
    "cbrt": math.cbrt,
    "cos": math.cos,
    "cosh": math.cosh,
    "erf": math.erf,
    "erfc": math.erfc,
    "exp": math.exp,
    "exp2": math.exp2,
    "expm1": math.expm1,
    "log": math.log,
    "log10": math.log10,
    "log1p": math.log1p,
    "log2": math.log2,
    "sin": math.sin,
    "sinh": math.sinh,
    "tan": math.tan,
    "tanh": math.tanh,
    "lgamma": math.lgamma,
    "tgamma": math.gamma,
    "atan2": math.atan2,
    "hypot": math.hypot,
    "pow": math.pow,
    "exp10": lambda x: 10.0**x,
    "rsqrt": lambda x: 1 / math.sqrt(x),
    "rcbrt": lambda x: 1 / math.cbrt(x),
    "norm3d": math.hypot,
    "norm4d": math.hypot,
    "rnorm3d": lambda *a: 1 / math.hypot(*a),
    "rnorm4d": lambda *a: 1 / math.hypot(*a),
    "rhypot": lambda *a: 1 / math.hypot(*a),
    "rcp64h": lambda x: 1 / x,
}
#: Where ``math`` raises (poles, domain errors, overflow), IEEE's special value, from NumPy or SciPy in float64.
_SPECIAL_VALUES = {
    "acos": np.arccos,
    "acosh": np.arccosh,
    "asin": np.arcsin,
    "atanh": np.arctanh,
    "cosh": np.cosh,
    "sinh": np.sinh,
    "exp": np.exp,
    "exp2": np.exp2,
    "expm1": np.expm1,
    "exp10": lambda x: np.power(10.0, x),
    "log": np.log,
    "log10": np.log10,
    "log1p": np.log1p,
    "log2": np.log2,
    "pow": np.power,
    "lgamma": scipy.special.gammaln,
    "tgamma": scipy.special.gamma,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "rcbrt": lambda x: 1 / np.cbrt(x),
    "cos": np.cos,
    "sin": np.sin,
    "tan": np.tan,
    "rhypot": lambda *a: 1 / np.float64(math.hypot(*a)),
    "rnorm3d": lambda *a: 1 / np.float64(math.hypot(*a)),
    "rnorm4d": lambda *a: 1 / np.float64(math.hypot(*a)),
    "rcp64h": lambda x: 1 / x,
}


def _erfcx(x: float) -> float:
    """SciPy's erfcx, but for negative ``x`` (where SciPy's is 100 ulps off) ``2 exp(x**2) - erfcx(-x)`` with the
    exponential in 40 digits."""
    if not x < 0 or not math.isfinite(x):
        return float(scipy.special.erfcx(x))
    with decimal.localcontext() as context:
        context.prec = 40
        grown = 2 * (decimal.Decimal(x) ** 2).exp()
        return float(grown - decimal.Decimal(float(scipy.special.erfcx(-x))))


_SCIPY = {
    "erfinv": scipy.special.erfinv,
    "erfcinv": scipy.special.erfcinv,
    "erfcx": _erfcx,
    "normcdf": scipy.special.ndtr,
    "normcdfinv": scipy.special.ndtri,
    "cyl_bessel_i0": scipy.special.i0,
    "cyl_bessel_i1": scipy.special.i1,
    "j0": scipy.special.j0,
    "j1": scipy.special.j1,
    "y0": scipy.special.y0,
    "y1": scipy.special.y1,
    "jn": scipy.special.jn,
    "yn": scipy.special.yn,
}
#: The ``fast_`` functions: computed as the others.
_FAST = {f"fast_{n}f": n for n in ("cos", "sin", "tan", "exp", "log", "log2", "log10", "exp10", "pow")}
#: The float32 functions each path computes in float32 (the others in float64, rounded once): XLA's and NumPy's own,
#: within 4 ulps (XLA's erfc within 32 in its tail).
NATIVE_F32 = {
    "acos", "acosh", "asin", "asinh", "atan", "atanh", "cbrt", "cos", "exp", "expm1", "log", "log10", "log1p", "log2",
    "sin", "tan", "tanh", "atan2", "hypot", "erf", "erfc", "exp2", "cosh", "sinh", "rsqrt",
}  # fmt: skip
NATIVE_F32 |= {f"fast_{n}f" for n in ("cos", "sin", "tan", "exp", "log", "log2", "log10")}
ULPS_F32 = {"erfc": 32}
#: The absolute error allowed besides, near the zeros of a function computed in float64 (lgamma at 1 and 2).
ABSOLUTE_F64 = {"lgamma": 1e-15}
#: The tolerance in ulps of the result's type of the transcendental functions whose float64 results need more than
#: the default (4 ulps; float32 results computed in float64 and rounded are within 1). ``rcp64h`` approximates the
#: reciprocal from the operand's high 32 bits: to 2**-20 of it.
ULPS_F64 = {
    "rcp64h": 2.0**33,
    "tgamma": 128,
    "lgamma": 64,
    "erfc": 64,
    "erfcx": 16,
    "cyl_bessel_i0": 16,
    "cyl_bessel_i1": 16,
    "erfinv": 8,
    "erfcinv": 64,
    "normcdfinv": 64,
    "normcdf": 64,  # erfc's, which it is in the lower tail (jax 0.12.1's is ~30 ulp off near 1e-11)
    "pow": 8,
    "exp10": 8,
    "sinpi": 8,
    "cospi": 8,
}
if _compat.jaxlib_version() < (0, 11):
    # jax 0.10's float64 arctanh is up to 129 ulps off (near 0.41), its erfinv 22 (near 0.64), over 200,001 points
    # of (-0.999, 0.999); jax 0.12's within 2 and 4. The compiled path's are jax's.
    ULPS_F64 |= {"atanh": 256, "erfinv": 32}


def _transcendental(name: str, *xs: float) -> float:
    name = _FAST.get(name, name)
    if name in ("sinpi", "cospi"):
        (x,) = xs
        if not math.isfinite(x):
            return math.nan
        k = round(x)
        r = x - k  # exact
        # sin(pi r) and cos(pi r) near their zeros from the other function of the complement: exact arguments.
        if name == "sinpi":
            value = math.sin(math.pi * r) if abs(r) <= 0.25 else math.copysign(math.cos(math.pi * (0.5 - abs(r))), r)
        else:
            value = math.cos(math.pi * r) if abs(r) <= 0.25 else math.sin(math.pi * (0.5 - abs(r)))
        return -value if k % 2 else value
    if name in _SCIPY:
        return float(_SCIPY[name](*xs))
    try:
        return float(_MATH[name](*xs))
    except (ValueError, OverflowError, ZeroDivisionError):
        with np.errstate(all="ignore"):
            return float(_SPECIAL_VALUES.get(name, lambda *a: math.nan)(*[np.float64(v) for v in xs]))


def _bits(x: Any) -> int:
    return int(np.asarray(x).view(f"u{np.asarray(x).dtype.itemsize}"))


def _float_of(bits: int, dtype: Any) -> float:
    return float(np.asarray(bits % (1 << (8 * np.dtype(dtype).itemsize)), f"u{np.dtype(dtype).itemsize}").view(dtype))


def _integer(case: Case, *xs: Any) -> int:
    """The exact result of an integer function, before it is wrapped to its type."""
    name = case.name
    width = 8 * np.dtype(_TYPES[case.args[0]]).itemsize
    v = [int(x) for x in xs]
    mask = (1 << width) - 1
    if name == "mulhi":
        return (v[0] * v[1]) >> width
    if name == "mul24":
        if case.args[0] == "int32":
            v = [((a & 0xFFFFFF) ^ 0x800000) - 0x800000 for a in v]
        else:
            v = [a & 0xFFFFFF for a in v]
        return v[0] * v[1]
    if name in ("hadd", "rhadd"):
        return (v[0] + v[1] + (name == "rhadd")) >> 1
    if name == "sad":
        return abs(v[0] - v[1]) + v[2]
    if name == "abs":
        return abs(v[0])
    u = v[0] & mask
    if name == "brev":
        return int(format(u, f"0{width}b")[::-1], 2)
    if name == "clz":
        return width - u.bit_length()
    if name == "ffs":
        return (u & -u).bit_length()
    if name == "popc":
        return u.bit_count()
    if name == "byte_perm":
        both = ((v[1] & 0xFFFFFFFF) << 32) | (v[0] & 0xFFFFFFFF)
        return sum((((both >> (8 * ((v[2] >> (4 * n)) & 7))) & 0xFF) << (8 * n)) for n in range(4))
    raise KeyError(name)


def _exact(case: Case, *xs: Any) -> Any:
    """The exact result of a correctly rounded function (a float, or an integer before wrapping)."""
    name, dtype = case.name, _TYPES[case.args[0]]
    f = [float(x) if case.args[i].startswith("fp") else int(x) for i, x in enumerate(xs)]
    head, _, mode = name.rpartition("_")
    if mode in ("rn", "rz", "rd", "ru") and head in ("add", "sub", "mul", "div", "rcp", "sqrt", "fma"):
        return _arith(head, mode, dtype, *f)
    if name in ("fma", "sqrt"):
        return _arith(name, "rn", dtype, *f)
    if mode in ("rn", "rz", "rd", "ru") and "2" in head:
        target = head.split("2")[1]
        if target in ("float", "double"):
            out = np.float32 if target == "float" else np.float64
            x = f[0]
            return x if isinstance(x, float) and not math.isfinite(x) else _rounded(Fraction(x), out, mode)
        kind = {"int": "int32", "uint": "uint32", "ll": "int64", "ull": "uint64"}[target]
        return _to_int(f[0], kind, mode)
    x = f[0]
    finite = isinstance(x, float) and math.isfinite(x)
    if name == "llrint":
        return _to_int(x, "int64", "rn")
    if name == "llround":
        return _to_int(x, "int64", "ra")
    if name in ("round", "rint", "nearbyint", "floor", "ceil", "trunc"):
        mode = {"round": "ra", "rint": "rn", "nearbyint": "rn", "floor": "rd", "ceil": "ru", "trunc": "rz"}[name]
        return math.copysign(float(_whole(Fraction(x), mode)), x) if finite else x
    if name in ("ldexp", "scalbn"):
        return _rounded(Fraction(x) * Fraction(2) ** f[1], dtype, "rn") if finite and x != 0 else x
    if name in ("logb", "ilogb"):
        if name == "ilogb":
            return -(2**31) if x == 0 or math.isnan(x) else 2**31 - 1 if math.isinf(x) else math.frexp(x)[1] - 1
        return -math.inf if x == 0 else abs(x) if not finite else float(math.frexp(x)[1] - 1)
    if name in ("isinf", "isnan", "finitef", "isfinited", "signbit"):
        test = {"isinf": math.isinf, "isnan": math.isnan, "signbit": lambda v: math.copysign(1, v) < 0}
        return int(test.get(name, math.isfinite)(x))
    if name == "saturatef":
        return 0.0 if math.isnan(x) or x == 0 else min(max(x, 0.0), 1.0)
    if name == "fdim":
        return x + f[1] if math.isnan(x) or math.isnan(f[1]) else float(dtype(x) - dtype(f[1])) if x > f[1] else 0.0
    if name in ("fmod", "remainder"):
        try:
            return (math.fmod if name == "fmod" else math.remainder)(x, f[1])
        except ValueError:
            return math.nan
    if name == "copysign":
        return math.copysign(x, f[1])
    if name == "nextafter":
        return float(np.nextafter(dtype(x), dtype(f[1])))
    if name == "fast_dividef":
        return _ieee("div", dtype, x, f[1])
    if name == "rsqrt_rn":
        return _rsqrt_rn(x)
    if name == "abs" and case.args[0].startswith("fp"):
        return abs(x)
    if name in ("float_as_int", "float_as_uint", "double_as_longlong"):
        return _bits(dtype(x))
    if name in ("int_as_float", "uint_as_float", "longlong_as_double"):
        return _float_of(int(xs[0]), _TYPES[case.result])
    if name in ("double2hiint", "double2loint"):
        bits = _bits(np.float64(x))
        return bits >> 32 if name == "double2hiint" else bits & 0xFFFFFFFF
    if name == "hiloint2double":
        return _float_of(((int(xs[0]) & 0xFFFFFFFF) << 32) | (int(xs[1]) & 0xFFFFFFFF), np.float64)
    return _integer(case, *xs)


#: Functions whose result is exact: compared bit for bit (any NaN matches any NaN).
_EXACT_NAMES = {
    "abs",
    "brev",
    "byte_perm",
    "ceil",
    "clz",
    "copysign",
    "fdim",
    "ffs",
    "finitef",
    "floor",
    "fma",
    "fmod",
    "hadd",
    "hiloint2double",
    "ilogb",
    "isfinited",
    "isinf",
    "isnan",
    "ldexp",
    "llrint",
    "llround",
    "logb",
    "mul24",
    "mulhi",
    "nearbyint",
    "nextafter",
    "popc",
    "remainder",
    "rhadd",
    "rint",
    "round",
    "sad",
    "saturatef",
    "scalbn",
    "signbit",
    "trunc",
    "sqrt",
    "rsqrt_rn",
    "fast_dividef",
    "float_as_int",
    "float_as_uint",
    "int_as_float",
    "uint_as_float",
    "double_as_longlong",
    "longlong_as_double",
    "double2hiint",
    "double2loint",
}


def _outside(case: Case, xs: tuple[Any, ...]) -> bool:
    """Whether libdevice's float64 multiply-add is asked outside the range where jt computes it exactly: operands
    from 2**995 in magnitude, or a product below 2**-969 (where it may be an ulp off)."""
    if not (case.name.startswith("fma") and case.args[0] == "fp64"):
        return False
    a, b = float(xs[0]), float(xs[1])
    product = abs(a * b)
    return max(abs(a), abs(b)) >= 2.0**995 or (0 < product < 2.0**-969) or (product == 0 and a != 0 and b != 0)


def expected(case: Case, arrays: list[np.ndarray]) -> tuple[list[Any], float]:
    """The reference results of ``case`` on ``arrays`` (``None`` where not checked), and the tolerance: 0 for bit for
    bit, else ulps."""
    exact = case.name in _EXACT_NAMES or case.name.rpartition("_")[2] in ("rn", "rz", "rd", "ru")
    if exact:
        return [None if _outside(case, xs) else _exact(case, *xs) for xs in zip(*arrays, strict=True)], 0.0
    values = [_transcendental(case.name, *[float(x) for x in xs]) for xs in zip(*arrays, strict=True)]
    if case.result == "fp32":
        ulps = float(ULPS_F32.get(case.name, 4)) if case.name in NATIVE_F32 else 1.0
    else:
        ulps = float(ULPS_F64.get(case.name, 4))
    return values, ulps


def _absolute(case: Case) -> float:
    return ABSOLUTE_F64.get(case.name, 0.0) if case.result == "fp64" else 0.0


def mismatches(case: Case, got: np.ndarray, want: list[Any], ulps: float) -> list[str]:
    """The elements where ``got`` (the result's row) is not ``want`` to the tolerance, described."""
    kind = case.result
    checked = np.asarray([w is not None for w in want])
    want = [0 if w is None else w for w in want]
    found = []
    if kind.startswith("fp"):
        dtype = _TYPES[kind]
        with np.errstate(over="ignore"):  # a float64 reference past float32's range is infinite there
            ref = np.asarray([np.asarray(w, np.float64).astype(dtype) for w in want], dtype)
        got = got.astype(dtype)
        same = (got.view(f"u{ref.itemsize}") == ref.view(f"u{ref.itemsize}")) | (np.isnan(got) & np.isnan(ref))
        # XLA's CPU threads flush subnormal numbers to zero, and a host callback's NumPy inherits it: a subnormal
        # result may come back as zero, or as the nearest number past zero where a rounding steps away from it.
        tiny = np.finfo(dtype).tiny
        same |= (
            (np.abs(ref) < tiny)
            & (ref != 0)
            & (np.abs(got) < tiny)
            & ~(np.signbit(got) & ~np.signbit(ref) & (got != 0))
        )
        if ulps:
            with np.errstate(all="ignore"):
                allowed = ulps * np.spacing(np.abs(ref)) + _absolute(case)
                close = np.abs(got.astype(np.float64) - ref.astype(np.float64)) <= allowed
            same |= close & np.isfinite(ref)
        bad = np.flatnonzero(~same & checked)
        found = [f"[{i}] got {got[i]!r}, want {ref[i]!r}" for i in bad]
    else:
        wrapped = [_wrap(int(w), kind) for w in want]
        bits = [_wrap(int(g), kind) for g in got]
        pairs = enumerate(zip(bits, wrapped, strict=True))
        found = [f"[{i}] got {g}, want {w}" for i, (g, w) in pairs if g != w and checked[i]]
    return found


# -- tests -----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def inputs() -> dict[str, np.ndarray]:
    return _inputs(CASES)


#: The compiled walk takes most of this file's time (XLA compiles three large kernels); where CI runs the suite a
#: second time with the comparison of the two paths on, it ran in the first pass already. The interpreter's walk
#: runs in both, the second time with the race check on.
COMPILED = pytest.param(
    "compiled",
    marks=pytest.mark.skipif(settings.flag("JT_CPU_DIFFERENTIAL"), reason="walked in the compiled pass"),
)


def _check(cases: list[Case], inputs: dict[str, np.ndarray], result_of: Any) -> None:
    failures = []
    for index, case in enumerate(cases):
        want, ulps = expected(case, [inputs[_input_name(case, i)] for i in range(len(case.args))])
        bad = mismatches(case, np.asarray(result_of(index, case)), want, ulps)
        if bad:
            failures.append(f"{case.symbol} {case.name}{case.args}: {len(bad)} of {BLOCK} differ: {'; '.join(bad[:3])}")
    assert not failures, "\n".join(failures)


def test_the_walk_covers_every_function_of_the_installed_libdevice() -> None:
    names = {n for n, v in vars(libdevice_stub).items() if inspect.isfunction(v) and not n.startswith("_")}
    walked = {c.name for c in CASES}
    # Only ROCm's library has fast_tanhf; every other function is CUDA's and walked with each of its symbols.
    assert names - walked <= {"fast_tanhf"}, names - walked
    assert len(walked) >= 190 and len(CASES) >= 300, (len(walked), len(CASES))
    assert all(implementation(c.symbol) is not None for c in CASES)
    assert {c.symbol for c in CASES if implementation(c.symbol, "jax") is None} == NUMPY_ONLY


@pytest.mark.parametrize("launcher", [COMPILED, "interpreter"])
@pytest.mark.parametrize("group", GROUPS)
def test_every_libdevice_function_runs_in_a_kernel(
    kernels: dict[str, tuple[Any, Kernel]],
    inputs: dict[str, np.ndarray],
    group: str,
    launcher: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if launcher == "compiled":
        for name in ("JT_CPU_DIFFERENTIAL", "JT_CPU_RACE_CHECK", "JT_LAUNCHER_CPU"):
            monkeypatch.delenv(name, raising=False)
    kernel, spec = kernels[group]
    with caplog.at_level(logging.INFO, logger="jt_core.lowering"):
        results = _run(kernel, spec, inputs, launcher)
    handed = [r.getMessage() for r in caplog.records if "cannot express" in r.getMessage()]
    if launcher == "compiled" and group == "bessel":
        assert len(handed) == 1 and ("libdevice.j" in handed[0] or "libdevice.y" in handed[0]), handed
    else:
        assert not handed, handed
    _check(spec.cases, inputs, lambda index, case: results[spec.rows[index][0]][spec.rows[index][1]])


@triton.jit
def libdevice_mix_kernel(x_ptr, i_ptr, out_ptr, bits_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r)
    i = tl.load(i_ptr + r)
    tl.store(out_ptr + r, libdevice.tanh(x) * libdevice.pow(x, 2) + libdevice.round(x * 4) + libdevice.erf(x))
    tl.store(bits_ptr + r, libdevice.ffs(i) + libdevice.llrint(x * 8).to(tl.int32) + libdevice.mulhi(i, i * 5))


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_libdevice_runs_with_the_race_check_and_both_paths_compared(
    launcher: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JT_CPU_RACE_CHECK", "1")
    monkeypatch.setenv("JT_CPU_DIFFERENTIAL", "1")
    rng = np.random.default_rng(7)
    x = (3 * rng.standard_normal(64)).astype(np.float32)
    i = rng.integers(-(2**31), 2**31, 64, dtype=np.int64).astype(np.int32)
    shapes = [jax.ShapeDtypeStruct((64,), np.float32), jax.ShapeDtypeStruct((64,), np.int32)]
    out, bits = jax.jit(
        lambda x, i: jt.triton_call(
            x, i, kernel=libdevice_mix_kernel, out_shape=shapes, grid=1, BLOCK=64, launcher=launcher
        )
    )(x, i)
    w = x.astype(np.float64)
    halves = np.floor(np.abs(w * 4) + 0.5) * np.sign(w)
    want = np.tanh(w) * w**2 + halves + np.vectorize(math.erf)(w)
    np.testing.assert_allclose(np.asarray(out), want, rtol=2e-6, atol=1e-6)
    ii = i.astype(np.int64)
    ffs = np.asarray([(int(v) & -int(v)).bit_length() for v in i])
    high = (ii * (i * np.int32(5)).astype(np.int64)) >> 32
    np.testing.assert_array_equal(np.asarray(bits), (ffs + np.rint(w * 8).astype(np.int64) + high).astype(np.int32))


@triton.jit
def round_and_mulhi_kernel(x_ptr, d_ptr, a_ptr, b_ptr, rounded_ptr, rounded64_ptr, high_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(rounded_ptr + r, libdevice.round(tl.load(x_ptr + r)))
    tl.store(rounded64_ptr + r, libdevice.round(tl.load(d_ptr + r)))
    tl.store(high_ptr + r, libdevice.mulhi(tl.load(a_ptr + r), tl.load(b_ptr + r)))


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_round_halves_away_from_zero_exactly_and_int32_mulhi_is_signed(launcher: str) -> None:
    x = np.asarray([0.49999997, -0.49999997, 8388609.0, 2.5, -2.5, 0.5, -0.0, 1.5], np.float32)
    d = np.asarray([0.49999999999999994, -0.49999999999999994, 2.0**52 + 1, 2.5, -2.5, 0.5, -0.0, 4503599627370495.5])
    a = np.asarray([-1, -1, 2**31 - 1, -(2**31), 12345, -7, 0, 65536], np.int32)
    b = np.asarray([-1, 1, 2**31 - 1, -(2**31), -6789, 9, 5, 65536], np.int32)
    shapes = [jax.ShapeDtypeStruct((8,), np.float32), jax.ShapeDtypeStruct((8,), np.float64)]
    shapes.append(jax.ShapeDtypeStruct((8,), np.int32))
    with jax.enable_x64(True):
        rounded, rounded64, high = jax.jit(
            lambda *args: jt.triton_call(
                *args, kernel=round_and_mulhi_kernel, out_shape=shapes, grid=1, BLOCK=8, launcher=launcher
            )
        )(x, d, a, b)
    np.testing.assert_array_equal(np.asarray(rounded), np.asarray([0, -0.0, 8388609, 3, -3, 1, -0.0, 2], np.float32))
    assert np.signbit(np.asarray(rounded)[[1, 6]]).all()
    np.testing.assert_array_equal(
        np.asarray(rounded64), [0.0, -0.0, 2.0**52 + 1, 3.0, -3.0, 1.0, -0.0, 4503599627370496.0]
    )
    np.testing.assert_array_equal(np.asarray(high), [(int(p) * int(q)) >> 32 for p, q in zip(a, b, strict=True)])
