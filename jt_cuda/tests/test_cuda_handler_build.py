"""jt's CUDA FFI handler library: it builds here, its driver declarations match cuda.h, XLA parses its attributes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cuda_testlib import add_kernel

from jt_core.call import CallOptions
from jt_core.gpu.handler import headers, include_dir
from jt_core.testing import bind, compile_request
from jt_core.triton_dialect import TritonDialect
from jt_cuda.backend import CudaBackend
from jt_cuda.launchers import HANDLER as handler
from jt_cuda.launchers import CudaJtLauncher

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None, reason="no compiler")

_ABI_PROBE = r"""
#include <cstddef>
#include <cstdio>
#include "cuda.h"
int main() {
  long long v[] = {
    (long long)sizeof(CUlaunchConfig), (long long)offsetof(CUlaunchConfig, hStream),
    (long long)offsetof(CUlaunchConfig, attrs), (long long)offsetof(CUlaunchConfig, numAttrs),
    (long long)sizeof(CUlaunchAttribute), (long long)offsetof(CUlaunchAttribute, value),
    (long long)sizeof(CUlaunchAttributeValue),
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, CU_FUNC_CACHE_PREFER_SHARED,
    CU_LAUNCH_ATTRIBUTE_COOPERATIVE, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, CU_CLUSTER_SCHEDULING_POLICY_SPREAD,
  };
  for (unsigned i = 0; i < sizeof(v) / sizeof(v[0]); ++i) std::printf("%lld\n", v[i]);
}
"""


def test_library_builds_and_is_cached(tmp_path: Path) -> None:
    from jt_core.native import build_shared_library

    first = build_shared_library(
        "jt_cuda_launch_probe",
        [handler.source],
        include_dirs=[jax.ffi.include_dir(), str(include_dir())],
        headers=headers(),
        libraries=("dl",),
        directory=tmp_path,
    )
    second = build_shared_library(
        "jt_cuda_launch_probe",
        [handler.source],
        include_dirs=[jax.ffi.include_dir(), str(include_dir())],
        headers=headers(),
        libraries=("dl",),
        directory=tmp_path,
    )
    assert first.built and not second.built
    assert first.path == second.path and first.path.read_bytes()[:4] == b"\x7fELF"
    symbols = subprocess.run(["nm", "-D", str(first.path)], capture_output=True, text=True, check=True).stdout
    for name in ("jt_cuda_launch_instantiate", "jt_cuda_launch_initialize", "jt_cuda_launch_execute"):
        assert f" T {name}" in symbols


def test_driver_declarations_match_cuda_h(tmp_path: Path) -> None:
    import triton

    include = Path(triton.__file__).parent / "backends" / "nvidia" / "include"
    assert (include / "cuda.h").is_file()
    source = tmp_path / "abi.cc"
    source.write_text(_ABI_PROBE)
    binary = tmp_path / "abi"
    subprocess.run(["g++", "-std=c++17", f"-I{include}", str(source), "-o", str(binary)], check=True)
    expected = [int(line) for line in subprocess.run([str(binary)], capture_output=True, text=True).stdout.split()]
    assert handler.abi_layout() == expected


def test_driver_absence_is_reported_not_fatal() -> None:
    error = handler.driver_error()
    if Path("/dev/nvidiactl").exists():
        assert error == ""
    else:
        assert "libcuda" in error


def _cpu_probe_target(lib: Any) -> str:
    """Registers the handler for the CPU platform under a probe name: XLA then runs its instantiate stage."""
    name = "jt_cuda_launch_cpu_probe"
    if not getattr(_cpu_probe_target, "done", False):
        jax.devices("cpu")  # the CPU client must exist before the type and the target are registered
        jax.ffi.register_ffi_type(
            "jt_cuda.KernelState.cpu_probe",
            {
                "type_id": handler.capsule(lib.jt_cuda_launch_state_type_id()),
                "type_info": handler.capsule(lib.jt_cuda_launch_state_type_info()),
            },
            platform="cpu",
        )
        jax.ffi.register_ffi_target(name, handler.handler_capsules(), platform="cpu", api_version=1)
        _cpu_probe_target.done = True  # type: ignore[attr-defined]
    return name


def _run_probe(drop: str | None = None) -> str:
    from jax._src.interpreters import mlir
    from jax.extend.core import Primitive

    lib = handler.library()
    target = _cpu_probe_target(lib)
    x = jax.ShapeDtypeStruct((256,), jnp.float32)
    options = CallOptions(x, grid=2, zeroed_outputs=(0,), name="probe", compute_capability=90)
    call = bind(add_kernel, (x, x), {"n": 256, "BLOCK": 128}, options)
    backend = CudaBackend()
    kernel = backend.compile(compile_request(backend, call, backend.target(call, None), TritonDialect()))
    primitive = Primitive(f"jt_cuda_probe_{drop}")
    primitive.multiple_results = True
    primitive.def_abstract_eval(lambda *avals: [jax.core.ShapedArray((256,), jnp.float32)])

    def lowering(ctx: Any, *operands: Any) -> Any:
        attributes, _ = CudaJtLauncher().attributes(call, [kernel], None)
        if drop is not None:
            del attributes[drop]
        result_type = mlir.aval_to_ir_type(ctx.module_context, ctx.avals_out[0])
        return mlir.custom_call(
            target, result_types=[result_type], operands=list(operands), backend_config=attributes, api_version=4
        ).results

    mlir.register_lowering(primitive, lowering, platform="cpu")
    with pytest.raises(Exception) as info:
        jax.jit(lambda a, b: primitive.bind(a, b))(np.ones(256, np.float32), np.ones(256, np.float32))
    return str(info.value)


def test_xla_parses_the_launch_attributes() -> None:
    # On a CPU client the instantiate stage runs (parsing every attribute); execute then stops at the GPU stream.
    message = _run_probe()
    assert "platform stream" in message or "GPU context" in message
    assert "attribute" not in message


def test_a_missing_attribute_fails_instantiate_with_its_name() -> None:
    message = _run_probe(drop="scalars")
    assert "attribute 'scalars' is missing" in message


def test_record_targets_register_through_the_api_xla_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    """XLA passes its FFI API to the library when it registers a target (a metadata call); the targets with a record
    stage are then registered through that API, and lowering picks them (but not for export, nor when turned off)."""
    from jt_core.gpu.handler import LaunchHandlerLibrary

    lib = handler.library()
    _cpu_probe_target(lib)  # XLA has now called the library
    probe = LaunchHandlerLibrary("jt_cuda_launch", handler.source, "cpu", "JT_PROBE_PRELOAD", "JT_PROBE_RECORD")
    probe.record_target_name = "jt_cuda_launch_cpu_probe_record"
    probe.record_preloaded_target_name = "jt_cuda_launch_cpu_probe_record_preloaded"
    assert probe.custom_call_target(True) == probe.preloaded_target_name  # nothing registered yet
    probe._register_record(lib)
    assert probe.record_unavailable is None
    assert probe.custom_call_target(True) == probe.record_preloaded_target_name
    assert probe.custom_call_target(False) == probe.record_target_name
    assert probe.custom_call_target(True, for_export=True) == probe.preloaded_target_name
    monkeypatch.setenv("JT_PROBE_RECORD", "0")
    assert probe.custom_call_target(True) == probe.preloaded_target_name
    assert probe.record_counts() == handler.record_counts()  # one library, one set of counters


def test_a_handler_without_record_stage_keeps_the_plain_targets() -> None:
    from jt_core.gpu.handler import LaunchHandlerLibrary

    probe = LaunchHandlerLibrary("jt_cuda_launch", handler.source, "cpu", "JT_PROBE_PRELOAD")
    probe._register_record(handler.library())
    assert probe.record_unavailable == "this runtime's handler has no record stage"
    assert probe.custom_call_target(False) == probe.target_name
