"""Autotuned calls lowered for ``cuda`` sm90 on a host without a GPU: configurations that need more shared memory
than the target has are skipped with one warning each, as Triton's autotuner skips them, and the call lowers with the
others; with none left the error lists each configuration and why."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import pytest
import triton
import triton.language as tl
from cuda_testlib import lower_for_cuda

import jt_core as jt
from jt_core.testing import backend_config, custom_calls

#: Bytes of shared memory sm90 allows one block (its opt-in maximum).
SM90_SHARED = 227 * 1024


def matmul_configs() -> list[Any]:
    """Sixteen small-tile configurations, and one whose pipeline stages need about 384 KiB of shared memory."""
    small = [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 32, "GROUP_M": 4}, num_stages=stages, num_warps=warps)
        for bm, bn, stages, warps in itertools.product((32, 64), (32, 64), (2, 3), (2, 4))
    ]
    huge = triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 4}, num_stages=6, num_warps=8)
    return [*small[:8], huge, *small[8:]]


@triton.autotune(configs=matmul_configs(), key=["M", "N", "K"])
@triton.jit
def grouped_matmul_kernel(
    a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, c_ptr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    """``C = A @ B``, programs walking the output tiles in groups of ``GROUP_M`` rows for L2 reuse."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % per_group) % rows_in_group
    tile_n = (pid % per_group) // rows_in_group
    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = a_ptr + (rm % M)[:, None] * stride_am + rk[None, :] * stride_ak
    b = b_ptr + rk[:, None] * stride_bk + (rn % N)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        left = K - step * BLOCK_K
        acc = tl.dot(
            tl.load(a, mask=rk[None, :] < left, other=0.0), tl.load(b, mask=rk[:, None] < left, other=0.0), acc
        )
        a += BLOCK_K * stride_ak
        b += BLOCK_K * stride_bk
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def persistent_configs() -> list[Any]:
    """Three that fit sm90, and two whose stages do not (the tiles of Triton's persistent tutorial, deeper)."""
    fits = [
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": bk}, num_stages=stages, num_warps=4)
        for bk, stages in ((32, 2), (32, 3), (64, 2))
    ]
    too_deep = [
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_stages=5, num_warps=8),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128}, num_stages=4, num_warps=8),
    ]
    return [too_deep[0], *fits, too_deep[1]]


@triton.autotune(configs=persistent_configs(), key=["M", "N", "K"])
@triton.jit
def persistent_matmul_kernel(
    a_ptr, b_ptr, M, N, K, c_ptr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PROGRAMS: tl.constexpr,
):  # fmt: skip
    """``C = A @ B`` (row-major, contiguous), each of ``PROGRAMS`` programs looping over output tiles."""
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    rk = tl.arange(0, BLOCK_K)
    for tile in tl.range(tl.program_id(0), tiles, PROGRAMS):
        rm = (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for k in range(0, K, BLOCK_K):
            a = tl.load(a_ptr + (rm % M)[:, None] * K + (k + rk)[None, :], mask=(k + rk)[None, :] < K, other=0.0)
            b = tl.load(b_ptr + (k + rk)[:, None] * N + (rn % N)[None, :], mask=(k + rk)[:, None] < K, other=0.0)
            acc = tl.dot(a, b, acc)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


def grouped_matmul(a: Any, b: Any, kernel: Any = grouped_matmul_kernel) -> Any:
    (m, k), (_, n) = a.shape, b.shape
    return jt.triton_call(
        a, b, m, n, k, k, 1, n, 1, n, 1,
        kernel=kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),),
        compute_capability=90,
    )  # fmt: skip


def persistent_matmul(a: Any, b: Any, kernel: Any = persistent_matmul_kernel) -> Any:
    (m, k), (_, n) = a.shape, b.shape
    programs = 132  # an H100/H200's multiprocessors
    return jt.triton_call(
        a, b, m, n, k,
        kernel=kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=lambda meta: (min(programs, triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"])),),
        PROGRAMS=programs,
        compute_capability=90,
    )  # fmt: skip


def lowered_labels(lowered: Any) -> list[str]:
    """The configuration labels of the one jt handler call of a lowered module."""
    (op,) = custom_calls(lowered)
    config = backend_config(op)
    return [config[f"label_{c}"].decode() for c in range(config["num_configs"])]


def labels(configs: list[Any], **fixed: Any) -> list[str]:
    """How jt labels the configurations (their constexprs in signature order, then the caller's, then options)."""
    return [
        ", ".join(
            [f"{k}={v!r}" for k, v in {**c.kwargs, **fixed}.items()]
            + [f"num_warps={c.num_warps}", f"num_stages={c.num_stages}"]
        )
        for c in configs
    ]


@pytest.mark.parametrize(
    ("call", "configs", "fixed", "oversized"),
    [(grouped_matmul, matmul_configs(), {}, [8]), (persistent_matmul, persistent_configs(), {"PROGRAMS": 132}, [0, 4])],
    ids=["grouped", "persistent"],
)
def test_configs_over_the_shared_memory_limit_are_skipped_not_fatal(
    call: Any, configs: list[Any], fixed: dict[str, Any], oversized: list[int]
) -> None:
    operand = jax.ShapeDtypeStruct((256, 256), jnp.float16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lowered = lower_for_cuda(call, operand, operand)
    expected = labels(configs, **fixed)
    assert lowered_labels(lowered) == [label for i, label in enumerate(expected) if i not in oversized]
    skipped = [str(w.message) for w in caught if issubclass(w.category, jt.ConfigSkippedWarning)]
    assert len(skipped) == len(oversized)
    for index, message in zip(oversized, skipped):
        assert f"config [{expected[index]}] is skipped" in message
        needed = int(message.split(" needs ")[1].split(" bytes")[0])
        assert needed > SM90_SHARED and f"above the {SM90_SHARED} bytes" in message and "sm90" in message


def test_with_every_config_over_the_limit_the_error_lists_each() -> None:
    too_deep = [c for i, c in enumerate(persistent_configs()) if i in (0, 4)]
    kernel = triton.autotune(configs=too_deep, key=["M"])(persistent_matmul_kernel.fn)
    operand = jax.ShapeDtypeStruct((256, 256), jnp.float16)
    with pytest.raises(jt.NoUsableConfigError) as info:
        lower_for_cuda(lambda a, b: persistent_matmul(a, b, kernel), operand, operand)
    message = str(info.value)
    assert "no @triton.autotune config can run" in message
    for label in labels(too_deep, PROGRAMS=132):
        assert f"[{label}]: " in message
    assert message.count("bytes of shared memory per block") == 2
