"""triton_call on the CPU backend: conventions, outputs, aliases, Refs, scalars, grids, dtypes, autotune."""

from __future__ import annotations

import concurrent.futures
import inspect
from typing import Any

import core_kernels as k
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core.errors import KernelRuntimeError, OutOfBoundsAccessError, UnsupportedKernelError
from jt_core.testing import accumulate_kernel, half_write_kernel, scale_inplace_kernel
from jt_core.triton_lib import JTJITFunction

RNG = np.random.default_rng(1234)


def rand(n: int, dtype: Any = np.float32) -> jax.Array:
    return jnp.asarray(RNG.standard_normal(n).astype(dtype))


def test_classic_convention_appends_outputs_after_inputs() -> None:
    x, y = rand(40), rand(40)

    @jax.jit
    def f(x: jax.Array, y: jax.Array) -> jax.Array:
        return jt.triton_call(x, y, x.size, kernel=k.add_kernel, out_shape=x, grid=(3,), BLOCK=16)

    np.testing.assert_allclose(f(x, y), np.asarray(x) + np.asarray(y), rtol=1e-6)


def test_current_convention_with_out_type_keyword_operands_and_constexpr_default() -> None:
    x, y = rand(40), rand(40)
    out = jax.jit(
        lambda x, y: jt.triton_call(
            x, y_ptr=y, n=40, kernel=k.add_current_kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=3
        )
    )(x, y)
    np.testing.assert_allclose(out, np.asarray(x) + np.asarray(y), rtol=1e-6)


def test_jax_triton_documented_kernels_run_unchanged() -> None:
    @triton.jit
    def add_kernel(x_ptr, y_ptr, length, output_ptr, block_size: tl.constexpr):
        pid = tl.program_id(axis=0)
        block_start = pid * block_size
        offsets = block_start + tl.arange(0, block_size)
        mask = offsets < length
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        output = x + y
        tl.store(output_ptr + offsets, output, mask=mask)

    def add(x: jnp.ndarray, y: jnp.ndarray) -> jnp.ndarray:
        out_shape = jax.ShapeDtypeStruct(shape=x.shape, dtype=x.dtype)
        block_size = 8
        return jt.triton_call(
            x, y, x.size, kernel=add_kernel, out_shape=out_shape, grid=(x.size // block_size,), block_size=block_size
        )

    x_val, y_val = jnp.arange(8), jnp.arange(8, 16)
    np.testing.assert_array_equal(add(x_val, y_val), np.arange(8) + np.arange(8, 16))
    np.testing.assert_array_equal(jax.jit(add)(x_val, y_val), np.arange(8) + np.arange(8, 16))


def test_current_jax_triton_documented_kernel_runs_unchanged() -> None:
    @triton.jit
    def add_kernel(x_ptr, y_ptr, output_ptr, block_size: tl.constexpr = 128):
        pid = tl.program_id(axis=0)
        block_start = pid * block_size
        offsets = block_start + tl.arange(0, block_size)
        mask = offsets < 8
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        output = x + y
        tl.store(output_ptr + offsets, output, mask=mask)

    def add(x: jnp.ndarray, y: jnp.ndarray) -> jnp.ndarray:
        block_size = 8
        return jt.triton_call(
            x, y, kernel=add_kernel, out_type=jax.typeof(x), grid=(x.size // block_size,), block_size=block_size
        )

    np.testing.assert_array_equal(jax.jit(add)(jnp.arange(8), jnp.arange(8, 16)), np.arange(8) + np.arange(8, 16))


def test_current_convention_aliased_output_has_no_parameter() -> None:
    x = rand(40)
    out = jax.jit(
        lambda x: jt.triton_call(
            x, 40, 2.5, kernel=scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0}, grid=3, BLOCK=16
        )
    )(x)
    np.testing.assert_allclose(out, np.asarray(x) * 2.5, rtol=1e-6)


def test_classic_convention_aliased_output_keeps_its_pointer() -> None:
    x = rand(40)
    out = jax.jit(
        lambda x: jt.triton_call(
            x, 40, 2.0, kernel=k.inplace_classic_kernel, out_shape=x, input_output_aliases={0: 0}, grid=3, BLOCK=16
        )
    )(x)
    np.testing.assert_allclose(out, np.asarray(x) * 2.0, rtol=1e-6)


def test_aliased_output_reuses_donated_buffer() -> None:
    x = rand(40)
    expected = np.asarray(x) * 3.0

    def f(x: jax.Array) -> jax.Array:
        return jt.triton_call(
            x, 40, 3.0, kernel=scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0}, grid=3, BLOCK=16
        )

    out = jax.jit(f, donate_argnums=0)(x)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert x.is_deleted()


