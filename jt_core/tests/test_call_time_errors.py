"""Mistakes a new user makes fail when the call is made or lowered, not in the middle of a run, and say what to do.

Also: which errors arrive wrapped in ``jax.errors.JaxRuntimeError`` (those raised while the kernel runs) and how to
get jt's error back from one.
"""

from __future__ import annotations

from typing import Any

import core_kernels as k
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core import errors
from jt_core.errors import KernelCallTypeError, KernelCompileError, OutOfBoundsAccessError


@triton.jit
def scale_by_device_value_kernel(x_ptr, factor_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Reads its factor from a 0-d array: a pointer used as a pointer."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * tl.load(factor_ptr), mask=mask)


@triton.jit
def overrun_kernel(x_ptr, out_ptr, LOAD_PAST: tl.constexpr, STORE_PAST: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets + STORE_PAST, tl.load(x_ptr + offsets + LOAD_PAST))


def rand(n: int, seed: int) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(n).astype(np.float32))


X = rand(40, 0)
Y = rand(40, 1)


def add(x: jax.Array, y: jax.Array, n: object, **options: object) -> jax.Array:
    return jt.triton_call(x, y, n, kernel=k.add_kernel, out_shape=x, grid=3, BLOCK=16, **options)


# -- traced scalars --------------------------------------------------------------------------------------------


def test_traced_python_number_bound_to_a_scalar_parameter_is_refused_at_the_call() -> None:
    with pytest.raises(KernelCallTypeError) as info:
        jax.jit(add)(X, Y, 40)
    message = str(info.value)
    assert "argument 'length' of kernel add_kernel(" in message and "0-d int32 array" in message
    assert "uses length as a number" in message and "static Python numbers" in message
    assert "static_argnums" in message and "tl.load(length)" in message


def test_static_number_and_a_0d_array_used_as_a_pointer_both_work() -> None:
    expected = np.asarray(X) + np.asarray(Y)
    np.testing.assert_allclose(jax.jit(add, static_argnums=2)(X, Y, 40), expected, rtol=1e-6)

    @jax.jit
    def scale(x: jax.Array, factor: jax.Array) -> jax.Array:
        return jt.triton_call(x, factor, kernel=scale_by_device_value_kernel, out_shape=x, grid=3, n=40, BLOCK=16)

    np.testing.assert_allclose(scale(X, jnp.float32(2.5)), np.asarray(X) * 2.5, rtol=1e-6)


# -- compile errors at lowering --------------------------------------------------------------------------------


def adder(block: int) -> Any:
    return jax.jit(lambda x, y: jt.triton_call(x, y, 40, kernel=k.add_kernel, out_shape=x, grid=3, BLOCK=block))


def test_block_that_is_not_a_power_of_two_fails_at_lowering_with_tritons_message() -> None:
    with pytest.raises(KernelCompileError) as info:
        adder(24).trace(X, Y).lower()  # lowered, never run
    message = str(info.value)
    assert "triton_call 'add_kernel' (kernel add_kernel(x_ptr, y_ptr, length, out_ptr, BLOCK: tl.constexpr))" in message
    assert "config [BLOCK=24, num_warps=4, num_stages=3]" in message
    assert "arange's range must be a power of 2" in message and "tl.arange(0, BLOCK)" in message
    adder(16).trace(X, Y).lower()


def test_compile_check_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CPU_COMPILE_CHECK", "0")
    adder(24).trace(X, Y).lower()  # the interpreter would only meet the mistake when it runs


# -- misspelled keywords ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keywords", "pattern"),
    [
        ({"kernal": k.add_kernel, "grid": 3}, r"'kernal', which is not one of its arguments: did you mean kernel="),
        ({"kernel": k.add_kernel, "gird": 3}, r"keyword 'gird', which is not one of its arguments: did you mean grid="),
        ({"grid": 3}, r"triton_call needs kernel=: the @triton.jit"),
        ({"kernel": k.add_kernel}, r"triton_call needs grid=: the number of programs"),
        ({"kernel": k.add_kernel, "grid": 3, "num_wraps": 4}, r"keyword 'num_wraps'.*Did you mean num_warps=\?"),
        ({"kernel": k.add_kernel, "grid": 3, "BLOK": 4}, r"keyword 'BLOK', which is not a parameter.*mean 'BLOCK'"),
    ],
    ids=["kernal", "gird", "no-kernel", "no-grid", "num_wraps", "BLOK"],
)  # fmt: skip
def test_misspelled_keyword_is_named_with_the_right_one(keywords: dict[str, object], pattern: str) -> None:
    options = {"BLOCK": 16, **keywords}
    if "BLOK" in options:
        del options["BLOCK"]
    with pytest.raises(KernelCallTypeError, match=pattern):
        jt.triton_call(X, Y, 40, out_shape=X, **options)


# -- wrong operand counts ----------------------------------------------------------------------------------------


def test_wrong_operand_count_is_summed_up_first() -> None:
    with pytest.raises(KernelCallTypeError) as info:
        jt.triton_call(X, Y, 40, X, kernel=k.add_kernel, out_shape=X, grid=3, BLOCK=16)
    first_line = str(info.value).splitlines()[0]
    assert first_line.endswith(
        "kernel add_kernel takes 3 operands (x_ptr, y_ptr, length) and 1 output (out_ptr); the call gives 4 operands."
    )


def test_summary_counts_aliased_outputs_both_ways() -> None:
    with pytest.raises(KernelCallTypeError) as info:
        jt.triton_call(X, kernel=k.inplace_scale_kernel, out_shape=X, input_output_aliases={0: 0}, grid=3, BLOCK=16)
    assert (
        "takes 2 operands (x_ptr, n) and 1 output (factor), or 3 operands when its 1 aliased output have no pointer "
        "parameter of their own (current convention); the call gives 1 operand"
    ) in str(info.value)


def test_long_list_operand_is_cut_in_the_message() -> None:
    with pytest.raises(KernelCallTypeError) as info:
        jt.triton_call(list(range(10_000)), Y, 40, kernel=k.add_kernel, out_shape=X, grid=3, BLOCK=16)
    message = str(info.value)
    assert "[0, 1, 2, 3, ...] (10000 items)" in message and len(message) < 400


# -- errors while the kernel runs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("load_past", "store_past", "kind", "advice"),
    [(8, 0, "load", "tl.load(pointers, mask=..."), (0, 8, "store", "tl.store(pointers, values, mask=...")],
)
def test_out_of_bounds_message_names_the_access_kind(load_past: int, store_past: int, kind: str, advice: str) -> None:
    x = jnp.arange(16, dtype=jnp.float32)
    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        jax.block_until_ready(
            jt.triton_call(
                x, kernel=overrun_kernel, out_shape=x, grid=1, LOAD_PAST=load_past, STORE_PAST=store_past, BLOCK=16
            )
        )
    carried = errors.from_runtime_error(info.value)
    assert isinstance(carried, OutOfBoundsAccessError)
    assert f"out-of-bounds {kind} of 4 bytes" in str(carried) and f"Mask the {kind} ({advice}" in str(carried)


def test_every_error_type_a_user_can_catch_is_exported() -> None:
    types = [name for name in errors.__all__ if isinstance(getattr(errors, name), type)]
    assert "OutOfBoundsAccessError" in types
    for name in types:
        assert getattr(jt, name) is getattr(errors, name) and name in jt.__all__
        assert issubclass(getattr(jt, name), jt.JtError)


def test_a_runtime_error_without_a_jt_error_inside_gives_none() -> None:
    assert errors.from_runtime_error(RuntimeError("INTERNAL: something else")) is None
