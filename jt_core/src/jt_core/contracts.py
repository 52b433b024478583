"""The contracts: the roles a plugin fills -- :class:`Backend`, :class:`Launcher`, :class:`Dialect` -- and the values
they pass (:class:`Target`, :class:`CompileRequest`, :class:`CompiledKernel`).

Each role is an abstract base class: a plugin that forgets a method fails when it constructs the object, not in
the middle of a lowering. Targets, options and requests are frozen dataclasses.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import re
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, ClassVar

from jt_core import _version as jt_version
from jt_core.call import CompileOptions, KernelCall, LaunchConfig, Specialization
from jt_core.errors import short_repr


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
        # The call holds the Dialect that claimed its kernel, typed by what the call model reads of it.
        return typing.cast(Dialect, self.call.dialect)

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
            # With the call, for a backend still written with validate_options (RETIRED_ATTRIBUTES).
            options = invoke(backend, "parse_options", **cls.option_arguments(call, config, target), call=call)
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
        through the platform's next launcher) and the launcher gets one compiled kernel. Where no winner can be had
        (lowering without a device; on the CPU without ``JT_CPU_AUTOTUNE=1``, where autotuned calls are not tuned)
        the launcher gets every configuration all the same, and runs the first or says why it cannot express the
        call. The default (``False``) hands the launcher every configuration, and it chooses among them when the
        call runs.

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

        Under ``jax.vmap`` the call may be one jt made: its kernel (``call.fn``) is then a generated ``@triton.jit``
        wrapper that calls the user's kernel once per batch element, the batch on one grid axis, and ``call.batch``
        says how (:class:`~jt_core.call.BatchInfo`); ``kernels`` are compiled from the wrapper. A launcher that runs
        kernels on the host runs it with :func:`jt_core.plugin.run_on_host`, inside the host callback that
        :func:`jt_core.plugin.emit_host_callback` emits.

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


# -- the contract as jt checks it -------------------------------------------------------------------------------

#: The roles a plugin's component fills. What each role requires is read from its class, the one place it is
#: declared: the class attributes it annotates (those it gives no value must be set, and every one must have its
#: type), and the methods it defines, which jt calls by name offering the parameters of the role's own signature.
ROLES: tuple[type, ...] = (Backend, Launcher, Dialect)


def role_of(component: Any) -> type | None:
    """The role ``component`` fills (one of :data:`ROLES`), or ``None``."""
    return next((role for role in ROLES if isinstance(component, role)), None)


@functools.cache
def contract_methods(role: type) -> Mapping[str, tuple[str, ...]]:
    """The methods jt calls on a component of ``role``, each with the parameters jt offers it, in order: the role's
    own methods and their signatures (``self`` left out). Static methods are helpers, not part of the contract."""
    return {
        name: tuple(inspect.signature(function).parameters)[1:]
        for name, function in vars(role).items()
        if inspect.isfunction(function) and not name.startswith("_")
    }


@functools.cache
def contract_attributes(role: type) -> Mapping[str, tuple[Any, bool]]:
    """The class attributes of ``role``, each with its type and whether a component must set it (the role gives it
    no value)."""
    hints = typing.get_type_hints(role)
    return {
        name: (typing.get_args(hint)[0] if typing.get_origin(hint) is ClassVar else hint, name not in vars(role))
        for name, hint in hints.items()
    }


def _fits(value: Any, kind: Any) -> bool:
    """Whether ``value`` is of the attribute type ``kind`` (``str``: a non-empty one; ``int``: not a bool;
    ``tuple[X, ...]``: of ``X`` items)."""
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        return isinstance(value, tuple) and all(_fits(v, item) for v in value)
    if kind is str:
        return isinstance(value, str) and value != ""
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _kind_text(kind: Any) -> str:
    """An attribute type in words (``"a non-empty string"``, ``"an int"``, ``"a tuple of non-empty strings"``)."""
    if typing.get_origin(kind) is tuple:
        item = _kind_text(typing.get_args(kind)[0]).split(" ", 1)[1]
        return f"a tuple of {item}s"
    if kind is str:
        return "a non-empty string"
    name = getattr(kind, "__name__", str(kind))
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def contract_problems(component: Any, registered_for: str | None = None) -> list[str]:
    """What keeps ``component`` from filling its role, checked when its plugin registers it: each problem as a
    clause that names the attribute or method, what is wrong and the fix; empty when it keeps the contract.

    Checked are the role's class attributes (:func:`contract_attributes`: present, of their type), the platform it
    serves against the one it was registered for, and every contract method it overrides
    (:func:`contract_methods`): each parameter it takes must be one jt offers the method, or have a default, or be
    ``*args`` / ``**kwargs`` (it may take fewer than jt offers). Retired names (:func:`retired_uses`) are left to
    the caller.

    Args:
        component: A backend, launcher or dialect.
        registered_for: The platform the registration hook was asked for, or ``None`` when it was asked for every
            platform (or did not take the platform).
    """
    role = role_of(component)
    if role is None:
        return [f"is not a {' or '.join(r.__name__ for r in ROLES)}: subclass the role it fills (jt_core.plugin)"]
    problems = []
    for attribute, (kind, _) in contract_attributes(role).items():
        value = getattr(component, attribute, _UNSET)
        if value is _UNSET:
            problems.append(
                f"does not set {attribute}, {_kind_text(kind)} every {role.__name__} has: set it in the class body"
            )
        elif not _fits(value, kind):
            problems.append(
                f"sets {attribute} = {short_repr(value)}, which is not {_kind_text(kind)}: make it {_kind_text(kind)}"
            )
        elif attribute == "platform" and registered_for is not None and value != registered_for:
            problems.append(
                f"serves platform {value!r} but was returned when jt asked for platform {registered_for!r}: return "
                f"it only when asked for {value!r} (or for every platform, None), or set platform = "
                f"{registered_for!r}"
            )
    retired = RETIRED_PARAMETERS.get(role, {})
    for method, offered in contract_methods(role).items():
        problems += _signature_problems(component, role, method, offered, retired.get(method, {}))
    return problems


def _signature_problems(
    component: Any, role: type, method: str, offered: tuple[str, ...], retired: Mapping[str, Retired]
) -> list[str]:
    """What is wrong with ``component``'s override of a contract method: parameters jt cannot fill by name."""
    if _keeps_default(component, role, method):
        return []
    own = getattr(component, method)
    if not callable(own):
        listed = ", ".join(offered)
        return [
            f"sets {method} = {short_repr(own)}, which is not a method: jt calls {role.__name__}.{method}({listed}); "
            "define it as a method"
        ]
    try:
        required = _required_parameters(own)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check against
        return []
    problems = []
    listed = ", ".join(offered) if offered else "no arguments"
    for name, positional_only in required:
        if name in retired or (name in offered and not positional_only):
            continue
        if positional_only:
            problems.append(
                f"has {method}{inspect.signature(own)}, whose parameter {name!r} is positional-only, but jt passes "
                f"{role.__name__}.{method}'s arguments by name ({listed}): drop the '/'"
            )
            continue
        close = [o for o in offered if o.startswith(name)] or difflib.get_close_matches(
            name, offered, n=1, cutoff=PARAMETER_NAME_CUTOFF
        )
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.append(
            f"has {method}{inspect.signature(own)}, whose parameter {name!r} jt does not offer{hint}: jt offers "
            f"{role.__name__}.{method} {'the arguments ' if offered else ''}{listed}. Rename the parameter to "
            f"{'one of those' if offered else 'nothing'}, give it a default, or drop it"
        )
    return problems


