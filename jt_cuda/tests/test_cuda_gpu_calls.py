"""triton_call on an NVIDIA GPU, through each launcher, at real sizes, against jax.numpy / NumPy references."""

from __future__ import annotations

import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from cuda_testlib import (
    add_call,
    layer_norm_bwd_kernel,
    layer_norm_fwd_kernel,
    matmul_kernel,
    scalar_types_kernel,
    softmax_kernel,
)

import jt_core as jt
from jt_core.testing import accumulate_kernel, autotuned_scale_inplace_kernel, out_first_kernel, scale_inplace_kernel

pytestmark = pytest.mark.cuda

LAUNCHERS = ["jt", "jaxlib"]


@pytest.fixture(params=LAUNCHERS)
def launcher(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def rand(key: int, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
    return jax.random.normal(jax.random.key(key), shape, jnp.float32).astype(dtype)


def rel_error(out: Any, ref: Any) -> float:
    out64 = np.asarray(out, np.float64)
    ref64 = np.asarray(ref, np.float64)
    assert np.isfinite(out64).all(), "non-finite values (unwritten output?)"
    return float(np.linalg.norm(out64 - ref64) / np.linalg.norm(ref64))


def compute_capability() -> int:
    major, minor = jax.devices("cuda")[0].compute_capability.split(".")
    return int(major) * 10 + int(minor)


@pytest.mark.parametrize("size", [1, 1000, 1 << 20, (1 << 24) + 3])
def test_add(launcher: str, size: int) -> None:
    x, y = rand(1, (size,)), rand(2, (size,))
    out = jax.jit(lambda a, b: add_call(a, b, block=1024, launcher=launcher))(x, y)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x) + np.asarray(y))


def test_output_pointer_declared_first(launcher: str) -> None:
    x = rand(3, (4096,))

    def f(x: Any) -> Any:
        return jt.triton_call(
            x_ptr=x, scale=1.5, kernel=out_first_kernel, out_shape=x, grid=4, n=4096, BLOCK=1024, launcher=launcher
        )

    np.testing.assert_allclose(np.asarray(jax.jit(f)(x)), np.asarray(x) * 1.5, rtol=1e-6)


def test_scalars_of_every_width(launcher: str) -> None:
    def f() -> Any:
        return jt.triton_call(
            np.int8(-3), np.int16(300), 2**40, 1.5, np.float64(0.25),
            kernel=scalar_types_kernel, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), grid=1, BLOCK=16,
            launcher=launcher,
        )  # fmt: skip

    np.testing.assert_allclose(np.asarray(jax.jit(f)()), np.full(16, -3 + 300 + 2.0**40 + 1.5 + 0.25, np.float32))


def _matmul(a: Any, b: Any, out_dtype: Any, launcher: str, bm: int = 128, bn: int = 128, bk: int = 64, **opts: Any):
    m, k = a.shape
    _, n = b.shape
    return jt.triton_call(
        a, b, kernel=matmul_kernel, out_shape=jax.ShapeDtypeStruct((m, n), out_dtype),
        grid=(triton.cdiv(m, bm) * triton.cdiv(n, bn),), M=m, N=n, K=k,
        stride_am=k, stride_ak=1, stride_bk=n, stride_bn=1, stride_cm=n, stride_cn=1,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, launcher=launcher, **opts,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (777, 513, 1000)])
