"""jt_core.testing: markers (hardware, plugins), the --jt-require-gpu option, fixtures, and the observer hook."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jt_core as jt
from jt_core import hookimpl
from jt_core.errors import KernelCompileError
from jt_core.plugin.roles import CompileRequest
from jt_core.plugin.values import CompiledKernel
from jt_core.testing import HookRecorder, run_cases, sample_add_kernel
from jt_core.testing.markers import has_platform

pytest_plugins = ["pytester"]

MARKED = """
import pytest

@pytest.mark.cuda
def test_needs_cuda():
    pass

@pytest.mark.rocm
def test_needs_rocm():
    pass

def test_plain():
    pass
"""


@pytest.mark.skipif(has_platform("cuda") or has_platform("rocm"), reason="this machine has a GPU")
def test_hardware_markers_skip_without_a_gpu(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(MARKED)
    result = pytester.runpytest("-p", "jt_core.testing", "-rs")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["*needs a cuda device, and JAX sees none*"])


@pytest.mark.skipif(has_platform("cuda") or has_platform("rocm"), reason="this machine has a GPU")
def test_require_gpu_option_turns_skips_into_failures(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(MARKED)
    result = pytester.runpytest("-p", "jt_core.testing", "--jt-require-gpu")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(["*--jt-require-gpu is set*"])


PLUGIN_MARKED = """
import pytest

@pytest.mark.requires_plugin("marked")
def test_needs_the_installed_plugin():
    pass

@pytest.mark.requires_plugin("marked", "jt_no_such_plugin")
def test_needs_a_missing_plugin():
    pass
"""


def test_requires_plugin_skips_unless_every_plugin_named_is_installed(pytester: pytest.Pytester) -> None:
    dist = pytester.path / "jt_marked_example-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: jt-marked-example\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[jt]\nmarked = jt_marked_example_never_imported\n")
    pytester.syspathinsert()
    pytester.makepyfile(PLUGIN_MARKED)
    result = pytester.runpytest("-p", "jt_core.testing", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*needs the jt plugins ?'jt_no_such_plugin'?, which no installed distribution*"])


def test_hook_recorder_sees_compile_requests(jt_hook_recorder: HookRecorder) -> None:
    x = jnp.arange(64, dtype=jnp.float32)
    jax.jit(lambda a: jt.triton_call(a, a, kernel=sample_add_kernel, out_shape=a, grid=2, n=64, BLOCK=32, name="rec"))(
        x
    ).block_until_ready()
    assert "jt_compile_kernel" in jt_hook_recorder.names()
    request = next(kw["request"] for name, kw in jt_hook_recorder.calls if name == "jt_compile_kernel")
    assert request.call.name == "rec"
    assert request.target.platform == "cpu"


def test_observer_wrapper_sees_every_compile(jt_register_plugin: Any) -> None:
    seen: list[tuple[str, str]] = []

    class Observer:
        @hookimpl(wrapper=True)
        def jt_compile_kernel(self, request: CompileRequest) -> Any:
            result: CompiledKernel = yield
            seen.append((request.call.name, result.target.platform))
            return result

    jt_register_plugin(Observer(), name="observer")
    x = jnp.arange(64, dtype=jnp.float32)
    out = jax.jit(
        lambda a: jt.triton_call(a, a, kernel=sample_add_kernel, out_shape=a, grid=2, n=64, BLOCK=32, name="obs")
    )(x)
    np.testing.assert_array_equal(out, 2 * np.arange(64, dtype=np.float32))
    assert ("obs", "cpu") in seen


def test_plugin_can_replace_the_compile(jt_register_plugin: Any) -> None:
    class Refusing:
        @hookimpl(tryfirst=True)
        def jt_compile_kernel(self, request: CompileRequest) -> CompiledKernel | None:
            if request.call.name == "refused":
                raise KernelCompileError(f"this plugin refuses to compile {request.call.name!r}")
            return None

    jt_register_plugin(Refusing(), name="refusing")
    x = jnp.arange(64, dtype=jnp.float32)
    with pytest.raises(KernelCompileError, match=r"^this plugin refuses to compile 'refused'"):
        jax.jit(
            lambda a: jt.triton_call(
                a, a, kernel=sample_add_kernel, out_shape=a, grid=2, n=64, BLOCK=32, name="refused"
            )
        ).lower(x)


MISNAMED = """
import pytest
from jt_core.cpu.interpreter_launcher import CpuLauncher
from jt_core.testing import LauncherConformance

class MisnamedLauncher(CpuLauncher):
    name = "misnamed"

    def fallback_reason(self, call, kernel, device):
        return None

