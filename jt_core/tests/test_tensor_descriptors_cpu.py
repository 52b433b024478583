"""Host-side tensor descriptors (``jt.TensorDescriptor``) on the CPU backend: loads, stores, padding, errors."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core.errors import KernelCallTypeError, KernelCallValueError, OutOfBoundsAccessError
from jt_core.testing import add_tiles_kernel, copy_tiles_kernel, load_tile, read_tile_kernel


@triton.jit
def copy_rows_kernel(src_desc, out_desc, BLOCK: tl.constexpr):
    """1-D copy through descriptors."""
    start = tl.program_id(0) * BLOCK
    out_desc.store([start], src_desc.load([start]))


@triton.jit
def scale_3d_kernel(src_desc, out_desc, factor, B0: tl.constexpr, B1: tl.constexpr, B2: tl.constexpr):
    """``out = src * factor`` over a 3-D tensor, one (B0, B1, B2) box per program."""
    i = tl.program_id(0) * B0
    j = tl.program_id(1) * B1
    k = tl.program_id(2) * B2
    out_desc.store([i, j, k], src_desc.load([i, j, k]) * factor)


@triton.jit
def store_into_input_kernel(desc, out_ptr, BM: tl.constexpr, BN: tl.constexpr):
    """Writes through a descriptor that is not an output (a mistake)."""
    desc.store([0, 0], desc.load([0, 0]) * 2)
    offsets = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    tl.store(out_ptr + offsets, tl.zeros((BM, BN), tl.float32))


@triton.jit
def pair_kernel(descs, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    """``out = descs[0] + descs[1]`` with the two inputs in one tuple parameter."""
    m = tl.program_id(0) * BM
    n = tl.program_id(1) * BN
    out_desc.store([m, n], descs[0].load([m, n]) + descs[1].load([m, n]))


def _random(shape: tuple[int, ...], dtype: Any, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(dtype)


def add_tiles(a: Any, b: Any, block: tuple[int, int]) -> Any:
    """``a + b`` through descriptors; the result is a NaN-poisoned buffer aliased to the output."""
    bm, bn = block
    poisoned = jnp.full(a.shape, jnp.nan, a.dtype)
    grid = (triton.cdiv(a.shape[0], bm), triton.cdiv(a.shape[1], bn))
    return jt.triton_call(
        jt.TensorDescriptor(a, block_shape=[bm, bn]),
        jt.TensorDescriptor(b, block_shape=[bm, bn]),
        jt.TensorDescriptor(poisoned, block_shape=[bm, bn]),
        kernel=add_tiles_kernel,
        out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype),
        input_output_aliases={2: 0},
        grid=grid,
        BM=bm,
        BN=bn,
    )


@pytest.mark.parametrize(
    ("shape", "block"),
    [((32, 64), (16, 32)), ((40, 48), (16, 32)), ((17, 8), (8, 8)), ((8, 24), (8, 4))],
    ids=["even", "ragged-both", "ragged-rows", "narrow"],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=["f32", "f16", "bf16"])
def test_add_through_descriptors_matches_numpy(shape: tuple[int, int], block: tuple[int, int], dtype: Any) -> None:
    if block[1] * np.dtype(dtype).itemsize < 16:
        block = (block[0], 16 // np.dtype(dtype).itemsize)
    a, b = _random(shape, dtype, 0), _random(shape, dtype, 1)
    result = jax.jit(add_tiles, static_argnums=2)(jnp.asarray(a), jnp.asarray(b), block)
    expected = (a.astype(np.float32) + b.astype(np.float32)).astype(dtype)
    np.testing.assert_allclose(np.asarray(result).astype(np.float32), expected.astype(np.float32), rtol=1e-2)


def test_descriptor_is_a_pytree_passed_through_jit() -> None:
    a, b = _random((24, 32), np.float32, 2), _random((24, 32), np.float32, 3)

    @jax.jit
    def f(a_desc: jt.TensorDescriptor, b_desc: jt.TensorDescriptor) -> Any:
        out = jnp.full(a_desc.shape, jnp.nan, jnp.float32)
        return jt.triton_call(
            a_desc,
            b_desc,
            jt.TensorDescriptor(out, [8, 16]),
            kernel=add_tiles_kernel,
            out_shape=out,
            input_output_aliases={2: 0},
            grid=(3, 2),
            BM=8,
            BN=16,
        )

    leaves, _ = jax.tree_util.tree_flatten(jt.TensorDescriptor(jnp.asarray(a), [8, 16]))
    assert len(leaves) == 1 and leaves[0].shape == (24, 32)
    result = f(jt.TensorDescriptor(jnp.asarray(a), [8, 16]), jt.TensorDescriptor(jnp.asarray(b), [8, 16]))
    np.testing.assert_allclose(np.asarray(result), a + b, rtol=1e-6)


@pytest.mark.parametrize(("padding", "fill"), [("zero", 0.0), ("nan", np.nan)])
def test_out_of_bounds_part_of_a_block_reads_the_padding(padding: str, fill: float) -> None:
    data = _random((20, 12), np.float32, 4)
    x = jnp.asarray(data)  # rows of 12 floats: 48 bytes, 16-byte aligned
    out = jt.triton_call(
        jt.TensorDescriptor(x, block_shape=[8, 8], padding=padding),
        row=16,
        col=8,
        kernel=read_tile_kernel,
        out_shape=jax.ShapeDtypeStruct((8, 8), jnp.float32),
        grid=1,
        BM=8,
        BN=8,
    )
    expected = np.full((8, 8), fill, np.float32)
    expected[:4, :4] = data[16:20, 8:12]
    np.testing.assert_array_equal(np.asarray(out), expected)


def test_one_dimensional_descriptor_copies_a_ragged_vector() -> None:
    data = _random((100,), np.float32, 5)
    x = jnp.asarray(data)
    out = jt.triton_call(
        jt.TensorDescriptor(x, [32]),
        jt.TensorDescriptor(jnp.full((100,), jnp.nan, jnp.float32), [32]),
        kernel=copy_rows_kernel,
        out_shape=x,
        input_output_aliases={1: 0},
        grid=4,
        BLOCK=32,
    )
    np.testing.assert_array_equal(np.asarray(out), data)


def test_three_dimensional_descriptor_with_a_scalar_argument() -> None:
    data = _random((5, 6, 16), np.float32, 6)
    x = jnp.asarray(data)
    out = jt.triton_call(
        jt.TensorDescriptor(x, [2, 4, 8]),
        jt.TensorDescriptor(jnp.full(x.shape, jnp.nan, jnp.float32), [2, 4, 8]),
        3.0,
        kernel=scale_3d_kernel,
        out_shape=x,
        input_output_aliases={1: 0},
        grid=(3, 2, 2),
        B0=2,
        B1=4,
        B2=8,
    )
    np.testing.assert_allclose(np.asarray(out), data * 3.0, rtol=1e-6)


def test_descriptors_inside_a_tuple_parameter() -> None:
    a, b = _random((16, 16), np.float32, 7), _random((16, 16), np.float32, 8)
    out = jt.triton_call(
        (jt.TensorDescriptor(jnp.asarray(a), [8, 8]), jt.TensorDescriptor(jnp.asarray(b), [8, 8])),
        jt.TensorDescriptor(jnp.full((16, 16), jnp.nan, jnp.float32), [8, 8]),
        kernel=pair_kernel,
        out_shape=jax.ShapeDtypeStruct((16, 16), jnp.float32),
        input_output_aliases={2: 0},
        grid=(2, 2),
        BM=8,
        BN=8,
    )
    np.testing.assert_allclose(np.asarray(out), a + b, rtol=1e-6)


def test_vmap_of_a_descriptor_call_runs_each_element() -> None:
    a, b = _random((3, 16, 16), np.float32, 9), _random((3, 16, 16), np.float32, 10)
    result = jax.vmap(lambda x, y: add_tiles(x, y, (8, 8)))(jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_allclose(np.asarray(result), a + b, rtol=1e-6)


def test_signature_entry_is_the_one_triton_expects() -> None:
    x = jnp.zeros((32, 64), jnp.float16)
    jaxpr = jax.make_jaxpr(lambda x: add_tiles(x, x, (16, 32)))(x)
    (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "triton_kernel_call"]
    call = eqn.params["call"]
    hash(call)
    signature = call.specialization(call.configs[0]).signature
    assert signature["a_desc"] == "tensordesc<fp16[16, 32]>"
    assert signature["out_desc"] == "tensordesc<fp16[16, 32]>"
    descriptor = call.slots[0].descriptor
    assert descriptor.shape == (32, 64) and descriptor.strides == (64, 1) and descriptor.padding == "zero"
    assert call.operand_avals[0].shape == (32, 64)


def test_storing_through_a_descriptor_that_is_not_an_output_is_refused() -> None:
    x = jnp.asarray(_random((8, 8), np.float32, 11))
    with pytest.raises(
        (OutOfBoundsAccessError, jax.errors.JaxRuntimeError), match=r"stores into input 'desc'.*input_output_aliases"
    ):
        jt.triton_call(
            jt.TensorDescriptor(x, [8, 8]),
            kernel=store_into_input_kernel,
            out_shape=jax.ShapeDtypeStruct((8, 8), jnp.float32),
            grid=1,
            BM=8,
            BN=8,
        )


X16 = jnp.zeros((16, 16), jnp.float32)


@pytest.mark.parametrize(
    ("make", "error", "pattern"),
    [
        (lambda: jt.TensorDescriptor(X16, [8]), KernelCallValueError, r"one entry per dimension of the array \(2\)"),
        (lambda: jt.TensorDescriptor(X16, [8, 12]), KernelCallValueError, r"block_shape\[1\]=12 is not a power"),
        (lambda: jt.TensorDescriptor(X16, [8, 2]), KernelCallValueError, r"spans 8 bytes; it must span at least 16"),
        (lambda: jt.TensorDescriptor(X16, 8), KernelCallTypeError, r"block_shape must be a list of ints"),
        (
            lambda: jt.TensorDescriptor(jnp.zeros((4, 10), jnp.float32), [4, 8]),
            KernelCallValueError,
            r"stride of 40 bytes.*multiple of 4 elements of float32",
        ),
        (lambda: jt.TensorDescriptor(X16, [8, 8], padding="one"), KernelCallValueError, r"padding must be one of"),
        (
            lambda: jt.TensorDescriptor(jnp.zeros((4, 16), jnp.int32), [4, 8], padding="nan"),
            KernelCallValueError,
            r"padding='nan' needs a floating dtype",
        ),
        (lambda: jt.TensorDescriptor(jnp.zeros((4, 16), bool), [4, 16]), KernelCallTypeError, r"use uint8"),
        (lambda: jt.TensorDescriptor(jnp.zeros((0, 16)), [4, 8]), KernelCallValueError, r"dimension 0 is empty"),
        (lambda: jt.TensorDescriptor(jnp.zeros(()), []), KernelCallValueError, r"rank 1 to 5"),
        (lambda: jt.TensorDescriptor(3.0, [8]), KernelCallTypeError, r"the base must be an array"),
    ],
    ids=[
        "rank",
        "power-of-two",
        "narrow-block",
        "not-a-list",
        "row-alignment",
        "padding",
        "nan-int",
        "bool",
        "empty",
        "scalar-array",
        "not-an-array",
    ],
)
def test_bad_descriptors_are_refused_with_what_to_change(make: Any, error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        make()


def test_errors_at_the_call_name_the_argument() -> None:
    desc = jax.tree_util.tree_unflatten(
        jax.tree_util.tree_structure(jt.TensorDescriptor(X16, [8, 8])), [jnp.zeros((4, 10), jnp.float32)]
    )
    with pytest.raises(KernelCallValueError, match=r"tensor descriptor argument 'desc' over float32\[4, 10\]"):
        jt.triton_call(
            desc,
            row=0,
            col=0,
            kernel=read_tile_kernel,
            out_shape=jax.ShapeDtypeStruct((8, 8), jnp.float32),
            grid=1,
            BM=8,
            BN=8,
        )


def test_layout_on_a_triton_kernel_is_refused() -> None:
    with pytest.raises(KernelCallValueError, match=r"'desc' has layout=.*layout= is for Gluon kernels"):
        jt.triton_call(
            jt.TensorDescriptor(X16, [8, 8], layout=("shared", 128)),
            row=0,
            col=0,
            kernel=read_tile_kernel,
            out_shape=jax.ShapeDtypeStruct((8, 8), jnp.float32),
            grid=1,
            BM=8,
            BN=8,
        )


# -- jax-triton 0.4's forms: from_array, and the dataclass form with explicit shape and strides -----------------


def _values(shape: tuple[int, ...], dtype: Any, seed: int) -> np.ndarray:
    """Random values every dtype holds exactly (small integers for integer types)."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


