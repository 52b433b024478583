"""What jt checks when a plugin registers a backend, launcher or dialect (the role's class attributes and their
types, the platform it serves, the signature of every contract method it overrides), and the plugin names it is
given in ``JT_LOAD_PLUGINS`` / ``JT_DISABLE_PLUGINS``. A plugin that fails a check fails alone: the other plugins
and the CPU backend keep working."""

from __future__ import annotations

import inspect
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jt_core as jt
from jt_core import hookimpl
from jt_core.cpu.interpreter_launcher import CpuLauncher
from jt_core.errors import PluginLoadError
from jt_core.plugin.records import FAILED, LOADED
from jt_core.plugin.registry import Registry
from jt_core.plugin.roles import ROLES, Backend, CompileRequest, Dialect, Launcher, contract_methods, invoke
from jt_core.plugin.validation import contract_problems
from jt_core.plugin.values import CompiledKernel, Target
from jt_core.testing import fake_entry_point, sample_add_kernel
from jt_core.testing._calls import sample_call
from jt_core.triton_dialect import TritonDialect

MakeRegistry = Callable[..., Registry]


class GoodLauncher(CpuLauncher):
    """Another plugin's CPU launcher, which keeps the contract."""

    name = "good"
    priority = -5


class NamelessLauncher(Launcher):
    """Forgets its name."""

    platform = "cpu"

    def lower(
        self, ctx: Any, call: Any, kernels: Sequence[CompiledKernel], operands: Sequence[Any], device: Any
    ) -> Any:
        raise AssertionError("never registered")


class PlatformlessBackend(Backend):
    """Forgets its platform."""

    def target(self) -> Target:
        return Target("nowhere", "n1", 32)

    def compile(self, request: CompileRequest) -> CompiledKernel:
        raise AssertionError("never registered")


class Components:
    """A plugin registering the given components: those of a platform when asked for it, when ``asked`` is true;
    every one, whatever the platform, when it is false (a hook written for one platform)."""

    def __init__(self, *components: Any, asked: bool = True) -> None:
        self.components, self.asked = components, asked

    def _of(self, role: type, platform: str | None) -> list[Any]:
        every = platform is None or not self.asked
        return [c for c in self.components if isinstance(c, role) and (every or c.platform == platform)]

    @hookimpl
    def jt_register_backends(self, platform: str | None) -> list[Backend]:
        return self._of(Backend, platform)

    @hookimpl
    def jt_register_launchers(self, platform: str | None) -> list[Launcher]:
        return self._of(Launcher, platform)

    @hookimpl
    def jt_register_dialects(self) -> list[Dialect]:
        return [c for c in self.components if isinstance(c, Dialect)]


def _load(make: MakeRegistry, *components: Any, asked: bool = True, **environ: str) -> tuple[Registry, str]:
    """A registry with the plugin 'faulty' (registering ``components``) beside the plugin 'good', loaded for the
    CPU; returns it and the one warning about 'faulty'."""
    registry = make(
        [
            fake_entry_point("faulty", Components(*components, asked=asked), distribution="jt-faulty", version="1.0"),
            fake_entry_point("good", Components(GoodLauncher()), distribution="jt-good"),
        ],
        environ,
    )
    with pytest.warns(RuntimeWarning) as caught:
        registry.collect("cpu")
    (message,) = [str(w.message) for w in caught if "'faulty'" in str(w.message)]
    return registry, message


def _the_others_work(registry: Registry) -> None:
    """The plugin 'faulty' failed and provides nothing; 'good' is loaded, and CPU calls run through the built-in
    launchers and through 'good''s."""
    records = {r.name: r for r in registry.list_plugins()}
    assert records["faulty"].status == FAILED
    assert (records["faulty"].platforms, records["faulty"].launchers, records["faulty"].dialects) == ([], [], [])
    assert records["good"].status == LOADED and records["good"].launchers == ["cpu:good"]
    x = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    y = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    for launcher in (None, "good"):
        out = jax.jit(
            lambda a, b, launcher=launcher: jt.triton_call(
                a, b, kernel=sample_add_kernel, out_shape=a, grid=2, n=64, BLOCK=32, launcher=launcher
            )
        )(x, y)
        np.testing.assert_array_equal(np.asarray(out), x + y)


