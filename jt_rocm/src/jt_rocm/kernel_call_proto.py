"""The kernel-call description jaxlib's Triton handler reads, encoded without jaxlib.

jaxlib's ``triton_kernel_call_ffi`` handler takes one attribute, ``opaque``: a zlib-compressed
``jax_triton.TritonAnyKernelCall`` protocol buffer (schema ``jaxlib/gpu/triton.proto``). Encoding it here, instead
of through the ``TritonKernel``/``TritonKernelCall`` classes of a GPU jaxlib, lets a machine without a ROCm jaxlib
lower for ``rocm`` (export, CI) and keeps the bytes deterministic. Only the proto3 wire format is needed: varints,
fixed-width numbers and length-delimited fields.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from collections.abc import Sequence

# Wire types.
_VARINT = 0
_FIXED64 = 1
_LEN = 2
_FIXED32 = 5

# TritonKernelCall.Parameter oneof field numbers, by Triton scalar type.
_SCALAR_FIELDS = {"i1": 2, "i32": 3, "u32": 4, "i64": 5, "u64": 6, "fp32": 7, "fp64": 8}
#: Scalar types jaxlib's handler can pass to a kernel.
SUPPORTED_SCALAR_TYPES = tuple(_SCALAR_FIELDS)
_RANGES = {"i32": (-(2**31), 2**31 - 1), "u32": (0, 2**32 - 1), "i64": (-(2**63), 2**63 - 1), "u64": (0, 2**64 - 1)}


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # negative int32/int64 are sign-extended to 64 bits
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _tag(field: int, wire: int) -> bytes:
    return _varint((field << 3) | wire)


def _uint(field: int, value: int, *, always: bool = False) -> bytes:
    if value == 0 and not always:
        return b""
    return _tag(field, _VARINT) + _varint(value)


def _bytes(field: int, value: bytes, *, always: bool = False) -> bytes:
    if not value and not always:
        return b""
    return _tag(field, _LEN) + _varint(len(value)) + value


def _str(field: int, value: str) -> bytes:
    return _bytes(field, value.encode("utf-8"))


@dataclasses.dataclass(frozen=True)
class ArrayParameter:
    """A buffer argument: the next XLA buffer, optionally zeroed first and checked for alignment."""

    bytes_to_zero: int = 0
    ptr_divisibility: int = 0

    def encode(self) -> bytes:
        body = _uint(1, self.bytes_to_zero) + _uint(2, self.ptr_divisibility)
        return _bytes(1, body, always=True)


@dataclasses.dataclass(frozen=True)
class ScalarParameter:
    """A scalar argument passed by value. ``type_str`` is a Triton type in :data:`SUPPORTED_SCALAR_TYPES`."""

    type_str: str
    value: bool | int | float

    def __post_init__(self) -> None:
        if self.type_str not in _SCALAR_FIELDS:
            raise ValueError(f"scalar type {self.type_str!r} is not one of {SUPPORTED_SCALAR_TYPES}")
        if self.type_str in _RANGES:
            low, high = _RANGES[self.type_str]
            if not low <= int(self.value) <= high:
                raise ValueError(f"{self.value} does not fit {self.type_str}")

    def encode(self) -> bytes:
        field = _SCALAR_FIELDS[self.type_str]
        if self.type_str == "fp32":
            return _tag(field, _FIXED32) + struct.pack("<f", float(self.value))
        if self.type_str == "fp64":
            return _tag(field, _FIXED64) + struct.pack("<d", float(self.value))
        return _tag(field, _VARINT) + _varint(int(self.value))


Parameter = ArrayParameter | ScalarParameter


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """``jax_triton.TritonKernel``: the module and how to launch it.

    Attributes:
        name: The kernel symbol.
        num_warps: Warps as jaxlib counts them (its handler multiplies by its fixed threads-per-warp).
        shared_mem_bytes: Dynamic shared memory.
        module: The ``ptx`` field: PTX text on CUDA; on ROCm, the path of the HSACO file jaxlib loads.
        num_ctas: Programs per cluster.
    """

    name: str
    num_warps: int
    shared_mem_bytes: int
    module: str
    num_ctas: int = 1
    compute_capability: int = 0

    def encode(self) -> bytes:
        return b"".join(
            (
                _str(1, self.name),
                _uint(2, self.num_warps),
                _uint(3, self.shared_mem_bytes),
                _str(4, self.module),
                _uint(6, self.compute_capability),
                _uint(10, self.num_ctas, always=True),
            )
        )


@dataclasses.dataclass(frozen=True)
class KernelLaunch:
    """``jax_triton.TritonKernelCall``: a kernel, its grid and its parameters in signature order."""

    kernel: KernelSpec
    grid: tuple[int, int, int]
    parameters: tuple[Parameter, ...]

    def encode(self) -> bytes:
        parts = [_bytes(1, self.kernel.encode(), always=True)]
        parts += [_uint(2, self.grid[0]), _uint(3, self.grid[1]), _uint(4, self.grid[2])]
        parts += [_bytes(5, p.encode(), always=True) for p in self.parameters]
        return b"".join(parts)


@dataclasses.dataclass(frozen=True)
class BufferAlias:
    """An input buffer the autotuner must restore after its trials, because an output shares it."""

    input_buffer: int
    output_buffer: int
    size_bytes: int

    def encode(self) -> bytes:
        return _uint(1, self.input_buffer) + _uint(2, self.output_buffer) + _uint(3, self.size_bytes)


def encode_call(
    name: str,
    launches: Sequence[KernelLaunch],
    descriptions: Sequence[str],
    aliases: Sequence[BufferAlias],
    metadata: bytes,
    autotune_name: str,
) -> bytes:
    """The zlib-compressed ``TritonAnyKernelCall`` for one launch, or an autotuned set of candidates.

    Args:
        name: The call's name.
        launches: One launch per configuration.
        descriptions: A description per configuration (autotuning logs).
        aliases: Inputs to restore after autotuning trials.
        metadata: ``serialized_metadata`` bytes.
        autotune_name: The name the autotuner logs.
    """
    if len(launches) == 1:
        body = _bytes(1, launches[0].encode(), always=True)
    else:
        configs = [
            _bytes(2, _bytes(1, launch.encode(), always=True) + _str(2, desc))
            for launch, desc in zip(launches, descriptions)
        ]
        inner = (
            _str(1, autotune_name) + b"".join(configs) + b"".join(_bytes(3, a.encode(), always=True) for a in aliases)
        )
        body = _bytes(2, inner, always=True)
    message = body + _bytes(3, metadata) + _str(4, name)
    return zlib.compress(message, 9)
