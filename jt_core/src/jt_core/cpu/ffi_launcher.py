"""The ``ffi`` CPU launcher: a typed XLA FFI custom call that runs the interpreter, with no JAX host callback.

JAX's host callbacks live in the module that lowered them; inside a ``custom_partitioning`` body that module is
temporary, so the callback is gone when the executable runs. This launcher does not use them. Its handler
(``csrc/jt_cpu_interpreter_call.cc``, prebuilt in jt-core's platform wheels, else built at first use by
`jt_core.native`) is registered with XLA for
the CPU once per process, and each lowered call carries only an integer ``call_id``:

* at lowering, the call and its compiled configurations are entered in a process-wide `CallRegistry`,
  under an id computed from the call's content (lowering always precedes execution, also when JAX's persistent
  cache supplies the executable, so the id is known when the handler runs). Equal calls get the same id whatever
  was lowered before, so every process of a ``jax.distributed`` job compiles the same program, and JAX's
  persistent cache finds it again in a later process;
* at run time, the handler passes the id and the addresses and byte sizes of XLA's buffers to a dispatcher
  installed when the library was loaded (a ``ctypes`` callback, which takes the GIL). The dispatcher wraps the
  buffers as NumPy arrays with the avals of the call and runs the interpreter straight into XLA's result buffers
  (`jt_core.interpreter.execute.execute_into`); it returns a status code and message, which the handler
  turns into an XLA error, so no Python exception ever crosses C++ frames.

The launcher takes precedence over the host-callback launcher (``interpreter``) when the library builds and
loads; without a C++ compiler `CpuFfiLauncher.unavailable_reason` says so and the callback launcher is used,
unless the FFI launcher was asked for by name, which is then an error. ``JT_LAUNCHER_CPU=interpreter`` or
``launcher="interpreter"`` selects the callback launcher explicitly.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import dataclasses
import hashlib
import math
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jt_core import _compat, distributed, memory
from jt_core.call import KernelCall
from jt_core.cpu.lowered import LoweredCall
from jt_core.errors import OutOfBoundsAccessError, UnsupportedKernelError
from jt_core.native import LibrarySpec
from jt_core.plugin.roles import Launcher
from jt_core.plugin.values import CompiledKernel

__all__ = [
    "ABI_VERSION",
    "CHECK_TARGET_NAME",
    "TARGET_NAME",
    "CallRegistry",
    "CpuFfiLauncher",
    "HostFunction",
    "RegisteredCall",
    "ensure_registered",
    "registry",
    "source_path",
]

#: The custom-call target the launcher emits (the handler, symbol ``jt_cpu_interpreter_callback``, calls back into
#: Python's interpreter). Its name starts as jax-triton's and jaxlib's targets do, so that a search of a lowered
#: module for ``triton_kernel_call`` finds it.
TARGET_NAME = "triton_kernel_call_jt_cpu"
#: The custom-call target of a compiled CPU kernel's check (`jt_core.cpu.compiled.checking`; handler symbol
#: ``jt_cpu_kernel_check``), in the same library: on a stray access it runs the call again in the interpreter,
#: through `_dispatch`. It launches no kernel (the kernel is the XLA operations before it), so its name does not
#: start with ``triton_kernel_call``, which names kernel launches alone: tools count those to count kernels.
CHECK_TARGET_NAME = "jt_cpu_compiled_check"
#: The calling convention between the handlers and `_dispatch`; the library reports the one it implements.
ABI_VERSION = 3
#: What happens where the handler library cannot be built (its spec's ``without_it``: the end of a failed build's
#: message and of its line in ``python -m jt_core plugins``).
WITHOUT_HANDLER = (
    "the CPU backend runs kernels through JAX host callbacks (launcher 'interpreter'): in Triton's interpreter, "
    "not compiled, and not in calls partitioned across several CPU devices"
)

_SOURCE = Path(__file__).parent / "csrc" / "jt_cpu_interpreter_call.cc"

# absl / XLA_FFI_Error_Code status codes returned to the handler.
_OUT_OF_RANGE = 11
_UNIMPLEMENTED = 12
_INTERNAL = 13

_DISPATCHER = ctypes.CFUNCTYPE(
    ctypes.c_int32,
    ctypes.c_int64,  # call id
    ctypes.c_int64,  # number of operands
    ctypes.POINTER(ctypes.c_void_p),  # operand addresses
    ctypes.POINTER(ctypes.c_int64),  # operand byte sizes
    ctypes.c_int64,  # number of results
    ctypes.POINTER(ctypes.c_void_p),  # result addresses
    ctypes.POINTER(ctypes.c_int64),  # result byte sizes
    ctypes.c_void_p,  # message buffer
    ctypes.c_int64,  # its capacity
)


def source_path() -> Path:
    """The handler's C++ source file."""
    return _SOURCE


