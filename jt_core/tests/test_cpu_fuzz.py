"""The CPU paths' differential fuzzer: generated kernels run on the compiled path, in Triton's interpreter
(``launcher="interpreter"``) and as a NumPy reference that the generator builds beside each kernel.

Each example is a kernel drawn by a `hypothesis` strategy of one category (element-wise expressions over nine element
types, masked loads and stores, reductions and scans, ``tl.dot``, shape operations, control flow, atomics, random
numbers, grids, arithmetic on ``int1``: `cpu_fuzz_programs`, `cpu_fuzz_blocks`, `cpu_fuzz_control`; conversions
with each ``fp_downcast_rounding``: `cpu_fuzz_rounding`; ``tl.map_elementwise``: `cpu_fuzz_mapped`; spin locks:
`cpu_fuzz_locks`), compiled once and run on a few fresh draws of data. Both
paths must give the reference's results: bit for bit where Triton's meaning is exact (integers, correctly rounded
float operations, loads and stores, shape operations), within a propagated bound where the order of sums or a
transcendental function's last bits may differ (`cpu_fuzz_grammar`). A failure shows the kernel's source (shrunk by
hypothesis), the call, and the elements that differ with the inputs at those places.

`KNOWN_DIVERGENCES` lists the divergences known and not yet fixed, each with what the generator avoids or the
comparison allows for it; deleting an entry makes the fuzzer look for it again. Those the fuzzer found are also
small regression tests in `test_cpu_fuzz_findings`.

In CI the examples are fixed (``derandomize``, no example database) and few. By hand, more and fresh ones::

    JT_FUZZ_EXAMPLES=2000 JT_FUZZ_SEED=7 nice pytest -p no:cacheprovider jt_core/tests/test_cpu_fuzz.py

``JT_FUZZ_EXAMPLES`` is the number of kernels per category (the CI default is `CI_EXAMPLES`), ``JT_FUZZ_SEED`` draws
them from a seed of its own instead of the fixed sequence, and ``-k`` picks categories (``-k "dot or atomics"``).
CI's second pass over the suite (``JT_CPU_DIFFERENTIAL=1``, in the interpreter) skips the fuzzer: it names each
call's path itself and compares the two already, so that pass would repeat the first.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cpu_fuzz_blocks as blocks
import cpu_fuzz_control as control
import cpu_fuzz_locks as locks
import cpu_fuzz_mapped as mapped
import cpu_fuzz_programs as programs
import cpu_fuzz_rounding as rounding
import jax
import numpy as np
import pytest
import triton
from cpu_fuzz_programs import Expected, Program
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import jt_core as jt
from jt_core.testing.fixtures import CPU_PATH_SWITCHES

# Generated programs overflow, divide by zero and take logarithms of negatives on purpose, and shift int1 values by
# True (Triton warns of a shift by the type's width; both CPU paths give what LLVM folds it to, the docs say which).
pytestmark = [
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:Value True exceeds the maximum bitwidth:UserWarning"),
]


@dataclasses.dataclass(frozen=True)
class Known:
    """A known divergence: where it is described, what it is, which paths it touches, and how the fuzzer steps
    around it: ``avoid`` names what the generator leaves out, ``slack`` what the comparison allows, ``skip`` the
    kernels' features (`Program.features`) for which its paths are not run."""

    item: str
    what: str
    paths: tuple[str, ...]
    avoid: tuple[str, ...] = ()
    slack: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    before: tuple[int, int] | None = None  # only with a Triton older than this release (the cause is Triton's)
    since: tuple[int, int] | None = None  # only with this Triton release or newer


