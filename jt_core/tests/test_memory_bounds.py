"""What jt keeps in memory stays bounded in a long-running process, and ``jax.clear_caches()`` releases it without
breaking a computation that still needs it."""

from __future__ import annotations

import gc
import importlib.util
import re
import resource
import uuid
import weakref
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jt_core as jt
from jt_core import memory
from jt_core.cpu import ffi_launcher

RNG = np.random.default_rng(2024)


def made(x: Any, factor: int) -> np.ndarray:
    """What a `generated_kernel` gives: ``x * factor + 1`` rounded once (Triton fuses the product into the sum)."""
    return (np.asarray(x, np.float64) * factor + 1).astype(np.float32)


def generated_kernel(folder: Path, factor: int, token: str | None = None) -> Any:
    """A kernel made at run time, as a program that builds kernels does: ``out = x * factor + 1``, from a module
    of its own that nothing else holds (its file stays, for Triton to read the source). Kernels made with the same
    ``token`` and ``factor`` have the same source.

    Every module has one name, as a program that makes kernels in a loop gives them: Triton 3.9 enters the newest
    kernel of each module and name in its registry (``triton.runtime.jit._triton_jit_function_registry``), which
    ``jax.clear_caches()`` makes hold them weakly."""
    token = token or uuid.uuid4().hex
    name = "jt_generated_kernels"
    path = folder / f"{name}_{uuid.uuid4().hex}.py"
    path.write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def generated(x_ptr, n, out_ptr, BLOCK: tl.constexpr):\n"
        f"    # {token}\n"
        "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    mask = offsets < n\n"
        f"    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * {factor} + 1, mask=mask)\n"
    )
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generated


def call(kernel: Any, x: jax.Array, launcher: str | None = None) -> jax.Array:
    return jt.triton_call(x, x.size, kernel=kernel, out_shape=x, grid=blocks(x.size), BLOCK=16, launcher=launcher)


def blocks(n: int) -> int:
    return (n + 15) // 16


def store_sizes() -> dict[str, int]:
    return {**memory.sizes(), "CPU launcher calls": len(ffi_launcher.registry())}


@pytest.fixture(autouse=True)
def cleared() -> Any:
    jax.clear_caches()
    yield
    jax.clear_caches()


def test_dropped_generated_kernels_are_freed_by_clear_caches(tmp_path: Path) -> None:
    """Each kernel is called through jit, vmap and at two shapes; once the program drops it and clears JAX's
    caches, nothing of jt keeps it alive."""
    alive = []
    for factor in range(2, 12):
        kernel = generated_kernel(tmp_path, factor)
        for n in (16, 40):
            x = jnp.asarray(RNG.standard_normal(n).astype(np.float32))
            np.testing.assert_array_equal(jax.jit(lambda v, k=kernel: call(k, v))(x), made(x, factor))
        xs = jnp.asarray(RNG.standard_normal((3, 16)).astype(np.float32))
        np.testing.assert_array_equal(jax.vmap(lambda v, k=kernel: call(k, v))(xs), made(xs, factor))
        alive.append(weakref.ref(kernel))
        del kernel
    jax.clear_caches()
    gc.collect()
    assert [ref for ref in alive if ref() is not None] == []  # the last one too, which Triton's registry held
    assert all(size == 0 for size in store_sizes().values()), store_sizes()


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_triton_s_registry_still_finds_a_kernel_alive_after_clear_caches(tmp_path: Path, launcher: str) -> None:
    """Triton 3.9 resolves a ``JITFunction`` constant of preloaded specialization data by module and name; held
    weakly, its registry still does for a kernel the program keeps (Triton 3.6 has no registry), also after the
    interpreter read the kernel (it makes a ``JITFunction`` of its own of the function)."""
    from triton.runtime import jit

    if not hasattr(jit, "_triton_jit_function_registry"):
        pytest.skip("this Triton keeps no registry of jit functions")
    kernel = generated_kernel(tmp_path, 5)
    x = jnp.asarray(RNG.standard_normal(16).astype(np.float32))
    np.testing.assert_array_equal(call(kernel, x, launcher=launcher), made(x, 5))
    jax.clear_caches()
    gc.collect()
    assert jit._triton_jit_function_registry[f"{kernel.module}:{kernel.fn.__qualname__}"] is kernel
    later = generated_kernel(tmp_path, 6)  # made after: entered in the registry as before
    assert jit._triton_jit_function_registry[f"{later.module}:{later.fn.__qualname__}"] is later