def _required_parameters(function: Any) -> list[tuple[str, bool]]:
    """The parameters of ``function`` jt would have to fill (no default, neither ``*args`` nor ``**kwargs``), each
    with whether it is positional-only.

    Read from the code of a plain function or method: every override is checked when its plugin registers, and
    ``inspect.signature`` took 1.5-2 ms over the 19 overrides of a CPU call's components on a 2-core host (this,
    0.13-0.25 ms).

    Raises:
        TypeError, ValueError: Where no signature can be had (a builtin).
    """
    plain = getattr(function, "__func__", function)
    if not inspect.isfunction(plain) or hasattr(plain, "__wrapped__"):
        parameters = inspect.signature(function).parameters.values()
        return [
            (p.name, p.kind is inspect.Parameter.POSITIONAL_ONLY)
            for p in parameters
            if p.default is inspect.Parameter.empty
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        ]
    code = plain.__code__
    positional = code.co_varnames[: code.co_argcount]
    keyword_only = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    without_default = len(positional) - len(plain.__defaults__ or ())
    first = 1 if inspect.ismethod(function) else 0  # self, or cls
    found = [(name, i < code.co_posonlyargcount) for i, name in enumerate(positional[:without_default]) if i >= first]
    return found + [(name, False) for name in keyword_only if name not in (plain.__kwdefaults__ or {})]


