"""Lowering for ``cuda`` through launcher ``xla`` without a GPU: XLA's Triton call, its entry module, the fallbacks."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Generator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from cuda_testlib import add_call, f32, lower_for_cuda

import jt_core as jt
from jt_core.gpu.xla import TARGET_NAME
from jt_core.plugin import CompiledKernel, hookimpl
from jt_core.testing import (
    accumulate_kernel,
    autotuned_scale_inplace_kernel,
    backend_config,
    custom_calls,
    out_first_kernel,
    output_operand_aliases,
    scale_inplace_kernel,
)

N = 1024
BLOCK = 128


def xla_op(lowered: Any) -> Any:
    (op,) = custom_calls(lowered, TARGET_NAME)
    return op


def entry_text(op: Any) -> str:
    """The entry module the call carries, printed by jaxlib's Triton dialect."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.triton import dialect as tt

    context = mlir.JaxIrContext()
    tt.register_dialect(context)
    context.load_all_available_dialects()
    with context:
        return str(ir.Module.parse(backend_config(op)["ir"]))


def test_a_call_lowers_to_xlas_triton_call() -> None:
    lowered = lower_for_cuda(
        lambda x, y: add_call(x, y, block=BLOCK, compute_capability=90, launcher="xla", num_warps=2), f32((N,)),
        f32((N,)),
    )  # fmt: skip
    op = xla_op(lowered)
    config = backend_config(op)
    assert config["name"] == b"sample_add_kernel_xla"
    assert (config["grid_x"], config["grid_y"], config["grid_z"]) == (N // BLOCK, 1, 1)
    assert config["num_warps"] == 2 and config["num_stages"] == 3 and config["debug"] == 0
    assert len(op.operands) == 2 and len(op.results) == 1
    assert custom_calls(lowered, "triton_kernel_call_jt_cuda_preloaded") == []


def test_the_entry_takes_operands_then_results_and_bakes_in_the_scalars() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x_ptr=x, scale=2.5, kernel=out_first_kernel, out_shape=x, grid=N // BLOCK, n=N + 0, BLOCK=BLOCK,
            compute_capability=90, launcher="xla",
        )  # fmt: skip

    text = entry_text(xla_op(lower_for_cuda(f, f32((N,)))))
    # The kernel declares its output first; XLA passes the operand (x) first, then the result.
    assert "tt.func private @out_first_kernel" in text
    assert "tt.func public @out_first_kernel_xla(%arg0: !tt.ptr<f32>" in text
    assert "arith.constant 2.500000e+00 : f32" in text
    assert f"arith.constant {N} : i32" in text
    assert "tt.call @out_first_kernel(%arg1, %arg0," in text


def test_an_aliased_output_is_the_operands_buffer() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, N, 3.0, kernel=scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0}, grid=N // BLOCK,
            BLOCK=BLOCK, compute_capability=90, launcher="xla",
        )  # fmt: skip

    op = xla_op(lower_for_cuda(f, f32((N,))))
    assert output_operand_aliases(op) == [(0, 0)]
    assert len(op.operands) == 1 and len(op.results) == 1
    assert "tt.call @scale_inplace_kernel(%arg1," in entry_text(op)  # written through the result's buffer


def test_a_zeroed_output_is_a_zero_filled_operand_aliased_to_it() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, kernel=accumulate_kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.float32), zeroed_outputs=(0,),
            grid=N // BLOCK, n=N, BLOCK=BLOCK, compute_capability=90, launcher="xla",
        )  # fmt: skip

    lowered = lower_for_cuda(f, f32((N,)))
    op = xla_op(lowered)
    assert len(op.operands) == 2 and output_operand_aliases(op) == [(1, 0)]
    assert "stablehlo.constant dense<0.000000e+00>" in lowered.as_text()
    assert "tt.call @accumulate_kernel(%arg0, %arg2," in entry_text(op)


@pytest.fixture
def trace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_TRACE_PLUGINS", "1")


def _falls_back(capfd: pytest.CaptureFixture[str], lowered: Any, reason: str) -> None:
    assert custom_calls(lowered, TARGET_NAME) == []
    assert len(custom_calls(lowered)) == 1
    err = capfd.readouterr().err
    assert "launcher 'xla' on cuda cannot express it" in err and "using 'jt'" in err
    assert reason in err


@pytest.mark.usefixtures("trace")
def test_clusters_go_to_the_jt_launcher_with_the_reason(capfd: pytest.CaptureFixture[str]) -> None:
    lowered = lower_for_cuda(
        lambda x, y: add_call(x, y, compute_capability=90, launcher="xla", num_ctas=2), f32((N,)), f32((N,))
    )
    _falls_back(capfd, lowered, "num_ctas > 1")


@pytest.mark.usefixtures("trace")
def test_global_scratch_goes_to_the_jt_launcher(capfd: pytest.CaptureFixture[str]) -> None:
    @triton.jit
    def copy_by_descriptor(x_ptr, out_ptr, M, N, BLOCK: tl.constexpr):
        src = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK, BLOCK])
        dst = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK, BLOCK])
        dst.store([tl.program_id(0) * BLOCK, 0], src.load([tl.program_id(0) * BLOCK, 0]))

    def f(x: Any) -> Any:
        return jt.triton_call(
            x, kernel=copy_by_descriptor, out_shape=x, grid=2, M=64, N=32, BLOCK=32, compute_capability=90,
            launcher="xla",
        )  # fmt: skip

    _falls_back(capfd, lower_for_cuda(f, f32((64, 32))), "global scratch memory")


