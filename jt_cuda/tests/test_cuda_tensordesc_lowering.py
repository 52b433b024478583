"""Host-side tensor descriptors lowered for ``cuda`` without a GPU: the parameters the handler builds from them."""

from __future__ import annotations

import struct
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cuda_tensordesc_kernels import add_tiles, autotuned_add_tiles, copy_into_view, read_tile
from cuda_testlib import lower_for_cuda

import jt_core as jt
from jt_core.errors import KernelCallValueError
from jt_core.gpu.attributes import PARAM_OPERAND, PARAM_RESULT, PARAM_SCALAR, PARAM_TENSOR_MAP
from jt_core.testing import backend_config, custom_calls, load_tile
from jt_cuda import _compat
from jt_cuda.launchers import CudaJaxlibLauncher

SHAPE = (40, 48)
BLOCK = (16, 32)
SPEC = jax.ShapeDtypeStruct(SHAPE, jnp.float32)
# CUtensorMapDataType FLOAT32 / FLOAT16 / BFLOAT16, CUtensorMapSwizzle 128B, CUtensorMapFloatOOBfill NaN
FLOAT32, FLOAT16, BFLOAT16 = 7, 6, 9
# CUtensorMapDataType UINT8 / UINT16 / INT32 (Triton moves 8- and 16-bit integers and fp8 as unsigned bytes), and
# TFLOAT32 (float32 in memory, rounded to TF32 as the TMA unit loads it)
UINT8, UINT16, INT32, TFLOAT32 = 0, 1, 3, 11
SWIZZLE_128B = 3
FILL_NAN = 1


def jt_op(lowered: Any) -> Any:
    (op,) = custom_calls(lowered, "triton_kernel_call_jt_cuda") + custom_calls(
        lowered, "triton_kernel_call_jt_cuda_preloaded"
    )
    return op


def scalars_of(config: dict[str, Any], kinds: list[int], indices: list[int]) -> list[bytes]:
    return [config["scalars"][i : i + 8] for k, i in zip(kinds, indices) if k == PARAM_SCALAR]


def records(config: dict[str, Any], c: int = 0) -> list[list[int]]:
    flat = list(config[f"tensormaps_{c}"])
    return [flat[i : i + 20] for i in range(0, len(flat), 20)]


def test_sm90_passes_each_descriptor_as_a_tensor_map_then_its_shape_and_strides() -> None:
    config = backend_config(
        jt_op(lower_for_cuda(lambda a, b: add_tiles(a, b, BLOCK, compute_capability=90), SPEC, SPEC))
    )
    one = [PARAM_TENSOR_MAP, *[PARAM_SCALAR] * 4]
    assert config["param_kinds"] == one * 3
    kinds, indices = config["param_kinds"], config["param_indices"]
    assert [i for k, i in zip(kinds, indices) if k == PARAM_TENSOR_MAP] == [0, 1, 2]
    values = scalars_of(config, kinds, indices)
    for d in range(3):
        rows, cols, stride0, stride1 = values[4 * d : 4 * d + 4]
        assert struct.unpack("<i", rows[:4]) == (40,) and struct.unpack("<i", cols[:4]) == (48,)
        assert struct.unpack("<q", stride0) == (48,) and struct.unpack("<q", stride1) == (1,)
    a, b, out = records(config)
    # buffer (operand 0, operand 1, result 0: the aliased output), FLOAT32, rank 2, 128-byte swizzle, zero fill,
    # dims / byte strides / box innermost first
    body = [FLOAT32, 2, SWIZZLE_128B, 0, 48, 40, 1, 1, 1, 48 * 4, 0, 0, 0, 32, 16, 1, 1, 1]
    assert a == [PARAM_OPERAND, 0, *body]
    assert b == [PARAM_OPERAND, 1, *body]
    assert out == [PARAM_RESULT, 0, *body]


@pytest.mark.parametrize(("dtype", "code"), [(jnp.float16, FLOAT16), (jnp.bfloat16, BFLOAT16)])
def test_tensor_map_element_type_follows_the_dtype(dtype: Any, code: int) -> None:
    spec = jax.ShapeDtypeStruct((64, 64), dtype)
    config = backend_config(jt_op(lower_for_cuda(lambda x: read_tile(x, (32, 64), 0, 0, compute_capability=90), spec)))
    ((kind, index, data_type, rank, _swizzle, fill, *rest),) = records(config)
    assert (kind, index, data_type, rank, fill) == (PARAM_OPERAND, 0, code, 2, 0)
    assert rest[:2] == [64, 64] and rest[5] == 64 * 2 and rest[9:11] == [64, 32]