#: How alike (``difflib`` ratio) a parameter jt does not offer and an offered one must be for the offered one to be
#: suggested (``kernel`` for ``kernels`` scores 0.92, ``target`` for ``device`` 0.17); an offered name that starts
#: with the parameter's (``specialization`` for ``spec``) is suggested too.
PARAMETER_NAME_CUTOFF = 0.6

_UNSET = object()


def keeps_default(component: Any, method: str) -> bool:
    """Whether ``component`` keeps its role's own implementation of the contract method ``method`` (it does not
    answer the question itself)."""
    role = role_of(component)
    return role is not None and _keeps_default(component, role, method)


def _keeps_default(component: Any, role: type, method: str) -> bool:
    own = getattr(component, method, None)
    return getattr(own, "__func__", None) is vars(role).get(method)


# -- names of earlier contracts -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Retired:
    """A name of an earlier contract: a class attribute, or a parameter of a contract method.

    A component that still uses it keeps working for one minor version of jt-core: its plugin is warned when it
    registers it (a ``DeprecationWarning`` naming the replacement and :attr:`removed_in`), and jt honours the name
    where it can. From :attr:`removed_in` on, the plugin is refused, naming the replacement.

    Attributes:
        replacement: What replaced it, as messages name it.
        removed_in: The jt-core version that refuses it.
        question: The contract method it belongs to: the one whose answer the attribute gave (of the role that
            asks it now), or the one that took the parameter.
        offered: What jt still offers :attr:`question` for it, beside the contract's own arguments, until
            :attr:`removed_in`: the retired parameter itself, or what :attr:`answer` reads. A method is passed
            such an argument only when it names it.
        answer: How jt answers :attr:`question` from the attribute, ``answer(component, arguments)``, for a
            component that keeps the role's default for the question (one that answers it itself is asked).
        amend: How jt completes the answer :attr:`question` gave from the attribute,
            ``amend(component, answer)``.
        unhonoured: Why jt-core cannot honour the attribute (for one it neither answers from nor amends with).
    """

    replacement: str
    removed_in: str
    question: str
    offered: tuple[str, ...] = ()
    answer: Callable[[Any, Mapping[str, Any]], Any] | None = None
    amend: Callable[[Any, Any], Any] | None = None
    unhonoured: str = ""


#: The version of the retirements below: jt-core 0.1 retired these names, and 0.2 refuses them.
_REMOVED_IN = "0.2.0"


def _answer_from(attribute: str) -> Callable[[Any, Mapping[str, Any]], Any]:
    """An answer that is the attribute's value."""
    return lambda component, arguments: getattr(component, attribute)


def _validated_options(component: Any, arguments: Mapping[str, Any]) -> Any:
    """``parse_options`` for a backend still written with ``validate_options(options, call, target)``: the
    options, as given, once that method accepted them."""
    _call_with_names(component.validate_options, arguments)
    return arguments["options"]


def _with_without_it(component: Any, spec: Any) -> Any:
    """The launcher's library spec, its ``without_it`` taken from ``without_native`` where it says nothing."""
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type) and getattr(spec, "without_it", None) == "":
        return dataclasses.replace(spec, without_it=component.without_native)  # type: ignore[type-var]
    return spec


