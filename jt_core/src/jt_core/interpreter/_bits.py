"""libdevice's integer functions: ``mulhi``, ``brev``, ``clz``, ``ffs``, ``popc``, ``byte_perm``, ``hadd``, ``sad``
and the rest, on the bits of their operands.

The compiled path's integers carry no sign (TTIR's ``i32`` is both ``int32`` and ``uint32``), the interpreter's do,
so each function reads its operands' bits as the signed or unsigned type the libdevice symbol names, and returns
bits that the caller gives the result's type.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jt_core.interpreter._arrays import Arrays

__all__ = [
    "byte_perm",
    "clz",
    "ffs",
    "halving_add",
    "mul24",
    "mulhi",
    "popc",
    "reverse_bits",
    "sad",
]


def _wide(dtype: Any, signed: bool) -> Any:
    return np.int64 if signed else np.uint64


def mulhi(xp: Arrays, a: Any, b: Any, signed: bool) -> Any:
    """The high half of the full product of two 32- or 64-bit integers."""
    width = 8 * a.dtype.itemsize
    if width < 64:
        wide = _wide(a.dtype, signed)
        view = xp.signed if signed else xp.unsigned
        product = view(a).astype(wide) * view(b).astype(wide)
        return (product >> width).astype(view(a).dtype)
    ua, ub = xp.unsigned(a), xp.unsigned(b)
    low = xp.constant(0xFFFFFFFF, np.uint64)
    shift = xp.constant(32, np.uint64)
    a_lo, a_hi, b_lo, b_hi = ua & low, ua >> shift, ub & low, ub >> shift
    lo_lo, lo_hi, hi_lo = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo
    carry = ((lo_lo >> shift) + (lo_hi & low) + (hi_lo & low)) >> shift
    high = a_hi * b_hi + (lo_hi >> shift) + (hi_lo >> shift) + carry
    if signed:
        # The signed product's high half: subtract the other operand for each negative one (modulo 2**64).
        zero = xp.constant(0, np.uint64)
        high = high - xp.np.where(xp.signed(a) < 0, ub, zero) - xp.np.where(xp.signed(b) < 0, ua, zero)
        return xp.signed(high)
    return high


def reverse_bits(xp: Arrays, x: Any) -> Any:
    """``brev``: the bits in reverse order."""
    u = xp.unsigned(x)
    dtype = u.dtype
    width = 8 * dtype.itemsize
    masks = [0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F, 0x00FF00FF00FF00FF, 0x0000FFFF0000FFFF]
    step = 1
    for mask in masks:
        if step >= width:
            break
        m = xp.constant(mask & ((1 << width) - 1), dtype)
        s = xp.constant(step, dtype)
        u = ((u >> s) & m) | ((u & m) << s)
        step *= 2
    if width == 64:
        s = xp.constant(32, dtype)
        u = (u >> s) | (u << s)
    return u


def popc(xp: Arrays, x: Any) -> Any:
    """The number of bits set (an ``int32``)."""
    return xp.np.bitwise_count(xp.unsigned(x)).astype(np.int32)


def clz(xp: Arrays, x: Any) -> Any:
    """The number of leading zero bits (an ``int32``): the width for zero."""
    u = xp.unsigned(x)
    width = 8 * u.dtype.itemsize
    shift = 1
    while shift < width:
        u = u | (u >> xp.constant(shift, u.dtype))
        shift *= 2
    return (width - xp.np.bitwise_count(u).astype(np.int32)).astype(np.int32)


def ffs(xp: Arrays, x: Any) -> Any:
    """The position of the least significant bit set, from 1 (an ``int32``): 0 for zero."""
    u = xp.unsigned(x)
    lowest = u & (xp.constant(0, u.dtype) - u)
    below = xp.np.bitwise_count(lowest - xp.constant(1, u.dtype)).astype(np.int32)
    return xp.np.where(u == 0, 0, below + 1).astype(np.int32)


def halving_add(xp: Arrays, a: Any, b: Any, signed: bool, rounded: bool) -> Any:
    """``hadd`` (``(a + b) >> 1``) and ``rhadd`` (``(a + b + 1) >> 1``), with no overflow in the sum."""
    view = xp.signed if signed else xp.unsigned
    wide = _wide(a.dtype, signed)
    total = view(a).astype(wide) + view(b).astype(wide) + (1 if rounded else 0)
    return (total >> 1).astype(view(a).dtype)


def mul24(xp: Arrays, a: Any, b: Any, signed: bool) -> Any:
    """The low 32 bits of the product of the operands' low 24 bits (sign-extended from bit 23 when ``signed``)."""
    if signed:
        eight = xp.constant(8, np.int32)
        a24 = ((xp.signed(a) << eight) >> eight).astype(np.int64)
        b24 = ((xp.signed(b) << eight) >> eight).astype(np.int64)
        return (a24 * b24).astype(np.int32)
    mask = xp.constant(0xFFFFFF, np.uint32)
    return ((xp.unsigned(a) & mask).astype(np.uint64) * (xp.unsigned(b) & mask).astype(np.uint64)).astype(np.uint32)


def sad(xp: Arrays, a: Any, b: Any, c: Any, signed: bool) -> Any:
    """``|a - b| + c`` modulo 2**32 (``c`` unsigned)."""
    view = xp.signed if signed else xp.unsigned
    difference = view(a).astype(np.int64) - view(b).astype(np.int64)
    return (xp.np.abs(difference) + xp.unsigned(c).astype(np.int64)).astype(np.uint32)


def byte_perm(xp: Arrays, a: Any, b: Any, selector: Any) -> Any:
    """``byte_perm``: byte ``n`` of the result is the byte of ``{b, a}`` (eight bytes, ``a`` the low four) that
    bits ``4n`` to ``4n + 2`` of ``selector`` name."""
    both = (xp.unsigned(b).astype(np.uint64) << xp.constant(32, np.uint64)) | xp.unsigned(a).astype(np.uint64)
    s = xp.unsigned(selector).astype(np.uint64)
    result = xp.np.zeros_like(both)
    for n in range(4):
        chosen = (s >> xp.constant(4 * n, np.uint64)) & xp.constant(7, np.uint64)
        byte = (both >> (chosen * xp.constant(8, np.uint64))) & xp.constant(0xFF, np.uint64)
        result = result | (byte << xp.constant(8 * n, np.uint64))
    return result.astype(np.uint32)
