"""Layer normalisation with a forward and a backward kernel, differentiable through ``jax.custom_vjp``.

JAX cannot differentiate through a Triton kernel, so the forward kernel also returns the per-row mean and
reciprocal standard deviation, and ``jax.custom_vjp`` pairs it with a backward kernel. ``jax.grad`` then works as
for any JAX function; ``run`` checks the gradients against those of a ``jax.numpy`` implementation.

Both calling conventions appear:

* the forward call is *classic*: ``x``, ``w``, ``b`` and the scalars fill the parameters in order and the three
  output pointers (``y``, ``mean``, ``rstd``) are appended;
* the backward call is *current*: it writes ``dx`` over ``dy`` (``input_output_aliases={0: 0}``), so the kernel
  has no parameter for that output and stores through ``dy_ptr``; the operands are passed by keyword and the
  outputs described with ``out_type=``.

Run it alone with ``python examples/layer_norm.py``.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import triton
import triton.language as tl
from harness import check_close, default_platform_is_gpu, median_time_ms, report

import jt_core as jt


@triton.jit
def layer_norm_fwd_kernel(x_ptr, w_ptr, b_ptr, n_cols, eps, y_ptr, mean_ptr, rstd_ptr, BLOCK_N: tl.constexpr):
    """Normalises row ``program_id(0)`` of ``x`` (``n_cols <= BLOCK_N``) and records its mean and 1/std."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    centred = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask).to(tl.float32)
    y = centred * rstd * w + b
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def layer_norm_bwd_kernel(
    dy_ptr,
    x_ptr,
    w_ptr,
    mean_ptr,
    rstd_ptr,
    dw_partial_ptr,
    db_partial_ptr,
    n_rows,
    n_cols,
    ROWS_PER_PROGRAM: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Gradients of ``ROWS_PER_PROGRAM`` rows: ``dx`` overwrites ``dy``; this program's share of ``dw``/``db``.

    Each program sums ``dw`` and ``db`` over its own rows into one row of the partial buffers, which the caller
    adds up: no atomics, so the result does not depend on the order programs run in.
    """
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
    dw = tl.zeros((BLOCK_N,), dtype=tl.float32)
    db = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for i in range(ROWS_PER_PROGRAM):
        row = pid * ROWS_PER_PROGRAM + i
        if row < n_rows:
            x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
            mean = tl.load(mean_ptr + row)
            rstd = tl.load(rstd_ptr + row)
            x_hat = tl.where(mask, (x - mean) * rstd, 0.0)
            g = dy * w
            dx = (g - (x_hat * tl.sum(g * x_hat, axis=0) + tl.sum(g, axis=0)) / n_cols) * rstd
            tl.store(dy_ptr + row * n_cols + cols, dx.to(dy_ptr.dtype.element_ty), mask=mask)
            dw += dy * x_hat
            db += dy
    tl.store(dw_partial_ptr + pid * n_cols + cols, dw, mask=mask)
    tl.store(db_partial_ptr + pid * n_cols + cols, db, mask=mask)


def _forward(x: jax.Array, w: jax.Array, b: jax.Array, eps: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    n_rows, n_cols = x.shape
    stats = jax.ShapeDtypeStruct((n_rows,), jnp.float32)
    return jt.triton_call(
        x,
        w,
        b,
        n_cols,
        eps,
        kernel=layer_norm_fwd_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), stats, stats),
        grid=n_rows,
        BLOCK_N=jt.next_power_of_2(n_cols),
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def layer_norm(x: jax.Array, w: jax.Array, b: jax.Array, eps: float = 1e-5, rows_per_program: int = 8) -> jax.Array:
    """Layer normalisation over the last axis of a 2-D ``x``, with scale ``w`` and shift ``b``."""
    return _forward(x, w, b, eps)[0]


def _layer_norm_fwd(x, w, b, eps, rows_per_program):
    y, mean, rstd = _forward(x, w, b, eps)
    return y, (x, w, mean, rstd)


def _layer_norm_bwd(eps, rows_per_program, residuals, dy):
    x, w, mean, rstd = residuals
    n_rows, n_cols = x.shape
    programs = jt.cdiv(n_rows, rows_per_program)
    partial = jax.ShapeDtypeStruct((programs, n_cols), jnp.float32)
    dx, dw_partial, db_partial = jt.triton_call(
        dy_ptr=dy,
        x_ptr=x,
        w_ptr=w,
        mean_ptr=mean,
        rstd_ptr=rstd,
        n_rows=n_rows,
        n_cols=n_cols,
        kernel=layer_norm_bwd_kernel,
        out_type=(jax.ShapeDtypeStruct(dy.shape, dy.dtype), partial, partial),
        input_output_aliases={0: 0},
        grid=programs,
        ROWS_PER_PROGRAM=rows_per_program,
        BLOCK_N=jt.next_power_of_2(n_cols),
    )
    return dx, dw_partial.sum(axis=0).astype(w.dtype), db_partial.sum(axis=0).astype(w.dtype)


layer_norm.defvjp(_layer_norm_fwd, _layer_norm_bwd)


def layer_norm_reference(x: jax.Array, w: jax.Array, b: jax.Array, eps: float = 1e-5) -> jax.Array:
    """The same function in ``jax.numpy``, differentiated by JAX."""
    x32 = x.astype(jnp.float32)
    mean = x32.mean(axis=-1, keepdims=True)
    var = ((x32 - mean) ** 2).mean(axis=-1, keepdims=True)
    return ((x32 - mean) / jnp.sqrt(var + eps) * w + b).astype(x.dtype)


def run(platform_is_gpu: bool) -> dict[str, Any]:
    """Value and gradients (x, w, b) of ``sum(layer_norm(x) * g)`` against the ``jax.numpy`` reference.

    48 x 200 float32 rows on the CPU, 8192 x 4096 on a GPU.
    """
    (n_rows, n_cols), rows_per_program = ((8192, 4096), 64) if platform_is_gpu else ((48, 200), 8)
    kx, kw, kb, kg = jax.random.split(jax.random.key(3), 4)
    x = 2.0 * jax.random.normal(kx, (n_rows, n_cols), jnp.float32) + 0.5
    w = 1.0 + 0.1 * jax.random.normal(kw, (n_cols,), jnp.float32)
    b = 0.1 * jax.random.normal(kb, (n_cols,), jnp.float32)
    g = jax.random.normal(kg, (n_rows, n_cols), jnp.float32)

    def loss(fn):
        return lambda x, w, b: jnp.sum(fn(x, w, b) * g)

    ln = functools.partial(layer_norm, eps=1e-5, rows_per_program=rows_per_program)
    value_and_grads = jax.jit(jax.value_and_grad(loss(ln), argnums=(0, 1, 2)))
    value, grads = value_and_grads(x, w, b)
    want_value, want_grads = jax.jit(jax.value_and_grad(loss(layer_norm_reference), argnums=(0, 1, 2)))(x, w, b)

    errors = [
        check_close("layer_norm forward", jax.jit(ln)(x, w, b), layer_norm_reference(x, w, b), atol=1e-5, rtol=1e-5)
    ]
    errors.append(check_close("layer_norm loss", value, want_value, atol=1e-3, rtol=1e-5))
    # dw and db are sums over all rows: their tolerance grows with the number of rows.
    for name, got, want, atol in zip(("dx", "dw", "db"), grads, want_grads, (1e-5, 1e-6 * n_rows, 1e-6 * n_rows)):
        errors.append(check_close(f"layer_norm {name}", got, want, atol=atol, rtol=1e-4))
    return report("layer_norm", max(errors), median_time_ms(value_and_grads, x, w, b), shape=(n_rows, n_cols))


if __name__ == "__main__":
    print(run(default_platform_is_gpu()))
