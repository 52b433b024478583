"""The plugin manager: loading, isolation of broken plugins, environment variables, registries."""

from __future__ import annotations

import threading
import types
import warnings
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jt_core as jt
from jt_core import hookimpl
from jt_core.errors import DuplicateBackendError, NoBackendError, PluginLoadError
from jt_core.plugin.records import BLOCKED, BUILTIN, FAILED, LOADED
from jt_core.plugin.registry import Registry
from jt_core.plugin.roles import Backend, CompileRequest, Launcher
from jt_core.plugin.values import CompiledKernel, Target
from jt_core.testing import fake_entry_point, sample_add_kernel
from jt_core.testing.fixtures import make_registry


class FakeBackend(Backend):
    platform = "fakeplat"

    def target(self) -> Target:
        return Target("fakeplat", "fake1", 16)

    def compile(self, request: CompileRequest) -> CompiledKernel:
        return CompiledKernel(name=request.call.name, target=request.target, binary=b"fake")


class FakeLauncher(Launcher):
    platform = "fakeplat"
    name = "fast"
    priority = 10

    def lower(
        self, ctx: Any, call: Any, kernels: Sequence[CompiledKernel], operands: Sequence[Any], device: Any
    ) -> Any:
        raise AssertionError("not lowered in these tests")


class SlowLauncher(FakeLauncher):
    name = "slow"
    priority = 1


class BrokenLauncher(FakeLauncher):
    name = "broken"
    priority = 100

    def unavailable_reason(self) -> str | None:
        return "the driver library is missing"


class GoodPlugin:
    @hookimpl
    def jt_register_backends(self) -> list[Backend]:
        return [FakeBackend()]

    @hookimpl
    def jt_register_launchers(self) -> list[Launcher]:
        return [SlowLauncher(), FakeLauncher(), BrokenLauncher()]


class RaisingPlugin:
    @hookimpl
    def jt_register_backends(self) -> list[Backend]:
        raise RuntimeError("boom while registering")


class UnknownHookPlugin:
    @hookimpl
    def jt_register_backends(self) -> list[Backend]:
        return []

    @hookimpl
    def jt_frobnicate_kernels(self) -> None:
        return None


def _manager(eps: list[Any], **environ: str) -> Registry:
    return make_registry(eps, environ)


def _add(x: jax.Array, y: jax.Array) -> jax.Array:
    return jt.triton_call(x, y, kernel=sample_add_kernel, out_shape=x, grid=2, n=x.size, BLOCK=32)


def test_builtin_plugins_provide_the_cpu_backend_and_triton_dialect() -> None:
    records = {r.name: r for r in _manager([]).list_plugins()}
    assert records["cpu"].status == BUILTIN
    assert records["cpu"].platforms == ["cpu"]
    assert records["cpu"].launchers == ["cpu:compiled", "cpu:interpreter", "cpu:ffi"]
    assert records["triton"].dialects == ["triton"]


def test_good_plugin_registers_backend_and_launchers() -> None:
    pm = _manager([fake_entry_point("good", GoodPlugin(), distribution="good-dist", version="1.2")])
    record = {r.name: r for r in pm.list_plugins()}["good"]
    assert (record.status, record.distribution, record.version) == (LOADED, "good-dist", "1.2")
    assert record.platforms == ["fakeplat"]
    assert isinstance(pm.backend("fakeplat"), FakeBackend)


def test_plugin_that_fails_to_import_is_recorded_and_others_still_load() -> None:
    eps = [
        fake_entry_point("broken", ImportError("No module named 'missing_dep'"), distribution="broken-dist"),
        fake_entry_point("good", GoodPlugin()),
    ]
    pm = _manager(eps)
    with pytest.warns(RuntimeWarning, match="broken.*failed to import.*missing_dep.*JT_DISABLE_PLUGINS=broken"):
        records = {r.name: r for r in pm.list_plugins()}
    assert records["broken"].status == FAILED
    assert "missing_dep" in records["broken"].error
    assert records["good"].status == LOADED
    assert isinstance(pm.backend("cpu"), Backend)


def test_broken_plugin_is_warned_about_once() -> None:
    pm = _manager([fake_entry_point("broken", ImportError("nope"))])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pm.ensure_loaded()
        pm.ensure_loaded()
        pm.list_plugins()
    assert len([w for w in caught if "broken" in str(w.message)]) == 1


