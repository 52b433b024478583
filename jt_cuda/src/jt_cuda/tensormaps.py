"""How jt's CUDA handler passes host-side tensor descriptors: TMA descriptors, or the decomposed base pointer.

A ``tensordesc<...>`` parameter becomes several kernel parameters, exactly as Triton's own CUDA launcher expands it.
Which form depends on the compiled kernel's ``tensordesc_meta`` (one entry per descriptor parameter, in signature
order):

* with an entry (sm90 and later): a 128-byte ``CUtensorMap`` passed by value, then the shape (``i32`` each) and
  the strides (``i64`` each). The map is encoded by the handler at launch with ``cuTensorMapEncodeTiled`` from the
  buffer's real address and the record built here (element type, swizzle, box, dimensions and byte strides, in the
  driver's innermost-first order);
* without (``tensordesc_meta`` empty, before sm90): the base pointer, the shape and strides (``i64`` each), the
  padding flag (``i1``; Triton 3.9 adds a second one, ``round_f32_to_tf32``), then the shape (``i32``) and strides
  (``i64``) again.

The shape and strides are the descriptor's (a view of a larger buffer keeps the buffer's strides); the address is
always the buffer's start. ``round_f32_to_tf32`` becomes the TMA data type ``TFLOAT32``, so the TMA unit rounds as
it loads, or the decomposed form's second flag.

Shapes and strides are static under JAX, so they travel as packed scalars; only the address is a run-time value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jt_core.gpu import DescriptorParam
from jt_core.plugin import CompiledKernel, KernelCallValueError, ParamSlot
from jt_cuda import _compat

#: The highest rank and box size a TMA descriptor takes.
MAX_RANK = 5
MAX_BOX = 256
#: Triton's ``elem_type`` numbering differs from the driver's ``CUtensorMapDataType`` for these three.
_DEVICE_TO_HOST_DATA_TYPE = {8: 10, 9: 8, 10: 9}
#: ``CUtensorMapFloatOOBfill``: none (zeros), or NaN.
_FILL_NONE = 0
_FILL_NAN = 1
#: ``CU_TENSOR_MAP_DATA_TYPE_TFLOAT32``: float32 in memory, rounded to TF32 by the TMA unit as it loads (what
#: Triton's launcher encodes for ``round_f32_to_tf32=True``). ``_FTZ`` (12) would also flush denormals.
_DATA_TYPE_TFLOAT32 = 11


def _meta(kernel: CompiledKernel, ordinal: int, slot: ParamSlot) -> dict[str, Any] | None:
    metas = kernel.metadata.get("tensordesc_meta") or []
    if not metas:
        return None
    if ordinal >= len(metas) or not isinstance(metas[ordinal], dict):
        raise KernelCallValueError(
            f"tensor descriptor argument {slot.name!r}: the compiled kernel {kernel.name!r} describes "
            f"{len(metas)} descriptors, not one for descriptor parameter {ordinal}"
        )
    return dict(metas[ordinal])


def tensor_map_record(slot: ParamSlot, meta: dict[str, Any]) -> tuple[int, ...]:
    """The encoding record of one descriptor under one compiled kernel (see ``jt_cuda_launch.cc``).

    ``data type, rank, swizzle, OOB fill, dims[5], byte strides[4], box[5]``, innermost dimension first.

    Raises:
        KernelCallValueError: For im2col descriptors or boxes TMA cannot move.
    """
    desc = slot.descriptor
    assert desc is not None
    if meta.get("is_im2col"):
        raise KernelCallValueError(f"tensor descriptor argument {slot.name!r}: im2col descriptors are not supported")
    elem_size = int(meta["elem_size"])
    device_type = int(meta["elem_type"])
    block = [int(b) for b in meta["block_size"]]
    shape = list(desc.shape)
    if meta.get("fp4_padded"):
        shape[-1] *= 2
    rank = desc.rank
    if len(block) != rank or rank > MAX_RANK:
        raise KernelCallValueError(
            f"tensor descriptor argument {slot.name!r}: the kernel's TMA box {block} does not fit the tensor's rank "
            f"{rank}"
        )
    if any(b > MAX_BOX for b in block):
        raise KernelCallValueError(
            f"tensor descriptor argument {slot.name!r}: the kernel's TMA box {block} has a side above {MAX_BOX}; use "
            "a smaller block_shape"
        )
    dims = list(reversed(shape)) + [1] * (MAX_RANK - rank)
    byte_strides = [desc.strides[axis] * elem_size for axis in range(rank - 2, -1, -1)]
    byte_strides += [0] * (MAX_RANK - 1 - len(byte_strides))
    box = list(reversed(block)) + [1] * (MAX_RANK - rank)
    fill = _FILL_NAN if desc.padding == "nan" else _FILL_NONE
    data_type = (
        _DATA_TYPE_TFLOAT32 if desc.round_f32_to_tf32 else _DEVICE_TO_HOST_DATA_TYPE.get(device_type, device_type)
    )
    return (data_type, rank, int(meta["swizzle"]), fill, *dims, *byte_strides, *box)


def descriptor_params(slot: ParamSlot, ordinal: int, kernels: Sequence[CompiledKernel]) -> list[DescriptorParam]:
    """The kernel parameters one descriptor argument becomes, for every configuration of the call.

    Args:
        slot: The descriptor's slot.
        ordinal: Its position among the kernel's descriptor parameters (the index into ``tensordesc_meta``).
        kernels: The compiled configurations.

    Raises:
        KernelCallValueError: When configurations disagree on the form, or for descriptors TMA cannot encode.
    """
    desc = slot.descriptor
    assert desc is not None
    metas = [_meta(kernel, ordinal, slot) for kernel in kernels]
    if len({meta is None for meta in metas}) > 1:
        raise KernelCallValueError(
            f"tensor descriptor argument {slot.name!r}: some configurations take it as a TMA descriptor and some "
            "decomposed; autotune over configurations compiled for one form"
        )
    params: list[DescriptorParam] = []
    if metas[0] is None:
        flags = [int(desc.padding == "nan"), int(desc.round_f32_to_tf32)]
        count = _compat.decomposed_descriptor_flags()
        if desc.round_f32_to_tf32 and count < len(flags):
            raise KernelCallValueError(
                f"tensor descriptor argument {slot.name!r} asks for round_f32_to_tf32, but the kernel takes it "
                f"decomposed (no TMA before sm90) and this Triton ({_compat.triton_version()}) has no rounding flag "
                "for that form (Triton 3.9 has); compile for sm90+ (compute_capability=90), upgrade Triton, or drop "
                "round_f32_to_tf32"
            )
        params.append(DescriptorParam("buffer"))
        params += [DescriptorParam("scalar", "i64", size) for size in desc.shape]
        params += [DescriptorParam("scalar", "i64", stride) for stride in desc.strides]
        params += [DescriptorParam("scalar", "i1", flag) for flag in flags[:count]]
    else:
        records = tuple(tensor_map_record(slot, meta) for meta in metas if meta is not None)
        params.append(DescriptorParam("tensor_map", records=records))
    params += [DescriptorParam("scalar", "i32", size) for size in desc.shape]
    params += [DescriptorParam("scalar", "i64", stride) for stride in desc.strides]
    return params
