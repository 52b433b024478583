"""Programmatic dependent launch on a GPU (sm90+): each kernel of a chain reads what the one before it wrote, also
when it starts while that one drains.

Every kernel here reads elements that other programs of the previous kernel wrote, half the array away, over
grids of thousands of programs, so that a kernel starting before the previous one has finished would read stale
values. The chains run inside ``jax.jit`` (kernel nodes of XLA's command buffers), captured into child graphs
(``JT_CUDA_RECORD=0``), between XLA's own kernels, and through buffers that XLA reuses in place.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from test_cuda_gpu_record import counts_after
from triton.language.extra.cuda import gdc_launch_dependents

import jt_core as jt
from jt_core.testing import backend_config, custom_calls, scale_inplace_kernel

pytestmark = pytest.mark.cuda

N = 1 << 22
BLOCK = 1024
CHAIN = 16


@triton.jit
def rotate_add_kernel(x_ptr, out_ptr, n, shift, BLOCK: tl.constexpr):
    """``out[i] = x[(i + shift) % n] + 1``: each program reads what another program wrote."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + (offsets + shift) % n, mask=mask) + 1.0, mask=mask)


@triton.jit
def early_trigger_kernel(x_ptr, out_ptr, n, rounds, BLOCK: tl.constexpr):
    """``out = x + 1``, slowly, after letting the next kernel start at once (``gdc_launch_dependents`` first)."""
    gdc_launch_dependents()
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    value = tl.load(x_ptr + offsets, mask=mask)
    busy = tl.zeros((BLOCK,), tl.float32)
    for i in range(rounds):
        busy += tl.sin(value + i)
    tl.store(out_ptr + offsets, value + 1.0 + 0.0 * busy, mask=mask)


@pytest.fixture(autouse=True)
def needs_sm90() -> None:
    cc = float(jax.devices("cuda")[0].compute_capability)
    if cc < 9.0:
        pytest.skip(f"programmatic dependent launch needs sm90 or later; the device is sm{int(cc * 10)}")


def rotate_add(x: Any, shift: int = N // 2) -> Any:
    return jt.triton_call(
        x, kernel=rotate_add_kernel, out_shape=x, grid=(triton.cdiv(N, BLOCK),), n=N, shift=shift, BLOCK=BLOCK,
        launcher="jt",
    )  # fmt: skip


def rotated(x: np.ndarray, times: int, shift: int = N // 2) -> np.ndarray:
    out = x.astype(np.float64)
    for _ in range(times):
        out = np.roll(out, -shift) + 1.0
    return out


def data(key: int) -> jax.Array:
    return jax.random.normal(jax.random.key(key), (N,), jnp.float32)


def test_a_chain_of_dependents_becomes_kernel_nodes_and_is_right() -> None:
    x = data(1)

    @jax.jit
    def chain(x: Any) -> Any:
        for i in range(CHAIN):
            x = rotate_add(x, shift=N // 2 + i)
        return x

    out, (created, _, captured) = counts_after(chain, x)
    expected = np.asarray(x, np.float64)
    for i in range(CHAIN):
        expected = rotated(expected, 1, N // 2 + i)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6, atol=1e-5)
    assert created >= CHAIN and captured == 0


def _rotations(x: Any) -> Any:
    for _ in range(CHAIN):
        x = rotate_add(x)
    return x


def test_a_dependent_chain_is_right_on_every_replay() -> None:
    x = data(2)
    chain = jax.jit(lambda x: _rotations(x))
    expected = rotated(np.asarray(x), CHAIN)
    for _ in range(20):
        np.testing.assert_allclose(np.asarray(chain(x)), expected, rtol=1e-6, atol=1e-5)


def test_a_dependent_chain_captured_into_child_graphs_is_right(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CUDA_RECORD", "0")
    x = data(3)
    chain = jax.jit(lambda x: _rotations(x))
    assert "triton_kernel_call_jt_cuda_record" not in chain.lower(x).as_text()
    for _ in range(5):
        out = jax.block_until_ready(chain(x))
    np.testing.assert_allclose(np.asarray(out), rotated(np.asarray(x), CHAIN), rtol=1e-6, atol=1e-5)


def test_jt_and_xla_kernels_interleaved_see_each_others_writes() -> None:
    x = data(4)

    @jax.jit
    def mixed(x: Any) -> Any:
        for _ in range(CHAIN // 2):
            x = rotate_add(x)
            x = jnp.roll(x, N // 4) * 0.5  # XLA's own kernel, itself reading other programs' elements
        return x

    expected = np.asarray(x, np.float64)
    for _ in range(CHAIN // 2):
        expected = np.roll(rotated(expected, 1), N // 4) * 0.5
    for _ in range(5):
        np.testing.assert_allclose(np.asarray(mixed(x)), expected, rtol=1e-6, atol=1e-5)


def early_trigger(x: Any, rounds: int = 4000) -> Any:
    return jt.triton_call(
        x, kernel=early_trigger_kernel, out_shape=x, grid=(triton.cdiv(x.size, BLOCK),), n=x.size, rounds=rounds,
        BLOCK=BLOCK, launcher="jt",
    )  # fmt: skip


def test_a_dependent_waits_for_a_kernel_that_lets_it_start_early() -> None:
    """The first kernel of each pair lets its dependent start at once and writes its output last: only the wait at
    the dependent's entry keeps it from reading that output before it is written."""
    x = data(6)

    @jax.jit
    def pairs(x: Any) -> Any:
        for _ in range(4):
            x = rotate_add(early_trigger(x))
        return x

    expected = np.asarray(x, np.float64)
    for _ in range(4):
        expected = rotated(expected + 1.0, 1)
    for _ in range(5):
        np.testing.assert_allclose(np.asarray(pairs(x)), expected, rtol=1e-6, atol=1e-5)


def test_a_kernel_writing_in_place_waits_for_the_reader_of_its_buffer() -> None:
    """``y = rotate_add(x)`` reads all of ``x``; the in-place scale then overwrites ``x``'s buffer (donated): started
    early without waiting, it would overwrite elements the reader had not read yet."""

    def step(x: Any) -> tuple[Any, Any]:
        y = rotate_add(x)
        z = jt.triton_call(
            x, N, 3.0, kernel=scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0},
            grid=(triton.cdiv(N, BLOCK),), BLOCK=BLOCK, launcher="jt",
        )  # fmt: skip
        return y, z

    f = jax.jit(step, donate_argnums=0)
    for key in range(5):
        x = data(10 + key)
        host = np.asarray(x)
        y, z = f(x)
        np.testing.assert_allclose(np.asarray(y), rotated(host, 1), rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(np.asarray(z), host.astype(np.float64) * 3.0, rtol=1e-6, atol=1e-5)


def test_without_the_wait_the_kernels_are_launched_plainly_and_still_right(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CUDA_PDL", "0")
    x = data(5)
    chain = jax.jit(lambda x: _rotations(x))
    flags = {backend_config(op)["launch_0"][9] for op in custom_calls(chain.lower(x))}
    assert flags == {0}
    np.testing.assert_allclose(np.asarray(chain(x)), rotated(np.asarray(x), CHAIN), rtol=1e-6, atol=1e-5)