#: Divergences known and being fixed; the person who lands a fix deletes its entry, and the fuzzer then checks it.
KNOWN_DIVERGENCES: dict[str, Known] = {
    "subnormals_flushed": Known(
        "2. Subnormals flushed to zero",
        "the compiled path flushes float32/float64 (and bfloat16) subnormal operands and results to zero, as XLA's "
        "CPU threads run; the interpreter keeps them",
        ("compiled",),
        slack=("ftz",),
    ),
    "adding_a_zero_xla_proves": Known(
        "new: adding an integer XLA proves zero to -0.0 keeps -0.0 on the compiled path",
        "x + v with v an integer expression of values known when tracing that XLA folds to 0 (num_programs(1) "
        "bit-cast and converted, and-ed into v) is x for x = -0.0: XLA's simplifier drops the addition of the "
        "converted 0.0; a zero jt itself knows when tracing (a program id, a scalar argument) is hidden from it",
        ("compiled",),
        slack=("add_zero",),
    ),
    "minnum_propagates_nan_in_interpreter": Known(
        "new: tl.minimum, tl.maximum and tl.clamp propagate NaN in the interpreter (Triton 3.6)",
        "Triton 3.6's interpreter computes minnumf/maxnumf (propagate_nan=NONE, the default) with "
        "np.minimum/np.maximum and clampf with np.clip, so a NaN operand gives NaN where the compiled path and the "
        "GPU give the other operand",
        ("interpreter",),
        slack=("minnum_nan",),
        before=(3, 7),
    ),
}

PATHS = {"compiled": "compiled", "interpreter": "interpreter"}
#: Kernels per category in CI.
CI_EXAMPLES = {
    "elementwise": 26,
    "masked": 12,
    "reductions": 12,
    "scans": 8,
    "dot": 6,
    "shapes": 8,
    "control_flow": 10,
    "atomics": 12,
    "random_numbers": 6,
    "grids": 8,
    "roundings": 8,
    "int1_arithmetic": 8,
    "mapped": 6,
    "locks": 6,
}
#: Fresh data per kernel: the kernel is compiled once and run on each.
DATA_DRAWS = 3


TRITON = tuple(int(p) for p in triton.__version__.split(".")[:2])


def _active() -> list[Known]:
    """The known divergences of this Triton release."""
    return [
        k
        for k in KNOWN_DIVERGENCES.values()
        if (k.before is None or k.before > TRITON) and (k.since is None or k.since <= TRITON)
    ]


AVOID = frozenset(name for known in _active() for name in known.avoid)


def slack(path: str) -> frozenset[str]:
    return frozenset(name for known in _active() if path in known.paths for name in known.slack)


