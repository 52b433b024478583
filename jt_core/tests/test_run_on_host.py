"""``jt_core.plugin.run_on_host`` and ``emit_host_callback``: a launcher runs the kernels it is given on host arrays,
those of ``jax.vmap`` calls (a generated wrapper kernel) included, with the CPU backend's meaning and checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import core_kernels as k
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jt_core as jt
from jt_core.cpu.interpreter_launcher import CpuLauncher
from jt_core.errors import from_runtime_error
from jt_core.plugin import (
    CompiledKernel,
    Dialect,
    KernelCall,
    Launcher,
    Target,
    emit_host_callback,
    hookimpl,
    run_on_host,
)
from jt_core.testing import (
    accumulate_kernel,
    half_write_kernel,
    record_lowerings,
    sample_add_kernel,
    scale_inplace_kernel,
)


def rand(*shape: int) -> np.ndarray:
    return np.random.default_rng().standard_normal(shape, np.float32)


def lowered(f: Callable[..., Any], *args: Any) -> tuple[KernelCall, tuple[CompiledKernel, ...]]:
    """The call and kernels jt hands the interpreter launcher when ``f`` (whose calls name it) is lowered."""
    with record_lowerings(CpuLauncher) as records:
        jax.jit(f).trace(*args).lower()
    (record,) = records
    return record.call, record.kernels


def add(x: Any, y: Any, **options: Any) -> Any:
    return jt.triton_call(
        x, y, kernel=sample_add_kernel, out_shape=x, grid=jt.cdiv(x.shape[-1], 32), n=x.shape[-1], BLOCK=32,
        launcher="interpreter", **options,
    )  # fmt: skip


def test_runs_a_lowered_call_on_host_arrays() -> None:
    x, y = rand(80), rand(80)
    call, kernels = lowered(lambda a, b: add(a, b), x, y)
    (out,) = run_on_host(call, kernels[0], [x, y])
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, x + y)


def test_runs_the_wrapper_kernel_of_a_vmap_call() -> None:
    x, y = rand(3, 64), rand(64)
    call, kernels = lowered(jax.vmap(lambda a, b: add(a, b), in_axes=(0, None)), x, y)
    assert call.batch is not None and call.batch.batch_shape == (3,)
    assert call.fn is not sample_add_kernel and call.batch.base.fn is sample_add_kernel
    (out,) = run_on_host(call, kernels[0], [x, y])
    np.testing.assert_array_equal(out, x + y[None, :])


def test_runs_the_wrapper_kernel_of_nested_vmaps_around_a_kernel_with_a_helper() -> None:
    def square_plus_one(a: Any) -> Any:
        return jt.triton_call(
            a, kernel=k.nested_helper_kernel, out_shape=a, grid=1, n=a.shape[-1], BLOCK=32, launcher="interpreter"
        )

    x = rand(2, 3, 32)
    call, kernels = lowered(jax.vmap(jax.vmap(square_plus_one)), x)
    assert call.batch is not None and call.batch.batch_shape == (2, 3)
    (out,) = run_on_host(call, kernels[0], [x])
    np.testing.assert_allclose(out, x * x + 1, rtol=1e-6)


def test_writes_into_the_outputs_given() -> None:
    x, y = rand(64), rand(64)
    call, kernels = lowered(lambda a, b: add(a, b), x, y)
    target = np.full(64, 5.0, np.float32)
    (out,) = run_on_host(call, kernels[0], [jnp.asarray(x), jnp.asarray(y)], outputs=[target])
    assert out is target
    np.testing.assert_array_equal(target, x + y)


def test_an_element_the_kernel_does_not_write_shows_as_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    # Not reported: =error would refuse the kernel, and under the race check the default warns of it.
    monkeypatch.setenv("JT_CPU_UNWRITTEN", "ignore")
    call, kernels = lowered(
        lambda: jt.triton_call(
            kernel=half_write_kernel,
            out_shape=jax.ShapeDtypeStruct((16,), jnp.float32),
            grid=1,
            n=16,
            BLOCK=16,
            launcher="interpreter",
        )
    )
    (out,) = run_on_host(call, kernels[0], [])
    np.testing.assert_array_equal(out[:8], np.full(8, 7.0, np.float32))
    assert np.isnan(out[8:]).all()


def test_an_aliased_output_starts_from_its_operand_and_a_zeroed_one_from_zero() -> None:
    x = rand(64)
    call, kernels = lowered(
        lambda a: jt.triton_call(
            a,
            kernel=scale_inplace_kernel,
            out_shape=a,
            input_output_aliases={0: 0},
            grid=2,
            n=64,
            factor=3.0,
            BLOCK=32,
            launcher="interpreter",
        ),
        x,
    )
    (scaled,) = run_on_host(call, kernels[0], [x])
    np.testing.assert_allclose(scaled, x * 3.0, rtol=1e-6)
    call, kernels = lowered(
        lambda a: jt.triton_call(
            a,
            kernel=accumulate_kernel,
            out_shape=jax.ShapeDtypeStruct((1,), jnp.float32),
            zeroed_outputs=(0,),
            grid=2,
            n=64,
            BLOCK=32,
            launcher="interpreter",
        ),
        x,
    )
    (total,) = run_on_host(call, kernels[0], [x])
    np.testing.assert_allclose(total, [x.astype(np.float64).sum()], rtol=1e-5)


def test_a_kernel_of_another_backend_runs_from_the_call_s_kernel_function() -> None:
    x, y = rand(64), rand(64)
    call, _ = lowered(lambda a, b: add(a, b), x, y)
    foreign = CompiledKernel(name="sample_add_kernel", target=Target("toy", "toy1", 32), asm={"ttir": "..."})
    (out,) = run_on_host(call, foreign, [x, y])
    np.testing.assert_array_equal(out, x + y)


def test_an_out_of_bounds_access_raises_instead_of_crashing() -> None:
    x, y = rand(64), rand(64)
    call, kernels = lowered(lambda a, b: past_the_end(a, b, "interpreter"), x, y)
    with pytest.raises(jt.OutOfBoundsAccessError, match="sample_add_kernel"):
        run_on_host(call, kernels[0], [x, y])


def past_the_end(x: Any, y: Any, launcher: str) -> Any:
    """``x + y`` with ``n=96`` on 64-element buffers: the masks let the third program past their ends."""
    return jt.triton_call(x, y, kernel=sample_add_kernel, out_shape=x, grid=3, n=96, BLOCK=32, launcher=launcher)


# -- mistakes --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def add_call() -> tuple[KernelCall, tuple[CompiledKernel, ...]]:
    spec = jax.ShapeDtypeStruct((64,), jnp.float32)
    return lowered(lambda a, b: add(a, b, name="add_call"), spec, spec)


@pytest.mark.parametrize(
    ("operands", "error", "says"),
    [
        ([np.zeros(64, np.float32)], jt.KernelCallValueError, r"'add_call' takes 2 array operands \(float32\[64\], "),
        (
            [np.zeros(64, np.float32), np.zeros(64, np.float64)],
            jt.KernelCallValueError,
            r"operand 1 \(y_ptr\) of 'add_call' is float64\[64\], where the call takes float32\[64\]",
        ),
        (
            [np.zeros(64, np.float32), np.zeros(32, np.float32)],
            jt.KernelCallValueError,
            r"operand 1 \(y_ptr\) of 'add_call' is float32\[32\], where the call takes float32\[64\]",
        ),
        (np.zeros(64, np.float32), jt.KernelCallTypeError, r"operands=...\) takes a sequence of 2 arrays"),
    ],
)
def test_operands_that_do_not_match_the_call_are_refused_naming_them(
    add_call: Any, operands: Any, error: type[Exception], says: str
) -> None:
    call, kernels = add_call
    with pytest.raises(error, match=says):
        run_on_host(call, kernels[0], operands)


@pytest.mark.parametrize(
    ("outputs", "error", "says"),
    [
        ([], jt.KernelCallValueError, r"outputs=...\) takes 1 arrays for 'add_call' \(float32\[64\]\)"),
        ([np.zeros(64, np.float64)], jt.KernelCallValueError, r"output 0 \(out_ptr\) is float64\[64\]"),
        ([np.zeros(128, np.float32)[::2]], jt.KernelCallValueError, r"output 0 \(out_ptr\) must be writable and C-"),
        ([[0.0] * 64], jt.KernelCallTypeError, r"output 0 \(out_ptr\) must be a NumPy array, got list"),
    ],
)
def test_outputs_that_do_not_match_the_call_are_refused_naming_them(
    add_call: Any, outputs: Any, error: type[Exception], says: str
) -> None:
    call, kernels = add_call
    x = np.zeros(64, np.float32)
    with pytest.raises(error, match=says):
        run_on_host(call, kernels[0], [x, x], outputs=outputs)


def test_a_configuration_out_of_range_is_refused(add_call: Any) -> None:
    call, kernels = add_call
    x = np.zeros(64, np.float32)
    with pytest.raises(jt.KernelCallValueError, match=r"config=...\) takes the index of one of the 1 configurations"):
        run_on_host(call, kernels[0], [x, x], config=1)


def test_a_kernel_compiled_for_another_call_is_refused(add_call: Any) -> None:
    call, _ = add_call
    x = rand(64)
    _, other = lowered(
        lambda a: jt.triton_call(
            a, kernel=k.nested_helper_kernel, out_shape=a, grid=2, n=64, BLOCK=32, launcher="interpreter"
        ),
        x,
    )
    with pytest.raises(jt.KernelCallValueError, match=r"compiled from nested_helper_kernel\(\), but the call runs"):
        run_on_host(call, other[0], [x, x])


def test_what_is_not_a_call_or_a_kernel_is_refused(add_call: Any) -> None:
    call, kernels = add_call
    x = np.zeros(64, np.float32)
    with pytest.raises(jt.KernelCallTypeError, match=r"run_on_host\(call=...\) takes the KernelCall"):
        run_on_host(kernels[0], kernels[0], [x, x])  # type: ignore[arg-type]
    with pytest.raises(jt.KernelCallTypeError, match=r"run_on_host\(kernel=...\) takes a CompiledKernel"):
        run_on_host(call, call, [x, x])  # type: ignore[arg-type]


def test_a_kernel_of_a_dialect_the_interpreter_cannot_run_is_refused(add_call: Any) -> None:
    class Layouts(Dialect):
        name = "layouts"

        def claims(self, kernel: Any) -> bool:
            return False

        def make_source(self, kernel: Any, specialization: Any, target: Any) -> Any:
            raise NotImplementedError

    call, kernels = add_call
    x = np.zeros(64, np.float32)
    with pytest.raises(jt.UnsupportedKernelError, match=r"'add_call' is a layouts kernel, which Triton's interp"):
        run_on_host(dataclasses.replace(call, dialect=Layouts()), kernels[0], [x, x])


# -- a launcher built on them -----------------------------------------------------------------------------------


class HostLauncher(Launcher):
    """A CPU launcher made of the two public helpers only."""

    platform = "cpu"
    name = "host-test"
    priority = -100

    def runs_through_host_callback(self, call: KernelCall) -> bool:
        return True

    def lower(
        self, ctx: Any, call: KernelCall, kernels: Sequence[CompiledKernel], operands: Sequence[Any], device: Any
    ) -> Sequence[Any]:
        # An autotuned call runs its first configuration, as on jt's CPU backend.
        return emit_host_callback(
            ctx,
            lambda *arrays: run_on_host(call, kernels[0], arrays),
            operands,
            has_side_effect=call.launch.has_side_effect,
        )


class HostPlugin:
    @hookimpl
    def jt_register_launchers(self, platform: str | None) -> list[Launcher]:
        return [HostLauncher()] if platform in (None, "cpu") else []


@pytest.fixture
def host_launcher(jt_register_plugin: Any) -> None:
    jt_register_plugin(HostPlugin(), name="host-test")


def host_add(x: Any, y: Any) -> Any:
    return jt.triton_call(x, y, kernel=sample_add_kernel, out_shape=x, grid=2, n=64, BLOCK=32, launcher="host-test")


@pytest.mark.usefixtures("host_launcher")
def test_a_launcher_on_the_helpers_runs_calls_plain_and_under_vmap() -> None:
    x, y = rand(4, 64), rand(4, 64)
    with record_lowerings(HostLauncher) as records:
        np.testing.assert_array_equal(jax.jit(host_add)(x[0], y[0]), x[0] + y[0])
        np.testing.assert_array_equal(jax.jit(jax.vmap(host_add))(x, y), x + y)
        np.testing.assert_array_equal(jax.jit(jax.vmap(host_add, in_axes=(None, 0)))(x[0], y), x[0] + y)
    assert [record.call.batch is not None for record in records] == [False, True, True]


def autotuned_scale(x: Any, launcher: str) -> Any:
    """``3 * x`` over 256 elements, by a kernel autotuned over three block sizes."""
    return jt.triton_call(
        x,
        kernel=k.autotuned_scale_kernel,
        out_shape=x,
        grid=lambda meta: (jt.cdiv(256, meta["BLOCK"]),),
        n=256,
        launcher=launcher,
    )


@pytest.mark.usefixtures("host_launcher")
def test_a_launcher_on_the_helpers_runs_an_autotuned_call() -> None:
    x = rand(256)

    with record_lowerings(HostLauncher) as records:
        out = jax.jit(lambda a: autotuned_scale(a, "host-test"))(x)
    (record,) = records
    assert len(record.call.configs) == len(record.kernels) == 3
    np.testing.assert_array_equal(out, x * np.float32(3))


@pytest.mark.usefixtures("host_launcher")
def test_an_error_in_the_kernel_reaches_the_caller_through_the_callback() -> None:
    x, y = rand(64), rand(64)
    with pytest.raises(Exception, match=r"OutOfBoundsAccessError: kernel 'sample_add_kernel'") as caught:
        jax.block_until_ready(jax.jit(lambda a, b: past_the_end(a, b, "host-test"))(x, y))
    assert isinstance(from_runtime_error(caught.value), jt.OutOfBoundsAccessError)


def test_emit_host_callback_refuses_what_is_not_a_function() -> None:
    with pytest.raises(jt.KernelCallTypeError, match=r"emit_host_callback\(callback=...\) takes a function"):
        emit_host_callback(None, "run", [])  # type: ignore[arg-type]


class TunedAheadLauncher(HostLauncher):
    name = "host-tuned-ahead"

    def needs_tuning_ahead(self, call: KernelCall) -> bool:
        return True


class TunedAheadPlugin:
    @hookimpl
    def jt_register_launchers(self, platform: str | None) -> list[Launcher]:
        return [TunedAheadLauncher()] if platform in (None, "cpu") else []


@pytest.mark.parametrize(("autotune", "kernels"), [("0", 3), ("1", 1)])
def test_a_launcher_tuning_ahead_on_the_cpu_gets_one_configuration_only_where_the_cpu_tunes(
    jt_register_plugin: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any, autotune: str, kernels: int
) -> None:
    monkeypatch.setenv("JT_CPU_AUTOTUNE", autotune)
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path))  # no winner remembered from an earlier run
    jt_register_plugin(TunedAheadPlugin(), name="host-tuned-ahead")
    x = rand(256)
    with record_lowerings(TunedAheadLauncher) as records:
        out = jax.jit(lambda a: autotuned_scale(a, "host-tuned-ahead"))(x)
    (record,) = records
    assert len(record.kernels) == len(record.call.configs) == kernels
    np.testing.assert_array_equal(out, x * np.float32(3))
