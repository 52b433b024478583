"""The ``ffi`` CPU launcher: jt's XLA FFI handler running the interpreter without a JAX host callback."""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import core_kernels as k
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jt_core as jt
from jt_core.cpu import ffi_launcher
from jt_core.cpu.ffi_launcher import TARGET_NAME, CpuFfiLauncher
from jt_core.plugin import facade
from jt_core.testing import LauncherConformance, accumulate_kernel, run_cases, scale_inplace_kernel

BEHAVIOUR = Path(__file__).with_name("test_call_behaviour.py")
RNG = np.random.default_rng(4321)


def rand(n: int) -> jax.Array:
    return jnp.asarray(RNG.standard_normal(n).astype(np.float32))


def scale(x: jax.Array, factor: float, **kwargs: Any) -> jax.Array:
    return jt.triton_call(
        x, kernel=k.scale_kernel, out_shape=x, grid=2, n=x.size, factor=factor, BLOCK=16, launcher="ffi", **kwargs
    )


def call_ids(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"call_id = (\d+) : i64", text)]


class TestCpuFfiLauncherConformance(LauncherConformance):
    expected_in_lowering = TARGET_NAME

    @pytest.fixture
    def launcher(self) -> CpuFfiLauncher:
        return CpuFfiLauncher()


def test_the_compiled_launcher_comes_first_and_the_ffi_launcher_next_when_their_library_builds() -> None:
    assert CpuFfiLauncher().unavailable_reason() is None
    assert facade.launcher_for("cpu", "ffi").name == "ffi"
    if "JT_LAUNCHER_CPU" not in os.environ:
        assert facade.launcher_for("cpu").name == "compiled"
        assert facade.next_launcher("cpu", facade.launcher_for("cpu")).name == "ffi"
    assert ffi_launcher.source_path().is_file()


@pytest.mark.parametrize("launcher", ["compiled", "ffi", "interpreter"])
def test_call_behaviour_suite_passes_with_each_cpu_launcher(launcher: str) -> None:
    run_cases(BEHAVIOUR, passed=60, environ={"JT_LAUNCHER_CPU": launcher})


def test_lowered_call_is_the_ffi_custom_call_with_an_id_and_name() -> None:
    x = jax.ShapeDtypeStruct((20,), jnp.float32)
    text = jax.jit(lambda x: scale(x, 2.0, name="my_scale")).lower(x).as_text()
    assert f"stablehlo.custom_call @{TARGET_NAME}" in text
    assert 'name = "my_scale"' in text
    assert len(call_ids(text)) == 1
    assert "pure_callback" not in text and "xla_python_cpu_callback" not in text


def test_out_of_bounds_access_is_a_clean_runtime_error_naming_the_kernel() -> None:
    x = rand(10)
    f = jax.jit(
        lambda x: jt.triton_call(
            x,
            kernel=k.oob_load_kernel,
            out_shape=jax.ShapeDtypeStruct((16,), jnp.float32),
            grid=1,
            BLOCK=16,
            launcher="ffi",
        )
    )
    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        jax.block_until_ready(f(x))
    message = str(info.value)
    assert "OUT_OF_RANGE" in message
    assert "OutOfBoundsAccessError: kernel 'oob_load_kernel'" in message and "argument 'x_ptr'" in message
    # The process and the launcher carry on.
    y = rand(20)
    np.testing.assert_allclose(jax.jit(lambda y: scale(y, 3.0))(y), np.asarray(y) * 3.0, rtol=1e-6)


def test_error_inside_kernel_is_an_internal_error_naming_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CPU_COMPILE_CHECK", "0")  # Triton's front end would refuse the kernel at lowering
    x = rand(16)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"INTERNAL: KernelRuntimeError: kernel 'shape_error_kernel'"):
        jax.block_until_ready(
            jt.triton_call(x, kernel=k.shape_error_kernel, out_shape=x, grid=1, BLOCK=16, launcher="ffi")
        )


