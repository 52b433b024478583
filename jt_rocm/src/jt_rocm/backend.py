"""The ROCm backend: compiles kernels to AMDGCN and HSACO with Triton's AMD backend."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from jt_core.plugin import (
    Backend,
    CompiledKernel,
    CompileOptions,
    CompileRequest,
    KernelCallTypeError,
    KernelCallValueError,
    OutOfResourcesError,
    Target,
    TritonOptions,
    plain_metadata,
)
from jt_rocm import _compat
from jt_rocm.target import (
    ARCH_OPTION,
    MAX_THREADS_PER_BLOCK,
    GfxArch,
    no_arch_error,
    parse_arch,
    requested_arch,
)

# Options jt sets itself; the rest of Triton's HIPOptions may be given through backend_options.
_RESERVED_OPTIONS = frozenset({"arch", "backend_name", "extern_libs"})


def _hip_option_names() -> frozenset[str]:
    from triton.backends.amd.compiler import HIPOptions

    return frozenset(HIPOptions.__dataclass_fields__) - _RESERVED_OPTIONS


def arch_of(target: Target) -> GfxArch:
    """The `GfxArch` of a ROCm target."""
    return parse_arch(target.arch, "target.arch")


@dataclasses.dataclass(frozen=True)
class RocmOptions(TritonOptions):
    """The options one configuration compiles with for ROCm: what Triton's AMD backend is given (its ``HIPOptions``
    fills in its own defaults for the options not set here), ``backend_options["arch"]`` left out (it chooses the
    target). Built by `parse`, which checks them against the target's architecture."""

    @classmethod
    def parse(cls, options: CompileOptions, target: Target, name: str) -> RocmOptions:
        """The options of one configuration for ``target``.

        Raises:
            KernelCallValueError: For more threads per program than AMD GPUs allow, for clusters, and for a
                ``backend_options`` entry Triton's AMD backend does not know, naming it.
        """
        arch = arch_of(target)
        warps = options.num_warps  # a power of two: CompileOptions checks that for every backend
        if warps * arch.warp_size > MAX_THREADS_PER_BLOCK:
            raise KernelCallValueError(
                f"triton_call {name!r}: num_warps={warps} gives {warps * arch.warp_size} threads per program "
                f"on {arch.name} ({arch.warp_size} threads per wavefront); AMD GPUs allow at most "
                f"{MAX_THREADS_PER_BLOCK}, so use num_warps <= {MAX_THREADS_PER_BLOCK // arch.warp_size}"
            )
        if options.num_ctas != 1:
            raise KernelCallValueError(
                f"triton_call {name!r}: num_ctas={options.num_ctas} asks for thread-block clusters, which the "
                "ROCm backend does not launch; use num_ctas=1"
            )
        allowed = _hip_option_names()
        for key, _ in options.extra:
            if key != ARCH_OPTION and key not in allowed:
                raise KernelCallValueError(
                    f"triton_call {name!r}: backend_options has {key!r}, which Triton's AMD backend does not "
                    f"know; valid options are {sorted(allowed | {ARCH_OPTION})}"
                )
        return cls.of(options, leave_out=frozenset({ARCH_OPTION}))


class RocmBackend(Backend):
    """Compiles Triton (and, with jt-gluon, Gluon) kernels for AMD GPUs.

    The target architecture is, in order: ``backend_options={"arch": "gfx942"}`` on the call, the environment
    variable ``JT_ROCM_ARCH``, the architecture of the device being lowered for. ``compute_capability=`` is a CUDA
    argument and is ignored here (a string there is refused, pointing at ``backend_options``).
    """

    platform = "rocm"

    def target_label(self, target: Target) -> str:
        return str(target.arch)

    def binary_file_suffix(self, kernel: CompiledKernel) -> str:
        return "hsaco"

    def target(self, *, backend_arguments: Mapping[str, Any], device: Any | None, name: str) -> Target:
        cuda_capability = backend_arguments.get("compute_capability")
        if isinstance(cuda_capability, str):
            raise KernelCallTypeError(
                f"triton_call {name!r}: compute_capability={cuda_capability!r} is a CUDA argument "
                f"(an int such as 90); name an AMD GPU with backend_options={{{ARCH_OPTION!r}: "
                f"{cuda_capability!r}}} instead"
            )
        arch = requested_arch(backend_arguments.get("backend_options", {}))
        if arch is None and device is not None:
            reported = _compat.device_arch(device)
            if reported is not None:
                arch = parse_arch(reported, f"the architecture reported by device {device}")
        if arch is None:
            raise no_arch_error(name)
        return Target(platform=self.platform, arch=arch.name, warp_size=arch.warp_size)

    def parse_options(
        self, *, options: CompileOptions, backend_arguments: Mapping[str, Any], target: Target, name: str, label: str
    ) -> RocmOptions:
        return RocmOptions.parse(options, target, name)

    def compile(self, request: CompileRequest) -> CompiledKernel:
        import triton
        from triton.backends.compiler import GPUTarget

        arch = arch_of(request.target)
        assert isinstance(request.options, RocmOptions), request.options
        options = request.options.triton_options()
        source = request.dialect.make_source(request.kernel, request.specialization, request.target)
        compiled = triton.compile(source, target=GPUTarget("hip", arch.name, arch.warp_size), options=options)
        metadata = _compat.metadata_dict(compiled.metadata)
        shared = int(metadata.get("shared") or 0)
        if shared > arch.lds_bytes:
            raise OutOfResourcesError(
                f"triton_call {request.call.name!r} with config [{request.config.label}] needs {shared} bytes of "
                f"shared memory (LDS) but {arch.name} offers {arch.lds_bytes} per workgroup; use smaller blocks or "
                "fewer num_stages"
            )
        asm = {stage: compiled.asm[stage] for stage in _compat.IR_STAGES if stage in compiled.asm}
        kernel = CompiledKernel(
            name=str(metadata.get("name") or compiled.name),
            target=request.target,
            binary=bytes(compiled.asm["hsaco"]),
            asm=asm,
            metadata=plain_metadata({k: v for k, v in metadata.items() if k != "target"}),
            num_warps=int(metadata.get("num_warps") or request.options.num_warps),
            shared_mem=shared,
            cluster_dims=(1, 1, 1),
            global_scratch_size=int(metadata.get("global_scratch_size") or 0),
            global_scratch_align=int(metadata.get("global_scratch_align") or 1),
        )
        return kernel
