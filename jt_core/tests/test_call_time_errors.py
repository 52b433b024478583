"""Mistakes a new user makes fail when the call is made or lowered, not in the middle of a run, and say what to do.

Also: which errors arrive wrapped in ``jax.errors.JaxRuntimeError`` (those raised while the kernel runs) and how to
get jt's error back from one.
"""

from __future__ import annotations

import inspect
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
from jt_core.testing import scale_inplace_kernel


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
        jt.triton_call(X, kernel=scale_inplace_kernel, out_shape=X, input_output_aliases={0: 0}, grid=3, BLOCK=16)
    assert "missing 2 arguments of kernel scale_inplace_kernel" in str(info.value)  # current convention
    assert "(classic convention), 1 argument is missing" in str(info.value)
    with pytest.raises(KernelCallTypeError) as info:  # too many: the summary counts both ways
        jt.triton_call(X, 40, 2.0, X, kernel=scale_inplace_kernel, out_shape=X, input_output_aliases={0: 0}, grid=3)
    assert (
        "takes 2 operands (x_ptr, n) and 1 output (factor), or 3 operands when its aliased output has no pointer "
        "parameter of its own (current convention); the call gives 4 operands"
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
    assert f"out-of-bounds {kind} of 4 bytes" in str(carried) and f"mask the {kind} ({advice}" in str(carried).lower()


def test_every_error_type_a_user_can_catch_is_exported() -> None:
    types = [name for name in errors.__all__ if isinstance(getattr(errors, name), type)]
    assert "OutOfBoundsAccessError" in types
    for name in types:
        assert getattr(jt, name) is getattr(errors, name) and name in jt.__all__
        assert issubclass(getattr(jt, name), jt.JtError)


def test_a_runtime_error_without_a_jt_error_inside_gives_none() -> None:
    assert errors.from_runtime_error(RuntimeError("INTERNAL: something else")) is None


# -- constexprs ----------------------------------------------------------------------------------------------------


def test_traced_value_given_as_a_constexpr_says_to_make_it_static() -> None:
    def call(x: jax.Array, y: jax.Array, block: int) -> jax.Array:
        return jt.triton_call(x, y, 40, kernel=k.add_kernel, out_shape=x, grid=3, BLOCK=block)

    with pytest.raises(KernelCallTypeError) as info:
        jax.jit(call)(X, Y, 16)
    message = str(info.value)
    assert "constexpr parameter BLOCK of kernel add_kernel(" in message and "is a traced value" in message
    assert "static_argnums" in message and "static_argnames" in message and "functools.partial" in message
    assert "tuple instead of a list" not in message
    expected = np.asarray(X) + np.asarray(Y)
    np.testing.assert_allclose(jax.jit(call, static_argnums=2)(X, Y, 16), expected, rtol=1e-6)


def test_array_given_as_a_constexpr_says_to_pass_a_python_value() -> None:
    with pytest.raises(KernelCallTypeError) as info:
        jt.triton_call(X, Y, 40, kernel=k.add_kernel, out_shape=X, grid=3, BLOCK=jnp.int32(16))
    message = str(info.value)
    assert "constexpr parameter BLOCK of kernel add_kernel(" in message and "int32[] array" in message
    assert "BLOCK=int(...)" in message


def test_list_given_as_a_constexpr_says_to_use_a_tuple() -> None:
    with pytest.raises(KernelCallTypeError, match=r"BLOCK=\[16\] is unhashable \(list\).*use a tuple"):
        jt.triton_call(X, Y, 40, kernel=k.add_kernel, out_shape=X, grid=3, BLOCK=[16])


@triton.jit
def scale_by_constexpr_kernel(x_ptr, out_ptr, n, FACTOR: tl.constexpr, BLOCK: tl.constexpr):
    """FACTOR is a number the kernel multiplies by: a float is right for it."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * FACTOR, mask=mask)


def test_float_block_size_is_refused_at_the_call_naming_the_parameter() -> None:
    with pytest.raises(KernelCallTypeError) as info:
        jax.jit(lambda x, y: jt.triton_call(x, y, 40, kernel=k.add_kernel, out_shape=x, grid=3, BLOCK=16.0)).trace(
            X, Y
        )  # traced only: neither lowered nor run
    message = str(info.value)
    assert "constexpr BLOCK=16.0 of kernel add_kernel(" in message and "is a float" in message
    assert "arange's arguments must be of type tl.constexpr" in message and "pass BLOCK=16" in message


def test_float_constexpr_the_kernel_computes_with_is_accepted() -> None:
    out = jt.triton_call(X, kernel=scale_by_constexpr_kernel, out_shape=X, grid=3, n=40, FACTOR=2.0, BLOCK=16)
    np.testing.assert_allclose(out, np.asarray(X) * 2.0, rtol=1e-6)


def test_float_block_size_from_a_heuristic_names_the_heuristic() -> None:
    kernel = triton.heuristics({"BLOCK": lambda args: args["n"] / 2.5})(k.copy_kernel)
    with pytest.raises(KernelCallTypeError) as info:
        jt.triton_call(X, kernel=kernel, out_shape=X, grid=3, n=40)
    message = str(info.value)
    assert "constexpr BLOCK=16.0 of kernel copy_kernel(" in message and "@triton.heuristics" in message
    assert "return an int" in message


# -- dtypes --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("dtype", "narrow"), [(np.float64, "float32"), (np.int64, "int32"), (np.uint64, "uint32")])
def test_64_bit_numpy_operand_with_x64_off_is_explained(dtype: type, narrow: str) -> None:
    assert not jax.config.jax_enable_x64
    x = np.random.default_rng(3).standard_normal(40).astype(dtype)
    with pytest.raises(KernelCallTypeError) as info:
        jt.triton_call(x, x, 40, kernel=k.add_kernel, out_shape=jax.ShapeDtypeStruct((40,), dtype), grid=3, BLOCK=16)
    message = str(info.value)
    assert "argument 'x_ptr' of kernel add_kernel(" in message
    assert f"is a {np.dtype(dtype)} NumPy array" in message and f"JAX would pass it as {narrow}" in message
    assert "jax_enable_x64" in message and f"astype(np.{narrow})" in message


def test_64_bit_numpy_operand_is_passed_as_such_with_x64_on() -> None:
    x = np.random.default_rng(4).standard_normal(40)
    y = np.random.default_rng(5).standard_normal(40)
    with jax.enable_x64(True):
        out = jt.triton_call(
            x, y, 40, kernel=k.add_kernel, out_shape=jax.ShapeDtypeStruct((40,), np.float64), grid=3, BLOCK=16
        )
        assert out.dtype == np.float64
        np.testing.assert_allclose(np.asarray(out), x + y, rtol=1e-15)


# -- in-place kernels ------------------------------------------------------------------------------------------------


def test_in_place_kernel_without_alias_suggests_input_output_aliases() -> None:
    with pytest.raises(KernelCallTypeError) as info:
        jt.triton_call(X, 40, 3.0, kernel=scale_inplace_kernel, out_shape=X, grid=3, BLOCK=16)
    message = str(info.value)
    first = message.splitlines()[0]
    assert "and 1 output (factor)" not in first
    assert "the call's 3 operands (x_ptr, n, factor) fill them all, leaving none for the 1 output" in first
    assert "input_output_aliases={0: 0}" in message and "in place" in message
    out = jt.triton_call(
        X, 40, 3.0, kernel=scale_inplace_kernel, out_shape=X, input_output_aliases={0: 0}, grid=3, BLOCK=16
    )
    np.testing.assert_allclose(out, np.asarray(X) * 3.0, rtol=1e-6)


def test_in_place_suggestion_names_the_operand_that_matches_the_output() -> None:
    ones = jnp.ones(8, jnp.int32)
    with pytest.raises(KernelCallTypeError) as info:
        jt.triton_call(ones, kernel=scale_inplace_kernel, out_shape=X, grid=3, n=40, factor=3.0, BLOCK=16)
    assert "input_output_aliases={0" not in str(info.value)
    assert "no operand has the shape and dtype of output 0 (float32[40])" in str(info.value)
    with pytest.raises(KernelCallTypeError) as info:
        jt.triton_call(X, kernel=scale_inplace_kernel, out_shape=X, grid=3, n=40, factor=3.0, BLOCK=16)
    assert "input_output_aliases={0: 0}" in str(info.value)


# -- misspelled triton_call keywords -----------------------------------------------------------------------------------


def _misspellings(keyword: str) -> list[str]:
    swapped = keyword[0] + keyword[2] + keyword[1] + keyword[3:]
    return sorted({keyword + "s", keyword[:-1], swapped} - {keyword})


_OWN = [p for p in inspect.signature(jt.triton_call).parameters.values() if p.kind is p.KEYWORD_ONLY]


@pytest.mark.parametrize(
    ("keyword", "misspelled"),
    [(p.name, m) for p in _OWN for m in _misspellings(p.name) if m not in {q.name for q in _OWN}],
)
def test_every_misspelled_triton_call_keyword_is_named(keyword: str, misspelled: str) -> None:
    given: dict[str, Any] = {"kernel": k.add_current_kernel, "out_shape": X, "grid": 3, "n": 40, "BLOCK": 16}
    given[misspelled] = given.pop(keyword, None)
    with pytest.raises(KernelCallTypeError) as info:
        jt.triton_call(X, Y, **given)
    message = str(info.value)
    assert repr(misspelled) in message and f"did you mean {keyword}=" in message.lower()