def _fails_alone(make: MakeRegistry, component: Any, what: str, problems: list[str]) -> None:
    """A plugin registering ``component`` beside a good one: it alone is refused, with exactly ``problems``."""
    registry = make(
        [
            fake_entry_point("faulty", Components(component), distribution="jt-faulty", version="1.0"),
            fake_entry_point("good", Components(GoodLauncher()), distribution="jt-good"),
        ]
    )
    with pytest.warns(RuntimeWarning) as caught:
        registry.ensure_loaded()
    (message,) = [str(w.message) for w in caught if "'faulty'" in str(w.message)]
    assert message == _refusal(what, type(component), *problems)
    _the_others_work(registry)


def _refusal(what: str, cls: type, *problems: str) -> str:
    return (
        f"jt plugin 'faulty' from jt-faulty 1.0 registered the {what} {cls.__module__}.{cls.__qualname__}, which "
        f"{'; and '.join(problems)}; set JT_DISABLE_PLUGINS=faulty to skip the plugin."
    )


# -- class attributes ----------------------------------------------------------------------------------------


def test_a_launcher_without_a_name_fails_its_plugin_alone(jt_fake_entry_points: MakeRegistry) -> None:
    registry, message = _load(jt_fake_entry_points, NamelessLauncher())
    assert message == _refusal(
        "Launcher",
        NamelessLauncher,
        "does not set name, a non-empty string every Launcher has: set it in the class body",
    )
    _the_others_work(registry)


def test_a_backend_without_a_platform_fails_its_plugin_alone(jt_fake_entry_points: MakeRegistry) -> None:
    registry, message = _load(jt_fake_entry_points, PlatformlessBackend(), asked=False)
    assert message == _refusal(
        "Backend",
        PlatformlessBackend,
        "does not set platform, a non-empty string every Backend has: set it in the class body",
    )
    _the_others_work(registry)


class MistypedLauncher(GoodLauncher):
    name = "mistyped"
    priority = "high"  # type: ignore[assignment]
    fallback_rules = ["calls it refuses"]  # type: ignore[assignment]  # noqa: RUF012


class UnnamedDialect(TritonDialect):
    name = ""


@pytest.mark.parametrize(
    ("component", "what", "problems"),
    [
        (
            MistypedLauncher(),
            "Launcher",
            [
                "sets priority = 'high', which is not an int: make it an int",
                "sets fallback_rules = ['calls it refuses'], which is not a tuple of non-empty strings: make it a "
                "tuple of non-empty strings",
            ],
        ),
        (UnnamedDialect(), "Dialect", ["sets name = '', which is not a non-empty string: make it a non-empty string"]),
    ],
    ids=["launcher", "dialect"],
)
def test_a_class_attribute_of_the_wrong_type_fails_its_plugin_alone(
    jt_fake_entry_points: MakeRegistry, component: Any, what: str, problems: list[str]
) -> None:
    _fails_alone(jt_fake_entry_points, component, what, problems)


# -- the platform ---------------------------------------------------------------------------------------------


class GpuLauncher(GoodLauncher):
    """Says it serves 'gpu', and is returned when jt asks for the CPU's launchers."""

    name = "gpu-ish"
    platform = "gpu"


def test_a_launcher_returned_for_another_platform_than_it_serves_fails_its_plugin_alone(
    jt_fake_entry_points: MakeRegistry,
) -> None:
    registry, message = _load(jt_fake_entry_points, GpuLauncher(), asked=False)
    assert message == _refusal(
        "Launcher",
        GpuLauncher,
        "serves platform 'gpu' but was returned when jt asked for platform 'cpu': return it only when asked for "
        "'gpu' (or for every platform, None), or set platform = 'cpu'",
    )
    _the_others_work(registry)
    assert "gpu" not in registry.launchers