def test_launcher_of_a_plugin_that_failed_to_load_names_the_failure() -> None:
    pm = _manager(
        [fake_entry_point("fastcpu", ImportError("No module named 'fastcpu_ext'"), distribution="jt-fastcpu")]
    )
    with pytest.warns(RuntimeWarning):
        pm.ensure_loaded()
    with pytest.raises(NoBackendError) as info:
        pm.launcher("cpu", "fast")
    message = str(info.value)
    assert (
        "launcher= names launcher 'fast', but platform 'cpu' has launchers ['compiled', 'ffi', 'interpreter']"
        in message
    )
    assert "'fastcpu' (jt-fastcpu 0.0.0) failed" in message and "fastcpu_ext" in message
    assert "python -m jt_core plugins" in message


def test_unknown_launcher_with_every_plugin_loaded_lists_the_launchers_only() -> None:
    with pytest.raises(NoBackendError) as info:
        _manager([]).launcher("cpu", "fast")
    assert (
        str(info.value)
        == "launcher= names launcher 'fast', but platform 'cpu' has launchers ['compiled', 'ffi', 'interpreter']"
    )


def test_broken_plugin_is_named_in_no_backend_error() -> None:
    pm = _manager([fake_entry_point("cudaish", ImportError("libcuda.so.1: cannot open"), distribution="jt-cudaish")])
    with pytest.warns(RuntimeWarning):
        pm.ensure_loaded()
    with pytest.raises(NoBackendError) as info:
        pm.backend("cuda")
    message = str(info.value)
    assert "no jt backend for platform 'cuda'" in message
    assert "pip install jt-cuda" in message
    assert "cudaish (jt-cudaish 0.0.0): failed" in message
    assert "libcuda.so.1" in message
    assert "cpu (jt-core" in message and "platforms ['cpu']" in message


def test_plugin_raising_in_a_hook_is_isolated() -> None:
    pm = _manager([fake_entry_point("raiser", RaisingPlugin()), fake_entry_point("good", GoodPlugin())])
    with pytest.warns(RuntimeWarning, match="raiser.*raised in jt_register_backends.*boom"):
        records = {r.name: r for r in pm.list_plugins()}
    assert records["raiser"].status == FAILED
    assert records["good"].platforms == ["fakeplat"]


def test_plugin_with_hook_that_has_no_spec_is_refused() -> None:
    pm = _manager([fake_entry_point("odd", UnknownHookPlugin())])
    with pytest.warns(RuntimeWarning, match="hooks that have no spec: jt_frobnicate_kernels"):
        record = {r.name: r for r in pm.list_plugins()}["odd"]
    assert record.status == FAILED


class MisspelledHookPlugin:
    @hookimpl
    def jt_register_launcher(self) -> list[Launcher]:
        return [FakeLauncher()]


def test_a_misspelled_hook_name_is_named_with_the_hook_it_misspells() -> None:
    pm = _manager([fake_entry_point("typo", MisspelledHookPlugin(), distribution="typo-dist", version="1.2")])
    with pytest.warns(RuntimeWarning) as caught:
        record = {r.name: r for r in pm.list_plugins()}["typo"]
    assert record.status == FAILED and pm.launchers_for("fakeplat") == []
    (message,) = [str(w.message) for w in caught if "typo" in str(w.message)]
    assert message.startswith("jt plugin 'typo' from typo-dist 1.2 implements hooks that have no spec: ")
    assert "jt_register_launcher (did you mean jt_register_launchers?)" in message
    assert "Correct the name in the plugin" in message and "JT_DISABLE_PLUGINS=typo" in message
    assert record.error is not None and "did you mean jt_register_launchers?" in record.error
    strict = _manager([fake_entry_point("typo", MisspelledHookPlugin())], JT_STRICT_PLUGINS="1")
    with pytest.raises(PluginLoadError, match=r"'typo'.*jt_register_launcher \(did you mean jt_register_launchers\?\)"):
        strict.ensure_loaded()


class UndecoratedHookPlugin:
    @hookimpl
    def jt_register_backends(self) -> list[Backend]:
        return [FakeBackend()]

    def jt_register_launchers(self) -> list[Launcher]:  # no @hookimpl: pluggy alone would never call it
        return [FakeLauncher()]