TMA_DTYPES = [
    np.float32,
    np.float16,
    ml_dtypes.bfloat16,
    ml_dtypes.float8_e4m3fn,
    np.int8,
    np.int16,
    np.int32,
    np.uint16,
]
TMA_DTYPE_IDS = ["f32", "f16", "bf16", "fp8e4m3", "i8", "i16", "i32", "u16"]


def _paddings(dtype: Any) -> list[str]:
    kind, size = np.dtype(dtype).kind, np.dtype(dtype).itemsize
    return ["zero", "nan"] if (kind == "f" or "float" in np.dtype(dtype).name) and size >= 2 else ["zero"]


@pytest.mark.parametrize("dtype", TMA_DTYPES, ids=TMA_DTYPE_IDS)
@pytest.mark.parametrize("form", ["from_array", "view"])
def test_every_tma_dtype_reads_a_ragged_tile_with_each_padding(dtype: Any, form: str) -> None:
    """A tile crossing the tensor's edges: inside it the data, outside it the padding, never the base's data past
    the view (the view is the left part of a wider base, and the tile crosses its right edge)."""
    aligned = 16 // np.dtype(dtype).itemsize  # elements in 16 bytes: the step of block offsets and strides
    bn = 2 * aligned
    data = _values((12, 2 * bn), dtype, 20)
    for padding in _paddings(dtype):
        if form == "from_array":
            desc = jt.TensorDescriptor.from_array(jnp.asarray(data), block_shape=[8, bn], padding=padding)
            visible = data
        else:
            desc = jt.TensorDescriptor(jnp.asarray(data), (12, bn + aligned), (2 * bn, 1), (8, bn), padding=padding)
            visible = data[:, : bn + aligned]
        col = bn
        expected = np.full((8, bn), np.nan if padding == "nan" else 0, np.float64)
        inside = visible[8:12, col : col + bn].astype(np.float64)
        expected[: inside.shape[0], : inside.shape[1]] = inside
        out = np.asarray(load_tile(desc, 8, col)).astype(np.float64)
        np.testing.assert_array_equal(out, expected, err_msg=f"padding={padding}")


