"""First calls from many threads at once: compiles, front-end checks and interpreter runs never disturb each other.

Triton's interpreter patches ``triton.language`` for the whole process while it runs, and Triton's front end reads
the same functions; without one lock over both, a compile beside a run fails with errors such as
"'block_argument' object has no attribute 'dtype'". Each test repeats its race several times with fresh kernels,
so that an unprotected path shows.
"""

from __future__ import annotations

import ast
import pathlib
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core import _compat, cache, frontend
from jt_core.cpu.backend import CpuBackend
from jt_core.plugin.roles import CompileRequest
from jt_core.plugin.values import CompiledKernel
from jt_core.testing import BackendConformance
from jt_core.testing._concurrency import distinct_kernels, run_threads

THREADS = 8
ROUNDS = 3


@pytest.fixture(autouse=True)
def private_cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "cache"))
    cache.clear_memory()


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_first_calls_of_distinct_kernels_from_many_threads(tmp_path: pathlib.Path, round_: int) -> None:
    kernels = distinct_kernels(tmp_path, f"first{round_}", THREADS)
    x = jnp.asarray(np.random.default_rng(round_).standard_normal(40), dtype=jnp.float32)

    def work(i: int) -> None:
        for block in (16, 32):
            out = jt.triton_call(x, x.size, kernel=kernels[i], out_shape=x, grid=(jt.cdiv(x.size, block),), BLOCK=block)
            np.testing.assert_allclose(np.asarray(out), _expected(x, i), rtol=1e-6, atol=1e-6)

    assert run_threads(work, THREADS) == []


def _expected(x: jax.Array, i: int) -> np.ndarray:
    """What kernel ``i`` of distinct_kernels computes, in float64 (the compiled CPU path fuses the multiply-add, as
    GPUs do, so near zero the float32 results differ from NumPy's unfused ones by more than rtol alone allows)."""
    return np.asarray(x, np.float64) * (i + 2) + 1


def test_interpreter_runs_beside_front_end_checks(tmp_path: pathlib.Path) -> None:
    """One thread keeps running a kernel on the interpreter while the others make first calls (each a front-end
    check at lowering, then a run)."""
    runner_kernel, *kernels = distinct_kernels(tmp_path, "beside", THREADS)
    x = jnp.asarray(np.random.default_rng(7).standard_normal(64), dtype=jnp.float32)
    run_runner = jax.jit(lambda v: jt.triton_call(v, v.size, kernel=runner_kernel, out_shape=v, grid=(4,), BLOCK=16))
    run_runner(x).block_until_ready()  # compiled beforehand, so that its runs overlap the first calls from the start
    stop = threading.Event()

    def work(i: int) -> None:
        if i == 0:
            while not stop.is_set():
                np.testing.assert_allclose(np.asarray(run_runner(x)), _expected(x, 0), rtol=1e-6, atol=1e-6)
            return
        try:
            out = jt.triton_call(x, x.size, kernel=kernels[i - 1], out_shape=x, grid=(4,), BLOCK=16)
            np.testing.assert_allclose(np.asarray(out), _expected(x, i), rtol=1e-6, atol=1e-6)
        finally:
            if i == THREADS - 1:
                stop.set()

    assert run_threads(work, THREADS) == []


def test_compiles_share_the_front_end_and_interpreter_runs_exclude_them() -> None:
    """The lock itself: compiles overlap each other; an interpreter run waits for them and they wait for it."""
    inside = []
    events = []
    both_in = threading.Barrier(2, timeout=10)

    def compile_(i: int) -> None:
        with frontend.compiling():
            inside.append(i)
            both_in.wait()  # both compiles hold the shared side at once
            events.append("compile")

    failures = run_threads(compile_, 2)
    assert failures == [] and sorted(inside) == [0, 1]

    order: list[str] = []
    started = threading.Event()

    def interpret() -> None:
        with frontend.interpreting():
            started.set()
            order.append("run start")
            threading.Event().wait(0.2)
            order.append("run end")

    thread = threading.Thread(target=interpret)
    thread.start()
    started.wait(5)
    with frontend.compiling():
        order.append("compile")
    thread.join()
    assert order == ["run start", "run end", "compile"]


def test_interpreter_started_inside_a_compile_on_one_thread_is_refused() -> None:
    with frontend.compiling(), pytest.raises(RuntimeError, match="cannot overlap"), frontend.interpreting():
        pass


class _LockRecordingBackend(CpuBackend):
    """Records, at each compile, whether the compiling thread holds the front end's side of the lock (an
    interpreter run started on the same thread is then refused)."""

    held: list[bool]

    def compile(self, request: CompileRequest) -> CompiledKernel:
        try:
            with frontend.interpreting():
                self.held.append(False)
        except RuntimeError:
            self.held.append(True)
        return super().compile(request)


def test_conformance_suite_compiles_under_the_front_end_lock() -> None:
    backend = _LockRecordingBackend()
    backend.held = []
    BackendConformance().test_compiles_sample_kernel(backend)
    assert backend.held == [True]


LIBDEVICE_KERNEL = """
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def squared(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    tl.store(out_ptr + offsets, libdevice.pow(tl.load(x_ptr + offsets, mask=inside), 2.0), mask=inside)
"""


def test_a_first_call_waits_for_an_interpreter_run_that_patches_libdevice(tmp_path: pathlib.Path) -> None:
    """Triton's key of a kernel reads ``libdevice.pow`` from its module, which an interpreter run on another thread
    replaces while it runs (an earlier call's host callback, still running): binding a new kernel then waits for
    the run to end rather than fail with "Unsupported function referenced"."""
    import importlib.util

    from jt_core.interpreter import runner

    path = tmp_path / "libdevice_kernel.py"
    path.write_text(LIBDEVICE_KERNEL)
    spec = importlib.util.spec_from_file_location("libdevice_kernel", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    patched, release = threading.Event(), threading.Event()

    def run_patched() -> None:
        with frontend.interpreting(), runner._patched(None, None, False):
            patched.set()
            release.wait(timeout=30)

    holder = threading.Thread(target=run_patched)
    holder.start()
    assert patched.wait(timeout=30)
    threading.Timer(0.3, release.set).start()
    x = jnp.asarray(np.random.default_rng(3).standard_normal(40), dtype=jnp.float32)
    out = jt.triton_call(x, x.size, kernel=module.squared, out_shape=x, grid=(1,), BLOCK=64)
    holder.join()
    np.testing.assert_allclose(np.asarray(out), np.asarray(x) ** 2, rtol=1e-6)


@triton.jit
def _parsed_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.arange(0, BLOCK))


def test_tritons_parse_of_a_kernel_runs_one_at_a_time_once_a_compile_ran() -> None:
    """Two threads parsing Python at once fail on CPython 3.11 ("AST constructor recursion depth mismatch"), as the
    configurations of an autotuned kernel compiled side by side did: once a compile has begun, Triton's parse of a
    kernel waits for any other parse (`jt_core._compat.parse_python` holds the same lock)."""
    with frontend.compiling():
        pass
    finished = threading.Event()

    def parse() -> None:
        _parsed_kernel.parse()
        finished.set()

    with _compat._AST_LOCK:
        thread = threading.Thread(target=parse)
        thread.start()
        assert not finished.wait(0.3), "Triton's parse ran while another parse held the lock"
    thread.join(10)
    assert finished.is_set()
    assert isinstance(_compat.parse_python("x = 1"), ast.Module)
