"""Sharding cases run on 4 CPU host devices by ``test_sharding_rules.py`` (in a subprocess: the device count is
fixed when JAX starts). Not collected by the normal run: its name does not start with ``test_``."""

from __future__ import annotations

import functools
import os
import threading
import time
import zlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jt_core as jt
from jt_core import tuning
from jt_core.cpu.ffi_launcher import CpuFfiLauncher
from jt_core.errors import KernelCallTypeError, KernelCallValueError, UnsupportedKernelError
from jt_core.testing import sample_add_kernel

assert "xla_force_host_platform_device_count=4" in os.environ.get("XLA_FLAGS", ""), "run with 4 host devices"


def add(x: Any, y: Any, launcher: str | None = None) -> Any:
    return jt.triton_call(
        x,
        y,
        n=x.size,
        kernel=sample_add_kernel,
        out_shape=x,
        grid=(triton.cdiv(x.size, 32),),
        BLOCK=32,
        launcher=launcher,
    )


@pytest.fixture
def mesh() -> Any:
    # Auto axes (where XLA partitions through custom_partitioning): explicit ones are the shard_map cases'.
    assert jax.device_count() == 4
    return jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    # Random data, seeded per test so that a failure reproduces.
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def compiled_text(f: Any, *args: Any) -> str:
    return f.lower(*args).compile().as_text()