def test_nan_padding_asks_the_tensor_map_for_nan_fill() -> None:
    config = backend_config(
        jt_op(lower_for_cuda(lambda x: read_tile(x, BLOCK, 32, 32, padding="nan", compute_capability=90), SPEC))
    )
    ((*_, fill), *_) = [r[:6] for r in records(config)]
    assert fill == FILL_NAN


def test_before_sm90_the_descriptor_is_decomposed_like_triton_does() -> None:
    config = backend_config(jt_op(lower_for_cuda(lambda x: read_tile(x, BLOCK, 8, 16, compute_capability=80), SPEC)))
    assert "tensormaps_0" not in config
    flags = _compat.decomposed_descriptor_flags()
    # pointer, shape and strides (i64), padding (and tf32) flags, shape (i32) and strides (i64), then out_ptr, row, col
    per_descriptor = [PARAM_OPERAND, *[PARAM_SCALAR] * (4 + flags + 4)]
    assert config["param_kinds"] == [*per_descriptor, PARAM_RESULT, PARAM_SCALAR, PARAM_SCALAR]
    values = scalars_of(config, config["param_kinds"], config["param_indices"])
    i64 = [struct.unpack("<q", v)[0] for v in values[:4]]
    assert i64 == [40, 48, 48, 1]
    assert [v[0] for v in values[4 : 4 + flags]] == [0] * flags
    tail = values[4 + flags :]
    assert [struct.unpack("<i", v[:4])[0] for v in tail[:2]] == [40, 48]
    assert [struct.unpack("<q", v)[0] for v in tail[2:4]] == [48, 1]
    assert [struct.unpack("<i", v[:4])[0] for v in tail[4:]] == [8, 16]


def test_lowering_is_deterministic() -> None:
    texts = {
        lower_for_cuda(lambda a, b: add_tiles(a, b, BLOCK, compute_capability=90), SPEC, SPEC).as_text()
        for _ in range(2)
    }
    assert len(texts) == 1


def test_jaxlib_launcher_refuses_descriptors_and_names_the_jt_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CudaJaxlibLauncher, "unavailable_reason", lambda self: None)
    with pytest.raises(KernelCallValueError, match=r"launcher 'jaxlib' on platform 'cuda' cannot pass.*launcher='jt'"):
        lower_for_cuda(lambda x: read_tile(x, BLOCK, 0, 0, compute_capability=90, launcher="jaxlib"), SPEC)


def test_descriptor_with_rows_not_16_byte_aligned_is_refused_naming_the_argument() -> None:
    with pytest.raises(KernelCallValueError, match=r"multiple of 4 elements"):
        read_tile(jnp.zeros((8, 10), jnp.float32), (8, 8), 0, 0)


def test_operand_is_the_descriptor_base() -> None:
    lowered = lower_for_cuda(lambda x: read_tile(x, BLOCK, 0, 0, compute_capability=90), SPEC)
    (operand,) = jt_op(lowered).operands
    assert str(operand.type) == "tensor<40x48xf32>"


def test_autotuned_call_has_a_tensor_map_table_per_config_and_restores_the_aliased_result() -> None:
    spec = jax.ShapeDtypeStruct((96, 160), jnp.float32)
    config = backend_config(
        jt_op(lower_for_cuda(lambda a, b: autotuned_add_tiles(a, b, compute_capability=90), spec, spec))
    )
    assert config["num_configs"] == 2 and config["restore"] == [0]
    for c in (0, 1):
        assert [r[:2] for r in records(config, c)] == [[PARAM_OPERAND, 0], [PARAM_OPERAND, 1], [PARAM_RESULT, 0]]
        assert all(r[6:8] == [160, 96] and r[15:17] == [32, 32] for r in records(config, c))


