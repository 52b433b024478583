"""Plugin faults: a load that fails or is interrupted leaves nothing behind and is retried; a plugin that raises
while serving calls is recorded and set aside, and only the calls that need it fail."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import types
import warnings
from collections.abc import Generator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core import hookimpl
from jt_core.cpu.interpreter_launcher import CpuLauncher
from jt_core.plugin.records import BUILTIN, FAILED, FAULTED, LOADED
from jt_core.plugin.registry import Registry
from jt_core.plugin.roles import Backend, Launcher
from jt_core.plugin.values import CompiledKernel
from jt_core.testing import custom_calls, fake_entry_point, sample_add_kernel
from jt_core.testing.fixtures import make_registry
from jt_core.triton_dialect import TritonDialect


def _operands(size: int = 64) -> tuple[jax.Array, jax.Array]:
    rng = np.random.default_rng()
    return (
        jnp.asarray(rng.standard_normal(size), jnp.float32),
        jnp.asarray(rng.standard_normal(size), jnp.float32),
    )


def _add(x: jax.Array, y: jax.Array, **options: Any) -> jax.Array:
    return jt.triton_call(x, y, kernel=sample_add_kernel, out_shape=x, grid=2, n=x.size, BLOCK=32, **options)


def _check_add(fn: Any = _add, **options: Any) -> None:
    x, y = _operands()
    out = jax.jit(lambda a, b: fn(a, b, **options))(x, y)
    np.testing.assert_allclose(np.asarray(out), np.asarray(x) + np.asarray(y), rtol=1e-6)


def _records() -> dict[str, Any]:
    return {record.name: record for record in jt.list_plugins()}


class Counting:
    """A plugin that registers nothing and counts its registrations."""

    def __init__(self) -> None:
        self.registrations = 0

    @hookimpl
    def jt_register_backends(self) -> list[Backend]:
        self.registrations += 1
        return []


# -- loading is a transaction --------------------------------------------------------------------------------


def test_interrupted_import_propagates_and_the_next_call_loads_cleanly(jt_fake_entry_points: Any) -> None:
    counting = Counting()
    registry = jt_fake_entry_points(
        [fake_entry_point("slow", counting, first_load=KeyboardInterrupt()), fake_entry_point("other", Counting())],
        include_installed=True,
    )
    with pytest.raises(KeyboardInterrupt):
        _check_add()
    assert registry.loader.pm.list_name_plugin() == [], "an interrupted load leaves nothing registered"
    assert registry.records == {}
    _check_add()
    records = _records()
    assert records["slow"].status == LOADED and records["other"].status == LOADED
    assert records["core"].status == BUILTIN
    assert counting.registrations == 1


def test_interrupt_inside_a_registration_hook_is_retried_cleanly(jt_fake_entry_points: Any) -> None:
    class InterruptedOnce:
        calls = 0

        @hookimpl
        def jt_register_launchers(self) -> list[Launcher]:
            InterruptedOnce.calls += 1
            if InterruptedOnce.calls == 1:
                raise KeyboardInterrupt
            return []

    registry = jt_fake_entry_points([fake_entry_point("once", InterruptedOnce())], include_installed=True)
    with pytest.raises(KeyboardInterrupt):
        registry.backend("cpu")
    assert registry.backends == {} and registry.launchers == {} and registry.dialects == []
    _check_add()
    records = _records()
    assert records["cpu"].platforms == ["cpu"], "registrations are collected once, not once per attempt"
    assert records["cpu"].launchers == ["cpu:compiled", "cpu:interpreter", "cpu:ffi"]
    assert records["once"].status == LOADED


def test_sys_exit_in_a_plugin_import_is_a_broken_plugin(jt_fake_entry_points: Any) -> None:
    jt_fake_entry_points([fake_entry_point("quitter", SystemExit(3), distribution="quitter-dist")], {}, True)
    with pytest.warns(RuntimeWarning, match=r"'quitter' from quitter-dist 0\.0\.0 called sys\.exit\(3\)"):
        _check_add()
    record = _records()["quitter"]
    assert record.status == FAILED
    assert "sys.exit(3)" in record.error and "JT_DISABLE_PLUGINS=quitter" in record.error


def test_sys_exit_in_a_registration_hook_is_a_broken_plugin(jt_fake_entry_points: Any) -> None:
    class Quitting:
        @hookimpl
        def jt_register_backends(self) -> list[Backend]:
            sys.exit("no backends today")

    jt_fake_entry_points([fake_entry_point("quitting", Quitting())], {}, True)
    with pytest.warns(RuntimeWarning, match=r"'quitting'.*raised in jt_register_backends: SystemExit"):
        _check_add()
    assert _records()["quitting"].status == FAILED


def test_strict_mode_failure_raises_again_on_retry(jt_fake_entry_points: Any) -> None:
    registry = jt_fake_entry_points(
        [fake_entry_point("broken", ImportError("missing_dep"))], {"JT_STRICT_PLUGINS": "1"}, True
    )
    for _ in range(2):
        with pytest.raises(jt.PluginLoadError, match="missing_dep"):
            registry.ensure_loaded()
    assert registry.loader.pm.list_name_plugin() == []


def test_strict_mode_duplicate_platform_raises_again_on_retry() -> None:
    class CpuAgain:
        @hookimpl
        def jt_register_backends(self) -> list[Backend]:
            from jt_core.cpu.backend import CpuBackend

            return [CpuBackend()]

    registry = make_registry([fake_entry_point("again", CpuAgain())], {"JT_STRICT_PLUGINS": "1"})
    for _ in range(2):
        with pytest.raises(jt.DuplicateBackendError) as info:
            registry.ensure_loaded()
        assert "platform 'cpu': 'cpu' (jt-core), 'again' (fake-dist). Keep one" in str(info.value)


def test_ctrl_c_during_the_first_lowering_leaves_the_process_usable(tmp_path: pathlib.Path) -> None:
    """A real SIGINT while a plugin is imported, in a fresh process: the interrupt reaches the program, and the
    next call loads the plugins and computes."""
    site = tmp_path / "site"
    (site / "jt_sigint_example").mkdir(parents=True)
    (site / "jt_sigint_example" / "__init__.py").write_text("")
    (site / "jt_sigint_example" / "plugin.py").write_text(
        textwrap.dedent(
            """
            import os, pathlib, signal, time
            JT_PLUGIN_API = 1
            marker = pathlib.Path(os.environ["JT_SIGINT_MARKER"])
            if not marker.exists():
                marker.write_text("interrupted")
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)  # the interrupt arrives here
            """
        )
    )
    _dist_info(site, "jt-sigint-example", "sigint = jt_sigint_example.plugin")
    # Python turns SIGINT into KeyboardInterrupt only where it starts with the signal's default action; a process
    # started with SIGINT ignored (a background job of a non-interactive shell, as CI may run the suite) keeps
    # ignoring it. The script asks for Python's handler, as an interactive program has it.
    script = textwrap.dedent(
        """
        import signal
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import jax, jax.numpy as jnp, numpy as np, jt_core as jt
        from jt_core.testing import sample_add_kernel
        x = jnp.asarray(np.random.default_rng().standard_normal(64), jnp.float32)
        f = jax.jit(lambda a: jt.triton_call(a, a, kernel=sample_add_kernel, out_shape=a, grid=2, n=64, BLOCK=32))
        try:
            f(x)
        except KeyboardInterrupt:
            print("interrupted")
        np.testing.assert_allclose(np.asarray(f(x)), 2 * np.asarray(x), rtol=1e-6)
        print({r.name: r.status for r in jt.list_plugins()}["sigint"])
        """
    )
    env = _env(site, JT_SIGINT_MARKER=str(tmp_path / "marker"))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["interrupted", "loaded"]


# -- faults at call time -------------------------------------------------------------------------------------


class FaultyLauncher(CpuLauncher):
    """A CPU launcher, preferred over the builtin ones, that emits its op and then raises."""

    name = "faulty"
    priority = 100

    def lower(
        self, ctx: Any, call: Any, kernels: Sequence[CompiledKernel], operands: Sequence[Any], device: Any
    ) -> Any:
        super().lower(ctx, call, kernels, operands, device)
        raise RuntimeError("faulty lower")


class UnsureLauncher(CpuLauncher):
    """A CPU launcher whose availability check raises."""

    name = "unsure"
    priority = 100

    def unavailable_reason(self) -> str | None:
        raise OSError("libunsure.so: cannot open shared object file")


class RefusingLauncher(CpuLauncher):
    """A CPU launcher whose fallback_reason raises."""

    name = "refusing"
    priority = 100

    def fallback_reason(self, call: Any, kernels: Any, device: Any) -> str | None:
        raise ZeroDivisionError("division by zero")


def _launcher_plugin(*launchers: Launcher) -> Any:
    class LauncherPlugin:
        @hookimpl
        def jt_register_launchers(self) -> list[Launcher]:
            return list(launchers)

    return LauncherPlugin()


def _with_plugin(jt_fake_entry_points: Any, name: str, plugin: Any, **environ: str) -> Registry:
    registry: Registry = jt_fake_entry_points(
        [fake_entry_point(name, plugin, distribution=f"jt-{name}", version="1.0")], environ, True
    )
    return registry


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault records go to the cache folder: keep this file's out of the user's."""
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.usefixtures("jt_cpu_paths_by_name")  # the race check's path and the comparison add custom calls
def test_a_launcher_whose_lower_raises_is_set_aside_and_the_call_goes_on(jt_fake_entry_points: Any) -> None:
    _with_plugin(jt_fake_entry_points, "faulty", _launcher_plugin(FaultyLauncher()))
    x, y = _operands()
    with pytest.warns(RuntimeWarning, match=r"'faulty' \(jt-faulty 1\.0\) raised in launcher 'cpu:faulty' lower\(\)"):
        lowered = jax.jit(_add).trace(x, y).lower()
    targets = [str(op.attributes["call_target_name"]) for op in custom_calls(lowered)]
    # The next launcher, the compiled path, proves every access of the sample inside its buffers: no check.
    assert targets == [], f"the op the faulty launcher emitted before raising is removed: {targets}"
    np.testing.assert_allclose(np.asarray(lowered.compile()(x, y)), np.asarray(x) + np.asarray(y), rtol=1e-6)
    record = _records()["faulty"]
    assert record.status == FAULTED
    (fault,) = record.faults
    assert fault.where == "launcher 'cpu:faulty' lower()"
    assert fault.error == "RuntimeError: faulty lower"
    assert "Traceback (most recent call last)" in fault.traceback and 'raise RuntimeError("faulty lower")' in (
        fault.traceback
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _check_add(lambda a, b: _add(a, b) * 1)  # set aside: not tried again, not warned again
    assert len(_records()["faulty"].faults) == 1


def test_a_launcher_whose_availability_check_raises_is_skipped(jt_fake_entry_points: Any) -> None:
    _with_plugin(jt_fake_entry_points, "unsure", _launcher_plugin(UnsureLauncher()))
    with pytest.warns(RuntimeWarning, match=r"launcher 'cpu:unsure' unavailable_reason\(\): OSError: libunsure"):
        _check_add()
    (fault,) = _records()["unsure"].faults
    assert fault.where == "launcher 'cpu:unsure' unavailable_reason()"


def test_a_launcher_whose_fallback_reason_raises_is_skipped(jt_fake_entry_points: Any) -> None:
    _with_plugin(jt_fake_entry_points, "refusing", _launcher_plugin(RefusingLauncher()))
    with pytest.warns(RuntimeWarning, match=r"fallback_reason\(\): ZeroDivisionError"):
        _check_add()
    assert _records()["refusing"].status == FAULTED


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_a_call_that_needs_the_faulty_launcher_fails_naming_the_plugin(jt_fake_entry_points: Any, how: str) -> None:
    environ = {"JT_LAUNCHER_CPU": "faulty"} if how == "environment" else {}
    _with_plugin(jt_fake_entry_points, "faulty", _launcher_plugin(FaultyLauncher()), **environ)
    options = {"launcher": "faulty"} if how == "argument" else {}
    for _ in range(2):  # the first call meets the fault, the second the launcher set aside
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(jt.PluginFaultError) as info:
                _check_add(**options)
        message = str(info.value)
        assert "launcher 'cpu:faulty' of jt plugin 'faulty' (jt-faulty 1.0)" in message
        assert "lower() raised RuntimeError: faulty lower" in message
        assert "JT_DISABLE_PLUGINS=faulty" in message
        assert "python -m jt_core plugins" in message


def test_a_call_that_needs_a_launcher_whose_availability_check_raises_fails(jt_fake_entry_points: Any) -> None:
    _with_plugin(jt_fake_entry_points, "unsure", _launcher_plugin(UnsureLauncher()))
    with pytest.raises(jt.PluginFaultError, match=r"launcher 'cpu:unsure' of jt plugin 'unsure'.*OSError"):
        _check_add(launcher="unsure")


def test_a_compile_hook_that_raises_is_set_aside(jt_fake_entry_points: Any) -> None:
    class BrokenCache:
        @hookimpl(tryfirst=True)
        def jt_compile_kernel(self, request: Any) -> CompiledKernel | None:
            raise KeyError("cache index")

    _with_plugin(jt_fake_entry_points, "cache", BrokenCache())
    with pytest.warns(RuntimeWarning, match=r"'cache' \(jt-cache 1\.0\) raised in jt_compile_kernel: KeyError"):
        _check_add()
    (fault,) = _records()["cache"].faults
    assert fault.where == "jt_compile_kernel" and "cache index" in fault.traceback


def test_a_compile_observer_that_raises_after_the_compile_is_set_aside(jt_fake_entry_points: Any) -> None:
    class BrokenTimer:
        @hookimpl(wrapper=True)
        def jt_compile_kernel(self, request: Any) -> Generator[None, Any, Any]:
            compiled = yield
            raise ValueError(f"cannot time {compiled.name}")

    _with_plugin(jt_fake_entry_points, "timer", BrokenTimer())
    with pytest.warns(RuntimeWarning, match=r"'timer'.*jt_compile_kernel: ValueError: cannot time"):
        _check_add()
    assert _records()["timer"].status == FAULTED


def test_a_compile_error_of_the_kernel_is_not_blamed_on_an_observer(jt_fake_entry_points: Any) -> None:
    seen = []

    class Observer:
        @hookimpl(wrapper=True)
        def jt_compile_kernel(self, request: Any) -> Generator[None, Any, Any]:
            seen.append(request.call.name)
            return (yield)

    @triton.jit
    def bad_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        tl.store(out_ptr + tl.arange(0, BLOCK), tl.load(x_ptr + tl.arange(0, BLOCK)) + undefined_name)  # noqa: F821

    _with_plugin(jt_fake_entry_points, "observer", Observer())
    x, y = _operands()
    with pytest.raises(jt.KernelCompileError, match="undefined_name"):
        jax.jit(lambda a, b: jt.triton_call(a, b, kernel=bad_kernel, out_shape=a, grid=2, n=64, BLOCK=32))(x, y)
    assert seen and _records()["observer"].status == LOADED


def test_a_dialect_whose_claims_raises_is_set_aside(jt_fake_entry_points: Any) -> None:
    class Nosy(TritonDialect):
        name = "nosy"

        def claims(self, kernel: Any) -> bool:
            raise AttributeError("'JITFunction' object has no attribute 'nosy'")

    class NosyPlugin:
        @hookimpl
        def jt_register_dialects(self) -> list[Any]:
            return [Nosy()]

    registry = _with_plugin(jt_fake_entry_points, "nosy", NosyPlugin())
    with pytest.warns(RuntimeWarning, match=r"raised in dialect 'nosy' claims\(\): AttributeError"):
        _check_add()
    _check_add(lambda a, b: _add(a, b) + 0)
    with pytest.raises(jt.PluginFaultError, match=r"may be written in dialect 'nosy' of jt plugin 'nosy'.*claims"):
        registry.dialect_for(types.SimpleNamespace())  # claimed by no dialect left


def test_a_builtin_component_that_raises_is_not_hidden(
    jt_fake_entry_points: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Any, *args: Any) -> Any:
        raise RuntimeError("a bug in jt itself")

    jt_fake_entry_points([], {}, True)
    monkeypatch.setattr(CpuLauncher, "lower", broken)
    with pytest.raises(RuntimeError, match="a bug in jt itself"):
        _check_add(launcher="interpreter")


def test_strict_mode_raises_on_a_fault_a_call_could_survive(jt_fake_entry_points: Any) -> None:
    _with_plugin(jt_fake_entry_points, "unsure", _launcher_plugin(UnsureLauncher()), JT_STRICT_PLUGINS="1")
    with pytest.raises(jt.PluginFaultError, match="unsure"):
        _check_add()


# -- the command line ----------------------------------------------------------------------------------------


def _dist_info(site: pathlib.Path, name: str, entry_point: str) -> None:
    dist = site / f"{name.replace('-', '_')}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[jt]\n{entry_point}\n")


