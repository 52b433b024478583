"""A kernel Triton's compiler refuses is one error: where in the kernel's source (file and line, down to the helper
that failed), Triton's words, what the call gave each parameter, and the fix; Triton's error is its cause."""

from __future__ import annotations

import inspect
import traceback
import types
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt

X = jnp.arange(16, dtype=jnp.float32)


@triton.jit
def _shifted(p, offsets):
    return tl.load(p + offsets) + shift_defined_nowhere  # noqa: F821


@triton.jit
def through_helper_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, _shifted(x_ptr, offsets))


@triton.jit
def blocks_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


def _line(kernel: Any, text: str) -> tuple[str, int]:
    """The file of ``kernel`` and the number of its line that holds ``text``."""
    lines, first = inspect.getsourcelines(kernel.fn)
    return kernel.fn.__code__.co_filename, first + next(i for i, line in enumerate(lines) if text in line)


def _refused(call: Any) -> jt.KernelCompileError:
    with pytest.raises(jt.KernelCompileError) as raised:
        call()
    return raised.value


def test_the_error_locates_the_refusal_from_the_kernel_down_to_the_helper() -> None:
    error = _refused(lambda: jt.triton_call(X, kernel=through_helper_kernel, out_shape=X, grid=1, BLOCK=16))
    kernel_file, call_line = _line(through_helper_kernel, "_shifted(x_ptr")
    helper_file, helper_line = _line(_shifted, "shift_defined_nowhere")
    lines = str(error).splitlines()
    assert lines[0] == (
        "compiling triton_call 'through_helper_kernel' (kernel through_helper_kernel(x_ptr, out_ptr, BLOCK: "
        "tl.constexpr)) for cpu with config [BLOCK=16, num_warps=4, num_stages=3] failed:"
    )
    assert lines[1:7] == [
        f'  File "{kernel_file}", line {call_line}, in through_helper_kernel',
        "    tl.store(out_ptr + offsets, _shifted(x_ptr, offsets))",
        "                                ^",
        f'  File "{helper_file}", line {helper_line}, in _shifted',
        "    return tl.load(p + offsets) + shift_defined_nowhere  # noqa: F821",
        "                                  ^",
    ]
    assert "shift_defined_nowhere is not defined" in lines[7]
    assert lines[8] == "The call gave the kernel's parameters: x_ptr: operand 0 (*fp32), out_ptr: output 0 (*fp32)."
    assert lines[9].startswith("Fix: define shift_defined_nowhere where the kernel can see it")
    assert len(lines) == 10


#: A module holding a helper, as kernels reach helpers of another module (``module.helper(...)``).
helpers = types.ModuleType("helpers")
helpers.shifted = _shifted  # type: ignore[attr-defined]


@triton.jit
def through_module_helper_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, helpers.shifted(x_ptr, offsets))


def test_a_helper_reached_through_a_module_is_located_too() -> None:
    error = _refused(lambda: jt.triton_call(X, kernel=through_module_helper_kernel, out_shape=X, grid=1, BLOCK=16))
    helper_file, helper_line = _line(_shifted, "shift_defined_nowhere")
    lines = str(error).splitlines()
    assert lines[2] == "    tl.store(out_ptr + offsets, helpers.shifted(x_ptr, offsets))"
    assert lines[4] == f'  File "{helper_file}", line {helper_line}, in _shifted'


def test_triton_s_error_is_the_cause() -> None:
    from triton.compiler.errors import CompilationError

    error = _refused(lambda: jt.triton_call(X, kernel=through_helper_kernel, out_shape=X, grid=1, BLOCK=16))
    assert isinstance(error.__cause__, CompilationError)
    assert "shift_defined_nowhere" in str(error.__cause__.__cause__)  # the helper's, wrapped at its call


def test_a_block_that_is_no_power_of_two_is_named_in_the_fix() -> None:
    error = _refused(lambda: jt.triton_call(X, kernel=blocks_kernel, out_shape=X, grid=1, n=16, BLOCK=12))
    file, line = _line(blocks_kernel, "tl.arange")
    message = str(error)
    assert f'  File "{file}", line {line}, in blocks_kernel\n    offsets = tl.arange(0, BLOCK)\n' in message
    assert "arange's range must be a power of 2" in message
    assert message.endswith(
        "Fix: give BLOCK=12 a power of two (triton.next_power_of_2 rounds up): Triton's block shapes are powers of two."
    )


@triton.jit
def dot_of_vectors_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, tl.dot(x, x))


def test_other_refusals_point_at_the_kernel_line_to_fix() -> None:
    error = _refused(lambda: jt.triton_call(X, kernel=dot_of_vectors_kernel, out_shape=X, grid=1, BLOCK=16))
    file, line = _line(dot_of_vectors_kernel, "tl.dot")
    assert str(error).endswith(
        f"Fix the kernel at {file}:{line}, or the call where it gives that line something the kernel does not expect."
    )


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
def test_the_printed_error_is_short_and_ends_with_the_whole_story(jitted: bool) -> None:
    """No frame of Triton's code generator is printed (the issue was 166 to 222 lines before the error that says
    what happened); the last exception printed holds the kernel's line, Triton's words and the fix."""

    def call(x: jax.Array) -> jax.Array:
        return jt.triton_call(x, kernel=through_helper_kernel, out_shape=x, grid=1, BLOCK=16)

    error = _refused(lambda: (jax.jit(call) if jitted else call)(X))
    printed = "".join(traceback.format_exception(error))
    assert "code_generator.py" not in printed and "Triton's frames" not in printed
    assert len(printed.splitlines()) <= 70, printed
    last = printed[printed.rindex("jt_core.errors.KernelCompileError: ") :]
    assert "in _shifted" in last and "is not defined" in last and "Fix: define" in last


@triton.jit
def copy_count_kernel(src_ptr, dst_ptr, count, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=offsets < count), mask=offsets < count)


def test_a_scalar_on_a_pointer_parameter_is_moved_by_the_kernel_s_own_parameter_name() -> None:
    error = _refused(lambda: jt.triton_call(X, 16, kernel=copy_count_kernel, out_shape=X, grid=1, BLOCK=16))
    message = str(error)
    assert "src_ptr: operand 0 (*fp32), dst_ptr: 16 (i32), count: output 0 (*fp32)." in message
    assert message.endswith(
        "Parameter 'dst_ptr' got a scalar (16): positional values fill the kernel's parameters in order and outputs "
        "take the parameters left over. Fix: pass scalars by keyword (here count=16) to put them where they belong."
    )
    assert "n_elements" not in message
    x = jax.random.normal(jax.random.key(5), (16,), jnp.float32)
    out = jt.triton_call(x, kernel=copy_count_kernel, out_shape=x, grid=1, count=16, BLOCK=16)  # the fix runs
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x))