#: The class attributes of earlier contracts, each with what replaced it. A component that still sets one keeps
#: working, with a warning, until the version that refuses it (:class:`Retired`); jt answers the question from it
#: meanwhile where it can.
RETIRED_ATTRIBUTES: Mapping[type, Mapping[str, Retired]] = {
    Backend: {
        "interprets": Retired(
            "Backend.unsupported_dialect_reason(dialect)",
            _REMOVED_IN,
            "unsupported_dialect_reason",
            unhonoured="the dialects no longer say whether Triton's interpreter runs their kernels; the backend "
            "answers for each dialect",
        ),
        "cacheable": Retired(
            "Backend.may_keep_on_disk(request)", _REMOVED_IN, "may_keep_on_disk", answer=_answer_from("cacheable")
        ),
        "binary_suffix": Retired(
            "Backend.binary_file_suffix(kernel)",
            _REMOVED_IN,
            "binary_file_suffix",
            answer=_answer_from("binary_suffix"),
        ),
        "validate_options": Retired(
            "Backend.parse_options(options, backend_arguments, target, name, label), which returns the backend's "
            "own options",
            _REMOVED_IN,
            "parse_options",
            offered=("call",),
            answer=_validated_options,
        ),
    },
    Launcher: {
        "supports_tensor_descriptors": Retired(
            "Launcher.passes_tensor_descriptors(call, parameters)",
            _REMOVED_IN,
            "passes_tensor_descriptors",
            answer=_answer_from("supports_tensor_descriptors"),
        ),
        "uses_host_callback": Retired(
            "Launcher.runs_through_host_callback(call)",
            _REMOVED_IN,
            "runs_through_host_callback",
            answer=_answer_from("uses_host_callback"),
        ),
        "single_config": Retired(
            "Launcher.needs_tuning_ahead(call)", _REMOVED_IN, "needs_tuning_ahead", answer=_answer_from("single_config")
        ),
        "without_native": Retired(
            "the without_it= of the LibrarySpec that Launcher.native_library() returns",
            _REMOVED_IN,
            "native_library",
            amend=_with_without_it,
        ),
    },
    Dialect: {
        "interpretable": Retired(
            "Backend.unsupported_dialect_reason(dialect), asked of the backend that cannot run it",
            _REMOVED_IN,
            "unsupported_dialect_reason",
            unhonoured="the backend that runs a kernel decides which dialects it runs (jt-core's CPU backend runs "
            "plain Triton kernels only)",
        ),
        "tensor_descriptor_layout": Retired(
            "Dialect.requires_descriptor_layout(kernel)",
            _REMOVED_IN,
            "requires_descriptor_layout",
            answer=_answer_from("tensor_descriptor_layout"),
        ),
    },
}


#: Parameters that contract methods of earlier contracts took and jt no longer offers, each with what replaced it.
#: jt still passes one, to a method that names it, until the version that refuses it (:class:`Retired`).
RETIRED_PARAMETERS: Mapping[type, Mapping[str, Mapping[str, Retired]]] = {
    Backend: {
        "target": {
            "call": Retired(
                "Backend.target(backend_arguments, device, name), offered instead of the call",
                _REMOVED_IN,
                "target",
                offered=("call",),
            )
        }
    },
}


def _version_numbers(text: str) -> tuple[int, ...]:
    """A version's leading numbers: ``"0.2.0"`` -> ``(0, 2, 0)``, ``"0.2.0rc1"`` -> ``(0, 2, 0)``."""
    numbers = []
    for part in text.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        numbers.append(int(digits.group()))
    return tuple(numbers)


def is_removed(retired: Retired) -> bool:
    """Whether this jt-core (:data:`jt_core._version.__version__`) is at or past the version that refuses
    ``retired``."""
    return _version_numbers(jt_version.__version__) >= _version_numbers(retired.removed_in)


def retired_uses(component: Any) -> list[tuple[str, Retired]]:
    """The retired names ``component`` uses, each with its :class:`Retired` entry: the attributes of
    :data:`RETIRED_ATTRIBUTES` it or a class of it sets (``"cacheable"``), and the parameters of
    :data:`RETIRED_PARAMETERS` its methods take (``"target(call)"``)."""
    role = role_of(component)
    if role is None:
        return []
    found = [(name, entry) for name, entry in RETIRED_ATTRIBUTES.get(role, {}).items() if _sets(component, name)]
    for method, parameters in RETIRED_PARAMETERS.get(role, {}).items():
        function = getattr(component, method, None)
        taken = _parameter_names(function) if callable(function) else frozenset()
        found += [(f"{method}({name})", entry) for name, entry in parameters.items() if name in taken]
    return found


def retired_attributes(component: Any) -> list[tuple[str, str]]:
    """The retired names ``component`` uses (:func:`retired_uses`), each with what replaced it, as
    ``(name, replacement)`` pairs."""
    return [(name, entry.replacement) for name, entry in retired_uses(component)]


def _sets(component: Any, attribute: str) -> bool:
    """Whether ``component`` or a class of it sets ``attribute``."""
    owners = [getattr(component, "__dict__", {}), *(vars(cls) for cls in type(component).__mro__)]
    return any(attribute in owner for owner in owners)


def _parameter_names(function: Any) -> frozenset[str]:
    """The names ``function`` takes by keyword (an empty set for a builtin without a signature)."""
    try:
        return _named_parameters(getattr(function, "__func__", function))[0]
    except (TypeError, ValueError):
        return frozenset()


# -- calling the contract's methods ----------------------------------------------------------------------------


