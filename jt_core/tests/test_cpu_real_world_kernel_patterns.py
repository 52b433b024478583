"""More shapes of public Triton code, on the compiled CPU path (``JT_CPU_FALLBACK=error``: a hand-over to the
interpreter fails the test), in Triton's interpreter and on a GPU: a fused attention whose autotuner prunes on an
argument passed by keyword (Triton's fused-attention tutorial), a chunked cumsum over a variable-length batch whose
programs find their rows in ``cu_seqlens`` (flash-linear-attention), an RMSNorm weight gradient over a grid of
row and column blocks, optional gradients tested with ``if DW:`` and a top-k by a bitonic argsort of values and
indices (FlagGems), and a layer norm backward whose programs add their partial gradients under a spin lock (Triton's
layer-norm tutorial). Each matches a NumPy reference computed in float64.
"""

from __future__ import annotations

import itertools
import time
import warnings
import zlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
import triton.language.core as core
from triton.language.standard import _log2, zeros_like

import jt_core as jt
from jt_core import _compat
from jt_core.errors import ConfigSkippedWarning, KernelRuntimeError, UnsupportedKernelError

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


def call(path: str, *arrays: Any, leading: tuple[Any, ...] = (), **kwargs: Any) -> Any:
    """``jt.triton_call(*leading, *arrays, **kwargs)`` under ``jax.jit`` (the arrays its arguments) on ``path``: a
    CPU launcher, or the GPU."""
    if path == "cuda":
        device = jax.devices("cuda")[0]
        arrays = tuple(jax.device_put(a, device) for a in arrays)
        return jax.jit(lambda *a: jt.triton_call(*leading, *a, **kwargs))(*arrays)
    return jax.jit(lambda *a: jt.triton_call(*leading, *a, launcher=path, **kwargs))(*arrays)


def f32(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.float32)


# -- a fused attention pruned on N_CTX, passed by keyword (Triton's fused-attention tutorial) ----------------------

PRUNED_WITH: list[tuple[dict[str, Any], dict[str, Any]]] = []


def prune_invalid_configs(configs: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
    """As the tutorial prunes: on ``N_CTX`` and ``STAGE``, which its launch passes by keyword, so Triton hands them
    over in ``kwargs`` (``named_args`` holds the positional arguments only)."""
    PRUNED_WITH.append((named_args, kwargs))
    n_ctx, stage = kwargs["N_CTX"], kwargs["STAGE"]
    return [
        c
        for c in configs
        if c.kwargs["BLOCK_M"] <= n_ctx and (c.kwargs["BLOCK_M"] >= c.kwargs["BLOCK_N"] or stage == 1)
    ]


@triton.autotune(
    configs=[triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=4) for m in (16, 32, 64) for n in (16, 32)],
    key=["N_CTX", "HEAD_DIM"],
    prune_configs_by={"early_config_prune": prune_invalid_configs},
)
@triton.jit
def attention_forward_kernel(
    sm_scale, Q, K, V, M, Out, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    STAGE: tl.constexpr,
):  # fmt: skip
    start_m = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64) * N_CTX * HEAD_DIM
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + head + offs_m[:, None] * HEAD_DIM + offs_d[None, :])
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504  # 1 / log(2): exp2 below
    hi = (start_m + 1) * BLOCK_M if STAGE == 3 else N_CTX
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(K + head + cols[None, :] * HEAD_DIM + offs_d[:, None])
        qk = tl.dot(q, k)
        if STAGE == 3:
            qk = qk * qk_scale + tl.where(offs_m[:, None] >= cols[None, :], 0, -1.0e6)
        else:
            qk = qk * qk_scale
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + head + cols[:, None] * HEAD_DIM + offs_d[None, :])
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_ij
    m_i += tl.math.log2(l_i)
    tl.store(M + tl.program_id(1) * N_CTX + offs_m, m_i)
    tl.store(Out + head + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc / l_i[:, None])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_prunes_its_configs_on_a_length_passed_by_keyword(
    path: str, causal: bool, rng: np.random.Generator
) -> None:
    heads, n_ctx, head_dim, sm_scale = 2, 32, 16, 0.3
    q, k, v = (rng.standard_normal((heads, n_ctx, head_dim)).astype(np.float32) for _ in range(3))
    PRUNED_WITH.clear()
    m, out = call(
        path,
        q,
        k,
        v,
        leading=(sm_scale,),
        kernel=attention_forward_kernel,
        out_shape=(f32(heads, n_ctx), f32(heads, n_ctx, head_dim)),
        grid=lambda meta: (triton.cdiv(n_ctx, meta["BLOCK_M"]), heads),
        N_CTX=n_ctx,
        HEAD_DIM=head_dim,
        STAGE=3 if causal else 1,
    )
    named_args, kwargs = PRUNED_WITH[0]
    assert {"N_CTX": n_ctx, "HEAD_DIM": head_dim, "STAGE": 3 if causal else 1}.items() <= kwargs.items()
    assert "N_CTX" not in named_args and named_args["sm_scale"] == sm_scale and named_args["Q"].shape == q.shape
    scores = np.einsum("hmd,hnd->hmn", q.astype(np.float64), k.astype(np.float64)) * sm_scale
    if causal:
        scores = np.where(np.tri(n_ctx, dtype=bool), scores, -np.inf)
    top = scores.max(-1, keepdims=True)
    weights = np.exp(scores - top)
    total = weights.sum(-1, keepdims=True)
    tolerance = 2e-3 if path == "cuda" else 2e-5  # a GPU's tl.dot of float32 multiplies in TF32
    np.testing.assert_allclose(np.asarray(out), weights / total @ v.astype(np.float64), atol=tolerance)
    np.testing.assert_allclose(np.asarray(m), (top + np.log(total))[..., 0] / np.log(2), atol=tolerance)


