"""The GPU launcher bases of jt_core.gpu, lowered for ``cuda`` without a GPU and without jt-cuda: a fake plugin
(core_gpu_testlib) subclasses them as a GPU plugin does, and the custom calls they emit are read back."""

from __future__ import annotations

import dataclasses
import re
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
from core_gpu_testlib import (
    FAKE_HANDLER,
    FakeGpuBackend,
    FakeJtLauncher,
    FakeXlaLauncher,
    bound_call,
    compile_configs,
    lower_for_cuda,
    use_fake_gpu,
)

import jt_core as jt
from jt_core.errors import JtError, KernelCallTypeError, KernelCallValueError, PluginError
from jt_core.gpu import LaunchHandlerLibrary, jaxlib_call
from jt_core.gpu.attributes import PARAM_OPERAND, PARAM_RESULT, PARAM_SCALAR, PARAM_TENSOR_MAP, DescriptorParam
from jt_core.gpu.xla import TARGET_NAME
from jt_core.plugin.registry import Registry
from jt_core.testing import (
    accumulate_kernel,
    autotuned_scale_inplace_kernel,
    backend_config,
    custom_calls,
    decode_jaxlib_call,
    out_first_kernel,
    output_operand_aliases,
    read_tile_kernel,
    scale_inplace_kernel,
)

F32 = jnp.float32


@pytest.fixture(autouse=True)
def fake_gpu(jt_fake_entry_points: Callable[..., Registry]) -> Iterator[None]:
    use_fake_gpu(jt_fake_entry_points)
    yield


def spec(n: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((n,), F32)


def scaled_copy(n: int, scale: float, **options: Any) -> Callable[[Any], Any]:
    """``out = x * scale`` through the kernel that declares its output first."""

    def f(x: Any) -> Any:
        return jt.triton_call(
            x_ptr=x, scale=scale, kernel=out_first_kernel, out_shape=x, grid=triton.cdiv(n, 64), n=n, BLOCK=64,
            **options,
        )  # fmt: skip

    return f


def scale_in_place(n: int, **options: Any) -> Callable[[Any], Any]:
    """``x *= 2``, autotuned over three configurations."""

    def f(x: Any) -> Any:
        return jt.triton_call(
            x, kernel=autotuned_scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0},
            grid=lambda meta: (triton.cdiv(n, meta["BLOCK"]),), n=n, factor=2.0, **options,
        )  # fmt: skip

    return f


def rand_size() -> int:
    return int(np.random.default_rng().integers(65, 4000))


# -- the "jt" launcher: jt's handler ---------------------------------------------------------------------------


def test_a_call_lowers_to_the_handler_with_its_layout_scalars_and_launch_shape() -> None:
    n, scale = rand_size(), float(np.random.default_rng().uniform(-3, 3))
    (op,) = custom_calls(lower_for_cuda(scaled_copy(n, scale, num_warps=2), spec(n)))
    assert str(op.attributes["call_target_name"]).strip('"') == FAKE_HANDLER.preloaded_target_name  # one config
    assert len(op.operands) == 1 and len(op.results) == 1 and output_operand_aliases(op) == []
    config = backend_config(op)
    assert config["name"] == b"out_first_kernel"
    assert config["param_kinds"] == [PARAM_RESULT, PARAM_OPERAND, PARAM_SCALAR, PARAM_SCALAR]
    assert config["param_indices"] == [0, 0, 0, 8]
    assert config["scalars"] == struct.pack("<f", scale) + bytes(4) + struct.pack("<i", n) + bytes(4)
    assert (config["num_configs"], config["restore"], config["scratch_result"]) == (1, [], -1)
    # grid x/y/z, threads (2 warps of 32), shared memory, cluster, scratch bytes and alignment, cooperative, PDL,
    # profile scratch
    assert config["launch_0"] == [triton.cdiv(n, 64), 1, 1, 64, 0, 1, 0, 1, 0, 0, 0]
    assert config["symbol_0"] == b"out_first_kernel" and len(config["binary_0"]) == 48
    assert config["zeroed_0"] == [] and "tuning_file" not in config and "metadata" not in config