def test_multiple_outputs_and_pytree_outputs() -> None:
    x = rand(20)
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
    a, b = jt.triton_call(x, kernel=k.two_outputs_kernel, out_shape=[spec, spec], grid=2, n=20, BLOCK=16)
    np.testing.assert_allclose(a, np.asarray(x) + 1, rtol=1e-6)
    np.testing.assert_allclose(b, np.asarray(x) - 1, rtol=1e-6)
    tree = jax.jit(
        lambda x: jt.triton_call(
            x, kernel=k.two_outputs_kernel, out_shape={"a_plus": spec, "b_minus": spec}, grid=2, n=20, BLOCK=16
        )
    )(x)
    # Outputs are matched to the kernel's pointers in flattened (sorted-key) order.
    assert set(tree) == {"a_plus", "b_minus"}
    np.testing.assert_allclose(tree["b_minus"], np.asarray(x) - 1, rtol=1e-6)


def test_unwritten_outputs_are_poisoned_not_zero() -> None:
    with jt.cpu_checks(unwritten="ignore"):  # the race check would report what this test leaves unwritten
        out = jt.triton_call(
            kernel=half_write_kernel, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32), grid=1, n=8, BLOCK=8
        )
    np.testing.assert_array_equal(np.asarray(out)[:4], 7.0)
    assert np.isnan(np.asarray(out)[4:]).all()


@pytest.mark.parametrize("zeroed", [(0,), lambda meta: [0]], ids=["sequence", "callable"])
def test_zeroed_outputs_are_zero_before_the_kernel(zeroed: Any) -> None:
    x = rand(64)
    out = jax.jit(
        lambda x: jt.triton_call(
            x,
            kernel=accumulate_kernel,
            out_shape=jax.ShapeDtypeStruct((1,), jnp.float32),
            grid=4,
            n=64,
            BLOCK=16,
            zeroed_outputs=zeroed,
        )
    )(x)
    np.testing.assert_allclose(out[0], np.asarray(x).sum(), rtol=1e-5)


def test_ref_operand_is_updated_in_place_alongside_an_allocated_output() -> None:
    x = rand(20)
    expected = np.asarray(x) * 2.0

    @jax.jit
    def f(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        ref = jax.new_ref(x)
        copied = jt.triton_call(ref, kernel=k.copy_kernel, out_shape=x, grid=2, n=20, BLOCK=16)
        jt.triton_call(ref, 20, 2.0, kernel=scale_inplace_kernel, out_shape=(), grid=2, BLOCK=16)
        return ref[...], copied

    scaled, copied = f(x)
    np.testing.assert_allclose(scaled, expected, rtol=1e-6)
    np.testing.assert_allclose(copied, np.asarray(x), rtol=1e-6)


def test_calls_from_worker_threads() -> None:
    f = jax.jit(lambda x: jt.triton_call(x, kernel=k.scale_kernel, out_shape=x, grid=2, n=20, factor=2.0, BLOCK=16))
    inputs = [rand(20) for _ in range(8)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda x: np.asarray(f(x)), inputs))
    for x, out in zip(inputs, results):
        np.testing.assert_allclose(out, np.asarray(x) * 2.0, rtol=1e-6)


@pytest.mark.parametrize(
    ("grid", "shape"),
    [(3, (3, 1, 1)), ((2,), (2, 1, 1)), ((2, 3), (2, 3, 1)), ((2, 3, 2), (2, 3, 2))],
    ids=["int", "1-axis", "2-axes", "3-axes"],
)
def test_grids_of_one_to_three_axes(grid: Any, shape: tuple[int, int, int]) -> None:
    out = jt.triton_call(
        kernel=k.grid_ids_kernel,
        out_shape=jax.ShapeDtypeStruct(shape, jnp.int32),
        grid=grid,
        NX=shape[0],
        NY=shape[1],
    )
    expected = np.fromfunction(lambda x, y, z: 100 * x + 10 * y + z, shape, dtype=np.int32)
    np.testing.assert_array_equal(out, expected)


