"""Bad input to triton_call: each error names the offending argument and says what was expected."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import core_kernels as k
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core.errors import JtError
from jt_core.testing import scale_inplace_kernel

X = jnp.arange(20, dtype=jnp.float32)
X100 = jnp.arange(100, dtype=jnp.float32)
SPEC = jax.ShapeDtypeStruct((20,), jnp.float32)


def scale(**overrides: Any) -> Any:
    kwargs: dict[str, Any] = {"kernel": k.scale_kernel, "out_shape": X, "grid": 2, "n": 20, "factor": 2.0, "BLOCK": 16}
    kwargs.update(overrides)
    args = kwargs.pop("args", (X,))
    return jt.triton_call(*args, **{key: value for key, value in kwargs.items() if value is not _DROP})


_DROP = object()

BAD_CALLS: list[tuple[str, Callable[[], Any], type[BaseException], str]] = [
    ("kernel not jitted", lambda: scale(kernel=k.plain_python_function), TypeError, r"kernel=.*@triton\.jit"),
    ("kernel is None", lambda: scale(kernel=None), TypeError, r"kernel=None is not a jitted Triton kernel"),
    ("no output spec", lambda: scale(out_shape=_DROP), TypeError, r"needs out_shape= \(or out_type=\)"),
    ("both output specs", lambda: scale(out_type=SPEC), TypeError, r"both out_shape= and out_type="),
    ("output spec without shape", lambda: scale(out_shape=3), TypeError, r"out_shape\[0\] must be an object with"),
    (
        "negative output dimension",
        lambda: scale(out_shape=jax.ShapeDtypeStruct((-1,), jnp.float32)),
        ValueError,
        r"out_shape\[0\] has a negative dimension",
    ),
    (
        "complex output dtype",
        lambda: scale(out_shape=jax.ShapeDtypeStruct((20,), jnp.complex64)),
        TypeError,
        r"out_shape\[0\] has dtype complex64, which Triton kernels cannot take",
    ),
    (
        "complex operand",
        lambda: scale(args=(X.astype(jnp.complex64),)),
        TypeError,
        r"argument 'x_ptr' has dtype complex64",
    ),
    ("string operand", lambda: scale(args=("hello",)), TypeError, r"argument 'x_ptr' of kernel .* is str"),
    ("grid with four axes", lambda: scale(grid=(1, 1, 1, 1)), ValueError, r"grid has 4 axes, \(1, 1, 1, 1\)"),
    ("negative grid", lambda: scale(grid=(-2,)), ValueError, r"grid axis 0 is negative"),
    ("grid of floats", lambda: scale(grid=(2.0,)), TypeError, r"grid axis 0 must be an int, got 2\.0"),
    ("grid of wrong type", lambda: scale(grid="2"), TypeError, r"grid must be an int or a tuple of up to 3 ints"),
    (
        "grid axis 1 past its launch limit",
        lambda: scale(grid=(2, 70000)),
        ValueError,
        r"grid axis 1 is 70000, above the launch limit 65535 of that axis .* put the large extent on axis 0",
    ),
    (
        "grid callable returning garbage",
        lambda: scale(grid=lambda meta: "many"),
        TypeError,
        r"grid callable's result must be an int or a tuple",
    ),
    (
        "grid callable raising",
        lambda: scale(grid=lambda meta: meta["NOPE"]),
        ValueError,
        r"grid callable raised KeyError: 'NOPE'.*called with a dict of the metaparameters",
    ),
    (
        "too many arguments",
        lambda: scale(args=(X, X, X, X, X)),
        TypeError,
        r"(?s)do not fit kernel scale_kernel\(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr\).*"
        r"5 positional operands but the kernel has only 4 non-constexpr parameters",
    ),
    (
        "too few arguments",
        lambda: scale(factor=_DROP),
        TypeError,
        r"(?s)^triton_call is missing 1 argument of kernel scale_kernel\(x_ptr, out_ptr, n, factor, BLOCK: "
        r"tl.constexpr\): factor\..*left \(\['out_ptr', 'factor'\]\)",
    ),
    ("misspelled metaparameter", lambda: scale(BLOK=16), TypeError, r"keyword 'BLOK'.*Did you mean 'BLOCK'\?"),
    ("missing constexpr", lambda: scale(BLOCK=_DROP), TypeError, r"constexpr parameters \['BLOCK'\].*BLOCK=\.\.\."),
    ("unhashable metaparameter", lambda: scale(BLOCK=[16]), TypeError, r"metaparameter BLOCK=\[16\] is unhashable"),
    (
        "integer scalar overflow",
        lambda: scale(factor=2**70),
        ValueError,
        r"argument 'factor'=1180591620717411303424 does not fit a 64-bit integer",
    ),
    (
        "float scalar beyond float32",
        lambda: scale(factor=1e300),
        ValueError,
        r"argument 'factor'=1e\+300 does not fit float32.*np\.float64\(1e\+300\)",
    ),
    (
        "alias input index out of range",
        lambda: scale(input_output_aliases={7: 0}),
        ValueError,
        r"input_output_aliases key 7 is not an operand index; array operands \(the classic convention counts arrays "
        r"only\) are 0\.\.0 \(\['x_ptr'\]\)",
    ),
    (
        "alias output index out of range",
        lambda: jt.triton_call(
            X, 20, 2.0, kernel=scale_inplace_kernel, out_shape=X, input_output_aliases={0: 3}, grid=2, BLOCK=16
        ),
        ValueError,
        r"maps operand 0 to output 3, but there are 1 outputs",
    ),
    (
        "classic alias index past the arrays",
        lambda: jt.triton_call(
            X, 20, 2.0, kernel=k.inplace_classic_kernel, out_shape=X, input_output_aliases={1: 0}, grid=2, BLOCK=16
        ),
        ValueError,
        r"key 1 is not an operand index.*counting scalars too, as the current convention does, it would be 'n'",
    ),
    (
        "alias of a scalar",
        lambda: jt.triton_call(
            X, 20, 2.0, kernel=scale_inplace_kernel, out_type=X, input_output_aliases={1: 0}, grid=2, BLOCK=16
        ),
        ValueError,
        r"input_output_aliases key 1 names operand 'n', a scalar; only arrays can be aliased",
    ),
    (
        "alias shape mismatch",
        lambda: jt.triton_call(
            X,
            20,
            2.0,
            kernel=k.inplace_classic_kernel,
            out_shape=jax.ShapeDtypeStruct((10,), jnp.float32),
            input_output_aliases={0: 0},
            grid=2,
            BLOCK=16,
        ),
        ValueError,
        r"operand 'x_ptr' is float32\[20\] but output 0 is float32\[10\].*same shape and dtype",
    ),
    (
        "alias dtype mismatch",
        lambda: jt.triton_call(
            X,
            20,
            2.0,
            kernel=k.inplace_classic_kernel,
            out_shape=jax.ShapeDtypeStruct((20,), jnp.int32),
            input_output_aliases={0: 0},
            grid=2,
            BLOCK=16,
        ),
        ValueError,
        r"operand 'x_ptr' is float32\[20\] but output 0 is int32\[20\]",
    ),
    (
        "aliases not a dict",
        lambda: scale(input_output_aliases=[(0, 0)]),
        TypeError,
        r"input_output_aliases must be a dict \{operand index: output index\}",
    ),
    (
        "zeroed index out of range",
        lambda: scale(zeroed_outputs=(2,)),
        ValueError,
        r"zeroed_outputs contains 2, but there are 1 outputs",
    ),
    ("zeroed of wrong type", lambda: scale(zeroed_outputs=3), TypeError, r"zeroed_outputs must be a sequence"),
    (
        "num_warps not a power of two",
        lambda: scale(num_warps=3),
        ValueError,
        r"num_warps must be a positive power of two, got 3",
    ),
    ("num_ctas above 8", lambda: scale(num_ctas=16), ValueError, r"num_ctas must be an int from 1 to 8"),
    ("negative num_stages", lambda: scale(num_stages=-1), ValueError, r"num_stages must be a non-negative int"),
    (
        "conflicting backend options",
        lambda: scale(num_warps=4, backend_options={"num_warps": 8}),
        ValueError,
        r"num_warps given both as triton_call arguments and in backend_options",
    ),
    (
        "backend options not a mapping",
        lambda: scale(backend_options=["num_warps"]),
        TypeError,
        r"backend_options must be a mapping",
    ),
    (
        "unhashable backend option",
        lambda: scale(backend_options={"extern_libs": {"a": 1}}),
        TypeError,
        r"backend_options\['extern_libs'\] must be hashable, got \{'a': 1\}",
    ),
    (
        "autotune prune leaves nothing",
        lambda: jt.triton_call(X, kernel=k.autotuned_scale_kernel, out_shape=X, grid=2, n=20, BLOCK=128),
        ValueError,
        r"the values fixed by the caller \(\{'BLOCK': 128\}\) rule out every @triton.autotune config",
    ),
    (
        "a fixed grid too small for every autotuned block size",
        lambda: jt.triton_call(X100, kernel=k.autotuned_scale_kernel, out_shape=X100, grid=1, n=100),
        ValueError,
        r"no @triton.autotune config can run \(\[BLOCK=16, .*\]: it left 84 of 100 elements of output 0 "
        r"\(float32\[100\]\) unwritten; .*\[BLOCK=64, .*\]: it left 36 of 100 .*grid=\(1,\) launches the same "
        r"programs whichever config runs.*grid=lambda meta: \(triton.cdiv\(n, meta\['BLOCK'\]\),\)",
    ),
    (
        "refs combined with aliases",
        lambda: jax.jit(
            lambda x: jt.triton_call(
                jax.new_ref(x),
                20,
                2.0,
                kernel=scale_inplace_kernel,
                out_shape=x,
                input_output_aliases={0: 0},
                grid=2,
                BLOCK=16,
            )
        )(X),
        ValueError,
        r"input_output_aliases cannot be combined with Ref operands",
    ),
    (
        "dict out_shape whose keys name other outputs",
        lambda: jt.triton_call(
            X, kernel=k.two_outputs_kernel, out_shape={"sum": SPEC, "diff": SPEC}, grid=2, n=20, BLOCK=16
        ),
        ValueError,
        r"'diff' -> sum_ptr, 'sum' -> diff_ptr\. Entry 'diff' names diff_ptr but would fill sum_ptr\. Pass "
        r"out_shape as a tuple or list in the order of the output parameters \(sum_ptr, diff_ptr\)",
    ),
    ("has_side_effect not a bool", lambda: scale(has_side_effect="no"), TypeError, r"has_side_effect must be True or"),
    ("debug not a bool", lambda: scale(debug="yes"), TypeError, r"debug must be True or False, got 'yes' \(str\)"),
    ("enable_fp_fusion of 2", lambda: scale(enable_fp_fusion=2), TypeError, r"enable_fp_fusion must be True or"),
    ("name not a str", lambda: scale(name=5), TypeError, r"name must be a str \(or None for the kernel's\), got 5"),
    ("metadata as text", lambda: scale(serialized_metadata="m"), TypeError, r"serialized_metadata must be bytes"),
    ("cost estimate as text", lambda: scale(cost_estimate="x"), TypeError, r"cost_estimate must be a dict of numbers"),
    ("zeroed by name", lambda: scale(zeroed_outputs=["a"]), TypeError, r"zeroed_outputs must hold output indices"),
    (
        "zeroed callable raising",
        lambda: scale(zeroed_outputs=lambda meta: meta["missing"]),
        ValueError,
        r"zeroed_outputs callable raised KeyError: 'missing' \(it is called with a dict of the metaparameters",
    ),
    (
        "64-bit output with x64 off",
        lambda: scale(out_shape=jax.ShapeDtypeStruct((20,), np.float64)),
        TypeError,
        r"out_shape\[0\] has dtype float64, a 64-bit type, but jax_enable_x64 is off",
    ),
    (
        "out_shape with a shape of text",
        lambda: scale(out_shape=type("Spec", (), {"shape": "abc", "dtype": jnp.float32})()),
        TypeError,
        r"out_shape\[0\] has a shape that is not a tuple of ints: 'abc'",
    ),
    (
        "kernel given positionally",
        lambda: jt.triton_call(k.scale_kernel, X, out_shape=X, grid=2, n=20, factor=2.0, BLOCK=16),
        TypeError,
        r"got a Triton kernel as positional argument 0; .* pass the kernel as kernel=",
    ),
    (
        "traced grid",
        lambda: jax.jit(lambda x, g: scale(args=(x,), grid=g))(X, 2),
        TypeError,
        r"grid must be an int or a tuple of up to 3 ints, got .*: a traced value.*static_argnums",
    ),
    (
        "kernel_vjp static_argnums of text",
        lambda: jt.kernel_vjp(lambda x: (x, None), lambda r, g: g, static_argnums="a"),
        TypeError,
        r"static_argnums must be an int or a sequence of ints",
    ),
    (
        "scalar given where the kernel takes a pointer",
        lambda: jt.triton_call(X, X, 20, kernel=k.add_current_kernel, out_shape=X, grid=2),
        jt.KernelCompileError,
        r"(?s)The call gave the kernel's parameters: x_ptr: operand 0 \(\*fp32\), y_ptr: operand 1 \(\*fp32\), "
        r"out_ptr: 20 \(i32\), n: output 0 \(\*fp32\)\.\nParameter 'out_ptr' got a scalar \(20\): .* Fix: pass "
        r"scalars by keyword \(here n=20\)",
    ),
    (
        "a kernel Triton's front end refuses, named with the platform it was compiled for",
        lambda: jt.triton_call(X, X, kernel=k.add_current_kernel, out_shape=X, grid=2, n=20, BLOCK=24),
        jt.KernelCompileError,
        r"(?s)^compiling triton_call 'add_current_kernel' \(kernel add_current_kernel\(.*\)\) for cpu with config "
        r"\[BLOCK=24, .*arange's range must be a power of 2",
    ),
    (
        "no outputs at all",
        lambda: jt.triton_call(X, 20, 2.0, kernel=scale_inplace_kernel, out_shape=(), grid=2, BLOCK=16),
        ValueError,
        r"describes no outputs and no operand is a Ref",
    ),
]


@pytest.mark.parametrize(("case", "call", "error", "pattern"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_input_is_explained(case: str, call: Callable[[], Any], error: type[BaseException], pattern: str) -> None:
    with pytest.raises(error, match=pattern) as info:
        call()
    assert isinstance(info.value, (JtError, NotImplementedError)), f"{case}: {type(info.value)}"


def test_at_least_twenty_five_bad_inputs_are_covered() -> None:
    assert len(BAD_CALLS) >= 25


def test_gradient_through_a_raw_call_points_to_custom_vjp() -> None:
    def loss(x: jax.Array) -> jax.Array:
        return scale(args=(x,)).sum()

    with pytest.raises(NotImplementedError, match=r"custom_vjp"):
        jax.grad(loss)(X)


def test_error_inside_the_kernel_names_the_kernel_and_program(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the front-end check off, the interpreter meets the error while running (wrapped by JAX)."""
    monkeypatch.setenv("JT_CPU_COMPILE_CHECK", "0")
    x = jnp.asarray(np.random.default_rng(0).standard_normal(16), jnp.float32)
    with pytest.raises(Exception, match=r"kernel 'shape_error_kernel' failed on the CPU interpreter at program_id"):
        jax.block_until_ready(jt.triton_call(x, kernel=k.shape_error_kernel, out_shape=x, grid=1, BLOCK=16))


