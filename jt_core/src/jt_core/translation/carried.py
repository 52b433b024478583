"""What loops and branches carry: each value as arrays of fixed types (numbers as their TTIR type, pointers as their
offsets in int64 with the buffer they point into kept aside, block pointers and tensor descriptors as their fields),
and back; a value that is a pointer on one path only, or into another argument, is refused."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp

from jt_core.translation import lang
from jt_core.translation.analysis.affine import Affine
from jt_core.translation.descriptors import Descriptor
from jt_core.translation.memory import Pointer
from jt_core.translation.program import TensorType
from jt_core.translation.values import BlockPointer, Unsupported

__all__ = ["pack", "packed", "same_target", "unpack", "unpacked"]


def pack(value: Any, ty: TensorType) -> Any:
    """A value as the arrays a loop carries."""
    if isinstance(value, Pointer):
        return jnp.asarray(value.offset, jnp.int64)
    if isinstance(value, BlockPointer):
        fields = (value.base, *value.shape, *value.strides, *value.offsets)
        return tuple(jnp.asarray(f, jnp.int64) for f in fields)
    if isinstance(value, Descriptor):
        return tuple(jnp.asarray(f, jnp.int64) for f in (value.base, *value.shape, *value.strides))
    return lang.as_array(value, ty)


def unpack(template: Any, carried: Any, form: Affine | None = None) -> Any:
    """The value a loop's carried arrays hold, shaped like ``template`` (its value before the loop); a pointer's
    offsets with ``form``, what the analyses know of them in this trip."""
    if isinstance(template, Pointer):
        return Pointer(template.buffer, carried, template.pointee, form)
    if isinstance(template, BlockPointer):
        rank = len(template.block)
        base, rest = carried[0], carried[1:]
        return dataclasses.replace(
            template,
            base=base,
            shape=tuple(rest[:rank]),
            strides=tuple(rest[rank : 2 * rank]),
            offsets=tuple(rest[2 * rank :]),
        )
    if isinstance(template, Descriptor):
        rank = len(template.block)
        rest = carried[1:]
        return dataclasses.replace(template, base=carried[0], shape=tuple(rest[:rank]), strides=tuple(rest[rank:]))
    return carried


def same_target(template: Any, value: Any, line: str | None) -> None:
    for kind in (Pointer, BlockPointer, Descriptor):
        if isinstance(template, kind) != isinstance(value, kind):
            raise Unsupported("a loop or branch value that is a pointer on one path only", line)
    if isinstance(template, (Pointer, BlockPointer, Descriptor)) and template.buffer != value.buffer:
        raise Unsupported("a pointer moved to another argument inside a loop or branch", line)
    if isinstance(template, Descriptor) and (template.block, template.nan_padding) != (value.block, value.nan_padding):
        raise Unsupported("tensor descriptors of different blocks or paddings on two paths", line)


def packed(values: Sequence[Any], types: Sequence[TensorType], templates: Sequence[Any], line: str | None) -> list[Any]:
    out = []
    for value, ty, template in zip(values, types, templates, strict=True):
        same_target(template, value, line)
        out.append(pack(value, ty))
    return out


def unpacked(k: Any, templates: Sequence[Any], arrays: Sequence[Any], values: Sequence[int]) -> list[Any]:
    return [unpack(t, a, k.form(v)) for t, a, v in zip(templates, arrays, values, strict=True)]