def test_grid_callable_receives_the_metaparameters() -> None:
    x = rand(50)
    seen = {}

    def grid(meta: dict[str, Any]) -> tuple[int]:
        seen.update(meta)
        return (triton.cdiv(50, meta["BLOCK"]),)

    out = jt.triton_call(x, kernel=k.scale_kernel, out_shape=x, grid=grid, n=50, factor=1.5, BLOCK=16)
    np.testing.assert_allclose(out, np.asarray(x) * 1.5, rtol=1e-6)
    assert seen["BLOCK"] == 16 and seen["n"] == 50 and seen["num_warps"] == 4


@pytest.mark.parametrize(
    "factor",
    [3, 1, 1.5, np.float32(0.5), np.int16(4), np.float64(2.0), np.int64(2**40)],
    ids=["int", "one", "float", "np.float32", "np.int16", "np.float64", "np.int64-large"],
)
def test_scalar_arguments(factor: Any) -> None:
    x = jnp.asarray(RNG.integers(-5, 5, 20).astype(np.float32))
    out = jt.triton_call(x, kernel=k.scale_kernel, out_shape=x, grid=2, n=20, factor=factor, BLOCK=16)
    np.testing.assert_allclose(out, np.asarray(x) * np.float32(factor), rtol=1e-6)


@pytest.mark.parametrize("flag", [True, False, np.bool_(True)])
def test_bool_scalar(flag: Any) -> None:
    x = rand(20)
    out = jt.triton_call(x, kernel=k.select_kernel, out_shape=x, grid=2, n=20, flag=flag, BLOCK=16)
    np.testing.assert_allclose(out, -np.asarray(x) if flag else np.asarray(x))


def test_value_one_is_specialised_and_true_is_not() -> None:
    spec = jax.ShapeDtypeStruct((20,), jnp.float32)
    from jt_core.call import CallOptions
    from jt_core.testing._calls import bind

    def slot(factor: Any) -> Any:
        call = bind(k.scale_kernel, (spec,), {"n": 20, "factor": factor, "BLOCK": 16}, CallOptions(spec, grid=2))
        return next(s for s in call.slots if s.name == "factor"), call

    one, call = slot(1)
    assert one.type_str == "constexpr"
    assert call.specialization(call.configs[0]).constexprs[(3,)] == 1
    assert slot(True)[0].type_str == "i1"
    assert slot(1.0)[0].type_str == "fp32"
    assert slot(32)[0].divisible_by_16 and not slot(33)[0].divisible_by_16
    assert slot(2**33)[0].type_str == "i64"


# 64-bit dtypes need jax_enable_x64: test_64_bit_dtypes_with_x64 covers them.
DTYPES = [
    np.float16,
    ml_dtypes.bfloat16,
    np.float32,
    np.int8,
    np.int16,
    np.int32,
    np.uint8,
    np.uint16,
    np.uint32,
    np.bool_,
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_copy_and_add_across_dtypes(dtype: Any) -> None:
    values = RNG.integers(0, 2, 20) if dtype is np.bool_ else RNG.integers(0, 50, 20)
    x = jnp.asarray(values.astype(dtype))
    out = jt.triton_call(x, kernel=k.copy_kernel, out_shape=x, grid=2, n=20, BLOCK=16)
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x))
    if dtype is not np.bool_:
        y = jnp.asarray(RNG.integers(0, 50, 20).astype(dtype))
        total = jt.triton_call(x, y, 20, kernel=k.add_kernel, out_shape=x, grid=2, BLOCK=16)
        expected = (np.asarray(x).astype(np.float64) + np.asarray(y).astype(np.float64)).astype(dtype)
        np.testing.assert_array_equal(np.asarray(total), expected)