def test_the_handlers_targets_are_named_as_triton_kernel_calls() -> None:
    targets = [
        FAKE_HANDLER.target_name,
        FAKE_HANDLER.preloaded_target_name,
        FAKE_HANDLER.record_target_name,
        FAKE_HANDLER.record_preloaded_target_name,
    ]
    assert all(name.startswith("triton_kernel_call_") for name in targets) and len(set(targets)) == 4
    with pytest.raises(PluginError, match=r"target_name='fake_launch': jt's custom-call targets start with"):
        LaunchHandlerLibrary(
            FAKE_HANDLER.prefix, FAKE_HANDLER.source, "CUDA", "JT_FAKE_PRELOAD", target_name="fake_launch"
        )


def test_an_autotuned_call_lowers_with_every_config_and_the_buffer_to_restore() -> None:
    n = rand_size()
    (op,) = custom_calls(lower_for_cuda(scale_in_place(n), spec(n)))
    assert str(op.attributes["call_target_name"]).strip('"') == FAKE_HANDLER.target_name  # with initialize
    assert output_operand_aliases(op) == [(0, 0)]
    config = backend_config(op)
    assert config["param_kinds"] == [PARAM_RESULT, PARAM_SCALAR, PARAM_SCALAR]  # x is written through its result
    assert (config["num_configs"], config["restore"]) == (3, [0])
    expected = [[triton.cdiv(n, block), 1, 1, 32 * warps] for block, warps in [(64, 1), (256, 4), (1024, 8)]]
    assert [config[f"launch_{c}"][:4] for c in range(3)] == expected
    assert [config[f"label_{c}"].split(b",")[0] for c in range(3)] == [b"BLOCK=64", b"BLOCK=256", b"BLOCK=1024"]


def test_turning_preloading_off_lowers_single_configs_with_an_initialize_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_FAKE_PRELOAD", "0")
    (op,) = custom_calls(lower_for_cuda(scaled_copy(100, 1.5), spec(100)))
    assert str(op.attributes["call_target_name"]).strip('"') == FAKE_HANDLER.target_name


def test_zeroed_outputs_and_metadata_travel_as_attributes() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, kernel=accumulate_kernel, out_shape=jax.ShapeDtypeStruct((2,), F32), zeroed_outputs=(0,),
            grid=4, n=256, BLOCK=64, serialized_metadata=b"tag\x00\xff",
        )  # fmt: skip

    config = backend_config(custom_calls(lower_for_cuda(f, spec(256)))[0])
    assert config["zeroed_0"] == [0] and config["metadata"] == b"tag\x00\xff"


def test_global_scratch_is_one_more_result_sized_for_every_program(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakeGpuBackend, "fields", {"global_scratch_size": 96, "global_scratch_align": 128})
    n = rand_size()
    lowered = lower_for_cuda(scaled_copy(n, 2.0), spec(n))
    (op,) = custom_calls(lowered)
    config = backend_config(op)
    programs = triton.cdiv(n, 64)
    assert config["scratch_result"] == 1 and config["launch_0"][6:8] == [96, 128]
    assert [str(result.type) for result in op.results] == [f"tensor<{n}xf32>", f"tensor<{programs * 96 + 128}xui8>"]
    assert lowered.out_info.shape == (n,)  # the scratch result is not one of the call's outputs


@pytest.mark.parametrize(
    ("metadata", "position"),
    [({"launch_cooperative_grid": True}, 8), ({"entry_gdc_wait": True}, 9), ({"launch_pdl": True}, 9)],
    ids=["cooperative", "waits-at-entry", "launch-pdl"],
)
def test_launch_flags_come_from_the_kernels_metadata(
    metadata: dict[str, Any], position: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FakeGpuBackend, "metadata", metadata)
    launch = backend_config(custom_calls(lower_for_cuda(scaled_copy(128, 2.0), spec(128)))[0])["launch_0"]
    assert [i for i in (8, 9) if launch[i]] == [position]