def test_a_hook_function_without_the_decorator_is_named_with_the_fix() -> None:
    pm = _manager([fake_entry_point("bare", UndecoratedHookPlugin(), distribution="bare-dist", version="2.0")])
    with pytest.warns(RuntimeWarning) as caught:
        record = {r.name: r for r in pm.list_plugins()}["bare"]
    assert record.status == FAILED and pm.launchers_for("fakeplat") == [] and "fakeplat" not in pm.backends
    (message,) = [str(w.message) for w in caught if "'bare'" in str(w.message)]
    function = f"{__name__}.UndecoratedHookPlugin.jt_register_launchers"
    assert message == (
        f"jt plugin 'bare' from bare-dist 2.0 defines the hook function {function} without the @hookimpl "
        "decorator, so jt would never call it. Decorate it with jt_core.plugin.hookimpl (`from jt_core.plugin "
        "import hookimpl`, then `@hookimpl` above the def); set JT_DISABLE_PLUGINS=bare to skip the plugin."
    )
    assert record.error is not None and record.error == message.removeprefix("jt plugin 'bare' from bare-dist 2.0 ")
    strict = _manager([fake_entry_point("bare", UndecoratedHookPlugin())], JT_STRICT_PLUGINS="1")
    with pytest.raises(PluginLoadError, match=r"'bare'.*jt_register_launchers without the @hookimpl decorator"):
        strict.ensure_loaded()


def test_every_undecorated_hook_function_of_a_module_is_named() -> None:
    module = types.ModuleType("jt_bare_plugin")

    def jt_register_backends() -> list[Backend]:
        return [FakeBackend()]

    def jt_register_dialects() -> list[Any]:
        return []

    def jt_register_helper() -> None:  # named like no hook: a helper, left alone
        return None

    for function in (jt_register_backends, jt_register_dialects, jt_register_helper):
        function.__module__ = module.__name__
        function.__qualname__ = function.__name__
        setattr(module, function.__name__, function)
    pm = _manager([fake_entry_point("bare", module)])
    with pytest.warns(RuntimeWarning, match="'bare'") as caught:
        record = {r.name: r for r in pm.list_plugins()}["bare"]
    assert record.status == FAILED
    assert record.error is not None and record.error.startswith(
        "defines the hook functions jt_bare_plugin.jt_register_backends, jt_bare_plugin.jt_register_dialects "
        "without the @hookimpl decorator, so jt would never call them. Decorate each with jt_core.plugin.hookimpl"
    ), record.error
    assert "jt_register_helper" not in record.error
    assert len([w for w in caught if "'bare'" in str(w.message)]) == 1


def test_a_hook_name_like_no_spec_gets_no_suggestion() -> None:
    pm = _manager([fake_entry_point("odd", UnknownHookPlugin())])
    with pytest.warns(RuntimeWarning, match="no spec: jt_frobnicate_kernels. It needs a newer jt-core"):
        record = {r.name: r for r in pm.list_plugins()}["odd"]
    assert record.error is not None and "did you mean" not in record.error


def test_duplicate_entry_point_names_keep_the_first() -> None:
    eps = [
        fake_entry_point("dup", GoodPlugin(), distribution="first-dist"),
        fake_entry_point("dup", GoodPlugin(), distribution="second-dist"),
    ]
    pm = _manager(eps)
    with pytest.warns(RuntimeWarning, match="declared by both first-dist and second-dist"):
        records = pm.list_plugins()
    statuses = {(r.name, r.distribution): r.status for r in records}
    assert statuses[("dup", "first-dist")] == LOADED
    assert statuses[("dup", "second-dist")] == FAILED


def test_two_backends_for_one_platform_is_an_error_naming_both() -> None:
    pm = _manager(
        [fake_entry_point("one", GoodPlugin(), distribution="one-dist"), fake_entry_point("two", GoodPlugin())]
    )
    with pytest.raises(DuplicateBackendError) as info:
        pm.backend("fakeplat")
    message = str(info.value)
    assert "'one' (one-dist)" in message and "'two' (fake-dist)" in message
    assert "JT_DISABLE_PLUGINS=two" in message
    assert isinstance(pm.backend("cpu"), Backend)


def test_jt_load_plugins_empty_loads_none_but_builtins() -> None:
    pm = _manager([fake_entry_point("good", GoodPlugin())], JT_LOAD_PLUGINS="")
    record = {r.name: r for r in pm.list_plugins()}["good"]
    assert record.status == BLOCKED and "JT_LOAD_PLUGINS" in record.error
    assert isinstance(pm.backend("cpu"), Backend)
    with pytest.raises(NoBackendError):
        pm.backend("fakeplat")


