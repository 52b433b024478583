"""Constructs the compiled CPU path takes itself, each checked against NumPy with ``JT_CPU_FALLBACK=error`` (a
hand-over to the interpreter fails the test): loops and branches that carry nothing and hold constants, early
``return``, tensor descriptors made in the kernel, 64-bit ``umulhi``, ``tl.sort``; and what a hand-over says and does
under ``JT_CPU_FALLBACK``.
"""

from __future__ import annotations

import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core.errors import CpuFallbackWarning, UnsupportedKernelError


@pytest.fixture(autouse=True)
def compiled_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CPU_FALLBACK", "error")
    monkeypatch.delenv("JT_CPU_RACE_CHECK", raising=False)  # the race check sends every call to the interpreter


def run(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    arrays = {k: v for k, v in kwargs.items() if isinstance(v, np.ndarray)}
    rest = {k: v for k, v in kwargs.items() if k not in arrays}
    return jax.jit(lambda *a, **named: jt.triton_call(*a, **named, kernel=kernel, launcher="compiled", **rest))(
        *args, **arrays
    )


@triton.jit
def strided_affine_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    # A grid-stride loop that carries nothing, holding float and integer constants.
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        inside = offsets < n
        x = tl.load(x_ptr + offsets, mask=inside, other=0.0)
        tl.store(out_ptr + offsets, x * 0.5 + scale + (offsets % 3).to(tl.float32), mask=inside)


@triton.jit
def branch_without_results_kernel(x_ptr, out_ptr, flag, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, x)
    if flag > tl.program_id(0):
        tl.store(out_ptr + offsets, x * 2.5 + 7, mask=offsets % 2 == 0)


def test_loops_and_branches_that_carry_nothing_keep_their_constants(rng: np.random.Generator) -> None:
    x = rng.standard_normal(1000).astype(np.float32)
    out = run(strided_affine_kernel, x, out_shape=x, grid=3, n=1000, scale=3.0, BLOCK=64)
    np.testing.assert_allclose(np.asarray(out), x * 0.5 + 3.0 + np.arange(1000) % 3, rtol=1e-6)
    y = x[:256]
    out = np.asarray(run(branch_without_results_kernel, y, out_shape=y, grid=4, flag=2, BLOCK=64))
    program = np.arange(256) // 64
    changed = (program < 2) & (np.arange(256) % 2 == 0)
    np.testing.assert_allclose(out, np.where(changed, y * 2.5 + 7, y), rtol=1e-6)


@triton.jit
def clamp_first(x, limit):
    if x > limit:
        return limit
    return x


@triton.jit
def early_return_kernel(x_ptr, out_ptr, n, cut, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    if pid * BLOCK >= n:
        return
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    if pid == 1:
        tl.store(out_ptr + offsets, -x, mask=offsets < n)
        return
    bound = clamp_first(tl.load(x_ptr + pid * BLOCK), cut)
    tl.store(out_ptr + offsets, x + bound, mask=offsets < n)


def test_early_returns_run_compiled(rng: np.random.Generator) -> None:
    n, block = 200, 64
    x = rng.standard_normal(n).astype(np.float32)
    out = np.asarray(run(early_return_kernel, x, out_shape=x, grid=5, n=n, cut=0.25, BLOCK=block))
    program = np.arange(n) // block
    first = x[program * block]
    want = np.where(program == 1, -x, x + np.minimum(first, 0.25))
    np.testing.assert_allclose(out, want, rtol=1e-6)


@triton.jit
def tiles_through_descriptors_kernel(x_ptr, out_ptr, acc_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    source = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN], padding_option="nan")
    target = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    total = tl.make_tensor_descriptor(acc_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    m = tl.program_id(0) * BM
    n = tl.program_id(1) * BN
    tile = source.load([m, n])
    # Outside the tensor the tile holds NaN: count those lanes, then store (a store skips them).
    outside = tl.sum((tile != tile).to(tl.float32))
    target.store([m, n], tl.where(tile == tile, tile * 2.0, 0.0) + outside)
    total.atomic_add([m, n], tl.where(tile == tile, tile, 0.0))


def test_tensor_descriptors_made_in_the_kernel_pad_clip_and_reduce(rng: np.random.Generator) -> None:
    m, n, bm, bn = 40, 52, 16, 32  # rows of 208 bytes: a TMA copy needs strides of whole 16 bytes
    x = rng.standard_normal((m, n)).astype(np.float32)
    acc = rng.standard_normal((m, n)).astype(np.float32)
    out_spec = jax.ShapeDtypeStruct((m, n), jnp.float32)
    out, total = run(
        tiles_through_descriptors_kernel,
        x_ptr=x,
        acc_ptr=acc,
        out_type=[out_spec, out_spec],
        input_output_aliases={1: 1},
        grid=(triton.cdiv(m, bm), triton.cdiv(n, bn)),
        M=m,
        N=n,
        BM=bm,
        BN=bn,
    )
    rows, cols = np.arange(m)[:, None] // bm, np.arange(n)[None, :] // bn
    tile_rows = np.minimum(m - rows * bm, bm)
    tile_cols = np.minimum(n - cols * bn, bn)
    outside = bm * bn - tile_rows * tile_cols
    np.testing.assert_allclose(np.asarray(out), x * 2 + outside, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(total), acc + x, rtol=1e-6)


def test_a_descriptor_breaking_a_tma_rule_fails_as_the_interpreter_fails(rng: np.random.Generator) -> None:
    m, n = 40, 50  # rows of 200 bytes
    x = rng.standard_normal((m, n)).astype(np.float32)
    spec = jax.ShapeDtypeStruct((m, n), jnp.float32)
    with pytest.raises(Exception, match="stride must be 16-byte aligned") as raised:
        jax.block_until_ready(
            run(
                tiles_through_descriptors_kernel,
                x_ptr=x,
                acc_ptr=x,
                out_type=[spec, spec],
                input_output_aliases={1: 1},
                grid=(3, 2),
                M=m,
                N=n,
                BM=16,
                BN=32,
            )
        )
    assert "tiles_through_descriptors_kernel" in str(raised.value)


@triton.jit
def gather_scatter_rows_kernel(x_ptr, rows_ptr, out_ptr, M, N, ROWS: tl.constexpr, BN: tl.constexpr):
    source = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[1, BN])
    target = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[1, BN])
    rows = tl.load(rows_ptr + tl.arange(0, ROWS))
    column = tl.program_id(0) * BN
    target.scatter(source.gather(rows, column) + 1.0, rows, column)