def view_or_array(x: Any, form: str, block: tuple[int, int], **kwargs: Any) -> jt.TensorDescriptor:
    """``x`` described whole (``from_array``), or its left half as a view with the full row stride."""
    if form == "from_array":
        return jt.TensorDescriptor.from_array(x, block_shape=block, **kwargs)
    rows, cols = x.shape
    return jt.TensorDescriptor(x, (rows, cols // 2), (cols, 1), block, **kwargs)


def test_view_encodes_its_own_shape_and_the_base_row_stride() -> None:
    spec = jax.ShapeDtypeStruct((40, 96), jnp.float32)
    lowered = lower_for_cuda(lambda x: load_tile(view_or_array(x, "view", BLOCK), 0, 0, compute_capability=90), spec)
    (operand,) = jt_op(lowered).operands
    assert str(operand.type) == "tensor<40x96xf32>"  # the whole base travels; the view is in the record
    config = backend_config(jt_op(lowered))
    ((kind, index, data_type, rank, _swizzle, fill, *rest),) = records(config)
    assert (kind, index, data_type, rank, fill) == (PARAM_OPERAND, 0, FLOAT32, 2, 0)
    assert rest[:2] == [48, 40] and rest[5] == 96 * 4 and rest[9:11] == [32, 16]
    values = scalars_of(config, config["param_kinds"], config["param_indices"])
    assert [struct.unpack("<i", v[:4])[0] for v in values[:2]] == [40, 48]
    assert [struct.unpack("<q", v)[0] for v in values[2:4]] == [96, 1]


@pytest.mark.parametrize("form", ["from_array", "view"])
def test_round_f32_to_tf32_encodes_the_tfloat32_data_type(form: str) -> None:
    spec = jax.ShapeDtypeStruct((40, 96), jnp.float32)

    def data_type(rounding: bool) -> int:
        desc = lambda x: view_or_array(x, form, BLOCK, round_f32_to_tf32=rounding)  # noqa: E731
        config = backend_config(jt_op(lower_for_cuda(lambda x: load_tile(desc(x), 0, 0, compute_capability=90), spec)))
        ((_, _, code, *_),) = records(config)
        return code

    assert data_type(True) == TFLOAT32 and data_type(False) == FLOAT32


def test_decomposed_descriptor_passes_the_tf32_flag_where_triton_takes_one() -> None:
    spec = jax.ShapeDtypeStruct((40, 96), jnp.float32)

    def lower() -> Any:
        desc = lambda x: view_or_array(x, "view", BLOCK, padding="nan", round_f32_to_tf32=True)  # noqa: E731
        return lower_for_cuda(lambda x: load_tile(desc(x), 0, 0, compute_capability=80), spec)

    if _compat.decomposed_descriptor_flags() < 2:
        with pytest.raises(KernelCallValueError, match=r"'desc' asks for round_f32_to_tf32.*sm90"):
            lower()
        return
    config = backend_config(jt_op(lower()))
    values = scalars_of(config, config["param_kinds"], config["param_indices"])
    assert [struct.unpack("<q", v)[0] for v in values[:4]] == [40, 48, 96, 1]
    assert [v[0] for v in values[4:6]] == [1, 1]  # padding="nan", round_f32_to_tf32


TMA_DTYPES = [
    (jnp.float32, FLOAT32),
    (jnp.float16, FLOAT16),
    (jnp.bfloat16, BFLOAT16),
    (jnp.float8_e4m3fn, UINT8),
    (jnp.float8_e5m2, UINT8),
    (jnp.int8, UINT8),
    (jnp.int16, UINT16),
    (jnp.int32, INT32),
    (jnp.uint16, UINT16),
]


@pytest.mark.parametrize(("dtype", "code"), TMA_DTYPES, ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("form", ["from_array", "view"])
def test_every_tma_dtype_gets_the_driver_data_type_and_fill(dtype: Any, code: int, form: str) -> None:
    itemsize = np.dtype(dtype).itemsize
    block = (16, 64 // itemsize)
    spec = jax.ShapeDtypeStruct((40, 256 // itemsize), dtype)
    is_float = np.dtype(dtype).kind == "f" or "float" in np.dtype(dtype).name
    for padding in ["zero", "nan"] if is_float and itemsize >= 2 else ["zero"]:

        def call(x: Any, padding: str = padding) -> Any:
            return load_tile(view_or_array(x, form, block, padding=padding), 0, 0, compute_capability=90)

        config = backend_config(jt_op(lower_for_cuda(call, spec)))
        ((_, _, data_type, rank, _swizzle, fill, *rest),) = records(config)
        assert (data_type, rank, fill) == (code, 2, FILL_NAN if padding == "nan" else 0)
        cols = spec.shape[1] if form == "from_array" else spec.shape[1] // 2
        assert rest[:2] == [cols, 40] and rest[5] == 256 and rest[9:11] == [block[1], block[0]]


def test_store_through_a_view_lowers_with_the_view_in_the_result_record() -> None:
    """What the GPU test of a store into a view runs, lowered: the aliased result's record is the view."""
    base, src = jax.ShapeDtypeStruct((40, 64), jnp.float32), jax.ShapeDtypeStruct((40, 32), jnp.float32)

    config = backend_config(jt_op(lower_for_cuda(lambda b, s: copy_into_view(b, s, compute_capability=90), base, src)))
    source, view = records(config)
    assert source[:2] == [PARAM_OPERAND, 0] and source[6:8] == [32, 40] and source[11] == 32 * 4
    assert view[:2] == [PARAM_RESULT, 0] and view[6:8] == [32, 40] and view[11] == 64 * 4
