"""Partitioned calls over a mesh of 8 devices, lowered with the TPU's strategy: run by ``test_tpu_mesh.py`` in a
fresh interpreter with 8 CPU host devices (JAX fixes the count when it starts). Not collected by the normal run."""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from tpu_testlib import tpu_strategy_on_cpu

import jt_core as jt

assert "xla_force_host_platform_device_count=8" in os.environ.get("XLA_FLAGS", ""), "run with 8 host devices"

ROWS, COLS = 64, 256


@triton.jit
def row_norm_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    scale = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(out_ptr + row * n_cols + cols, x * scale * w, mask=mask)


@triton.jit
def gelu_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476)))


@jt.partitioned(jt.BatchDims(0, whole=(1,)))  # every shard takes the weight whole
def row_norm(x: Any, w: Any) -> Any:
    return jt.triton_call(x, w, kernel=row_norm_kernel, out_shape=x, grid=x.shape[0], n_cols=COLS, eps=1e-6, BLOCK=COLS)


def gelu(x: Any) -> Any:
    return jt.triton_call(
        x,
        kernel=gelu_kernel,
        out_shape=x,
        grid=lambda meta: (meta["x_ptr"].size // 128,),
        BLOCK=128,
        partition=jt.Elementwise(),
    )


def row_norm_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + 1e-6) * w


def gelu_reference(x: np.ndarray) -> np.ndarray:
    from math import erf

    return np.vectorize(lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))))(x.astype(np.float64))


CASES = [(row_norm, row_norm_reference, 2), (gelu, gelu_reference, 1)]


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(8)
    return rng.standard_normal((ROWS, COLS), dtype=np.float32), rng.standard_normal(COLS, dtype=np.float32)


def arguments(case: Any, data: Any, mesh: Any) -> list[Any]:
    x, w = data
    sharded = jax.device_put(x, NamedSharding(mesh, P("x")))
    return [sharded, jax.device_put(w, NamedSharding(mesh, P()))][: case[2]]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0].__name__)
@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit], ids=str)
def test_partitioned_calls_run_per_shard_under_the_tpu_strategy(case: Any, axis_type: Any, data: Any) -> None:
    function, reference, _ = case
    mesh = jax.make_mesh((8,), ("x",), axis_types=(axis_type,))
    with tpu_strategy_on_cpu(), jax.set_mesh(mesh):
        args = arguments(case, data, mesh)
        f = jax.jit(function)
        out = f(*args)
        text = f.lower(*args).compile().as_text()
    np.testing.assert_allclose(out, reference(*data[: case[2]]), rtol=2e-5, atol=2e-6)
    assert out.sharding.spec[0] == "x"
    assert "all-gather" not in text and "all-to-all" not in text
    assert f"f32[{ROWS // 8},{COLS}]" in text  # each device runs the kernel on its 8 rows


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0].__name__)
def test_partitioned_calls_export_for_a_tpu_mesh_and_serialize(case: Any, data: Any) -> None:
    function, _, count = case
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        specs = [
            jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32, sharding=NamedSharding(mesh, P("x"))),
            jax.ShapeDtypeStruct((COLS,), jnp.float32, sharding=NamedSharding(mesh, P())),
        ][:count]
        exported = jax.export.export(jax.jit(function), platforms=("tpu",))(*specs)
    text = exported.mlir_module()
    assert "custom_call" not in text and "f64" not in text
    assert "all_gather" not in text and "all_to_all" not in text
    assert f"tensor<{ROWS // 8}x{COLS}xf32>" in text  # the kernel's operations are on one device's rows
    restored = jax.export.deserialize(exported.serialize())
    assert restored.platforms == ("tpu",) and restored.nr_devices == 8
