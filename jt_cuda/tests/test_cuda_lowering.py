"""Lowering for ``cuda`` without a GPU: the emitted custom calls, their operands, aliases and attributes."""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from cuda_testlib import add_call, f32, lower_for_cuda, scalar_types_kernel

import jt_core as jt
from jt_core.errors import JtError, KernelCallValueError, NoBackendError
from jt_core.gpu import jaxlib_call
from jt_core.gpu.attributes import PARAM_OPERAND, PARAM_RESULT, PARAM_SCALAR
from jt_core.testing import (
    accumulate_kernel,
    autotuned_scale_inplace_kernel,
    backend_config,
    custom_calls,
    out_first_kernel,
    output_operand_aliases,
    sample_add_kernel,
    scale_inplace_kernel,
)
from jt_cuda.launchers import CudaJaxlibLauncher

N = 1024
BLOCK = 128


@pytest.fixture
def jaxlib_lowering(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lets the jaxlib launcher lower on a CPU-only jaxlib (its lowering needs no jaxlib objects)."""
    monkeypatch.setattr(CudaJaxlibLauncher, "unavailable_reason", lambda self: None)


def jt_call_op(lowered: Any) -> Any:
    (op,) = custom_calls(lowered, "triton_kernel_call_jt_cuda") + custom_calls(
        lowered, "triton_kernel_call_jt_cuda_preloaded"
    )
    return op


def test_default_launcher_is_the_jt_handler() -> None:
    lowered = lower_for_cuda(lambda x, y: add_call(x, y, compute_capability=90), f32((N,)), f32((N,)))
    assert len(custom_calls(lowered)) == 1
    op = jt_call_op(lowered)
    assert len(op.operands) == 2 and len(op.results) == 1
    assert "mhlo.backend_config" in op.attributes  # typed FFI: attributes in a dictionary
    config = backend_config(op)
    assert config["name"] == b"sample_add_kernel"
    assert config["num_configs"] == 1
    assert config["binary_0"][:4] == b"\x7fELF"
    assert config["symbol_0"] == b"sample_add_kernel"
    # grid (8, 1, 1), 4 warps, no shared memory, no cluster, no scratch, not cooperative, a programmatic dependent
    # (sm90: the kernel waits at entry), no profile scratch
    assert config["launch_0"] == [8, 1, 1, 128, 0, 1, 0, 1, 0, 1, 0]
    assert config["param_kinds"] == [PARAM_OPERAND, PARAM_OPERAND, PARAM_RESULT, PARAM_SCALAR]
    assert config["param_indices"] == [0, 1, 0, 0]
    assert struct.unpack("<i", config["scalars"][:4]) == (N,)
    assert config["zeroed_0"] == [] and config["restore"] == [] and config["scratch_result"] == -1


def test_parameters_are_wired_by_index_whatever_their_order() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x_ptr=x, scale=2.5, kernel=out_first_kernel, out_shape=x, grid=N // BLOCK, n=N, BLOCK=BLOCK,
            compute_capability=90,
        )  # fmt: skip

    config = backend_config(jt_call_op(lower_for_cuda(f, f32((N,)))))
    assert config["param_kinds"] == [PARAM_RESULT, PARAM_OPERAND, PARAM_SCALAR, PARAM_SCALAR]
    assert config["param_indices"] == [0, 0, 0, 8]
    assert struct.unpack("<f", config["scalars"][:4]) == (2.5,)
    assert struct.unpack("<i", config["scalars"][8:12]) == (N,)


def test_scalars_are_packed_in_their_kernel_width() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            np.int8(-3), np.int16(300), 2**40, 1.5, np.float64(0.25),
            kernel=scalar_types_kernel, out_shape=x, grid=1, BLOCK=16, compute_capability=90,
        )  # fmt: skip

    config = backend_config(jt_call_op(lower_for_cuda(f, f32((16,)))))
    assert config["param_kinds"] == [PARAM_SCALAR] * 5 + [PARAM_RESULT]
    data = config["scalars"]
    offsets = config["param_indices"][:5]
    assert struct.unpack_from("<b", data, offsets[0]) == (-3,)
    assert struct.unpack_from("<h", data, offsets[1]) == (300,)
    assert struct.unpack_from("<q", data, offsets[2]) == (2**40,)
    assert struct.unpack_from("<f", data, offsets[3]) == (1.5,)
    assert struct.unpack_from("<d", data, offsets[4]) == (0.25,)


def test_aliased_output_reuses_the_operand_and_its_pointer_is_the_result() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, N, 3.0, kernel=scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0},
            grid=N // BLOCK, BLOCK=BLOCK, compute_capability=90,
        )  # fmt: skip

    op = jt_call_op(lower_for_cuda(f, f32((N,))))
    assert output_operand_aliases(op) == [(0, 0)]
    config = backend_config(op)
    assert config["param_kinds"][0] == PARAM_RESULT and config["param_indices"][0] == 0


def test_zeroed_outputs_are_listed_per_config() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, kernel=accumulate_kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.float32), zeroed_outputs=(0,),
            grid=N // BLOCK, n=N, BLOCK=BLOCK, compute_capability=90,
        )  # fmt: skip

    assert backend_config(jt_call_op(lower_for_cuda(f, f32((N,)))))["zeroed_0"] == [0]


def test_autotuned_call_carries_every_config_and_the_buffers_to_restore() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, N, 2.0, kernel=autotuned_scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0},
            grid=lambda meta: (triton.cdiv(N, meta["BLOCK"]),), compute_capability=90,
        )  # fmt: skip

    config = backend_config(jt_call_op(lower_for_cuda(f, f32((N,)))))
    assert config["num_configs"] == 3
    assert [config[f"launch_{c}"][:4] for c in range(3)] == [[16, 1, 1, 32], [4, 1, 1, 128], [1, 1, 1, 256]]
    assert b"BLOCK=256" in config["label_1"]
    assert config["restore"] == [0]


@triton.jit
def _descriptor_kernel(x_ptr, out_ptr, M, N, BLOCK: tl.constexpr):
    src = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK, BLOCK])
    dst = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK, BLOCK])
    pid = tl.program_id(0)
    dst.store([pid * BLOCK, 0], src.load([pid * BLOCK, 0]) * 2)


def test_global_scratch_is_an_extra_xla_output() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, kernel=_descriptor_kernel, out_shape=x, grid=2, M=64, N=32, BLOCK=32, compute_capability=90
        )

    lowered = lower_for_cuda(f, f32((64, 32)))
    op = jt_call_op(lowered)
    config = backend_config(op)
    size, align = config["launch_0"][6], config["launch_0"][7]
    assert size > 0 and align >= 1
    assert len(op.results) == 2 and config["scratch_result"] == 1
    assert str(op.results[1].type) == f"tensor<{2 * size + align}xui8>"
    main = lowered.as_text()
    assert "tensor<64x32xf32>" in main.split("return")[-1]  # the function returns only the user's output


def test_serialized_metadata_travels_with_the_call() -> None:
    lowered = lower_for_cuda(
        lambda x, y: add_call(x, y, compute_capability=90, serialized_metadata=b"tag\x00"), f32((N,)), f32((N,))
    )
    assert backend_config(jt_call_op(lowered))["metadata"] == b"tag\x00"


def test_has_side_effect_marks_the_custom_call() -> None:
    lowered = lower_for_cuda(lambda x, y: add_call(x, y, compute_capability=90, has_side_effect=True), f32((N,)),
                             f32((N,)))  # fmt: skip
    assert str(jt_call_op(lowered).attributes["has_side_effect"]).lower() == "true"


def test_environment_selects_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    from jt_core.plugin import registry
    from jt_core.testing.fixtures import make_registry

    monkeypatch.setenv("JT_LAUNCHER_CUDA", "nonexistent")
    previous = registry.set_registry(make_registry())
    try:
        expected = r"JT_LAUNCHER_CUDA names launcher 'nonexistent'.*\['jt', 'jaxlib', 'xla'\]"
        with pytest.raises(NoBackendError, match=expected):
            lower_for_cuda(lambda x, y: add_call(x, y, compute_capability=90), f32((N,)), f32((N,)))
    finally:
        registry.set_registry(previous)


def test_missing_target_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JT_CUDA_ARCH", raising=False)
    with pytest.raises(KernelCallValueError) as info:
        lower_for_cuda(lambda x, y: add_call(x, y), f32((N,)), f32((N,)))
    assert "compute_capability=" in str(info.value) and "JT_CUDA_ARCH" in str(info.value)


def test_environment_gives_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CUDA_ARCH", "8.0")
    from_env = backend_config(jt_call_op(lower_for_cuda(lambda x, y: add_call(x, y), f32((N,)), f32((N,)))))
    explicit = {
        cc: backend_config(
            jt_call_op(lower_for_cuda(lambda x, y, cc=cc: add_call(x, y, compute_capability=cc), f32((N,)), f32((N,))))
        )
        for cc in (80, 90)
    }
    assert from_env["binary_0"][:4] == b"\x7fELF"
    assert from_env["binary_0"] == explicit[80]["binary_0"] != explicit[90]["binary_0"]


def test_jaxlib_unavailable_on_cpu_jaxlib_is_explained() -> None:
    reason = CudaJaxlibLauncher().unavailable_reason()
    if reason is not None:
        assert "TritonKernelCall" in reason and "launcher='jt'" in reason
        with pytest.raises(JtError, match="launcher 'jaxlib' for platform 'cuda' is unavailable"):
            lower_for_cuda(lambda x, y: add_call(x, y, compute_capability=90, launcher="jaxlib"), f32((N,)),
                           f32((N,)))  # fmt: skip


def _jaxlib_op(lowered: Any) -> tuple[Any, dict[int, list[Any]]]:
    (op,) = custom_calls(lowered, "triton_kernel_call_ffi")
    return op, _fields(zlib.decompress(backend_config(op)["opaque"]))


def _fields(data: bytes) -> dict[int, list[Any]]:
    return jaxlib_call.fields_by_number(data)


@pytest.mark.usefixtures("jaxlib_lowering")
def test_jaxlib_launcher_serialises_the_kernel_call() -> None:
    lowered = lower_for_cuda(
        lambda x, y: add_call(x, y, compute_capability=90, launcher="jaxlib", name="my_add"), f32((N,)), f32((N,))
    )
    op, fields = _jaxlib_op(lowered)
    assert len(op.operands) == 2 and len(op.results) == 1
    assert fields[4] == [b"my_add"]
    call = _fields(fields[1][0])
    kernel = _fields(call[1][0])
    assert kernel[1] == [b"sample_add_kernel"] and kernel[2] == [4] and kernel[6] == [90] and kernel[10] == [1]
    assert b".target sm_90a" in kernel[4][0]
    assert call[2] == [8] and call[3] == [1] and call[4] == [1]
    params = [_fields(p) for p in call[5]]
    assert [sorted(p) for p in params] == [[1], [1], [1], [3]]  # three arrays, then an i32 scalar
    assert params[3][3] == [N]
    assert _fields(params[0][1][0]) == {2: [16]}


@pytest.mark.usefixtures("jaxlib_lowering")
def test_jaxlib_launcher_orders_buffers_for_an_output_declared_first() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x_ptr=x, scale=2.5, kernel=out_first_kernel, out_shape=x, grid=N // BLOCK, n=N, BLOCK=BLOCK,
            compute_capability=90, launcher="jaxlib",
        )  # fmt: skip

    op, fields = _jaxlib_op(lower_for_cuda(f, f32((N,))))
    # The output's pointer comes first, so it becomes operand 0 (zero-filled) aliased to the result.
    assert len(op.operands) == 2 and output_operand_aliases(op) == [(0, 0)]
    params = [_fields(p) for p in _fields(fields[1][0])[5]]
    assert [sorted(p) for p in params] == [[1], [1], [7], [3]]
    assert struct.unpack("<f", params[2][7][0]) == (2.5,)


@pytest.mark.usefixtures("jaxlib_lowering")
def test_jaxlib_launcher_zeroes_through_bytes_to_zero() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, kernel=accumulate_kernel, out_shape=jax.ShapeDtypeStruct((4,), jnp.float32), zeroed_outputs=(0,),
            grid=N // BLOCK, n=N, BLOCK=BLOCK, compute_capability=90, launcher="jaxlib",
        )  # fmt: skip

    _, fields = _jaxlib_op(lower_for_cuda(f, f32((N,))))
    params = [_fields(p) for p in _fields(fields[1][0])[5]]
    assert _fields(params[1][1][0]) == {1: [16], 2: [16]}  # 4 floats zeroed, pointer divisible by 16
    assert _fields(params[0][1][0]) == {2: [16]}


@pytest.mark.usefixtures("jaxlib_lowering")
def test_jaxlib_launcher_autotunes_with_aliases_restored() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, N, 2.0, kernel=autotuned_scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0},
            grid=lambda meta: (triton.cdiv(N, meta["BLOCK"]),), compute_capability=90, launcher="jaxlib",
        )  # fmt: skip

    op, fields = _jaxlib_op(lower_for_cuda(f, f32((N,))))
    assert output_operand_aliases(op) == [(0, 0)]
    autotuned = _fields(fields[2][0])
    assert len(autotuned[2]) == 3
    descriptions = [_fields(c)[2][0] for c in autotuned[2]]
    assert b"BLOCK=64" in descriptions[0] and b"BLOCK=1024" in descriptions[2]
    # input buffer 0 aliases output buffer 1 (operands first, then results), 4 KiB to restore
    assert [_fields(a) for a in autotuned[3]] == [{1: [0], 2: [1], 3: [N * 4]}]


@pytest.mark.usefixtures("jaxlib_lowering")
def test_jaxlib_launcher_refuses_global_scratch() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, kernel=_descriptor_kernel, out_shape=x, grid=2, M=64, N=32, BLOCK=32, compute_capability=90,
            launcher="jaxlib",
        )  # fmt: skip

    with pytest.raises(KernelCallValueError, match=r"global scratch memory.*launcher='jt'"):
        lower_for_cuda(f, f32((64, 32)))


_DETERMINISM_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import jax, jax.numpy as jnp
    from cuda_testlib import add_call, lower_for_cuda, f32
    lowered = lower_for_cuda(lambda x, y: add_call(x, y, compute_capability=90), f32((1024,)), f32((1024,)))
    sys.stdout.write(lowered.as_text())
    """
)


