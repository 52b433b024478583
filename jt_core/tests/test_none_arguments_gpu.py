"""``None`` arguments and keyword-bound parameters on CUDA GPUs (skipped without one): the kernels of
``core_library_kernels`` against NumPy, with what is optional absent and present, through the ``jt`` and ``xla``
launchers (and jaxlib's handler for the simplest calls)."""

from __future__ import annotations

import zlib

import core_library_kernels as lib
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt

pytestmark = pytest.mark.cuda

LAUNCHERS = ["jt", "xla"]
#: With jaxlib's own Triton handler too, for the calls that every launcher must pass alike.
ALL_LAUNCHERS = ["jt", "jaxlib", "xla"]


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    # Random data, seeded per test so that a failure reproduces.
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


@triton.jit
def scale_classic_kernel(x_ptr, w_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if w_ptr is not None:
        x = x * tl.load(w_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x, mask=mask)


@pytest.mark.parametrize("launcher", ALL_LAUNCHERS)
@pytest.mark.parametrize("has_weight", [False, True], ids=["no weight", "weight"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_rms_norm_forward_with_an_optional_weight_on_gpu(
    rng: np.random.Generator, has_weight: bool, dtype: type, launcher: str
) -> None:
    x = rng.standard_normal((300, 200)).astype(dtype)
    w = rng.standard_normal(200).astype(dtype) if has_weight else None
    y, rstd = lib.rms_norm_forward(jnp.asarray(x), None if w is None else jnp.asarray(w), 1e-6, 0.25, launcher=launcher)
    want_y, want_rstd = lib.rms_norm_reference(x, w, 1e-6, 0.25)
    tolerance = 1e-5 if dtype == np.float32 else 4e-3
    np.testing.assert_allclose(np.asarray(y).astype(np.float64), want_y, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(np.asarray(rstd), want_rstd, rtol=1e-5)


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("has_weight", [False, True], ids=["no weight and no weight gradient", "weight"])
def test_rms_norm_backward_with_an_absent_weight_on_gpu(
    rng: np.random.Generator, has_weight: bool, launcher: str
) -> None:
    x, dy = rng.standard_normal((257, 96)).astype(np.float32), rng.standard_normal((257, 96)).astype(np.float32)
    w = rng.standard_normal(96).astype(np.float32) if has_weight else None
    _, rstd = lib.rms_norm_reference(x, w, 1e-6, 0.5)
    dx, dw = lib.rms_norm_backward(
        jnp.asarray(dy),
        jnp.asarray(x),
        None if w is None else jnp.asarray(w),
        jnp.asarray(rstd.astype(np.float32)),
        0.5,
        16,
        launcher=launcher,
    )
    want_dx, want_dw = lib.rms_norm_backward_reference(dy, x, w, 1e-6, 0.5)
    np.testing.assert_allclose(np.asarray(dx), want_dx, rtol=1e-4, atol=1e-5)
    if has_weight:
        np.testing.assert_allclose(np.asarray(dw), want_dw, rtol=1e-4, atol=1e-4)
    else:
        assert dw is None


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize(
    ("has_weight", "softcap", "z_loss", "gradients"),
    [(False, None, False, False), (True, 4.0, True, True), (False, 3.0, True, False), (True, None, False, True)],
    ids=["all absent", "all present", "softcap and z-loss", "weight and gradient"],
)
def test_cross_entropy_with_absent_weight_softcap_and_outputs_on_gpu(
    rng: np.random.Generator, has_weight: bool, softcap: float | None, z_loss: bool, gradients: bool, launcher: str
) -> None:
    rows, vocab = 64, 1000
    logits = (3 * rng.standard_normal((rows, vocab))).astype(np.float32)
    target = rng.integers(0, vocab, rows).astype(np.int32)
    weight = rng.uniform(0.5, 2.0, vocab).astype(np.float32) if has_weight else None
    got = lib.cross_entropy(
        jnp.asarray(logits),
        jnp.asarray(target),
        None if weight is None else jnp.asarray(weight),
        softcap,
        lse_square_scale=0.01,
        return_z_loss=z_loss,
        gradients=gradients,
        block=256,
        launcher=launcher,
    )
    want = lib.cross_entropy_reference(logits, target, weight, softcap, 0.01)
    assert set(got) == {"loss"} | ({"z_loss"} if z_loss else set()) | ({"dx"} if gradients else set())
    for name, value in got.items():
        np.testing.assert_allclose(np.asarray(value), want[name], rtol=2e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize(
    ("reverse", "scale", "varlen"),
    [(False, None, False), (True, 0.5, True), (False, 2.0, False), (True, None, True)],
    ids=["plain", "reverse, scaled, variable length", "scaled", "reverse, variable length"],
)
def test_chunk_cumsum_heuristics_see_none_on_gpu(
    rng: np.random.Generator, reverse: bool, scale: float | None, varlen: bool, launcher: str
) -> None:
    g = rng.standard_normal((1 if varlen else 3, 500, 4)).astype(np.float32)
    cu_seqlens = np.array([0, 37, 200, 201, 500], np.int32) if varlen else None
    got = lib.chunk_local_cumsum(
        jnp.asarray(g),
        64,
        reverse,
        scale,
        None if cu_seqlens is None else jnp.asarray(cu_seqlens),
        launcher=launcher,
    )
    want = lib.chunk_local_cumsum_reference(g, 64, reverse, scale, cu_seqlens)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("launcher", ALL_LAUNCHERS)
def test_none_fills_a_pointer_positionally_in_the_classic_convention_on_gpu(
    rng: np.random.Generator, launcher: str
) -> None:
    x, w = rng.standard_normal(5000).astype(np.float32), rng.standard_normal(5000).astype(np.float32)

    @jax.jit
    def both(x: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
        def call(weight: jax.Array | None) -> jax.Array:
            return jt.triton_call(
                x, weight, x.size, kernel=scale_classic_kernel, out_shape=x, grid=20, BLOCK=256, launcher=launcher
            )

        return call(None), call(w)

    plain, weighted = both(x, w)
    np.testing.assert_array_equal(np.asarray(plain), x)
    np.testing.assert_allclose(np.asarray(weighted), x * w, rtol=1e-6)


@pytest.mark.parametrize("vmap", ["grid", "sequential"])
def test_none_is_not_batched_under_vmap_on_gpu(rng: np.random.Generator, vmap: str) -> None:
    x = rng.standard_normal((6, 1000)).astype(np.float32)

    def call(row: jax.Array, w: jax.Array | None) -> jax.Array:
        return jt.triton_call(
            row, w, row.size, kernel=scale_classic_kernel, out_shape=row, grid=4, BLOCK=256, vmap=vmap
        )

    got = jax.jit(jax.vmap(call, in_axes=(0, None)), static_argnums=1)(jnp.asarray(x), None)
    np.testing.assert_array_equal(np.asarray(got), x)


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("num_stages", [1, 3])
def test_num_stages_keyword_fills_the_parameter_on_gpu(
    rng: np.random.Generator, num_stages: int, launcher: str
) -> None:
    x = rng.standard_normal((1000, 300)).astype(np.float32)
    got = lib.softmax(jnp.asarray(x), grid=132, num_stages=num_stages, num_warps=4, launcher=launcher)
    np.testing.assert_allclose(np.asarray(got), lib.softmax_reference(x), rtol=1e-5, atol=1e-7)