@pytest.mark.parametrize("effect", [True, False])
def test_has_side_effect_keeps_the_custom_call(effect: bool) -> None:
    x = rand(16)

    def f(x: jax.Array) -> jax.Array:
        jt.triton_call(
            x, kernel=k.copy_kernel, out_shape=x, grid=1, n=16, BLOCK=16, has_side_effect=effect, launcher="ffi"
        )
        return x + 1

    lowered = jax.jit(f).lower(x)
    text = lowered.as_text()
    if effect:
        assert re.search(rf"custom_call @{TARGET_NAME}\(.*has_side_effect = true", text), text
        assert TARGET_NAME in lowered.compile().as_text()  # XLA keeps it too
    else:
        assert TARGET_NAME not in text
    np.testing.assert_allclose(jax.jit(f)(x), np.asarray(x) + 1, rtol=1e-6)


def test_aliased_ref_and_zeroed_outputs_write_into_xla_buffers() -> None:
    x = rand(64)

    @jax.jit
    def f(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        ref = jax.new_ref(x)
        jt.triton_call(ref, 64, 2.0, kernel=scale_inplace_kernel, out_shape=(), grid=4, BLOCK=16, launcher="ffi")
        total = jt.triton_call(
            ref,
            kernel=accumulate_kernel,
            out_shape=jax.ShapeDtypeStruct((1,), jnp.float32),
            grid=4,
            n=64,
            BLOCK=16,
            zeroed_outputs=(0,),
            launcher="ffi",
        )
        return ref[...], total

    scaled, total = f(x)
    np.testing.assert_allclose(scaled, np.asarray(x) * 2.0, rtol=1e-6)
    np.testing.assert_allclose(total[0], (np.asarray(x) * 2.0).sum(), rtol=1e-4, atol=1e-4)


def test_registry_id_is_deterministic_for_the_same_call_content() -> None:
    x = jax.ShapeDtypeStruct((20,), jnp.float32)
    first = call_ids(jax.jit(lambda x: scale(x, 2.0)).lower(x).as_text())
    again = call_ids(jax.jit(lambda x: scale(x, 2.0)).lower(x).as_text())
    other = call_ids(jax.jit(lambda x: scale(x, 3.0)).lower(x).as_text())
    negative_zero = call_ids(jax.jit(lambda x: scale(x, -0.0)).lower(x).as_text())
    zero = call_ids(jax.jit(lambda x: scale(x, 0.0)).lower(x).as_text())
    assert first == again
    assert len({first[0], other[0], negative_zero[0], zero[0]}) == 4
    entry = ffi_launcher.registry().get(first[0])
    assert entry is not None and entry.call.name == "scale_kernel"


def test_registry_gives_one_id_per_content_across_threads() -> None:
    x = jax.ShapeDtypeStruct((20,), jnp.float32)
    factors = [1.5 + (i % 4) for i in range(16)]

    def lower(factor: float) -> int:
        return call_ids(jax.jit(lambda x: scale(x, factor)).lower(x).as_text())[0]

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(lower, factors))
    by_factor: dict[float, set[int]] = {}
    for factor, call_id in zip(factors, ids):
        by_factor.setdefault(factor, set()).add(call_id)
    assert all(len(s) == 1 for s in by_factor.values())
    assert len({next(iter(s)) for s in by_factor.values()}) == 4


def test_concurrent_calls_from_threads_run_their_own_kernels() -> None:
    functions = {factor: jax.jit(lambda x, f=factor: scale(x, f)) for factor in (2.0, -1.0, 0.5)}
    jobs = [(factor, rand(20)) for factor in functions for _ in range(6)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda job: np.asarray(functions[job[0]](job[1])), jobs))
    for (factor, x), out in zip(jobs, results):
        np.testing.assert_allclose(out, np.asarray(x) * factor, rtol=1e-6)