def test_stores_keep_at_most_the_configured_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(memory.ENTRIES_VARIABLE, "4")
    kernels = [generated_kernel(tmp_path, factor) for factor in range(2, 12)]
    x = jnp.asarray(RNG.standard_normal((2, 16)).astype(np.float32))
    for factor, kernel in zip(range(2, 12), kernels):
        # In the interpreter, which rewrites each kernel (the compiled path rewrites none).
        out = jax.vmap(lambda v, k=kernel: call(k, v, launcher="interpreter"))(x)
        np.testing.assert_array_equal(out, made(x, factor))
    sizes = memory.sizes()
    assert sizes["compiled kernel variants"] == 4 and sizes["generated vmap wrappers"] == 4, sizes
    assert sizes["kernels rewritten for the interpreter"] == 4, sizes
    # What was evicted is made again: the first kernel still gives the right result.
    np.testing.assert_array_equal(jax.vmap(lambda v: call(kernels[0], v) + 0)(x), made(x, 2))


def test_a_bad_entries_bound_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(memory.ENTRIES_VARIABLE, "-1")
    with pytest.raises(ValueError, match="JT_MEMORY_CACHE_ENTRIES must be 0 or more, got -1"):
        memory.entries_limit()
    monkeypatch.setenv(memory.ENTRIES_VARIABLE, "many")
    with pytest.raises(ValueError, match="JT_MEMORY_CACHE_ENTRIES must be a whole number, got 'many'"):
        memory.entries_limit()


