"""The record stage of jt's CUDA handler on a GPU: inside XLA's command buffers (CUDA graphs) each call is one
kernel node that XLA adds itself; calls it cannot express as one kernel node fall back to stream capture.

XLA forms a command buffer from several consecutive commands only, so every test chains calls in one ``jax.jit``.
The handler's record counters say which path each call took.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
from cuda_testlib import add_call, matmul_kernel, scalar_types_kernel

import jt_core as jt
from jt_core.testing import accumulate_kernel, autotuned_scale_inplace_kernel
from jt_cuda.launchers import HANDLER

pytestmark = pytest.mark.cuda

CHAIN = 12


def rand(key: int, shape: tuple[int, ...]) -> jax.Array:
    return jax.random.normal(jax.random.key(key), shape, jnp.float32)


def counts_after(fn: Any, *args: Any, calls: int = 2) -> tuple[Any, tuple[int, int, int]]:
    """The last of ``calls`` synchronised calls ``fn(*args)`` (XLA may run a new executable once without its command
    buffers) and how the record counters moved meanwhile: kernel nodes created, updated, fallbacks to capture."""
    before = HANDLER.record_counts()
    for _ in range(calls):
        out = jax.block_until_ready(fn(*args))
    after = HANDLER.record_counts()
    return out, (after[0] - before[0], after[1] - before[1], after[2] - before[2])


def chain_of_adds(size: int, block: int = 1024) -> Any:
    @jax.jit
    def chain(x: Any, y: Any) -> Any:
        for _ in range(CHAIN):
            x = add_call(x, y, block=block, launcher="jt")
        return x

    return chain


def test_the_record_targets_are_registered_and_used() -> None:
    HANDLER.register()
    assert HANDLER.record_unavailable is None
    lowered = jax.jit(lambda x, y: add_call(x, y, launcher="jt")).lower(rand(0, (256,)), rand(1, (256,))).as_text()
    assert HANDLER.record_preloaded_target_name in lowered


def test_a_chain_becomes_kernel_nodes_and_is_right() -> None:
    x, y = rand(2, (3000,)), rand(3, (3000,))
    out, (created, _, captured) = counts_after(chain_of_adds(3000), x, y)
    np.testing.assert_allclose(np.asarray(out), np.asarray(x) + CHAIN * np.asarray(y), rtol=1e-5, atol=1e-5)
    assert created >= CHAIN and captured == 0


def test_a_kernel_called_at_many_call_sites_is_loaded_once() -> None:
    before = HANDLER.modules_loaded()
    x, y = rand(4, (5000,)), rand(5, (5000,))
    out, (created, _, _) = counts_after(chain_of_adds(5000, block=512), x, y)  # a binary no other test builds
    np.testing.assert_allclose(np.asarray(out), np.asarray(x) + CHAIN * np.asarray(y), rtol=1e-5, atol=1e-5)
    assert created >= CHAIN
    assert HANDLER.modules_loaded() - before <= 1  # once per process, not once per call site


def test_new_buffer_addresses_update_the_kernel_nodes() -> None:
    """Each call gets inputs at new addresses (all kept alive): XLA updates the recorded nodes, results stay right."""
    fn = chain_of_adds(1 << 16)
    inputs = [(rand(10 + i, (1 << 16,)), rand(20 + i, (1 << 16,))) for i in range(4)]
    _, first = counts_after(fn, *inputs[0])
    assert first[0] >= CHAIN
    moved = 0
    for x, y in inputs[1:]:
        out, (created, updated, captured) = counts_after(fn, x, y, calls=1)
        np.testing.assert_allclose(np.asarray(out), np.asarray(x) + CHAIN * np.asarray(y), rtol=1e-5, atol=1e-5)
        assert captured == 0
        moved += created + updated
    assert moved >= 1


def test_scalars_of_every_width_pass_by_value() -> None:
    def scalars(i: int) -> Any:
        return jt.triton_call(
            np.int8(-3 - i), np.int16(300 + i), 2**40 + i, 1.5 * i, np.float64(0.25),
            kernel=scalar_types_kernel, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), grid=1, BLOCK=16,
            launcher="jt",
        )  # fmt: skip

    out, (created, _, captured) = counts_after(jax.jit(lambda: jnp.stack([scalars(i) for i in range(CHAIN)])))
    values = [-3 - i + 300 + i + 2.0**40 + i + 1.5 * i + 0.25 for i in range(CHAIN)]
    np.testing.assert_allclose(np.asarray(out), np.stack([np.full(16, v, np.float32) for v in values]))
    assert created >= CHAIN and captured == 0


def test_more_than_48k_of_shared_memory() -> None:
    """128 x 256 x 64 tiles in four stages need about 192 KiB of shared memory, which XLA's kernel node must opt in
    to, as the execute stage does."""
    m = n = k = 256
    a = rand(30, (m, k)).astype(jnp.float16)
    b = rand(31, (k, n)).astype(jnp.float16)

    def matmul(a: Any, b: Any) -> Any:
        return jt.triton_call(
            a, b, kernel=matmul_kernel, out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
            grid=(triton.cdiv(m, 128) * triton.cdiv(n, 256),), M=m, N=n, K=k,
            stride_am=k, stride_ak=1, stride_bk=n, stride_bn=1, stride_cm=n, stride_cn=1,
            BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_stages=4, num_warps=8, launcher="jt",
        )  # fmt: skip

    scales = [2.0**i for i in range(CHAIN)]  # exact in float16, and distinct (XLA merges identical calls)

    @jax.jit
    def f(a: Any, b: Any) -> Any:
        return jnp.stack([matmul(a * scale, b) for scale in scales])

    out, (created, _, captured) = counts_after(f, a, b)
    product = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    expected = np.stack([product * scale for scale in scales])
    assert np.linalg.norm(np.asarray(out, np.float64) - expected) / np.linalg.norm(expected) < 1e-5
    assert created >= CHAIN and captured == 0


def test_zeroed_outputs_fall_back_to_stream_capture() -> None:
    n = 1 << 16
    x = rand(40, (n,))

    def total(x: Any) -> Any:
        return jt.triton_call(
            x, kernel=accumulate_kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.float32), zeroed_outputs=(0,),
            grid=n // 1024, n=n, BLOCK=1024, launcher="jt",
        )  # fmt: skip

    f = jax.jit(lambda x: jnp.concatenate([total(x * (i + 1)) for i in range(CHAIN)]))
    expected = np.asarray(x, np.float64).sum() * np.arange(1, CHAIN + 1)
    _, (created, _, captured) = counts_after(f, x)
    assert created == 0 and captured >= CHAIN
    for _ in range(2):  # zeroed on every execution, not only the first
        np.testing.assert_allclose(np.asarray(f(x)), expected, rtol=1e-4, atol=1e-2)


def test_autotuned_calls_are_recorded_after_tuning() -> None:
    n = 1 << 18
    x = rand(50, (n,))

    @jax.jit
    def f(x: Any) -> Any:
        for _ in range(CHAIN):
            x = jt.triton_call(
                x, n, 1.5, kernel=autotuned_scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0},
                grid=lambda meta: (triton.cdiv(n, meta["BLOCK"]),), launcher="jt",
            )  # fmt: skip
        return x

    out, (created, _, captured) = counts_after(f, x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(x, np.float64) * 1.5**CHAIN, rtol=1e-5)
    assert created >= CHAIN and captured == 0


def test_turned_off_the_calls_are_captured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CUDA_RECORD", "0")
    x, y = rand(60, (2048,)), rand(61, (2048,))
    fn = chain_of_adds(2048)
    assert HANDLER.record_target_name not in fn.lower(x, y).as_text()
    out, (created, _, captured) = counts_after(fn, x, y)
    np.testing.assert_allclose(np.asarray(out), np.asarray(x) + CHAIN * np.asarray(y), rtol=1e-5, atol=1e-5)
    assert created == 0 and captured == 0