def test_threads_per_program_use_the_warp_size_the_kernel_was_compiled_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakeGpuBackend, "metadata", {"warp_size": 64})
    launch = backend_config(custom_calls(lower_for_cuda(scaled_copy(128, 2.0, num_warps=4), spec(128)))[0])["launch_0"]
    assert launch[3] == 4 * 64


def test_a_kernel_compiled_with_instrumentation_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakeGpuBackend, "metadata", {"profile_scratch_size": 256})
    with pytest.raises(JtError, match=r"compiled with Triton instrumentation .*which launcher 'jt' does not provide"):
        lower_for_cuda(scaled_copy(128, 2.0, launcher="jt"), spec(128))


class _DescriptorLauncher(FakeJtLauncher):
    """Passes a host-side tensor descriptor as a tensor map plus the base address and a scalar."""

    def descriptor_params(self) -> Any:
        def params(slot: Any, ordinal: int, kernels: Any) -> list[DescriptorParam]:
            shape = slot.descriptor.shape
            record = (ordinal, len(shape), *shape, *range(18 - 2 - len(shape)))
            return [
                DescriptorParam("tensor_map", records=(record,) * len(kernels)),
                DescriptorParam("buffer"),
                DescriptorParam("scalar", "i64", shape[0]),
            ]

        return params


def _descriptor_call() -> Any:
    return bound_call(
        lambda x: jt.triton_call(
            jt.TensorDescriptor(x, [16, 32]), row=3, col=5, kernel=read_tile_kernel,
            out_shape=jax.ShapeDtypeStruct((16, 32), F32), grid=1, BM=16, BN=32,
        ),
        jax.ShapeDtypeStruct((40, 72), F32),
    )  # fmt: skip


def _attribute_values(attributes: dict[str, Any]) -> dict[str, Any]:
    from jax._src.lib.mlir import ir

    out: dict[str, Any] = {}
    for name, attr in attributes.items():
        try:
            out[name] = list(ir.DenseI64ArrayAttr(attr))
        except (ValueError, TypeError):
            out[name] = attr
    out["scalars"] = ir.StringAttr(attributes["scalars"]).value_bytes
    return out


def test_a_tensor_descriptor_becomes_the_parameters_the_platform_passes() -> None:
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    call = _descriptor_call()
    with mlir.make_ir_context(), ir.Location.unknown():
        attributes, _ = _DescriptorLauncher().attributes(call, compile_configs(call), None)
        config = _attribute_values(attributes)
    # read_tile_kernel(desc, out_ptr, row, col): the descriptor is map 0, its base (operand 0) and its height
    assert config["param_kinds"] == [
        PARAM_TENSOR_MAP, PARAM_OPERAND, PARAM_SCALAR, PARAM_RESULT, PARAM_SCALAR, PARAM_SCALAR,
    ]  # fmt: skip
    assert config["param_indices"] == [0, 0, 0, 0, 8, 16]
    assert config["scalars"] == struct.pack("<q", 40) + struct.pack("<ixxxxixxxx", 3, 5)
    # one record: the buffer's kind and index, then what the platform wrote (ordinal, rank, shape, ...)
    assert config["tensormaps_0"] == [PARAM_OPERAND, 0, 0, 2, 40, 72, *range(14)]


def test_a_tensor_descriptor_is_refused_where_the_platform_cannot_pass_one() -> None:
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    call = _descriptor_call()
    refused = r"tensor descriptor argument 'desc' cannot be passed to a CUDA kernel by jt's handler"
    with mlir.make_ir_context(), ir.Location.unknown(), pytest.raises(KernelCallValueError, match=refused):
        FakeJtLauncher().attributes(call, compile_configs(call), None)


