"""A pytest plugin for jt plugin authors (and jt's own suite).

Activate it in a ``conftest.py`` with ``pytest_plugins = ["jt_core.testing"]``. It provides:

* fixtures: ``jt_plugin_manager`` (a fresh manager, installed as the process-wide one for the test),
  ``jt_register_plugin`` (register a module or object as a plugin for one test), ``jt_fake_entry_points``
  (build a manager from fake entry points, e.g. a broken plugin), ``jt_hook_recorder`` (records hook calls);
* markers ``cuda``, ``rocm`` and ``gpu`` that skip a test where the hardware is absent, and the option
  ``--jt-require-gpu`` that turns those skips into failures (use it on GPU machines so that nothing is skipped by
  accident);
* conformance classes :class:`BackendConformance`, :class:`LauncherConformance` and :class:`DialectConformance`
  that a plugin's test module subclasses, providing the object under test as a fixture.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import numpy as np
import pytest
import triton
import triton.language as tl

from jt_core import plugins
from jt_core.backend import Backend, CompiledKernel, CompileRequest, Dialect, Launcher, Target
from jt_core.binding import KernelCall, bind_call
from jt_core.plugins import EntryPointInfo, PluginManager

HARDWARE_MARKERS = ("cuda", "rocm", "gpu")


@functools.cache
def has_platform(platform: str) -> bool:
    """Whether JAX sees a device of ``platform`` (``"cuda"``, ``"rocm"`` or ``"gpu"``)."""
    try:
        return bool(jax.devices(platform))
    except RuntimeError:
        return False


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("jt")
    group.addoption(
        "--jt-require-gpu",
        action="store_true",
        default=False,
        help="fail, instead of skip, tests marked cuda/rocm/gpu when the hardware is absent",
    )


def pytest_configure(config: pytest.Config) -> None:
    for name in HARDWARE_MARKERS:
        config.addinivalue_line(
            "markers", f"{name}: needs a {name} device (skipped without one unless --jt-require-gpu)"
        )


def pytest_runtest_setup(item: pytest.Item) -> None:
    for name in HARDWARE_MARKERS:
        if item.get_closest_marker(name) is None:
            continue
        if has_platform(name):
            continue
        message = f"needs a {name} device, and JAX sees none"
        if item.config.getoption("--jt-require-gpu"):
            pytest.fail(f"{message} (--jt-require-gpu is set)", pytrace=False)
        pytest.skip(message)


# -- fixtures ------------------------------------------------------------------------------------------------


@pytest.fixture
def jt_plugin_manager() -> Iterator[PluginManager]:
    """A fresh plugin manager over the installed entry points, installed as the process-wide one."""
    manager = PluginManager()
    previous = plugins.set_plugin_manager(manager)
    try:
        yield manager
    finally:
        plugins.set_plugin_manager(previous)


def fake_entry_point(
    name: str,
    target: Any,
    distribution: str = "fake-dist",
    version: str = "0.0.0",
) -> EntryPointInfo:
    """An entry point whose ``load()`` returns ``target``, or raises it when it is an exception instance."""

    def load() -> Any:
        if isinstance(target, BaseException):
            raise target
        return target

    return EntryPointInfo(name=name, value=f"{name}:fake", distribution=distribution, version=version, load=load)


@pytest.fixture
def jt_fake_entry_points() -> Iterator[Callable[..., PluginManager]]:
    """A factory: ``make(entry_points, environ=None, include_installed=False)`` -> an installed fresh manager.

    Each entry point is an :class:`~jt_core.plugins.EntryPointInfo` (see :func:`fake_entry_point`).
    """
    previous = plugins.set_plugin_manager(None)

    def make(
        entry_points: Sequence[EntryPointInfo],
        environ: Mapping[str, str] | None = None,
        include_installed: bool = False,
    ) -> PluginManager:
        eps = list(entry_points)
        if include_installed:
            eps = plugins.discover_entry_points() + eps
        manager = PluginManager(entry_points=eps, environ=environ if environ is not None else {})
        plugins.set_plugin_manager(manager)
        return manager

    try:
        yield make
    finally:
        plugins.set_plugin_manager(previous)


@pytest.fixture
def jt_register_plugin(jt_fake_entry_points: Callable[..., PluginManager]) -> Callable[..., PluginManager]:
    """``register(plugin, name="test-plugin")``: a fresh manager with the installed plugins plus ``plugin``."""

    def register(plugin: Any, name: str = "test-plugin", environ: Mapping[str, str] | None = None) -> PluginManager:
        return jt_fake_entry_points(
            [fake_entry_point(name, plugin, distribution=f"{name}-dist")], environ=environ, include_installed=True
        )

    return register


class HookRecorder:
    """Records every hook call made through a manager: ``calls`` holds ``(hook name, kwargs)`` pairs."""

    def __init__(self, manager: PluginManager) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._undo = manager.pm.add_hookcall_monitoring(self._before, lambda *a: None)

    def _before(self, hook_name: str, hook_impls: Any, kwargs: Mapping[str, Any]) -> None:
        self.calls.append((hook_name, dict(kwargs)))

    def names(self) -> list[str]:
        """The hook names called, in order."""
        return [name for name, _ in self.calls]

    def close(self) -> None:
        """Stops recording."""
        self._undo()


@pytest.fixture
def jt_hook_recorder() -> Iterator[HookRecorder]:
    """Records the hook calls of a fresh process-wide manager for the duration of a test."""
    manager = PluginManager()
    previous = plugins.set_plugin_manager(manager)
    recorder = HookRecorder(manager)
    try:
        yield recorder
    finally:
        recorder.close()
        plugins.set_plugin_manager(previous)


# -- sample kernels and calls --------------------------------------------------------------------------------


@triton.jit
def sample_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """``out = x + y`` over ``n`` elements: the kernel the conformance suites compile and run."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def sample_call(
    kernel: Any = None,
    size: int = 64,
    dtype: Any = np.float32,
    compute_capability: int | None = None,
    **metaparams: Any,
) -> KernelCall:
    """A bound call of ``sample_add_kernel`` (or a kernel of the same signature) on abstract arrays."""
    spec = jax.ShapeDtypeStruct((size,), dtype)
    meta = {"BLOCK": 32, **metaparams}
    call, _, _, _ = bind_call(
        kernel if kernel is not None else sample_add_kernel,
        (spec, spec),
        {**meta, "n": size},
        out_spec=spec,
        grid=(size + meta["BLOCK"] - 1) // meta["BLOCK"],
        input_output_aliases=None,
        zeroed_outputs=(),
        explicit_options={},
        backend_options=None,
        name=None,
        compute_capability=compute_capability,
        has_side_effect=False,
        launcher=None,
        serialized_metadata=b"",
        cost_estimate=None,
        bounds_check=True,
    )
    return call