# -- arguments left out ---------------------------------------------------------------------------------------


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, n, alpha, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, alpha * tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets), mask=mask)


@triton.jit
def sum_diff_kernel(x_ptr, y_ptr, n, sum_ptr, diff_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x, y = tl.load(x_ptr + offsets, mask=mask), tl.load(y_ptr + offsets, mask=mask)
    tl.store(sum_ptr + offsets, x + y, mask=mask)
    tl.store(diff_ptr + offsets, x - y, mask=mask)


def _missing_message(call: Callable[[], Any]) -> str:
    with pytest.raises(TypeError) as info:
        call()
    assert isinstance(info.value, JtError)
    return str(info.value)


def test_a_missing_scalar_is_named_with_what_the_call_bound() -> None:
    message = _missing_message(lambda: jt.triton_call(X, X, 20, kernel=scale_add_kernel, out_shape=X, grid=2, BLOCK=16))
    assert message.startswith(
        "triton_call is missing 1 argument of kernel scale_add_kernel(x_ptr, y_ptr, n, alpha, out_ptr, BLOCK: "
        "tl.constexpr): alpha (or n: "  # 20 is an integer: n (a count) likelier takes it than alpha
    )
    assert (
        "One reading: x_ptr=float32[20] (positional 0), y_ptr=float32[20] (positional 1), n=20 (positional 2), and "
        "its 1 output (out_shape/out_type) takes out_ptr; nothing is given for alpha. Give it by keyword (alpha=...)."
    ) in message
    assert "alpha=20 (positional 2), and its 1 output (out_shape/out_type) takes out_ptr; nothing is given for n. " in (
        message
    )


def test_a_missing_pointer_operand_is_named_not_the_scalar_that_slid_into_its_place() -> None:
    message = _missing_message(
        lambda: jt.triton_call(X, 20, 2.0, kernel=scale_add_kernel, out_shape=X, grid=2, BLOCK=16)
    )
    assert message.startswith("triton_call is missing 1 argument of kernel scale_add_kernel(")
    assert "tl.constexpr): y_ptr (or x_ptr: " in message  # X may be either; positional values fill x_ptr first
    assert "n=20 (positional 1), alpha=2.0 (positional 2)" in message
    assert "pass n, alpha by keyword too (n=..., alpha=...)" in message  # positional values fill y_ptr first


def test_a_missing_argument_beside_pytree_outputs_is_named() -> None:
    outputs = {"sum": X, "diff": X}
    message = _missing_message(
        lambda: jt.triton_call(X, X, kernel=sum_diff_kernel, out_shape=outputs, grid=2, BLOCK=16)
    )
    assert message.startswith("triton_call is missing 1 argument of kernel sum_diff_kernel(")
    assert "tl.constexpr): n.\n" in message
    assert "its 2 outputs (out_shape/out_type) take sum_ptr, diff_ptr" in message


def test_a_missing_argument_among_keyword_operands_is_named() -> None:
    message = _missing_message(
        lambda: jt.triton_call(x_ptr=X, n=20, alpha=2.0, kernel=scale_add_kernel, out_shape=X, grid=2, BLOCK=16)
    )
    assert "tl.constexpr): y_ptr.\n" in message
    assert "x_ptr=float32[20] (keyword), n=20 (keyword), alpha=2.0 (keyword)" in message


def test_an_output_left_out_of_out_shape_is_offered_as_the_reason() -> None:
    message = _missing_message(lambda: jt.triton_call(X, X, 20, kernel=sum_diff_kernel, out_shape=X, grid=2, BLOCK=16))
    assert "tl.constexpr): sum_ptr (or diff_ptr: " in message  # the outputs likelier take the last parameters
    assert "If sum_ptr takes an output, out_shape (or out_type) describes 1 output and needs 2." in message


def test_a_missing_argument_of_a_call_with_an_aliased_output_counts_both_conventions() -> None:
    # scale_inplace_kernel(x_ptr, n, factor): no parameter looks like a second pointer, so the aliased output
    # writes through x_ptr (current convention) and both scalars are missing.
    message = _missing_message(
        lambda: jt.triton_call(
            X, kernel=scale_inplace_kernel, out_shape=X, input_output_aliases={0: 0}, grid=2, BLOCK=16
        )
    )
    assert message.startswith("triton_call is missing 2 arguments of kernel scale_inplace_kernel(")
    assert "tl.constexpr): n, factor.\n" in message
    assert "its 1 aliased output writes through the input's pointer" in message
    assert "If its aliased output has a pointer parameter of its own (classic convention), 1 argument is missing" in (
        message
    )


def test_a_missing_argument_beside_an_aliased_output_with_its_own_pointer_counts_both_conventions() -> None:
    aliased = {"input_output_aliases": {0: 0}, "grid": 2, "BLOCK": 16}
    message = _missing_message(lambda: jt.triton_call(X, X, kernel=scale_add_kernel, out_shape=X, **aliased))
    assert "tl.constexpr): n, alpha.\n" in message  # out_ptr is the aliased output's pointer (classic convention)
    assert (
        "If its aliased output has no pointer parameter of its own (current convention), 3 arguments are missing"
        in (message)
    )


@triton.jit
def rms_norm_rows_kernel(X, Y, W, stride, N, eps, BLOCK: tl.constexpr):
    """``Y = X / rms(X) * W`` per row, in the style of Triton's normalisation tutorials: short capital names."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < N
    x = tl.load(X + row * stride + cols, mask=inside, other=0.0)
    rms = tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(Y + row * stride + cols, x / rms * tl.load(W + cols, mask=inside), mask=inside)


def test_an_argument_left_out_that_could_be_either_of_two_parameters_gets_both_readings_and_fixes() -> None:
    rows, weight = jnp.ones((4, 32)), jnp.ones(32)
    message = _missing_message(
        lambda: jt.triton_call(
            X=rows, W=weight, stride=32, N=32, kernel=rms_norm_rows_kernel, out_shape=rows, grid=4, BLOCK=32
        )
    )
    head, first, second = message.splitlines()[:3]
    assert head.startswith(
        "triton_call is missing 1 argument of kernel rms_norm_rows_kernel(X, Y, W, stride, N, eps, BLOCK: "
        "tl.constexpr): "
    )
    assert head.endswith(": the call reads two ways, each below with its fix).")
    given = "X=float32[4, 32] (keyword), W=float32[32] (keyword), stride=32 (keyword), N=32 (keyword)"
    assert first.startswith("  One reading: ") and second.startswith("  The other reading: ")
    assert {first.split(": ", 1)[1], second.split(": ", 1)[1]} == {
        f"{given}, and its 1 output (out_shape/out_type) takes Y; nothing is given for eps. Give it by keyword "
        "(eps=...).",
        f"{given}, and its 1 output (out_shape/out_type) takes eps; nothing is given for Y. Give it by keyword "
        "(Y=...).",
    }


def test_the_fix_the_other_reading_names_makes_the_call_run() -> None:
    rows = jax.random.normal(jax.random.key(3), (4, 32), jnp.float32)
    weight = jax.random.normal(jax.random.key(4), (32,), jnp.float32)
    out = jt.triton_call(
        X=rows, W=weight, stride=32, N=32, eps=1e-6, kernel=rms_norm_rows_kernel, out_shape=rows, grid=4, BLOCK=32
    )
    x = np.asarray(rows, np.float64)
    want = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * np.asarray(weight, np.float64)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-6)


def test_a_float_is_not_read_as_a_count() -> None:
    message = _missing_message(
        lambda: jt.triton_call(X, X, 2.0, kernel=scale_add_kernel, out_shape=X, grid=2, BLOCK=16)
    )
    assert "tl.constexpr): n.\n" in message and "alpha=2.0 (positional 2)" in message
