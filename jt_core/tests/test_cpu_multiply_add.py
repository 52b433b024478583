"""A product and the sum that reads it round as Triton's GPU compilers round them, on both CPU paths and on every
host: fused into one rounding where Triton fuses them (``enable_fp_fusion``, the default), each rounded otherwise,
whatever the host's own compiler would contract (XLA's CPU code fuses float32 products into sums, and float16 ones on
processors with AVX-512 FP16). Every result is compared with an exact reference rounded once
(`core_rounding.rounded_once`), or per operation."""

from __future__ import annotations

import inspect
import os
from typing import Any

import hypothesis
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import triton
import triton.language as tl
from core_rounding import PRODUCTS_CONTRACTED, rounded_once
from hypothesis import strategies as st
from triton.language import semantic

import jt_core as jt
from jt_core.interpreter import libdevice

PATHS = ["compiled", "ffi"]
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]
IDS = ["float32", "float16", "bfloat16"]
#: Triton 3.6 writes ``-x`` on floats as ``0 - x`` (``arith.subf``), where newer releases negate (``arith.negf``):
#: there the product in ``-(a * b) + c`` fuses into the subtraction from zero and the sum rounds on its own.
NEGATION_SUBTRACTS = "create_fneg" not in inspect.getsource(semantic.TritonSemantic.minus)

pytestmark = pytest.mark.skipif(
    os.environ.get("JT_CPU_DIFFERENTIAL") == "1", reason="runs each path by name; the run without the comparison has it"
)


@pytest.fixture(autouse=True)
def each_path_alone(jt_cpu_paths_by_name: None) -> None:
    """Each call runs on the path it names."""


@triton.jit
def products_and_sums_kernel(a_ptr, b_ptr, c_ptr, d_ptr, out_ptr, trips, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + i)
    b = tl.load(b_ptr + i)
    c = tl.load(c_ptr + i)
    d = tl.load(d_ptr + i)
    tl.store(out_ptr + i, a * b + c)
    tl.store(out_ptr + BLOCK + i, c - a * b)
    tl.store(out_ptr + 2 * BLOCK + i, a * b + c * d)  # the left product fused, the right one rounded
    tl.store(out_ptr + 3 * BLOCK + i, -(a * b) + c)
    p = a * b
    tl.store(out_ptr + 4 * BLOCK + i, p)  # a product read by a store too is still fused into its sum
    tl.store(out_ptr + 5 * BLOCK + i, p + c)
    acc = c
    for _ in range(trips):  # a loop's body is code of its own: the product made before it rounds alone
        acc += p
    tl.store(out_ptr + 6 * BLOCK + i, acc)
    tl.store(out_ptr + 7 * BLOCK + i, tl.fma(a, b, c))


def _run(launcher: str, fusion: bool, *inputs: np.ndarray) -> np.ndarray:
    block = inputs[0].size

    def f(a: Any, b: Any, c: Any, d: Any) -> Any:
        out = jax.ShapeDtypeStruct((8 * block,), a.dtype)
        return jt.triton_call(
            a, b, c, d, trips=1 + block % 3, kernel=products_and_sums_kernel, out_shape=out, grid=1, BLOCK=block,
            enable_fp_fusion=fusion, launcher=launcher,
        )  # fmt: skip

    return np.asarray(jax.jit(f)(*inputs)).reshape(8, block)


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


