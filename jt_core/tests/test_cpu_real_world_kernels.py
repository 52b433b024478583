"""Kernels in the shapes that public Triton code takes, on the compiled CPU path (which must take each of them itself:
``JT_CPU_FALLBACK=error`` turns a hand-over to the interpreter into a failure), in Triton's interpreter, and on a GPU:
a persistent row softmax and a layer norm as Triton's tutorials write them, a KL divergence, an RMSNorm backward and a
cross entropy with soft-capping (an early ``return``, then ``tanh``) as Liger-Kernel writes them, a chunked cross
entropy as Unsloth writes it, a GELU (tanh) forward and backward and a looped softmax as FlagGems writes them. Each
matches a NumPy reference computed in float64.
"""

from __future__ import annotations

import zlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from triton.language.extra import libdevice
from triton.language.extra.libdevice import tanh

import jt_core as jt

PATHS = [
    "compiled",
    "interpreter",
    pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.requires_plugin("cuda")]),
]


@pytest.fixture(autouse=True)
def no_hand_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled path must express every kernel here itself."""
    monkeypatch.setenv("JT_CPU_FALLBACK", "error")


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def call(path: str, *arrays: Any, **kwargs: Any) -> Any:
    """``jt.triton_call`` under ``jax.jit`` on ``path``: a CPU launcher, or the GPU."""
    if path == "cuda":
        device = jax.devices("cuda")[0]
        arrays = tuple(jax.device_put(a, device) for a in arrays)
        return jax.jit(lambda *a: jt.triton_call(*a, **kwargs))(*arrays)
    return jax.jit(lambda *a: jt.triton_call(*a, launcher=path, **kwargs))(*arrays)


def softmax_reference(x: np.ndarray) -> np.ndarray:
    wide = x.astype(np.float64)
    e = np.exp(wide - wide.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# -- a persistent row softmax (Triton's fused-softmax tutorial) ---------------------------------------------------


@triton.jit
def persistent_softmax_kernel(
    out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols, BLOCK: tl.constexpr, STAGES: tl.constexpr
):
    # Each program takes every num_programs-th row: a loop that carries nothing and holds a float constant.
    first = tl.program_id(0)
    step = tl.num_programs(0)
    for row in tl.range(first, n_rows, step, num_stages=STAGES):
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * in_row_stride + cols, mask=cols < n_cols, other=-float("inf"))
        shifted = x - tl.max(x, axis=0)
        numerator = tl.exp(shifted)
        tl.store(out_ptr + row * out_row_stride + cols, numerator / tl.sum(numerator, axis=0), mask=cols < n_cols)


@pytest.mark.parametrize("path", PATHS)
def test_persistent_row_softmax(path: str, rng: np.random.Generator) -> None:
    x = rng.standard_normal((37, 100)).astype(np.float32)
    out = call(
        path,
        in_ptr=x,
        kernel=persistent_softmax_kernel,
        out_shape=x,
        grid=4,
        in_row_stride=100,
        out_row_stride=100,
        n_rows=37,
        n_cols=100,
        BLOCK=128,
        STAGES=2,
    )
    np.testing.assert_allclose(np.asarray(out), softmax_reference(x), rtol=1e-5, atol=1e-7)


# -- a layer norm forward (Triton's layer-norm tutorial) ----------------------------------------------------------


@triton.jit
def layer_norm_forward_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_ptr += row * stride
    y_ptr += row * stride
    partial = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        partial += tl.load(x_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(partial, axis=0) / N
    partial = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        centred = tl.where(cols < N, x - mean, 0.0)
        partial += centred * centred
    rstd = 1 / tl.sqrt(tl.sum(partial, axis=0) / N + eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        in_row = cols < N
        w = tl.load(w_ptr + cols, mask=in_row)
        b = tl.load(b_ptr + cols, mask=in_row)
        x = tl.load(x_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
        tl.store(y_ptr + cols, (x - mean) * rstd * w + b, mask=in_row)


@pytest.mark.parametrize("path", PATHS)
def test_layer_norm_forward(path: str, rng: np.random.Generator) -> None:
    rows, n = 6, 300
    x = rng.standard_normal((rows, n)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    shapes = [jax.ShapeDtypeStruct((rows, n), jnp.float32), *[jax.ShapeDtypeStruct((rows,), jnp.float32)] * 2]
    y, mean, rstd = call(
        path,
        x_ptr=x,
        w_ptr=w,
        b_ptr=b,
        kernel=layer_norm_forward_kernel,
        out_shape=shapes,
        grid=rows,
        stride=n,
        N=n,
        eps=1e-5,
        BLOCK=128,
    )
    wide = x.astype(np.float64)
    want_mean = wide.mean(axis=1)
    want_rstd = 1 / np.sqrt(wide.var(axis=1) + 1e-5)
    np.testing.assert_allclose(np.asarray(mean), want_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(rstd), want_rstd, rtol=1e-5)
    want = (wide - want_mean[:, None]) * want_rstd[:, None] * w + b
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-4, atol=1e-5)


# -- a KL divergence forward (Liger-Kernel) -----------------------------------------------------------------------


@triton.jit
def kl_div_forward_kernel(
    y_ptr,
    target_ptr,
    loss_ptr,
    row_stride,
    n_cols,
    eps,
    BLOCK: tl.constexpr,
    LOG_TARGET: tl.constexpr,
    PER_ELEMENT: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    y_ptr += row * row_stride
    target_ptr += row * row_stride
    total = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < n_cols
        y = tl.load(y_ptr + cols, mask=inside, other=0.0)
        target = tl.load(target_ptr + cols, mask=inside, other=0.0)
        if LOG_TARGET:
            loss = tl.exp(target) * (target - y)
        else:
            loss = target * (tl.log(tl.maximum(target, eps)) - y)
        if PER_ELEMENT:
            tl.store(loss_ptr + row * row_stride + cols, loss, mask=inside)
        else:
            total += tl.sum(loss, axis=0)
    if not PER_ELEMENT:
        tl.store(loss_ptr + row, total)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("log_target", "per_element"), [(False, True), (True, False)])
def test_kl_divergence_forward(path: str, log_target: bool, per_element: bool, rng: np.random.Generator) -> None:
    rows, n = 5, 200
    y = np.log(rng.dirichlet(np.ones(n), rows)).astype(np.float32)
    p = rng.dirichlet(np.ones(n), rows)
    target = (np.log(p) if log_target else p).astype(np.float32)
    shape = (rows, n) if per_element else (rows,)
    loss = call(
        path,
        y,
        target,
        kernel=kl_div_forward_kernel,
        out_shape=jax.ShapeDtypeStruct(shape, jnp.float32),
        grid=rows,
        row_stride=n,
        n_cols=n,
        eps=1e-10,
        BLOCK=64,
        LOG_TARGET=log_target,
        PER_ELEMENT=per_element,
    )
    t, yy = target.astype(np.float64), y.astype(np.float64)
    elementwise = np.exp(t) * (t - yy) if log_target else t * (np.log(np.maximum(t, 1e-10)) - yy)
    want = elementwise if per_element else elementwise.sum(axis=1)
    np.testing.assert_allclose(np.asarray(loss), want, rtol=1e-4, atol=1e-6)


# -- an RMSNorm backward (Liger-Kernel) ---------------------------------------------------------------------------


@triton.jit
def rms_norm_backward_kernel(
    dy_ptr,
    x_ptr,
    w_ptr,
    rstd_ptr,
    dx_ptr,
    dw_ptr,
    row_stride,
    dw_stride,
    n_rows,
    n_cols,
    rows_per_program,
    BLOCK: tl.constexpr,
):
    block = tl.program_id(0)
    first = block * rows_per_program
    last = tl.minimum(first + rows_per_program, n_rows)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    w = tl.load(w_ptr + cols, mask=inside, other=0.0)
    dw = tl.zeros([BLOCK], dtype=tl.float32)
    dy_ptr += first * row_stride
    x_ptr += first * row_stride
    dx_ptr += first * row_stride
    for row in range(first, last):
        dy = tl.load(dy_ptr + cols, mask=inside, other=0.0)
        x = tl.load(x_ptr + cols, mask=inside, other=0.0)
        rstd = tl.load(rstd_ptr + row)
        scaled = dy * w
        dx = rstd * scaled - (rstd * rstd * rstd / n_cols) * tl.sum(scaled * x, axis=0) * x
        dw += dy * (x * rstd)
        tl.store(dx_ptr + cols, dx, mask=inside)
        dy_ptr += row_stride
        x_ptr += row_stride
        dx_ptr += row_stride
    tl.store(dw_ptr + block * dw_stride + cols, dw, mask=inside)


@pytest.mark.parametrize("path", PATHS)
def test_rms_norm_backward(path: str, rng: np.random.Generator) -> None:
    rows, n, per_program = 10, 48, 3
    programs = triton.cdiv(rows, per_program)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    dy = rng.standard_normal((rows, n)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, n).astype(np.float32)
    rstd = (1 / np.sqrt((x.astype(np.float64) ** 2).mean(axis=1) + 1e-6)).astype(np.float32)
    shapes = [jax.ShapeDtypeStruct((rows, n), jnp.float32), jax.ShapeDtypeStruct((programs, n), jnp.float32)]
    dx, dw_partial = call(
        path,
        dy,
        x,
        w,
        rstd,
        kernel=rms_norm_backward_kernel,
        out_shape=shapes,
        grid=programs,
        row_stride=n,
        dw_stride=n,
        n_rows=rows,
        n_cols=n,
        rows_per_program=per_program,
        BLOCK=64,
    )
    xw, dyw, r = x.astype(np.float64), dy.astype(np.float64), rstd.astype(np.float64)[:, None]
    scaled = dyw * w
    want_dx = r * scaled - (r**3 / n) * (scaled * xw).sum(axis=1, keepdims=True) * xw
    np.testing.assert_allclose(np.asarray(dx), want_dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(dw_partial).sum(axis=0), (dyw * xw * r).sum(axis=0), rtol=1e-4)


# -- a cross entropy with soft-capping, its gradient written in place (Liger-Kernel) -------------------------------


@triton.jit
def softcapped_cross_entropy_kernel(
    X_ptr,
    X_stride,
    Y_ptr,
    loss_ptr,
    n_cols,
    n_non_ignore,
    ignore_index,
    softcap,
    BLOCK: tl.constexpr,
    HAS_SOFTCAPPING: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    X_ptr += row * X_stride
    target = tl.load(Y_ptr + row)
    if target == ignore_index:
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            tl.store(X_ptr + cols, 0.0, mask=cols < n_cols)
        tl.store(loss_ptr + row, 0.0)
        return
    raw_target = tl.load(X_ptr + target).cast(tl.float32)
    x_target = raw_target
    if HAS_SOFTCAPPING:
        x_target = softcap * tanh(raw_target / softcap)
    running_max = float("-inf")
    total = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X_ptr + cols, mask=cols < n_cols, other=0.0).cast(tl.float32)
        if HAS_SOFTCAPPING:
            x = softcap * tanh(x / softcap)
        x = tl.where(cols < n_cols, x, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(x))
        total = total * tl.exp(running_max - new_max) + tl.sum(tl.exp(x - new_max))
        running_max = new_max
    lse = running_max + tl.log(total)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X_ptr + cols, mask=cols < n_cols, other=0.0).cast(tl.float32)
        if HAS_SOFTCAPPING:
            capped = tanh(x / softcap)
            x = softcap * capped
        grad = tl.exp(x - running_max) / total / n_non_ignore
        if HAS_SOFTCAPPING:
            grad = grad * (1 - capped * capped)
        tl.store(X_ptr + cols, grad, mask=cols < n_cols)
    tl.debug_barrier()
    correction = -1.0 / n_non_ignore
    if HAS_SOFTCAPPING:
        capped_target = tanh(raw_target / softcap)
        correction = correction * (1 - capped_target * capped_target)
    tl.store(X_ptr + target, tl.load(X_ptr + target) + correction)
    tl.store(loss_ptr + row, (lse - x_target) / n_non_ignore)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("softcap", [None, 4.0])
def test_cross_entropy_with_soft_capping_returns_early_for_ignored_rows(
    path: str, softcap: float | None, rng: np.random.Generator
) -> None:
    rows, vocab = 6, 300
    logits = (3 * rng.standard_normal((rows, vocab))).astype(np.float32)
    targets = rng.integers(0, vocab, rows).astype(np.int32)
    targets[[1, 4]] = -100
    kept = int((targets != -100).sum())
    spec = jax.ShapeDtypeStruct((rows, vocab), jnp.float32)
    grad, loss = call(
        path,
        X_ptr=logits,
        Y_ptr=targets,
        X_stride=vocab,
        n_cols=vocab,
        n_non_ignore=kept,
        ignore_index=-100,
        softcap=softcap or 1.0,
        kernel=softcapped_cross_entropy_kernel,
        out_type=(spec, jax.ShapeDtypeStruct((rows,), jnp.float32)),
        input_output_aliases={0: 0},
        grid=rows,
        BLOCK=128,
        HAS_SOFTCAPPING=softcap is not None,
    )
    z = logits.astype(np.float64)
    dz = np.ones_like(z)
    if softcap is not None:
        dz = 1 - np.tanh(z / softcap) ** 2
        z = softcap * np.tanh(z / softcap)
    p = softmax_reference(z)
    onehot = np.eye(vocab)[np.where(targets < 0, 0, targets)]
    lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
    ignored = targets == -100
    want_loss = np.where(ignored, 0.0, (lse - (z * onehot).sum(1)) / kept)
    want_grad = np.where(ignored[:, None], 0.0, (p - onehot) * dz / kept)
    np.testing.assert_allclose(np.asarray(loss), want_loss, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(grad), want_grad, rtol=1e-4, atol=1e-8)


# -- a chunked cross entropy forward (Unsloth) ---------------------------------------------------------------------


@triton.jit
def chunked_cross_entropy_forward_kernel(
    logits_ptr,
    labels_ptr,
    loss_ptr,
    logsumexp_ptr,
    row_stride,
    VOCAB: tl.constexpr,
    CHUNKS: tl.constexpr,
    BLOCK: tl.constexpr,
    SOFTCAPPING: tl.constexpr,
    SOFTCAP: tl.constexpr,
    SCALING: tl.constexpr,
    SCALE: tl.constexpr,
):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    logits_ptr += row * row_stride.to(tl.int64)
    cols = chunk * BLOCK + tl.arange(0, BLOCK)
    label = tl.load(labels_ptr + row).to(tl.int32)
    logits = tl.load(logits_ptr + cols, mask=cols < VOCAB, other=-float("inf")).to(tl.float32)
    if SCALING:
        logits = SCALE * logits
    if SOFTCAPPING:
        logits = SOFTCAP * tanh(logits / SOFTCAP)
    top = tl.max(logits, 0)
    lse = top + tl.log(tl.sum(tl.exp(logits - top), 0))
    if chunk == 0:
        # The target's term once per row, from the first chunk; an ignored row contributes nothing.
        if label != -100:
            x = tl.load(logits_ptr + label).to(tl.float32)
            if SCALING:
                x = SCALE * x
            if SOFTCAPPING:
                x = SOFTCAP * tanh(x / SOFTCAP)
            loss = -1.0 * x
        else:
            loss = 0.0
        tl.store(loss_ptr + row, loss)
    tl.store(logsumexp_ptr + row * CHUNKS + chunk, lse)


@pytest.mark.parametrize("path", PATHS)
def test_chunked_cross_entropy_forward(path: str, rng: np.random.Generator) -> None:
    rows, vocab, block = 5, 1000, 256
    chunks = triton.cdiv(vocab, block)
    logits = (2 * rng.standard_normal((rows, vocab))).astype(np.float32)
    labels = rng.integers(0, vocab, rows).astype(np.int32)
    labels[2] = -100
    loss, lse = call(
        path,
        logits,
        labels,
        kernel=chunked_cross_entropy_forward_kernel,
        out_shape=[jax.ShapeDtypeStruct((rows,), jnp.float32), jax.ShapeDtypeStruct((rows, chunks), jnp.float32)],
        grid=(rows, chunks),
        row_stride=vocab,
        VOCAB=vocab,
        CHUNKS=chunks,
        BLOCK=block,
        SOFTCAPPING=True,
        SOFTCAP=30.0,
        SCALING=True,
        SCALE=0.5,
    )
    z = 30.0 * np.tanh(0.5 * logits.astype(np.float64) / 30.0)
    padded = np.pad(z, ((0, 0), (0, chunks * block - vocab)), constant_values=-np.inf).reshape(rows, chunks, block)
    top = padded.max(-1)
    want_lse = top + np.log(np.exp(padded - top[..., None]).sum(-1))
    want_loss = np.where(labels == -100, 0.0, -z[np.arange(rows), np.where(labels < 0, 0, labels)])
    np.testing.assert_allclose(np.asarray(lse), want_lse, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(loss), want_loss, rtol=1e-5, atol=1e-6)
    # The whole cross entropy, from the chunks' log-sum-exps, as the host combines them.
    total = np.log(np.exp(np.asarray(lse, np.float64)).sum(1)) + np.asarray(loss, np.float64)
    np.testing.assert_allclose(
        np.where(labels == -100, 0.0, total), np.where(labels == -100, 0.0, want_lse_total(z, labels)), rtol=1e-5
    )


def want_lse_total(z: np.ndarray, labels: np.ndarray) -> np.ndarray:
    top = z.max(1)
    return top + np.log(np.exp(z - top[:, None]).sum(1)) - z[np.arange(len(labels)), np.where(labels < 0, 0, labels)]


# -- GELU (tanh) forward and backward (FlagGems) -------------------------------------------------------------------


@triton.jit
def gelu_tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside).to(tl.float32)
    inner = 0.79788456 * x * (1 + 0.044715 * libdevice.pow(x, 2))
    tl.store(out_ptr + offsets, (0.5 * x * (1 + tanh(inner))).to(out_ptr.dtype.element_ty), mask=inside)


@triton.jit
def gelu_tanh_backward_kernel(x_ptr, dy_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside).to(tl.float32)
    dy = tl.load(dy_ptr + offsets, mask=inside).to(tl.float32)
    t = tanh(0.79788456 * x * (1 + 0.044715 * libdevice.pow(x, 2)))
    slope = 0.5 * x * ((1 - libdevice.pow(t, 2)) * (0.79788456 + 0.1070322243 * libdevice.pow(x, 2))) + 0.5 * (1 + t)
    tl.store(dx_ptr + offsets, (slope * dy).to(dx_ptr.dtype.element_ty), mask=inside)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_gelu_tanh_forward_and_backward(path: str, dtype: Any, rng: np.random.Generator) -> None:
    n = 1000
    x = jnp.asarray(3 * rng.standard_normal(n), dtype)
    dy = jnp.asarray(rng.standard_normal(n), dtype)
    out = call(path, x, kernel=gelu_tanh_kernel, out_shape=x, grid=triton.cdiv(n, 256), n=n, BLOCK=256)
    dx = call(path, x, dy, kernel=gelu_tanh_backward_kernel, out_shape=x, grid=triton.cdiv(n, 256), n=n, BLOCK=256)
    xw, dyw = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    c = np.sqrt(2 / np.pi)
    t = np.tanh(c * (xw + 0.044715 * xw**3))
    want_out = 0.5 * xw * (1 + t)
    want_dx = (0.5 * (1 + t) + 0.5 * xw * (1 - t**2) * c * (1 + 3 * 0.044715 * xw**2)) * dyw
    # float32 loses digits where 1 + tanh cancels (x well below 0): an absolute tolerance there.
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == jnp.float32 else {"rtol": 1e-2, "atol": 1e-2}
    np.testing.assert_allclose(np.asarray(out, np.float64), want_out, **tol)
    np.testing.assert_allclose(np.asarray(dx, np.float64), want_dx, **tol)


# -- a looped softmax with a reverse second sweep (FlagGems) -------------------------------------------------------


@triton.jit
def last_tile_start(n, tile):
    return tl.cdiv(n, tile) * tile - tile


def _tile_n(args: dict[str, Any]) -> int:
    return triton.next_power_of_2(args["N"]) if args["N"] <= 32 * 1024 else 4096


@triton.heuristics({"TILE_N": _tile_n, "ONE_TILE": lambda args: args["TILE_N"] >= args["N"]})
@triton.jit
def looped_softmax_kernel(out_ptr, in_ptr, M, N, TILE_N: tl.constexpr, ONE_TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    if ONE_TILE:
        cols = tl.arange(0, TILE_N)
        x = tl.load(in_ptr + row * N + cols, mask=cols < N, other=-float("inf"))
        e = tl.exp(x - tl.max(x, 0))
        tl.store(out_ptr + row * N + cols, e / tl.sum(e, 0), mask=cols < N)
    else:
        running_max = tl.full([TILE_N], value=float("-inf"), dtype=tl.float32)
        running_sum = tl.full([TILE_N], value=0.0, dtype=tl.float32)
        in_ptr += row * N
        out_ptr += row * N
        last = last_tile_start(N, TILE_N)
        for start in range(0, last, TILE_N):  # whole tiles, unmasked
            x = tl.load(in_ptr + start + tl.arange(0, TILE_N))
            new_max = tl.maximum(running_max, x)
            empty = new_max == float("-inf")
            running_sum = tl.where(
                empty, running_sum, running_sum * tl.exp(running_max - new_max) + tl.exp(x - new_max)
            )
            running_max = new_max
        for start in range(last, N, TILE_N):  # the last tile, masked
            cols = start + tl.arange(0, TILE_N)
            x = tl.load(in_ptr + cols, mask=cols < N, other=-float("inf"))
            new_max = tl.maximum(running_max, x)
            empty = new_max == float("-inf")
            running_sum = tl.where(
                empty, running_sum, running_sum * tl.exp(running_max - new_max) + tl.exp(x - new_max)
            )
            running_max = new_max
        row_max = tl.max(running_max, 0)
        total = tl.sum(running_sum * tl.exp(running_max - row_max), 0)
        # The second sweep runs backwards: the masked last tile first, then the whole tiles down to the first.
        for start in range(0, TILE_N, TILE_N):
            cols = (last - start) + tl.arange(0, TILE_N)
            x = tl.load(in_ptr + cols, mask=cols < N, other=-float("inf"), eviction_policy="evict_first")
            tl.store(out_ptr + cols, tl.exp(x - row_max) / total, mask=cols < N)
        for start in range(TILE_N, N, TILE_N):
            cols = (last - start) + tl.arange(0, TILE_N)
            x = tl.load(in_ptr + cols, eviction_policy="evict_first")
            tl.store(out_ptr + cols, tl.exp(x - row_max) / total)


@pytest.mark.parametrize("path", PATHS)
def test_looped_softmax_with_a_reverse_sweep_writes_every_column(path: str, rng: np.random.Generator) -> None:
    rows, n = 3, 40_000  # four 4096-wide tiles short of ten: the reverse sweep's unmasked tiles hold most columns
    x = rng.standard_normal((rows, n)).astype(np.float32)
    out = call(path, in_ptr=x, M=rows, N=n, kernel=looped_softmax_kernel, out_shape=x, grid=(rows, 1, 1))
    np.testing.assert_allclose(np.asarray(out), softmax_reference(x), rtol=1e-5, atol=1e-9)
