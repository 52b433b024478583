"""The questions jt asks a plugin's backend, launcher or dialect where it needs the answer: each one's default, a
plugin that answers otherwise, and a plugin still written with the class attributes the questions replaced."""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jt_core as jt
from jt_core import hookimpl
from jt_core.contracts import (
    RETIRED_ATTRIBUTES,
    Backend,
    CompiledKernel,
    CompileRequest,
    Dialect,
    Launcher,
    Target,
    invoke,
)
from jt_core.errors import KernelCallValueError, PluginLoadError, UnsupportedKernelError
from jt_core.interpreter.backend import CpuLauncher
from jt_core.plugins import FAILED
from jt_core.registry import Registry
from jt_core.testing import (
    autotuned_scale_inplace_kernel,
    compile_request,
    fake_entry_point,
    load_tile,
    read_tile_kernel,
    sample_add_kernel,
    sample_call,
)
from jt_core.triton_dialect import TritonDialect

MakeRegistry = Callable[..., Registry]


class QuietBackend(Backend):
    """Answers none of the questions."""

    platform = "quiet"

    def target(self) -> Target:
        return Target("quiet", "q1", 32)

    def compile(self, request: CompileRequest) -> CompiledKernel:
        return CompiledKernel(name=request.call.name, target=request.target, binary=b"quiet")


class QuietLauncher(Launcher):
    """Answers none of the questions."""

    platform = "quiet"
    name = "quiet"

    def lower(
        self, ctx: Any, call: Any, kernels: Sequence[CompiledKernel], operands: Sequence[Any], device: Any
    ) -> Any:
        raise AssertionError("not lowered in these tests")


class QuietDialect(Dialect):
    """Answers none of the questions, and claims no kernel."""

    name = "quiet"

    def claims(self, kernel: Any) -> bool:
        return False

    def make_source(self, kernel: Any, specialization: Any, target: Target) -> Any:
        raise AssertionError("claims no kernel")


class PlainCpuLauncher(Launcher):
    """A plugin's CPU launcher: lowers as the interpreter launcher does, answers no question, and counts the
    compiled kernels it is given."""

    platform = "cpu"
    name = "plain"
    priority = -10

    def __init__(self) -> None:
        self.lowered: list[int] = []

    def lower(
        self, ctx: Any, call: Any, kernels: Sequence[CompiledKernel], operands: Sequence[Any], device: Any
    ) -> Sequence[Any]:
        self.lowered.append(len(kernels))
        return CpuLauncher().lower(ctx, call, kernels, operands, device)


class DescriptorPassingLauncher(PlainCpuLauncher):
    """Passes host-side tensor descriptors, and remembers what it was asked about."""

    name = "passes-descriptors"

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[list[str]] = []

    def passes_tensor_descriptors(self, call: Any, parameters: Sequence[str]) -> bool:
        self.asked.append(list(parameters))
        return True


class OneConfigLauncher(PlainCpuLauncher):
    """Lowers one configuration: autotuned calls are tuned before they reach it."""

    name = "one-config"

    def needs_tuning_ahead(self, call: Any) -> bool:
        return True


class PlatformPlugin:
    """Registers the given backends and launchers for their platforms, and the given dialects."""

    def __init__(self, *components: Any) -> None:
        self.components = components

    def _of(self, role: type, platform: str | None) -> list[Any]:
        return [c for c in self.components if isinstance(c, role) and platform in (None, c.platform)]

    @hookimpl
    def jt_register_backends(self, platform: str | None) -> list[Backend]:
        return self._of(Backend, platform)

    @hookimpl
    def jt_register_launchers(self, platform: str | None) -> list[Launcher]:
        return self._of(Launcher, platform)

    @hookimpl
    def jt_register_dialects(self) -> list[Dialect]:
        return [c for c in self.components if isinstance(c, Dialect)]


def _register(make: MakeRegistry, *components: Any, **environ: str) -> Registry:
    return make([fake_entry_point("questions", PlatformPlugin(*components), distribution="questions-dist")], environ)


def _matrix(rows: int, cols: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)


# -- defaults ------------------------------------------------------------------------------------------------


def _request() -> CompileRequest:
    backend = QuietBackend()
    call = sample_call()
    return compile_request(backend, call)


#: ``(component, question, its arguments, the default answer)``; the arguments are made when the test runs.
_DEFAULTS: list[tuple[Callable[[], Any], str, Callable[[], dict[str, Any]], Any]] = [
    (QuietBackend, "unsupported_dialect_reason", lambda: {"dialect": TritonDialect()}, None),
    (QuietBackend, "may_keep_on_disk", lambda: {"request": _request()}, False),
    (QuietBackend, "binary_file_suffix", lambda: {"kernel": CompiledKernel("k", Target("quiet", "q1", 32))}, "bin"),
    (QuietLauncher, "passes_tensor_descriptors", lambda: {"call": sample_call(), "parameters": ["x_ptr"]}, False),
    (QuietLauncher, "runs_through_host_callback", lambda: {"call": sample_call()}, False),
    (QuietLauncher, "needs_tuning_ahead", lambda: {"call": sample_call()}, False),
    (QuietDialect, "requires_descriptor_layout", lambda: {"kernel": sample_add_kernel}, False),
]