def test_gather_and_scatter_rows_through_descriptors(rng: np.random.Generator) -> None:
    m, n = 12, 64
    x = rng.standard_normal((m, n)).astype(np.float32)
    rows = np.asarray([3, 0, 11, 7, 5, 20, -1, 9], np.int32)  # two rows outside the tensor: read zeros, write nothing
    base = rng.standard_normal((m, n)).astype(np.float32)
    out = run(
        gather_scatter_rows_kernel,
        x_ptr=x,
        rows_ptr=rows,
        out_ptr=base,
        out_type=jax.ShapeDtypeStruct((m, n), jnp.float32),
        input_output_aliases={2: 0},
        grid=2,
        M=m,
        N=n,
        ROWS=8,
        BN=32,
    )
    want = base.copy()
    inside = rows[(rows >= 0) & (rows < m)]
    want[inside] = x[inside] + 1
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6)


@triton.jit
def high_halves_kernel(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.umulhi(tl.load(a_ptr + offsets), tl.load(b_ptr + offsets)))


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64, np.int64])
def test_umulhi_on_32_and_64_bit_integers(dtype: Any, rng: np.random.Generator) -> None:
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, 32, dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, 32, dtype=dtype, endpoint=True)
    a[:2], b[:2] = info.max, info.max
    with jax.enable_x64(True):
        out = np.asarray(run(high_halves_kernel, a, b, out_shape=a, grid=1, BLOCK=32))
    bits = 8 * np.dtype(dtype).itemsize
    mask = (1 << bits) - 1
    want = [((int(p) & mask) * (int(q) & mask)) >> bits for p, q in zip(a, b, strict=True)]
    np.testing.assert_array_equal(out.astype(np.uint64) & np.uint64(mask), np.asarray(want, np.uint64))


@triton.jit
def sort_rows_kernel(x_ptr, out_ptr, ROWS: tl.constexpr, COLS: tl.constexpr, DESCENDING: tl.constexpr):
    offsets = tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
    tl.store(out_ptr + offsets, tl.sort(tl.load(x_ptr + offsets), dim=1, descending=DESCENDING))


@pytest.mark.parametrize("descending", [False, True])
def test_sort_along_rows(descending: bool, rng: np.random.Generator) -> None:
    x = rng.standard_normal((8, 32)).astype(np.float32)
    out = np.asarray(run(sort_rows_kernel, x, out_shape=x, grid=1, ROWS=8, COLS=32, DESCENDING=descending))
    want = np.sort(x, axis=1)
    np.testing.assert_array_equal(out, want[:, ::-1] if descending else want)


# -- what a hand-over says, under JT_CPU_FALLBACK -----------------------------------------------------------------


@triton.jit
def printing_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    tl.device_print("x", x)
    tl.store(out_ptr + offsets, x + 1)


