"""Serialising kernel calls into the protobuf messages jaxlib's Triton kernel-call handler reads.

jaxlib's handler (``triton_kernel_call`` / ``triton_kernel_call_ffi``) takes a zlib-compressed
``jax_triton.TritonAnyKernelCall`` message (``jaxlib/gpu/triton.proto``). Writing the wire format here, rather than
through jaxlib's Python bindings, keeps the lowering byte-for-byte deterministic, independent of the bindings'
constructor signatures (which changed between releases), and possible on a host whose jaxlib has no CUDA plugin
(export, CI). Field numbers are those of ``triton.proto``.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence

_VARINT = 0
_FIXED64 = 1
_LENGTH = 2
_FIXED32 = 5


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
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


def _uint(field: int, value: int) -> bytes:
    return _tag(field, _VARINT) + _varint(int(value))


def _bytes(field: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else bytes(value)
    return _tag(field, _LENGTH) + _varint(len(data)) + data


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """``TritonKernel``: the module and how to launch it."""

    name: str
    num_warps: int
    num_ctas: int
    shared_mem_bytes: int
    ptx: str
    compute_capability: int
    ttir: str = ""

    def encode(self) -> bytes:
        return b"".join(
            [
                _bytes(1, self.name),
                _uint(2, self.num_warps),
                _uint(3, self.shared_mem_bytes),
                _bytes(4, self.ptx),
                _bytes(5, self.ttir) if self.ttir else b"",
                _uint(6, self.compute_capability),
                _uint(10, self.num_ctas),
            ]
        )


@dataclasses.dataclass(frozen=True)
class ArrayParameter:
    """A buffer parameter: the next buffer, optionally zeroed first, checked for pointer divisibility."""

    bytes_to_zero: int = 0
    ptr_divisibility: int = 16

    def encode(self) -> bytes:
        body = b""
        if self.bytes_to_zero:
            body += _uint(1, self.bytes_to_zero)
        if self.ptr_divisibility:
            body += _uint(2, self.ptr_divisibility)
        return _bytes(1, body)


#: Scalar kinds and their ``Parameter`` oneof fields: bool_=2, i32=3, u32=4, i64=5, u64=6, f32=7, f64=8.
_SCALAR_FIELDS = {"bool": 2, "i32": 3, "u32": 4, "i64": 5, "u64": 6, "f32": 7, "f64": 8}


@dataclasses.dataclass(frozen=True)
class ScalarParameter:
    """A by-value parameter of one of the handler's scalar kinds (``bool``, ``i32``, ``u32``, ``i64``, ``u64``,
    ``f32``, ``f64``)."""

    kind: str
    value: int | float | bool

    def encode(self) -> bytes:
        field = _SCALAR_FIELDS[self.kind]
        if self.kind == "f32":
            return _tag(field, _FIXED32) + struct.pack("<f", float(self.value))
        if self.kind == "f64":
            return _tag(field, _FIXED64) + struct.pack("<d", float(self.value))
        if self.kind == "i32":
            return _uint(field, int(self.value))  # negative int32 is a 10-byte varint
        return _uint(field, int(self.value))


Parameter = ArrayParameter | ScalarParameter


@dataclasses.dataclass(frozen=True)
class KernelCallSpec:
    """``TritonKernelCall``: one kernel, its grid and its parameters in kernel order."""

    kernel: KernelSpec
    grid: tuple[int, int, int]
    parameters: tuple[Parameter, ...]

    def encode(self) -> bytes:
        parts = [_bytes(1, self.kernel.encode())]
        parts += [_uint(2 + axis, size) for axis, size in enumerate(self.grid)]
        parts += [_bytes(5, p.encode()) for p in self.parameters]
        return b"".join(parts)


@dataclasses.dataclass(frozen=True)
class AutotunedCallSpec:
    """``TritonAutotunedKernelCall``: candidates, and the buffers the trials must restore.

    Attributes:
        name: Shown in jaxlib's autotuning log.
        configs: ``(call, description)`` pairs.
        input_output_aliases: ``(input buffer index, output buffer index, size in bytes)`` triples.
    """

    name: str
    configs: tuple[tuple[KernelCallSpec, str], ...]
    input_output_aliases: tuple[tuple[int, int, int], ...]

    def encode(self) -> bytes:
        parts = [_bytes(1, self.name)]
        for call, description in self.configs:
            parts.append(_bytes(2, _bytes(1, call.encode()) + _bytes(2, description)))
        for input_index, output_index, size in self.input_output_aliases:
            parts.append(_bytes(3, _uint(1, input_index) + _uint(2, output_index) + _uint(3, size)))
        return b"".join(parts)


def any_kernel_call(call: KernelCallSpec | AutotunedCallSpec, name: str, metadata: bytes) -> bytes:
    """``TritonAnyKernelCall`` holding ``call``, with the user's name and opaque metadata."""
    field = 1 if isinstance(call, KernelCallSpec) else 2
    return _bytes(field, call.encode()) + (_bytes(3, metadata) if metadata else b"") + _bytes(4, name)


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


__all__: Sequence[str] = [
    "ArrayParameter",
    "AutotunedCallSpec",
    "KernelCallSpec",
    "KernelSpec",
    "ScalarParameter",
    "any_kernel_call",
    "decode_fields",
]