# -- the "jaxlib" launcher: jaxlib's Triton handler ------------------------------------------------------------


def _jaxlib_call(lowered: Any) -> tuple[Any, dict[str, Any]]:
    (op,) = custom_calls(lowered, "triton_kernel_call_ffi")
    return op, decode_jaxlib_call(backend_config(op)["opaque"])


def test_jaxlib_call_puts_an_output_declared_first_before_the_input() -> None:
    n, scale = rand_size(), float(np.random.default_rng().uniform(-3, 3))
    op, message = _jaxlib_call(lower_for_cuda(scaled_copy(n, scale, launcher="jaxlib", name="scaled"), spec(n)))
    # The output's pointer comes first, so a zero-filled operand 0 stands for it, aliased to the result.
    assert len(op.operands) == 2 and output_operand_aliases(op) == [(0, 0)]
    assert message["name"] == "scaled" and message["metadata"] == b""
    launch = message["kernel_call"]
    assert (launch["kernel_name"], launch["num_warps"], launch["grid"]) == (
        "out_first_kernel",
        4,
        (triton.cdiv(n, 64), 1, 1),
    )
    assert launch["module"] == "// the PTX of out_first_kernel\n" and launch["num_ctas"] == 1
    assert launch["parameters"] == [("array", 0, 16), ("array", 0, 16), ("f32", np.float32(scale)), ("i32", n)]


def test_jaxlib_call_hands_an_aliased_output_declared_first_the_input_buffer() -> None:
    # Bound by keyword, the output keeps its own parameter although it shares the input's buffer: both of the
    # custom call's operands are the input, and only the one in the output's place is aliased to the result.
    def f(x: Any) -> Any:
        return jt.triton_call(
            x_ptr=x, scale=3.0, n=128, kernel=out_first_kernel, out_shape=x, input_output_aliases={0: 0}, grid=2,
            BLOCK=64, launcher="jaxlib",
        )  # fmt: skip

    op, message = _jaxlib_call(lower_for_cuda(f, spec(128)))
    assert [operand.get_name() for operand in op.operands] == ["%arg0", "%arg0"]
    assert output_operand_aliases(op) == [(0, 0)]
    assert message["kernel_call"]["parameters"][:2] == [("array", 0, 16), ("array", 0, 16)]


def test_jaxlib_call_zeroes_outputs_through_bytes_to_zero() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, kernel=accumulate_kernel, out_shape=jax.ShapeDtypeStruct((3,), F32), zeroed_outputs=(0,), grid=4,
            n=256, BLOCK=64, launcher="jaxlib",
        )  # fmt: skip

    _, message = _jaxlib_call(lower_for_cuda(f, spec(256)))
    assert message["kernel_call"]["parameters"][:2] == [("array", 0, 16), ("array", 3 * 4, 16)]


def test_jaxlib_call_autotunes_and_restores_the_aliased_buffer() -> None:
    n = rand_size()
    op, message = _jaxlib_call(lower_for_cuda(scale_in_place(n, launcher="jaxlib"), spec(n)))
    assert output_operand_aliases(op) == [(0, 0)]
    tuned = message["autotuned"]
    assert [launch["grid"][0] for launch, _ in tuned["configs"]] == [triton.cdiv(n, b) for b in (64, 256, 1024)]
    assert [launch["num_warps"] for launch, _ in tuned["configs"]] == [1, 4, 8]
    assert [label.split(",")[0] for _, label in tuned["configs"]] == ["BLOCK=64", "BLOCK=256", "BLOCK=1024"]
    assert tuned["aliases"] == [(0, 1, n * 4)]  # input buffer 0 is output buffer 1 (operands, then results)


def test_jaxlib_call_refuses_a_scalar_type_its_handler_cannot_pass() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x_ptr=x, scale=np.int8(3), kernel=out_first_kernel, out_shape=x, grid=2, n=128, BLOCK=64, launcher="jaxlib"
        )

    with pytest.raises(
        KernelCallTypeError, match=r"scalar argument 'scale' has Triton type i8, which jaxlib's handler"
    ):
        lower_for_cuda(f, spec(128))


