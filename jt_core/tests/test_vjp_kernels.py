"""Gradients through Triton kernels with ``jt.kernel_vjp``: layer norm and softmax against ``jax.grad`` of ``jnp``."""

from __future__ import annotations

import zlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from core_kernels import softmax_bwd_kernel, softmax_fwd_kernel

import jt_core as jt
from jt_core.errors import KernelCallTypeError

M, N = 6, 40
BLOCK_N = triton.next_power_of_2(N)


@triton.jit
def layer_norm_fwd_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / n + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * n + cols, xc * rstd * w + b, mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def layer_norm_bwd_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_rows_ptr, n, BLOCK: tl.constexpr):
    # dx for one row, and that row's contributions to dw (db is the row sum of dy, done by the caller).
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + row * n + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    g = dy * w
    c1 = tl.sum(xhat * g, axis=0) / n
    c2 = tl.sum(g, axis=0) / n
    tl.store(dx_ptr + row * n + cols, (g - (xhat * c1 + c2)) * rstd, mask=mask)
    tl.store(dw_rows_ptr + row * n + cols, dy * xhat, mask=mask)


def layer_norm_forward(x: Any, w: Any, b: Any, *, eps: float) -> tuple[Any, Any]:
    rows, n = x.shape
    row_stat = jax.ShapeDtypeStruct((rows,), jnp.float32)
    y, mean, rstd = jt.triton_call(
        x,
        w,
        b,
        n=n,
        eps=eps,
        kernel=layer_norm_fwd_kernel,
        out_shape=(x, row_stat, row_stat),
        grid=(rows,),
        BLOCK=triton.next_power_of_2(n),
    )
    return y, (x, w, mean, rstd)


def layer_norm_backward(residuals: Any, dy: Any, *, eps: float) -> tuple[Any, Any, Any]:
    del eps
    x, w, mean, rstd = residuals
    rows, n = x.shape
    dx, dw_rows = jt.triton_call(
        dy,
        x,
        w,
        mean,
        rstd,
        n=n,
        kernel=layer_norm_bwd_kernel,
        out_shape=(x, x),
        grid=(rows,),
        BLOCK=triton.next_power_of_2(n),
    )
    return dx, dw_rows.sum(axis=0), dy.sum(axis=0)


layer_norm = jt.kernel_vjp(layer_norm_forward, layer_norm_backward)


def layer_norm_reference(x: Any, w: Any, b: Any, eps: float) -> Any:
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + eps) * w + b


def softmax_forward(x: Any, block: int) -> tuple[Any, Any]:
    y = jt.triton_call(x, n=x.shape[1], kernel=softmax_fwd_kernel, out_shape=x, grid=(x.shape[0],), BLOCK=block)
    return y, y


def softmax_backward(block: int, y: Any, dy: Any) -> Any:
    return jt.triton_call(dy, y, n=y.shape[1], kernel=softmax_bwd_kernel, out_shape=y, grid=(y.shape[0],), BLOCK=block)