def test_view_with_a_row_stride_reads_every_other_row() -> None:
    data = _random((16, 16), np.float32, 21)
    # rows 0, 2, 4, ...: shape (8, 16), strides (32, 1) over the flat buffer
    desc = jt.TensorDescriptor(jnp.asarray(data).reshape(-1), (8, 16), (32, 1), (8, 16))
    np.testing.assert_array_equal(np.asarray(load_tile(desc, 0, 0)), data[::2])


def test_store_through_a_view_writes_only_inside_it() -> None:
    base = _random((12, 32), np.float32, 22)
    src = _random((12, 16), np.float32, 23)

    @jax.jit
    def f(base: Any, src: Any) -> Any:
        return jt.triton_call(
            jt.TensorDescriptor.from_array(src, [8, 16]),
            jt.TensorDescriptor(base, shape=(12, 16), strides=(32, 1), block_shape=(8, 16)),
            kernel=copy_tiles_kernel,
            out_shape=base,
            input_output_aliases={1: 0},
            grid=(2, 1),
            BM=8,
            BN=16,
        )

    expected = base.copy()
    expected[:, :16] = src
    np.testing.assert_array_equal(np.asarray(f(jnp.asarray(base), jnp.asarray(src))), expected)


def tf32_reference(values: np.ndarray) -> np.ndarray:
    """float32 rounded to 10 mantissa bits, to nearest with ties to even (independent of the bit arithmetic)."""
    mantissa, exponent = np.frexp(values.astype(np.float64))
    return np.ldexp(np.round(mantissa * 2.0**11) / 2.0**11, exponent).astype(np.float32)


