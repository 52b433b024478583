"""``jax.export`` of calls on the CPU: with JAX's safety checks on, the compiled path exports plain StableHLO, whose
artifact runs in a fresh process, with the numbers of the call itself; what cannot be exported fails the export
with an error naming why."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import core_kernels as k
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from jax import export

import jt_core as jt


@pytest.fixture(autouse=True)
def _compiled_path(jt_cpu_paths_by_name: None) -> None:
    """The calls run on the compiled path, as they do by default (the CI run in the interpreter sets these)."""


@triton.jit
def _scaled_pair_kernel(x_ptr, y_ptr, n, factor, sum_ptr, exp_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(sum_ptr + offsets, x * factor + y, mask=mask)
    tl.store(exp_ptr + offsets, tl.exp(x) - y, mask=mask)


def scaled_pair(x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jt.triton_call(
        x, y, x.size, 1.5, kernel=_scaled_pair_kernel, out_shape=[x, x], grid=jt.cdiv(x.size, 32), BLOCK=32
    )


@triton.jit
def _shifted_copy_kernel(x_ptr, i_ptr, out_ptr, idx_ptr, shift, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets + shift))
    tl.store(idx_ptr + offsets, tl.load(i_ptr + offsets) * 2)


def shifted_copy(x: jax.Array, i: jax.Array, shift: int) -> tuple[jax.Array, jax.Array]:
    return jt.triton_call(x, i, kernel=_shifted_copy_kernel, out_shape=[x, i], grid=x.size // 16, shift=shift, BLOCK=16)


@triton.jit
def _printing_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    tl.device_print("x", x)
    tl.store(out_ptr + offsets, x)


F32_100 = jax.ShapeDtypeStruct((100,), jnp.float32)

#: Runs in a fresh process: loads an artifact, runs it with only JAX imported, then again after importing jt_core.
_FRESH_PROCESS = textwrap.dedent(
    """
    import sys
    import numpy as np
    from jax import export

    exported = export.deserialize(bytearray(open(sys.argv[1], "rb").read()))
    x, y = np.load(sys.argv[2])["x"], np.load(sys.argv[2])["y"]
    only_jax = [np.asarray(out) for out in exported.call(x, y)]
    assert not {"jt_core", "triton"} & set(sys.modules), sorted(m for m in sys.modules if m.startswith(("jt", "tri")))
    import jt_core  # noqa: F401
    with_jt = [np.asarray(out) for out in exported.call(x, y)]
    np.savez(sys.argv[3], *only_jax, *with_jt)
    """
)


def test_an_exported_call_is_plain_stablehlo_and_runs_in_a_fresh_process(tmp_path: Path) -> None:
    exported = export.export(jax.jit(scaled_pair), platforms=["cpu"])(F32_100, F32_100)  # JAX's checks on
    assert "custom_call" not in exported.mlir_module()
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(100).astype(np.float32) for _ in range(2))
    artifact, data, results = tmp_path / "scaled_pair.jax", tmp_path / "inputs.npz", tmp_path / "outputs.npz"
    artifact.write_bytes(exported.serialize())
    np.savez(data, x=x, y=y)
    subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, str(artifact), str(data), str(results)],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    ran = np.load(results)
    called = [np.asarray(out) for out in jax.jit(scaled_pair)(x, y)]
    for index in range(4):  # with only JAX imported, then with jt_core: the numbers of the call itself, bit for bit
        np.testing.assert_array_equal(ran[f"arr_{index}"], called[index % 2])
    np.testing.assert_allclose(called[0], x.astype(np.float64) * 1.5 + y, rtol=1e-6)
    np.testing.assert_allclose(called[1], np.exp(x.astype(np.float64)) - y, rtol=1e-5, atol=1e-6)


@pytest.mark.requires_plugin("cuda")
def test_an_export_for_the_cpu_and_cuda_runs_on_the_cpu() -> None:
    """Exported for both platforms, the artifact runs here: the CPU's half is plain StableHLO, so only the CUDA
    launcher's targets need the check disabled. It needs jt-cuda, asked of the entry points: an import would find the
    checkout's ``jt_cuda`` folder where the tests run from the repository's root."""
    targets = ("triton_kernel_call_jt_cuda", "triton_kernel_call_jt_cuda_preloaded")

    def pair(x: jax.Array, y: jax.Array) -> Any:
        return jt.triton_call(
            x, y, x.size, 1.5, kernel=_scaled_pair_kernel, out_shape=[x, x], grid=jt.cdiv(x.size, 32), BLOCK=32,
            compute_capability=90,
        )  # fmt: skip

    exported = export.export(
        jax.jit(pair),
        platforms=["cpu", "cuda"],
        disabled_checks=[export.DisabledSafetyCheck.custom_call(target) for target in targets],
    )(F32_100, F32_100)
    restored = export.deserialize(exported.serialize())
    assert restored.platforms == ("cpu", "cuda")
    assert set(re.findall(r"custom_call @(\w+)", restored.mlir_module())) <= set(targets)
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal(100).astype(np.float32) for _ in range(2))
    for got, want in zip(restored.call(x, y), jax.jit(scaled_pair)(x, y), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_an_exported_call_that_strays_returns_poisoned_outputs_where_the_call_raises() -> None:
    x = np.random.default_rng(2).standard_normal(64).astype(np.float32)
    i = np.arange(64, dtype=np.int32)
    specs = (jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(i.shape, i.dtype))
    exported = {
        shift: export.export(jax.jit(lambda a, b, s=shift: shifted_copy(a, b, s)), platforms=["cpu"])(*specs)
        for shift in (0, 1)
    }
    inside = [np.asarray(out) for out in exported[0].call(x, i)]
    np.testing.assert_array_equal(inside[0], x)
    np.testing.assert_array_equal(inside[1], 2 * i)
    strayed = [np.asarray(out) for out in exported[1].call(x, i)]  # the last program reads past x's end
    assert np.isnan(strayed[0]).all()
    assert (strayed[1].view(np.uint8) == 0xA5).all()  # every output, the ones whose accesses stayed inside too
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"OutOfBoundsAccessError.*x_ptr.*element 64"):
        jax.block_until_ready(jax.jit(lambda a, b: shifted_copy(a, b, 1))(x, i))


@pytest.mark.parametrize(
    ("launcher", "checks", "why"),
    [
        (None, {}, r"launcher 'compiled' cannot express it \(the compiled path cannot express device printing"),
        ("ffi", {}, r"launcher 'ffi' runs it in Triton's interpreter through jt's handler"),
        ("interpreter", {}, r"launcher 'interpreter' runs it through a JAX host callback"),
        (None, {"races": True}, r"launcher 'compiled' cannot express it \(the race check runs in the interpreter\)"),
    ],
    ids=["handed-over", "ffi", "interpreter", "race-check"],
)
def test_a_call_that_runs_in_the_interpreter_fails_the_export_naming_why(
    launcher: str | None, checks: dict[str, Any], why: str
) -> None:
    def printing(x: jax.Array) -> jax.Array:
        return jt.triton_call(x, kernel=_printing_kernel, out_shape=x, grid=1, BLOCK=16, launcher=launcher)

    def copying(x: jax.Array) -> jax.Array:
        return jt.triton_call(x, kernel=k.copy_kernel, out_shape=x, grid=1, n=16, BLOCK=16, launcher=launcher)

    f = copying if checks or launcher else printing
    with jt.cpu_checks(**checks), pytest.raises(jt.UnsupportedKernelError) as refused:
        export.export(jax.jit(f), platforms=["cpu"])(jax.ShapeDtypeStruct((16,), jnp.float32))
    message = str(refused.value)
    assert "cannot be exported for platform 'cpu'" in message and re.search(why, message), message
    if f is printing:
        line = _printing_kernel.fn.__code__.co_firstlineno + 4  # the tl.device_print line
        assert f"{Path(__file__)}:{line}" in message, message


def test_jt_export_for_the_cpu_disables_no_check_and_gives_the_calls_numbers() -> None:
    rng = np.random.default_rng(11)
    x, y = (rng.standard_normal(100).astype(np.float32) for _ in range(2))

    def add(x: Any, y: Any) -> Any:
        return jt.triton_call(x, y, 100, kernel=k.add_kernel, out_shape=x, grid=4, BLOCK=32)

    spec = jax.ShapeDtypeStruct((100,), jnp.float32)
    exported = jt.export(add, platforms=["cpu"])(spec, spec)
    assert exported.disabled_safety_checks == () and "custom_call" not in exported.mlir_module()
    restored = export.deserialize(exported.serialize())
    np.testing.assert_array_equal(np.asarray(restored.call(x, y)), np.asarray(jax.jit(add)(x, y)))