settings.register_profile(
    "jt-fuzz-ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile("jt-fuzz-long", settings.get_profile("jt-fuzz-ci"), derandomize=False)
LONG = "JT_FUZZ_SEED" in os.environ
PROFILE = settings.get_profile("jt-fuzz-long" if LONG else "jt-fuzz-ci")


def _examples(category: str) -> int:
    return int(os.environ.get("JT_FUZZ_EXAMPLES", CI_EXAMPLES[category]))


# -- running --------------------------------------------------------------------------------------------------------

_FOLDER = Path(tempfile.gettempdir()) / f"jt-cpu-fuzz-{os.getpid()}"
_KERNELS: dict[str, Any] = {}
_CALLS: dict[Any, Any] = {}
_HANDED_OVER: dict[Any, list[str]] = {}


def kernel_of(source: str) -> Any:
    """The kernel ``source`` defines, imported from a file (Triton reads a kernel's source from its file)."""
    if source not in _KERNELS:
        name = f"jt_cpu_fuzz_kernel_{len(_KERNELS)}"
        _FOLDER.mkdir(exist_ok=True)
        path = _FOLDER / f"{name}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _KERNELS[source] = module.kernel
    return _KERNELS[source]


class _HandOvers(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "cannot express" in message:
            self.messages.append(message)


def run(program: Program, arrays: list[np.ndarray], path: str) -> list[np.ndarray]:
    """The program's outputs on ``path`` (compiled once per program and path, then run on each data draw).

    Raises:
        AssertionError: When the compiled path hands the kernel to the interpreter: a fuzzer's kernel that the
            compiled path cannot express is a finding too.
    """
    key = (program.source, path, tuple((a.shape, a.dtype) for a in arrays), program.describe())
    call = _CALLS.get(key)
    if call is None:
        kernel = kernel_of(program.source)
        shapes = [jax.ShapeDtypeStruct(shape, t.np) for shape, t in program.outputs]
        scalars = list(program.scalars.values())

        def call(*operands: Any) -> Any:
            return jt.triton_call(
                *operands,
                *scalars,
                kernel=kernel,
                out_shape=shapes,
                grid=program.grid,
                input_output_aliases=program.aliases,
                launcher=PATHS[path],
                **program.options,
                **program.constexprs,
            )

        watch = _HandOvers()
        logger = logging.getLogger("jt_core.lowering")
        logger.addHandler(watch)
        level = logger.level
        logger.setLevel(logging.INFO)
        try:
            with jax.enable_x64(True):
                call = jax.jit(call).lower(*arrays).compile()  # the launcher is chosen (and says why) here
        finally:
            logger.removeHandler(watch)
            logger.setLevel(level)
        if len(_CALLS) > 256:
            _CALLS.clear()
        _CALLS[key] = call
        _HANDED_OVER[key] = watch.messages
    assert not _HANDED_OVER[key] or program.may_hand_over, (
        f"{program.category}: the compiled path handed the kernel to the interpreter: {_HANDED_OVER[key][0]}\n"
        f"call: {program.describe()}\nkernel:\n{program.source}"
    )
    with jax.enable_x64(True):
        results = [np.asarray(r) for r in jax.block_until_ready(call(*arrays))]
    return results


# -- comparing ------------------------------------------------------------------------------------------------------


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.itemsize > 1 else a.view("u1")


def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind == "f" or "float" in a.dtype.name


def _matches(got: np.ndarray, want: np.ndarray, err: np.ndarray) -> np.ndarray:
    err = np.broadcast_to(np.asarray(err, np.float64), got.shape)
    anything = np.isinf(err) | np.isnan(err)  # a bound of inf * 0 is unknown too
    if not _is_float(got):
        return (got == want.astype(got.dtype)) | anything
    same = _bits(got) == _bits(want.astype(got.dtype))
    g, w = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(invalid="ignore"):
        close = (err > 0) & ((g == w) | (np.abs(g - w) <= err))
    return same | (np.isnan(g) & np.isnan(w)) | close | anything


def wrong(got: np.ndarray, expected: Expected) -> np.ndarray:
    """Where ``got`` is none of the right answers."""
    assert expected.value is not None
    ok = _matches(got, expected.value, expected.err if expected.err is not None else np.zeros(got.shape))
    for value, err in expected.alternatives:
        ok |= _matches(got, value, err)
    return ~ok


def _show(a: np.ndarray, index: tuple[int, ...]) -> str:
    value = a[index]
    if _is_float(a):
        return f"{value!r} (0x{int(_bits(a)[index]):0{a.dtype.itemsize * 2}x})"
    return repr(value)


def report(program: Program, arrays: list[np.ndarray], path: str, index: int, got: np.ndarray, exp: Expected) -> str:
    """A finding: the kernel, the call, and the first elements of output ``index`` that differ on ``path``."""
    assert exp.value is not None
    bad = np.argwhere(wrong(got, exp))
    lines = [
        f"{program.category}: the {path} path differs from the reference on output {index} "
        f"({got.dtype}{list(got.shape)}) at {len(bad)} of {got.size} elements.",
        f"call: {program.describe()}",
    ]
    for where in bad[:8]:
        place = tuple(int(i) for i in where)
        err = np.broadcast_to(exp.err if exp.err is not None else 0.0, got.shape)[place]
        line = f"  [{', '.join(map(str, place))}] {path}: {_show(got, place)}  reference: {_show(exp.value, place)}"
        line += f" (allowed error {err:.3g})" if err else " (exact)"
        inputs = [f"arg{k}={_show(a, place)}" for k, a in enumerate(arrays) if a.shape == got.shape]
        lines.append(line + ("  inputs: " + ", ".join(inputs) if inputs else ""))
    lines.append("kernel:\n" + program.source)
    return "\n".join(lines)


def paths_for(program: Program) -> list[str]:
    """The paths ``program`` runs on: both, but where a known divergence keeps a path from running its features."""
    return [path for path in PATHS if not any(path in k.paths and set(k.skip) & program.features for k in _active())]


def check(program: Program, seeds: list[int]) -> None:
    """Runs ``program`` on both paths for each data seed and compares them with the reference."""
    for data_seed in seeds:
        instance = program.instance(data_seed)
        results = {path: run(program, [a.copy() for a in instance.arrays], path) for path in paths_for(program)}
        references = {path: instance.reference(slack(path)) for path in PATHS}
        for path, outputs in results.items():
            for index, (got, exp) in enumerate(zip(outputs, references[path], strict=True)):
                if exp.value is None:
                    other = results.get("interpreter" if path == "compiled" else "compiled", outputs)[index]
                    agree = (_bits(got) == _bits(other)) | (
                        np.isnan(got) & np.isnan(other) if _is_float(got) else False
                    )
                    assert agree.all(), report(program, instance.arrays, path, index, got, Expected(other))
                    continue
                if wrong(got, exp).any():
                    raise AssertionError(report(program, instance.arrays, path, index, got, exp))


@pytest.fixture(autouse=True, scope="module")
def both_paths_as_asked() -> Iterator[None]:
    """Each call runs on the path it names: the race check and the comparing mode would send the compiled calls
    to the interpreter or compare them again. The generated kernels' files are removed afterwards."""
    if os.environ.get("JT_CPU_DIFFERENTIAL"):
        pytest.skip("the fuzzer compares both paths itself: it runs in the pass without JT_CPU_DIFFERENTIAL")
    saved = {name: os.environ.pop(name) for name in list(os.environ) if name in CPU_PATH_SWITCHES}
    try:
        yield
    finally:
        os.environ.update(saved)
        _CALLS.clear()
        _HANDED_OVER.clear()
        for name in [n for n in sys.modules if n.startswith("jt_cpu_fuzz_kernel_")]:
            del sys.modules[name]
        _KERNELS.clear()
        shutil.rmtree(_FOLDER, ignore_errors=True)


STRATEGIES = {
    "elementwise": lambda: programs.elementwise(AVOID),
    "masked": lambda: programs.elementwise(AVOID, masked=True),
    "reductions": lambda: blocks.reductions(AVOID),
    "scans": lambda: blocks.scans(AVOID),
    "dot": lambda: blocks.dots(AVOID),
    "shapes": lambda: blocks.shape_ops(AVOID),
    "control_flow": lambda: control.control_flow(AVOID),
    "atomics": lambda: programs.atomics(AVOID),
    "random_numbers": lambda: programs.random_numbers(AVOID),
    "grids": lambda: programs.grids(AVOID),
    "roundings": lambda: rounding.roundings(AVOID),
    "int1_arithmetic": lambda: programs.elementwise(AVOID, int1=True),
    "mapped": lambda: mapped.mapped(AVOID),
    "locks": lambda: locks.locks(AVOID),
}


def _fuzz(category: str) -> Any:
    @settings(PROFILE, max_examples=_examples(category))
    @given(
        program=STRATEGIES[category](),
        seeds=st.lists(st.integers(0, 2**32 - 1), min_size=DATA_DRAWS, max_size=DATA_DRAWS),
    )
    def test(program: Program, seeds: list[int]) -> None:
        check(program, seeds)

    if LONG:
        test = seed(int(os.environ["JT_FUZZ_SEED"]))(test)
    test.__name__ = f"test_{category}_kernels_agree_with_the_reference_on_both_paths"
    return test


test_elementwise = _fuzz("elementwise")
test_masked = _fuzz("masked")
test_reductions = _fuzz("reductions")
test_scans = _fuzz("scans")
test_dot = _fuzz("dot")
test_shapes = _fuzz("shapes")
test_control_flow = _fuzz("control_flow")
test_atomics = _fuzz("atomics")
test_random_numbers = _fuzz("random_numbers")
test_grids = _fuzz("grids")
test_roundings = _fuzz("roundings")
test_int1_arithmetic = _fuzz("int1_arithmetic")
test_mapped = _fuzz("mapped")
test_locks = _fuzz("locks")