def _env(site: pathlib.Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(site), **extra}
    env.pop("JT_STRICT_PLUGINS", None)
    return env


def test_cli_shows_a_fault_recorded_by_another_process(tmp_path: pathlib.Path) -> None:
    site = tmp_path / "site"
    (site / "jt_faulty_example").mkdir(parents=True)
    (site / "jt_faulty_example" / "__init__.py").write_text("")
    (site / "jt_faulty_example" / "plugin.py").write_text(
        textwrap.dedent(
            """
            import jt_core as jt
            from jt_core.cpu.interpreter_launcher import CpuLauncher

            JT_PLUGIN_API = 1

            class FastLauncher(CpuLauncher):
                name = "fast"
                priority = 100

                def lower(self, ctx, call, kernels, operands, device):
                    raise RuntimeError("fast launcher is broken")

            @jt.hookimpl
            def jt_register_launchers():
                return [FastLauncher()]
            """
        )
    )
    _dist_info(site, "jt-faulty-example", "faulty = jt_faulty_example.plugin")
    env = _env(site, JT_CACHE_DIR=str(tmp_path / "cache"))
    script = (
        "import warnings, jax, jax.numpy as jnp, numpy as np, jt_core as jt\n"
        "from jt_core.testing import sample_add_kernel\n"
        "x = jnp.asarray(np.random.default_rng().standard_normal(64), jnp.float32)\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    out = jax.jit(lambda a: jt.triton_call(a, a, kernel=sample_add_kernel, out_shape=a, grid=2, n=64,"
        " BLOCK=32))(x)\n"
        "np.testing.assert_allclose(np.asarray(out), 2 * np.asarray(x), rtol=1e-6)\n"
        "print(len(caught))\n"
    )
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert ran.stdout.strip() == "1"
    table = subprocess.run(
        [sys.executable, "-m", "jt_core", "plugins"], capture_output=True, text=True, env=env, check=True
    ).stdout
    row = next(line for line in table.splitlines() if line.startswith("faulty "))
    assert row.split()[:4] == ["faulty", "jt-faulty-example", "1.0", "faulted"]
    assert row.endswith(
        "  launchers: cpu:fast; 1 fault (below), the newest: launcher 'cpu:fast' lower() raised RuntimeError: fast "
        "launcher is broken"
    ), row
    assert "launcher 'cpu:fast' lower() raised RuntimeError: fast launcher is broken" in table
    assert 'raise RuntimeError("fast launcher is broken")' in table  # the traceback
    assert "JT_DISABLE_PLUGINS=faulty" in table
    listing = json.loads(
        subprocess.run(
            [sys.executable, "-m", "jt_core", "plugins", "--json"], capture_output=True, text=True, env=env, check=True
        ).stdout
    )
    entry = next(e for e in listing if e["name"] == "faulty")
    assert entry["status"] == "faulted"
    (fault,) = entry["faults"]
    assert fault["where"] == "launcher 'cpu:fast' lower()"
    assert fault["error"] == "RuntimeError: fast launcher is broken"
    assert "Traceback (most recent call last)" in fault["traceback"]
    assert fault["pid"] != os.getpid() and fault["time"] > 0
    assert all(e["faults"] == [] for e in listing if e["name"] != "faulty")