# -- a chunked cumsum over a variable-length batch (flash-linear-attention) ----------------------------------------


@triton.heuristics({"IS_VARLEN": lambda args: args["cu_seqlens"] is not None})
@triton.autotune(
    configs=[triton.Config({"BT": bt}, num_warps=w) for bt in (16, 32, 64) for w in (2, 4)],
    key=["B", "H", "IS_VARLEN", "REVERSE"],
)
@triton.jit(do_not_specialize=["T"])
def global_cumsum_kernel(
    s, o, cu_seqlens, T, B: tl.constexpr, H: tl.constexpr, BT: tl.constexpr, REVERSE: tl.constexpr,
    IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """Each program takes one sequence of one head: its rows are ``cu_seqlens[i]`` to ``cu_seqlens[i + 1]``."""
    i_nh = tl.program_id(0)
    i_n, i_h = i_nh // H, i_nh % H
    if IS_VARLEN:
        bos, eos = tl.load(cu_seqlens + i_n).to(tl.int32), tl.load(cu_seqlens + i_n + 1).to(tl.int32)
    else:
        bos, eos = i_n * T, i_n * T + T
    T = eos - bos
    carried = tl.zeros([], dtype=tl.float32)
    chunks = tl.cdiv(T, BT)
    for i_c in range(chunks):
        i_t = chunks - 1 - i_c if REVERSE else i_c
        rows = i_t * BT + tl.arange(0, BT)
        inside = rows < T
        b_s = tl.load(s + (bos + rows) * H + i_h, mask=inside, other=0).to(tl.float32)
        b_o = tl.cumsum(b_s, axis=0)
        b_ss = tl.sum(b_s, 0)
        if REVERSE:
            b_o = -b_o + b_ss + b_s
        b_o += carried
        carried += b_ss
        tl.store(o + (bos + rows) * H + i_h, b_o.to(o.dtype.element_ty), mask=inside)


def segmented_cumsum(x: np.ndarray, offsets: np.ndarray, reverse: bool) -> np.ndarray:
    want = np.full(x.shape, np.nan)
    for start, end in itertools.pairwise(offsets):
        part = x[start:end].astype(np.float64)
        want[start:end] = np.cumsum(part[::-1], axis=0)[::-1] if reverse else np.cumsum(part, axis=0)
    return want


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("reverse", [False, True])
def test_variable_length_cumsum_runs_with_a_fixed_grid_whatever_its_chunk_size(
    path: str, reverse: bool, rng: np.random.Generator
) -> None:
    """The grid is one program per sequence and head for every ``BT``: the coverage check runs on the compiled
    path's scratch operands, whose integers are no offsets, and must not refuse a configuration for what the
    offsets decide."""
    heads = 2
    offsets = np.concatenate([[0], np.sort(rng.choice(np.arange(1, 150), 4, replace=False)), [150]]).astype(np.int32)
    x = rng.standard_normal((150, heads)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigSkippedWarning)
        out = call(
            path,
            s=x,
            cu_seqlens=offsets,
            T=150,
            kernel=global_cumsum_kernel,
            out_shape=x,
            grid=(len(offsets) - 1) * heads,
            B=1,
            H=heads,
            REVERSE=reverse,
        )
    np.testing.assert_allclose(np.asarray(out), segmented_cumsum(x, offsets, reverse), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", ["compiled", "interpreter"])
def test_variable_length_cumsum_leaves_the_padding_after_the_last_sequence_as_triton_does(
    path: str, rng: np.random.Generator
) -> None:
    """Rows past ``cu_seqlens[-1]`` belong to no sequence: no configuration writes them, and the call runs."""
    offsets = np.array([0, 30, 100], np.int32)
    x = rng.standard_normal((128, 1)).astype(np.float32)
    with jt.cpu_checks(unwritten="ignore"):  # the race check would report the padding, which stays unwritten
        out = call(
            path, s=x, cu_seqlens=offsets, T=128, kernel=global_cumsum_kernel, out_shape=x, grid=2, B=1, H=1,
            REVERSE=False,
        )  # fmt: skip
    np.testing.assert_allclose(np.asarray(out)[:100], segmented_cumsum(x, offsets, False)[:100], rtol=1e-5, atol=1e-5)
    assert np.isnan(np.asarray(out)[100:]).all()  # unwritten, poisoned as every unwritten output element is


# -- an RMSNorm weight gradient over row and column blocks (FlagGems) ----------------------------------------------


@triton.jit
def rms_norm_grad_dw_kernel(
    X, DY, INV_RMS, DW, x_stride_r, x_stride_c, M, N, ROW_BLOCK_SIZE: tl.constexpr, COL_BLOCK_SIZE: tl.constexpr
):
    """Program ``(r, c)`` sums ``dy * x * rstd`` over row block ``r`` of column block ``c``: one row of partial
    sums per row block. ``INV_RMS``'s offsets do not depend on the column block."""
    row_pid = tl.program_id(0)
    col_pid = tl.program_id(1)
    row_start = row_pid * ROW_BLOCK_SIZE
    col_start = col_pid * COL_BLOCK_SIZE
    offset = row_start * x_stride_r + col_start * x_stride_c
    X += offset
    DY += offset
    INV_RMS += row_start
    rows = tl.arange(0, ROW_BLOCK_SIZE)
    cols = tl.arange(0, COL_BLOCK_SIZE)
    row_mask = (row_start + rows) < M
    col_mask = (col_start + cols) < N
    mask = row_mask[:, None] & col_mask[None, :]
    x = tl.load(X + rows[:, None] * x_stride_r + cols[None, :] * x_stride_c, mask, other=0.0).to(tl.float32)
    inv_rms = tl.load(INV_RMS + rows, row_mask, other=0.0).to(tl.float32)
    dy = tl.load(DY + rows[:, None] * x_stride_r + cols[None, :] * x_stride_c, mask, other=0.0).to(tl.float32)
    partial = tl.sum(x * dy * inv_rms[:, None], axis=0)
    tl.store(DW + row_pid * N + col_start + cols, partial, mask=col_mask)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("m", "n"), [(40, 512), (33, 1000), (48, 256), (7, 768)])
def test_rms_norm_weight_gradient_over_row_and_column_blocks(
    path: str, m: int, n: int, rng: np.random.Generator
) -> None:
    x, dy = (rng.standard_normal((m, n)).astype(np.float32) for _ in range(2))
    inv_rms = rng.uniform(0.5, 2.0, m).astype(np.float32)
    row_blocks = triton.cdiv(m, 16)
    partial = call(
        path,
        X=x,
        DY=dy,
        INV_RMS=inv_rms,
        x_stride_r=n,
        x_stride_c=1,
        M=m,
        N=n,
        kernel=rms_norm_grad_dw_kernel,
        out_shape=f32(row_blocks, n),
        grid=(row_blocks, triton.cdiv(n, 256)),
        ROW_BLOCK_SIZE=16,
        COL_BLOCK_SIZE=256,
    )
    wide = x.astype(np.float64) * dy * inv_rms[:, None]
    want = np.stack([wide[r * 16 : (r + 1) * 16].sum(0) for r in range(row_blocks)])
    np.testing.assert_allclose(np.asarray(partial), want, rtol=1e-5, atol=1e-5)


@triton.jit
def rows_scaled_kernel(x_ptr, scale_ptr, out_ptr, rows, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Program ``(r, c)`` scales block ``c`` of rows block ``r``; its scales' offsets do not depend on ``c``, and
    its mask lets the last block read past ``scale``'s end when ``rows`` is too large."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    scale = tl.load(scale_ptr + r, mask=r < rows, other=0.0)
    offsets = r[:, None] * (BLOCK_C * tl.num_programs(1)) + c[None, :]
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) * scale[:, None])


