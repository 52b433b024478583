"""The ``toy`` backend and launcher.

``ToyBackend.parse_options`` turns each configuration's options into the backend's own frozen ``ToyOptions``
(its defaults and checks in one place). ``ToyBackend.compile`` runs Triton's real compiler front end (source to
Triton IR, ``ttir``) for the kernel, as a GPU backend's first stage would; a real backend would continue to its
device's binary. ``ToyLauncher.lower`` emits an XLA FFI custom call named ``toy_triton_kernel`` whose attributes
carry the kernel name and grid: what a real launcher's run-time handler would read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from jt_core.plugin import (
    Backend,
    CompiledKernel,
    CompileOptions,
    CompileRequest,
    KernelCallValueError,
    Launcher,
    Target,
)

PLATFORM = "toy"
CUSTOM_CALL_TARGET = "toy_triton_kernel"
TOY_TARGET = Target(platform=PLATFORM, arch="toy1", warp_size=32)


@dataclasses.dataclass(frozen=True)
class ToyOptions:
    """What a kernel compiles with on the ``toy`` platform: the backend's own options, defaults and checks."""

    num_warps: int = 4
    enable_fp_fusion: bool = True
    #: A toy option, given as ``backend_options={"unroll": 2}``.
    unroll: int = 1

    def __post_init__(self) -> None:
        if self.unroll not in (1, 2, 4):
            raise KernelCallValueError(f"backend_options['unroll'] must be 1, 2 or 4 on 'toy', got {self.unroll!r}")


class ToyBackend(Backend):
    """Compiles kernels to Triton IR for the ``toy`` platform."""

    platform = PLATFORM

    def target(self, *, backend_arguments: Mapping[str, Any], device: Any | None, name: str) -> Target:
        # A real backend asks the device (or the call's backend_options) for its architecture.
        return TOY_TARGET

    def parse_options(
        self, *, options: CompileOptions, backend_arguments: Mapping[str, Any], target: Target, name: str, label: str
    ) -> ToyOptions:
        extra = dict(options.extra)
        unknown = sorted(set(extra) - {"unroll"})
        if unknown:
            raise KernelCallValueError(f"triton_call {name!r}: backend_options {unknown} are not options of 'toy'")
        return ToyOptions(num_warps=options.num_warps, enable_fp_fusion=options.enable_fp_fusion, **extra)

    def compile(self, request: CompileRequest) -> CompiledKernel:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend

        source = request.dialect.make_source(request.kernel, request.specialization, request.target)
        # Triton's front end needs a target for its options; any supported GPU architecture will do for ttir.
        triton_target = GPUTarget("cuda", 80, 32)
        backend = make_backend(triton_target)
        toy = request.options
        assert isinstance(toy, ToyOptions)
        options = backend.parse_options({"num_warps": toy.num_warps, "enable_fp_fusion": toy.enable_fp_fusion})
        context = triton._C.libtriton.ir.context()
        triton._C.libtriton.ir.load_dialects(context)
        backend.load_dialects(context)
        codegen_fns = backend.get_codegen_implementation(options)
        module_map = backend.get_module_map()
        module = source.make_ir(triton_target, options, codegen_fns, module_map, context)
        return CompiledKernel(
            name=request.call.name,
            target=request.target,
            asm={"ttir": str(module)},
            metadata={"num_warps": toy.num_warps, "unroll": toy.unroll},
            num_warps=toy.num_warps,
        )


class ToyLauncher(Launcher):
    """Emits a ``toy_triton_kernel`` custom call carrying the kernel name and grid."""

    platform = PLATFORM
    name = "toy-custom-call"
    priority = 10

    def lower(
        self, ctx: Any, call: Any, kernels: Sequence[CompiledKernel], operands: Sequence[Any], device: Any
    ) -> Sequence[Any]:
        import jax
        import numpy as np

        # A typed XLA FFI custom call; its attributes are what the run-time handler of a real platform reads.
        rule = jax.ffi.ffi_lowering(CUSTOM_CALL_TARGET, has_side_effect=call.launch.has_side_effect)
        return rule(
            ctx,
            *operands,
            kernel=kernels[0].name,
            grid=np.asarray(call.configs[0].grid, np.int64),
            ttir_bytes=np.int64(len(kernels[0].asm["ttir"])),
        )