@pytest.mark.parametrize(
    ("component", "question", "arguments", "default"), _DEFAULTS, ids=[q for _, q, _, _ in _DEFAULTS]
)
def test_a_component_that_does_not_answer_a_question_gets_its_default(
    component: Callable[[], Any], question: str, arguments: Callable[[], dict[str, Any]], default: Any
) -> None:
    assert invoke(component(), question, **arguments()) == default


# -- backends ------------------------------------------------------------------------------------------------


class DialectRefusingBackend(QuietBackend):
    def unsupported_dialect_reason(self, dialect: Dialect) -> str | None:
        return f"quiet chips run no {dialect.name} kernels; lower it for 'cpu'"


def test_a_backend_that_cannot_run_a_dialect_fails_the_call_with_its_reason(jt_fake_entry_points: MakeRegistry) -> None:
    _register(jt_fake_entry_points, DialectRefusingBackend(), QuietLauncher())
    spec = jax.ShapeDtypeStruct((64,), jnp.float32)

    def add(x: Any, y: Any) -> Any:
        return jt.triton_call(x, y, kernel=sample_add_kernel, out_shape=x, grid=2, n=64, BLOCK=32)

    with pytest.raises(UnsupportedKernelError) as info:
        jax.jit(add).trace(spec, spec).lower(lowering_platforms=("quiet",))
    assert str(info.value) == (
        "triton_call 'sample_add_kernel': triton kernels cannot run on the 'quiet' backend: quiet chips run no "
        "triton kernels; lower it for 'cpu'"
    )


# -- launchers -----------------------------------------------------------------------------------------------


def test_a_launcher_that_does_not_say_it_passes_tensor_descriptors_is_refused_them(
    jt_fake_entry_points: MakeRegistry,
) -> None:
    launcher = PlainCpuLauncher()
    _register(jt_fake_entry_points, launcher)
    x = _matrix(40, 72, 0)
    with pytest.raises(KernelCallValueError) as info:
        jax.jit(lambda a: load_tile(jt.TensorDescriptor(a, [16, 32]), 3, 5, launcher="plain"))(x)
    message = str(info.value)
    assert "argument(s) ['desc'] are host-side tensor descriptors" in message
    assert re.search(r"which launcher 'plain' on platform 'cpu' cannot pass; use launcher='(ffi|interpreter)'", message)
    assert launcher.lowered == []


def test_a_launcher_that_passes_tensor_descriptors_is_asked_about_the_calls_parameters(
    jt_fake_entry_points: MakeRegistry,
) -> None:
    launcher = DescriptorPassingLauncher()
    _register(jt_fake_entry_points, launcher)
    x = _matrix(40, 72, 1)
    tile = jax.jit(lambda a: load_tile(jt.TensorDescriptor(a, [16, 32]), 3, 8, launcher="passes-descriptors"))(x)
    np.testing.assert_array_equal(np.asarray(tile), x[3:19, 8:40])
    assert launcher.asked == [["desc"]] and launcher.lowered == [1]


def _scaled(launcher: str) -> Callable[[Any], Any]:
    def f(x: Any) -> Any:
        n = x.size
        return jt.triton_call(
            x, kernel=autotuned_scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0},
            grid=lambda meta: ((n + meta["BLOCK"] - 1) // meta["BLOCK"],), n=n, factor=2.0, launcher=launcher,
        )  # fmt: skip

    return f


def test_a_launcher_that_does_not_need_tuning_ahead_gets_every_configuration(
    jt_fake_entry_points: MakeRegistry,
) -> None:
    launcher = PlainCpuLauncher()
    _register(jt_fake_entry_points, launcher)
    jax.jit(_scaled("plain")).lower(jax.ShapeDtypeStruct((300,), jnp.float32))
    assert launcher.lowered == [3]


