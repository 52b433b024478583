"""The roles a plugin fills -- :class:`Backend`, :class:`Launcher`, :class:`Dialect` -- and the values they pass.

Each role is an abstract base class: a plugin that forgets a method fails when it constructs the object, not in
the middle of a lowering. Targets, options and requests are frozen dataclasses.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from jt_core.binding import KernelCall, LaunchConfig


@dataclasses.dataclass(frozen=True)
class Target:
    """What a kernel is compiled for.

    Attributes:
        platform: The JAX lowering platform (``"cpu"``, ``"cuda"``, ``"rocm"``, ...).
        arch: Backend-specific architecture: a compute capability such as ``90`` for CUDA, ``"gfx942"`` for ROCm,
            ``"interpreter"`` for the CPU backend.
        warp_size: Threads per warp (wavefront) on this architecture.
    """

    platform: str
    arch: int | str
    warp_size: int


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """Compiler options of one kernel configuration.

    Attributes:
        num_warps: Warps per program.
        num_stages: Software-pipelining stages.
        num_ctas: Programs per cluster (CUDA sm90+).
        enable_fp_fusion: Whether multiply-adds may be fused.
        debug: Compile with Triton's debug checks and print the IRs.
        extra: Further backend-specific options (``backend_options=``), as sorted ``(name, value)`` pairs.
    """

    num_warps: int = 4
    num_stages: int = 3
    num_ctas: int = 1
    enable_fp_fusion: bool = True
    debug: bool = False
    extra: tuple[tuple[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The options as the keyword arguments Triton's backends take."""
        out: dict[str, Any] = {
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
            "num_ctas": self.num_ctas,
            "enable_fp_fusion": self.enable_fp_fusion,
            "debug": self.debug,
        }
        out.update(self.extra)
        return out


@dataclasses.dataclass(frozen=True)
class Specialization:
    """How one configuration's parameters are specialised, keyed by full parameter path.

    Attributes:
        signature: Parameter name to Triton type string (``"*fp32"``, ``"i32"``, ``"constexpr"``); tuple
            parameters map to a tuple of such strings.
        constexprs: Parameter path (``(index,)`` or ``(index, leaf, ...)``) to the constant value.
        attrs: Parameter path to a list of ``[attribute, value]`` pairs (e.g. ``["tt.divisibility", 16]``).
    """

    signature: Mapping[str, Any]
    constexprs: Mapping[tuple[int, ...], Any]
    attrs: Mapping[tuple[int, ...], Sequence[Sequence[Any]]]

    def key(self) -> tuple[Any, ...]:
        """A hashable identity of the specialisation (for caches)."""
        return (
            tuple(self.signature.items()),
            tuple(sorted(self.constexprs.items(), key=lambda kv: kv[0])),
            tuple(sorted((k, tuple(tuple(a) for a in v)) for k, v in self.attrs.items())),
        )


@dataclasses.dataclass(frozen=True)
class CompileRequest:
    """Everything needed to compile one configuration of one call.

    Attributes:
        call: The bound call (kernel, parameters, outputs).
        config: The configuration being compiled.
        kernel: The underlying kernel function object (autotune/heuristics wrappers removed).
        dialect: The dialect that claimed the kernel.
        specialization: The parameter specialisation of this configuration.
        target: The compilation target.
        options: The compiler options.
        backend: The backend that compiles it.
    """

    call: KernelCall
    config: LaunchConfig
    kernel: Any
    dialect: Dialect
    specialization: Specialization
    target: Target
    options: CompileOptions
    backend: Backend


@dataclasses.dataclass(frozen=True, eq=False)
class CompiledKernel:
    """A compiled kernel configuration, as a launcher needs it.

    Attributes:
        name: The kernel's symbol name in the binary.
        target: The target it was compiled for.
        binary: The loadable code (cubin, HSACO); empty for the CPU backend.
        asm: Every intermediate representation kept, by stage name (``"ttir"``, ``"ptx"``, ...).
        metadata: The compiler's metadata as plain values.
        num_warps: Warps per program, as compiled (warp-specialised kernels may differ from the request).
        shared_mem: Dynamic shared memory in bytes.
        cluster_dims: Cluster shape (1, 1, 1) unless ``num_ctas`` > 1.
        global_scratch_size: Bytes of global scratch per program (device-side tensor descriptors).
        global_scratch_align: Alignment of that scratch.
        payload: Backend-specific extra (the CPU backend keeps the kernel function here).
    """

    name: str
    target: Target
    binary: bytes = b""
    asm: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    num_warps: int = 4
    shared_mem: int = 0
    cluster_dims: tuple[int, int, int] = (1, 1, 1)
    global_scratch_size: int = 0
    global_scratch_align: int = 1
    payload: Any = None


