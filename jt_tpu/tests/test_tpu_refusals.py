"""What a TPU cannot run is refused when the call is lowered, with an error that names it: float64 operands and
arithmetic, and what the translation cannot express (inline assembly, device printing, a pointer cast to larger
elements), with the kernel's line."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
import triton
import triton.language as tl
from tpu_testlib import exported_for_tpu

import jt_core as jt
from jt_core.plugin import UnsupportedKernelError


@triton.jit
def copy_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr + i))


@triton.jit
def widening_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr + i, (tl.load(x_ptr + i).to(tl.float64) * 3.0).to(tl.float32))


@triton.jit
def widened_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr.to(tl.pointer_type(tl.int32)) + i))


@triton.jit
def printing_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    tl.device_print("x", x)
    tl.store(out_ptr + i, x)


def _call(kernel: Any, x: np.ndarray) -> Any:
    return jax.jit(lambda v: jt.triton_call(v, kernel=kernel, out_shape=v, grid=1, BLOCK=x.size))


def test_a_float64_operand_is_refused_naming_it() -> None:
    x = np.ones(16, np.float64)
    with jax.enable_x64(True), pytest.raises(UnsupportedKernelError, match=r"operand 0 is float64.*no arithmetic"):
        exported_for_tpu(_call(copy_kernel, x), x)


def test_float64_arithmetic_in_the_kernel_is_refused() -> None:
    x = np.ones(16, np.float32)
    with pytest.raises(UnsupportedKernelError, match=r"computes in float64.*compute in float32"):
        exported_for_tpu(_call(widening_kernel, x), x)


def test_what_the_translation_cannot_express_is_refused_with_its_line() -> None:
    x = np.ones(16, np.float32)
    with pytest.raises(UnsupportedKernelError, match=r"cannot run on tpu: it uses device printing.*test_tpu_refusals"):
        exported_for_tpu(_call(printing_kernel, x), x)


def test_a_pointer_cast_to_larger_elements_is_refused_with_its_line() -> None:
    x = np.ones(16, np.int32).view(np.uint8)[:16]
    with pytest.raises(UnsupportedKernelError, match=r"pointer cast to larger elements.*test_tpu_refusals"):
        exported_for_tpu(_call(widened_kernel, x), x)