def test_jt_load_plugins_list_loads_only_those() -> None:
    eps = [fake_entry_point("good", GoodPlugin()), fake_entry_point("other", ImportError("never imported"))]
    pm = _manager(eps, JT_LOAD_PLUGINS="good, somethingelse")
    with pytest.warns(RuntimeWarning, match="JT_LOAD_PLUGINS names a plugin that no installed .*: 'somethingelse';"):
        records = {r.name: r for r in pm.list_plugins()}
    assert records["good"].status == LOADED
    assert records["other"].status == BLOCKED


def test_jt_disable_plugins_blocks_named_plugins() -> None:
    eps = [fake_entry_point("good", GoodPlugin()), fake_entry_point("bad", ImportError("x"))]
    pm = _manager(eps, JT_DISABLE_PLUGINS="bad")
    records = {r.name: r for r in pm.list_plugins()}
    assert records["bad"].status == BLOCKED and "JT_DISABLE_PLUGINS" in records["bad"].error
    assert records["good"].status == LOADED


def test_jt_strict_plugins_raises_on_a_broken_plugin() -> None:
    pm = _manager([fake_entry_point("broken", ImportError("missing_dep"))], JT_STRICT_PLUGINS="1")
    with pytest.raises(PluginLoadError, match=r"broken.*missing_dep"):
        pm.ensure_loaded()


def test_jt_strict_plugins_raises_on_duplicate_platform() -> None:
    pm = _manager([fake_entry_point("a", GoodPlugin()), fake_entry_point("b", GoodPlugin())], JT_STRICT_PLUGINS="1")
    with pytest.raises(DuplicateBackendError):
        pm.ensure_loaded()


def test_jt_trace_plugins_traces_loading_and_hook_calls(capsys: pytest.CaptureFixture[str]) -> None:
    pm = _manager([fake_entry_point("good", GoodPlugin(), distribution="good-dist")], JT_TRACE_PLUGINS="1")
    pm.ensure_loaded()
    err = capsys.readouterr().err
    assert "[jt-plugins] good: loaded from good-dist" in err
    # Registration hooks are hook calls like any other: traced with their results.
    assert "jt_register_backends" in err and "FakeBackend" in err
    assert "jt_register_launchers" in err and "SlowLauncher" in err


def test_launcher_chosen_by_priority_skipping_unavailable() -> None:
    pm = _manager([fake_entry_point("good", GoodPlugin())])
    assert pm.launcher("fakeplat").name == "fast"


def test_launcher_override_by_argument_and_environment() -> None:
    pm = _manager([fake_entry_point("good", GoodPlugin())], JT_LAUNCHER_FAKEPLAT="slow")
    assert pm.launcher("fakeplat").name == "slow"
    assert pm.launcher("fakeplat", "fast").name == "fast"


def test_unknown_or_unavailable_launcher_name_is_explained() -> None:
    pm = _manager([fake_entry_point("good", GoodPlugin())])
    with pytest.raises(NoBackendError, match=r"launcher= names launcher 'nope'.*\['broken', 'fast', 'slow'\]"):
        pm.launcher("fakeplat", "nope")
    with pytest.raises(NoBackendError, match=r"'broken'.*unavailable: the driver library is missing"):
        pm.launcher("fakeplat", "broken")


