"""What a platform chooses when it runs a translated kernel: `Strategy`.

The translation means the same thing on every platform; how it is best expressed depends on what the device has and
what the platform promises. The CPU backend promises a GPU's bits where the GPU is deterministic and has 64-bit
arithmetic to spare; a TPU has neither float64 nor int64 in hardware, holds a whole grid's values in its memory, and
runs one large product faster than many small ones. A strategy reaches the translation one way: the launcher passes
it down, and every rule reads it from its context (`jt_core.translation.rules.RuleContext`).
"""

from __future__ import annotations

import dataclasses

from jt_core.translation.numerics import GPU_NUMERICS, Numerics

__all__ = ["CPU_STRATEGY", "Strategy"]


@dataclasses.dataclass(frozen=True)
class Strategy:
    """A platform's choices for the translation.

    Attributes:
        numerics: How floating-point arithmetic rounds (`jt_core.translation.numerics`): a GPU's bits, or the
            platform's XLA's own way.
        side_by_side: Whether the programs of a grid may run side by side (where the analyses prove it gives what
            running them in order gives); ``False`` always runs them in order.
        side_by_side_bytes: How many bytes the largest value of the programs run side by side may take together
            (`jt_core.translation.plan.chunk_size`): more programs at a time run faster, and take more memory.
        ordered_accumulation: Whether a loop of ``acc = tl.dot(a, b, acc)`` adds its products in the loop's order
            (the bits of the loop run step by step); ``False``: one product over the whole reduction, as the
            platform's XLA sums it.
        unrolled_operations: How many operations a loop of programs side by side, with a trip count known when
            tracing, may have in all to be traced trip after trip (straight-line code); a longer one is a loop of
            XLA, whose lowering takes the same time whatever its trip count.
        slice_span: How many times its own elements a block access of programs side by side may span in its buffer
            (the rows between the blocks of a column of tiles, say) to be read or written as a slice of the buffer
            reshaped, rather than gathered or scattered.
        stray_loads_fault: Whether a load's lane that strays outside its buffer is a fault (the CPU names it;
            ``False``: it reads zero, as a lane a kernel never uses may on a GPU).
        ordered_window_reads: Whether a read of the programs' copy of a buffer they write in place is made before
            the writes after it (an optimization barrier): the CPU's XLA then updates the copy in place in a loop
            rather than copying it whole each trip; a TPU's XLA fuses the read into its users instead.
        fenced_outputs: Whether a call's outputs are made whole before what follows uses them (an optimization
            barrier), as a GPU kernel's are in memory: XLA then fuses nothing of the kernel into the next call's
            operations. XLA's TPU compiler crashes (a segmentation fault in its priority fusion) fusing a loop's
            batched product into a following call's reads.
        row_stores: Whether an unmasked store of rows of consecutive elements, at starts known only when it runs, is
            one scatter of whole rows where each lies within a row of its buffer (checked once for all the programs'
            rows where not proven); ``False``: one scatter of elements. On a TPU v5e the state-space decode step's
            rows scattered whole took 1589 ms, its elements 430 ms.
    """

    numerics: Numerics = GPU_NUMERICS
    side_by_side: bool = True
    side_by_side_bytes: int = 16 << 20
    ordered_accumulation: bool = True
    unrolled_operations: int = 256
    slice_span: int = 4
    stray_loads_fault: bool = True
    ordered_window_reads: bool = True
    fenced_outputs: bool = False
    row_stores: bool = True


#: The CPU backend's choices.
CPU_STRATEGY = Strategy()