def test_jaxlib_call_refuses_global_scratch_and_points_to_the_jt_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakeGpuBackend, "fields", {"global_scratch_size": 64})
    with pytest.raises(JtError, match=r"64 bytes of global scratch memory.*use launcher='jt'"):
        lower_for_cuda(scaled_copy(128, 2.0, launcher="jaxlib"), spec(128))


# -- the "xla" launcher: XLA's own Triton call -----------------------------------------------------------------


def _entry_module(ir_bytes: bytes) -> str:
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.triton import dialect as tt

    context = mlir.JaxIrContext()
    tt.register_dialect(context)
    context.load_all_available_dialects()
    with context:
        return str(ir.Module.parse(ir_bytes))


def test_xla_call_wraps_the_kernel_in_an_entry_taking_operands_then_results() -> None:
    n = rand_size()
    lowered = lower_for_cuda(scaled_copy(n, 0.75, launcher="xla", num_warps=8, num_stages=2), spec(n))
    (op,) = custom_calls(lowered, TARGET_NAME)
    config = backend_config(op)
    assert config["name"] == b"out_first_kernel_xla"
    assert (config["num_warps"], config["num_stages"]) == (8, 2)
    assert (config["grid_x"], config["grid_y"], config["grid_z"]) == (triton.cdiv(n, 64), 1, 1)
    text = _entry_module(config["ir"])
    assert "tt.func private @out_first_kernel(" in text
    assert "tt.func public @out_first_kernel_xla(%arg0: !tt.ptr<f32>" in text
    # out_first_kernel(out, x, scale, n): the result's buffer (argument 1), the operand (0), the scalars as constants
    assert "tt.call @out_first_kernel(%arg1, %arg0, %" in text
    assert "arith.constant 7.500000e-01 : f32" in text and f"arith.constant {n} : i32" in text


def test_xla_call_writes_an_aliased_input_through_its_result() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, 256, 2.0, kernel=scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0}, grid=4, BLOCK=64,
            launcher="xla",
        )  # fmt: skip

    (op,) = custom_calls(lower_for_cuda(f, spec(256)), TARGET_NAME)
    assert len(op.operands) == 1 and output_operand_aliases(op) == [(0, 0)]
    assert "tt.call @scale_inplace_kernel(%arg1, %" in _entry_module(backend_config(op)["ir"])


def test_xla_call_gives_a_zeroed_output_a_zero_filled_operand() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, kernel=accumulate_kernel, out_shape=jax.ShapeDtypeStruct((1,), F32), zeroed_outputs=(0,), grid=4,
            n=256, BLOCK=64, launcher="xla",
        )  # fmt: skip

    (op,) = custom_calls(lower_for_cuda(f, spec(256)), TARGET_NAME)
    assert len(op.operands) == 2 and output_operand_aliases(op) == [(1, 0)]
    assert "tt.call @accumulate_kernel(%arg0, %arg2, %" in _entry_module(backend_config(op)["ir"])


@pytest.mark.parametrize(
    ("fields", "metadata", "reason"),
    [
        ({"cluster_dims": (2, 1, 1)}, {}, r"runs clusters of 2 programs \(num_ctas > 1\)"),
        ({"global_scratch_size": 32}, {}, r"needs 32 bytes of global scratch memory per program"),
        ({}, {"launch_cooperative_grid": True}, r"needs a cooperative or programmatic-dependent launch"),
        ({}, {"profile_scratch_size": 8}, r"compiled with Triton instrumentation"),
    ],
    ids=["cluster", "scratch", "cooperative", "instrumented"],
)
def test_what_xla_cannot_run_goes_to_the_next_launcher_with_the_reason(
    fields: dict[str, Any], metadata: dict[str, Any], reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FakeGpuBackend, "fields", fields)
    monkeypatch.setattr(FakeGpuBackend, "metadata", metadata)
    call = bound_call(scaled_copy(128, 2.0), spec(128))
    found = FakeXlaLauncher().fallback_reason(call, compile_configs(call), None)
    assert found is not None and re.search(reason, found), found


