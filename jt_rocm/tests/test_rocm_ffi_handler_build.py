"""jt's ROCm launch handler library: it passes jt-core's handler conformance suite (it builds here from the shared
header, XLA parses its attributes, ...), and its HIP declarations match hip_runtime_api.h."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from rocm_testlib import bound_call

from jt_core.call import KernelCall
from jt_core.plugin import CompiledKernel
from jt_core.testing import LaunchHandlerConformance
from jt_core.testing._calls import compile_request
from jt_rocm.backend import RocmBackend
from jt_rocm.launchers import HANDLER as handler
from jt_rocm.launchers import RocmJtLauncher

# Without a compiler the handler's checks run on the library jt-rocm's platform wheel carries prebuilt.
pytestmark = pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None and handler.spec().prebuilt().path is None,
    reason="no compiler, and no prebuilt handler library",
)


class TestRocmHandlerConformance(LaunchHandlerConformance):
    runtime_library = "libamdhip64"
    device_nodes = ("/dev/kfd",)

    @pytest.fixture
    def launcher(self) -> RocmJtLauncher:
        return RocmJtLauncher()

    @pytest.fixture
    def handler_call(self) -> tuple[KernelCall, list[CompiledKernel]]:
        call = bound_call(backend_options={"arch": "gfx942"})
        backend = RocmBackend()
        return call, [backend.compile(compile_request(backend, call))]


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


@pytest.mark.skipif(shutil.which("g++") is None, reason="compiles a probe against hip_runtime_api.h with g++")
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