class Backend(ABC):
    """Compiles kernels for one JAX lowering platform.

    Subclasses set :attr:`platform` and implement :meth:`target` and :meth:`compile`.
    """

    #: The JAX lowering platform served (``"cpu"``, ``"cuda"``, ``"rocm"``, ...).
    platform: ClassVar[str]
    #: Whether kernels must be interpretable (no GPU-only dialects): true for the CPU backend only.
    interprets: ClassVar[bool] = False
    #: Whether compiled kernels may be kept in jt's disk cache (their metadata must be JSON data).
    cacheable: ClassVar[bool] = False

    def cache_tag(self) -> str:
        """Extra text for the disk-cache key: anything outside the request that changes the binary (tool versions)."""
        return ""

    def restore(self, cached: CompiledKernel, request: CompileRequest) -> CompiledKernel:
        """Turns a kernel read back from the disk cache into what :meth:`compile` would have returned."""
        return cached

    @abstractmethod
    def target(self, call: KernelCall, device: Any | None) -> Target:
        """The target a call compiles for.

        Args:
            call: The bound call (carries ``compute_capability`` and backend options).
            device: The JAX device the computation runs on, or ``None`` when lowering without one (export,
                cross-platform lowering).

        Raises:
            KernelCallValueError: When no target can be determined, saying which argument or variable to set.
        """

    @abstractmethod
    def compile(self, request: CompileRequest) -> CompiledKernel:
        """Compiles one configuration.

        Raises:
            KernelCompileError: With Triton's message and the call, kernel and configuration named.
            KernelCallValueError: For resource limits exceeded (shared memory, cluster size).
        """

    def validate_options(self, options: CompileOptions, call: KernelCall, target: Target) -> None:  # noqa: B027
        """Refuses options this backend cannot honour. The default accepts everything."""


class Launcher(ABC):
    """Turns compiled kernels into an XLA operation on one platform."""

    #: The platform served.
    platform: ClassVar[str]
    #: The name used to select it (``launcher=`` / ``JT_LAUNCHER_<PLATFORM>``).
    name: ClassVar[str]
    #: Higher wins when no launcher is named.
    priority: ClassVar[int] = 0
    #: Whether it passes host-side tensor descriptors (:class:`jt_core.TensorDescriptor` arguments, slots with a
    #: ``descriptor``); calls with one are refused by launchers that do not.
    supports_tensor_descriptors: ClassVar[bool] = False

    def unavailable_reason(self) -> str | None:
        """Why this launcher cannot be used in this process, or ``None`` when it can."""
        return None

    @abstractmethod
    def lower(
        self,
        ctx: Any,
        call: KernelCall,
        kernels: Sequence[CompiledKernel],
        operands: Sequence[Any],
    ) -> Sequence[Any]:
        """Emits the operation for a call inside a JAX lowering rule.

        Args:
            ctx: JAX's ``LoweringRuleContext``.
            call: The bound call.
            kernels: One compiled kernel per ``call.configs`` entry (the autotuning candidates).
            operands: The MLIR values of the array operands, in ``call.operand_avals`` order.

        Returns:
            The MLIR values of the outputs, in ``call.out_avals`` order.
        """


class Dialect(ABC):
    """A kernel language: recognises kernel objects and builds the source a backend compiles."""

    #: The dialect's name (``"triton"``, ``"gluon"``).
    name: ClassVar[str]
    #: Whether Triton's interpreter can run kernels of this dialect.
    interpretable: ClassVar[bool] = True
    #: Whether host-side tensor descriptors passed to its kernels carry the block's shared-memory layout
    #: (``TensorDescriptor(..., layout=...)``): required when true, refused when false.
    tensor_descriptor_layout: ClassVar[bool] = False

    @abstractmethod
    def claims(self, kernel: Any) -> bool:
        """Whether ``kernel`` (already unwrapped from autotune/heuristics) is written in this dialect."""

    @abstractmethod
    def make_source(self, kernel: Any, specialization: Specialization, target: Target) -> Any:
        """Builds the source object ``triton.compile`` accepts (an ``ASTSource`` or a subclass)."""