def test_a_hook_that_does_not_take_the_platform_may_return_every_platform(jt_fake_entry_points: MakeRegistry) -> None:
    class Everything:
        @hookimpl
        def jt_register_launchers(self) -> list[Launcher]:
            return [GpuLauncher(), GoodLauncher()]

    registry = jt_fake_entry_points([fake_entry_point("every", Everything())], {"JT_STRICT_PLUGINS": "1"})
    assert [launcher.name for launcher in registry.launchers_for("cpu")][-1] == "good"
    assert registry.records["every"].launchers == ["gpu:gpu-ish", "cpu:good"]


# -- the signatures of the contract methods --------------------------------------------------------------------


class MisnamedLauncher(GoodLauncher):
    name = "misnamed"

    def fallback_reason(self, call: Any, kernel: Any, device: Any) -> str | None:  # type: ignore[override]
        return None


class PositionalLauncher(GoodLauncher):
    name = "positional"

    def needs_tuning_ahead(self, call: Any, /) -> bool:  # type: ignore[override]
        return False


class KeywordBackend(PlatformlessBackend):
    platform = "cpu"

    def target(self, *, backend_arguments: Any, devices: Any) -> Target:  # type: ignore[override]
        return Target("cpu", "c1", 1)


class UnofferedDialect(TritonDialect):
    name = "unoffered"

    def make_source(self, fn: Any, spec: Any, target: Target) -> Any:  # type: ignore[override]
        return super().make_source(fn, spec, target)

    claims = True  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("component", "what", "problems"),
    [
        (
            MisnamedLauncher(),
            "Launcher",
            [
                "has fallback_reason(call: 'Any', kernel: 'Any', device: 'Any') -> 'str | None', whose parameter "
                "'kernel' jt does not offer (did you mean 'kernels'?): jt offers Launcher.fallback_reason the "
                "arguments call, kernels, device. Rename the parameter to one of those, give it a default, or drop it"
            ],
        ),
        (
            PositionalLauncher(),
            "Launcher",
            [
                "has needs_tuning_ahead(call: 'Any', /) -> 'bool', whose parameter 'call' is positional-only, but jt "
                "passes Launcher.needs_tuning_ahead's arguments by name (call): drop the '/'"
            ],
        ),
        (
            UnofferedDialect(),
            "Dialect",
            [
                "sets claims = True, which is not a method: jt calls Dialect.claims(kernel); define it as a method",
                "has make_source(fn: 'Any', spec: 'Any', target: 'Target') -> 'Any', whose parameter 'fn' jt does "
                "not offer: jt offers Dialect.make_source the arguments kernel, specialization, target. Rename the "
                "parameter to one of those, give it a default, or drop it",
                "has make_source(fn: 'Any', spec: 'Any', target: 'Target') -> 'Any', whose parameter 'spec' jt does "
                "not offer (did you mean 'specialization'?): jt offers Dialect.make_source the arguments kernel, "
                "specialization, target. Rename the parameter to one of those, give it a default, or drop it",
            ],
        ),
        (
            KeywordBackend(),
            "Backend",
            [
                "has target(*, backend_arguments: 'Any', devices: 'Any') -> 'Target', whose parameter 'devices' jt "
                "does not offer (did you mean 'device'?): jt offers Backend.target the arguments backend_arguments, "
                "device, name. Rename the parameter to one of those, give it a default, or drop it"
            ],
        ),
    ],
    ids=["misnamed", "positional-only", "not-offered", "keyword-only"],
)
def test_an_override_that_takes_a_parameter_jt_does_not_offer_fails_its_plugin_alone(
    jt_fake_entry_points: MakeRegistry, component: Any, what: str, problems: list[str]
) -> None:
    _fails_alone(jt_fake_entry_points, component, what, problems)


class NarrowLauncher(GoodLauncher):
    """Takes fewer arguments than jt offers, some with defaults or by ``**kwargs``: all of it is fine."""

    name = "narrow"

    def fallback_reason(self, call: Any, *extra: Any, hint: str = "", **rest: Any) -> str | None:  # type: ignore[override]
        self.seen = (call.name, extra, hint, sorted(rest))
        return None

    def needs_tuning_ahead(self) -> bool:  # type: ignore[override]
        return False

    @staticmethod
    def passes_tensor_descriptors(parameters: Sequence[str]) -> bool:  # type: ignore[override]
        return False