def test_an_executable_kept_past_clear_caches_says_to_lower_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the interpreter's FFI handler, whose calls the process-wide registry holds (the compiled path's needs
    it only to name a stray access: its kept executables keep running, next test)."""
    monkeypatch.setenv("JT_LAUNCHER_CPU", "ffi")
    kernel = generated_kernel(tmp_path, 3)
    x = jnp.asarray(RNG.standard_normal(32).astype(np.float32))
    f = jax.jit(lambda v: call(kernel, v))
    compiled = f.lower(x).compile()
    np.testing.assert_array_equal(compiled(x), made(x, 3))
    jax.clear_caches()
    assert len(ffi_launcher.registry()) == 0
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"released by jax\.clear_caches\(\).*lower the computation"):
        jax.block_until_ready(compiled(x))
    # Lowering again registers the call again, under the same id, and the kept executable runs again too.
    np.testing.assert_array_equal(f(x), made(x, 3))
    np.testing.assert_array_equal(compiled(x), made(x, 3))


def test_a_computation_running_when_caches_are_cleared_finishes(tmp_path: Path) -> None:
    """CPU computations run asynchronously: the kernel of one dispatched just before ``jax.clear_caches()`` runs
    after it returns. Its call is released only once it has finished."""
    kernel_input = jnp.ones((1500, 1500), jnp.float32)
    kernel = generated_kernel(tmp_path, 2)

    @jax.jit
    def slow_then_kernel(m: jax.Array) -> jax.Array:
        row = (m @ m @ m @ m)[0, :32] / 1500.0**3
        return jt.triton_call(row, 32, kernel=kernel, out_shape=row, grid=2, BLOCK=16)

    expected = np.full(32, 2.0 + 1.0, np.float32)
    np.testing.assert_allclose(slow_then_kernel(kernel_input), expected, rtol=1e-5)
    pending = slow_then_kernel(kernel_input)
    jax.clear_caches()
    np.testing.assert_allclose(pending, expected, rtol=1e-5)


def test_an_executable_of_the_compiled_path_kept_past_clear_caches_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JT_LAUNCHER_CPU", raising=False)
    monkeypatch.delenv("JT_CPU_RACE_CHECK", raising=False)
    # Compared with the interpreter (JT_CPU_DIFFERENTIAL=1), the call runs the interpreter's registered twin too.
    monkeypatch.delenv("JT_CPU_DIFFERENTIAL", raising=False)
    kernel = generated_kernel(tmp_path, 3)
    x = jnp.asarray(RNG.standard_normal(32).astype(np.float32))
    compiled = jax.jit(lambda v: call(kernel, v, "compiled")).lower(x).compile()
    jax.clear_caches()
    np.testing.assert_array_equal(compiled(x), made(x, 3))


def test_a_released_id_never_goes_to_another_kernel_with_the_same_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JT_LAUNCHER_CPU", "ffi")
    token = uuid.uuid4().hex
    first, second = generated_kernel(tmp_path, 4, token), generated_kernel(tmp_path, 4, token)
    x = jnp.asarray(RNG.standard_normal(16).astype(np.float32))

    def call_id(kernel: Any) -> int:
        # One id per call (the compiled path's check and, with JT_CPU_DIFFERENTIAL=1, the interpreter's call share it)
        (found,) = set(re.findall(r"call_id = (\d+) : i64", jax.jit(lambda v: call(kernel, v)).lower(x).as_text()))
        return int(found)

    kept = jax.jit(lambda v: call(first, v)).lower(x).compile()
    before = call_id(first)
    jax.clear_caches()
    assert call_id(second) != before  # the same content, another kernel object: it must not take the id
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"released by jax\.clear_caches"):
        jax.block_until_ready(kept(x))
    assert call_id(first) == before  # the same kernel object gets its id back


def test_a_long_run_keeps_every_store_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A program that makes new kernels and sees new shapes all the time (a scaled-down ``benchmarks/memory_soak.py``):
    between two ``jax.clear_caches()`` the stores hold no more than the bound, and after each nothing of the
    dropped kernels is left."""
    bound = 12
    monkeypatch.setenv(memory.ENTRIES_VARIABLE, str(bound))
    calls, shapes, kernels, clear_every = 120, 15, 8, 40
    per_kernel = calls // kernels
    dropped: list[weakref.ReferenceType[Any]] = []
    largest: dict[str, int] = {}
    lowered_since_clear: set[tuple[int, int]] = set()
    rss_before = 0
    kernel = None
    per_lowering = 0  # registered entries per lowered call: 1, or 3 under JT_CPU_DIFFERENTIAL=1 with the race check
    for i in range(calls):
        if i % per_kernel == 0:
            if kernel is not None:
                dropped.append(weakref.ref(kernel))
            kernel = generated_kernel(tmp_path, 2 + (i // per_kernel) % 5)
            f = jax.jit(lambda v, k=kernel: call(k, v))
        n = 16 + (i * 7) % shapes
        x = jnp.full((n,), float(i % 3), jnp.float32)
        out = f(x)
        lowered_since_clear.add((i // per_kernel, n))
        if i % 50 == 0:
            np.testing.assert_allclose(out, (i % 3) * (2 + (i // per_kernel) % 5) + 1.0, rtol=1e-6)
        sizes = store_sizes()
        per_lowering = per_lowering or sizes["CPU launcher calls"]
        for name, size in sizes.items():
            largest[name] = max(largest.get(name, 0), size)
        assert sizes["CPU launcher calls"] <= per_lowering * len(lowered_since_clear)
        if (i + 1) % clear_every == 0:
            jax.clear_caches()
            gc.collect()
            lowered_since_clear.clear()
            assert [ref for ref in dropped if ref() is not None] == []
            if i + 1 == clear_every:
                rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert all(size <= bound for name, size in largest.items() if name != "CPU launcher calls"), largest
    assert 1 <= per_lowering <= 3 and largest["CPU launcher calls"] <= per_lowering * clear_every, largest
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert grown_kb < 200 * 1024, f"peak RSS grew by {grown_kb} KB over the run"


def test_an_entry_goes_with_its_kernel() -> None:
    """A store holds its kernels weakly: once nothing else holds a kernel, its entries leave every store."""
    from jt_core import cache

    class Kernel:
        """Stands for a kernel object."""

    kernel = Kernel()
    variants = [cache.memoized(kernel, ("variant", n), lambda n=n: f"compiled {n}") for n in range(3)]
    assert variants == ["compiled 0", "compiled 1", "compiled 2"] and cache.compiled_count(kernel) == 3
    before = memory.sizes()["compiled kernel variants"]
    del kernel
    gc.collect()
    assert memory.sizes()["compiled kernel variants"] == before - 3
