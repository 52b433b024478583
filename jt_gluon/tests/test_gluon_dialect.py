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
from jt_core import hooks
from jt_core.call import kernel_params
from jt_core.errors import UnsupportedKernelError
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


def test_gluon_dialect_is_not_interpretable() -> None:
    assert GluonDialect.interpretable is False


def test_plain_triton_kernels_still_go_to_the_triton_dialect() -> None:
    assert hooks.dialect_for(sample_add_kernel).name == "triton"
    assert hooks.dialect_for(memcpy_kernel).name == "gluon"


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
