"""What jt-tpu lowers a call to, on a host without a TPU (``jax.export`` for ``tpu``): plain StableHLO, block accesses
as slices (no gather, scatter or loop where the addresses are affine in the program ids and the lanes), a K-loop of
``tl.dot`` as one product, nothing in float64."""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tpu_kernels
import tpu_model_cases
import triton
import triton.language as tl
from tpu_testlib import exported_for_tpu, operations, tpu_strategy_on_cpu

import jt_core as jt

#: The benchmark's cases whose addresses depend on data, and what they keep for it: a histogram's atomic sums are
#: one scatter, a cross entropy's load of each row's label one gather.
DATA_DEPENDENT = {"histogram": {"scatter": 1}, "cross_entropy": {"gather": 1}}

CASES = tpu_kernels.benchmark_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_benchmark_kernel_lowers_to_slices_and_products(case: tpu_kernels.Case) -> None:
    exported = exported_for_tpu(case.kernel, *case.inputs(np.random.default_rng(0)))
    ops = operations(exported)
    text = exported.mlir_module()
    assert ops["custom_call"] == 0, "the module is plain StableHLO"
    assert "f64" not in text, "a TPU has no float64"
    allowed = next((kept for key, kept in DATA_DEPENDENT.items() if key in case.name), {})
    for op in ("gather", "scatter", "while"):
        assert ops[op] <= allowed.get(op, 0), f"{ops[op]} {op} in {case.name}"
    if "matmul" in case.name:
        assert ops["dot_general"] == 1, "the K-loop is one product"
    assert sum(ops.values()) < 1000, "the lowering stays small (it was thousands of operations per K-loop)"


#: Kernels of language models (``tpu_model_cases.py``) at a model's size that lower as the benchmark's do, with the
#: most of each operation they may hold: a chunked cumsum over [8, 4096, 16] and the 13-config autotuned 4096^3 matmul.
MODEL_KERNELS_AS_SLICES = {
    "chunk cumsum": {"while": 0, "gather": 0, "scatter": 0},
    "autotuned matmul": {"while": 0, "gather": 0, "scatter": 0, "dot_general": 1},
}
MODEL_CASES = [c for c in tpu_model_cases.model_cases() if any(c.name.startswith(k) for k in MODEL_KERNELS_AS_SLICES)]


@pytest.mark.parametrize("case", MODEL_CASES, ids=[c.name for c in MODEL_CASES])
def test_model_kernels_with_affine_accesses_lower_to_slices_and_products(case: tpu_kernels.Case) -> None:
    ops = operations(exported_for_tpu(case.kernel, *case.inputs(np.random.default_rng(0))))
    ceilings = next(kept for key, kept in MODEL_KERNELS_AS_SLICES.items() if case.name.startswith(key))
    assert ops["custom_call"] == 0
    for op, most in ceilings.items():
        assert ops[op] <= most, f"{ops[op]} {op} in {case.name}"


def test_paged_decode_gathers_whole_rows_of_its_cache() -> None:
    """The KV cache's rows are found through a page table (addresses loaded from memory): each step gathers one
    index per row of head_dim elements, not one per element (8.4M indices a step at this size, where 65,536)."""
    case = next(c for c in tpu_model_cases.model_cases() if c.name.startswith("paged decode"))
    text = exported_for_tpu(case.kernel, *case.inputs(np.random.default_rng(0))).mlir_module()
    gathers = [line for line in text.splitlines() if "stablehlo.gather" in line]
    from_cache = [line for line in gathers if "(tensor<131072x4x128xbf16>" in line]
    assert len(from_cache) == 2, gathers  # k and v
    for line in from_cache:
        assert "slice_sizes = array<i64: 1, 1, 128>" in line and "tensor<32x4x8x64x3xi32>" in line, line


