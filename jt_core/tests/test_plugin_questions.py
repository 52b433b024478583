"""The questions jt asks a plugin's backend, launcher or dialect where it needs the answer: each one's default, a
plugin that answers otherwise, and a plugin still written with the class attributes the questions replaced."""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jt_core as jt
from jt_core import _version as jt_version
from jt_core import hookimpl
from jt_core.cpu.interpreter_launcher import CpuLauncher
from jt_core.errors import KernelCallValueError, PluginLoadError, UnsupportedKernelError
from jt_core.plugin.records import FAILED, LOADED
from jt_core.plugin.registry import Registry
from jt_core.plugin.retired import Retired
from jt_core.plugin.roles import (
    RETIRED_ATTRIBUTES,
    RETIRED_PARAMETERS,
    Backend,
    CompileRequest,
    Dialect,
    Launcher,
    invoke,
)
from jt_core.plugin.values import CompiledKernel, Target
from jt_core.testing import (
    autotuned_scale_inplace_kernel,
    fake_entry_point,
    load_tile,
    read_tile_kernel,
    sample_add_kernel,
)
from jt_core.testing._calls import compile_request, sample_call
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
    (QuietLauncher, "unexportable_reason", lambda: {"call": sample_call()}, None),
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
    assert re.search(
        r"which launcher 'plain' on platform 'cpu' cannot pass; use launcher='(compiled|ffi|interpreter)'", message
    )
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


# -- plugins written with the retired names: they work, with a warning, until the version that refuses them --

_ROLES: dict[type, type] = {Backend: QuietBackend, Launcher: QuietLauncher, Dialect: QuietDialect}
_RETIRED = [(role, name, entry) for role, names in RETIRED_ATTRIBUTES.items() for name, entry in names.items()]
#: The version that refuses the retired names (one for all of them, so far).
(REMOVED_IN,) = {entry.removed_in for _, _, entry in _RETIRED} | {
    entry.removed_in
    for methods in RETIRED_PARAMETERS.values()
    for names in methods.values()
    for entry in names.values()
}


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


@pytest.fixture
def removed(monkeypatch: pytest.MonkeyPatch) -> str:
    """Makes this jt-core the version that removes the retired names."""
    monkeypatch.setattr(jt_version, "__version__", REMOVED_IN)
    return REMOVED_IN


def _old(role: type, attribute: str, value: Any = True, base: type | None = None) -> Any:
    """A component of ``role`` whose class still sets the retired ``attribute``."""
    return type(f"Old{role.__name__}", (base or _ROLES[role],), {attribute: value, "__module__": __name__})()


