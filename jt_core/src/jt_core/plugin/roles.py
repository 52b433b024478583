"""The roles a plugin fills -- `Backend`, `Launcher`, `Dialect` -- with the request a backend
compiles (`CompileRequest`), and how jt asks a component of a role its questions (`invoke`).

Each role is an abstract base class: a plugin that forgets a method fails when it constructs the object, not in
the middle of a lowering. Targets, options and requests are frozen dataclasses (`jt_core.plugin.values` holds
the values that name no role). jt calls every contract method with the arguments its signature names
(`prepare_call`), honouring the names of earlier contracts a component still uses
(`jt_core.plugin.retired`); the request asks its backend that way too, so the asking lives here, beside the
roles.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, ClassVar

from jt_core.call import CompileOptions, KernelCall, LaunchConfig, Specialization
from jt_core.plugin.retired import (
    BACKEND_ATTRIBUTES,
    BACKEND_PARAMETERS,
    DIALECT_ATTRIBUTES,
    LAUNCHER_ATTRIBUTES,
    Retired,
    is_removed,
    sets_attribute,
)
from jt_core.plugin.signatures import call_with_names, named_parameters
from jt_core.plugin.values import CompiledKernel, Target

__all__ = [
    "RETIRED_ATTRIBUTES",
    "RETIRED_PARAMETERS",
    "ROLES",
    "Backend",
    "CompileRequest",
    "Dialect",
    "Launcher",
    "contract_methods",
    "invoke",
    "keeps_default",
    "prepare_call",
    "role_of",
]


@dataclasses.dataclass(frozen=True)
class CompileRequest:
    """Everything needed to compile one configuration of one call.

    Attributes:
        call: The bound call (its kernel function is `kernel`, its dialect `dialect`).
        config: The configuration being compiled (its core options are ``config.options``).
        specialization: The parameter specialisation of this configuration.
        target: The compilation target.
        options: The configuration's options as the backend parsed them (`Backend.parse_options`): the
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
                (`Backend.parse_options`, with `option_arguments`).

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
        """What `Backend.parse_options` is offered for one configuration of a call, by name."""
        return {
            "options": config.options,
            "backend_arguments": call.arguments_for_backend(),
            "target": target,
            "name": call.name,
            "label": config.label,
        }


class Backend(ABC):
    """Compiles kernels for one JAX lowering platform.

    Subclasses set `platform` and implement `target` and `compile`. The other methods are
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
        the call with an `UnsupportedKernelError` naming the call, the dialect and the
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
        `CompiledKernel.metadata` as plain JSON values (`plain_metadata`), and `restore` gets each
        kernel read back. The default keeps nothing on disk: kernels are compiled once per process.

        Args:
            request: What is about to be compiled.

        Returns:
            Whether the compiled kernel may be stored and read back.
        """
        return False

    def binary_file_suffix(self, kernel: CompiledKernel) -> str:
        """The file suffix of ``kernel``'s `binary` in ``JAX_TRITON_DUMP_DIR`` dumps.

        Asked when a compiled kernel is dumped. A stage of `CompiledKernel.asm` of that name is dumped in the
        binary's place. The default is ``"bin"``.

        Args:
            kernel: The compiled kernel being dumped.

        Returns:
            The suffix, without its dot (``"cubin"``, ``"hsaco"``).
        """
        return "bin"

    def restore(self, cached: CompiledKernel, request: CompileRequest) -> CompiledKernel:
        """Turns a kernel read back from the disk cache into what `compile` would have returned."""
        return cached

    @abstractmethod
    def target(self, *, backend_arguments: Mapping[str, Any], device: Any | None, name: str) -> Target:
        """The target a call compiles for.

        Args:
            backend_arguments: What the call gives the backend (`KernelCall.backend_arguments` as a dict:
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
        `compile` as `CompileRequest.options` and keys jt's caches, unopened: make it a frozen
        dataclass that holds the backend's defaults and checks (as Triton's ``BaseBackend.parse_options`` returns
        ``CUDAOptions``). The default returns ``options`` as they are.

        Args:
            options: The options every backend takes (``num_warps``, ...) with ``options.extra``, the further
                options of the configuration and of ``backend_options=``, as given.
            backend_arguments: As for `target`.
            target: The target chosen for the call.
            name: The call's name, for messages.
            label: The configuration's description, for messages.

        Raises:
            KernelCallValueError, KernelCallTypeError: For an option the backend refuses, naming it.
        """
        return options