def test_paged_decode_counts_trips_in_32_bits_and_its_partials_are_whole_before_the_combine() -> None:
    """The key-block loop's counters are 32-bit (a TPU emulates 64-bit integers: with them the partial kernel took 14 s
    to compile on a v5e, 2.3 s without), and the partial kernel's outputs pass an optimization barrier before the
    combine kernel reads them: fused together, XLA's TPU compiler crashed (a segmentation fault in its fusion)."""
    case = next(c for c in tpu_model_cases.model_cases() if c.name.startswith("paged decode"))
    lines = exported_for_tpu(case.kernel, *case.inputs(np.random.default_rng(0))).mlir_module().splitlines()
    (loop,) = [line for line in lines if "stablehlo.while(" in line]
    carried = loop.split(" : ", 1)[1]
    assert "tensor<32x8xi32>" in carried and "i64>" not in carried, carried
    barriers = [line for line in lines if "stablehlo.optimization_barrier" in line]
    assert any("tensor<32x32x8x128xf32>, tensor<32x32x8xf32>" in line for line in barriers), barriers


def _loop_body(text: str) -> list[str]:
    """The lines of the body of a module's first ``while`` (the functions it calls not included)."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if "stablehlo.while(" in line)
    depth = lines[first].index("%")
    body = []
    for line in lines[first + 1 :]:
        if line.startswith(" " * depth + "}") and not line.strip().startswith("} do"):
            break
        body.append(line)
    return body


def test_a_loop_over_a_buffer_written_in_place_reshapes_none_of_the_programs_copies() -> None:
    """Rotary in place: the programs' copies of their rows of x are held in rows of a token's heads (4096 elements)
    from before the head loop to after it; a reshape of them inside the loop (a copy of 67 MB each on a TPU, whose
    arrays are laid out in tiles of their last two axes) happened six times a trip."""
    case = next(c for c in tpu_model_cases.model_cases() if c.name.startswith("rotary in place"))
    body = _loop_body(exported_for_tpu(case.kernel, *case.inputs(np.random.default_rng(0))).mlir_module())
    assert body and not [line for line in body if "stablehlo.reshape" in line and "x4096xbf16>" in line]


def test_attentions_key_blocks_are_slices_of_k_and_v_in_their_rows_each_trip() -> None:
    """The key loop reads each trip's 64 key rows of every head as a slice of K (and of V) seen as (heads, rows,
    head_dim), not a slice of the flat tensor as long as what the block spans (16.5M elements a trip)."""
    case = next(c for c in tpu_model_cases.model_cases() if c.name.startswith("attention fwd full"))
    body = _loop_body(exported_for_tpu(case.kernel, *case.inputs(np.random.default_rng(0))).mlir_module())
    slices = [line for line in body if "stablehlo.dynamic_slice" in line]
    assert len(slices) == 2 and all("(tensor<64x2048x128xbf16>" in line for line in slices), slices
    assert all("sizes = [64, 64, 128]" in line for line in slices), slices


@triton.jit
def scaled_rows_kernel(x_ptr, out_ptr, n_cols, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
    tl.store(out_ptr + row * n_cols + cols, x * scale, mask=mask)


def _scaled(x: Any, scale: float = 2.0) -> Any:
    return jt.triton_call(
        x_ptr=x, n_cols=x.shape[-1], scale=scale, kernel=scaled_rows_kernel, out_shape=x, grid=(x.shape[0],), BLOCK=128
    )


def test_vmap_of_a_call_lowers_to_one_kernel_without_gathers() -> None:
    x = np.ones((4, 8, 100), np.float32)
    ops = operations(exported_for_tpu(jax.jit(jax.vmap(_scaled)), x))
    assert ops["custom_call"] == ops["gather"] == ops["scatter"] == ops["while"] == 0


_scaled_with_gradient = jt.kernel_vjp(
    lambda x: (_scaled(x), None),
    lambda residuals, dy: _scaled(dy),
)


def test_grad_through_kernel_vjp_lowers_for_tpu() -> None:
    x = np.ones((8, 100), np.float32)
    grad = jax.jit(jax.grad(lambda v: _scaled_with_gradient(v).sum()))
    ops = operations(exported_for_tpu(grad, x))
    assert ops["custom_call"] == ops["gather"] == ops["scatter"] == 0


def test_an_exported_call_serializes_and_runs_where_deserialized() -> None:
    """An artifact made for the TPU and the CPU runs here, on the CPU, from its serialized bytes."""
    x = np.random.default_rng(1).standard_normal((8, 100)).astype(np.float32)
    exported = jax.export.export(jax.jit(_scaled), platforms=("tpu", "cpu"))(jax.ShapeDtypeStruct(x.shape, x.dtype))
    restored = jax.export.deserialize(exported.serialize())
    np.testing.assert_array_equal(np.asarray(restored.call(jnp.asarray(x))), x * 2)


@triton.jit
def integer_tiles_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    source = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    target = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    tile = source.load([tl.program_id(0) * BM, tl.program_id(1) * BN])
    target.store([tl.program_id(0) * BM, tl.program_id(1) * BN], tile * 3 - 1)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint8], ids=str)
def test_integer_tensor_descriptors_are_slices_and_right_under_the_tpu_strategy(dtype: Any) -> None:
    x = np.random.default_rng(0).integers(-100, 100, (40, 64)).astype(dtype)

    def tiles(v: Any) -> Any:
        return jt.triton_call(v, kernel=integer_tiles_kernel, out_shape=v, grid=(3, 2), M=40, N=64, BM=16, BN=32)

    ops = operations(exported_for_tpu(jax.jit(tiles), x))
    assert ops["custom_call"] == ops["gather"] == ops["scatter"] == ops["while"] == 0
    with tpu_strategy_on_cpu():
        out = np.asarray(jax.jit(tiles)(x))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, x * dtype(3) - dtype(1))


@triton.jit
def wrapping_lanes_kernel(x_ptr, start, out_ptr, BLOCK: tl.constexpr):
    # Lanes past int32's largest value wrap to negative ones (masked in); (lane * 65536) * 65536 wraps to 0.
    lanes = tl.arange(0, BLOCK) + start
    offs = tl.arange(0, BLOCK)
    values = tl.load(x_ptr + offs + (offs * 65536) * 65536)
    tl.store(out_ptr + offs, values, mask=lanes < 2147483647)


def test_integers_wrap_in_int32_under_the_tpu_strategy() -> None:
    x = np.arange(1, 17, dtype=np.float32)

    def wrapping(v: Any) -> Any:
        return jt.triton_call(
            v, 2**31 - 5, kernel=wrapping_lanes_kernel, out_shape=v, grid=1, zeroed_outputs=(0,), BLOCK=16
        )

    with tpu_strategy_on_cpu():
        out = np.asarray(jax.jit(wrapping)(x))
    lanes = (np.arange(16, dtype=np.int64) + 2**31 - 5 + 2**31) % 2**32 - 2**31
    np.testing.assert_array_equal(out, np.where(lanes < 2**31 - 1, x, 0))
    assert out[4] == 0 and out[5] == 6  # lane 4 is the largest int32, lane 5 wrapped below it


def test_a_state_space_step_reads_its_states_rows_without_copying_the_cache_per_program() -> None:
    """The decode step reads each sequence's state at a slot loaded from memory (its start known only when it
    runs): its heads' rows are gathered, no value holds more elements than the state cache itself (a choice between
    a slice and a gather made per program copied the 335 MB cache for each of 256 programs: 82 GB on a TPU)."""
    case = next(c for c in tpu_model_cases.model_cases() if c.name.startswith("ssm decode"))
    inputs = case.inputs(np.random.default_rng(0))
    text = exported_for_tpu(case.kernel, *inputs).mlir_module()
    shapes = re.findall(r"tensor<((?:\d+x)+)\w+>", text)
    largest = max(int(np.prod([int(d) for d in dims.rstrip("x").split("x")])) for dims in shapes)
    assert largest <= inputs[0].size, largest
    # Its new states are scattered element by element: whole rows, checked when it runs, took 3.7 times as long on
    # a v5e (`Strategy.row_stores`); the CPU scatters the rows.
    scatters = [line for line in text.splitlines() if "stablehlo.scatter" in line]
    assert len(scatters) == 1 and "update_window_dims" not in scatters[0] and "stablehlo.case" not in text, scatters