def test_xla_call_refuses_ir_that_is_not_the_kernels() -> None:
    call = bound_call(scaled_copy(128, 2.0), spec(128))
    (kernel,) = compile_configs(call)
    renamed = dataclasses.replace(kernel, name="another_kernel")
    assert (
        FakeXlaLauncher().fallback_reason(call, [renamed], None)
        == "the IR has no single function named 'another_kernel'"
    )


# -- jaxlib's kernel-call message, byte for byte ---------------------------------------------------------------
# Expected bytes written out from the protocol-buffer wire format: a field's key is (number << 3 | wire type),
# varints are little-endian base 128, length-delimited fields carry their length as a varint.


def test_a_kernel_spec_encodes_its_fields_in_the_wire_format() -> None:
    spec_ = jaxlib_call.KernelSpec("k", num_warps=4, shared_mem_bytes=300, module="PTX", compute_capability=90)
    assert spec_.encode() == b"\x0a\x01k" + b"\x10\x04" + b"\x18\xac\x02" + b"\x22\x03PTX" + b"\x30\x5a" + b"\x50\x01"


@pytest.mark.parametrize(
    ("parameter", "encoded"),
    [
        (jaxlib_call.ScalarParameter("i32", -1), b"\x18" + b"\xff" * 9 + b"\x01"),  # sign-extended to 64 bits
        (jaxlib_call.ScalarParameter("u64", 2**64 - 1), b"\x30" + b"\xff" * 9 + b"\x01"),
        (jaxlib_call.ScalarParameter("i1", True), b"\x10\x01"),
        (jaxlib_call.ScalarParameter("fp32", 1.5), b"\x3d" + struct.pack("<f", 1.5)),
        (jaxlib_call.ScalarParameter("fp64", -2.25), b"\x41" + struct.pack("<d", -2.25)),
        (jaxlib_call.ArrayParameter(bytes_to_zero=0, ptr_divisibility=16), b"\x0a\x02\x10\x10"),
        (jaxlib_call.ArrayParameter(bytes_to_zero=128, ptr_divisibility=0), b"\x0a\x03\x08\x80\x01"),
    ],
    ids=["i32", "u64", "i1", "fp32", "fp64", "array", "zeroed-array"],
)
def test_a_parameter_encodes_as_one_field_of_its_oneof(parameter: Any, encoded: bytes) -> None:
    assert parameter.encode() == encoded


@pytest.mark.parametrize(("type_str", "value"), [("i32", 2**31), ("u32", -1), ("i64", 2**63), ("fp16", 1.0)])
def test_a_scalar_outside_its_type_is_refused(type_str: str, value: Any) -> None:
    with pytest.raises(ValueError, match=type_str if type_str == "fp16" else "does not fit"):
        jaxlib_call.ScalarParameter(type_str, value)


def test_one_launch_encodes_as_a_compressed_kernel_call_with_its_name() -> None:
    spec_ = jaxlib_call.KernelSpec("k", 1, 0, "P")
    launch = jaxlib_call.KernelLaunch(spec_, (3, 2, 1), (jaxlib_call.ScalarParameter("i32", 5),))
    kernel = b"\x0a\x01k\x10\x01\x22\x01P\x50\x01"
    call = b"\x0a" + bytes([len(kernel)]) + kernel + b"\x10\x03\x18\x02\x20\x01" + b"\x2a\x02\x18\x05"
    assert launch.encode() == call
    message = zlib.decompress(jaxlib_call.encode_call("my_call", [launch], ["c0"], [], b"md"))
    assert message == b"\x0a" + bytes([len(call)]) + call + b"\x1a\x02md" + b"\x22\x07my_call"