def test_dispatcher_reports_errors_instead_of_raising() -> None:
    message = ctypes.create_string_buffer(256)
    pointers = (ctypes.c_void_p * 1)()
    sizes = (ctypes.c_int64 * 1)()
    unknown = 10**12
    code = ffi_launcher._dispatcher(unknown, 0, pointers, sizes, 0, pointers, sizes, ctypes.addressof(message), 256)
    assert code == 13  # INTERNAL
    assert message.value.startswith(b"LookupError: jt CPU launcher: no triton_call is registered under id")
    tiny = ctypes.create_string_buffer(8)
    assert ffi_launcher._dispatcher(unknown, 0, pointers, sizes, 0, pointers, sizes, ctypes.addressof(tiny), 8) == 13
    assert tiny.value == b"LookupE"  # truncated, NUL-terminated


def test_call_id_comes_from_content_not_from_what_was_lowered_before() -> None:
    # Two fresh processes lower the same call, one after lowering another call first: the ids must not differ
    # (processes of one jax.distributed job compile the same program whatever each lowered before).
    script = (
        "import re, sys, jax, jax.numpy as jnp\n"
        "import jt_core as jt\n"
        "import core_kernels as k\n"
        "def scale(x, factor):\n"
        "    return jt.triton_call(x, kernel=k.scale_kernel, out_shape=x, grid=2, n=x.size, factor=factor, BLOCK=16,"
        " launcher='ffi')\n"
        "x = jax.ShapeDtypeStruct((20,), jnp.float32)\n"
        "if sys.argv[1] == 'after-another':\n"
        "    jax.jit(lambda x: scale(x, 5.0)).lower(x)\n"
        "print(re.findall(r'call_id = (\\d+) : i64', jax.jit(lambda x: scale(x, 2.0)).lower(x).as_text()))\n"
    )
    ids = []
    for order in ("first", "after-another"):
        result = subprocess.run(
            [sys.executable, "-c", script, order],
            cwd=BEHAVIOUR.parent,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        ids.append(result.stdout.strip().splitlines()[-1])
    assert ids[0] == ids[1] and len(ids[0]) > 4, ids


def test_named_ffi_launcher_without_a_compiler_says_what_to_do(tmp_path: Path) -> None:
    script = (
        "import jax.numpy as jnp, jt_core as jt, core_kernels as k\n"
        "x = jnp.ones(16)\n"
        "try:\n"
        "    jt.triton_call(x, kernel=k.copy_kernel, out_shape=x, grid=1, n=16, BLOCK=16)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    env = {
        **os.environ,
        "CXX": str(tmp_path / "no-such-compiler"),
        "JT_PREBUILT_NATIVE": "0",  # a machine where the handler must be built: an install from the sdist
        "JT_CACHE_DIR": str(tmp_path / "cache"),
        "JT_LAUNCHER_CPU": "ffi",
        "JAX_PLATFORMS": "cpu",
    }
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=BEHAVIOUR.parent, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    message = result.stdout
    assert message.startswith("NoBackendError launcher 'ffi' for platform 'cpu' is unavailable"), message
    assert "CXX=" in message and "python -m jt_core build-native" in message, message
    assert "host-callback launcher is used" not in message, message


def test_without_a_compiler_the_callback_launcher_is_used(tmp_path: Path) -> None:
    script = (
        "from jt_core.plugin import facade\n"
        "from jt_core.cpu.ffi_launcher import CpuFfiLauncher\n"
        "print(facade.launcher_for('cpu').name)\n"
        "print(CpuFfiLauncher().unavailable_reason())\n"
    )
    env = {**os.environ, "CXX": str(tmp_path / "no-such-compiler"), "JT_CACHE_DIR": str(tmp_path / "cache")}
    env["JT_PREBUILT_NATIVE"] = "0"  # a machine where the handler must be built: an install from the sdist
    env.pop("JT_LAUNCHER_CPU", None)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    name, reason = result.stdout.strip().splitlines()[-2:]
    assert name == "interpreter"
    assert "could not be built" in reason and "CXX=" in reason
