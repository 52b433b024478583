"""Gluon kernels with host-side tensor descriptors, lowered for ``cuda`` sm90 without a GPU."""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from gluon_tensordesc_kernels import tma_add, tma_add_kernel, tma_copy, tma_read_tile
from triton.experimental.gluon import language as gl

import jt_core as jt
from jt_core.errors import JtError, KernelCallValueError

SPEC = jax.ShapeDtypeStruct((40, 72), jnp.float16)


def lowered_call(fn: Any, *specs: Any) -> tuple[Any, Any]:
    """The bound call of the only ``triton_call`` in ``fn`` and the text of its lowering for cuda."""
    jaxpr = jax.make_jaxpr(fn)(*specs)
    (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "triton_kernel_call"]
    text = jax.jit(fn).trace(*specs).lower(lowering_platforms=("cuda",)).as_text()
    return eqn.params["call"], text


@pytest.mark.requires_plugin("cuda")
def test_signature_carries_the_shared_layout_like_gluon_writes_it() -> None:
    call, text = lowered_call(lambda a, b: tma_add(a, b, (32, 64), compute_capability=90), SPEC, SPEC)
    signature = call.specialization(call.configs[0]).signature
    layout = gl.NVMMASharedLayout.get_default_for([32, 64], gl.float16)
    assert signature["a_desc"] == f"tensordesc<fp16[32, 64],{layout!r}>"
    assert "tensormaps_0" in text and "triton_kernel_call_jt_cuda" in text


@pytest.mark.requires_plugin("cuda")
def test_copy_lowers_with_one_tensor_map_per_descriptor() -> None:
    _, text = lowered_call(lambda x: tma_copy(x, (32, 64), compute_capability=90), SPEC)
    match = re.search(r"tensormaps_0 = array<i64: ([-0-9, ]+)>", text)
    assert match is not None
    values = [int(v) for v in match.group(1).split(",")]
    # two records: the input (operand 0) and the aliased output (result 0); FLOAT16, rank 2, 128-byte swizzle
    assert len(values) == 40
    assert values[:4] == [0, 0, 6, 2] and values[20:24] == [1, 0, 6, 2] and values[4] == 3
    assert values[6:8] == [72, 40]


def test_descriptor_without_layout_is_refused_for_gluon_kernels() -> None:
    x = jnp.zeros((64, 64), jnp.float16)
    with pytest.raises(KernelCallValueError, match=r"'a_desc' has no layout, but gluon kernels need"):
        jt.triton_call(
            jt.TensorDescriptor(x, [32, 64]),
            jt.TensorDescriptor(x, [32, 64]),
            jt.TensorDescriptor(x, [32, 64]),
            kernel=tma_add_kernel,
            out_shape=x,
            input_output_aliases={2: 0},
            grid=(2, 1),
            BM=32,
            BN=64,
        )


def test_gluon_descriptor_call_on_the_cpu_is_refused() -> None:
    x = jnp.zeros((64, 64), jnp.float16)
    with pytest.raises((JtError, jax.errors.JaxRuntimeError), match=r"gluon kernels cannot run on the 'cpu'"):
        jax.jit(lambda a, b: tma_add(a, b, (32, 64)))(x, x)


@pytest.mark.requires_plugin("cuda")
@pytest.mark.parametrize(
    "dtype",
    [
        jnp.float32,
        jnp.float16,
        jnp.bfloat16,
        jnp.float8_e4m3fn,
        jnp.float8_e5m2,
        jnp.int8,
        jnp.int16,
        jnp.int32,
        jnp.uint16,
    ],
    ids=str,
)
@pytest.mark.parametrize("view", [None, (40, 64)], ids=["from_array", "view"])
def test_read_tile_through_from_array_and_view_descriptors_lowers(dtype: Any, view: Any) -> None:
    """What the GPU tests run, compiled for sm90 here: the view's shape and the base's stride are in the record."""
    spec = jax.ShapeDtypeStruct((40, 128), dtype)
    block = (16, 64)
    rounding = {"round_f32_to_tf32": True} if dtype == jnp.float32 else {}
    _, text = lowered_call(lambda x: tma_read_tile(x, view, block, 16, 0, compute_capability=90, **rounding), spec)
    match = re.search(r"tensormaps_0 = array<i64: ([-0-9, ]+)>", text)
    assert match is not None
    values = [int(v) for v in match.group(1).split(",")]
    itemsize = jnp.dtype(dtype).itemsize
    assert values[6:8] == [64 if view else 128, 40] and values[11] == 128 * itemsize
    assert values[2] == (11 if rounding else values[22])  # TFLOAT32 for the rounded input only
