"""The CUDA backend: the target of a call, compiling through Triton's own stages to cubin, and resource checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from jt_core.plugin import (
    Backend,
    CompiledKernel,
    CompileOptions,
    CompileRequest,
    KernelCallValueError,
    OutOfResourcesError,
    Target,
    TritonOptions,
    plain_metadata,
    settings,
)
from jt_cuda import _compat, dependent_launch
from jt_cuda.target import limits_for, parse_compute_capability

#: Environment variable giving the compute capability when lowering without a CUDA device.
ARCH_VARIABLE = "JT_CUDA_ARCH"

#: IR stages kept in `CompiledKernel.asm`.
KEPT_STAGES = ("ttir", "ttgir", "llir", "ptx", "cubin")

#: Options jt sets itself; ``backend_options`` may not name them (they have their own arguments or are derived).
_RESERVED_OPTIONS = frozenset({"arch", "backend_name", "warp_size"})


@dataclasses.dataclass(frozen=True)
class CudaOptions(TritonOptions):
    """The options one configuration compiles with for CUDA: what Triton's CUDA backend is given (its
    ``CUDAOptions`` fills in its own defaults for the options not set here). Built by `parse`, which checks
    them against the target."""

    @classmethod
    def parse(cls, options: CompileOptions, target: Target, name: str, label: str) -> CudaOptions:
        """The options of one configuration for ``target``.

        Raises:
            KernelCallValueError: For clusters before sm90, and for a ``backend_options`` entry that jt sets itself
                or that Triton's CUDA backend does not know, naming it.
        """
        limits = limits_for(int(target.arch))
        if options.num_ctas > 1 and not limits.supports_clusters:
            raise KernelCallValueError(
                f"triton_call {name!r} config [{label}]: num_ctas={options.num_ctas} needs thread-block "
                f"clusters, which exist from sm90 (Hopper) on; the target is {limits.name}. Use num_ctas=1 or "
                "compile for compute_capability >= 90"
            )
        known = _compat.cuda_option_names()
        for key, _ in options.extra:
            if key in _RESERVED_OPTIONS:
                raise KernelCallValueError(
                    f"triton_call {name!r}: backend_options[{key!r}] is set by jt from the target; remove it "
                    "(use compute_capability= to choose the architecture)"
                )
            if key not in known:
                raise KernelCallValueError(
                    f"triton_call {name!r}: backend_options[{key!r}] is not an option of Triton's CUDA backend "
                    f"(triton {_compat.triton_version()}); known options: {sorted(known - _RESERVED_OPTIONS)}"
                )
        return cls.of(options)


def _target_for(value: Any, source: str, name: str) -> Target:
    try:
        return Target(platform="cuda", arch=parse_compute_capability(value, source), warp_size=32)
    except ValueError as exc:
        raise KernelCallValueError(f"triton_call {name!r}: {exc}") from None


def _check_shared_memory(request: CompileRequest, kernel_name: str, shared: int) -> None:
    """Refuses a kernel that needs more shared memory per block than the target allows.

    Raises:
        OutOfResourcesError: Naming the call, kernel, configuration and both figures.
    """
    limits = limits_for(int(request.target.arch))
    if shared > limits.max_shared_mem:
        raise OutOfResourcesError(
            f"triton_call {request.call.name!r} (kernel {kernel_name}) config [{request.config.label}] needs {shared} "
            f"bytes of shared memory per block, above the {limits.max_shared_mem} bytes "
            f"({limits.max_shared_mem // 1024} KiB) that {limits.name} allows (opt-in maximum); use smaller blocks or "
            "fewer num_stages"
        )


class CudaBackend(Backend):
    """Compiles Triton (and Gluon) kernels to cubin for NVIDIA GPUs.

    The target is the compute capability of the device the computation is lowered for, else the call's
    ``compute_capability=``, else ``JT_CUDA_ARCH``. Compiles go through ``triton.compile`` with an explicit
    ``GPUTarget``, so Triton picks the stage list for the source's language and no GPU is needed to compile; for
    sm90 and above the kernel is made to wait for its prerequisite grids at entry, so that jt's handler can launch
    it as a programmatic dependent (`jt_cuda.dependent_launch`; ``JT_CUDA_PDL=0`` turns it off).
    Compiled kernels are cached by jt-core (in memory and on disk); `restore` checks them against the
    device's limits whichever way they come.
    """

    platform = "cuda"

    def target_label(self, target: Target) -> str:
        return f"sm{target.arch}"

    def may_keep_on_disk(self, request: CompileRequest) -> bool:
        return True

    def binary_file_suffix(self, kernel: CompiledKernel) -> str:
        return "cubin"

    def cache_tag(self) -> str:
        return dependent_launch.cache_tag()

    # -- target ----------------------------------------------------------------------------------------------

    def target(self, *, backend_arguments: Mapping[str, Any], device: Any | None, name: str) -> Target:
        requested = backend_arguments.get("compute_capability")
        if requested is not None:
            return _target_for(requested, "compute_capability", name)
        if device is not None:
            text = _compat.device_compute_capability(device)
            if text is not None:
                return Target(platform="cuda", arch=parse_compute_capability(text, f"device {device}"), warp_size=32)
        env = settings.text(ARCH_VARIABLE)
        if env:
            return _target_for(env, ARCH_VARIABLE, name)
        raise KernelCallValueError(
            f"triton_call {name!r} is lowered for 'cuda' without a CUDA device to take the compute capability "
            f"from (export or cross-platform lowering); pass compute_capability= to triton_call (e.g. "
            f"compute_capability=90 for sm90) or set the environment variable {ARCH_VARIABLE}=90"
        )

    # -- options ---------------------------------------------------------------------------------------------

    def parse_options(
        self, *, options: CompileOptions, backend_arguments: Mapping[str, Any], target: Target, name: str, label: str
    ) -> CudaOptions:
        return CudaOptions.parse(options, target, name, label)

    # -- compile ---------------------------------------------------------------------------------------------

    def compile(self, request: CompileRequest) -> CompiledKernel:
        import triton

        source = request.dialect.make_source(request.kernel, request.specialization, request.target)
        arch = int(request.target.arch)
        assert isinstance(request.options, CudaOptions), request.options
        options = request.options.triton_options()
        if dependent_launch.applies(arch, options):

            def check_shared(metadata: Mapping[str, Any]) -> None:
                # Before ptxas, the longest stage, spends its time on a kernel that cannot run.
                name = str(metadata.get("name") or getattr(source, "name", ""))
                _check_shared_memory(request, name, int(metadata.get("shared", 0) or 0))

            compiled = dependent_launch.compile_waiting(source, _compat.gpu_target(arch), options, check_shared)
        else:
            compiled = triton.compile(source, target=_compat.gpu_target(arch), options=options)
        return self.restore(self._to_compiled_kernel(compiled, request.target), request)

    def restore(self, cached: CompiledKernel, request: CompileRequest) -> CompiledKernel:
        """Checks a compiled kernel, fresh or read back from jt's disk cache, against the target's limits."""
        self._check_limits(cached, request)
        return cached

    @staticmethod
    def _to_compiled_kernel(compiled: Any, target: Target) -> CompiledKernel:
        metadata = _compat.metadata_dict(compiled.metadata)
        plain = plain_metadata(metadata)
        asm = {stage: compiled.asm[stage] for stage in KEPT_STAGES if stage in compiled.asm}
        cubin = asm.get("cubin", b"")
        return CompiledKernel(
            name=str(metadata.get("name", compiled.name)),
            target=target,
            binary=bytes(cubin),
            asm=asm,
            metadata=plain,
            num_warps=int(metadata["num_warps"]),
            shared_mem=int(metadata.get("shared", 0) or 0),
            cluster_dims=_compat.cluster_dims(metadata),
            global_scratch_size=int(metadata.get("global_scratch_size", 0) or 0),
            global_scratch_align=int(metadata.get("global_scratch_align", 1) or 1),
        )

    @staticmethod
    def _check_limits(kernel: CompiledKernel, request: CompileRequest) -> None:
        """Refuses a kernel the target cannot launch (`OutOfResourcesError`: an autotuned call runs without that
        configuration, as Triton's autotuner skips one whose launch raises ``OutOfResources``)."""
        cc = int(request.target.arch)
        limits = limits_for(cc)
        name = request.call.name
        label = request.config.label
        _check_shared_memory(request, kernel.name, kernel.shared_mem)
        tmem = int(kernel.metadata.get("tmem_size", 0) or 0)
        if tmem > limits.tensor_memory_columns:
            raise OutOfResourcesError(
                f"triton_call {name!r} (kernel {kernel.name}) config [{label}] needs {tmem} columns of tensor "
                f"memory, above the {limits.tensor_memory_columns} that {limits.name} has; use smaller blocks"
            )
        if kernel.cluster_dims[0] * kernel.cluster_dims[1] * kernel.cluster_dims[2] > 8:
            raise KernelCallValueError(
                f"triton_call {name!r} (kernel {kernel.name}) config [{label}] has cluster {kernel.cluster_dims}, "
                "above the portable maximum of 8 blocks per cluster"
            )
        block = kernel.num_warps * 32
        if block > 1024:
            raise OutOfResourcesError(
                f"triton_call {name!r} (kernel {kernel.name}) config [{label}] runs {kernel.num_warps} warps "
                f"({block} threads) per block, above the 1024 threads a CUDA block may have; lower num_warps"
            )
