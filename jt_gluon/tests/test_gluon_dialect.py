"""The Gluon dialect: recognising ``@gluon.jit`` kernels and building their source; refusal on the CPU."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from gluon_kernels import blocked_1d, memcpy_kernel, tile_axpy_kernel
from gluon_testlib import gluon_call
from triton.backends.compiler import Language

import jt_core as jt
from jt_core.call import kernel_params
from jt_core.errors import UnsupportedKernelError
from jt_core.plugin import facade
from jt_core.testing import DialectConformance, sample_add_kernel
from jt_gluon import _compat
from jt_gluon.dialect import GluonDialect


class TestGluonDialectConformance(DialectConformance):
    @pytest.fixture
    def dialect(self) -> GluonDialect:
        return GluonDialect()

    @pytest.fixture
    def sample_kernel(self) -> Any:
        return memcpy_kernel

    @pytest.fixture
    def foreign_kernel(self) -> Any:
        return sample_add_kernel


def test_the_cpu_backend_says_it_cannot_run_gluon_kernels() -> None:
    reason = facade.serve(facade.backend_for("cpu"), "unsupported_dialect_reason", dialect=GluonDialect())
    assert isinstance(reason, str) and "nor Triton's interpreter can execute them" in reason


def test_gluon_kernels_take_descriptors_with_their_shared_layout() -> None:
    assert GluonDialect().requires_descriptor_layout(memcpy_kernel) is True


def test_plain_triton_kernels_still_go_to_the_triton_dialect() -> None:
    assert facade.dialect_for(sample_add_kernel).name == "triton"
    assert facade.dialect_for(memcpy_kernel).name == "gluon"


def test_gluon_constexpr_annotations_are_detected() -> None:
    params = kernel_params(tile_axpy_kernel)
    assert [(p.name, p.is_constexpr) for p in params] == [
        ("x_ptr", False),
        ("y_ptr", False),
        ("out_ptr", False),
        ("M", False),
        ("N", False),
        ("alpha", False),
        ("BM", True),
        ("BN", True),
        ("load_layout", True),
        ("store_layout", True),
    ]


def test_source_is_a_gluon_source_keyed_by_full_parameter_path() -> None:
    layout = blocked_1d(32)
    call = gluon_call(memcpy_kernel, 500, {"n": 500, "BLOCK": 128, "layout": layout})
    spec = call.specialization(call.configs[0])
    source = GluonDialect().make_source(call.fn, spec, None)  # type: ignore[arg-type]
    assert isinstance(source, _compat.gluon_ast_source_class())
    assert source.language == Language.GLUON
    assert source.signature == {
        "in_ptr": "*fp32",
        "out_ptr": "*fp32",
        "n": "i32",
        "BLOCK": "constexpr",
        "layout": "constexpr",
    }
    assert source.constants == {(3,): 128, (4,): layout}
    assert source.attrs == {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}


def test_gluon_kernel_on_the_cpu_is_refused_naming_the_kernel() -> None:
    x = jnp.asarray(np.random.default_rng(0).standard_normal(500), jnp.float32)

    def f(a: Any) -> Any:
        return jt.triton_call(a, kernel=memcpy_kernel, out_shape=a, grid=4, n=500, BLOCK=128, layout=blocked_1d(32))

    with pytest.raises(UnsupportedKernelError, match=r"'memcpy_kernel': gluon kernels cannot run on the 'cpu'") as info:
        jax.jit(f)(x)
    assert "run it on a GPU platform" in str(info.value)


def test_plain_triton_kernel_still_runs_on_the_cpu_with_the_gluon_plugin_loaded() -> None:
    @triton.jit
    def double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)

    x = np.random.default_rng(1).standard_normal(40).astype(np.float32)
    out = jax.jit(lambda a: jt.triton_call(a, kernel=double, out_shape=a, grid=1, n=40, BLOCK=64))(x)
    np.testing.assert_array_equal(np.asarray(out), x * 2)


_PLAIN_CALL = """
import sys

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl

import jt_core as jt


@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


rng = np.random.default_rng()
x, y = (jnp.asarray(rng.standard_normal(100), jnp.float32) for _ in range(2))
out = jt.triton_call(x, y, kernel=add, out_shape=x, grid=2, n=100, BLOCK=64)
np.testing.assert_allclose(np.asarray(out), np.asarray(x) + np.asarray(y), rtol=1e-6)
statuses = {record.name: record.status for record in jt.list_plugins()}
print(statuses["gluon"], statuses["triton"])
print(" ".join(sorted(name for name in sys.modules if name.startswith("triton.experimental"))))
"""


def _plain_call(script: Any, cache: Any, **environ: str) -> tuple[str, str]:
    """Runs the plain call in a fresh process; returns the plugin statuses and the experimental modules imported."""
    import os
    import subprocess
    import sys

    unset = ("JT_LOAD_PLUGINS", "JT_DISABLE_PLUGINS", "JT_DISABLE_CACHE", "JT_CPU_COMPILE_CHECK")
    env = {name: value for name, value in os.environ.items() if name not in unset}
    env.update(JT_CACHE_DIR=str(cache), **environ)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, check=True)
    statuses, experimental = [*result.stdout.splitlines(), ""][:2]
    assert statuses == "loaded builtin", "the Gluon plugin was loaded and asked"
    return statuses, experimental


def test_a_plain_triton_call_imports_no_gluon_module(tmp_path: Any) -> None:
    """The Gluon dialect is asked about every kernel; it must answer without importing the Gluon language (nor any
    other experimental Triton language), which a plain Triton call never uses. Triton's own front end imports it
    (the CPU backend runs it on a kernel's first lowering on a machine, for the compiled path and the checks), so the
    first run runs the kernel in the interpreter without the checks."""
    script = tmp_path / "plain_call.py"
    script.write_text(_PLAIN_CALL)
    _, experimental = _plain_call(
        script, tmp_path / "unchecked", JT_CPU_COMPILE_CHECK="0", JT_LAUNCHER_CPU="interpreter"
    )
    assert experimental == "", f"a plain Triton call imported {experimental}"
    _plain_call(script, tmp_path / "cache")  # Triton's front end checks the kernel, once per machine
    _, experimental = _plain_call(script, tmp_path / "cache")
    assert experimental == "", f"a plain Triton call with warm caches imported {experimental}"
