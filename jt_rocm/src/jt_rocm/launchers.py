"""The ROCm launchers: jt's own launch handler (``"jt"``) and jaxlib's Triton kernel-call handler (``"jaxlib"``).

* ``"jt"`` (priority 20): jt's launch handler on the HIP runtime (``csrc/jt_rocm_launch.cc`` over jt-core's shared
  handler; ``libamdhip64.so`` is opened with ``dlopen`` when a call first runs, so neither ROCm nor its headers are
  needed to build it). The custom call carries everything as attributes, the HSACO code object included as
  **bytes**, so a lowered or exported module is self-contained and deterministic. Programs are launched with
  ``num_warps * warp_size`` threads, the warp size being the one the kernel was compiled for (64 on CDNA, 32 on
  RDNA).
* ``"jaxlib"`` (priority 10): the handler of jaxlib's ROCm plugin. It loads modules only from files and launches
  ``num_warps * 64`` threads per program, so the HSACO is written to a content-addressed file in the cache root's
  ``rocm-hsaco`` folder (``JT_ROCM_HSACO_DIR`` overrides it) and the warp count is given in its units. An
  executable exported elsewhere needs the same file there.
* ``"xla"`` (opt-in): XLA's own Triton custom call with the kernel's Triton IR (`jt_core.gpu.xla`). Pallas
  lowers its Triton kernels to the same call on ROCm, so XLA's ROCm build takes it; it has not been run on AMD
  hardware.
"""

from __future__ import annotations

import hashlib
import stat
from collections.abc import Sequence
from pathlib import Path

from jt_core.gpu import HandlerLauncher, JaxlibLauncher, LaunchHandlerLibrary, XlaTritonLauncher, jaxlib_call
from jt_core.plugin import CompiledKernel, KernelCall, KernelCallValueError, LaunchConfig, files, settings

__all__ = [
    "HANDLER",
    "HSACO_DIR_ENV",
    "JAXLIB_THREADS_PER_WARP",
    "RocmJaxlibLauncher",
    "RocmJtLauncher",
    "RocmXlaLauncher",
    "hsaco_dir",
    "store_hsaco",
]

#: jt's launch handler on the HIP runtime (symbols ``jt_rocm_launch_*``), and its XLA targets
#: (``triton_kernel_call_jt_rocm``, ``triton_kernel_call_jt_rocm_preloaded``).
HANDLER = LaunchHandlerLibrary(
    prefix="jt_rocm_launch",
    source=Path(__file__).parent / "csrc" / "jt_rocm_launch.cc",
    platform="ROCM",
    preload_variable="JT_ROCM_PRELOAD",
    target_name="triton_kernel_call_jt_rocm",
)

#: Overrides the folder HSACO files are written to for jaxlib's handler.
HSACO_DIR_ENV = "JT_ROCM_HSACO_DIR"
#: Threads per warp jaxlib's ROCm handler assumes when it turns ``num_warps`` into a block size.
JAXLIB_THREADS_PER_WARP = 64


class RocmJtLauncher(HandlerLauncher):
    """Launches through jt's own XLA FFI handler on the HIP runtime."""

    platform = "rocm"
    handler = HANDLER

    def check(self, call: KernelCall, kernels: Sequence[CompiledKernel]) -> None:
        for config, kernel in zip(call.configs, kernels):
            if kernel.cluster_dims[0] != 1 or kernel.metadata.get("launch_pdl"):
                raise KernelCallValueError(
                    f"triton_call {call.name!r} config [{config.label}] asks for thread-block clusters or a "
                    "programmatic dependent launch, which the ROCm handler does not perform; use num_ctas=1"
                )


def hsaco_dir() -> Path:
    """``$JT_ROCM_HSACO_DIR``, else the cache root's ``rocm-hsaco`` folder; either is created private and checked
    like every cache folder (`jt_core.files.private_folder`): a folder that fails is not used.

    Raises:
        OSError: When no folder at all can be had.
    """
    explicit = settings.text(HSACO_DIR_ENV)
    if explicit:
        return files.private_folder(Path(explicit).expanduser(), "rocm-hsaco")
    return files.cache_folder("rocm-hsaco")


def _holds(path: Path, hsaco: bytes) -> bool:
    """Whether ``path`` is a plain file (no link, whose target could change after this check) holding exactly
    ``hsaco``: its SHA-256 is the one its name records."""
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            return False
    except OSError:
        return False
    data = files.read_file(path)
    return data is not None and hashlib.sha256(data).digest() == hashlib.sha256(hsaco).digest()


def store_hsaco(kernel_name: str, hsaco: bytes) -> Path:
    """Writes ``hsaco`` and returns its path, ``<kernel>-<sha256>.hsaco``: the same bytes always map to the same
    path, so the lowering stays deterministic. A file already there is referenced only when it is a plain file
    whose contents have the SHA-256 its name records; anything else (corrupt, truncated, of the right size but other
    bytes, a link, a folder) is replaced. The folder itself is one only this user may write to (a folder that
    fails `jt_core.files.folder_problem` is not used), so nothing can be planted there after the check.
    Where the folder cannot take the file (a full disk, a read-only folder: reported once), it goes to a private
    folder of the process instead.

    Raises:
        OSError: When no folder at all can take the file (jaxlib's handler loads it from a file).
    """
    if not hsaco:
        raise ValueError(f"kernel {kernel_name!r} has an empty HSACO")
    name = f"{files.safe_name(kernel_name)}-{hashlib.sha256(hsaco).hexdigest()}.hsaco"
    try:
        path = hsaco_dir() / name
    except OSError as exc:
        files.report_fault(Path(settings.text(HSACO_DIR_ENV) or files.configured_root() / "rocm-hsaco"), exc, "create")
    else:
        if _holds(path, hsaco) or files.write_file(path, hsaco):
            return path
    path = files.scratch_folder("rocm-hsaco") / name
    files.atomic_write(path, hsaco)
    return path


class RocmJaxlibLauncher(JaxlibLauncher):
    """Launches through the Triton kernel-call handler of jaxlib's ROCm plugin (HSACO from a file)."""

    platform = "rocm"

    def kernel_spec(self, call: KernelCall, config: LaunchConfig, kernel: CompiledKernel) -> jaxlib_call.KernelSpec:
        threads = kernel.num_warps * kernel.target.warp_size
        if threads % JAXLIB_THREADS_PER_WARP:
            raise KernelCallValueError(
                f"triton_call {call.name!r}: compiled for {kernel.target.arch} with {kernel.num_warps} warps of "
                f"{kernel.target.warp_size} threads ({threads} threads), but jaxlib's ROCm handler launches "
                f"multiples of {JAXLIB_THREADS_PER_WARP} threads; use an even num_warps"
            )
        return jaxlib_call.KernelSpec(
            name=kernel.name,
            num_warps=threads // JAXLIB_THREADS_PER_WARP,
            shared_mem_bytes=kernel.shared_mem,
            module=str(store_hsaco(kernel.name, kernel.binary)),
        )


class RocmXlaLauncher(XlaTritonLauncher):
    """Hands the kernel's Triton IR to XLA's own Triton custom call on ROCm."""

    platform = "rocm"