class Launcher(ABC):
    """Turns compiled kernels into an XLA operation on one platform.

    Subclasses set `platform` and `name` and implement `lower`. The other methods are questions
    jt asks where it needs the answer, with the context of that place as named arguments; each has a default, so a
    launcher overrides only those whose default does not fit it.
    """

    #: The platform served.
    platform: ClassVar[str]
    #: The name used to select it (``launcher=`` / ``JT_LAUNCHER_<PLATFORM>``).
    name: ClassVar[str]
    #: Higher wins when no launcher is named.
    priority: ClassVar[int] = 0
    #: What makes `fallback_reason` send a call to the next launcher, in the words it uses, for
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
        """The C++ library the launcher builds at first use, as a `jt_core.native.LibrarySpec` (``None``:
        it needs none). ``python -m jt_core build-native`` builds it ahead of time; the spec's ``without_it`` says
        what happens where it cannot be built."""
        return None

    def passes_tensor_descriptors(self, call: KernelCall, parameters: Sequence[str]) -> bool:
        """Whether it can pass ``call``'s host-side tensor descriptors (`jt_core.TensorDescriptor`
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

        Asked by the partition rules (`jt_core.partitioning`) for each call of a ``custom_partitioning`` body
        spread over several CPU devices: JAX drops the host callbacks made there, so such a call is refused with an
        error naming the launchers that can run it, instead of failing when it runs. The default is ``False``.

        Args:
            call: The bound call.

        Returns:
            Whether the lowered call is a host callback.
        """
        return False

    def unexportable_reason(self, call: KernelCall) -> str | None:
        """Why what it lowers ``call`` to cannot go into a ``jax.export`` artifact, or ``None`` when it can.

        Asked when a call is lowered for ``jax.export``, of the launcher about to lower it: a reason fails the export
        with an error naming it, and why the launchers before it could not express the call, instead of JAX's
        generic refusal of an unknown custom call (or an artifact that fails where it is loaded). Answer with a
        reason where the operation depends on this process (a host callback, an id registered at lowering). The
        default is ``None``: the artifact carries the launcher's custom calls, which the exporter allows with
        ``jax.export.DisabledSafetyCheck.custom_call(target)``.

        Args:
            call: The bound call.

        Returns:
            The reason, or ``None``.
        """
        return None

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

    def tunes_ahead(self, call: KernelCall) -> bool:
        """Whether an autotuned ``call`` is tuned before it is lowered, through this launcher itself, where the
        lowering has a device: the launcher can run every candidate, and the call it then lowers holds the winner
        alone, which runs exactly as that configuration called fixed.

        Asked when a call with several configurations is lowered and `needs_tuning_ahead` said no. On ``True`` jt
        chooses the configuration first (the winner remembered for the device kind, else the winner of the
        candidates run on scratch buffers through this launcher, whose lowering of that run keeps every
        configuration); where no winner can be had (no device, tuning records disabled, scratch buffers too large
        for the device) the launcher gets every configuration, as with ``False``, the default.

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
        says how (`BatchInfo`); ``kernels`` are compiled from the wrapper. A launcher that runs
        kernels on the host runs it with `jt_core.plugin.run_on_host`, inside the host callback that
        `jt_core.plugin.emit_host_callback` emits.

        Args:
            ctx: JAX's ``LoweringRuleContext``.
            call: The bound call.
            kernels: One compiled kernel per ``call.configs`` entry (the autotuning candidates).
            operands: The MLIR values of the array operands, in ``call.operand_avals`` order.
            device: The device lowered for, or ``None`` when lowering without one (export, cross-platform
                lowering); the same device the backend's `Backend.target` was given.

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


# -- the roles as jt asks them ---------------------------------------------------------------------------------

#: The roles a plugin's component fills. What each role requires is read from its class, the one place it is
#: declared: the class attributes it annotates (those it gives no value must be set, and every one must have its
#: type), and the methods it defines, which jt calls by name offering the parameters of the role's own signature.
ROLES: tuple[type, ...] = (Backend, Launcher, Dialect)


def role_of(component: Any) -> type | None:
    """The role ``component`` fills (one of `ROLES`), or ``None``."""
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


def keeps_default(component: Any, method: str) -> bool:
    """Whether ``component`` keeps its role's own implementation of the contract method ``method`` (it does not
    answer the question itself)."""
    role = role_of(component)
    return role is not None and _keeps_default(component, role, method)


def _keeps_default(component: Any, role: type, method: str) -> bool:
    own = getattr(component, method, None)
    return getattr(own, "__func__", None) is vars(role).get(method)


#: The class attributes of earlier contracts, by role, each with what replaced it (`jt_core.plugin.retired`).
RETIRED_ATTRIBUTES: Mapping[type, Mapping[str, Retired]] = {
    Backend: BACKEND_ATTRIBUTES,
    Launcher: LAUNCHER_ATTRIBUTES,
    Dialect: DIALECT_ATTRIBUTES,
}
#: Parameters that contract methods of earlier contracts took and jt no longer offers, by role and method.
RETIRED_PARAMETERS: Mapping[type, Mapping[str, Mapping[str, Retired]]] = {Backend: BACKEND_PARAMETERS}


def prepare_call(component: Any, method: str, **arguments: Any) -> Callable[[], Any]:
    """``component.method(...)``, ready to call, with the ``arguments`` its signature names and no others (all of
    the contract's when it takes ``**kwargs``): jt calls every contract method so, which lets a method gain
    arguments without breaking the plugins that override it (the compatibility rule of `jt_core.plugin`).

    For a component of a role (`ROLES`), the ``arguments`` must be the ones the role's method declares
    (`contract_methods`), with those still offered for retired names (`Retired`); a retired attribute
    the component sets answers the question meanwhile, as its entry says. What jt offers is checked here, before
    any plugin code runs, so that a mistake of jt's own is never taken for the plugin's.

    Raises:
        TypeError: When jt offers arguments the contract does not declare (a bug in jt).
    """
    role = role_of(component)
    if role is None:
        return functools.partial(call_with_names, getattr(component, method), arguments)
    declared, retired = _offered(role, method, frozenset(arguments))
    function = getattr(component, method)
    contract = {name: value for name, value in arguments.items() if name in declared}

    def ask() -> Any:
        names, takes_any = named_parameters(getattr(function, "__func__", function))
        return function(
            **{n: v for n, v in arguments.items() if n in names and (n in declared or n in retired)},
            **({n: v for n, v in contract.items() if n not in names} if takes_any else {}),
        )

    for attribute, entry in RETIRED_ATTRIBUTES.get(role, {}).items():
        if entry.question != method or not sets_attribute(component, attribute) or is_removed(entry):
            continue
        if entry.answer is not None and _keeps_default(component, role, method):
            answer = entry.answer
            return lambda: answer(component, arguments)
        if entry.amend is not None:
            amend = entry.amend
            return lambda: amend(component, ask())
    return ask


def invoke(component: Any, method: str, **arguments: Any) -> Any:
    """``component.method(...)`` with the ``arguments`` its signature names (`prepare_call`)."""
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