@pytest.mark.parametrize("form", ["from_array", "view"])
def test_round_f32_to_tf32_rounds_loaded_values(form: str) -> None:
    data = _random((8, 16), np.float32, 24) * 100
    data[0, :4] = [1 + 2.0**-11, 1 + 3 * 2.0**-11, np.inf, -np.inf]  # ties: to even (down, then up)
    if form == "from_array":
        desc = jt.TensorDescriptor.from_array(jnp.asarray(data), [8, 16], round_f32_to_tf32=True)
    else:
        desc = jt.TensorDescriptor(jnp.asarray(data), (8, 16), (16, 1), (8, 16), round_f32_to_tf32=True)
    out = np.asarray(load_tile(desc, 0, 0))
    np.testing.assert_array_equal(out, tf32_reference(data))
    assert out[0, 0] == 1.0 and out[0, 1] == 1 + 2.0**-9
    plain = np.asarray(load_tile(jt.TensorDescriptor.from_array(jnp.asarray(data), [8, 16]), 0, 0))
    np.testing.assert_array_equal(plain, data)


def test_from_array_and_both_positional_orders_describe_the_same_tensor() -> None:
    x = jnp.asarray(_random((16, 32), np.float32, 25))
    forms = [
        jt.TensorDescriptor(x, [8, 8], "nan"),
        jt.TensorDescriptor(x, block_shape=[8, 8], padding="nan"),
        jt.TensorDescriptor.from_array(x, [8, 8], None, "nan"),
        jt.TensorDescriptor(x, (16, 32), (32, 1), (8, 8), None, "nan"),
        jt.TensorDescriptor(x, (16, 32), strides=(32, 1), block_shape=(8, 8), padding="nan"),
    ]
    specs = {desc.spec() for desc in forms}
    assert len(specs) == 1
    (spec,) = specs
    assert (spec.shape, spec.strides, spec.block_shape, spec.padding) == ((16, 32), (32, 1), (8, 8), "nan")
    assert [desc.is_view for desc in forms] == [False, False, False, True, True]


