"""The kernel-call description jaxlib's Triton handler reads, encoded without jaxlib.

jaxlib's Triton handlers (``triton_kernel_call_ffi`` and the legacy ``triton_kernel_call``, CUDA and ROCm alike)
take a zlib-compressed ``jax_triton.TritonAnyKernelCall`` protocol buffer (schema ``jaxlib/gpu/triton.proto``).
Encoding it here, rather than through the bindings of a GPU jaxlib, keeps the lowering byte-for-byte deterministic,
independent of those bindings' constructors (which changed between releases), and possible on a host whose jaxlib
has no GPU plugin (export, CI). Only the proto3 wire format is needed: varints, fixed-width numbers and
length-delimited fields; fields holding their default value are left out, as proto3 does, except the cluster size
and the alias triples, which the handler reads as given.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from collections.abc import Sequence

__all__ = [
    "SCALAR_TYPES",
    "ArrayParameter",
    "BufferAlias",
    "KernelLaunch",
    "KernelSpec",
    "Parameter",
    "ScalarParameter",
    "decode_fields",
    "encode_call",
    "fields_by_number",
]

_VARINT = 0
_FIXED64 = 1
_LENGTH = 2
_FIXED32 = 5

# TritonKernelCall.Parameter oneof field numbers, by Triton scalar type.
_SCALAR_FIELDS = {"i1": 2, "i32": 3, "u32": 4, "i64": 5, "u64": 6, "fp32": 7, "fp64": 8}
#: The scalar types the handler can pass to a kernel (Triton type strings).
SCALAR_TYPES = tuple(_SCALAR_FIELDS)
_RANGES = {"i32": (-(2**31), 2**31 - 1), "u32": (0, 2**32 - 1), "i64": (-(2**63), 2**63 - 1), "u64": (0, 2**64 - 1)}


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # negative integers are sign-extended to 64 bits
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
    return _varint(field << 3 | wire)


def _uint(field: int, value: int, *, always: bool = False) -> bytes:
    if not value and not always:
        return b""
    return _tag(field, _VARINT) + _varint(int(value))


def _bytes(field: int, value: bytes | str, *, always: bool = False) -> bytes:
    data = value.encode() if isinstance(value, str) else bytes(value)
    if not data and not always:
        return b""
    return _tag(field, _LENGTH) + _varint(len(data)) + data


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """``TritonKernel``: the module and how to launch it.

    Attributes:
        name: The kernel symbol.
        num_warps: Warps per program, as the handler counts them.
        shared_mem_bytes: Dynamic shared memory.
        module: The ``ptx`` field: PTX text on CUDA; on ROCm, the path of the HSACO file the handler loads.
        num_ctas: Programs per cluster.
        compute_capability: The CUDA compute capability (0 on ROCm).
    """

    name: str
    num_warps: int
    shared_mem_bytes: int
    module: str
    num_ctas: int = 1
    compute_capability: int = 0

    def encode(self) -> bytes:
        return b"".join(
            [
                _bytes(1, self.name),
                _uint(2, self.num_warps),
                _uint(3, self.shared_mem_bytes),
                _bytes(4, self.module),
                _uint(6, self.compute_capability),
                _uint(10, self.num_ctas, always=True),
            ]
        )


@dataclasses.dataclass(frozen=True)
class ArrayParameter:
    """A buffer parameter: the next buffer, optionally zeroed first, checked for pointer divisibility."""

    bytes_to_zero: int = 0
    ptr_divisibility: int = 16

    def encode(self) -> bytes:
        return _bytes(1, _uint(1, self.bytes_to_zero) + _uint(2, self.ptr_divisibility), always=True)


@dataclasses.dataclass(frozen=True)
class ScalarParameter:
    """A by-value parameter; ``type_str`` is one of `SCALAR_TYPES`.

    Raises:
        ValueError: For another type, or a value out of the type's range.
    """

    type_str: str
    value: int | float | bool

    def __post_init__(self) -> None:
        if self.type_str not in _SCALAR_FIELDS:
            raise ValueError(f"scalar type {self.type_str!r} is not one of {SCALAR_TYPES}")
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
class KernelLaunch:
    """``TritonKernelCall``: one kernel, its grid and its parameters in kernel order."""

    kernel: KernelSpec
    grid: tuple[int, int, int]
    parameters: tuple[Parameter, ...]

    def encode(self) -> bytes:
        parts = [_bytes(1, self.kernel.encode(), always=True)]
        parts += [_uint(2 + axis, size, always=True) for axis, size in enumerate(self.grid)]
        parts += [_bytes(5, p.encode(), always=True) for p in self.parameters]
        return b"".join(parts)


@dataclasses.dataclass(frozen=True)
class BufferAlias:
    """An input buffer the autotuner restores after its trials because an output shares it (buffer indices count
    operands, then results)."""

    input_buffer: int
    output_buffer: int
    size_bytes: int

    def encode(self) -> bytes:
        return b"".join(
            _uint(field, value, always=True)
            for field, value in ((1, self.input_buffer), (2, self.output_buffer), (3, self.size_bytes))
        )


def encode_call(
    name: str,
    launches: Sequence[KernelLaunch],
    descriptions: Sequence[str],
    aliases: Sequence[BufferAlias],
    metadata: bytes,
) -> bytes:
    """The zlib-compressed ``TritonAnyKernelCall`` for one launch, or for autotuned candidates.

    Args:
        name: The call's name (also the name the autotuner logs).
        launches: One launch per configuration.
        descriptions: A description per configuration (autotuning logs).
        aliases: Inputs the autotuner restores after its trials.
        metadata: ``serialized_metadata`` bytes.
    """
    if len(launches) == 1:
        body = _bytes(1, launches[0].encode(), always=True)
    else:
        configs = [
            _bytes(2, _bytes(1, launch.encode(), always=True) + _bytes(2, description), always=True)
            for launch, description in zip(launches, descriptions)
        ]
        inner = _bytes(1, name) + b"".join(configs) + b"".join(_bytes(3, a.encode(), always=True) for a in aliases)
        body = _bytes(2, inner, always=True)
    return zlib.compress(body + _bytes(3, metadata) + _bytes(4, name), 9)


def decode_fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """Splits a message into ``(field, wire type, value)`` triples (for tests and debugging)."""
    out: list[tuple[int, int, int | bytes]] = []
    i = 0

    def varint() -> int:
        nonlocal i
        shift = result = 0
        while True:
            byte = data[i]
            i += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return result

    while i < len(data):
        key = varint()
        field, wire = key >> 3, key & 7
        value: int | bytes
        if wire == _VARINT:
            value = varint()
        elif wire == _LENGTH:
            length = varint()
            value = data[i : i + length]
            i += length
        elif wire == _FIXED32:
            value = data[i : i + 4]
            i += 4
        elif wire == _FIXED64:
            value = data[i : i + 8]
            i += 8
        else:
            raise ValueError(f"unsupported wire type {wire} at byte {i}")
        out.append((field, wire, value))
    return out


def fields_by_number(data: bytes) -> dict[int, list[int | bytes]]:
    """A message as ``{field number: [values]}``: ints for varints, bytes for the rest (for tests and debugging)."""
    fields: dict[int, list[int | bytes]] = {}
    for field, _, value in decode_fields(data):
        fields.setdefault(field, []).append(value)
    return fields