def test_a_load_repeated_across_a_grid_axis_that_strays_is_named() -> None:
    x = jnp.ones((32, 64), jnp.float32)
    scale = jnp.arange(24, dtype=jnp.float32)
    kwargs = dict(kernel=rows_scaled_kernel, out_shape=x, grid=(2, 2), BLOCK_R=16, BLOCK_C=32)
    np.testing.assert_array_equal(
        jt.triton_call(x, jnp.arange(32, dtype=jnp.float32), rows=32, **kwargs), np.arange(32.0)[:, None] * x
    )
    with pytest.raises(jax.errors.JaxRuntimeError) as raised:
        jax.block_until_ready(jt.triton_call(x, scale, rows=32, **kwargs))
    assert "from argument 'scale_ptr' at element 24 (past its end;" in str(raised.value)


# -- optional outputs tested with `if DW:` (FlagGems) --------------------------------------------------------------


@triton.jit
def scale_and_maybe_grad_kernel(X, W, Y, DW, n, BLOCK: tl.constexpr):
    """``y = x * w``, and ``dw = x`` where the caller wants it: ``W`` and ``DW`` may be ``None``."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(X + offsets, mask=mask)
    if W:
        x = x * tl.load(W + offsets, mask=mask)
    tl.store(Y + offsets, x, mask=mask)
    if DW:
        tl.store(DW + offsets, tl.load(X + offsets, mask=mask), mask=mask)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("with_grad", [True, False])
def test_an_optional_pointer_tested_with_if_is_true_for_an_array_and_false_for_none(
    path: str, weighted: bool, with_grad: bool, rng: np.random.Generator
) -> None:
    x, w = (rng.standard_normal(40).astype(np.float32) for _ in range(2))
    optional = {"W": w if weighted else None, **({} if with_grad else {"DW": None})}
    outs = call(
        path,
        X=x,
        **optional,
        kernel=scale_and_maybe_grad_kernel,
        out_shape=(x,) * (2 if with_grad else 1),  # Y, then DW where the call wants it
        grid=3,
        n=40,
        BLOCK=16,
    )
    np.testing.assert_array_equal(np.asarray(outs[0]), x * w if weighted else x)
    if with_grad:
        np.testing.assert_array_equal(np.asarray(outs[1]), x)


@triton.jit
def aligned_copy_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    if x_ptr.to(tl.int64, bitcast=True) % 16 == 0:
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))


def test_a_pointer_used_as_a_number_is_handed_over_saying_so() -> None:
    """The compiled path knows that an argument's pointer is not null, not its address."""
    x = jnp.ones(16, jnp.float32)
    with pytest.raises(UnsupportedKernelError, match=r"a pointer's address used as a number"):
        jt.triton_call(x, kernel=aligned_copy_kernel, out_shape=x, grid=1, BLOCK=16, launcher="compiled")