def test_loading_is_thread_safe_and_happens_once() -> None:
    calls = []

    class Counting:
        @hookimpl
        def jt_register_backends(self) -> list[Backend]:
            calls.append(threading.get_ident())
            return []

    pm = _manager([fake_entry_point("counting", Counting())])
    barrier = threading.Barrier(8)

    def load() -> None:
        barrier.wait()
        pm.ensure_loaded()

    threads = [threading.Thread(target=load) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1


def test_triton_call_on_cpu_works_beside_a_broken_plugin(jt_fake_entry_points: Any) -> None:
    manager = jt_fake_entry_points(
        [fake_entry_point("broken", ImportError("missing_dep"))], environ={}, include_installed=True
    )
    with pytest.warns(RuntimeWarning, match="broken"):
        manager.ensure_loaded()
    x = jnp.asarray(np.random.default_rng(0).standard_normal(64), jnp.float32)
    y = jnp.asarray(np.random.default_rng(1).standard_normal(64), jnp.float32)
    np.testing.assert_allclose(jax.jit(_add)(x, y), np.asarray(x) + np.asarray(y), rtol=1e-6)
    assert {r.name: r.status for r in jt.list_plugins()}["broken"] == FAILED


def test_empty_load_list_keeps_the_embedded_cpu_backend(jt_fake_entry_points: Any) -> None:
    jt_fake_entry_points([], environ={"JT_LOAD_PLUGINS": ""}, include_installed=True)
    x = jnp.arange(64, dtype=jnp.float32)
    np.testing.assert_array_equal(jax.jit(_add)(x, x), 2 * np.arange(64, dtype=np.float32))
    statuses = {r.name: r.status for r in jt.list_plugins()}
    assert statuses["cpu"] == BUILTIN
    assert all(status in (BUILTIN, BLOCKED) for status in statuses.values())


def test_lowering_for_a_platform_without_backend_lists_plugins(jt_fake_entry_points: Any) -> None:
    jt_fake_entry_points([fake_entry_point("broken", ImportError("libhip missing"))], environ={})
    x = jax.ShapeDtypeStruct((64,), jnp.float32)
    with pytest.warns(RuntimeWarning), pytest.raises(NoBackendError) as info:
        jax.jit(_add).trace(x, x).lower(lowering_platforms=("rocm",))
    assert "no jt backend for platform 'rocm'" in str(info.value)
    assert "libhip missing" in str(info.value)


def test_a_call_every_launcher_refuses_is_an_error_naming_their_reasons(
    monkeypatch: pytest.MonkeyPatch, jt_fake_entry_points: Any
) -> None:
    jt_fake_entry_points([])  # jt-core's own launchers only: an installed plugin may add a CPU launcher
    from jt_core.cpu.compiled.launcher import CpuCompiledLauncher
    from jt_core.cpu.ffi_launcher import CpuFfiLauncher
    from jt_core.cpu.interpreter_launcher import CpuLauncher

    monkeypatch.setattr(CpuCompiledLauncher, "fallback_reason", lambda self, call, kernels, device: "no xla today")
    monkeypatch.setattr(CpuFfiLauncher, "fallback_reason", lambda self, call, kernels, device: "no ffi today")
    monkeypatch.setattr(CpuLauncher, "fallback_reason", lambda self, call, kernels, device: "no callbacks today")
    x = jnp.arange(64, dtype=jnp.float32)
    with pytest.raises(jt.UnsupportedKernelError, match=r"no launcher for platform 'cpu' can express it") as info:
        jax.jit(lambda x: _add(x, x) + 2)(x)
    assert "'compiled': no xla today" in str(info.value) and "'ffi': no ffi today" in str(info.value)
    assert "'interpreter': no callbacks today" in str(info.value)


class PlatformAware:
    """A plugin serving 'fakeplat', asked for platforms it notes down."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str | None]] = []

    @hookimpl
    def jt_register_backends(self, platform: str | None) -> list[Backend]:
        self.asked.append(("backends", platform))
        return [FakeBackend()] if platform in (None, "fakeplat") else []

    @hookimpl
    def jt_register_launchers(self, platform: str | None) -> list[Launcher]:
        self.asked.append(("launchers", platform))
        return [FakeLauncher()] if platform in (None, "fakeplat") else []


def test_registration_hooks_are_asked_for_the_platform_a_call_needs(jt_fake_entry_points: Any) -> None:
    aware, counting = PlatformAware(), []

    class Unaware:
        @hookimpl
        def jt_register_backends(self) -> list[Backend]:
            counting.append("backends")
            return []

    registry = jt_fake_entry_points(
        [fake_entry_point("aware", aware), fake_entry_point("unaware", Unaware())], include_installed=True
    )
    x = jnp.asarray(np.random.default_rng().standard_normal(64), jnp.float32)
    np.testing.assert_allclose(jax.jit(lambda a: _add(a, a))(x), 2 * np.asarray(x), rtol=1e-6)  # lowered anew
    assert aware.asked == [("backends", "cpu"), ("launchers", "cpu")]
    assert "fakeplat" not in registry.backends
    assert isinstance(registry.backend("fakeplat"), FakeBackend)
    assert aware.asked[2:] == [("backends", "fakeplat"), ("launchers", "fakeplat")]
    records = {r.name: r for r in registry.list_plugins()}  # every registration: asked for all platforms
    assert aware.asked[4:] == [("backends", None), ("launchers", None)]
    assert records["aware"].platforms == ["fakeplat"] and records["aware"].launchers == ["fakeplat:fast"]
    assert counting == ["backends"], "a hook that takes no platform is asked once"
    assert [name for name, _ in registry.launchers["fakeplat"]] == ["aware"]
