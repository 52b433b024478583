"""A kernel whose module binds ``triton.language.core`` besides ``triton.language``, as libdevice's own module and
some libraries' kernels do: Triton's interpreter patches both for a run."""

import triton
import triton.language as tl
from triton.language import core  # noqa: F401  (what the kernel's module sees is the point)


@triton.jit
def shifted_rows_kernel(x_ptr, out_ptr, COLS: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, COLS)
    x = tl.load(x_ptr + row * COLS + cols)
    tl.store(out_ptr + row * COLS + cols, x - tl.max(x, axis=0))