def compile_request(backend: Backend, call: KernelCall, target: Target, dialect: Dialect) -> CompileRequest:
    """The request for the first configuration of ``call``."""
    config = call.configs[0]
    return CompileRequest(
        call=call,
        config=config,
        kernel=call.fn,
        dialect=dialect,
        specialization=call.specialization(config),
        target=target,
        options=config.options,
        backend=backend,
    )


def custom_calls(lowered: Any, target: str | None = None) -> list[Any]:
    """The ``stablehlo.custom_call`` operations of a lowered module (optionally only those calling ``target``).

    Args:
        lowered: What ``jax.jit(f).trace(...).lower(...)`` returns.
        target: A custom-call target name to keep, or ``None`` for all.
    """
    module = lowered.compiler_ir("stablehlo")
    found: list[Any] = []

    def visit(operation: Any) -> None:
        if operation.name == "stablehlo.custom_call":
            name = str(operation.attributes["call_target_name"]).strip('"')
            if target is None or name == target:
                found.append(operation)
        for region in operation.regions:
            for block in region.blocks:
                for inner in block.operations:
                    visit(inner.operation)

    visit(module.operation)
    return found


def _triton_dialect() -> Dialect:
    from jt_core.triton_dialect import TritonDialect

    return TritonDialect()


# -- conformance suites --------------------------------------------------------------------------------------


