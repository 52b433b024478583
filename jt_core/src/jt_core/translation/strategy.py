"""What a platform chooses when it runs a translated kernel: `Strategy`.

The translation means the same thing on every platform; how it is best expressed depends on what the device has and
what the platform promises. The CPU backend promises a GPU's bits where the GPU is deterministic and has 64-bit
arithmetic to spare; a TPU has neither float64 nor int64 in hardware, holds a whole grid's values in its memory, and
runs one large product faster than many small ones.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator

__all__ = ["CPU_STRATEGY", "Strategy", "active", "using"]


@dataclasses.dataclass(frozen=True)
class Strategy:
    """A platform's choices for the translation.

    Attributes:
        side_by_side_bytes: How many bytes the largest value of the programs run side by side may take together
            (`jt_core.translation.grid.chunk_size`): more programs at a time run faster, and take more memory.
        float64: Whether float64 arithmetic is native. Where it is, divisions are correctly rounded through float64
            and fused multiply-adds are computed exactly there; where not, nothing is widened to float64.
        int64_addresses: Whether 64-bit address arithmetic is cheap. Where not, offsets inside buffers of fewer
            than 2**31 elements are computed in int32.
        exact_rounding: Whether arithmetic rounds as Triton's GPU compilers round it, whatever the host's own
            compiler would do: a product and a sum fused into one rounding where Triton fuses them (with
            ``enable_fp_fusion``), bfloat16 results rounded after each operation, ``tl.dot``'s float32 operands
            rounded to TF32 where its input precision says so. ``False``: as the platform's XLA computes them, with
            ``tl.dot``'s input precisions as XLA precision configs (``"ieee"`` highest, ``"tf32"`` high).
        ordered_accumulation: Whether a loop of ``acc = tl.dot(a, b, acc)`` adds its products in the loop's order
            (the bits of the loop run step by step); ``False``: one product over the whole reduction, as the
            platform's XLA sums it.
        unrolled_operations: How many operations a loop of programs side by side, with a trip count known when
            tracing, may have in all to be traced iteration after iteration (its loads then become slices at known
            offsets, and a K-loop of ``tl.dot`` one product); a longer one is a loop of XLA.
        slice_span: How many times its own elements a block access of programs side by side may span in its buffer
            (the rows between the blocks of a column of tiles, say) to be read or written as a slice of the buffer
            reshaped, rather than gathered or scattered.
    """

    side_by_side_bytes: int = 16 << 20
    float64: bool = True
    int64_addresses: bool = True
    exact_rounding: bool = True
    ordered_accumulation: bool = True
    unrolled_operations: int = 256
    slice_span: int = 4


#: The CPU backend's choices.
CPU_STRATEGY = Strategy()


_ACTIVE: contextvars.ContextVar[Strategy] = contextvars.ContextVar("jt_translation_strategy", default=CPU_STRATEGY)


def active() -> Strategy:
    """The strategy of the kernel being traced (the CPU's outside a trace)."""
    return _ACTIVE.get()


@contextlib.contextmanager
def using(strategy: Strategy) -> Iterator[None]:
    """Traces a kernel with ``strategy``: the operations that depend on it read it through `active`."""
    token = _ACTIVE.set(strategy)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