def prepare_call(component: Any, method: str, **arguments: Any) -> Callable[[], Any]:
    """``component.method(...)``, ready to call, with the ``arguments`` its signature names and no others (all of
    the contract's when it takes ``**kwargs``): jt calls every contract method so, which lets a method gain
    arguments without breaking the plugins that override it (the compatibility rule of :mod:`jt_core.plugin`).

    For a component of a role (:data:`ROLES`), the ``arguments`` must be the ones the role's method declares
    (:func:`contract_methods`), with those still offered for retired names (:class:`Retired`); a retired attribute
    the component sets answers the question meanwhile, as its entry says. What jt offers is checked here, before
    any plugin code runs, so that a mistake of jt's own is never taken for the plugin's.

    Raises:
        TypeError: When jt offers arguments the contract does not declare (a bug in jt).
    """
    role = role_of(component)
    if role is None:
        return functools.partial(_call_with_names, getattr(component, method), arguments)
    declared, retired = _offered(role, method, frozenset(arguments))
    function = getattr(component, method)
    contract = {name: value for name, value in arguments.items() if name in declared}

    def ask() -> Any:
        names, takes_any = _named_parameters(getattr(function, "__func__", function))
        return function(
            **{n: v for n, v in arguments.items() if n in names and (n in declared or n in retired)},
            **({n: v for n, v in contract.items() if n not in names} if takes_any else {}),
        )

    for attribute, entry in RETIRED_ATTRIBUTES.get(role, {}).items():
        if entry.question != method or not _sets(component, attribute) or is_removed(entry):
            continue
        if entry.answer is not None and _keeps_default(component, role, method):
            answer = entry.answer
            return lambda: answer(component, arguments)
        if entry.amend is not None:
            amend = entry.amend
            return lambda: amend(component, ask())
    return ask


def invoke(component: Any, method: str, **arguments: Any) -> Any:
    """``component.method(...)`` with the ``arguments`` its signature names (:func:`prepare_call`)."""
    return prepare_call(component, method, **arguments)()


@functools.lru_cache(maxsize=256)
def _offered(role: type, method: str, offered: frozenset[str]) -> tuple[frozenset[str], frozenset[str]]:
    """The contract's arguments of ``role.method`` and its retired parameters still passed, checking that jt offers
    exactly the contract's (and no more than what retired names still read)."""
    declared = contract_methods(role).get(method)
    if declared is None:
        raise TypeError(
            f"jt asked {role.__name__}.{method}(), which is not a method of the contract "
            f"({', '.join(contract_methods(role))}); this is a bug in jt-core"
        )
    still = {
        name
        for entry in [
            *RETIRED_ATTRIBUTES.get(role, {}).values(),
            *RETIRED_PARAMETERS.get(role, {}).get(method, {}).values(),
        ]
        if entry.question == method
        for name in entry.offered
    }
    unknown, missing = offered - set(declared) - still, set(declared) - offered
    if unknown or missing:
        raise TypeError(
            f"jt offers {role.__name__}.{method}() {sorted(offered)}, but the contract declares "
            f"{role.__name__}.{method}({', '.join(declared)}); this is a bug in jt-core"
        )
    parameters = frozenset(RETIRED_PARAMETERS.get(role, {}).get(method, {}))
    return frozenset(declared), parameters


def _call_with_names(function: Any, arguments: Mapping[str, Any]) -> Any:
    """``function`` called with the ``arguments`` it names (all of them when it takes ``**kwargs``)."""
    names, takes_any = _named_parameters(getattr(function, "__func__", function))
    return function(**(arguments if takes_any else {n: v for n, v in arguments.items() if n in names}))


@functools.lru_cache(maxsize=1024)
def _named_parameters(function: Any) -> tuple[frozenset[str], bool]:
    """The names ``function`` takes by keyword, and whether it takes any (``**kwargs``)."""
    parameters = inspect.signature(function).parameters.values()
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return (
        frozenset(p.name for p in parameters if p.kind in keyword),
        any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters),
    )


__all__ = [
    "RETIRED_ATTRIBUTES",
    "RETIRED_PARAMETERS",
    "ROLES",
    "Backend",
    "CompileRequest",
    "CompiledKernel",
    "Dialect",
    "Launcher",
    "Retired",
    "Target",
    "contract_attributes",
    "contract_methods",
    "contract_problems",
    "invoke",
    "is_removed",
    "keeps_default",
    "plain_metadata",
    "prepare_call",
    "retired_attributes",
    "retired_uses",
    "role_of",
]