def _print_line() -> str:
    import inspect

    source, first = inspect.getsourcelines(printing_kernel.fn)
    number = next(first + i for i, line in enumerate(source) if "device_print" in line)
    return f'test_cpu_constructs.py:{number}: tl.device_print("x", x)'


def _printing(x: np.ndarray) -> Any:
    return jax.jit(lambda x: jt.triton_call(x, kernel=printing_kernel, out_shape=x, grid=1, BLOCK=4))(x)


def test_a_hand_over_is_logged_with_the_source_line_by_default(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("JT_CPU_FALLBACK")
    x = np.arange(4, dtype=np.float32)
    with caplog.at_level(logging.INFO, logger="jt_core.lowering"):
        np.testing.assert_array_equal(np.asarray(_printing(x)), x + 1)
    (line,) = [r.getMessage() for r in caplog.records if "cannot express" in r.getMessage()]
    assert "device printing (tl.device_print / print) at " in line and _print_line() in line, line


def test_jt_cpu_fallback_warn_warns_and_runs_in_the_interpreter(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JT_CPU_FALLBACK", "warn")
    x = np.arange(4, dtype=np.float32) + 10
    with pytest.warns(CpuFallbackWarning, match="runs in Triton's interpreter") as warned:
        np.testing.assert_array_equal(np.asarray(_printing(x)), x + 1)
    assert _print_line() in str(warned[0].message)


def test_jt_cpu_fallback_error_refuses_the_hand_over_naming_the_line() -> None:
    x = np.arange(4, dtype=np.float32) + 20
    with pytest.raises(UnsupportedKernelError, match="JT_CPU_FALLBACK=error") as raised:
        _printing(x)
    assert _print_line() in str(raised.value) and "device printing" in str(raised.value)


def test_jt_cpu_fallback_takes_three_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CPU_FALLBACK", "loud")
    with pytest.raises(ValueError, match=r"JT_CPU_FALLBACK must be one of \['info', 'warn', 'error'\], got 'loud'"):
        _printing(np.arange(4, dtype=np.float32) + 30)


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    import zlib

    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def test_the_interpreter_patches_the_language_whatever_kernels_ran_before(tmp_path: Any) -> None:
    """A kernel whose module sees ``triton.language.core`` too, run after kernels whose helpers saw it (the helpers'
    patches, recorded while the first kernel's were on, left ``tl.arange`` out: "_semantic argument must be
    provided"). In a new process, since the interpreter's patches are per process."""
    import os
    import subprocess
    import sys

    script = (
        "import sys, numpy as np, jax, jt_core as jt; sys.path.insert(0, sys.argv[1]);"
        "import test_cpu_constructs as t, core_language_kernels as c;"
        "x = np.arange(64, dtype=np.float32).reshape(4, 16) % 7;"
        "call = lambda k, **kw: np.asarray(jax.jit(lambda x: jt.triton_call(x, kernel=k, out_shape=x, "
        "launcher='interpreter', **kw))(x));"
        "call(t.sort_rows_kernel, grid=1, ROWS=4, COLS=16, DESCENDING=False);"
        "out = call(c.shifted_rows_kernel, grid=4, COLS=16);"
        "np.testing.assert_array_equal(out, x - x.max(axis=1, keepdims=True)); print('ok')"
    )
    env = {**os.environ, "JT_CACHE_DIR": str(tmp_path / "cache")}
    ran = subprocess.run(
        [sys.executable, "-c", script, os.path.dirname(__file__)], env=env, capture_output=True, text=True
    )
    assert ran.returncode == 0 and ran.stdout.strip().endswith("ok"), ran.stderr[-3000:]


@triton.jit
def integer_tiles_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    source = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    target = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    m = tl.program_id(0) * BM
    n = tl.program_id(1) * BN
    tile = source.load([m, n])
    target.store([m, n], tile * 3 - 1)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32], ids=str)
def test_integer_tensor_descriptors(rng: np.random.Generator, dtype: Any) -> None:
    m, n = 40, 64
    info = np.iinfo(dtype)
    x = rng.integers(max(info.min, -1000), min(info.max, 1000), (m, n)).astype(dtype)
    with jax.enable_x64(np.dtype(dtype).itemsize == 8):
        out = run(
            integer_tiles_kernel,
            x_ptr=x,
            out_type=jax.ShapeDtypeStruct((m, n), dtype),
            grid=(triton.cdiv(m, 16), triton.cdiv(n, 32)),
            M=m,
            N=n,
            BM=16,
            BN=32,
        )
        out = np.asarray(out)
    with np.errstate(over="ignore"):
        expected = x * dtype(3) - dtype(1)  # wrapping around as the kernel's integers do
    np.testing.assert_array_equal(out, expected)