def test_bfloat16_arithmetic_is_correct() -> None:
    x = jnp.asarray(RNG.standard_normal(20), jnp.bfloat16)
    out = jt.triton_call(x, kernel=k.scale_kernel, out_shape=x, grid=2, n=20, factor=3.0, BLOCK=16)
    expected = (np.asarray(x, np.float32) * 3.0).astype(ml_dtypes.bfloat16)
    np.testing.assert_allclose(np.asarray(out, np.float32), expected.astype(np.float32), rtol=1e-2)


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.uint64])
def test_64_bit_dtypes_with_x64(dtype: Any) -> None:
    with jax.enable_x64(True):
        x = jnp.asarray(RNG.integers(0, 2**20, 20).astype(dtype) * 4096)
        y = jnp.asarray(RNG.integers(0, 2**20, 20).astype(dtype))
        assert x.dtype == dtype
        out = jax.jit(lambda x, y: jt.triton_call(x, y, 20, kernel=k.add_kernel, out_shape=x, grid=2, BLOCK=16))(x, y)
        np.testing.assert_array_equal(np.asarray(out), np.asarray(x) + np.asarray(y))


def test_tuple_parameter_operand() -> None:
    a, b = rand(20), rand(20)
    out = jt.triton_call((a, b), kernel=k.pair_kernel, out_shape=a, grid=2, n=20, BLOCK=16)
    np.testing.assert_allclose(out, np.asarray(a) * np.asarray(b), rtol=1e-6)


def test_nested_jit_helper_is_interpreted() -> None:
    x = rand(20)
    out = jt.triton_call(x, kernel=k.nested_helper_kernel, out_shape=x, grid=2, n=20, BLOCK=16)
    np.testing.assert_allclose(out, np.asarray(x) ** 2 + 1, rtol=1e-6)


def test_kernel_closure_variables_are_kept() -> None:
    x = rand(20)
    out = jt.triton_call(x, kernel=k.make_closure_kernel(0.25), out_shape=x, grid=2, n=20, BLOCK=16)
    np.testing.assert_allclose(out, np.asarray(x) + 0.25, rtol=1e-6)


