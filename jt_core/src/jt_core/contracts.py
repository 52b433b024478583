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
            "backend_arguments": call.arguments_for_backend(),
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

    Subclasses set :attr:`platform` and implement :meth:`target` and :meth:`compile`. The other methods are
    questions jt asks where it needs the answer, with the context of that place as named arguments; each has a
    default, so a backend overrides only those whose default does not fit it.
    """

    #: The JAX lowering platform served (``"cpu"``, ``"cuda"``, ``"rocm"``, ...).
    platform: ClassVar[str]

    def cache_tag(self) -> str:
        """Extra text for the disk-cache key: anything outside the request that changes the binary (tool versions)."""
        return ""

    def target_label(self, target: Target) -> str:
        """A short name of a target for messages and IR listings (``"sm90"``, ``"gfx942"``)."""
        return f"{target.platform} {target.arch}"

    def unsupported_dialect_reason(self, dialect: Dialect) -> str | None:
        """Why this backend cannot compile and run kernels written in ``dialect``, or ``None`` when it can.

        Asked when a call is lowered for the backend's platform, before its target or any compile. A reason fails
        the call with an :class:`~jt_core.errors.UnsupportedKernelError` naming the call, the dialect and the
        platform, followed by the reason: say why, and where such kernels run. The default runs every dialect.

        Args:
            dialect: The dialect that claimed the call's kernel.

        Returns:
            The reason, or ``None``.
        """
        return None

    def may_keep_on_disk(self, request: CompileRequest) -> bool:
        """Whether the kernel compiled for ``request`` may be kept in jt's disk cache, so that later processes on
        this machine read it back instead of compiling it.

        Asked before each compile that misses jt's in-memory cache. A backend that answers ``True`` returns
        :attr:`CompiledKernel.metadata` as plain JSON values (:func:`plain_metadata`), and :meth:`restore` gets each
        kernel read back. The default keeps nothing on disk: kernels are compiled once per process.

        Args:
            request: What is about to be compiled.

        Returns:
            Whether the compiled kernel may be stored and read back.
        """
        return False

    def binary_file_suffix(self, kernel: CompiledKernel) -> str:
        """The file suffix of ``kernel``'s :attr:`~CompiledKernel.binary` in ``JAX_TRITON_DUMP_DIR`` dumps.

        Asked when a compiled kernel is dumped. A stage of :attr:`CompiledKernel.asm` of that name is dumped in the
        binary's place. The default is ``"bin"``.

        Args:
            kernel: The compiled kernel being dumped.

        Returns:
            The suffix, without its dot (``"cubin"``, ``"hsaco"``).
        """
        return "bin"

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

    Subclasses set :attr:`platform` and :attr:`name` and implement :meth:`lower`. The other methods are questions
    jt asks where it needs the answer, with the context of that place as named arguments; each has a default, so a
    launcher overrides only those whose default does not fit it.
    """

    #: The platform served.
    platform: ClassVar[str]
    #: The name used to select it (``launcher=`` / ``JT_LAUNCHER_<PLATFORM>``).
    name: ClassVar[str]
    #: Higher wins when no launcher is named.
    priority: ClassVar[int] = 0
    #: What makes :meth:`fallback_reason` send a call to the next launcher, in the words it uses, for
    #: ``python -m jt_core plugins``.
    fallback_rules: ClassVar[tuple[str, ...]] = ()

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
        it needs none). ``python -m jt_core build-native`` builds it ahead of time; the spec's ``without_it`` says
        what happens where it cannot be built."""
        return None

    def passes_tensor_descriptors(self, call: KernelCall, parameters: Sequence[str]) -> bool:
        """Whether it can pass ``call``'s host-side tensor descriptors (:class:`jt_core.TensorDescriptor`
        arguments) to the kernel.

        Asked when a call with such arguments is lowered: of the launcher about to lower it and, when that one
        answers ``False``, of the platform's other launchers, so that the error names one that can. The default
        passes none.

        Args:
            call: The bound call (its slots with a ``descriptor`` are the descriptors).
            parameters: The names of the kernel parameters given a descriptor.

        Returns:
            Whether the launcher passes them.
        """
        return False

    def runs_through_host_callback(self, call: KernelCall) -> bool:
        """Whether the operation it lowers ``call`` to runs through a JAX host callback.

        Asked by the partition rules (:mod:`jt_core.partitioning`) for each call of a ``custom_partitioning`` body
        spread over several CPU devices: JAX drops the host callbacks made there, so such a call is refused with an
        error naming the launchers that can run it, instead of failing when it runs. The default is ``False``.

        Args:
            call: The bound call.

        Returns:
            Whether the lowered call is a host callback.
        """
        return False

    def needs_tuning_ahead(self, call: KernelCall) -> bool:
        """Whether an autotuned ``call`` must be tuned before it is lowered: the launcher lowers one configuration
        and cannot run the candidates itself.

        Asked when a call with several configurations is lowered. On ``True`` jt chooses the configuration first
        (the winner remembered for the device kind, else the winner of the candidates run on scratch buffers
        through the platform's next launcher) and the launcher gets one compiled kernel. The default (``False``)
        hands the launcher every configuration, and it chooses among them when the call runs.

        Args:
            call: The bound call, with its configurations.

        Returns:
            Whether the call is tuned before lowering.
        """
        return False

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

    @abstractmethod
    def claims(self, kernel: Any) -> bool:
        """Whether ``kernel`` (already unwrapped from autotune/heuristics) is written in this dialect."""

    @abstractmethod
    def make_source(self, kernel: Any, specialization: Specialization, target: Target) -> Any:
        """Builds the source object ``triton.compile`` accepts (an ``ASTSource`` or a subclass)."""

    def requires_descriptor_layout(self, kernel: Any) -> bool:
        """Whether host-side tensor descriptors passed to ``kernel`` carry the block's shared-memory layout
        (``jt.TensorDescriptor(..., layout=...)``).

        Asked when a call with tensor descriptor arguments is bound. On ``True`` a descriptor without a layout is
        refused; on ``False`` (the default) one with a layout is.

        Args:
            kernel: The kernel function object (autotune/heuristics wrappers removed).

        Returns:
            Whether the layout is required.
        """
        return False


#: The class attributes of earlier contracts, each with the question that replaced it. jt no longer reads them, so
#: a component that still sets one would lose what it declares without a word: the registry refuses it, naming
#: the attribute and its replacement (:func:`retired_attributes`).
RETIRED_ATTRIBUTES: Mapping[type, Mapping[str, str]] = {
    Backend: {
        "interprets": "Backend.unsupported_dialect_reason(dialect)",
        "cacheable": "Backend.may_keep_on_disk(request)",
        "binary_suffix": "Backend.binary_file_suffix(kernel)",
        "validate_options": "Backend.parse_options(options, backend_arguments, target, name, label), which returns "
        "the backend's own options",
    },
    Launcher: {
        "supports_tensor_descriptors": "Launcher.passes_tensor_descriptors(call, parameters)",
        "uses_host_callback": "Launcher.runs_through_host_callback(call)",
        "single_config": "Launcher.needs_tuning_ahead(call)",
        "without_native": "the without_it= of the LibrarySpec that Launcher.native_library() returns",
    },
    Dialect: {
        "interpretable": "Backend.unsupported_dialect_reason(dialect), asked of the backend that cannot run it",
        "tensor_descriptor_layout": "Dialect.requires_descriptor_layout(kernel)",
    },
}


#: Parameters that contract methods of earlier contracts took and jt no longer offers, each with what replaced it.
RETIRED_PARAMETERS: Mapping[type, Mapping[str, Mapping[str, str]]] = {
    Backend: {"target": {"call": "Backend.target(backend_arguments, device, name), offered instead of the call"}},
}


def retired_attributes(component: Any) -> list[tuple[str, str]]:
    """The retired attributes (:data:`RETIRED_ATTRIBUTES`) that ``component`` or a class of it still sets, and the
    retired parameters (:data:`RETIRED_PARAMETERS`) its methods still take, each with what replaced it, as
    ``(attribute, replacement)`` pairs."""
    found = []
    owners = [getattr(component, "__dict__", {}), *(vars(cls) for cls in type(component).__mro__)]
    for role, retired in RETIRED_ATTRIBUTES.items():
        if isinstance(component, role):
            found += [(name, new) for name, new in retired.items() if any(name in owner for owner in owners)]
    for role, methods in RETIRED_PARAMETERS.items():
        if isinstance(component, role):
            for method, parameters in methods.items():
                taken = inspect.signature(getattr(component, method)).parameters
                found += [(f"{method}({name})", new) for name, new in parameters.items() if name in taken]
    return found


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
    "RETIRED_ATTRIBUTES",
    "RETIRED_PARAMETERS",
    "Backend",
    "CompileRequest",
    "CompiledKernel",
    "Dialect",
    "Launcher",
    "Target",
    "invoke",
    "plain_metadata",
    "retired_attributes",
]
