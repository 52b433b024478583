"""Code written for jax-triton's 0.3 and 0.4 lines runs unchanged apart from the import.

Positional values in declaration order (0.4), the module-level names both lines published, and the error phrases
their users match in tests.
"""

from __future__ import annotations

import inspect
import re
import zlib
from typing import Any

import core_kernels as k
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core.errors import KernelCallTypeError, KernelCallValueError, NoDeviceError
from jt_core.gpu import jaxlib_call
from jt_core.testing import scale_inplace_kernel
from jt_core.triton_lib import JTJITFunction


@triton.jit
def memcpy_kernel(in_ptr, out_ptr, size: tl.constexpr, block_size: tl.constexpr):
    """jax-triton 0.4's example: the size is a constexpr, reached by the third positional value."""
    offsets = tl.program_id(0) * block_size + tl.arange(0, block_size)
    mask = offsets < size
    tl.store(out_ptr + offsets, tl.load(in_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def scale_by_constexpr_kernel(x_ptr, n: tl.constexpr, out_ptr, FACTOR: tl.constexpr, BLOCK: tl.constexpr = 16):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * FACTOR, mask=mask)


@triton.jit
def constexpr_before_scalar_kernel(x_ptr, BLOCK: tl.constexpr, n, out_ptr):
    """Classic layout with a constexpr between the operands: only the operand reading fits ``(x, n)``."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)


@triton.jit
def scalar_first_kernel(n, x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    """Writes ``x + y`` into the first half of ``out`` only: the second half shows which input it aliases."""
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n // 2
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def rand(n: int, seed: int = 0) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(n).astype(np.float32))


def the_call(fn: Any, *args: Any) -> Any:
    """The bound call of the one ``triton_call`` in ``fn``."""
    (eqn,) = [e for e in jax.make_jaxpr(fn)(*args).eqns if e.primitive.name == "triton_kernel_call"]
    return eqn.params["call"]


# -- positional values in declaration order ---------------------------------------------------------------------


def test_positional_value_reaching_a_constexpr_becomes_its_metaparameter() -> None:
    """0.4's memcpy: ``triton_call(x, y_ref, size, ...)`` with ``size: tl.constexpr`` third."""
    x = rand(40)

    def copy(x: jax.Array) -> jax.Array:
        y_ref = jax.new_ref(jnp.full_like(x, jnp.nan))
        jt.triton_call(x, y_ref, x.size, kernel=memcpy_kernel, out_type=(), grid=3, block_size=16)
        return y_ref[...]

    np.testing.assert_array_equal(jax.jit(copy)(x), x)
    call = the_call(copy, x)
    assert call.configs[0].constexpr_dict == {"size": 40, "block_size": 16}
    assert call.convention == "current"


def test_positional_constexprs_between_operands_and_a_trailing_output() -> None:
    x = rand(40, 1)
    out = jt.triton_call(x, 40, kernel=scale_by_constexpr_kernel, out_type=x, grid=3, FACTOR=3.0)
    np.testing.assert_allclose(out, np.asarray(x) * 3.0, rtol=1e-6)
    out = jt.triton_call(x, 40, out_shape=x, kernel=scale_by_constexpr_kernel, grid=3, FACTOR=3.0)
    np.testing.assert_allclose(out, np.asarray(x) * 3.0, rtol=1e-6)


def test_classic_reading_is_kept_where_only_it_fits() -> None:
    """``(x, 40)`` for ``(x_ptr, BLOCK: constexpr, n, out_ptr)``: declaration order would set BLOCK=40 and leave
    two parameters for one output; operand order binds n=40 and appends the output, as jax-triton 0.3 did."""
    x = rand(40, 2)
    out = jt.triton_call(x, 40, kernel=constexpr_before_scalar_kernel, out_shape=x, grid=3, BLOCK=16)
    np.testing.assert_allclose(out, np.asarray(x) + 1, rtol=1e-6)
    call = the_call(lambda x: jt.triton_call(x, 40, kernel=constexpr_before_scalar_kernel, out_shape=x, grid=3,
                                             BLOCK=16), x)  # fmt: skip
    assert [(s.name, s.kind) for s in call.slots] == [("x_ptr", "input"), ("n", "scalar"), ("out_ptr", "output")]


def test_classic_and_current_examples_of_both_lines_bind_as_before() -> None:
    x, y = rand(40, 3), rand(40, 4)
    classic = jt.triton_call(x, y, 40, kernel=k.add_kernel, out_shape=x, grid=3, BLOCK=16)
    current = jt.triton_call(x, y, kernel=k.add_current_kernel, out_type=x, grid=3, n=40)
    np.testing.assert_allclose(classic, np.asarray(x) + np.asarray(y), rtol=1e-6)
    np.testing.assert_allclose(current, np.asarray(x) + np.asarray(y), rtol=1e-6)


def test_classic_alias_keys_count_arrays_only_as_in_0_3() -> None:
    """jax-triton 0.3 counted the array operands only: ``{1: 0}`` is ``y``, the second array, not ``x``."""
    x, y = rand(32, 10), rand(32, 11)
    out = jt.triton_call(
        32, x, y, kernel=scalar_first_kernel, out_shape=x, input_output_aliases={1: 0}, grid=1, BLOCK=32
    )
    expected = np.asarray(y).copy()
    expected[:16] = np.asarray(x)[:16] + np.asarray(y)[:16]
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_current_alias_keys_count_every_operand_as_in_0_4() -> None:
    x = rand(40, 12)
    out = jt.triton_call(
        x, 40, 2.0, kernel=scale_inplace_kernel, out_type=x, input_output_aliases={0: 0}, grid=3, BLOCK=16
    )
    np.testing.assert_allclose(out, np.asarray(x) * 2.0, rtol=1e-6)
    with pytest.raises(ValueError, match=r"key 2 names operand 'factor', a scalar"):
        jt.triton_call(
            x, 40, 2.0, kernel=scale_inplace_kernel, out_type=x, input_output_aliases={2: 0}, grid=3, BLOCK=16
        )


def test_a_call_no_reading_fits_shows_both_readings() -> None:
    x = rand(40, 5)
    with pytest.raises(KernelCallTypeError) as info:
        jt.triton_call(x, 40, x, x, kernel=scale_by_constexpr_kernel, out_type=x, grid=3, FACTOR=3.0)
    message = str(info.value)
    assert (
        "kernel scale_by_constexpr_kernel takes 1 operand (x_ptr) and 1 output (out_ptr); the call gives 4" in message
    )
    assert "operand order" in message and "declaration order" in message


# -- error phrases the other line's users assert on ----------------------------------------------------------------


def test_operand_given_positionally_and_by_keyword_says_multiple_values() -> None:
    x = rand(40, 6)
    with pytest.raises(TypeError, match=r"got multiple values for argument 'x_ptr'"):
        jt.triton_call(x, x, 40, x_ptr=x, kernel=k.add_kernel, out_shape=x, grid=3, BLOCK=16)


def test_constexpr_given_positionally_and_by_keyword_says_multiple_values() -> None:
    x = rand(40, 7)
    with pytest.raises(TypeError, match=r"got multiple values for argument 'size'"):
        jax.jit(
            lambda x: jt.triton_call(
                x, jax.new_ref(x), 40, kernel=memcpy_kernel, out_type=(), grid=3, size=40, block_size=16
            )
        )(x)


def test_unhashable_backend_option_says_must_be_hashable_right_after_the_key() -> None:
    x = rand(40, 8)
    with pytest.raises(TypeError, match=r"backend_options\['extern_libs'\] must be hashable"):
        jt.triton_call(
            x, x, 40, kernel=k.add_kernel, out_shape=x, grid=3, BLOCK=16, backend_options={"extern_libs": {"a": 1}}
        )


# -- module-level names ----------------------------------------------------------------------------------------

#: jax_triton.__all__ of the 0.3 and 0.4 lines, and the names 0.3 published at the top level besides.
JAX_TRITON_NAMES = {
    "0.3": ["utils", "triton_call", "cdiv", "next_power_of_2", "strides_from_shape", "__version__",
            "__version_info__", "get_compute_capability", "get_serialized_metadata"],
    "0.4": ["triton_call", "strides_from_shape", "CUSTOM_CALL_TARGET_NAME", "TensorDescriptor", "__version__",
            "__version_info__"],
}  # fmt: skip


@pytest.mark.parametrize("line", sorted(JAX_TRITON_NAMES))
def test_every_published_name_exists(line: str) -> None:
    missing = [name for name in JAX_TRITON_NAMES[line] if not hasattr(jt, name)]
    assert not missing


def test_version_info_is_a_tuple_of_ints_matching_the_version() -> None:
    assert jt.__version_info__ == tuple(int(p) for p in jt.__version__.split("."))


def test_custom_call_target_name_is_jaxlibs_which_the_jaxlib_launcher_emits() -> None:
    assert jt.CUSTOM_CALL_TARGET_NAME == "triton_kernel_call_ffi"


def test_get_compute_capability_without_a_gpu_says_so() -> None:
    if any(d.platform in ("cuda", "gpu") for d in jax.devices()):
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(
        NoDeviceError, match=r"get_compute_capability\(0\): JAX sees no CUDA device.*compute_capability="
    ):
        jt.get_compute_capability(0)
    with pytest.raises(TypeError, match=r"takes an int"):
        jt.get_compute_capability("0")  # type: ignore[arg-type]


def test_get_serialized_metadata_reads_the_bytes_back_from_a_kernel_call_message() -> None:
    launch = jaxlib_call.KernelLaunch(
        kernel=jaxlib_call.KernelSpec("k", 4, 0, "", 1, 90), grid=(1, 1, 1), parameters=()
    )
    opaque = jaxlib_call.encode_call("k", [launch], ["cfg"], [], b"tag\x00\xff")
    assert jt.get_serialized_metadata(opaque) == b"tag\x00\xff"
    assert jt.get_serialized_metadata(jaxlib_call.encode_call("k", [launch], ["cfg"], [], b"")) == b""
    with pytest.raises(KernelCallValueError, match=r"not a zlib-compressed Triton kernel-call message"):
        jt.get_serialized_metadata(b"plain bytes")
    assert zlib.decompress(opaque)  # the format jaxlib reads


def test_kernel_wrapper_signature_is_an_inspect_signature() -> None:
    wrapped = JTJITFunction(k.add_current_kernel)
    assert wrapped.signature == inspect.signature(k.add_current_kernel.fn)
    assert wrapped.signature.parameters["BLOCK"].default == 16
    assert wrapped.param_defaults == {"BLOCK": 16}
    assert re.fullmatch(r"JTJITFunction\(add_current_kernel\(.*\)\)", repr(wrapped))


def test_custom_call_target_name_argument_of_0_3_is_accepted_at_its_default_only() -> None:
    x = rand(40, 9)
    out = jt.triton_call(
        x, x, 40, kernel=k.add_kernel, out_shape=x, grid=3, BLOCK=16, custom_call_target_name="triton_kernel_call"
    )
    np.testing.assert_allclose(out, 2 * np.asarray(x), rtol=1e-6)
    with pytest.raises(ValueError, match=r"custom_call_target_name='mine'.*launcher="):
        jt.triton_call(x, x, 40, kernel=k.add_kernel, out_shape=x, grid=3, BLOCK=16, custom_call_target_name="mine")


# -- calls whose outputs are unused ------------------------------------------------------------------------------
# jax-triton 0.4 never lets JAX remove its call as dead code (0.3 did, as JAX removes any operation without effects
# whose results are unused); jt removes it unless the call says it has a side effect, which keeps it everywhere.


@triton.jit
def announcing_copy_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    tl.device_print("announced", x)
    tl.store(out_ptr + offsets, x)


def _discarding(**options: Any) -> Any:
    def f(x: jax.Array) -> jax.Array:
        jt.triton_call(x, kernel=announcing_copy_kernel, out_shape=x, grid=1, BLOCK=8, **options)
        return x * 2

    return f


def _kept_after_dead_code_elimination(f: Any, x: jax.Array) -> int:
    from jax._src.interpreters import partial_eval as pe

    jaxpr = jax.make_jaxpr(f)(x)
    eliminated, _ = pe.dce_jaxpr(jaxpr.jaxpr, [False])
    return sum(eqn.primitive.name == "triton_kernel_call" for eqn in eliminated.eqns)


def test_a_call_with_a_side_effect_survives_dead_code_elimination_with_every_output_unused() -> None:
    assert _kept_after_dead_code_elimination(_discarding(has_side_effect=True), rand(8, 31)) == 1


def test_a_call_without_a_side_effect_whose_outputs_are_unused_is_removed() -> None:
    assert _kept_after_dead_code_elimination(_discarding(), rand(8, 32)) == 0


@pytest.mark.parametrize("effect", [True, False])
def test_only_a_call_with_a_side_effect_runs_when_its_outputs_are_unused(
    effect: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    x = rand(8, 33 + effect)
    np.testing.assert_array_equal(jax.jit(_discarding(has_side_effect=effect))(x), np.asarray(x) * 2)
    printed = capfd.readouterr().out
    assert ("announced" in printed) is effect, printed