def test_triton_call_inside_shard_map_runs_per_shard(mesh: Any, rng: np.random.Generator) -> None:
    x = jax.device_put(rng.standard_normal((8, 16), dtype=np.float32), NamedSharding(mesh, P("x")))
    y = jax.device_put(rng.standard_normal((8, 16), dtype=np.float32), NamedSharding(mesh, P("x")))
    f = jax.jit(jax.shard_map(add, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x")))
    np.testing.assert_allclose(f(x, y), np.asarray(x) + np.asarray(y), rtol=1e-6)
    text = compiled_text(f, x, y)
    assert "all-gather" not in text
    assert "f32[2,16]" in text  # each device's kernel sees its 2 rows


@pytest.mark.parametrize("launcher", ["compiled", "ffi"])
def test_undeclared_call_sees_its_whole_operands(mesh: Any, rng: np.random.Generator, launcher: str) -> None:
    """A call without a partition rule computes on whole arrays: a custom call's operands are gathered first; the
    compiled path's operations are XLA's, which XLA partitions itself."""
    x = jax.device_put(rng.standard_normal((8, 16), dtype=np.float32), NamedSharding(mesh, P("x")))
    f = jax.jit(functools.partial(add, launcher=launcher))
    np.testing.assert_allclose(f(x, x), 2 * np.asarray(x), rtol=1e-6)
    if launcher == "ffi":
        assert "all-gather" in compiled_text(f, x, x)


def test_batch_dims_rule_runs_per_shard_with_local_shapes(mesh: Any, rng: np.random.Generator) -> None:
    # The body sees its shard's shapes: scaling by the local row count (2 of 8) reveals them.
    @jt.partitioned(jt.BatchDims(0))
    def f(x: Any, w: Any) -> Any:
        return jnp.sum(x * w, axis=1, keepdims=True) * x.shape[0]

    sharding = NamedSharding(mesh, P("x"))
    x = jax.device_put(rng.standard_normal((8, 6), dtype=np.float32), sharding)
    w = jax.device_put(rng.standard_normal((8, 6), dtype=np.float32), sharding)
    g = jax.jit(f)
    out = g(x, w)
    np.testing.assert_allclose(out, (np.asarray(x) * np.asarray(w)).sum(axis=1, keepdims=True) * 2, rtol=1e-5)
    assert out.sharding.spec[0] == "x"
    assert "all-gather" not in compiled_text(g, x, w)


def test_partitioned_triton_call_on_one_device_runs_whole(rng: np.random.Generator) -> None:
    x = rng.standard_normal((8, 16), dtype=np.float32)
    y = rng.standard_normal((8, 16), dtype=np.float32)
    f = jax.jit(jt.partitioned(jt.Elementwise())(add))
    np.testing.assert_allclose(f(x, y), x + y, rtol=1e-6)
    g = jax.jit(
        lambda a, b: jt.triton_call(
            a,
            b,
            n=a.size,
            kernel=sample_add_kernel,
            out_shape=a,
            grid=lambda meta: (triton.cdiv(meta["x_ptr"].size, 32),),
            BLOCK=32,
            partition=jt.Elementwise(),
        )
    )
    np.testing.assert_allclose(g(x, y), x + y, rtol=1e-6)


def test_elementwise_rule_keeps_any_sharding(mesh: Any, rng: np.random.Generator) -> None:
    @jt.partitioned(jt.Elementwise())
    def f(x: Any, y: Any) -> Any:
        return x * y + x.shape[1]

    sharding = NamedSharding(mesh, P(None, "x"))
    x = jax.device_put(rng.standard_normal((4, 8), dtype=np.float32), sharding)
    y = jax.device_put(rng.standard_normal((4, 8), dtype=np.float32), sharding)
    g = jax.jit(f)
    out = g(x, y)
    np.testing.assert_allclose(out, np.asarray(x) * np.asarray(y) + 2, rtol=1e-6, atol=1e-6)  # 2 local columns
    assert out.sharding.spec == P(None, "x")
    assert "all-gather" not in compiled_text(g, x, y)


def test_batch_dims_gathers_the_other_dimensions(mesh: Any, rng: np.random.Generator) -> None:
    @jt.partitioned(jt.BatchDims(0))
    def f(x: Any) -> Any:
        return x - jnp.mean(x, axis=1, keepdims=True)

    x = jax.device_put(rng.standard_normal((2, 8), dtype=np.float32), NamedSharding(mesh, P(None, "x")))
    g = jax.jit(f)
    out = g(x)
    xs = np.asarray(x)
    np.testing.assert_allclose(out, xs - xs.mean(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_partitioned_triton_call_runs_per_shard_with_the_ffi_launcher(mesh: Any, rng: np.random.Generator) -> None:
    sharding = NamedSharding(mesh, P("x"))
    x = jax.device_put(rng.standard_normal((8, 16), dtype=np.float32), sharding)
    y = jax.device_put(rng.standard_normal((8, 16), dtype=np.float32), sharding)
    decorated = jax.jit(jt.partitioned(jt.Elementwise())(functools.partial(add, launcher="ffi")))
    per_call = jax.jit(
        lambda a, b: jt.triton_call(
            a,
            b,
            n=a.size // mesh.size,  # the shard's size: scalars reach every shard unchanged
            kernel=sample_add_kernel,
            out_shape=a,
            grid=lambda meta: (triton.cdiv(meta["x_ptr"].size, 32),),
            BLOCK=32,
            partition=jt.Elementwise(),
            launcher="ffi",
        )
    )
    for f in (decorated, per_call):
        out = f(x, y)
        np.testing.assert_allclose(out, np.asarray(x) + np.asarray(y), rtol=1e-6)
        assert out.sharding.spec[0] == "x"
        text = compiled_text(f, x, y)
        assert "all-gather" not in text
        assert "triton_kernel_call_jt_cpu" in text and "f32[2,16]" in text  # each shard runs on its 2 rows


def add_with_global_size(a: Any, rule: Any) -> Any:
    return jt.triton_call(
        a,
        a,
        kernel=sample_add_kernel,
        out_shape=a,
        grid=lambda meta: (triton.cdiv(meta["n"], 64),),
        n=a.size,
        BLOCK=64,
        partition=rule,
    )


@pytest.mark.parametrize("rule", [jt.Elementwise(), jt.BatchDims(0)], ids=repr)
def test_partitioned_call_on_an_explicit_mesh_is_split_by_shard_map_and_serializes(
    rng: np.random.Generator, rule: Any
) -> None:
    # On an explicit mesh the rule splits the call with jax.shard_map: no gather, the operands' sharding kept, and
    # an export with no host callback in it (custom_partitioning's cannot be serialized).
    explicit = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))
    f = jax.jit(jt.partitioned(rule)(functools.partial(add, launcher="ffi")))
    values = rng.standard_normal((8, 16), dtype=np.float32)
    with jax.set_mesh(explicit):
        x = jax.device_put(values, NamedSharding(explicit, P("x")))
        y = jax.device_put(-2 * values, NamedSharding(explicit, P(None, "x")))  # resharded to the rows first
        out = f(x, y)
        np.testing.assert_allclose(out, -values, rtol=1e-6)
        assert out.sharding.spec[0] == "x"
        text = compiled_text(f, x, x)
        assert "all-gather" not in text and "f32[2,16]" in text  # each device runs its 2 rows
        spec = jax.ShapeDtypeStruct((8, 16), jnp.float32, sharding=NamedSharding(explicit, P("x")))
        exported = jax.export.export(jax.jit(jt.partitioned(rule)(add)), platforms=["cpu"])(spec, spec)
        # Host callbacks run inside shard_map: the interpreter, refused under custom_partitioning, runs per shard.
        interpreted = jax.jit(jt.partitioned(rule)(functools.partial(add, launcher="interpreter")))
        np.testing.assert_allclose(interpreted(x, x), 2 * values, rtol=1e-6)
        with pytest.raises(KernelCallValueError, match="scalar argument 'n' is 128, the global element count"):
            jax.jit(lambda a: add_with_global_size(a, rule))(x)
    restored = jax.export.deserialize(exported.serialize())
    np.testing.assert_allclose(restored.call(x, x), 2 * values, rtol=1e-6)
    auto = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    spec = jax.ShapeDtypeStruct((8, 16), jnp.float32, sharding=NamedSharding(auto, P("x")))
    with pytest.raises(NotImplementedError, match="host_callbacks"):  # what the explicit mesh avoids
        jax.export.export(jax.jit(jt.partitioned(rule)(add)), platforms=["cpu"])(spec, spec).serialize()


def test_partitioned_triton_call_through_host_callbacks_is_refused_clearly(mesh: Any, rng: np.random.Generator) -> None:
    x = jax.device_put(rng.standard_normal((8, 16), dtype=np.float32), NamedSharding(mesh, P("x")))
    f = jax.jit(jt.partitioned(jt.Elementwise())(functools.partial(add, launcher="interpreter")))
    with pytest.raises(Exception, match=r"cannot run on the CPU backend across several devices.*jax\.shard_map"):
        f(x, x)
    assert issubclass(UnsupportedKernelError, NotImplementedError)


class CallbackFfiLauncher(CpuFfiLauncher):
    """A plugin's CPU launcher that says the operation it lowers a call to runs through a JAX host callback."""

    name = "says-callback"
    priority = -1

    def runs_through_host_callback(self, call: Any) -> bool:
        return True


class CallbackLauncherPlugin:
    @jt.hookimpl
    def jt_register_launchers(self, platform: str | None) -> list[Any]:
        return [CallbackFfiLauncher()] if platform in (None, "cpu") else []


def test_a_launcher_that_says_it_runs_through_a_host_callback_is_refused_across_devices(
    mesh: Any, rng: np.random.Generator, jt_register_plugin: Any
) -> None:
    jt_register_plugin(CallbackLauncherPlugin())
    x = jax.device_put(rng.standard_normal((8, 16), dtype=np.float32), NamedSharding(mesh, P("x")))
    f = jax.jit(jt.partitioned(jt.Elementwise())(functools.partial(add, launcher="says-callback")))
    with pytest.raises(Exception, match=r"across several devices with launcher 'says-callback': it runs kernels th"):
        f(x, x)


def test_partitioned_triton_call_given_a_global_size_is_refused_naming_local_sizes(
    mesh: Any, rng: np.random.Generator
) -> None:
    # What the documentation once showed: the global x.size reaches every shard, whose kernel would read past its
    # piece (an out-of-bounds load on the CPU, silently wrong memory on a GPU).
    x = jax.device_put(rng.standard_normal(256, dtype=np.float32), NamedSharding(mesh, P("x")))
    f = jax.jit(
        lambda a, b: jt.triton_call(
            a,
            b,
            kernel=sample_add_kernel,
            out_shape=a,
            grid=lambda meta: (triton.cdiv(meta["n"], 64),),
            n=a.size,
            BLOCK=64,
            partition=jt.Elementwise(),
            launcher="ffi",
        )
    )
    with pytest.raises(Exception, match="KernelCallValueError") as caught:
        f(x, x)
    message = str(caught.value)
    assert "scalar argument 'n' is 256, the global element count of operand 0" in message, message
    assert "where that size is 64" in message and "@jt.partitioned" in message, message
    # Written inside @jt.partitioned, x.size is the shard's and the call runs.
    g = jax.jit(jt.partitioned(jt.Elementwise())(functools.partial(add, launcher="ffi")))
    np.testing.assert_allclose(g(x, x), 2 * np.asarray(x), rtol=1e-6)


@triton.autotune(configs=[triton.Config({"BLOCK": 8}), triton.Config({"BLOCK": 16})], key=["n"])
@triton.jit
def tied_kernel(x_ptr, out_ptr, used_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)
    if tl.program_id(0) == 0:
        tl.store(used_ptr, BLOCK)


@pytest.mark.parametrize("launcher", ["interpreter", "ffi"])
def test_devices_of_one_call_run_one_tuned_configuration(
    mesh: Any, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, launcher: str
) -> None:
    # Each choice made for the call picks another configuration, and waits a little for a second device to make one:
    # the devices of one call must wait for the first choice instead.
    choices: list[int] = []
    lock = threading.Lock()

    def choose(call: Any, device_name: str, trial: Any, none_usable: Any = None) -> int:
        with lock:
            choices.append(len(choices))
            mine = choices[-1]
        deadline = time.monotonic() + 1.0
        while len(choices) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        return mine % len(call.configs)

    monkeypatch.setenv("JT_CPU_AUTOTUNE", "1")
    monkeypatch.setattr(tuning, "choose_config", choose)

    def tuned(a: Any) -> Any:
        return jt.triton_call(
            a,
            n=a.size,
            kernel=tied_kernel,
            out_shape=(a, jax.ShapeDtypeStruct((1,), jnp.int32)),
            grid=lambda meta: (triton.cdiv(a.size, meta["BLOCK"]),),
            launcher=launcher,
        )

    x = jax.device_put(rng.standard_normal(4 * 32, dtype=np.float32), NamedSharding(mesh, P("x")))
    f = jax.jit(jax.shard_map(tuned, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P("x"))))
    out, used = f(x)
    np.testing.assert_allclose(out, np.asarray(x) + 1, rtol=1e-6)
    assert len(choices) == 1
    assert np.asarray(used).tolist() == [8, 8, 8, 8]


def test_partition_rule_shape_errors() -> None:
    f = jt.partitioned(jt.Elementwise())(lambda a, b: a + b)
    with pytest.raises(
        KernelCallValueError, match=r"Elementwise\(\) needs every array operand.*operand 1 has shape \(2,\)"
    ):
        jax.jit(f).trace(jnp.ones((4, 2)), jnp.ones((2,)))
    g = jt.partitioned(jt.BatchDims(0))(lambda a, b: a + b.sum())
    with pytest.raises(KernelCallValueError, match="batch dimension 0 has size 3 in operand 1"):
        jax.jit(g).trace(jnp.ones((4, 2)), jnp.ones((3, 1)))


def test_batch_dims_gives_operands_named_whole_to_every_shard(mesh: Any, rng: np.random.Generator) -> None:
    @jt.partitioned(jt.BatchDims(0, whole=(1,)))
    def scaled(x: Any, w: Any) -> Any:
        return x * w[None, :] + x.shape[0]

    x = jax.device_put(rng.standard_normal((8, 16), dtype=np.float32), NamedSharding(mesh, P("x")))
    w = jax.device_put(rng.standard_normal(16, dtype=np.float32), NamedSharding(mesh, P("x")))  # gathered whole
    out = jax.jit(scaled)(x, w)
    np.testing.assert_allclose(out, np.asarray(x) * np.asarray(w) + 2, rtol=1e-6)  # 2 local rows
    assert out.sharding.spec[0] == "x"
    assert repr(jt.BatchDims(0, whole=(1,))) == "BatchDims(0, whole=(1,))"
    with pytest.raises(KernelCallValueError, match=r"operand 1 has shape \(16,\), which has no dimension 1 \(name it"):
        jax.jit(jt.partitioned(jt.BatchDims(1))(lambda a, b: a)).trace(x, w)
    with pytest.raises(KernelCallValueError, match="names operand 2 whole, but the call has 2 array operands"):
        jax.jit(jt.partitioned(jt.BatchDims(0, whole=(2,)))(lambda a, b: a)).trace(x, w)
    with pytest.raises(KernelCallTypeError, match=r"whole=\.\.\.\) takes the positions of array operands"):
        jt.BatchDims(0, whole=1)  # type: ignore[arg-type]


def test_a_partitioned_function_closing_over_an_array_is_refused_naming_it(mesh: Any) -> None:
    weight = jnp.ones(16, jnp.float32)

    @jt.partitioned(jt.BatchDims(0))
    def scaled(x: Any) -> Any:
        return x * weight

    x = jax.device_put(np.ones((8, 16), np.float32), NamedSharding(mesh, P("x")))
    with pytest.raises(KernelCallValueError, match=r"'.*scaled' closes over 1 array\(s\) \(float32\[16\]\)"):
        jax.jit(scaled)(x)
    with pytest.raises(KernelCallValueError, match="pass them as arguments"):
        jax.jit(lambda a, w: jt.partitioned(jt.Elementwise())(lambda b: b * w)(a))(x, x)


def test_triton_call_partition_needs_a_callable_grid() -> None:
    x = jnp.ones(64, jnp.float32)
    with pytest.raises(KernelCallValueError, match="partition= needs grid= as a callable"):
        jt.triton_call(
            x, x, n=64, kernel=sample_add_kernel, out_shape=x, grid=(2,), BLOCK=32, partition=jt.Elementwise()
        )
