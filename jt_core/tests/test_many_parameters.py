"""A call's cost grows linearly with the kernel's parameters: binding, the CPU backend's compile (the rewrite for the
interpreter and Triton's front end as a check) and the run, counted in Python operations (function calls, those of
C functions included), which do not depend on the machine's load. The front end that jt runs in linear time builds
the IR Triton's own builds, and refuses what it refuses."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import core_kernels as k
import jax
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core import frontend
from jt_core.call import CallOptions, KernelCall
from jt_core.cpu.backend import CpuBackend
from jt_core.interpreter.execute import execute
from jt_core.plugin import facade
from jt_core.plugin.roles import Backend, CompileRequest
from jt_core.plugin.values import CompiledKernel, Target
from jt_core.testing._calls import bind, compile_request

F32_4 = jax.ShapeDtypeStruct((4,), np.float32)


def _copy_kernel(outputs: int, folder: Path) -> Any:
    """A kernel copying its input into each of ``outputs`` output pointers (Triton reads a kernel's source from
    its file, so the generated kernel gets a module of its own)."""
    names = ", ".join(f"out{i}" for i in range(outputs))
    stores = "".join(f"    tl.store(out{i} + offsets, x + {i})\n" for i in range(outputs))
    path = folder / f"copies_{outputs}.py"
    path.write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        f"def copies_kernel(x_ptr, {names}, BLOCK: tl.constexpr):\n"
        "    offsets = tl.arange(0, BLOCK)\n    x = tl.load(x_ptr + offsets)\n" + stores
    )
    spec = importlib.util.spec_from_file_location(f"copies_{outputs}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.copies_kernel


def _operations(work: Callable[[], Any]) -> tuple[int, Any]:
    """How many calls ``work`` makes (Python functions and C functions alike), and its result."""
    count = 0

    def tally(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        count += 1

    previous = sys.getprofile()
    sys.setprofile(tally)
    try:
        result = work()
    finally:
        sys.setprofile(previous)
    return count, result


def _call_operations(outputs: int, folder: Path) -> int:
    """The operations of binding, compiling (with the front end's check) and running a call with ``outputs``
    outputs; checks the results against the kernel's meaning."""
    kernel = _copy_kernel(outputs, folder)
    x = np.random.default_rng(outputs).standard_normal(4).astype(np.float32)
    bound, call = _operations(lambda: bind(kernel, (F32_4,), {"BLOCK": 4}, CallOptions([F32_4] * outputs, grid=1)))
    hashed, _ = _operations(lambda: hash(call))  # JAX's caches hash the call
    backend = CpuBackend()
    compiled_count, compiled = _operations(lambda: backend.compile(compile_request(backend, call)))
    ran, results = _operations(lambda: execute(call, compiled, [x]))
    for i, out in enumerate(results):
        np.testing.assert_array_equal(out, x + np.float32(i))
    return bound + hashed + compiled_count + ran


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_call_costs_operations_linear_in_its_outputs(tmp_path: Path) -> None:
    _call_operations(4, tmp_path)  # first uses (imports, caches) out of the way
    small, large = _call_operations(500, tmp_path), _call_operations(2000, tmp_path)
    # Linear growth gives four times the operations for four times the outputs (a little less: the fixed part);
    # each part that walks every parameter for each parameter gives sixteen times its share.
    assert large < 4.5 * small, f"500 outputs: {small} operations, 2000 outputs: {large} ({large / small:.1f}x)"


def _lowering_operations(outputs: int, folder: Path) -> int:
    """The operations of lowering, for the CPU's compiled path, a call with ``outputs`` outputs (binding, Triton's
    front end, tracing the kernel into JAX operations, their lowering); checks that the module writes each output."""
    kernel = _copy_kernel(outputs, folder)

    def f(x: jax.Array) -> Any:
        return jt.triton_call(x, kernel=kernel, out_shape=[x] * outputs, grid=1, BLOCK=4, launcher="compiled")

    count, lowered = _operations(lambda: jax.jit(f).trace(F32_4).lower(lowering_platforms=("cpu",)))
    text = lowered.as_text()  # each output is its store's values: no scatter, no check
    assert text.count("stablehlo.add") == outputs and "scatter" not in text
    assert "stablehlo.custom_call" not in text
    return count


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.usefixtures("jt_cpu_paths_by_name")  # the compiled path, as by default
def test_lowering_a_call_costs_operations_linear_in_its_outputs(tmp_path: Path) -> None:
    _lowering_operations(4, tmp_path)
    small, large = _lowering_operations(250, tmp_path), _lowering_operations(1000, tmp_path)
    assert large < 4.5 * small, f"250 outputs: {small} operations, 1000 outputs: {large} ({large / small:.1f}x)"


@triton.jit
def _pieces_kernel(x_ptr, out_ptr, whole_ptr, BLOCK: tl.constexpr):
    lanes = tl.arange(0, BLOCK)
    head = tl.load(x_ptr + lanes)
    tail = tl.load(x_ptr + 3 * BLOCK + lanes)
    tl.store(out_ptr + BLOCK + lanes, head * 2)
    tl.store(out_ptr + 2 * BLOCK + lanes, tail - 1)
    tl.store(whole_ptr + lanes, head + tail)


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_accesses_to_places_known_when_traced_read_and_write_those_places(
    launcher: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loads and stores of consecutive elements at offsets known when the kernel is traced (the compiled path
    slices and updates the buffers there, without run-time checks): a part of a buffer, or all of it."""
    monkeypatch.delenv("JT_LAUNCHER_CPU", raising=False)
    x = np.random.default_rng(11).standard_normal(64).astype(np.float32)

    def pieces(v: jax.Array) -> Any:
        out = jax.ShapeDtypeStruct((64,), np.float32)
        whole = jax.ShapeDtypeStruct((16,), np.float32)
        return jt.triton_call(
            v, kernel=_pieces_kernel, out_shape=[out, whole], zeroed_outputs=[0], grid=1, BLOCK=16, launcher=launcher
        )

    out, whole = (np.asarray(a) for a in jax.jit(pieces)(x))
    want = np.zeros(64, np.float32)
    want[16:32], want[32:48] = x[:16] * 2, x[48:] - 1
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(whole, x[:16] + x[48:])


class _GpuFrontEndBackend(Backend):
    """Compiles as a GPU backend's ``triton.compile`` starts: Triton's front end for a CUDA target, the arguments'
    attributes (divisibility hints) included, which the CPU backend's front end leaves out."""

    platform = "frontend-only"

    def target(self) -> Target:
        return Target("frontend-only", "sm90", 32)

    def compile(self, request: CompileRequest) -> CompiledKernel:
        from triton._C.libtriton import ir
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend

        source = request.dialect.make_source(request.kernel, request.specialization, request.target)
        target = GPUTarget("cuda", 90, 32)
        backend = make_backend(target)
        options = backend.parse_options({"enable_fp_fusion": True})
        context = ir.context()
        ir.load_dialects(context)
        backend.load_dialects(context)
        codegen = backend.get_codegen_implementation(options)
        module = source.make_ir(target, options, codegen, backend.get_module_map(), context)
        stores = str(module).count("tt.store")
        metadata = {"stores": stores, "attributed": len(source.attrs)}
        return CompiledKernel(name=request.call.name, target=request.target, metadata=metadata)


def _gpu_compile_operations(outputs: int, folder: Path) -> int:
    """The operations of a compile through jt (`jt_core.plugin.facade.compile_kernel`) by a backend that runs
    Triton's front end as GPU backends do; checks that the IR holds one store per output."""
    kernel = _copy_kernel(outputs, folder)
    call = bind(kernel, (F32_4,), {"BLOCK": 4}, CallOptions([F32_4] * outputs, grid=1))
    count, compiled = _operations(lambda: facade.compile_kernel(compile_request(_GpuFrontEndBackend(), call)))
    assert compiled.metadata["stores"] == outputs
    assert compiled.metadata["attributed"] == outputs + 1  # every pointer's divisibility hint
    return count


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_gpu_compile_runs_tritons_front_end_in_operations_linear_in_the_outputs(tmp_path: Path) -> None:
    _gpu_compile_operations(4, tmp_path)
    small, large = _gpu_compile_operations(500, tmp_path), _gpu_compile_operations(2000, tmp_path)
    # Triton's own front end walks every parameter for each parameter (sixteen times the operations for four
    # times the outputs); the stand-ins jt puts in place for every compile keep it at four.
    assert large < 4.5 * small, f"500 outputs: {small} operations, 2000 outputs: {large} ({large / small:.1f}x)"


@triton.jit(do_not_specialize=["BLOCK"])
def _unspecialized_constexpr_kernel(out_ptr, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), 1.0)


def _ir(call: KernelCall, linear: bool, around: tuple[Any, str, Callable[..., Any]] | None = None) -> str:
    """The Triton IR of ``call``'s first configuration, built by Triton's front end as installed or as jt runs it;
    ``around=(owner, name, wrap, _)`` wraps ``owner.name`` (as it is while the front end runs) with ``wrap``."""
    from triton._C.libtriton import ir

    source = call.dialect.make_source(call.fn, call.specialization(call.configs[0]), None)
    target, backend, options, codegen = frontend._backend()
    stand_ins = frontend.linear_front_end(source.fn) if linear else contextlib.nullcontext()
    with frontend.compiling(), frontend._lock, stand_ins:
        if around is not None:
            owner, name, wrap = around
            running = owner.__dict__[name]
            setattr(owner, name, wrap(running))
        try:
            context = ir.context()
            ir.load_dialects(context)
            backend.load_dialects(context)
            return str(source.make_ir(target, options, codegen, backend.get_module_map(), context))
        finally:
            if around is not None:
                setattr(owner, name, running)


def _calls(folder: Path) -> list[KernelCall]:
    f32 = jax.ShapeDtypeStruct((64,), np.float32)
    outputs = CallOptions([F32_4] * 50, grid=1)
    return [
        bind(_copy_kernel(50, folder), (F32_4,), {"BLOCK": 4}, outputs),
        bind(k.pair_kernel, ((f32, f32),), {"n": 64, "BLOCK": 32}, CallOptions(f32, grid=2)),
        bind(
            k.nested_pair_kernel,
            (((f32, f32), f32),),
            {"n": 64, "SCALES": (2.0, -0.5), "BLOCK": 32},
            CallOptions(f32, grid=2),
        ),
    ]


def test_the_linear_front_end_builds_the_ir_tritons_builds(tmp_path: Path) -> None:
    assert len(frontend._stand_ins()) == 3 and frontend._indexes_arg_names()  # the installed Triton's are known
    for call in _calls(tmp_path):
        assert _ir(call, linear=True) == _ir(call, linear=False), call.name


def test_the_arguments_get_the_types_tritons_gives(tmp_path: Path) -> None:
    from triton.compiler import code_generator
    from triton.language import core

    def types(value: Any) -> list[str]:
        inner = [text for item in value.values if isinstance(item, core.tuple) for text in types(item)]
        return [str(value.type), *inner]

    def recording(into: list[list[str]]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def wrap(building: Callable[..., Any]) -> Callable[..., Any]:
            def deserialize(self: Any, fn: Any) -> Any:
                values = building(self, fn)
                into.append(types(values))
                return values

            return deserialize

        return wrap

    linear: list[list[str]] = []
    tritons: list[list[str]] = []
    for call in _calls(tmp_path):
        _ir(call, True, around=(code_generator.ASTFunction, "deserialize", recording(linear)))
        _ir(call, False, around=(code_generator.ASTFunction, "deserialize", recording(tritons)))
    assert linear == tritons and len(linear) == 4  # the three kernels, and the helper the nested one calls


def test_the_linear_front_end_refuses_what_tritons_refuses() -> None:
    call = bind(_unspecialized_constexpr_kernel, (), {"BLOCK": 4}, CallOptions(F32_4, grid=1))
    refusals = []
    for linear in (True, False):
        with pytest.raises(triton.CompilationError) as refused:
            _ir(call, linear)
        refusals.append(str(refused.value))
    assert refusals[0] == refusals[1] and "marked as constexpr and listed in do_not_specialize" in refusals[0]
