"""Triton kernels shared by jt-core's tests (kept in a module so that Triton can read their source)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, length, out_ptr, BLOCK: tl.constexpr):
    """Classic convention: inputs, a scalar, then the output."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < length
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def add_current_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr = 16):
    """Current convention: output pointer before the scalar, constexpr with a default."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def inplace_classic_kernel(x_ptr, n, factor, out_ptr, BLOCK: tl.constexpr):
    """Classic convention with an aliased output: the output keeps its own pointer (same buffer as x)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * factor, mask=mask)


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * factor, mask=mask)


@triton.jit
def scale_by_constexpr_kernel(x_ptr, out_ptr, n, FACTOR: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * FACTOR, mask=mask)


@triton.jit
def select_kernel(x_ptr, out_ptr, n, flag, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if flag:
        x = -x
    tl.store(out_ptr + offsets, x, mask=mask)


@triton.jit
def two_outputs_kernel(x_ptr, sum_ptr, diff_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(sum_ptr + offsets, x + 1, mask=mask)
    tl.store(diff_ptr + offsets, x - 1, mask=mask)


@triton.jit
def grid_ids_kernel(out_ptr, NX: tl.constexpr, NY: tl.constexpr):
    """out[x, y, z] = 100 * x + 10 * y + z over a 3-axis grid."""
    x = tl.program_id(0)
    y = tl.program_id(1)
    z = tl.program_id(2)
    tl.store(out_ptr + (x * NY + y) * tl.num_programs(2) + z, 100 * x + 10 * y + z)


@triton.jit
def oob_load_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    """Unmasked load of BLOCK elements: out of bounds when the array is shorter."""
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))


@triton.jit
def store_into_input_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    tl.store(x_ptr + offsets, x + 1)
    tl.store(out_ptr + offsets, x)


@triton.jit
def shape_error_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    other = tl.arange(0, 2 * BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + other)


@triton.jit
def _square(x):
    return x * x


@triton.jit
def nested_helper_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, _square(tl.load(x_ptr + offsets, mask=mask)) + 1, mask=mask)


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, K, BK: tl.constexpr):
    """Sums a row of K elements in chunks of BK: ``range`` with a runtime bound."""
    row = tl.program_id(0)
    acc = tl.zeros((BK,), tl.float32)
    for k in range(0, K, BK):
        offsets = k + tl.arange(0, BK)
        acc += tl.load(x_ptr + row * K + offsets, mask=offsets < K, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def inline_asm_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(out_ptr + offsets, y)


@triton.jit
def pair_kernel(pair, out_ptr, n, BLOCK: tl.constexpr):
    """A tuple parameter: out = pair[0] * pair[1]."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(pair[0] + offsets, mask=mask)
    b = tl.load(pair[1] + offsets, mask=mask)
    tl.store(out_ptr + offsets, a * b, mask=mask)


@triton.jit
def _scaled_sum(pair, offsets, mask, SCALES: tl.constexpr):
    return tl.load(pair[0] + offsets, mask=mask) * SCALES[0] + tl.load(pair[1] + offsets, mask=mask) * SCALES[1]


@triton.jit
def nested_pair_kernel(xs, out_ptr, n, SCALES: tl.constexpr, BLOCK: tl.constexpr):
    """Nested tuple parameters, one passed on whole: out = xs[0][0] * SCALES[0] + xs[0][1] * SCALES[1] + xs[1]."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    total = _scaled_sum(xs[0], offsets, mask, SCALES) + tl.load(xs[1] + offsets, mask=mask)
    tl.store(out_ptr + offsets, total, mask=mask)


def make_closure_kernel(offset: float):
    """A kernel that reads a constant from its closure."""
    shift = tl.constexpr(offset)

    @triton.jit
    def closure_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + shift, mask=mask)

    return closure_kernel


@triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n"]), "num_warps": lambda args: 2})
@triton.jit
def heuristic_copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * BLOCK, mask=mask)


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 16}, num_warps=2),
        triton.Config({"BLOCK": 32}, num_warps=4),
        triton.Config({"BLOCK": 64}, num_warps=8),
    ],
    key=["n"],
)
@triton.jit
def autotuned_scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 3, mask=mask)


#: The same kernel autotuned over compiler options only: every configuration covers what a fixed grid gives it.
warps_tuned_scale_kernel = triton.autotune(
    configs=[triton.Config({}, num_warps=1), triton.Config({}, num_warps=4, num_stages=2)], key=["n"]
)(autotuned_scale_kernel.fn)


@triton.autotune(configs=[triton.Config({"BLOCK": 8}), triton.Config({"BLOCK": 32})], key=["n"])
@triton.jit
def persistent_scale_kernel(x_ptr, out_ptr, n, PROGRAMS: tl.constexpr, BLOCK: tl.constexpr):
    """Each of ``PROGRAMS`` programs strides over the blocks: it covers ``n`` whatever ``BLOCK`` is."""
    for start in range(tl.program_id(0) * BLOCK, n, PROGRAMS * BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 3, mask=mask)


def _zero_hook(nargs):
    """Zeroes the output, as a torch hook may: jt runs hooks on stand-ins, which have no data to zero."""
    nargs["out_ptr"].zero_()


@triton.autotune(configs=[triton.Config({"BLOCK": 16}, pre_hook=_zero_hook)], key=["n"])
@triton.jit
def pre_hook_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


def plain_python_function(x_ptr, out_ptr):
    return None


@triton.jit
def unknown_name_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    """Refused by Triton's front end: it reads a name that is defined nowhere."""
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + name_defined_nowhere)  # noqa: F821


@triton.jit
def softmax_fwd_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """Row-wise softmax of a row-major (rows, n) matrix, one program per row."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def softmax_bwd_kernel(dy_ptr, y_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    """The softmax's backward pass per row: ``dx = y * (dy - sum(dy * y))``."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    y = tl.load(y_ptr + row * n + cols, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + row * n + cols, mask=mask, other=0.0)
    tl.store(dx_ptr + row * n + cols, y * (dy - tl.sum(dy * y, axis=0)), mask=mask)