class BackendConformance:
    """Subclass and provide a ``backend`` fixture (and set ``compute_capability`` where the target needs one).

    The suite checks the ABC contract, that a target can be made without a device when told the architecture,
    and that the sample kernel compiles to a :class:`~jt_core.backend.CompiledKernel`.
    """

    #: Passed as ``compute_capability=`` to the sample call (CUDA backends need it without a device).
    compute_capability: int | None = None

    def test_is_a_backend(self, backend: Backend) -> None:
        assert isinstance(backend, Backend)
        assert isinstance(backend.platform, str) and backend.platform

    def test_target_without_device(self, backend: Backend) -> None:
        target = backend.target(sample_call(compute_capability=self.compute_capability), None)
        assert isinstance(target, Target)
        assert target.platform == backend.platform
        assert target.warp_size >= 1

    def test_compiles_sample_kernel(self, backend: Backend) -> None:
        call = sample_call(compute_capability=self.compute_capability)
        target = backend.target(call, None)
        compiled = backend.compile(compile_request(backend, call, target, _triton_dialect()))
        assert isinstance(compiled, CompiledKernel)
        assert compiled.target == target
        assert compiled.name

    def test_registered_by_its_plugin(self, backend: Backend) -> None:
        manager = plugins.get_plugin_manager().ensure_loaded()
        registered = {type(b) for _, b in manager.backends.values()}
        assert type(backend) in registered, f"{type(backend).__name__} is not registered by any loaded plugin"


class LauncherConformance:
    """Subclass and provide a ``launcher`` fixture.

    Set ``compute_capability`` when lowering for the launcher's platform needs a target without a device, and
    ``expected_in_lowering`` to a string the lowered module must contain (the custom-call target, say).
    """

    compute_capability: int | None = None
    expected_in_lowering: str | None = None

    def test_is_a_launcher(self, launcher: Launcher) -> None:
        assert isinstance(launcher, Launcher)
        assert isinstance(launcher.name, str) and launcher.name
        assert isinstance(launcher.platform, str) and launcher.platform
        assert isinstance(launcher.priority, int)

    def test_availability_is_explained(self, launcher: Launcher) -> None:
        reason = launcher.unavailable_reason()
        assert reason is None or (isinstance(reason, str) and reason)

    def test_lowers_sample_call(self, launcher: Launcher) -> None:
        if launcher.unavailable_reason() is not None:
            pytest.skip(f"launcher {launcher.name!r} is unavailable here: {launcher.unavailable_reason()}")
        import jax.numpy as jnp

        from jt_core import triton_call

        def f(x: Any, y: Any) -> Any:
            return triton_call(
                x,
                y,
                kernel=sample_add_kernel,
                out_shape=x,
                grid=2,
                n=64,
                BLOCK=32,
                compute_capability=self.compute_capability,
                launcher=launcher.name,
            )

        x = jax.ShapeDtypeStruct((64,), jnp.float32)
        lowered = jax.jit(f).trace(x, x).lower(lowering_platforms=(launcher.platform,))
        text = lowered.as_text()
        if self.expected_in_lowering is not None:
            assert self.expected_in_lowering in text


class DialectConformance:
    """Subclass and provide ``dialect``, ``sample_kernel`` (a kernel of the dialect) and ``foreign_kernel``."""

    def test_is_a_dialect(self, dialect: Dialect) -> None:
        assert isinstance(dialect, Dialect)
        assert isinstance(dialect.name, str) and dialect.name

    def test_claims_its_kernels(self, dialect: Dialect, sample_kernel: Any) -> None:
        assert dialect.claims(sample_kernel)

    def test_leaves_other_kernels(self, dialect: Dialect, foreign_kernel: Any) -> None:
        assert not dialect.claims(foreign_kernel)
        assert not dialect.claims(types.SimpleNamespace())

    def test_selected_for_its_kernels(self, dialect: Dialect, sample_kernel: Any) -> None:
        chosen = plugins.get_plugin_manager().dialect_for(sample_kernel)
        assert chosen.name == dialect.name