def _deprecations(registry: Registry) -> list[str]:
    """Loads ``registry``'s plugins; returns the deprecation warnings about the plugin 'questions'."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        registry.ensure_loaded()
    assert [w for w in caught if w.category is RuntimeWarning] == []
    return [str(w.message) for w in caught if w.category is DeprecationWarning and "'questions'" in str(w.message)]


def test_this_release_is_inside_the_window_of_the_retired_names() -> None:
    assert _numbers(jt_version.__version__) < _numbers(REMOVED_IN)


@pytest.mark.parametrize(("role", "attribute", "entry"), _RETIRED, ids=[a for _, a, _ in _RETIRED])
def test_a_retired_attribute_is_registered_with_a_warning_naming_its_replacement_and_the_version_that_refuses_it(
    jt_fake_entry_points: MakeRegistry, role: type, attribute: str, entry: Retired
) -> None:
    component = _old(role, attribute)
    registry = _register(jt_fake_entry_points, component, JT_STRICT_PLUGINS="1")
    (message,) = _deprecations(registry)
    prefix = "jt plugin 'questions' from questions-dist 0.0.0 "
    assert message.startswith(
        f"{prefix}registered the {role.__name__} {__name__}.Old{role.__name__}, which uses a name of an earlier jt "
        f"contract: {attribute}, replaced by {entry.replacement} ("
    )
    assert message.endswith(
        f"; {REMOVED_IN} refuses it). Move to the replacement while jt-core {jt_version.__version__} still takes it."
    )
    if entry.unhonoured:
        assert f"(jt-core cannot honour it: {entry.unhonoured};" in message
    else:
        assert f"(jt-core {jt_version.__version__} still honours it;" in message
    record = registry.records["questions"]
    assert record.status == LOADED and record.deprecations == [message.removeprefix(prefix)]
    registered = [
        *(backend for _, backend in registry.backends.values()),
        *(launcher for entries in registry.launchers.values() for _, launcher in entries),
        *(dialect for _, dialect in registry.dialects),
    ]
    assert any(item is component for item in registered)


def test_a_plugin_is_warned_once_about_the_retired_names_it_uses(jt_fake_entry_points: MakeRegistry) -> None:
    class OldLauncher(QuietLauncher):
        supports_tensor_descriptors = True
        single_config = True

    registry = _register(jt_fake_entry_points, OldLauncher())
    (message,) = _deprecations(registry)
    assert (
        "which uses names of an earlier jt contract: supports_tensor_descriptors, replaced by "
        f"Launcher.passes_tensor_descriptors(call, parameters) (jt-core {jt_version.__version__} still honours it; "
        f"{REMOVED_IN} refuses it); single_config, replaced by Launcher.needs_tuning_ahead(call) (jt-core "
        f"{jt_version.__version__} still honours it; {REMOVED_IN} refuses it). Move to the replacements while jt-core "
        f"{jt_version.__version__} still takes them."
    ) in message
    assert _deprecations(registry) == []  # asked again
    registry.collect("cpu")
    assert registry.records["questions"].deprecations == [message.split(" 0.0.0 ", 1)[1]]


#: The retired attributes jt answers a question from: ``(role, attribute, a value other than the default)``.
_ANSWERED = [
    (Backend, "cacheable", True),
    (Backend, "binary_suffix", "cubin"),
    (Launcher, "supports_tensor_descriptors", True),
    (Launcher, "uses_host_callback", True),
    (Launcher, "single_config", True),
    (Dialect, "tensor_descriptor_layout", True),
]
_QUESTION_ARGUMENTS: dict[str, Callable[[], dict[str, Any]]] = {q: a for _, q, a, _ in _DEFAULTS}


@pytest.mark.parametrize(("role", "attribute", "value"), _ANSWERED, ids=[a for _, a, _ in _ANSWERED])
def test_inside_the_window_jt_answers_the_question_from_the_retired_attribute(
    role: type, attribute: str, value: Any
) -> None:
    question = RETIRED_ATTRIBUTES[role][attribute].question
    old = _old(role, attribute, value)
    assert invoke(_ROLES[role](), question, **_QUESTION_ARGUMENTS[question]()) != value
    assert invoke(old, question, **_QUESTION_ARGUMENTS[question]()) == value


@pytest.mark.parametrize(("role", "attribute", "value"), _ANSWERED, ids=[a for _, a, _ in _ANSWERED])
def test_a_component_that_answers_the_question_itself_is_asked_and_told_its_attribute_is_ignored(
    jt_fake_entry_points: MakeRegistry, role: type, attribute: str, value: Any
) -> None:
    question = RETIRED_ATTRIBUTES[role][attribute].question
    default = getattr(role, question)
    answering = type("Answering", (_ROLES[role],), {question: lambda self, *a, **k: default(self, *a, **k)})
    old = _old(role, attribute, value, base=answering)
    assert invoke(old, question, **_QUESTION_ARGUMENTS[question]()) != value
    (message,) = _deprecations(_register(jt_fake_entry_points, old))
    assert f"(ignored, since Old{role.__name__} answers {question}() itself; {REMOVED_IN} refuses it)" in message


def test_inside_the_window_a_launcher_that_sets_supports_tensor_descriptors_is_given_them(
    jt_fake_entry_points: MakeRegistry,
) -> None:
    launcher = _old(Launcher, "supports_tensor_descriptors", base=PlainCpuLauncher)
    _register(jt_fake_entry_points, launcher)
    x = _matrix(40, 72, 3)
    with pytest.warns(DeprecationWarning, match="supports_tensor_descriptors, replaced by"):
        tile = jax.jit(lambda a: load_tile(jt.TensorDescriptor(a, [16, 32]), 5, 8, launcher="plain"))(x)
    np.testing.assert_array_equal(np.asarray(tile), x[5:21, 8:40])
    assert launcher.lowered == [1]


def test_inside_the_window_a_launcher_that_sets_single_config_gets_the_call_tuned_ahead(
    jt_fake_entry_points: MakeRegistry, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("JT_CPU_AUTOTUNE", "1")
    monkeypatch.delenv("JT_DISABLE_CACHE", raising=False)
    launcher = _old(Launcher, "single_config", base=PlainCpuLauncher)
    _register(jt_fake_entry_points, launcher)
    x = np.random.default_rng(4).standard_normal(300).astype(np.float32)
    with pytest.warns(DeprecationWarning, match="single_config, replaced by"):
        np.testing.assert_allclose(np.asarray(jax.jit(_scaled("plain"))(x)), 2 * x, rtol=1e-6)
    assert launcher.lowered == [1]


class EmittingLauncher(QuietLauncher):
    """Lowers a call for 'quiet' to a custom call (that nothing runs: the tests only lower)."""

    def lower(
        self, ctx: Any, call: Any, kernels: Sequence[CompiledKernel], operands: Sequence[Any], device: Any
    ) -> Any:
        return jax.ffi.ffi_lowering("quiet_kernel")(ctx, *operands)


def _lower_for_quiet(**options: Any) -> str:
    def add(x: Any, y: Any) -> Any:
        return jt.triton_call(x, y, kernel=sample_add_kernel, out_shape=x, grid=2, n=64, BLOCK=32, **options)

    spec = jax.ShapeDtypeStruct((64,), jnp.float32)
    return jax.jit(add).trace(spec, spec).lower(lowering_platforms=("quiet",)).as_text()


def test_inside_the_window_a_backend_whose_target_takes_the_call_is_given_it(
    jt_fake_entry_points: MakeRegistry,
) -> None:
    class OldBackend(QuietBackend):
        seen: list[str] = []  # noqa: RUF012

        def target(self, call: Any, device: Any) -> Target:  # type: ignore[override]
            self.seen.append(call.name)
            return Target("quiet", "q1", 32)

    (message,) = _deprecations(_register(jt_fake_entry_points, OldBackend(), EmittingLauncher()))
    assert (
        "uses a name of an earlier jt contract: target(call), replaced by Backend.target(backend_arguments, device, "
        f"name), offered instead of the call (jt-core {jt_version.__version__} still offers it; {REMOVED_IN} refuses "
        "it)."
    ) in message
    assert "quiet_kernel" in _lower_for_quiet(name="called")
    assert OldBackend.seen == ["called"]


def test_inside_the_window_a_backend_with_validate_options_has_it_check_each_configuration(
    jt_fake_entry_points: MakeRegistry,
) -> None:
    class OldBackend(QuietBackend):
        def validate_options(self, options: Any, call: Any, target: Target) -> None:
            if options.num_warps > 4:
                raise KernelCallValueError(f"triton_call {call.name!r}: {target.arch} runs at most 4 warps")

    _register(jt_fake_entry_points, OldBackend(), EmittingLauncher())
    with pytest.warns(DeprecationWarning, match="validate_options, replaced by"):
        assert "quiet_kernel" in _lower_for_quiet(num_warps=4)
    with pytest.raises(KernelCallValueError, match=r"^triton_call 'sample_add_kernel': q1 runs at most 4 warps$"):
        _lower_for_quiet(num_warps=8)


def test_inside_the_window_without_native_completes_the_library_spec(tmp_path: Any) -> None:
    from jt_core.native import LibrarySpec

    class OldLauncher(QuietLauncher):
        without_native = "calls run through the host callback"

        def native_library(self) -> LibrarySpec:
            return LibrarySpec(name="quiet", sources=(tmp_path / "quiet.cc",))

    spec = invoke(OldLauncher(), "native_library")
    assert spec.without_it == "calls run through the host callback" and spec.name == "quiet"
    told = LibrarySpec(name="quiet", sources=(), without_it="the spec's own words")
    OldLauncher.native_library = lambda self: told  # type: ignore[method-assign]
    assert invoke(OldLauncher(), "native_library") is told


@pytest.mark.parametrize(("role", "attribute", "entry"), _RETIRED, ids=[a for _, a, _ in _RETIRED])
def test_from_the_version_that_removes_it_a_retired_attribute_is_refused_naming_its_replacement(
    jt_fake_entry_points: MakeRegistry, removed: str, role: type, attribute: str, entry: Retired
) -> None:
    registry = _register(jt_fake_entry_points, _old(role, attribute))
    with pytest.warns(RuntimeWarning) as caught:
        record = {r.name: r for r in registry.list_plugins()}["questions"]
    assert record.status == FAILED
    (message,) = [str(w.message) for w in caught if "'questions'" in str(w.message)]
    assert message == (
        f"jt plugin 'questions' from questions-dist 0.0.0 registered the {role.__name__} "
        f"{__name__}.Old{role.__name__}, which sets an attribute jt-core no longer reads: {attribute}, replaced by "
        f"{entry.replacement}. Move what it declares to the replacement and drop the attribute; set "
        "JT_DISABLE_PLUGINS=questions to skip the plugin."
    )
    assert registry.backends.get("quiet") is None and registry.launchers.get("quiet", []) == []
    assert "quiet" not in [d.name for _, d in registry.dialects]
    np.testing.assert_array_equal(np.asarray(_cpu_add()), 2 * np.arange(64, dtype=np.float32))


def _cpu_add() -> Any:
    x = jnp.arange(64, dtype=jnp.float32)
    return jax.jit(lambda a: jt.triton_call(a, a, kernel=sample_add_kernel, out_shape=a, grid=2, n=64, BLOCK=32))(x)


@pytest.mark.parametrize("version", ["below", "at", "above"])
def test_a_retired_attribute_works_until_the_version_that_removes_it(
    jt_fake_entry_points: MakeRegistry, monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    major, minor, _ = _numbers(REMOVED_IN)
    monkeypatch.setattr(
        jt_version,
        "__version__",
        {"below": f"{major}.{minor - 1}.99", "at": REMOVED_IN, "above": f"{major}.{minor + 1}.0"}[version],
    )
    backend = _old(Backend, "cacheable")
    registry = _register(jt_fake_entry_points, backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status = registry.list_plugins()[-1].status
    kinds = {w.category for w in caught if "'questions'" in str(w.message)}
    if version == "below":
        assert (status, kinds) == (LOADED, {DeprecationWarning})
        assert registry.backend("quiet") is backend
    else:
        assert (status, kinds) == (FAILED, {RuntimeWarning})


def test_from_the_version_that_removes_them_every_retired_attribute_a_launcher_sets_is_named_and_strict_mode_raises(
    jt_fake_entry_points: MakeRegistry, removed: str
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


def test_from_the_version_that_removes_it_a_backend_whose_target_takes_the_call_is_refused_naming_what_replaced_it(
    jt_fake_entry_points: MakeRegistry, removed: str
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
    assert registry.records["questions"].deprecations == []


def test_the_writing_a_backend_page_lists_every_retired_name_and_the_version_that_refuses_it() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "pages" / "writing-a-backend.md"
    if not page.is_file():
        pytest.skip("the docs are not in this checkout")
    rows = [line for line in page.read_text().splitlines() if line.startswith("| `")]
    names = [(role, attribute, entry) for role, attribute, entry in _RETIRED] + [
        (role, f"{method}({parameter}", entry)
        for role, methods in RETIRED_PARAMETERS.items()
        for method, parameters in methods.items()
        for parameter, entry in parameters.items()
    ]
    for role, name, entry in names:
        (row,) = [row for row in rows if row.startswith(f"| `{role.__name__}.{name}")]
        assert row.endswith(f"| {entry.removed_in} |"), row
