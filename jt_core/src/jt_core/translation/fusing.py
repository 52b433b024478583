"""Products fused into the sums that read them, as a kernel is traced: what the products analysis
(`jt_core.translation.analysis.products`) decided, made.

A product that a sum fuses keeps its factors (through a negation, a splat, a broadcast or a new axis) until the sum,
which computes ``a * b + c`` rounded once; a product that rounds alone while a sum may read it is kept from the host
compiler's own contraction (an optimisation barrier), so the bits are the same on every host.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jt_core.interpreter import libdevice
from jt_core.translation.analysis.products import Fusions
from jt_core.translation.program import Operation

__all__ = ["Fusing"]


class Fusing:
    """The products of one trace of a kernel.

    Args:
        fusions: The analysis's decisions (``None`` where the numerics leave rounding to XLA: nothing is fused).
        fuse: Whether products may be fused at all (``enable_fp_fusion``).
    """

    def __init__(self, fusions: Fusions | None, fuse: bool) -> None:
        self.fusions = fusions
        self.fuse = fuse
        #: The factors of the products traced so far (a negated one's first factor negated), by value.
        self.factors: dict[int, tuple[jax.Array, jax.Array]] = {}

    def forget(self) -> None:
        """Forgets the products of the program traced before."""
        self.factors = {}

    def fused(self, op: Operation, arrays: Sequence[jax.Array], numbers: Any) -> jax.Array | None:
        """A sum or difference that fuses a product, rounded once, or ``None``."""
        if self.fusions is None or not self.fuse or op.name not in ("arith.addf", "arith.subf"):
            return None
        index = self.fusions.fused.get(id(op))
        if index is None or op.operands[index] not in self.factors:
            return None
        a, b = self.factors[op.operands[index]]
        other = arrays[1 - index]
        if op.name == "arith.subf":
            if index == 0:
                other = -other  # a * b - c
            else:
                a = -a  # c - a * b
        fused = libdevice.fused_multiply_add(libdevice.jax_arrays(), a, b, other.astype(a.dtype))
        return numbers.round_bfloat16(fused)

    def kept(self, op: Operation, arrays: Sequence[jax.Array], out: jax.Array) -> jax.Array:
        """A product's factors kept for the sums that fuse it; a product that rounds alone while a sum may read it
        kept from XLA's own contraction (XLA's CPU code fuses a float32 product and sum, and float16 ones where the
        processor has AVX-512 FP16, which would give other bits on other hosts)."""
        if self.fusions is None:
            return out
        if op.name == "arith.negf" and op.operands[0] in self.factors:
            a, b = self.factors[op.operands[0]]
            self.factors[op.results[0]] = (-a, b)
        if op.name != "arith.mulf":
            return out
        if self.fuse:
            self.factors[op.results[0]] = (arrays[0], arrays[1])
        if op.results[0] in self.fusions.rounded:
            out = lax.optimization_barrier(out)
        return out

    def passed(self, op: Operation, shape: tuple[int, ...]) -> None:
        """A product passed on by a splat, a broadcast or a new axis: its factors moved alike."""
        if not op.operands or op.operands[0] not in self.factors:
            return
        a, b = self.factors[op.operands[0]]
        if op.name == "tt.expand_dims":
            axis = int(op.attr("axis"))
            self.factors[op.results[0]] = (jnp.expand_dims(a, axis), jnp.expand_dims(b, axis))
        else:
            self.factors[op.results[0]] = (jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape))