def test_view_keeps_its_shape_through_jit_and_an_array_descriptor_follows_its_base() -> None:
    base = jnp.zeros((16, 32), jnp.float32)
    view = jt.TensorDescriptor(base, (16, 8), (32, 1), (8, 8))
    whole = jt.TensorDescriptor.from_array(base, [8, 8])
    tree = jax.tree_util.tree_structure((view, whole))
    rebuilt_view, rebuilt_whole = jax.tree_util.tree_unflatten(tree, [jnp.zeros((32, 32)), jnp.zeros((32, 32))])
    assert rebuilt_view.shape == (16, 8) and rebuilt_view.strides == (32, 1)
    assert rebuilt_whole.shape == (32, 32) and rebuilt_whole.strides == (32, 1)
    inside = jax.jit(lambda v, w: (v.shape, v.strides, w.shape, w.is_view))(view, whole)
    assert inside == ((16, 8), (32, 1), (16, 32), False)


BASE = jnp.zeros((16, 32), jnp.float32)


@pytest.mark.parametrize(
    ("make", "error", "pattern"),
    [
        (
            lambda: jt.TensorDescriptor(BASE, (16, 40), (32, 1), (8, 8)),
            KernelCallValueError,
            r"the view reaches element 519 of the base, which holds 512 elements",
        ),
        (
            lambda: jt.TensorDescriptor(BASE, (16, 8), (30, 1), (8, 8)),
            KernelCallValueError,
            r"strides\[0\]=30 is 120 bytes; TMA needs every stride but the last to be a multiple of 16 bytes",
        ),
        (lambda: jt.TensorDescriptor(BASE, (16, 8), (32, 2), (8, 8)), KernelCallValueError, r"stride 1"),
        (lambda: jt.TensorDescriptor(BASE, (16, 8), (32,), (8, 8)), KernelCallValueError, r"strides needs one entry"),
        (lambda: jt.TensorDescriptor(BASE, (16, 8), (-32, 1), (8, 8)), KernelCallValueError, r"must be positive"),
        (lambda: jt.TensorDescriptor(BASE, shape=(16, 8), block_shape=(8, 8)), KernelCallTypeError, r"without strides"),
        (lambda: jt.TensorDescriptor(BASE), KernelCallTypeError, r"needs block_shape"),
        (
            lambda: jt.TensorDescriptor(BASE, (16, 32), (32, 1), (8, 8), block_shape=(8, 8)),
            KernelCallTypeError,
            r"multiple values for argument 'block_shape'",
        ),
        (
            lambda: jt.TensorDescriptor.from_array(BASE.astype(jnp.float16), [8, 8], round_f32_to_tf32=True),
            KernelCallValueError,
            r"round_f32_to_tf32=True .* needs a float32 base, the base is float16",
        ),
        (
            lambda: jt.TensorDescriptor.from_array(BASE, [8, 8], round_f32_to_tf32="yes"),
            KernelCallTypeError,
            r"round_f32_to_tf32 must be True or False",
        ),
        (
            lambda: jt.TensorDescriptor.from_array(BASE.astype(jnp.int8), [8, 16], padding="nan"),
            KernelCallValueError,
            r"padding='nan' needs a floating dtype of 16 bits or more.*the base is int8",
        ),
        (
            lambda: jt.TensorDescriptor.from_array(BASE.astype(jnp.float8_e4m3fn), [8, 16], padding="nan"),
            KernelCallValueError,
            r"padding='nan' needs a floating dtype of 16 bits or more.*float8_e4m3fn",
        ),
        (lambda: jt.TensorDescriptor(BASE, (16, 8.0), (32, 1), (8, 8)), KernelCallTypeError, r"shape\[1\] must be"),
    ],
    ids=[
        "view-past-the-base",
        "view-stride-alignment",
        "view-last-stride",
        "view-strides-rank",
        "view-negative-stride",
        "shape-without-strides",
        "no-block",
        "block-twice",
        "tf32-on-f16",
        "tf32-not-bool",
        "nan-on-int8",
        "nan-on-fp8",
        "float-shape",
    ],
)
def test_bad_views_and_options_are_refused_with_what_to_change(make: Any, error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        make()