@dataclasses.dataclass
class RegisteredCall(LoweredCall):
    """A lowered call the handler can run, under the id its custom call carries.

    Attributes:
        call_id: The id the lowered custom call carries.
    """

    call_id: int = 0

    @property
    def name(self) -> str:
        return self.call.name

    @property
    def operand_avals(self) -> Sequence[Any]:
        return self.call.operand_avals

    @property
    def out_avals(self) -> Sequence[Any]:
        return self.call.out_avals


@dataclasses.dataclass
class HostFunction:
    """A function of host arrays the handler runs in place of a kernel (the comparison of
    ``JT_CPU_DIFFERENTIAL``): its errors reach the caller as a kernel's do, type and message, with no traceback.

    Attributes:
        name: The call it serves, for messages.
        operand_avals: What the custom call passes.
        out_avals: What it returns.
        function: ``function(operands, outputs)`` on NumPy arrays, writing ``outputs``.
    """

    name: str
    operand_avals: tuple[Any, ...]
    out_avals: tuple[Any, ...]
    function: Any

    def run(self, operands: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        self.function(operands, outputs)


class CallRegistry:
    """Process-wide map from call ids to lowered calls. Thread-safe.

    A call's id is a positive 60-bit number computed from its content (`jt_core.distributed.call_digest`),
    so it does not depend on what was lowered before: lowering the same computation twice, or in another process,
    gives the same module. Calls that differ only in what the digest cannot see (two kernel objects with the same
    source) get the following ids of the same digest, in order of registration.

    Entries are released by ``jax.clear_caches()``, which drops the executables that carry their ids (JAX lowers
    a computation again when it next runs, which registers its calls again, under the same ids). Computations
    still running are waited for first. An executable kept past ``jax.clear_caches()`` (a ``Compiled`` object the
    program holds) then fails with an error that says to lower it again, never runs another call: an id released
    for one kernel object is given again to that kernel object only, never to another with the same source. What
    stays of a released call is that pairing (its id and a weak reference to its kernel, about 100 bytes), for the
    ``JT_MEMORY_CACHE_ENTRIES`` most recently released calls (`jt_core.memory`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: dict[tuple[KernelCall, bool], int] = {}  # calls compare by value, each scalar by its type and bits
        self._calls: dict[int, RegisteredCall | HostFunction] = {}
        self._functions: dict[str, int] = {}
        #: The ids released by jax.clear_caches(), each with its kernel (held weakly; None once unknown), the most
        #: recently released last.
        self._released: collections.OrderedDict[int, weakref.ReferenceType[Any] | None] = collections.OrderedDict()
        _compat.on_clear_caches(self, "jt: calls lowered for the CPU ffi launcher")

    def register(self, call: KernelCall, kernels: Sequence[CompiledKernel], keep_subnormals: bool = True) -> int:
        """The id of ``call``, registering it (with ``kernels``) the first time its content is seen.

        Args:
            keep_subnormals: Whether the interpreter keeps subnormal floats (`LoweredCall`); ``False`` is a
                separate entry, under its own id.
        """
        with self._lock:
            call_id = self._ids.get((call, keep_subnormals))
            if call_id is None:
                digest = distributed.call_digest(call) + ("" if keep_subnormals else "/flushing")
                taken = 0
                call_id = _call_id(digest, 0)
                while call_id in self._calls or not self._free_for(call_id, call.fn):
                    taken += 1
                    call_id = _call_id(digest, taken)
                self._released.pop(call_id, None)
                self._ids[(call, keep_subnormals)] = call_id
                entry = RegisteredCall(call, tuple(kernels), keep_subnormals=keep_subnormals, call_id=call_id)
                self._calls[call_id] = entry
            return call_id

    def register_function(self, key: str, entry: HostFunction) -> int:
        """The id of the host function named ``key`` (computed from it: equal keys, equal ids), registering
        ``entry`` under it."""
        with self._lock:
            call_id = self._functions.get(key)
            if call_id is None:
                taken = 0
                call_id = _call_id(key, 0)
                while call_id in self._calls or call_id in self._released:
                    taken += 1
                    call_id = _call_id(key, taken)
                self._functions[key] = call_id
            self._calls[call_id] = entry
            return call_id

    def _free_for(self, call_id: int, kernel: Any) -> bool:
        """Whether ``call_id`` may go to a call of ``kernel``: it was never given, or it was released by a call of
        this same kernel object (an executable kept from before the release may still carry it)."""
        if call_id not in self._released:
            return True
        owner = self._released[call_id]
        return owner is not None and owner() is kernel

    def get(self, call_id: int) -> RegisteredCall | HostFunction | None:
        """The registered call with this id, or ``None``."""
        return self._calls.get(call_id)

    def was_released(self, call_id: int) -> bool:
        """Whether ``call_id`` named a call that ``jax.clear_caches()`` released."""
        return call_id in self._released

    def __len__(self) -> int:
        return len(self._calls)

    def released_count(self) -> int:
        """How many released ids are remembered (so that none goes to another kernel)."""
        return len(self._released)

    def cache_clear(self) -> None:
        """Releases every entry, after the computations still running have finished (``jax.clear_caches()``
        calls this)."""
        if not self._calls:
            return
        _compat.wait_for_running_computations("cpu")
        with self._lock:
            for call_id, entry in self._calls.items():
                self._released.pop(call_id, None)
                try:
                    self._released[call_id] = weakref.ref(entry.call.fn) if isinstance(entry, RegisteredCall) else None
                except TypeError:
                    self._released[call_id] = None
            while len(self._released) > memory.entries_limit():
                self._released.popitem(last=False)
            self._calls.clear()
            self._ids.clear()
            self._functions.clear()


def _call_id(digest: str, taken: int) -> int:
    """The id of the call with this digest after ``taken`` others with the same digest (positive, below 2**60)."""
    text = digest if taken == 0 else f"{digest}/{taken}"
    return int(hashlib.sha256(text.encode()).hexdigest()[:15], 16) or 1


_registry = CallRegistry()


def registry() -> CallRegistry:
    """The process-wide registry the handler dispatches through."""
    return _registry


# --------------------------------------------------------------------------------------------------------------
# Run time: the dispatcher the handler calls.


def _wrap(address: int | None, nbytes: int, aval: Any, what: str, writable: bool) -> np.ndarray:
    dtype = np.dtype(aval.dtype)
    shape = tuple(int(d) for d in aval.shape)
    expected = dtype.itemsize * math.prod(shape)
    if nbytes != expected:
        raise RuntimeError(f"{what} has {nbytes} bytes, expected {expected} for {aval.str_short()}")
    if expected == 0 or not address:
        return np.zeros(shape, dtype)
    array = np.frombuffer((ctypes.c_char * nbytes).from_address(address), dtype=dtype).reshape(shape)
    if not writable:
        array.flags.writeable = False
    return array


def _dispatch_call(
    call_id: int, num_inputs: int, inputs: Any, input_bytes: Any, num_outputs: int, outputs: Any, output_bytes: Any
) -> None:
    entry = _registry.get(call_id)
    if entry is None:
        if _registry.was_released(call_id):
            raise LookupError(
                f"jt CPU launcher: the triton_call registered under id {call_id} was released by "
                "jax.clear_caches(), which this executable outlived; lower the computation again (call the jitted "
                "function again, or .lower(...).compile() it again) to run it"
            )
        raise LookupError(
            f"jt CPU launcher: no triton_call is registered under id {call_id} in this process; calls are "
            "registered when they are lowered, so a serialized module must be lowered again in this process"
        )
    if num_inputs != len(entry.operand_avals) or num_outputs != len(entry.out_avals):
        raise RuntimeError(
            f"triton_call {entry.name!r}: the custom call has {num_inputs} operands and {num_outputs} results, "
            f"expected {len(entry.operand_avals)} and {len(entry.out_avals)}"
        )
    operand_arrays = [
        _wrap(inputs[i], input_bytes[i], aval, f"operand {i} of {entry.name!r}", writable=False)
        for i, aval in enumerate(entry.operand_avals)
    ]
    output_arrays = [
        _wrap(outputs[i], output_bytes[i], aval, f"result {i} of {entry.name!r}", writable=True)
        for i, aval in enumerate(entry.out_avals)
    ]
    entry.run(operand_arrays, output_arrays)


def _status_code(exc: BaseException) -> int:
    if isinstance(exc, OutOfBoundsAccessError):
        return _OUT_OF_RANGE
    if isinstance(exc, (UnsupportedKernelError, NotImplementedError)):
        return _UNIMPLEMENTED
    return _INTERNAL


def _report(exc: BaseException, message: int | None, capacity: int) -> int:
    code = _INTERNAL
    try:
        code = _status_code(exc)
        text = f"{type(exc).__name__}: {exc}".encode("utf-8", errors="replace")[: max(capacity - 1, 0)]
        if message and capacity > 0:
            ctypes.memmove(message, text + b"\0", len(text) + 1)
    except BaseException:
        pass  # the handler falls back to a generic message
    return code


def _dispatch(
    call_id: int,
    num_inputs: int,
    inputs: Any,
    input_bytes: Any,
    num_outputs: int,
    outputs: Any,
    output_bytes: Any,
    message: int | None,
    capacity: int,
) -> int:
    # Called by the handler on an XLA thread with the GIL held. Nothing may escape: ctypes would print the
    # exception and return 0, which the handler would take for success.
    try:
        _dispatch_call(call_id, num_inputs, inputs, input_bytes, num_outputs, outputs, output_bytes)
    except BaseException as exc:
        return _report(exc, message, capacity)
    return 0


_dispatcher = _DISPATCHER(_dispatch)  # kept alive for the life of the process


# --------------------------------------------------------------------------------------------------------------
# Building, loading and registering the handler.

_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_failure: str | None = None


def library_spec() -> LibrarySpec:
    """How the handler library is built (against the installed jaxlib's XLA FFI headers)."""
    return LibrarySpec(
        "jt_cpu_interpreter_call",
        (_SOURCE,),
        include_dirs=(_compat.ffi_include_dir(),),
        without_it=WITHOUT_HANDLER,
    )


def _load() -> ctypes.CDLL:
    lib = library_spec().load()
    lib.jt_cpu_interpreter_abi_version.restype = ctypes.c_int32
    lib.jt_cpu_interpreter_abi_version.argtypes = ()
    version = lib.jt_cpu_interpreter_abi_version()
    if version != ABI_VERSION:
        raise RuntimeError(f"library {lib._name} implements handler ABI {version}, this jt-core expects {ABI_VERSION}")
    lib.jt_cpu_interpreter_set_dispatcher.restype = None
    lib.jt_cpu_interpreter_set_dispatcher.argtypes = (_DISPATCHER,)
    lib.jt_cpu_interpreter_set_dispatcher(_dispatcher)
    _compat.register_host_ffi_target(TARGET_NAME, lib.jt_cpu_interpreter_callback)
    _compat.register_host_ffi_target(CHECK_TARGET_NAME, lib.jt_cpu_kernel_check)
    atexit.register(_detach, lib)
    return lib


def _detach(lib: ctypes.CDLL) -> None:
    # A computation still running when the interpreter shuts down gets an error instead of calling into a
    # finalised Python.
    lib.jt_cpu_interpreter_set_dispatcher(_DISPATCHER())  # a NULL function pointer


def ensure_registered() -> ctypes.CDLL:
    """Builds (or finds in the cache) and loads the handler library and registers it with XLA, once per process.

    Raises:
        RuntimeError: When the library cannot be built, loaded or registered (the first failure is remembered).
    """
    global _library, _failure
    if _library is not None:
        return _library
    with _lock:
        if _library is None:
            if _failure is not None:
                raise RuntimeError(_failure)
            try:
                _library = _load()
            except Exception as exc:
                _failure = f"{type(exc).__name__}: {exc}"
                raise RuntimeError(_failure) from exc
        return _library


class CpuFfiLauncher(Launcher):
    """Lowers a call to jt's CPU FFI handler, which runs the interpreter without a JAX host callback."""

    platform = "cpu"
    name = "ffi"
    priority = 10

    def native_library(self) -> LibrarySpec:
        return library_spec()

    def passes_tensor_descriptors(self, call: KernelCall, parameters: Sequence[str]) -> bool:
        return True

    def unexportable_reason(self, call: KernelCall) -> str | None:
        return (
            f"runs it in Triton's interpreter through jt's handler ({TARGET_NAME}), by an id registered in the process "
            "that lowered it, which a process loading the artifact does not have"
        )

    def unavailable_reason(self) -> str | None:
        try:
            ensure_registered()
        except RuntimeError as exc:
            return (
                f"jt's CPU FFI handler could not be built or registered ({exc}); jt-core's platform wheels carry it "
                "prebuilt, elsewhere it is built with the machine's C++ compiler at first use, or ahead of time by "
                "`python -m jt_core build-native`"
            )
        return None

    def lower(
        self,
        ctx: Any,
        call: KernelCall,
        kernels: Sequence[CompiledKernel],
        operands: Sequence[Any],
        device: Any | None,
    ) -> Sequence[Any]:

        ensure_registered()
        call_id = _registry.register(call, kernels)
        return self.emit(
            ctx,
            call_id,
            call.name,
            operands,
            call.operand_avals,
            call.out_avals,
            dict(call.aliases),
            call.launch.has_side_effect,
        )

    def emit(
        self,
        ctx: Any,
        call_id: int,
        name: str,
        operands: Sequence[Any],
        operand_avals: Sequence[Any],
        out_avals: Sequence[Any],
        aliases: dict[int, int],
        has_side_effect: bool,
    ) -> list[Any]:
        """The custom call of the handler that runs what is registered under ``call_id``; returns its results."""
        from jax._src.interpreters import mlir
        from jax._src.lib.mlir import ir

        op = mlir.custom_call(
            TARGET_NAME,
            result_types=[mlir.aval_to_ir_type(ctx.module_context, aval) for aval in out_avals],
            operands=list(operands),
            backend_config={
                "call_id": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), call_id),
                "name": ir.StringAttr.get(name),
            },
            has_side_effect=has_side_effect,
            api_version=4,
            operand_output_aliases=aliases,
            operand_layouts=[self.row_major(aval) for aval in operand_avals],
            result_layouts=[self.row_major(aval) for aval in out_avals],
        )
        return list(op.results)