@pytest.mark.parametrize("launcher", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_a_product_is_fused_into_the_sum_that_reads_it_as_triton_fuses_it(launcher: str, dtype: np.dtype) -> None:
    rng = np.random.default_rng(3)
    a, b, c, d = (rng.standard_normal(128).astype(dtype) for _ in range(4))
    out = _run(launcher, True, a, b, c, d)
    product = (a.astype(np.float64) * b.astype(np.float64)).astype(dtype)
    cd = (c.astype(np.float64) * d.astype(np.float64)).astype(dtype)
    per_op_loop = c
    for _ in range(1 + 128 % 3):
        per_op_loop = (per_op_loop.astype(np.float64) + product.astype(np.float64)).astype(dtype)
    want = [
        rounded_once(a, b, c, dtype),
        rounded_once(-a, b, c, dtype),
        rounded_once(a, b, cd, dtype),
        (c.astype(np.float64) - product).astype(dtype) if NEGATION_SUBTRACTS else rounded_once(-a, b, c, dtype),
        product,
        rounded_once(a, b, c, dtype),
        per_op_loop,
        rounded_once(a, b, c, dtype),
    ]
    for row, expected in enumerate(want):
        np.testing.assert_array_equal(_bits(out[row]), _bits(expected.astype(dtype)), err_msg=f"row {row}")
    # The fused results differ from the rounded ones: the test would see either path rounding twice.
    assert (_bits(want[0]) != _bits((product.astype(np.float64) + c.astype(np.float64)).astype(dtype))).any()


@pytest.mark.parametrize("launcher", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_without_fusion_every_product_and_sum_rounds_on_its_own(launcher: str, dtype: np.dtype) -> None:
    if launcher == "compiled" and dtype == np.float32 and PRODUCTS_CONTRACTED:
        pytest.skip(PRODUCTS_CONTRACTED)
    rng = np.random.default_rng(4)
    a, b, c, d = (rng.standard_normal(128).astype(dtype) for _ in range(4))
    out = _run(launcher, False, a, b, c, d)
    wide = [x.astype(np.float64) for x in (a, b, c, d)]
    product = (wide[0] * wide[1]).astype(dtype).astype(np.float64)
    cd = (wide[2] * wide[3]).astype(dtype).astype(np.float64)
    np.testing.assert_array_equal(_bits(out[0]), _bits((product + wide[2]).astype(dtype)))
    np.testing.assert_array_equal(_bits(out[1]), _bits((wide[2] - product).astype(dtype)))
    np.testing.assert_array_equal(_bits(out[2]), _bits((product + cd).astype(dtype)))
    np.testing.assert_array_equal(_bits(out[7]), _bits(rounded_once(a, b, c, dtype)))  # tl.fma is always fused


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("launcher", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_zeros_keep_their_signs_through_products_and_sums(launcher: str, dtype: np.dtype, fusion: bool) -> None:
    # Every sign of a zero product beside every sign of a zero addend, and a product that cancels the addend: the
    # sum is -0.0 only where both are -0.0 (IEEE 754, 6.3), whether or not the product is fused.
    a = np.array([0.0, -0.0, 0.0, -0.0, 0.0, -0.0, 1.0, -1.0], dtype)
    b = np.array([-1.0, 1.0, 1.0, -1.0, -1.0, -1.0, 1.0, 1.0], dtype)
    c = np.array([-0.0, -0.0, -0.0, -0.0, 0.0, 0.0, -1.0, 1.0], dtype)
    out = _run(launcher, fusion, a, b, c, c)
    for row in (0, 5, 7):  # a * b + c, p + c and tl.fma(a, b, c)
        np.testing.assert_array_equal(np.signbit(out[row]), [True, True, False, False, False, False, False, False])


@triton.jit
def dot_of_products_kernel(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr, tl.sum(tl.load(a_ptr + i) * tl.load(b_ptr + i), axis=0))


def test_a_product_that_rounds_alone_is_kept_from_the_hosts_contraction() -> None:
    """A product a sum reads without fusing it (a reduction here) reaches XLA behind an optimisation barrier: XLA's
    CPU code would otherwise fuse it into the reduction's first additions, on some hosts and not others."""
    a, b = (np.random.default_rng(5).standard_normal(64).astype(np.float32) for _ in range(2))

    def f(x: Any, y: Any) -> Any:
        out = jax.ShapeDtypeStruct((), jnp.float32)
        return jt.triton_call(x, y, kernel=dot_of_products_kernel, out_shape=out, grid=1, BLOCK=64, launcher="compiled")

    assert "optimization_barrier" in jax.jit(f).lower(a, b).as_text()
    products = (a.astype(np.float64) * b).astype(np.float32)
    while products.size > 1:  # the halves pairwise, each sum rounded: the CPU paths' one order
        half = products.size // 2
        products = products[:half] + products[half:]
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(a, b)), products[0])


#: Values whose products and sums stay finite in their type.
_FLOATS = {
    "float32": st.floats(-(2.0**60), 2.0**60, width=32, allow_subnormal=False),
    "float16": st.floats(-200.0, 200.0, width=16, allow_subnormal=False),
    "bfloat16": st.floats(-(2.0**60), 2.0**60, width=32, allow_subnormal=False),
}


@pytest.mark.parametrize("name", list(_FLOATS))
@hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
@hypothesis.given(data=st.data())
def test_the_fused_multiply_add_is_rounded_once_in_numpy_and_in_jax(name: str, data: Any) -> None:
    dtype = np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)
    a, b, c = (np.asarray(data.draw(st.lists(_FLOATS[name], min_size=8, max_size=8))).astype(dtype) for _ in range(3))
    want = rounded_once(a, b, c, dtype)
    numpy_result = np.asarray(libdevice.fused_multiply_add(libdevice.numpy_arrays(), a, b, c)).astype(dtype)
    with jax.enable_x64(True):
        jax_result = np.asarray(
            jax.jit(lambda x, y, z: libdevice.fused_multiply_add(libdevice.jax_arrays(), x, y, z))(a, b, c)
        ).astype(dtype)
    keep = np.isfinite(want.astype(np.float64))
    np.testing.assert_array_equal(_bits(numpy_result[keep]), _bits(want[keep]))
    # XLA's CPU threads flush subnormal results; the interpreter keeps them (docs/pages/cpu.md).
    normal = keep & ((np.abs(want.astype(np.float64)) >= np.finfo(np.float32).tiny) | (want.astype(np.float64) == 0))
    np.testing.assert_array_equal(_bits(jax_result[normal]), _bits(want[normal]))
