"""Host-side tensor descriptors on an NVIDIA GPU through jt's handler: TMA descriptors on sm90+, checked with numpy.

On sm90 and later every descriptor is a ``CUtensorMap`` the handler encodes at launch; on older GPUs the same tests
run the decomposed form (base pointer, shape, strides).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from cuda_tensordesc_kernels import add_tiles, autotuned_add_tiles, copy_into_view, read_tile

import jt_core as jt
from jt_core.testing import load_tile

pytestmark = pytest.mark.cuda


def rand(seed: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize(
    ("shape", "block"),
    [((64, 128), (32, 64)), ((40, 48), (16, 32)), ((100, 72), (32, 32)), ((1, 8), (16, 16))],
    ids=["even", "ragged", "ragged-both", "smaller-than-a-block"],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=["f32", "f16", "bf16"])
def test_add_through_descriptors_matches_numpy(shape: tuple[int, int], block: tuple[int, int], dtype: Any) -> None:
    a, b = rand(0, shape, dtype), rand(1, shape, dtype)
    out = jax.jit(lambda x, y: add_tiles(x, y, block, launcher="jt"))(jnp.asarray(a), jnp.asarray(b))
    expected = (a.astype(np.float32) + b.astype(np.float32)).astype(dtype)
    np.testing.assert_array_equal(np.asarray(out), expected)


@pytest.mark.parametrize(("padding", "fill"), [("zero", 0.0), ("nan", np.nan)])
def test_load_across_the_edge_reads_the_padding(padding: str, fill: float) -> None:
    data = rand(2, (40, 48), np.float32)
    tile = jax.jit(lambda x: read_tile(x, (16, 32), 32, 32, padding=padding, launcher="jt"))(jnp.asarray(data))
    expected = np.full((16, 32), fill, np.float32)
    expected[:8, :16] = data[32:40, 32:48]
    np.testing.assert_array_equal(np.asarray(tile), expected)


def test_chained_descriptor_calls_in_one_jit() -> None:
    a, b = rand(3, (128, 64), np.float32), rand(4, (128, 64), np.float32)

    @jax.jit
    def f(x: Any, y: Any) -> Any:
        for _ in range(4):
            x = add_tiles(x, y, (32, 32), launcher="jt")
        return x

    def expected(x: np.ndarray) -> np.ndarray:
        for _ in range(4):
            x = x + b
        return x

    np.testing.assert_array_equal(np.asarray(f(jnp.asarray(a), jnp.asarray(b))), expected(a))
    # A second run with new buffers: the descriptors follow the new addresses.
    c = rand(5, (128, 64), np.float32)
    np.testing.assert_array_equal(np.asarray(f(jnp.asarray(c), jnp.asarray(b))), expected(c))


def test_autotuned_descriptor_call_restores_the_aliased_buffer() -> None:
    """Both configurations run on the real buffers first; the aliased output must not keep a trial's result."""
    a, b = rand(6, (96, 160), np.float32), rand(7, (96, 160), np.float32)

    out = jax.jit(lambda x, y: autotuned_add_tiles(x, y, launcher="jt"))(jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_array_equal(np.asarray(out), a + b)


# -- jax-triton 0.4's forms (from_array, views with explicit shape and strides), every dtype TMA moves ------------

TMA_DTYPES = [
    np.float32,
    np.float16,
    ml_dtypes.bfloat16,
    ml_dtypes.float8_e4m3fn,
    ml_dtypes.float8_e5m2,
    np.int8,
    np.int16,
    np.int32,
    np.uint16,
]
TMA_DTYPE_IDS = ["f32", "f16", "bf16", "fp8e4m3", "fp8e5m2", "i8", "i16", "i32", "u16"]


def values(seed: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Random values every dtype holds exactly (small integers for integer types)."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(1, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def paddings(dtype: Any) -> list[str]:
    dt = np.dtype(dtype)
    return ["zero", "nan"] if (dt.kind == "f" or "float" in dt.name) and dt.itemsize >= 2 else ["zero"]


@pytest.mark.parametrize("dtype", TMA_DTYPES, ids=TMA_DTYPE_IDS)
@pytest.mark.parametrize("form", ["from_array", "view"])
def test_every_tma_dtype_reads_the_edge_tile_with_each_padding(dtype: Any, form: str) -> None:
    """A (16, BN) tile crossing the bottom edge (and, for the view, its right edge, where the base still has
    data): inside it the data, outside it the padding."""
    aligned = 16 // np.dtype(dtype).itemsize
    bn = 64 // np.dtype(dtype).itemsize
    data = values(10, (40, 2 * bn), dtype)
    for padding in paddings(dtype):

        def call(x: Any, padding: str = padding) -> Any:
            if form == "from_array":
                desc = jt.TensorDescriptor.from_array(x, block_shape=[16, bn], padding=padding)
            else:
                desc = jt.TensorDescriptor(x, (40, bn + aligned), (2 * bn, 1), (16, bn), padding=padding)
            return load_tile(desc, 32, bn, launcher="jt")

        visible = data if form == "from_array" else data[:, : bn + aligned]
        expected = np.full((16, bn), np.nan if padding == "nan" else 0, np.float64)
        inside = visible[32:48, bn : 2 * bn].astype(np.float64)
        expected[: inside.shape[0], : inside.shape[1]] = inside
        out = np.asarray(jax.jit(call)(jnp.asarray(data))).astype(np.float64)
        np.testing.assert_array_equal(out, expected, err_msg=f"padding={padding}")


def test_store_through_a_view_leaves_the_rest_of_the_base_alone() -> None:
    base, src = values(11, (40, 64), np.float32), values(12, (40, 32), np.float32)

    f = jax.jit(lambda b, s: copy_into_view(b, s, launcher="jt"))
    expected = base.copy()
    expected[:, :32] = src
    np.testing.assert_array_equal(np.asarray(f(jnp.asarray(base), jnp.asarray(src))), expected)


@pytest.mark.parametrize("form", ["from_array", "view"])
def test_round_f32_to_tf32_rounds_as_the_tma_unit_loads(form: str) -> None:
    data = values(13, (64, 64), np.float32) * 100

    def load(rounding: bool) -> np.ndarray:
        def call(x: Any) -> Any:
            if form == "from_array":
                desc = jt.TensorDescriptor.from_array(x, [16, 32], round_f32_to_tf32=rounding)
            else:
                desc = jt.TensorDescriptor(x, (64, 32), (64, 1), (16, 32), round_f32_to_tf32=rounding)
            return load_tile(desc, 16, 0, launcher="jt")

        return np.asarray(jax.jit(call)(jnp.asarray(data)))

    exact = data[16:32, :32]
    np.testing.assert_array_equal(load(False), exact)
    rounded = load(True)
    assert not (rounded.view(np.uint32) & 0x1FFF).any(), "TF32 keeps 10 mantissa bits"
    assert np.all(np.abs(rounded - exact) <= np.abs(exact) * 2.0**-10), "within one TF32 step of the value"
    assert np.any(rounded != exact)
