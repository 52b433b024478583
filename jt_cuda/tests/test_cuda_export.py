"""``jax.export`` for ``cuda``, as the documentation shows it: the custom calls of jt's launchers need JAX's safety
check disabled for their targets (and nothing else); the artifact keeps them through serialisation; on a GPU it
runs in a fresh process once jt-cuda's handlers are registered there."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import triton
from cuda_testlib import add_call, f32
from jax import export

import jt_core as jt
from jt_core import _compat
from jt_core.testing import autotuned_scale_inplace_kernel
from jt_core.testing.markers import has_platform

N = 1024
#: The targets the documentation tells users to allow (Transformations, jax.export).
DOCUMENTED_TARGETS = (
    "triton_kernel_call_jt_cuda",
    "triton_kernel_call_jt_cuda_preloaded",
    "__gpu$xla.gpu.triton",
)


def _add(launcher: str) -> Any:
    return lambda x, y: add_call(x, y, compute_capability=90, launcher=launcher)


def _tuned(launcher: str) -> Any:
    def scale(x: Any, y: Any) -> Any:
        return jt.triton_call(
            x, N, 2.0, kernel=autotuned_scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0},
            grid=lambda meta: (triton.cdiv(N, meta["BLOCK"]),), compute_capability=90, launcher=launcher,
        ) + y  # fmt: skip

    return scale


@pytest.mark.parametrize(
    ("launcher", "make", "target"),
    [
        ("jt", _add, "triton_kernel_call_jt_cuda_preloaded"),
        # Without a device every configuration travels, tuned where it runs; with one, the winner is exported.
        ("jt", _tuned, ("triton_kernel_call_jt_cuda", "triton_kernel_call_jt_cuda_preloaded")),
        ("xla", _add, "__gpu$xla.gpu.triton"),
        # Without a device to tune on, handed to jt's handler; with one, the winner goes to XLA's Triton call.
        ("xla", _tuned, ("triton_kernel_call_jt_cuda", "__gpu$xla.gpu.triton")),
    ],
    ids=["jt", "jt-autotuned", "xla", "xla-autotuned"],
)
def test_an_export_for_cuda_needs_only_the_documented_targets_allowed(
    launcher: str, make: Any, target: str | tuple[str, str]
) -> None:
    if isinstance(target, tuple):
        target = target[has_platform("cuda")]
    f = jax.jit(make(launcher))
    with pytest.raises(ValueError, match=re.escape(f"custom_call @{target}")):
        export.export(f, platforms=["cuda"])(f32((N,)), f32((N,)))  # JAX's check refuses jt's targets
    exported = export.export(
        f,
        platforms=["cuda"],
        disabled_checks=[export.DisabledSafetyCheck.custom_call(name) for name in DOCUMENTED_TARGETS],
    )(f32((N,)), f32((N,)))
    restored = export.deserialize(exported.serialize())
    assert set(re.findall(r"custom_call @([\w$.]+)", restored.mlir_module())) == {target}
    assert restored.platforms == ("cuda",) and [a.shape for a in restored.out_avals] == [(N,)]


#: Runs in a fresh process on a GPU: jt-cuda's handlers registered, nothing lowered there.
_FRESH_PROCESS = textwrap.dedent(
    """
    import sys
    import numpy as np
    from jax import export
    import jt_cuda

    jt_cuda.register_handlers()
    exported = export.deserialize(bytearray(open(sys.argv[1], "rb").read()))
    inputs = np.load(sys.argv[2])
    np.save(sys.argv[3], np.asarray(exported.call(inputs["x"], inputs["y"])))
    """
)


@pytest.mark.cuda
@pytest.mark.parametrize("make", [_add, _tuned], ids=["single", "autotuned"])
def test_an_exported_cuda_call_runs_in_a_fresh_process(tmp_path: Path, make: Any) -> None:
    f = jax.jit(make("jt"))
    exported = export.export(
        f,
        platforms=["cuda"],
        disabled_checks=[export.DisabledSafetyCheck.custom_call(name) for name in DOCUMENTED_TARGETS],
    )(f32((N,)), f32((N,)))
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    (tmp_path / "f.jax").write_bytes(exported.serialize())
    np.savez(tmp_path / "inputs.npz", x=x, y=y)
    subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, str(tmp_path / "f.jax"), str(tmp_path / "inputs.npz"),
         str(tmp_path / "out.npy")],
        check=True, capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    want = x + y if make is _add else 2 * x + y
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want, rtol=1e-6)


# -- jt.export: jax.export with jt's custom calls named ------------------------------------------------------


@pytest.mark.parametrize(
    ("launcher", "make", "target"),
    [
        ("jt", _add, "triton_kernel_call_jt_cuda_preloaded"),
        ("jt", _tuned, ("triton_kernel_call_jt_cuda", "triton_kernel_call_jt_cuda_preloaded")),
        ("xla", _add, "__gpu$xla.gpu.triton"),
    ],
    ids=["jt", "jt-autotuned", "xla"],
)
def test_jt_export_names_exactly_the_custom_calls_its_launchers_emitted(
    launcher: str, make: Any, target: str | tuple[str, str]
) -> None:
    if isinstance(target, tuple):
        target = target[has_platform("cuda")]
    exported = jt.export(make(launcher), platforms=["cuda"])(f32((N,)), f32((N,)))
    assert [check.is_custom_call() for check in exported.disabled_safety_checks] == [target]
    restored = export.deserialize(exported.serialize())
    assert set(re.findall(r"custom_call @([\w$.]+)", restored.mlir_module())) == {target}


def test_a_jt_export_for_the_cpu_and_cuda_runs_its_cpu_half_here() -> None:
    rng = np.random.default_rng(7)
    x, y = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    both = lambda x, y: add_call(x, y, compute_capability=90)  # noqa: E731
    exported = jt.export(both, platforms=["cpu", "cuda"])(f32((N,)), f32((N,)))
    assert [check.is_custom_call() for check in exported.disabled_safety_checks] == [
        "triton_kernel_call_jt_cuda_preloaded"
    ]
    restored = export.deserialize(exported.serialize())
    np.testing.assert_array_equal(np.asarray(restored.call(x, y)), x + y)


def test_jt_export_keeps_jaxs_refusal_of_a_custom_call_that_is_not_jts() -> None:
    def with_foreign_call(x: Any, y: Any) -> Any:
        foreign = jax.ffi.ffi_call("a_handler_of_the_users", f32((N,)))(x)
        return _add("jt")(foreign, y)

    with pytest.raises(ValueError, match="Cannot serialize code with custom calls") as refused:
        jt.export(with_foreign_call, platforms=["cuda"])(f32((N,)), f32((N,)))
    message = str(refused.value)
    assert "custom_call @a_handler_of_the_users" in message and "custom_call @triton_kernel_call" not in message
    if _compat.jaxlib_version() >= (0, 11):  # jax 0.10's message does not list the targets disabled
        assert "disabled for the following targets via disabled_checks: triton_kernel_call_jt_cuda_preloaded" in message


def test_jt_export_adds_jts_targets_to_the_checks_given() -> None:
    given = [export.DisabledSafetyCheck.custom_call("a_target_of_the_users")]
    exported = jt.export(_add("jt"), platforms=["cuda"], disabled_checks=given)(f32((N,)), f32((N,)))
    names = [check.is_custom_call() for check in exported.disabled_safety_checks]
    assert names == ["a_target_of_the_users", "triton_kernel_call_jt_cuda_preloaded"]


def test_without_a_compute_capability_the_first_export_error_says_what_the_second_would_be() -> None:
    f = jax.jit(lambda x, y: add_call(x, y, launcher="jt"))
    with pytest.raises(jt.KernelCallValueError) as refused:
        export.export(f, platforms=["cuda"])(f32((N,)), f32((N,)))
    message = str(refused.value)
    assert "pass compute_capability= to triton_call" in message
    assert "jax.export refuses unless disabled_checks names them" in message
    assert "jt.export(f, platforms=[...])(*args) exports with them named" in message
