"""jt's ROCm FFI handler library: it builds here from jt_core's shared launch header, its HIP declarations match
hip_runtime_api.h, and XLA parses its attributes."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from rocm_testlib import bound_call

from jt_core.gpu.handler import headers, include_dir
from jt_core.native import build_shared_library
from jt_core.testing import compile_request
from jt_core.triton_dialect import TritonDialect
from jt_rocm.backend import RocmBackend
from jt_rocm.launchers import HANDLER as handler
from jt_rocm.launchers import RocmJtLauncher

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None, reason="no compiler")

HEADER = "jt_launch_common.h"
STAGES = ("instantiate", "instantiate_preloaded", "initialize", "execute", "state_type_id", "state_type_info")


def _cuda_source() -> Path | None:
    try:
        from jt_cuda.launchers import HANDLER as cuda_handler
    except ImportError:
        return None
    return cuda_handler.source


def _includes() -> list[str]:
    return [jax.ffi.include_dir(), str(include_dir())]


def _exported(path: Path) -> str:
    return subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True).stdout


def test_library_builds_and_exports_the_stage_handlers(tmp_path: Path) -> None:
    first = build_shared_library(
        "jt_rocm_launch_probe", [handler.source], include_dirs=_includes(), headers=headers(), directory=tmp_path
    )
    second = build_shared_library(
        "jt_rocm_launch_probe", [handler.source], include_dirs=_includes(), headers=headers(), directory=tmp_path
    )
    assert first.built and not second.built and first.path == second.path
    symbols = _exported(first.path)
    for stage in STAGES:
        assert f" T jt_rocm_launch_{stage}\n" in symbols
    assert " T jt_rocm_launch_driver_error\n" in symbols


def test_the_shared_header_ships_with_jt_core() -> None:
    assert (include_dir() / HEADER).is_file()
    text = "".join(path.read_text() for path in headers())
    assert "JT_LAUNCH_DEFINE_HANDLERS" in text and "Autotune(" in text and "RememberConfig(" in text


def test_cuda_and_rocm_handlers_include_the_shared_header_and_do_not_copy_it() -> None:
    sources = [handler.source]
    cuda = _cuda_source()
    if cuda is not None:
        sources.append(cuda)
    for source in sources:
        text = source.read_text()
        assert f'#include "{HEADER}"' in text
        # The driver-neutral logic lives only in the header.
        for shared in ("ReadRememberedConfig", "Autotune(", "TimeConfig(", "GetAttr<", "param_kinds"):
            assert shared not in text, f"{source.name} defines {shared!r} itself"


def test_both_libraries_build_from_the_header_on_the_include_path(tmp_path: Path) -> None:
    # A header of the same name earlier on the include path replaces jt_core's: both libraries then carry what it
    # defines, which shows they take their handler from it.
    override = tmp_path / "include"
    override.mkdir()
    original = (include_dir() / HEADER).read_text()
    marker = 'extern "C" int jt_launch_common_marker() { return 7; }\n'
    (override / HEADER).write_text(original.replace("#endif  // JT_LAUNCH_COMMON_H_", marker + "#endif"))
    sources = {"rocm": handler.source}
    cuda = _cuda_source()
    if cuda is not None:
        sources["cuda"] = cuda
    for platform, source in sources.items():
        built = build_shared_library(
            f"jt_{platform}_launch_marker",
            [source],
            include_dirs=[str(override), *_includes()],
            libraries=("dl",),
            directory=tmp_path / "cache",
        )
        symbols = _exported(built.path)
        assert " T jt_launch_common_marker\n" in symbols, platform
        assert f" T jt_{platform}_launch_execute\n" in symbols, platform
    if cuda is None:
        pytest.skip("jt-cuda is not installed: only the ROCm library was built from the header")


def _hip_include() -> Path:
    import triton

    return Path(triton.__file__).parent / "backends" / "amd" / "include"


_ABI_PROBE = r"""
#include <cstdio>
#include "hip/hip_runtime_api.h"
int main() {
  long long v[] = {
    (long long)sizeof(hipError_t), (long long)hipSuccess, (long long)hipDeviceAttributeMaxSharedMemoryPerBlock,
    (long long)hipStreamCaptureStatusNone,
  };
  for (unsigned i = 0; i < sizeof(v) / sizeof(v[0]); ++i) std::printf("%lld\n", v[i]);
}
"""


def test_hip_declarations_match_hip_runtime_api_h(tmp_path: Path) -> None:
    include = _hip_include()
    if not (include / "hip" / "hip_runtime_api.h").is_file():
        pytest.skip("this Triton ships no HIP headers")
    source = tmp_path / "abi.cc"
    source.write_text(_ABI_PROBE)
    binary = tmp_path / "abi"
    compile_command = ["g++", "-std=c++17", "-D__HIP_PLATFORM_AMD__", f"-I{include}", str(source), "-o", str(binary)]
    subprocess.run(compile_command, check=True)
    expected = [int(line) for line in subprocess.run([str(binary)], capture_output=True, text=True).stdout.split()]
    assert handler.abi_layout() == expected


def test_hip_prototypes_match_hip_runtime_api_h() -> None:
    # Every entry point the driver table declares is declared by HIP with the same number of parameters.
    include = _hip_include()
    api = include / "hip" / "hip_runtime_api.h"
    if not api.is_file():
        pytest.skip("this Triton ships no HIP headers")
    header = re.sub(r"__dparm\([^)]*\)", "", re.sub(r"\s+", " ", api.read_text()))  # default arguments
    ours = re.findall(r"\(\*(hip\w+)\)\(([^;]*)\);", handler.source.read_text().replace("\n", " "))
    assert len(ours) >= 20
    for name, params in ours:
        found = re.search(rf"\b{name}\(([^)]*)\)\s*;", header)
        assert found is not None, f"{name} is not declared by hip_runtime_api.h"
        theirs = [p for p in found.group(1).split(",") if p.strip() and p.strip() != "void"]
        mine = [p for p in re.sub(r"\s+", " ", params).split(",") if p.strip()]
        assert len(mine) == len(theirs), f"{name}: {mine} vs {theirs}"


def test_hip_runtime_absence_is_reported_not_fatal() -> None:
    error = handler.driver_error()
    if Path("/dev/kfd").exists():
        assert error == ""
    else:
        assert "libamdhip64" in error


def _cpu_probe_target(lib: Any, preloaded: bool) -> str:
    """Registers the handler for the CPU platform under a probe name: XLA then runs its instantiate stage."""
    name = "jt_rocm_launch_cpu_probe" + ("_preloaded" if preloaded else "")
    done: set[str] = _cpu_probe_target.__dict__.setdefault("done", set())
    if not done:
        jax.devices("cpu")  # the CPU client must exist before the type and the target are registered
        jax.ffi.register_ffi_type(
            "jt_rocm.KernelState.cpu_probe",
            {
                "type_id": handler.capsule(lib.jt_rocm_launch_state_type_id()),
                "type_info": handler.capsule(lib.jt_rocm_launch_state_type_info()),
            },
            platform="cpu",
        )
    if name not in done:
        handlers = handler.handler_capsules()
        if preloaded:
            handlers = {
                "instantiate": jax.ffi.pycapsule(lib.jt_rocm_launch_instantiate_preloaded),
                "execute": handlers["execute"],
            }
        jax.ffi.register_ffi_target(name, handlers, platform="cpu", api_version=1)
        done.add(name)
    return name


def _run_probe(drop: str | None = None, preloaded: bool = False) -> str:
    from jax._src.interpreters import mlir
    from jax.extend.core import Primitive

    target = _cpu_probe_target(handler.library(), preloaded)
    call = bound_call(backend_options={"arch": "gfx942"})
    backend = RocmBackend()
    kernel = backend.compile(compile_request(backend, call, backend.target(call, None), TritonDialect()))
    primitive = Primitive(f"jt_rocm_probe_{drop}_{preloaded}")
    primitive.multiple_results = True
    primitive.def_abstract_eval(lambda *avals: [jax.core.ShapedArray((64,), jnp.float32)])

    def lowering(ctx: Any, *operands: Any) -> Any:
        attributes, _ = RocmJtLauncher().attributes(call, [kernel], None)
        if drop is not None:
            del attributes[drop]
        result_type = mlir.aval_to_ir_type(ctx.module_context, ctx.avals_out[0])
        return mlir.custom_call(
            target, result_types=[result_type], operands=list(operands), backend_config=attributes, api_version=4
        ).results

    mlir.register_lowering(primitive, lowering, platform="cpu")
    with pytest.raises(Exception) as info:
        jax.jit(lambda a, b: primitive.bind(a, b))(np.ones(64, np.float32), np.ones(64, np.float32))
    return str(info.value)


def test_xla_parses_the_launch_attributes() -> None:
    # On a CPU client the instantiate stage runs (parsing every attribute); execute then stops at the GPU stream.
    message = _run_probe()
    assert "platform stream" in message or "GPU context" in message
    assert "attribute" not in message


def test_a_missing_attribute_fails_instantiate_with_its_name() -> None:
    message = _run_probe(drop="binary_0")
    assert "jt_rocm: attribute 'binary_0' is missing" in message


def test_preloading_without_a_hip_runtime_is_harmless() -> None:
    message = _run_probe(preloaded=True)
    assert "platform stream" in message or "GPU context" in message
