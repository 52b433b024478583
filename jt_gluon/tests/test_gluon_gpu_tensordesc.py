"""Gluon kernels with host-side tensor descriptors on an sm90+ GPU: TMA loads and stores, checked with numpy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gluon_tensordesc_kernels import tma_add, tma_copy

pytestmark = pytest.mark.cuda


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