class TestMisnamedLauncher(LauncherConformance):
    @pytest.fixture
    def launcher(self):
        return MisnamedLauncher()
"""


def test_the_conformance_suite_fails_a_component_jt_would_refuse_at_registration(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(MISNAMED)
    result = pytester.runpytest("-p", "jt_core.testing", "-k", "registration_checks")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*jt refuses the plugin that registers it: it has fallback_reason(call, kernel, device), whose parameter "
            "'kernel' jt does not offer (did you mean 'kernels'?): jt offers Launcher.fallback_reason the arguments "
            "call, kernels, device. Rename the parameter to one of those, give it a default, or drop it*"
        ]
    )


# A launcher plugin's conformance suite, as its author writes it: the fixture registers the plugin (installed, its
# entry point would), and the class names the launcher under test. {body} is the launcher's lower().
LAUNCHER_SUITE = """
import numpy as np
import pytest
from jt_core.plugin import Launcher, emit_host_callback, hookimpl, run_on_host
from jt_core.testing import LauncherConformance


class TheirLauncher(Launcher):
    platform = "cpu"
    name = "theirs"
    priority = -100

    def fallback_reason(self, call, kernels, device):
        return {reason!r}

    def lower(self, ctx, call, kernels, operands, device):
        def run(*arrays):
            {body}

        return emit_host_callback(ctx, run, operands)


class TheirPlugin:
    @hookimpl
    def jt_register_launchers(self, platform):
        return [TheirLauncher()] if platform in (None, "cpu") else []


class TestTheirLauncher(LauncherConformance):
    expected_in_lowering = "callback"

    @pytest.fixture
    def launcher(self, jt_register_plugin):
        jt_register_plugin(TheirPlugin(), name="theirs")
        return TheirLauncher()
"""
RIGHT = "return run_on_host(call, kernels[0], arrays)"


def test_the_launcher_suite_passes_a_launcher_that_lowers_and_runs_calls_itself(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(LAUNCHER_SUITE.format(reason=None, body=RIGHT))
    result = pytester.runpytest("-p", "jt_core.testing")
    result.assert_outcomes(passed=7)


def test_the_launcher_suite_fails_a_launcher_whose_calls_another_launcher_lowers(pytester: pytest.Pytester) -> None:
    """A launcher that hands every call on: the built-in one lowers it, and its text has "callback" too."""
    pytester.makepyfile(LAUNCHER_SUITE.format(reason="never mine", body=RIGHT))
    result = pytester.runpytest("-p", "jt_core.testing", "-k", "sample_call")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            "*launcher 'theirs' was named for the sample call on 'cpu', but no TheirLauncher.lower() lowered it: the "
            "launcher registered under that name is another class, or fallback_reason() handed the call to the "
            "platform's next launcher*"
        ]
    )


@pytest.mark.parametrize(
    ("body", "fails"),
    [
        ("return [np.zeros_like(arrays[0])]", 2),  # computes nothing
        ("call.batch is None or 1 / 0\n            return run_on_host(call, kernels[0], arrays)", 1),  # not under vmap
    ],
    ids=["computes-nothing", "fails-under-vmap"],
)
def test_the_launcher_suite_runs_the_calls_the_launcher_lowers(
    pytester: pytest.Pytester, body: str, fails: int
) -> None:
    pytester.makepyfile(LAUNCHER_SUITE.format(reason=None, body=body))
    result = pytester.runpytest("-p", "jt_core.testing", "-k", "runs_sample_call")
    result.assert_outcomes(failed=fails, passed=2 - fails)


@pytest.mark.parametrize(
    ("cases", "passed", "says"),
    [
        ("def test_a():\n    assert jax.device_count() == 3\n", 1, None),
        ("def test_a():\n    assert jax.device_count() == 2\n", 1, "assert 3 == 2"),
        ("def test_a():\n    pytest.skip('no')\n", 0, "skipped"),
        ("def test_a():\n    pass\n", 2, "at least 2 to pass"),
    ],
    ids=["passes", "fails", "skips", "too-few"],
)
def test_run_cases_fails_unless_every_case_passes(tmp_path: Any, cases: str, passed: int, says: str | None) -> None:
    module = tmp_path / "cases_here.py"
    module.write_text("import jax\nimport pytest\n\n\n" + cases)
    if says is None:
        assert "1 passed" in run_cases(module, passed=passed, host_devices=3)
        return
    with pytest.raises(pytest.fail.Exception, match=says):
        run_cases(module, passed=passed, host_devices=3)