def test_matmul(launcher: str, dtype: Any, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    a, b = rand(4, (m, k), dtype), rand(5, (k, n), dtype)
    out = jax.jit(lambda a, b: _matmul(a, b, jnp.float32, launcher))(a, b)
    ref = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    assert rel_error(out, ref) < 1e-5


def test_matmul_fp8(launcher: str) -> None:
    if compute_capability() < 89:
        pytest.skip("fp8e4nv dot needs sm89+")
    a, b = rand(6, (512, 256), jnp.float8_e4m3fn), rand(7, (256, 512), jnp.float8_e4m3fn)
    out = jax.jit(lambda a, b: _matmul(a, b, jnp.float32, launcher, bm=128, bn=128, bk=64))(a, b)
    ref = np.asarray(a.astype(jnp.float32), np.float64) @ np.asarray(b.astype(jnp.float32), np.float64)
    assert rel_error(out, ref) < 1e-3


def test_matmul_with_more_than_48k_shared_memory(launcher: str) -> None:
    a, b = rand(8, (1024, 1024), jnp.float16), rand(9, (1024, 1024), jnp.float16)
    out = jax.jit(lambda a, b: _matmul(a, b, jnp.float32, launcher, bm=128, bn=256, bk=64, num_stages=4,
                                       num_warps=8))(a, b)  # fmt: skip
    ref = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    assert rel_error(out, ref) < 1e-5


def test_softmax(launcher: str) -> None:
    x = rand(10, (4096, 781))

    def f(x: Any) -> Any:
        return jt.triton_call(x, kernel=softmax_kernel, out_shape=x, grid=x.shape[0], n_cols=x.shape[1], BLOCK=1024,
                              launcher=launcher)  # fmt: skip

    assert rel_error(jax.jit(f)(x), jax.nn.softmax(x, axis=-1)) < 1e-6


def _layer_norm_pair(launcher: str) -> Any:
    eps = 1e-5

    def forward(x: Any, w: Any, b: Any) -> tuple[Any, Any, Any]:
        rows, cols = x.shape
        return jt.triton_call(
            x_ptr=x, w_ptr=w, b_ptr=b, n_cols=cols, eps=eps, kernel=layer_norm_fwd_kernel,
            out_shape=(x, jax.ShapeDtypeStruct((rows,), jnp.float32), jax.ShapeDtypeStruct((rows,), jnp.float32)),
            grid=rows, BLOCK=triton.next_power_of_2(cols), launcher=launcher,
        )  # fmt: skip

    @jax.custom_vjp
    def layer_norm(x: Any, w: Any, b: Any) -> Any:
        return forward(x, w, b)[0]

    def fwd(x: Any, w: Any, b: Any) -> tuple[Any, Any]:
        y, mean, rstd = forward(x, w, b)
        return y, (x, w, mean, rstd)

    def bwd(res: Any, dy: Any) -> tuple[Any, Any, Any]:
        x, w, mean, rstd = res
        rows, cols = x.shape
        dx, dw_part, db_part = jt.triton_call(
            x, w, mean, rstd, dy, kernel=layer_norm_bwd_kernel, out_shape=(x, x, x), grid=rows, n_cols=cols,
            BLOCK=triton.next_power_of_2(cols), launcher=launcher,
        )  # fmt: skip
        return dx, dw_part.sum(0), db_part.sum(0)

    layer_norm.defvjp(fwd, bwd)
    return layer_norm


def _layer_norm_reference(x: Any, w: Any, b: Any) -> Any:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * w + b


def test_layer_norm_forward_and_backward(launcher: str) -> None:
    x, w, b = rand(11, (2048, 1000)), rand(12, (1000,)), rand(13, (1000,))
    layer_norm = _layer_norm_pair(launcher)

    def loss(fn: Any, x: Any, w: Any, b: Any) -> Any:
        return (fn(x, w, b) * jnp.cos(x)).sum()

    y = jax.jit(layer_norm)(x, w, b)
    assert rel_error(y, _layer_norm_reference(x, w, b)) < 1e-5
    grads = jax.jit(jax.grad(lambda *a: loss(layer_norm, *a), argnums=(0, 1, 2)))(x, w, b)
    with jax.default_matmul_precision("highest"):
        expected = jax.jit(jax.grad(lambda *a: loss(_layer_norm_reference, *a), argnums=(0, 1, 2)))(x, w, b)
    for got, ref in zip(grads, expected):
        assert rel_error(got, ref) < 1e-4


def test_autotune_with_aliased_input_runs_the_kernel_once_in_effect(launcher: str) -> None:
    n = 1 << 22
    x = rand(14, (n,))

    def f(x: Any) -> Any:
        return jt.triton_call(
            x, n, 2.0, kernel=autotuned_scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0},
            grid=lambda meta: (triton.cdiv(n, meta["BLOCK"]),), launcher=launcher,
        )  # fmt: skip

    fn = jax.jit(f)
    expected = np.asarray(x) * 2.0
    np.testing.assert_array_equal(np.asarray(fn(x)), expected)  # trials restored the input before the real run
    np.testing.assert_array_equal(np.asarray(fn(x)), expected)


def test_zeroed_output_is_zeroed_on_every_execution(launcher: str) -> None:
    n = 1 << 20
    x = rand(15, (n,))

    def f(x: Any) -> Any:
        return jt.triton_call(
            x, kernel=accumulate_kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.float32), zeroed_outputs=(0,),
            grid=n // 1024, n=n, BLOCK=1024, launcher=launcher,
        )  # fmt: skip

    fn = jax.jit(f)
    expected = np.asarray(x, np.float64).sum()
    for _ in range(3):
        np.testing.assert_allclose(float(fn(x)[0]), expected, rtol=1e-4, atol=1e-2)


