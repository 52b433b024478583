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
from cuda_tensordesc_kernels import add_tiles, autotuned_add_tiles, read_tile

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
