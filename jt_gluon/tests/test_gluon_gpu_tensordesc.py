"""Gluon kernels with host-side tensor descriptors on an sm90+ GPU: TMA loads and stores, checked with numpy."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from gluon_tensordesc_kernels import tma_add, tma_copy, tma_read_tile

pytestmark = [pytest.mark.cuda, pytest.mark.requires_plugin("cuda")]


@pytest.fixture(autouse=True)
def _needs_sm90() -> None:
    major, minor = jax.devices("cuda")[0].compute_capability.split(".")
    if int(major) * 10 + int(minor) < 90:
        pytest.skip(f"Gluon's Hopper TMA needs sm90+, this GPU is sm{major}{minor}")


def rand(seed: int, shape: tuple[int, int], dtype: type) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize(
    ("shape", "block"),
    [((64, 128), (32, 64)), ((40, 72), (32, 64)), ((130, 200), (64, 64))],
    ids=["even", "ragged", "ragged-both"],
)
def test_tma_add_through_host_descriptors_matches_numpy(shape: tuple[int, int], block: tuple[int, int]) -> None:
    a, b = rand(0, shape, np.float16), rand(1, shape, np.float16)
    out = jax.jit(lambda x, y: tma_add(x, y, block, launcher="jt"))(jnp.asarray(a), jnp.asarray(b))
    expected = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(np.asarray(out), expected)


@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=["f16", "f32"])
@pytest.mark.parametrize("shape", [(32, 64), (50, 96)], ids=["one-tile-row", "ragged"])
def test_tma_copy_through_host_descriptors(shape: tuple[int, int], dtype: type) -> None:
    x = rand(2, shape, dtype)
    out = jax.jit(lambda v: tma_copy(v, (32, 32), launcher="jt"))(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(out), x)


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
BLOCK = (16, 64)


def values(seed: int, shape: tuple[int, int], dtype: Any) -> np.ndarray:
    """Random values every dtype holds exactly (integers below the kernels' integer poison)."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(1, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", TMA_DTYPES, ids=TMA_DTYPE_IDS)
@pytest.mark.parametrize("form", ["from_array", "view"])
def test_tma_load_of_an_edge_block_reads_data_then_padding(dtype: Any, form: str) -> None:
    """A (16, 64) block at (32, 64) of a (40, 128) base: 8 rows inside; for the view (the base's left part,
    64 + 16 bytes wide) only its first 16 bytes of columns, though the base has data beyond."""
    dt = np.dtype(dtype)
    data = values(20, (40, 128), dtype)
    view = None if form == "from_array" else (40, 64 + 16 // dt.itemsize)
    visible = data if view is None else data[:, : view[1]]
    is_float = dt.kind == "f" or "float" in dt.name
    for padding in ["zero", "nan"] if is_float and dt.itemsize >= 2 else ["zero"]:
        out = jax.jit(lambda x, p=padding: tma_read_tile(x, view, BLOCK, 32, 64, padding=p, launcher="jt"))(
            jnp.asarray(data)
        )
        expected = np.full(BLOCK, np.nan if padding == "nan" else 0, np.float64)
        inside = visible[32:48, 64:128].astype(np.float64)
        expected[: inside.shape[0], : inside.shape[1]] = inside
        np.testing.assert_array_equal(np.asarray(out).astype(np.float64), expected, err_msg=f"padding={padding}")


@pytest.mark.parametrize("form", ["from_array", "view"])
def test_round_f32_to_tf32_rounds_on_the_tma_load(form: str) -> None:
    data = values(21, (40, 128), np.float32) * 100
    view = None if form == "from_array" else (40, 64)
    exact = data[16:32, :64]
    plain = jax.jit(lambda x: tma_read_tile(x, view, BLOCK, 16, 0, launcher="jt"))(jnp.asarray(data))
    np.testing.assert_array_equal(np.asarray(plain), exact)
    rounded = np.asarray(
        jax.jit(lambda x: tma_read_tile(x, view, BLOCK, 16, 0, round_f32_to_tf32=True, launcher="jt"))(
            jnp.asarray(data)
        )
    )
    assert not (rounded.view(np.uint32) & 0x1FFF).any(), "TF32 keeps 10 mantissa bits"
    assert np.all(np.abs(rounded - exact) <= np.abs(exact) * 2.0**-10), "within one TF32 step of the value"
    assert np.any(rounded != exact)