def test_lowering_is_identical_in_two_processes() -> None:
    script = _DETERMINISM_SCRIPT.format(tests=str(Path(__file__).parent))
    texts = [
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300).stdout
        for _ in range(2)
    ]
    assert "triton_kernel_call_jt_cuda" in texts[0]
    assert texts[0] == texts[1]


def test_single_config_calls_use_the_preloaded_target(monkeypatch: pytest.MonkeyPatch) -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(x, x, kernel=sample_add_kernel, out_shape=x, grid=N // BLOCK, n=N, BLOCK=BLOCK,
                              compute_capability=90)  # fmt: skip

    spec = jax.ShapeDtypeStruct((N,), jnp.float32)
    lowered = jax.jit(f).trace(spec).lower(lowering_platforms=("cuda",))
    assert len(custom_calls(lowered, "triton_kernel_call_jt_cuda_preloaded")) == 1
    assert custom_calls(lowered, "triton_kernel_call_jt_cuda") == []
    monkeypatch.setenv("JT_CUDA_PRELOAD", "0")
    lowered = jax.jit(lambda x: f(x) * 1).trace(spec).lower(lowering_platforms=("cuda",))
    assert len(custom_calls(lowered, "triton_kernel_call_jt_cuda")) == 1


@pytest.mark.usefixtures("jaxlib_lowering")
def test_get_serialized_metadata_reads_the_jaxlib_launchers_call_and_its_target_is_the_published_name() -> None:
    import jt_core as jt

    lowered = lower_for_cuda(
        lambda x, y: add_call(x, y, compute_capability=90, launcher="jaxlib", serialized_metadata=b"meta\x01"),
        f32((N,)),
        f32((N,)),
    )
    (op,) = custom_calls(lowered, jt.CUSTOM_CALL_TARGET_NAME)
    assert jt.get_serialized_metadata(backend_config(op)["opaque"]) == b"meta\x01"