softmax = jt.kernel_vjp(softmax_forward, softmax_backward, static_argnums=(1,))


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    # Random data, seeded per test so that a failure reproduces.
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def test_layer_norm_gradients_match_jnp(rng: np.random.Generator) -> None:
    x = rng.standard_normal((M, N), dtype=np.float32)
    w = rng.standard_normal(N, dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    ct = rng.standard_normal((M, N), dtype=np.float32)

    def loss(fn: Any) -> Any:
        return lambda x, w, b: jnp.sum(fn(x, w, b) * ct)

    ours = jax.jit(jax.grad(loss(lambda x, w, b: layer_norm(x, w, b, eps=1e-5)), argnums=(0, 1, 2)))(x, w, b)
    reference = jax.grad(loss(lambda x, w, b: layer_norm_reference(x, w, b, 1e-5)), argnums=(0, 1, 2))(x, w, b)
    for got, want in zip(ours, reference):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(layer_norm(x, w, b, eps=1e-5), layer_norm_reference(x, w, b, 1e-5), rtol=1e-4, atol=1e-5)


def test_softmax_gradient_with_a_static_positional_argument(rng: np.random.Generator) -> None:
    x = rng.standard_normal((M, N), dtype=np.float32)
    ct = rng.standard_normal((M, N), dtype=np.float32)
    y, vjp = jax.vjp(lambda a: softmax(a, BLOCK_N), x)
    y_ref, vjp_ref = jax.vjp(lambda a: jax.nn.softmax(a, axis=1), x)
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(vjp(ct)[0], vjp_ref(ct)[0], rtol=1e-4, atol=1e-6)


def test_gradient_under_vmap_batches_both_kernels(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 3, N), dtype=np.float32)
    ct = rng.standard_normal((2, 3, N), dtype=np.float32)

    def grad_one(a: Any, c: Any) -> Any:
        return jax.grad(lambda v: jnp.sum(softmax(v, BLOCK_N) * c))(a)

    def grad_ref(a: Any, c: Any) -> Any:
        return jax.grad(lambda v: jnp.sum(jax.nn.softmax(v, axis=1) * c))(a)

    np.testing.assert_allclose(jax.jit(jax.vmap(grad_one))(x, ct), jax.vmap(grad_ref)(x, ct), rtol=1e-4, atol=1e-6)


def test_none_stands_for_a_zero_cotangent(rng: np.random.Generator) -> None:
    x = rng.standard_normal((M, N), dtype=np.float32)
    w = rng.standard_normal(N, dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)

    def backward_without_bias(residuals: Any, dy: Any, *, eps: float) -> Any:
        dx, dw, _ = layer_norm_backward(residuals, dy, eps=eps)
        return dx, dw, None

    f = jt.kernel_vjp(layer_norm_forward, backward_without_bias)
    db = jax.grad(lambda b: jnp.sum(f(x, w, b, eps=1e-5)))(b)
    np.testing.assert_array_equal(db, np.zeros(N, np.float32))


def test_grad_through_a_bare_call_explains_the_recipe(rng: np.random.Generator) -> None:
    x = rng.standard_normal((M, N), dtype=np.float32)

    def bare(a: Any) -> Any:
        return jnp.sum(softmax_forward(a, BLOCK_N)[0])

    with pytest.raises(NotImplementedError, match=r"softmax_fwd_kernel.*jax.custom_vjp.*kernel_vjp.*'Gradients'"):
        jax.grad(bare)(x)
    with pytest.raises(NotImplementedError, match="cannot be differentiated automatically"):
        jax.jvp(bare, (x,), (x,))


def test_cotangent_of_the_wrong_shape_names_the_argument(rng: np.random.Generator) -> None:
    x = rng.standard_normal((M, N), dtype=np.float32)
    f = jt.kernel_vjp(softmax_forward, lambda block, y, dy: dy[:, :1], static_argnums=(1,))
    with pytest.raises(
        KernelCallTypeError, match=r"cotangent of shape \(6, 1\) for argument 0, whose shape is \(6, 40\)"
    ):
        jax.grad(lambda a: jnp.sum(f(a, BLOCK_N)))(x)


def test_backward_returning_too_few_cotangents_is_explained(rng: np.random.Generator) -> None:
    x = rng.standard_normal((M, N), dtype=np.float32)
    w = rng.standard_normal(N, dtype=np.float32)
    f = jt.kernel_vjp(layer_norm_forward, lambda res, dy, eps: (dy,))
    with pytest.raises(KernelCallTypeError, match=r"must return a tuple of 3 cotangents.*got 1 values"):
        jax.grad(lambda a: jnp.sum(f(a, w, w, eps=1e-5)))(x)


def test_forward_must_return_outputs_and_residuals(rng: np.random.Generator) -> None:
    x = rng.standard_normal((M, N), dtype=np.float32)
    f = jt.kernel_vjp(lambda a: a * 2, lambda res, dy: dy)
    with pytest.raises(KernelCallTypeError, match=r"must return \(outputs, residuals\)"):
        f(x)