def test_donated_buffer_is_reused(launcher: str) -> None:
    n = 1 << 20
    x = rand(16, (n,))
    expected = np.asarray(x) * 3.0

    def f(x: Any) -> Any:
        return jt.triton_call(x, n, 3.0, kernel=scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0},
                              grid=n // 1024, BLOCK=1024, launcher=launcher)  # fmt: skip

    pointer = x.unsafe_buffer_pointer()
    out = jax.jit(f, donate_argnums=0)(x)
    assert x.is_deleted()
    assert out.unsafe_buffer_pointer() == pointer
    np.testing.assert_array_equal(np.asarray(out), expected)


def test_ref_is_updated_in_place(launcher: str) -> None:
    n = 1 << 16
    x = rand(17, (n,))

    @jax.jit
    def f(x: Any) -> Any:
        ref = jax.new_ref(x)
        jt.triton_call(ref, n, 0.5, kernel=scale_inplace_kernel, out_shape=(), grid=n // 1024, BLOCK=1024,
                       launcher=launcher)  # fmt: skip
        return ref[...]

    np.testing.assert_array_equal(np.asarray(f(x)), np.asarray(x) * 0.5)


def test_calls_from_worker_threads(launcher: str) -> None:
    fn = jax.jit(lambda a, b: add_call(a, b, block=1024, launcher=launcher))
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(5):
                x, y = rand(seed * 10 + i, (1 << 18,)), rand(seed * 10 + i + 100, (1 << 18,))
                np.testing.assert_array_equal(np.asarray(fn(x, y)), np.asarray(x) + np.asarray(y))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_export_round_trip(launcher: str) -> None:
    from jax import export

    x, y = rand(18, (8192,)), rand(19, (8192,))
    exported = export.export(
        jax.jit(lambda a, b: add_call(a, b, block=1024, launcher=launcher)),
        platforms=["cuda"],
        disabled_checks=[export.DisabledSafetyCheck.custom_call("triton_kernel_call_jt_cuda"),
                         export.DisabledSafetyCheck.custom_call("triton_kernel_call_jt_cuda_preloaded"),
                         export.DisabledSafetyCheck.custom_call("triton_kernel_call_ffi"),
                         export.DisabledSafetyCheck.custom_call("triton_kernel_call")],
    )(x, y)  # fmt: skip
    restored = export.deserialize(exported.serialize())
    np.testing.assert_array_equal(np.asarray(restored.call(x, y)), np.asarray(x) + np.asarray(y))


def test_cluster_launch(launcher: str) -> None:
    if compute_capability() < 90:
        pytest.skip("clusters need sm90+")
    x, y = rand(20, (1 << 16,)), rand(21, (1 << 16,))
    out = jax.jit(lambda a, b: add_call(a, b, block=1024, num_ctas=2, launcher=launcher))(x, y)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x) + np.asarray(y))


@triton.jit
def _descriptor_scale_kernel(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    src = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    dst = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    m = tl.program_id(0) * BLOCK_M
    n = tl.program_id(1) * BLOCK_N
    dst.store([m, n], src.load([m, n]) * 2)


def test_device_side_tensor_descriptors_get_global_scratch() -> None:
    if compute_capability() < 90:
        pytest.skip("tensor descriptors need sm90+")
    x = rand(22, (512, 256))

    def f(x: Any) -> Any:
        return jt.triton_call(x, kernel=_descriptor_scale_kernel, out_shape=x, grid=(8, 4), M=512, N=256,
                              BLOCK_M=64, BLOCK_N=64, launcher="jt")  # fmt: skip

    np.testing.assert_array_equal(np.asarray(jax.jit(f)(x)), np.asarray(x) * 2)


def test_many_calls_in_one_jit_chain(launcher: str) -> None:
    x = rand(23, (1024,))

    @jax.jit
    def chain(x: Any) -> Any:
        for _ in range(50):
            x = add_call(x, x, block=1024, launcher=launcher)
        return x

    np.testing.assert_allclose(np.asarray(chain(x)), np.asarray(x) * 2.0**50, rtol=1e-6)


def test_get_compute_capability_agrees_with_the_driver() -> None:
    """jt's ``get_compute_capability`` (jax-triton 0.3 asked jaxlib, whose function fails on the two-H200 machine with
    jaxlib 0.11.2: ``cuInit(device)`` returns CUDA_ERROR_INVALID_VALUE) reads JAX's devices and must agree with what
    the driver reports through ``nvidia-smi``."""
    import subprocess

    reported = subprocess.run(
        ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True, text=True, check=True
    ).stdout.split()
    expected = sorted(round(float(value) * 10) for value in reported)
    found = sorted(jt.get_compute_capability(index) for index in range(len(jax.local_devices(backend="cuda"))))
    assert found == expected