@pytest.mark.parametrize("flags", [[], ["--json"]])
def test_cli_output_into_a_closed_pipe_exits_quietly(flags: list[str]) -> None:
    env = {**os.environ}
    env.pop("JT_STRICT_PLUGINS", None)
    child = subprocess.Popen(
        [sys.executable, "-m", "jt_core", "plugins", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # the reader is gone before anything is written, as with `| head -0`
    stderr = child.stderr.read().decode()
    assert child.wait(timeout=300) == 128 + signal.SIGPIPE
    assert stderr == ""


@pytest.mark.parametrize(
    "content", [b"\xff\xfe not text", b"{not json", b'{"faults": []}', b'[1, {"plugin": 2}, {"pid": "x"}]']
)
def test_a_damaged_fault_record_holds_no_faults(jt_fake_entry_points: Any, content: bytes) -> None:
    from jt_core.plugin import faults as kept

    registry = _with_plugin(jt_fake_entry_points, "unsure", _launcher_plugin(UnsureLauncher()))
    with pytest.warns(RuntimeWarning):
        _check_add()
    path = kept.faults_file("unsure")
    assert len(json.loads(path.read_text())["faults"]) == 1
    path.write_bytes(content)
    (record,) = [r for r in registry.list_plugins() if r.name == "unsure"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert kept.recorded_faults(record) == []
    assert [str(w.message) for w in caught if "is unusable" in str(w.message)], "a damaged record is reported"
    assert not path.exists()
    merged = {r.name: r for r in kept.with_recorded_faults(registry.list_plugins())}
    assert len(merged["unsure"].faults) == 1  # this process's own, which it holds in memory
    kept.remember_fault(record.faults[0])  # and a damaged file is replaced on the next fault
    assert len(kept.recorded_faults(record)) == 1


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EROFS], ids=["full-disk", "read-only"])
def test_a_fault_folder_that_takes_no_file_loses_only_the_record(jt_fake_entry_points: Any, error: int) -> None:
    from jt_core import files
    from jt_core.plugin import faults as kept
    from jt_core.testing import failing_writes

    registry = _with_plugin(jt_fake_entry_points, "unsure", _launcher_plugin(UnsureLauncher()))
    folder = files.cache_folder(kept.FAULTS_FOLDER)
    with warnings.catch_warnings(record=True) as caught, failing_writes(folder, error):
        warnings.simplefilter("always")
        _check_add()  # the call goes on without the faulty launcher, and is right
    assert [str(w.message) for w in caught if "cannot write to the folder" in str(w.message)]
    assert not list(folder.glob("*.jt-faults.json"))
    (record,) = [r for r in registry.list_plugins() if r.name == "unsure"]
    assert len(record.faults) == 1  # still known to this process