# -- a layer norm whose backward adds partial gradients under a spin lock (Triton's layer-norm tutorial) ----------


@triton.jit
def layer_norm_fwd_kernel(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    X += row * stride
    Y += row * stride
    x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    centred = tl.where(mask, x - mean, 0.0)
    rstd = 1 / tl.sqrt(tl.sum(centred * centred, axis=0) / N + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    w = tl.load(W + cols, mask=mask)
    b = tl.load(B + cols, mask=mask)
    tl.store(Y + cols, centred * rstd * w + b, mask=mask)


@triton.jit
def layer_norm_bwd_dx_fused_kernel(
    DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride, N, GROUP_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr
):
    """``dx`` of one row; its ``dw``/``db`` added into one of ``GROUP_SIZE_M`` rows of partial sums, under that
    row's lock (``Lock[g]``; ``Lock[GROUP_SIZE_M + g]`` says whether the row holds a sum yet)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    lock_id = row % GROUP_SIZE_M
    Lock += lock_id
    Count = Lock + GROUP_SIZE_M
    DW = DW + lock_id * N + cols
    DB = DB + lock_id * N + cols
    x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + cols, mask=mask, other=0).to(tl.float32)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    wdy = tl.where(mask, w * dy, 0.0)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    tl.store(DX + cols, (wdy - (xhat * c1 + c2)) * rstd, mask=mask)
    partial_dw = (dy * xhat).to(w.dtype)
    partial_db = dy.to(w.dtype)
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    if count == 0:  # the first program of the group writes its sums, the others add to them
        tl.atomic_xchg(Count, 1)
    else:
        partial_dw += tl.load(DW, mask=mask)
        partial_db += tl.load(DB, mask=mask)
    tl.store(DW, partial_dw, mask=mask)
    tl.store(DB, partial_db, mask=mask)
    tl.atomic_xchg(Lock, 0)


@triton.jit
def layer_norm_bwd_dwdb_kernel(
    DW, DB, FINAL_DW, FINAL_DB, M, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr
):
    cols = tl.program_id(0) * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    dw = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    db = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for i in range(0, M, BLOCK_SIZE_M):
        rows = i + tl.arange(0, BLOCK_SIZE_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offsets = rows[:, None] * N + cols[None, :]
        dw += tl.load(DW + offsets, mask=mask, other=0.0)
        db += tl.load(DB + offsets, mask=mask, other=0.0)
    tl.store(FINAL_DW + cols, tl.sum(dw, axis=0), mask=cols < N)
    tl.store(FINAL_DB + cols, tl.sum(db, axis=0), mask=cols < N)


def layer_norm_backward(path: str, x: Any, w: Any, b: Any, dy: Any, group: int) -> tuple[Any, ...]:
    m, n = x.shape
    block = triton.next_power_of_2(n)
    y, mean, rstd = call(
        path, X=x, W=w, B=b, kernel=layer_norm_fwd_kernel, out_shape=(f32(m, n), f32(m), f32(m)), grid=m, stride=n,
        N=n, eps=1e-5, BLOCK_SIZE=block,
    )  # fmt: skip
    locks = jax.ShapeDtypeStruct((2 * group,), jnp.int32)
    dx, partial_dw, partial_db, _ = call(
        path,
        DY=dy,
        X=x,
        W=w,
        Mean=mean,
        Rstd=rstd,
        kernel=layer_norm_bwd_dx_fused_kernel,
        out_shape=(f32(m, n), f32(group, n), f32(group, n), locks),  # DX, DW, DB, Lock
        zeroed_outputs=(3,),  # the locks start free, the partial sums as garbage
        grid=m,
        stride=n,
        N=n,
        GROUP_SIZE_M=group,
        BLOCK_SIZE_N=block,
    )
    dw, db = call(
        path,
        partial_dw,
        partial_db,
        kernel=layer_norm_bwd_dwdb_kernel,
        out_shape=(f32(n), f32(n)),
        grid=lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE_N"]),),
        M=group,
        N=n,
        BLOCK_SIZE_M=32,
        BLOCK_SIZE_N=128,
    )
    return y, dx, dw, db


@pytest.mark.parametrize("path", PATHS)
def test_layer_norm_forward_and_backward_with_a_spin_lock(path: str, rng: np.random.Generator) -> None:
    m, n, group = 40, 200, 8  # five rows add into each row of partial sums
    x = (rng.standard_normal((m, n)) * 0.5 - 2.3).astype(np.float32)
    w, b = (rng.uniform(0.5, 1.5, n).astype(np.float32) for _ in range(2))
    dy = (0.1 * rng.standard_normal((m, n))).astype(np.float32)
    y, dx, dw, db = layer_norm_backward(path, x, w, b, dy, group)
    wide = x.astype(np.float64)
    xhat = (wide - wide.mean(1, keepdims=True)) / np.sqrt(wide.var(1, keepdims=True) + 1e-5)
    rstd = 1 / np.sqrt(wide.var(1, keepdims=True) + 1e-5)
    wdy = w * dy.astype(np.float64)
    want_dx = rstd * (wdy - xhat * (xhat * wdy).mean(1, keepdims=True) - wdy.mean(1, keepdims=True))
    np.testing.assert_allclose(np.asarray(y), xhat * w + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(dx), want_dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(dw), (dy * xhat).sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(db), dy.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)


@triton.jit
def forgets_to_release_kernel(x_ptr, out_ptr, Lock):
    """Every program takes the lock; none releases it."""
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    row = tl.program_id(0)
    tl.store(out_ptr + row, tl.load(x_ptr + row) + 1)


def released_never(x: jax.Array, lock: jax.ShapeDtypeStruct, grid: int, launcher: str) -> Any:
    kernel = forgets_to_release_kernel
    return jt.triton_call(x, kernel=kernel, out_shape=(x, lock), zeroed_outputs=(1,), grid=grid, launcher=launcher)


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_a_lock_that_no_program_releases_fails_the_call_instead_of_spinning_forever(launcher: str) -> None:
    """Both CPU paths run the programs in order: the second one would wait for the first, which has ended."""
    x = jnp.arange(4, dtype=jnp.float32)
    lock = jax.ShapeDtypeStruct((1,), jnp.int32)
    with pytest.raises(jax.errors.JaxRuntimeError) as raised:
        jax.block_until_ready(released_never(x, lock, grid=4, launcher=launcher))
    error = jt.errors.from_runtime_error(raised.value)
    assert isinstance(error, KernelRuntimeError)
    assert "triton_call 'forgets_to_release_kernel' never finishes: a program waits in a while loop" in str(error)
    assert "release every lock before the program ends" in str(error)
    # One program alone takes the free lock and finishes.
    one = released_never(x[:1], lock, grid=1, launcher=launcher)
    np.testing.assert_array_equal(one[0], [1.0])
    np.testing.assert_array_equal(one[1], [1])


@triton.jit
def countdown_kernel(out_ptr, START: tl.constexpr):
    """A while loop whose trips write nothing but change what the loop carries: it ends."""
    n = tl.full((), START, tl.int32)
    steps = 0
    while n > 0:
        n = n - 1
        steps += 1
    tl.store(out_ptr, steps)


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_a_while_loop_that_changes_only_its_variables_runs_to_its_end(launcher: str) -> None:
    out = jt.triton_call(
        kernel=countdown_kernel, out_shape=jax.ShapeDtypeStruct((), jnp.int32), grid=1, START=5, launcher=launcher
    )
    assert int(out) == 5


@triton.jit
def ticket_kernel(taken_ptr, Counter, LIMIT: tl.constexpr):
    """Each program takes tickets (``tl.atomic_add`` in the loop's condition) until they run out."""
    taken = 0
    while tl.atomic_add(Counter, 1) < LIMIT:
        taken += 1
    tl.store(taken_ptr + tl.program_id(0), taken)


@pytest.mark.parametrize("path", PATHS)
def test_a_while_loop_whose_condition_takes_tickets_hands_out_each_once(path: str) -> None:
    """However the programs interleave, the tickets go out once each and every program asks once more than it
    gets (a loop whose condition stores makes progress here: it must not be taken for a spin)."""
    taken, counter = call(
        path,
        kernel=ticket_kernel,
        out_shape=(jax.ShapeDtypeStruct((6,), jnp.int32), jax.ShapeDtypeStruct((1,), jnp.int32)),
        zeroed_outputs=(1,),
        grid=6,
        LIMIT=20,
    )
    assert int(np.asarray(taken).sum()) == 20 and int(np.asarray(counter)[0]) == 20 + 6


# -- a top-k by a bitonic argsort of values and indices (FlagGems) -------------------------------------------------


@triton.jit
def _swap_pairs(x, ids, flip, i: core.constexpr, n_dims: core.constexpr):
    """One compare-and-swap step of the network: each element's partner along axis ``i`` of the hypercube, found by
    summing the pair's two halves against a 0/1 mask, and swapped in (values and indices) where out of order."""
    n_outer: core.constexpr = x.numel >> n_dims
    shape: core.constexpr = [n_outer * 2**i, 2, 2 ** (n_dims - i - 1)]
    y = core.reshape(x, shape)
    y_ids = core.reshape(ids, shape)
    mask = core.arange(0, 2)[None, :, None]
    left = core.reshape(core.broadcast_to(tl.sum(y * (1 - mask), 1)[:, None, :], shape).to(x.dtype), x.shape)
    right = core.reshape(core.broadcast_to(tl.sum(y * mask, 1)[:, None, :], shape).to(x.dtype), x.shape)
    left_ids = core.reshape(core.broadcast_to(tl.sum(y_ids * (1 - mask), 1)[:, None, :], shape), ids.shape)
    right_ids = core.reshape(core.broadcast_to(tl.sum(y_ids * mask, 1)[:, None, :], shape), ids.shape)
    swap = ((left > right) ^ flip) != 0
    bits = x.to(core.int32, bitcast=True)
    swapped = bits ^ core.where(swap, left.to(core.int32, bitcast=True) ^ right.to(core.int32, bitcast=True), 0)
    return swapped.to(x.dtype, bitcast=True), ids ^ core.where(swap, left_ids ^ right_ids, zeros_like(ids))


@triton.jit
def _bitonic_stage(x, ids, stage: core.constexpr, order: core.constexpr, n_dims: core.constexpr):
    n_outer: core.constexpr = x.numel >> n_dims
    if order == 2:  # alternating runs
        shape: core.constexpr = [n_outer * 2 ** (n_dims - 1 - stage), 2, 2**stage]
        flip = core.reshape(core.broadcast_to(core.arange(0, 2)[None, :, None], shape), x.shape)
    else:
        flip = order
    for i in core.static_range(stage):
        x, ids = _swap_pairs(x, ids, flip, i + (n_dims - stage), n_dims)
    return x, ids


@triton.jit
def argsort(x, ids, descending: core.constexpr):
    n_dims: core.constexpr = _log2(x.shape[0])
    for i in core.static_range(1, n_dims + 1):
        x, ids = _bitonic_stage(x, ids, i, 2 if i < n_dims else descending, n_dims)
    return x, ids


@triton.jit
def topk_by_argsort_kernel(x_ptr, y_ptr, index_ptr, k: tl.constexpr, N: tl.constexpr, DESCENDING: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, N)
    values, ids = argsort(tl.load(x_ptr + row * N + cols), cols, DESCENDING)
    tl.store(y_ptr + row * k + cols, values, mask=cols < k)
    tl.store(index_ptr + row * k + cols, ids, mask=cols < k)


def topk(path: str, x: np.ndarray, k: int, descending: bool = True) -> tuple[Any, Any]:
    rows, n = x.shape
    outs = (f32(rows, k), jax.ShapeDtypeStruct((rows, k), jnp.int32))
    return call(
        path, x, kernel=topk_by_argsort_kernel, out_shape=outs, grid=rows, k=k, N=n, DESCENDING=descending
    )  # fmt: skip


#: Where XLA compiles a sorting network's chain of helpers slowly, the tests of what it computes run on the other sets.
SLOW_NETWORKS = pytest.mark.skipif(
    not _compat.barriers_outlast_fusion(),
    reason="jaxlib 0.10's XLA removes the optimisation barriers between a sorting network's steps before fusing: "
    "this test's compiles take 34-57 s there, against 5 s with jaxlib 0.12, so it runs on the newer sets only",
)


@pytest.mark.parametrize("path", PATHS)
def test_top_300_of_512_by_a_bitonic_argsort_of_values_and_indices(path: str, rng: np.random.Generator) -> None:
    if path == "compiled" and not _compat.barriers_outlast_fusion():
        pytest.skip(SLOW_NETWORKS.kwargs["reason"])
    x = rng.permutation(4 * 512).reshape(4, 512).astype(np.float32) / 7 - 100  # distinct: one right order
    values, index = topk(path, x, 300)
    order = np.argsort(-x, axis=1, kind="stable")[:, :300]
    np.testing.assert_array_equal(np.asarray(index), order)
    np.testing.assert_array_equal(np.asarray(values), np.take_along_axis(x, order, 1))


@pytest.mark.skipif(
    not _compat.barriers_outlast_fusion(),
    reason="jaxlib 0.10's XLA removes the optimisation barriers between the steps before fusing, and duplicates each "
    "step into every later one again (100 s to compile here, against 12 s with jaxlib 0.12)",
)
def test_a_512_element_bitonic_argsort_compiles_in_seconds() -> None:
    """Its 45 compare-and-swap steps, each a helper's result handed to the next: fused, XLA duplicated every earlier
    step into each use of a later one (114 s to compile, 0.2 s to run, on the 2-core development machine); with the
    steps materialized, 1.4 s and under a millisecond."""
    x = jnp.zeros((4, 512), jnp.float32)
    outs = (f32(4, 512), jax.ShapeDtypeStruct((4, 512), jnp.int32))
    lowered = jax.jit(
        lambda v: jt.triton_call(
            v, kernel=topk_by_argsort_kernel, out_shape=outs, grid=4, k=512, N=512, DESCENDING=False,
            launcher="compiled",
        )
    ).lower(x)  # fmt: skip
    start = time.perf_counter()
    lowered.compile()
    assert time.perf_counter() - start < 30.0


@triton.jit
def sort_kernel(x_ptr, out_ptr, N: tl.constexpr, DESCENDING: tl.constexpr):
    cols = tl.program_id(0) * N + tl.arange(0, N)
    tl.store(out_ptr + cols, tl.sort(tl.load(x_ptr + cols), descending=DESCENDING))


@SLOW_NETWORKS
@pytest.mark.parametrize("descending", [False, True])
def test_sorting_networks_give_the_interpreters_bits_for_ties_and_signed_zeros(
    descending: bool, rng: np.random.Generator
) -> None:
    """Ties, and -0.0 beside +0.0: equal, so the network decides which comes first, the same on both paths. (The
    argsort's sums pick a pair's halves as ``a * 1 + b * 0``, which turns -0.0 into +0.0 and then flips the sign
    of what it swaps in: its values come out wrong there, on a GPU too, and the same on both CPU paths.)"""
    x = rng.choice(np.array([-1.5, -0.0, 0.0, 0.25, 2.0, 7.0], np.float32), size=(4, 256))
    (values, index), (values_there, index_there) = (
        [np.asarray(out) for out in topk(path, x, 256, descending)] for path in ("compiled", "interpreter")
    )
    np.testing.assert_array_equal(values.view(np.uint32), values_there.view(np.uint32))
    np.testing.assert_array_equal(index, index_there)
    sorted_by = [
        np.asarray(call(path, x, kernel=sort_kernel, out_shape=x, grid=4, N=256, DESCENDING=descending))
        for path in ("compiled", "interpreter")
    ]
    np.testing.assert_array_equal(sorted_by[0].view(np.uint32), sorted_by[1].view(np.uint32))
    want = -np.sort(-x, axis=1) if descending else np.sort(x, axis=1)
    np.testing.assert_array_equal(sorted_by[0], want)  # equal as numbers: -0.0 == 0.0