def test_an_override_may_take_fewer_arguments_defaults_and_kwargs(jt_fake_entry_points: MakeRegistry) -> None:
    launcher = NarrowLauncher()
    assert contract_problems(launcher) == []
    registry = jt_fake_entry_points([fake_entry_point("narrow", Components(launcher))], {"JT_STRICT_PLUGINS": "1"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        registry.collect("cpu")
    x = jnp.arange(64, dtype=jnp.float32)
    jax.jit(
        lambda a: jt.triton_call(a, a, kernel=sample_add_kernel, out_shape=a, grid=2, n=64, BLOCK=32, launcher="narrow")
    )(x)
    assert launcher.seen == ("sample_add_kernel", (), "", ["device", "kernels"])


def test_under_strict_mode_a_plugin_that_breaks_the_contract_raises(jt_fake_entry_points: MakeRegistry) -> None:
    registry = jt_fake_entry_points(
        [fake_entry_point("faulty", Components(MisnamedLauncher()), distribution="jt-faulty", version="1.0")],
        {"JT_STRICT_PLUGINS": "1"},
    )
    with pytest.raises(
        PluginLoadError, match=r"whose parameter 'kernel' jt does not offer \(did you mean 'kernels'\?\)"
    ):
        registry.collect("cpu")


def test_what_jt_offers_a_method_is_the_signature_the_role_declares() -> None:
    for role in ROLES:
        for method, offered in contract_methods(role).items():
            declared = list(inspect.signature(getattr(role, method)).parameters)
            assert list(offered) == declared[1:], f"{role.__name__}.{method}"
    assert "row_major" not in contract_methods(Launcher)  # a helper, not a question


def test_jt_offering_a_method_other_arguments_than_its_role_declares_is_a_bug_named_as_such() -> None:
    call = sample_call()
    bug = r"jt offers Launcher.needs_tuning_ahead\(\) \['call', 'calls'\], but the contract declares "
    with pytest.raises(TypeError, match=bug + r"Launcher.needs_tuning_ahead\(call\); this is a bug in jt-core"):
        invoke(GoodLauncher(), "needs_tuning_ahead", call=call, calls=[call])
    with pytest.raises(TypeError, match=r"declares Launcher.passes_tensor_descriptors\(call, parameters\)"):
        invoke(GoodLauncher(), "passes_tensor_descriptors", call=call)
    assert invoke(GoodLauncher(), "needs_tuning_ahead", call=call) is False


# -- installed for real: `python -m jt_core plugins` -----------------------------------------------------------

NAMELESS = """
from jt_core.plugin import Launcher, hookimpl

JT_PLUGIN_API = 1

class NamelessLauncher(Launcher):
    platform = "cpu"

    def lower(self, ctx, call, kernels, operands, device):
        raise AssertionError("never registered")

@hookimpl
def jt_register_launchers():
    return [NamelessLauncher()]
"""


def test_an_installed_launcher_without_a_name_is_listed_with_its_error_and_cpu_calls_work(
    tmp_path: pathlib.Path,
) -> None:
    info = tmp_path / "jt_nameless-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: jt-nameless\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[jt]\nnameless = jt_nameless\n")
    (tmp_path / "jt_nameless.py").write_text(textwrap.dedent(NAMELESS))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "JT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("JT_STRICT_PLUGINS", None)
    script = (
        "import jax, jax.numpy as jnp, numpy as np, jt_core as jt\n"
        "from jt_core.testing import sample_add_kernel\n"
        "x = jnp.arange(64, dtype=jnp.float32)\n"
        "out = jax.jit(lambda a: jt.triton_call(a, a, kernel=sample_add_kernel, out_shape=a, grid=2, n=64,"
        " BLOCK=32))(x)\n"
        "print(np.array_equal(np.asarray(out), 2 * np.arange(64, dtype=np.float32)))\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert run.stdout.split() == ["True"]
    assert "RuntimeWarning: jt plugin 'nameless' from jt-nameless 1.0 registered the Launcher" in run.stderr
    listing = subprocess.run(
        [sys.executable, "-m", "jt_core", "plugins", "--json"], capture_output=True, text=True, env=env, check=True
    )
    nameless = next(entry for entry in json.loads(listing.stdout) if entry["name"] == "nameless")
    assert nameless["status"] == "failed"
    assert nameless["error"] == (
        "registered the Launcher jt_nameless.NamelessLauncher, which does not set name, a non-empty string every "
        "Launcher has: set it in the class body; set JT_DISABLE_PLUGINS=nameless to skip the plugin."
    )


# -- plugin names in JT_LOAD_PLUGINS and JT_DISABLE_PLUGINS ---------------------------------------------------


def _named(make: MakeRegistry, **environ: str) -> tuple[Registry, list[str]]:
    """A registry over the plugins 'good' and 'spare' with ``environ``, loaded twice; returns it and the warnings."""
    registry = make(
        [fake_entry_point("good", Components(GoodLauncher())), fake_entry_point("spare", Components())], environ
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        registry.collect("cpu")
        registry.loader.unload()  # as after an interrupted load: loaded again from the start
        registry.ensure_loaded()
    return registry, [str(w.message) for w in caught]


def test_a_misspelt_name_in_jt_disable_plugins_is_warned_about_once_naming_the_installed_plugins(
    jt_fake_entry_points: MakeRegistry,
) -> None:
    registry, messages = _named(jt_fake_entry_points, JT_DISABLE_PLUGINS="spaer")
    assert messages == [
        "JT_DISABLE_PLUGINS names a plugin that no installed distribution provides: 'spaer' (did you mean "
        "'spare'?); it has no effect. The installed jt plugins are: good, spare (`python -m jt_core plugins` lists "
        "them). Correct the name in JT_DISABLE_PLUGINS."
    ]
    assert registry.records["spare"].status == LOADED


def test_a_misspelt_name_in_jt_load_plugins_is_warned_about_once_naming_the_installed_plugins(
    jt_fake_entry_points: MakeRegistry,
) -> None:
    registry, messages = _named(jt_fake_entry_points, JT_LOAD_PLUGINS="good,spaer,elsewhere")
    assert messages == [
        "JT_LOAD_PLUGINS names plugins that no installed distribution provides: 'spaer' (did you mean 'spare'?), "
        "'elsewhere'; they have no effect. The installed jt plugins are: good, spare (`python -m jt_core plugins` "
        "lists them). Correct the names in JT_LOAD_PLUGINS."
    ]
    assert (registry.records["good"].status, registry.records["spare"].status) == (LOADED, "blocked")
    _the_good_launcher_works()


def _the_good_launcher_works() -> None:
    x = np.random.default_rng(2).standard_normal(64).astype(np.float32)
    out = jax.jit(
        lambda a: jt.triton_call(a, a, kernel=sample_add_kernel, out_shape=a, grid=2, n=64, BLOCK=32, launcher="good")
    )(x)
    np.testing.assert_array_equal(np.asarray(out), 2 * x)


def test_a_built_in_plugin_in_jt_disable_plugins_is_said_to_stay_loaded(jt_fake_entry_points: MakeRegistry) -> None:
    registry, messages = _named(jt_fake_entry_points, JT_DISABLE_PLUGINS="cpu,spare")
    assert messages == [
        "JT_DISABLE_PLUGINS names 'cpu', a plugin built into jt-core, which is always loaded: the name has no "
        "effect. Drop it from JT_DISABLE_PLUGINS."
    ]
    assert registry.records["cpu"].status == "builtin" and registry.records["spare"].status == "blocked"
    _the_good_launcher_works()


def test_installed_names_in_the_plugin_variables_are_taken_without_a_word(jt_fake_entry_points: MakeRegistry) -> None:
    registry, messages = _named(jt_fake_entry_points, JT_LOAD_PLUGINS="good, spare, cpu", JT_DISABLE_PLUGINS="spare")
    assert messages == []
    assert (registry.records["good"].status, registry.records["spare"].status) == (LOADED, "blocked")