def test_a_launcher_that_needs_tuning_ahead_gets_the_configuration_tuned_through_the_next_launcher(
    jt_fake_entry_points: MakeRegistry,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("JT_CPU_AUTOTUNE", "1")
    monkeypatch.delenv("JT_DISABLE_CACHE", raising=False)
    launcher = OneConfigLauncher()
    _register(jt_fake_entry_points, launcher)
    x = np.random.default_rng(2).standard_normal(300).astype(np.float32)
    with caplog.at_level(logging.INFO, logger="jt_core"):
        out = jax.jit(_scaled("one-config"))(x)
    np.testing.assert_allclose(np.asarray(out), 2 * x, rtol=1e-6)
    assert launcher.lowered == [1]
    tuned = [r.getMessage() for r in caplog.records if "before lowering" in r.getMessage()]
    assert len(tuned) == 1 and "tuning 3 configurations with launcher " in tuned[0], tuned
    assert "'one-config'" not in tuned[0]


# -- dialects ------------------------------------------------------------------------------------------------


class LayoutDialect(TritonDialect):
    """Claims ``read_tile_kernel``, and wants a layout with each of its tensor descriptors."""

    name = "layered"

    def claims(self, kernel: Any) -> bool:
        return kernel is read_tile_kernel

    def requires_descriptor_layout(self, kernel: Any) -> bool:
        return kernel is read_tile_kernel


def test_a_dialect_that_requires_descriptor_layouts_refuses_a_descriptor_without_one(
    jt_fake_entry_points: MakeRegistry,
) -> None:
    _register(jt_fake_entry_points, LayoutDialect())
    spec = jax.ShapeDtypeStruct((40, 72), jnp.float32)
    with pytest.raises(KernelCallValueError, match=r"'desc' has no layout, but layered kernels need the block's"):
        jax.jit(lambda a: load_tile(jt.TensorDescriptor(a, [16, 32]), 3, 5)).trace(spec)


def test_a_dialect_that_does_not_answer_refuses_a_descriptor_with_a_layout(
    jt_fake_entry_points: MakeRegistry,
) -> None:
    class Unlayered(LayoutDialect):
        requires_descriptor_layout = Dialect.requires_descriptor_layout

    _register(jt_fake_entry_points, Unlayered())
    spec = jax.ShapeDtypeStruct((40, 72), jnp.float32)
    with pytest.raises(KernelCallValueError, match=r"'desc' has layout='swizzled', but layered kernels take .*drop"):
        jax.jit(lambda a: load_tile(jt.TensorDescriptor(a, [16, 32], layout="swizzled"), 3, 5)).trace(spec)


# -- plugins written with the retired class attributes -------------------------------------------------------

_ROLES: dict[type, type] = {Backend: QuietBackend, Launcher: QuietLauncher, Dialect: QuietDialect}
_RETIRED = [(role, attribute, new) for role, names in RETIRED_ATTRIBUTES.items() for attribute, new in names.items()]


@pytest.mark.parametrize(("role", "attribute", "replacement"), _RETIRED, ids=[a for _, a, _ in _RETIRED])
def test_a_plugin_whose_component_sets_a_retired_attribute_is_refused_naming_its_replacement(
    jt_fake_entry_points: MakeRegistry, role: type, attribute: str, replacement: str
) -> None:
    old = type(f"Old{role.__name__}", (_ROLES[role],), {attribute: True, "__module__": __name__})
    registry = _register(jt_fake_entry_points, old())
    with pytest.warns(RuntimeWarning) as caught:
        record = {r.name: r for r in registry.list_plugins()}["questions"]
    assert record.status == FAILED
    (message,) = [str(w.message) for w in caught if "'questions'" in str(w.message)]
    assert message == (
        f"jt plugin 'questions' from questions-dist 0.0.0 registered the {role.__name__} "
        f"{__name__}.Old{role.__name__}, which sets an attribute jt-core no longer reads: {attribute}, replaced by "
        f"{replacement}. Move what it declares to the replacement and drop the attribute; set "
        "JT_DISABLE_PLUGINS=questions to skip the plugin."
    )
    assert registry.backends.get("quiet") is None and registry.launchers.get("quiet", []) == []
    assert "quiet" not in [d.name for _, d in registry.dialects]


def test_every_retired_attribute_a_launcher_sets_is_named_and_strict_mode_raises(
    jt_fake_entry_points: MakeRegistry,
) -> None:
    class OldLauncher(QuietLauncher):
        supports_tensor_descriptors = True
        single_config = True

    registry = _register(jt_fake_entry_points, OldLauncher(), JT_STRICT_PLUGINS="1")
    with pytest.raises(PluginLoadError) as info:
        registry.ensure_loaded()
    assert (
        "sets attributes jt-core no longer reads: supports_tensor_descriptors, replaced by "
        "Launcher.passes_tensor_descriptors(call, parameters); single_config, replaced by "
        "Launcher.needs_tuning_ahead(call)."
    ) in str(info.value)


def test_a_backend_whose_target_takes_the_call_is_refused_naming_what_replaced_it(
    jt_fake_entry_points: MakeRegistry,
) -> None:
    class OldBackend(QuietBackend):
        def target(self, call: Any, device: Any) -> Target:  # type: ignore[override]
            return Target("quiet", "q1", 1)

    registry = _register(jt_fake_entry_points, OldBackend(), JT_STRICT_PLUGINS="1")
    with pytest.raises(PluginLoadError) as info:
        registry.ensure_loaded()
    assert (
        "has a method that takes an argument jt-core no longer offers: target(call), replaced by "
        "Backend.target(backend_arguments, device, name), offered instead of the call. Take the arguments of the "
        "replacement; set JT_DISABLE_PLUGINS=questions to skip the plugin."
    ) in str(info.value)


def test_a_component_without_retired_attributes_is_registered(jt_fake_entry_points: MakeRegistry) -> None:
    registry = _register(jt_fake_entry_points, QuietBackend(), QuietLauncher(), QuietDialect(), JT_STRICT_PLUGINS="1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        registry.ensure_loaded()
    assert registry.records["questions"].platforms == ["quiet"]
    assert registry.records["questions"].launchers == ["quiet:quiet"]
    assert registry.records["questions"].dialects == ["quiet"]
