"""vmap strategies, gradient pairs and partition rules on CUDA GPUs (skipped without one)."""

from __future__ import annotations

import zlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
from core_kernels import softmax_bwd_kernel, softmax_fwd_kernel

import jt_core as jt
from jt_core.testing import sample_add_kernel

pytestmark = pytest.mark.cuda


def add(x: Any, y: Any, vmap: str = "auto") -> Any:
    return jt.triton_call(
        x,
        y,
        n=x.size,
        kernel=sample_add_kernel,
        out_shape=x,
        grid=lambda meta: (triton.cdiv(x.size, meta["BLOCK"]),),
        BLOCK=256,
        vmap=vmap,
    )


def softmax_rows(x: Any, block: int) -> tuple[Any, Any]:
    y = jt.triton_call(x, n=x.shape[1], kernel=softmax_fwd_kernel, out_shape=x, grid=(x.shape[0],), BLOCK=block)
    return y, y


def softmax_rows_bwd(block: int, y: Any, dy: Any) -> Any:
    return jt.triton_call(dy, y, n=y.shape[1], kernel=softmax_bwd_kernel, out_shape=y, grid=(y.shape[0],), BLOCK=block)


softmax = jt.kernel_vjp(softmax_rows, softmax_rows_bwd, static_argnums=(1,))


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    # Random data, seeded per test so that a failure reproduces.
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


@pytest.mark.parametrize("vmap", ["grid", "sequential"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_vmap_strategies_on_gpu(rng: np.random.Generator, vmap: str, dtype: Any) -> None:
    x = rng.standard_normal((5, 3, 1000)).astype(dtype)
    y = rng.standard_normal((3, 1000)).astype(dtype)
    f = jax.jit(jax.vmap(jax.vmap(lambda a, b: add(a, b, vmap)), in_axes=(0, None)))
    np.testing.assert_allclose(np.asarray(f(x, y)), x + y, rtol=1e-3 if dtype == np.float16 else 1e-6)


def test_vmap_in_axes_and_large_batch_on_gpu(rng: np.random.Generator) -> None:
    x = rng.standard_normal((300, 2000), dtype=np.float32)
    y = rng.standard_normal((300,), dtype=np.float32)
    f = jax.jit(jax.vmap(add, in_axes=(1, None)))
    np.testing.assert_allclose(np.asarray(f(x, y)), x.T + y, rtol=1e-6)


def test_softmax_gradient_on_gpu(rng: np.random.Generator) -> None:
    x = rng.standard_normal((64, 300), dtype=np.float32)
    ct = rng.standard_normal((64, 300), dtype=np.float32)
    block = triton.next_power_of_2(300)
    ours = jax.jit(jax.grad(lambda a: jnp.sum(softmax(a, block) * ct)))(x)
    ref = jax.grad(lambda a: jnp.sum(jax.nn.softmax(a, axis=1) * ct))(x)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=1e-4, atol=1e-6)


def test_partitioned_call_runs_per_gpu_without_gather(rng: np.random.Generator) -> None:
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    if jax.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])
    sharding = NamedSharding(mesh, P("x"))
    x = jax.device_put(rng.standard_normal((64, 1000), dtype=np.float32), sharding)
    y = jax.device_put(rng.standard_normal((64, 1000), dtype=np.float32), sharding)
    for f in (
        jax.jit(jt.partitioned(jt.BatchDims(0))(add)),
        jax.jit(
            lambda a, b: jt.triton_call(
                a,
                b,
                n=a.size // 2,
                kernel=sample_add_kernel,
                out_shape=a,
                grid=lambda meta: (triton.cdiv(meta["x_ptr"].size, meta["BLOCK"]),),
                BLOCK=256,
                partition=jt.Elementwise(),
            )
        ),
    ):
        np.testing.assert_allclose(np.asarray(f(x, y)), np.asarray(x) + np.asarray(y), rtol=1e-6)
        assert "all-gather" not in f.lower(x, y).compile().as_text()
    g = jax.jit(jax.shard_map(add, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x")))
    np.testing.assert_allclose(np.asarray(g(x, y)), np.asarray(x) + np.asarray(y), rtol=1e-6)
