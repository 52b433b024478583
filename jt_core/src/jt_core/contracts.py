"""The contracts: the roles a plugin fills -- :class:`Backend`, :class:`Launcher`, :class:`Dialect` -- and the values
they pass (:class:`Target`, :class:`CompileRequest`, :class:`CompiledKernel`).

Each role is an abstract base class: a plugin that forgets a method fails when it constructs the object, not in
the middle of a lowering. Targets, options and requests are frozen dataclasses.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar

from jt_core.call import CompileOptions, KernelCall, LaunchConfig, Specialization


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
class CompileRequest:
    """Everything needed to compile one configuration of one call.

    Attributes:
        call: The bound call (its kernel function is :attr:`kernel`, its dialect :attr:`dialect`).
        config: The configuration being compiled (its core options are ``config.options``).
        specialization: The parameter specialisation of this configuration.
        target: The compilation target.
        options: The configuration's options as the backend parsed them (:meth:`Backend.parse_options`): the
            backend's own frozen type, carried by jt-core unopened.
        backend: The backend that compiles it.
    """

    call: KernelCall
    config: LaunchConfig
    specialization: Specialization
    target: Target
    options: Hashable
    backend: Backend

    @property
    def kernel(self) -> Any:
        """The kernel function object (autotune/heuristics wrappers removed): ``call.fn``."""
        return self.call.fn

    @property
    def dialect(self) -> Dialect:
        """The dialect that claimed the kernel: ``call.dialect``."""
        return self.call.dialect

    @classmethod
    def for_config(
        cls, call: KernelCall, config: LaunchConfig, target: Target, backend: Backend, options: Hashable | None = None
    ) -> CompileRequest:
        """The request for one configuration of a bound call.

        Args:
            options: The configuration's options as ``backend`` parsed them; ``None`` asks it
                (:meth:`Backend.parse_options`, with :meth:`option_arguments`).

        Raises:
            KernelCallValueError, KernelCallTypeError: For options the backend refuses.
        """
        if options is None:
            options = invoke(backend, "parse_options", **cls.option_arguments(call, config, target))
        return cls(
            call=call,
            config=config,
            specialization=call.specialization(config),
            target=target,
            options=options,
            backend=backend,
        )

    @staticmethod
    def option_arguments(call: KernelCall, config: LaunchConfig, target: Target) -> dict[str, Any]:
        """What :meth:`Backend.parse_options` is offered for one configuration of a call, by name."""
        return {
            "options": config.options,
            "backend_arguments": dict(call.backend_arguments),
            "target": target,
            "name": call.name,
            "label": config.label,
        }


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


def plain_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A compiler's metadata as plain JSON values (what :attr:`CompiledKernel.metadata` holds): numbers, strings,
    booleans, ``None``, lists and string-keyed dicts; anything else becomes its ``str``."""
    return {str(key): _plain(value) for key, value in metadata.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return plain_metadata(value)
    return str(value)


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
    #: The file suffix of :attr:`CompiledKernel.binary` in ``JAX_TRITON_DUMP_DIR`` dumps (``"cubin"``, ``"hsaco"``).
    binary_suffix: ClassVar[str] = "bin"

    def cache_tag(self) -> str:
        """Extra text for the disk-cache key: anything outside the request that changes the binary (tool versions)."""
        return ""

    def target_label(self, target: Target) -> str:
        """A short name of a target for messages and IR listings (``"sm90"``, ``"gfx942"``)."""
        return f"{target.platform} {target.arch}"

    def restore(self, cached: CompiledKernel, request: CompileRequest) -> CompiledKernel:
        """Turns a kernel read back from the disk cache into what :meth:`compile` would have returned."""
        return cached

    @abstractmethod
    def target(self, *, backend_arguments: Mapping[str, Any], device: Any | None, name: str) -> Target:
        """The target a call compiles for.

        Args:
            backend_arguments: What the call gives the backend (:attr:`KernelCall.backend_arguments` as a dict:
                ``backend_options`` as a dict, ``compute_capability``, ... when given); read what this backend
                owns.
            device: The JAX device the computation runs on, or ``None`` when lowering without one (export,
                cross-platform lowering).
            name: The call's name, for messages.

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

    def parse_options(
        self,
        *,
        options: CompileOptions,
        backend_arguments: Mapping[str, Any],
        target: Target,
        name: str,
        label: str,
    ) -> Hashable:
        """Turns one configuration's options into this backend's own options, refusing what it cannot honour.

        Called once per configuration when a call is lowered, before anything compiles. What it returns reaches
        :meth:`compile` as :attr:`CompileRequest.options` and keys jt's caches, unopened: make it a frozen
        dataclass that holds the backend's defaults and checks (as Triton's ``BaseBackend.parse_options`` returns
        ``CUDAOptions``). The default returns ``options`` as they are.

        Args:
            options: The options every backend takes (``num_warps``, ...) with ``options.extra``, the further
                options of the configuration and of ``backend_options=``, as given.
            backend_arguments: As for :meth:`target`.
            target: The target chosen for the call.
            name: The call's name, for messages.
            label: The configuration's description, for messages.

        Raises:
            KernelCallValueError, KernelCallTypeError: For an option the backend refuses, naming it.
        """
        return options


class Launcher(ABC):
    """Turns compiled kernels into an XLA operation on one platform.

    Subclasses set :attr:`platform` and :attr:`name` and implement :meth:`lower`.
    """

    #: The platform served.
    platform: ClassVar[str]
    #: The name used to select it (``launcher=`` / ``JT_LAUNCHER_<PLATFORM>``).
    name: ClassVar[str]
    #: Higher wins when no launcher is named.
    priority: ClassVar[int] = 0
    #: Whether it passes host-side tensor descriptors (:class:`jt_core.TensorDescriptor` arguments, slots with a
    #: ``descriptor``); calls with one are refused by launchers that do not.
    supports_tensor_descriptors: ClassVar[bool] = False
    #: Whether the lowered call is a JAX host callback. JAX drops those inside ``custom_partitioning`` bodies, so
    #: partition rules refuse such a launcher across several devices (:mod:`jt_core.partitioning`).
    uses_host_callback: ClassVar[bool] = False
    #: Whether it lowers one configuration only: an autotuned call is then tuned before it is lowered (with the
    #: remembered winner, or by running the candidates through the platform's next launcher on scratch buffers).
    single_config: ClassVar[bool] = False
    #: What makes :meth:`fallback_reason` send a call to the next launcher, for ``python -m jt_core plugins``.
    fallback_rules: ClassVar[tuple[str, ...]] = ()
    #: What happens when the library of :meth:`native_library` cannot be built (no C++ compiler).
    without_native: ClassVar[str] = ""

    def unavailable_reason(self) -> str | None:
        """Why this launcher cannot be used in this process, or ``None`` when it can."""
        return None

    def fallback_reason(self, call: KernelCall, kernels: Sequence[CompiledKernel], device: Any | None) -> str | None:
        """Why this launcher cannot express ``call`` (compiled as ``kernels``), or ``None`` when it can.

        A call it cannot express is lowered by the platform's next launcher (by priority); the reason is reported
        under ``JT_TRACE_PLUGINS`` and with ``debug=True``. The default expresses everything.
        """
        return None

    def native_library(self) -> Any | None:
        """The C++ library the launcher builds at first use, as a :class:`jt_core.native.LibrarySpec` (``None``:
        it needs none). ``python -m jt_core build-native`` builds it ahead of time."""
        return None

    @staticmethod
    def row_major(aval: Any) -> list[int]:
        """The row-major layout of an array value (minor-to-major dimension order), as custom calls take it."""
        return list(range(len(aval.shape) - 1, -1, -1))

    @abstractmethod
    def lower(
        self,
        ctx: Any,
        call: KernelCall,
        kernels: Sequence[CompiledKernel],
        operands: Sequence[Any],
        device: Any | None,
    ) -> Sequence[Any]:
        """Emits the operation for a call inside a JAX lowering rule.

        Args:
            ctx: JAX's ``LoweringRuleContext``.
            call: The bound call.
            kernels: One compiled kernel per ``call.configs`` entry (the autotuning candidates).
            operands: The MLIR values of the array operands, in ``call.operand_avals`` order.
            device: The device lowered for, or ``None`` when lowering without one (export, cross-platform
                lowering); the same device the backend's :meth:`Backend.target` was given.

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


def invoke(component: Any, method: str, **arguments: Any) -> Any:
    """``component.method(...)`` with the ``arguments`` its signature names, and no others (all of them when it
    takes ``**kwargs``): jt calls every contract method so, which lets a method gain arguments without breaking the
    plugins that override it (the compatibility rule of :mod:`jt_core.plugin`)."""
    bound = getattr(component, method)
    names = _named_parameters(getattr(bound, "__func__", bound))
    if names is None:
        return bound(**arguments)
    return bound(**{name: value for name, value in arguments.items() if name in names})


@functools.lru_cache(maxsize=1024)
def _named_parameters(function: Any) -> frozenset[str] | None:
    """The names ``function`` takes by keyword, or ``None`` when it takes any (``**kwargs``)."""
    parameters = inspect.signature(function).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in parameters if p.kind in keyword)


__all__ = [
    "Backend",
    "CompileRequest",
    "CompiledKernel",
    "Dialect",
    "Launcher",
    "Target",
    "invoke",
    "plain_metadata",
]