def test_range_with_runtime_bound() -> None:
    x = rand(3 * 37).reshape(3, 37)
    out = jt.triton_call(
        x, K=37, kernel=k.row_sum_kernel, out_shape=jax.ShapeDtypeStruct((3,), jnp.float32), grid=3, BK=16
    )
    # float32 sums in the kernel's order (chunks of 16) against float64: a row may nearly cancel, so absolute too.
    np.testing.assert_allclose(out, np.asarray(x, np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_heuristics_set_constexprs_and_num_warps() -> None:
    x = rand(20)
    out = jt.triton_call(x, kernel=k.heuristic_copy_kernel, out_shape=x, grid=1, n=20)
    np.testing.assert_allclose(out, np.asarray(x) * 32, rtol=1e-6)


def test_autotune_uses_the_first_remaining_config_on_cpu_and_is_not_mutated() -> None:
    configs_before = [(dict(c.kwargs), c.num_warps) for c in k.autotuned_scale_kernel.configs]
    x = rand(100)
    seen = []

    def grid(meta: dict[str, Any]) -> tuple[int]:
        seen.append(meta["BLOCK"])
        return (triton.cdiv(100, meta["BLOCK"]),)

    out = jax.jit(lambda x: jt.triton_call(x, kernel=k.autotuned_scale_kernel, out_shape=x, grid=grid, n=100))(x)
    np.testing.assert_allclose(out, np.asarray(x) * 3, rtol=1e-6)
    assert seen == [16, 32, 64]
    fixed = jt.triton_call(x, kernel=k.autotuned_scale_kernel, out_shape=x, grid=grid, n=100, BLOCK=64)
    np.testing.assert_allclose(fixed, np.asarray(x) * 3, rtol=1e-6)
    assert seen[-1] == 64 and len(seen) == 4
    assert [(dict(c.kwargs), c.num_warps) for c in k.autotuned_scale_kernel.configs] == configs_before
    assert not hasattr(k.autotuned_scale_kernel, "jt_configs")


def test_a_fixed_grid_serves_autotuning_over_compiler_options_only() -> None:
    x = rand(100)
    out = jt.triton_call(x, kernel=k.warps_tuned_scale_kernel, out_shape=x, grid=4, n=100, BLOCK=32)
    np.testing.assert_allclose(out, np.asarray(x) * 3, rtol=1e-6)


def test_a_fixed_grid_serves_autotuning_whose_block_size_the_caller_fixes() -> None:
    x = rand(100)
    out = jt.triton_call(x, kernel=k.autotuned_scale_kernel, out_shape=x, grid=4, n=100, BLOCK=32)
    np.testing.assert_allclose(out, np.asarray(x) * 3, rtol=1e-6)


def test_a_grid_callable_that_ignores_the_metaparameters_serves_a_persistent_kernel() -> None:
    x = rand(100)
    out = jt.triton_call(x, kernel=k.persistent_scale_kernel, out_shape=x, grid=lambda meta: (2,), n=100, PROGRAMS=2)
    np.testing.assert_allclose(out, np.asarray(x) * 3, rtol=1e-6)


def test_autotune_config_pre_hook_that_zeroes_a_tensor_is_refused_clearly() -> None:
    x = rand(16)
    with pytest.raises(NotImplementedError, match=r"pre_hook .* raised AttributeError: 'zero_'.*reset_to_zero"):
        jt.triton_call(x, kernel=k.pre_hook_kernel, out_shape=x, grid=1, n=16)


@pytest.mark.parametrize(("launcher", "marker"), [("compiled", "jt_cpu_compiled_check"), ("interpreter", "callback")])
def test_side_effecting_call_is_kept_when_its_output_is_unused(
    launcher: str, marker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("JT_CPU_DIFFERENTIAL", "JT_CPU_RACE_CHECK"):  # a comparison's callback; the race check's path
        monkeypatch.delenv(variable, raising=False)
    x = rand(16)

    def f(x: jax.Array, effect: bool) -> jax.Array:
        jt.triton_call(
            x, kernel=k.copy_kernel, out_shape=x, grid=1, n=16, BLOCK=16, has_side_effect=effect, launcher=launcher
        )
        return x + 1

    kept = jax.jit(lambda x: f(x, True)).lower(x).as_text()
    dropped = jax.jit(lambda x: f(x, False)).lower(x).as_text()
    assert marker in kept
    assert marker not in dropped
    if launcher == "compiled":
        assert "iota" in kept and "iota" not in dropped  # the kernel's own work, as XLA operations


def test_all_call_options_are_accepted_on_cpu() -> None:
    x = rand(20)
    out = jt.triton_call(
        x,
        kernel=k.scale_kernel,
        out_shape=x,
        grid=2,
        n=20,
        factor=2.0,
        BLOCK=16,
        num_warps=8,
        num_stages=2,
        num_ctas=1,
        compute_capability=90,
        enable_fp_fusion=False,
        backend_options={"maxnreg": 128},
        debug=True,
        name="my_scale",
        serialized_metadata=b"meta",
        cost_estimate={"flops": 20, "bytes_accessed": 160},
    )
    np.testing.assert_allclose(out, np.asarray(x) * 2, rtol=1e-6)


def test_eager_call_outside_jit() -> None:
    x = rand(20)
    out = jt.triton_call(x, kernel=k.scale_kernel, out_shape=x, grid=2, n=20, factor=-1.0, BLOCK=16)
    np.testing.assert_allclose(out, -np.asarray(x))


def test_vmap_runs_one_launch_per_batch_element() -> None:
    x = rand(3 * 20).reshape(3, 20)
    f = jax.vmap(
        lambda row: jt.triton_call(row, kernel=k.scale_kernel, out_shape=row, grid=2, n=20, factor=2.0, BLOCK=16)
    )
    np.testing.assert_allclose(jax.jit(f)(x), np.asarray(x) * 2, rtol=1e-6)


def test_unmasked_out_of_bounds_load_names_kernel_and_argument() -> None:
    x = rand(10)
    # Inside a compiled computation the error reaches the caller wrapped by JAX's runtime error.
    with pytest.raises((OutOfBoundsAccessError, jax.errors.JaxRuntimeError)) as info:
        jax.block_until_ready(
            jt.triton_call(
                x, kernel=k.oob_load_kernel, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), grid=1, BLOCK=16
            )
        )
    message = str(info.value)
    assert "OutOfBoundsAccessError: kernel 'oob_load_kernel'" in message
    assert "argument 'x_ptr'" in message and "out-of-bounds load" in message
    assert "JT_CPU_BOUNDS_CHECK=0" in message


def test_store_into_a_non_output_input_is_refused() -> None:
    x = rand(16)
    with pytest.raises(
        (OutOfBoundsAccessError, jax.errors.JaxRuntimeError), match=r"stores into input 'x_ptr'.*input_output_aliases"
    ):
        jax.block_until_ready(jt.triton_call(x, kernel=k.store_into_input_kernel, out_shape=x, grid=1, BLOCK=16))
    np.testing.assert_array_equal(np.asarray(x), np.asarray(x))


def test_bounds_check_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CPU_BOUNDS_CHECK", "0")
    x = rand(20)
    out = jt.triton_call(x, kernel=k.scale_kernel, out_shape=x, grid=2, n=20, factor=2.0, BLOCK=16)
    np.testing.assert_allclose(out, np.asarray(x) * 2, rtol=1e-6)


def test_error_inside_kernel_names_the_kernel() -> None:
    x = rand(16)
    with pytest.raises(Exception, match="shape_error_kernel") as info:
        jax.block_until_ready(jt.triton_call(x, kernel=k.shape_error_kernel, out_shape=x, grid=1, BLOCK=16))
    assert isinstance(info.value, (KernelRuntimeError, Exception))


def test_inline_asm_is_refused_naming_a_gpu_platform() -> None:
    x = jnp.arange(16, dtype=jnp.int32)
    with pytest.raises(Exception, match=r"inline_asm_kernel.*(cuda|GPU)") as info:
        jax.block_until_ready(jt.triton_call(x, kernel=k.inline_asm_kernel, out_shape=x, grid=1, BLOCK=16))
    assert "interpreter" in str(info.value)
    assert isinstance(info.value, UnsupportedKernelError) or "UnsupportedKernelError" in str(info.value)


def test_utils_helpers() -> None:
    assert jt.cdiv(10, 4) == 3 and jt.cdiv(0, 4) == 0 and jt.utils.cdiv(8, 4) == 2
    assert [jt.next_power_of_2(n) for n in (0, 1, 2, 3, 17, 64)] == [1, 1, 2, 4, 32, 64]
    assert jt.strides_from_shape((2, 3, 4)) == (12, 4, 1)
    assert jt.utils.strides_from_shape(()) == ()
    with pytest.raises(ValueError, match="positive b"):
        jt.cdiv(3, 0)


def test_get_type_id_and_normalize_grid() -> None:
    assert jt.get_type_id(jnp.bfloat16) == "bf16"
    assert jt.get_type_id(ml_dtypes.float8_e4m3fn) == "fp8e4nv"
    assert [jt.get_type_id(v) for v in (1, 2**31, 2**40, 2**63, True, 1.0)] == [
        "i32",
        "u32",
        "i64",
        "u64",
        "i1",
        "fp32",
    ]
    assert jt.get_type_id(jnp.zeros(2, jnp.float16)) == "fp16"
    assert jt.normalize_grid(4, {}) == (4, 1, 1)
    assert jt.normalize_grid(lambda m: (m["B"], 2), {"B": 3}) == (3, 2, 1)


def test_jtjitfunction_describes_the_kernel() -> None:
    fn = JTJITFunction(k.autotuned_scale_kernel)
    assert fn.arg_names == ["x_ptr", "out_ptr", "n", "BLOCK"]
    assert fn.arg_name_to_index["n"] == 2
    assert isinstance(fn.signature, inspect.Signature)
    assert list(fn.signature.parameters) == fn.arg_names
    assert fn.signature_text == "autotuned_scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr)"
    assert fn.name == "autotuned_scale_kernel"
    assert fn.constexpr_param_names == frozenset({"BLOCK"})
    assert fn.non_constexpr_param_names == ["x_ptr", "out_ptr", "n"] and fn.param_defaults == {}
    before = fn.compiled_kernels_cache_size
    x = rand(16)
    jt.triton_call(x, kernel=k.autotuned_scale_kernel, out_shape=x, grid=1, n=16, BLOCK=16)
    assert fn.compiled_kernels_cache_size >= before + 1
