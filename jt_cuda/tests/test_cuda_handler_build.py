"""jt's CUDA launch handler library: it passes jt-core's handler conformance suite (it builds here from the shared
header, XLA parses its attributes, ...), and its driver declarations match cuda.h."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from jt_core.call import KernelCall
from jt_core.plugin import CompiledKernel
from jt_core.testing import LaunchHandlerConformance
from jt_core.testing._calls import compile_request, sample_call
from jt_cuda.backend import CudaBackend
from jt_cuda.launchers import HANDLER as handler
from jt_cuda.launchers import CudaJtLauncher

# Without a compiler the handler's checks run on the library jt-cuda's platform wheel carries prebuilt.
pytestmark = pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None and handler.spec().prebuilt().path is None,
    reason="no compiler, and no prebuilt handler library",
)


class TestCudaHandlerConformance(LaunchHandlerConformance):
    runtime_library = "libcuda"
    device_nodes = ("/dev/nvidiactl",)

    @pytest.fixture
    def launcher(self) -> CudaJtLauncher:
        return CudaJtLauncher()

    @pytest.fixture
    def handler_call(self) -> tuple[KernelCall, list[CompiledKernel]]:
        call = sample_call(size=256, compute_capability=90, BLOCK=128)
        backend = CudaBackend()
        return call, [backend.compile(compile_request(backend, call))]


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


@pytest.mark.skipif(shutil.which("g++") is None, reason="compiles a probe against cuda.h with g++")
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