@pytest.mark.usefixtures("trace")
def test_host_tensor_descriptors_go_to_the_jt_launcher(capfd: pytest.CaptureFixture[str]) -> None:
    @triton.jit
    def copy_tiles(src, dst, BLOCK: tl.constexpr):
        dst.store([tl.program_id(0) * BLOCK, 0], src.load([tl.program_id(0) * BLOCK, 0]))

    def f(x: Any) -> Any:
        out = jnp.zeros_like(x)
        return jt.triton_call(
            jt.TensorDescriptor(x, block_shape=[32, 32]), jt.TensorDescriptor(out, block_shape=[32, 32]),
            kernel=copy_tiles, out_shape=x, input_output_aliases={1: 0}, grid=2, BLOCK=32, compute_capability=90,
            launcher="xla",
        )  # fmt: skip

    _falls_back(capfd, lower_for_cuda(f, f32((64, 32))), "host-side tensor descriptors")


@pytest.mark.usefixtures("trace")
def test_an_autotuned_call_without_a_device_goes_to_the_jt_launcher(capfd: pytest.CaptureFixture[str]) -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, N, 2.0, kernel=autotuned_scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0},
            grid=lambda meta: (triton.cdiv(N, meta["BLOCK"]),), compute_capability=90, launcher="xla",
        )  # fmt: skip

    _falls_back(capfd, lower_for_cuda(f, f32((N,))), "no configuration can be chosen")


class _UnknownOpInIr:
    """A plugin whose compile wrapper puts an operation no Triton dialect knows into every kernel's Triton IR."""

    @hookimpl(wrapper=True)
    def jt_compile_kernel(self, request: Any) -> Generator[None, CompiledKernel, CompiledKernel]:
        kernel = yield
        asm = dict(kernel.asm)
        asm["ttir"] = str(asm["ttir"]).replace("tt.return", '"tt.frobnicate"() : () -> ()\n    tt.return', 1)
        return CompiledKernel(**{**kernel.__dict__, "asm": asm})


@pytest.mark.usefixtures("trace")
def test_ir_the_bundled_triton_rejects_goes_to_the_jt_launcher(
    capfd: pytest.CaptureFixture[str], jt_register_plugin: Any
) -> None:
    jt_register_plugin(_UnknownOpInIr(), name="unknown-op")
    lowered = lower_for_cuda(
        lambda x, y: add_call(x, y, block=64, compute_capability=90, launcher="xla"), f32((N,)), f32((N,))
    )
    _falls_back(capfd, lowered, "jaxlib's Triton dialect cannot parse the kernel's IR")


def test_the_environment_selects_xla_too(monkeypatch: pytest.MonkeyPatch, jt_plugin_manager: Any) -> None:
    del jt_plugin_manager
    monkeypatch.setenv("JT_LAUNCHER_CUDA", "xla")
    from jt_core.plugin import registry
    from jt_core.testing.fixtures import make_registry

    registry.set_registry(make_registry())
    lowered = lower_for_cuda(lambda x, y: add_call(x, y, compute_capability=90), f32((N,)), f32((N,)))
    assert len(custom_calls(lowered, TARGET_NAME)) == 1


def test_export_carries_triton_ir_and_no_binary() -> None:
    from jax import export

    exported = export.export(
        jax.jit(lambda x, y: add_call(x, y, compute_capability=90, launcher="xla")),
        platforms=["cuda"],
        disabled_checks=[export.DisabledSafetyCheck.custom_call(TARGET_NAME)],
    )(f32((N,)), f32((N,)))
    restored = export.deserialize(exported.serialize())
    text = restored.mlir_module()
    assert TARGET_NAME in text and "sample_add_kernel_xla" in text
    assert "triton_kernel_call_jt_cuda" not in text and "\\7FELF" not in text  # no cubin travels
    assert restored.platforms == ("cuda",)
    assert [a.shape for a in restored.in_avals] == [(N,), (N,)]


def test_plugins_json_lists_what_xla_falls_back_for() -> None:
    import os

    env = {key: value for key, value in os.environ.items() if key != "JT_STRICT_PLUGINS"}
    out = subprocess.run(
        [sys.executable, "-m", "jt_core", "plugins", "--json"], capture_output=True, text=True, env=env, check=True
    ).stdout
    cuda = {entry["name"]: entry for entry in json.loads(out)}["cuda"]
    details = cuda["provides"]["launcher_details"]
    assert details["cuda:jt"]["falls_back_for"] == []
    rules = " ".join(details["cuda:xla"]["falls_back_for"])
    for words in ("tensor descriptors", "num_ctas", "global scratch", "Gluon", "rejects"):
        assert words in rules
    assert details["cuda:jt"]["priority"] > details["cuda:jaxlib"]["priority"]


def test_unsigned_and_narrow_scalars_become_constants_of_their_type() -> None:
    @triton.jit
    def scalars(a, b, c, out_ptr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, (a.to(tl.float32) + b.to(tl.float32) + c) + tl.zeros((BLOCK,), tl.float32))

    def f() -> Any:
        out = jax.ShapeDtypeStruct((16,), jnp.float32)
        return jt.triton_call(
            np.uint32(2**32 - 3), np.int8(-5), np.float16(0.5), kernel=scalars, out_shape=out, grid=1, BLOCK=16,
            compute_capability=90, launcher="xla",
        )  # fmt: skip

    text = entry_text(xla_op(jax.jit(f).trace().lower(lowering_platforms=("cuda",))))
    assert "arith.constant -3 : i32" in text  # 2**32 - 3 as a signless 32-bit integer
    assert "arith.constant -5 : i8" in text
    assert "arith.constant 5.000000e-01 : f16" in text
