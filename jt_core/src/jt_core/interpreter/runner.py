"""Running an unmodified ``@triton.jit`` kernel on NumPy buffers with Triton's interpreter.

Triton's interpreter keeps global state (the builder, the patched ``triton.language``), so every run holds the
exclusive side of the process-wide Triton lock (`jt_core.frontend.interpreting`: no compile runs meanwhile,
in any thread), and everything patched for a run is restored when it ends: nothing leaks into later GPU
compiles, and the global ``TRITON_INTERPRET`` switch is never touched. On top of the stock interpreter a run:

* redirects nested ``@triton.jit`` helpers to their interpreted versions;
* rewrites the kernel and its helpers (`jt_core.interpreter.rewriting`) so that ``and``, ``or`` and ``not``
  on tensors and names standing for ``triton.language`` members (``exp = tl.exp``) mean what compiled Triton
  makes of them; keeps the kernel's closure variables (the stock rewriter resolves names in the module's globals
  only) and does not write into the kernel's module globals;
* holds ``bfloat16`` values as ``ml_dtypes.bfloat16`` (the stock interpreter stores their bits as ``uint16`` and
  then does integer arithmetic on them);
* computes what compiled Triton computes where the stock interpreter does not (`jt_core.interpreter.numerics`:
  conversions to integers, selections, ``tl.dot``'s input precisions, the order of reductions, subnormal floats);
* converts one-element index tensors itself (``range(0, K, BK)`` with a runtime ``K`` fails on NumPy >= 2.4);
* builds scalar arguments itself (Triton 3.6 rejects Python ``bool`` scalars);
* computes libdevice's functions (`jt_core.interpreter.extern`), which the stock interpreter cannot call,
  reductions through tensor descriptors (`jt_core.interpreter.descriptors`), which it has no way to make, and
  ``tl.map_elementwise`` (`jt_core.interpreter.mapped`), whose builtin needs the code generator;
* sanitises integer overflow only with ``debug=True`` (it doubles the run time);
* checks every load, store and atomic address against the argument it came from (each argument's pointer is an
  address of its own region, moved to the real buffer after the check: `jt_core.interpreter.access`), turning an
  out-of-bounds access (which would crash the process, or reach a neighbouring buffer) into
  `OutOfBoundsAccessError`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import ml_dtypes
import numpy as np

from jt_core import frontend, memory
from jt_core.errors import DataRaceError, KernelRuntimeError, OutOfBoundsAccessError, UnsupportedKernelError
from jt_core.interpreter import descriptors, extern, mapped, rewriting, spins
from jt_core.interpreter.access import AccessChecker, Buffer, addresses
from jt_core.interpreter.integers import IntegerFixes
from jt_core.interpreter.numerics import FloatFixes, ReductionOrder, new_stretch, subnormals_kept
from jt_core.interpreter.races import ATOMIC, LOAD, STORE, RaceTracker

__all__ = [
    "AccessChecker",
    "Buffer",
    "addresses",
    "descriptor_argument",
    "interpreted",
    "pointer_argument",
    "run",
    "scalar_argument",
]

_ELEMENT_TYPES = {
    "i1": "int1",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u1": "int1",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "fp64": "float64",
    "fp8e4nv": "float8e4nv",
    "fp8e5": "float8e5",
    "fp8e4b8": "float8e4b8",
    "fp8e5b16": "float8e5b16",
    "fp8e4b15": "float8e4b15",
}

_SCALAR_NUMPY = {
    "i1": np.bool_,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "u8": np.uint8,
    "u16": np.uint16,
    "u32": np.uint32,
    "u64": np.uint64,
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "fp32": np.float32,
    "fp64": np.float64,
}


def triton_type(type_str: str) -> Any:
    """The ``triton.language`` type of a type string (``"*fp32"`` -> pointer to float32)."""
    import triton.language as tl

    if type_str.startswith("*"):
        return tl.pointer_type(triton_type(type_str[1:]))
    return getattr(tl, _ELEMENT_TYPES[type_str])


class _CheckedLibrary:
    """Stands in for Triton's C++ interpreter library during a run: bf16 views, address checks and the race
    check's records."""

    def __init__(self, lib: Any, checker: AccessChecker | None, races: RaceTracker | None) -> None:
        self._lib = lib
        self._checker = checker
        self._races = races

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lib, name)

    def _check(self, ptrs: np.ndarray, mask: np.ndarray | None, itemsize: int, op: str) -> np.ndarray:
        """The real addresses of ``ptrs`` (those of a checked run are their arguments' regions), after the check."""
        if self._checker is None:
            return ptrs
        real, located = self._checker.check(ptrs, mask, itemsize, op)
        if self._races is not None and located is not None:
            self._races.record(located, itemsize, op)
        return real

    def _ordering(self, sem: Any) -> bool:
        """Whether an atomic of memory semantics ``sem`` orders the accesses around it (any but relaxed)."""
        return sem != self._lib.MEM_SEMANTIC.RELAXED

    def load(self, ptrs: np.ndarray, mask: np.ndarray, other: np.ndarray, dtype: Any) -> np.ndarray:
        dtype = np.dtype(dtype)
        ptrs = self._check(ptrs, mask, dtype.itemsize, LOAD)
        if dtype == np.dtype(ml_dtypes.bfloat16):
            other16 = np.asarray(other).astype(ml_dtypes.bfloat16).view(np.uint16)
            return self._lib.load(ptrs, mask, other16, np.dtype(np.uint16)).view(ml_dtypes.bfloat16)
        return self._lib.load(ptrs, mask, other, dtype)

    def store(self, ptrs: np.ndarray, value: np.ndarray, mask: np.ndarray) -> Any:
        value = np.asarray(value)
        ptrs = self._check(ptrs, mask, value.dtype.itemsize, STORE)
        if value.dtype == np.dtype(ml_dtypes.bfloat16):
            value = value.view(np.uint16)
        spins.wrote()
        return self._lib.store(ptrs, value, mask)

    def atomic_rmw(self, op: Any, ptrs: np.ndarray, value: np.ndarray, mask: np.ndarray, sem: Any) -> Any:
        value = np.asarray(value)
        ptrs = self._check(ptrs, mask, value.dtype.itemsize, ATOMIC)
        spins.wrote()
        if self._races is not None and self._ordering(sem):
            self._races.released(ptrs, mask)
        if op == self._lib.RMW_OP.XCHG and value.dtype.kind not in "biu":
            # Triton's library exchanges integers only; an exchange moves bits, whatever they mean.
            bits = np.dtype(f"u{value.dtype.itemsize}")
            return self._lib.atomic_rmw(op, ptrs, value.view(bits), mask, sem).view(value.dtype)
        return self._lib.atomic_rmw(op, ptrs, value, mask, sem)

    def atomic_cas(self, ptrs: np.ndarray, cmp: np.ndarray, val: np.ndarray, sem: Any, *rest: Any) -> Any:
        ptrs = self._check(ptrs, None, np.asarray(val).dtype.itemsize, ATOMIC)
        held = self._races is not None and self._races.holds(ptrs)
        old = np.asarray(self._lib.atomic_cas(ptrs, cmp, val, sem, *rest))
        bits = np.dtype(f"u{old.dtype.itemsize}")
        swapped = old.view(bits) == np.broadcast_to(np.asarray(cmp, old.dtype), old.shape).view(bits)
        if swapped.any():
            spins.wrote()  # (else memory is as it was)
            if self._races is not None and self._ordering(sem):
                # A compare-and-swap that swaps one element takes a lock there, or gives back one this program holds.
                if held:
                    self._races.released(ptrs, None)
                elif old.size == 1:
                    self._races.acquired(ptrs)
        return old


#: The interpreter's versions of kernels and helpers, by function (held weakly): bounded and emptied by
#: ``jax.clear_caches()`` (`jt_core.memory`).
_rewritten: memory.BoundedStore[Any, Callable[..., Any]] = memory.BoundedStore("kernels rewritten for the interpreter")
memory.mourn_in(_rewritten)
#: The code objects of the rewritten kernels and helpers written by users (not ``triton.language``'s own): where
#: the race check places an access. Held weakly: they go with their rewritten function.
_kernel_codes: weakref.WeakSet[Any] = weakref.WeakSet()
_lang_patches: dict[tuple[int, ...], list[tuple[Any, str, Any]]] = {}


class _PatchScope:
    """Applies ``(object, name, value)`` patches and restores the previous attributes."""

    _MISSING = object()

    def __init__(self, patches: Sequence[tuple[Any, str, Any]]) -> None:
        self._saved = []
        for obj, name, value in patches:
            self._saved.append((obj, name, obj.__dict__.get(name, self._MISSING)))
            setattr(obj, name, value)

    def restore(self) -> None:
        for obj, name, original in reversed(self._saved):
            if original is self._MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, original)
        self._saved.clear()


def _lang_key(fn: Callable[..., Any]) -> tuple[int, ...]:
    """Which language modules (``triton.language`` and/or ``triton.language.core``) a function's globals hold."""
    import triton.language as tl

    langs = (tl, tl.core)
    return tuple(sorted({id(v) for v in fn.__globals__.values() if any(v is lang for lang in langs)}))


def _apply_lang_patches(fn: Callable[..., Any]) -> Any:
    """Patches ``triton.language`` for interpretation like Triton's ``_patch_lang``, but computes the patches once.

    Triton rebuilds every patched member with ``inspect.getmembers`` on each run, which costs about a
    millisecond; the patched members only depend on which language modules the kernel sees, so they are
    recorded (once per attribute) and re-applied afterwards. They are recorded for every combination of the two
    modules at once, before anything is patched: recorded while a kernel's patches are on (for a helper that sees
    other modules), they would leave out every member already patched, and a later kernel seeing those modules would
    run with ``tl.arange`` unpatched. Returns a scope whose ``restore()`` undoes them.
    """
    import triton.language as tl
    from triton.runtime import interpreter as interp

    if not _lang_patches:
        for modules in ((tl,), (tl.core,), (tl, tl.core)):
            scope = interp._patch_lang(types.FunctionType(_NOTHING, {f"_{i}": m for i, m in enumerate(modules)}))
            final: dict[tuple[int, str], tuple[Any, str, Any]] = {}
            for obj, name, _ in scope._changes:
                final[(id(obj), name)] = (obj, name, getattr(obj, name))
            scope.restore()
            for module in modules:
                if hasattr(module, "map_elementwise"):
                    final[(id(module), "map_elementwise")] = (module, "map_elementwise", mapped.map_elementwise)
            _lang_patches[tuple(sorted(id(m) for m in modules))] = list(final.values())
    return _PatchScope(_lang_patches[_lang_key(fn)])


_NOTHING = (lambda: None).__code__


def interpreted(py_fn: Callable[..., Any]) -> Callable[..., Any]:
    """The interpreter-rewritten version of a kernel's Python function, with its closure kept (cached)."""
    key = memory.kernel_key(py_fn)
    fn = _rewritten.get(key)
    if fn is None:
        fn = _rewritten.setdefault(key, rewriting.rewrite(py_fn))
        if not getattr(py_fn, "__module__", "").startswith("triton."):
            _kernel_codes.add(fn.__code__)
    return fn


@contextmanager
def _patched(
    checker: AccessChecker | None, races: RaceTracker | None, debug: bool, fuse: bool = False
) -> Iterator[dict[tuple[int, ...], Any]]:
    """Applies the run-time fixes to Triton's interpreter; restores everything afterwards."""
    import triton.language as tl
    from triton.runtime import interpreter as interp
    from triton.runtime.jit import JITFunction

    builder = interp.interpreter_builder
    floats = FloatFixes(tl, interp, builder, fuse)
    original_lib = interp._interpreter
    original_patch_tensor = interp._patch_lang_tensor
    original_options = builder.options
    original_call = JITFunction.__call__
    class_descriptor_load = type(builder).create_descriptor_load

    def descriptor_load(desc: Any, *args: Any, **kwargs: Any) -> Any:
        result = class_descriptor_load(builder, desc, *args, **kwargs)
        if getattr(desc, "jt_round_f32_to_tf32", False) and result.dtype.scalar == tl.float32:
            return interp.TensorHandle(round_to_tf32(result.data), result.dtype)
        return result

    def patch_tensor(tensor: Any, scope: Any) -> None:
        original_patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    def call_helper(self: Any, *args: Any, **kwargs: Any) -> Any:
        fn = interpreted(self.fn)
        # Helpers from other modules (triton.language's own @jit functions such as tl.sum) see the language
        # through their own globals, which must be patched too.
        key = _lang_key(fn)
        if key not in patched_langs:
            patched_langs[key] = _apply_lang_patches(fn)
        new_stretch()  # a call's body, and what follows it, are stretches of their own (`numerics.new_stretch`)
        try:
            return fn(*args, **kwargs)
        finally:
            new_stretch()

    patched_langs: dict[tuple[int, ...], Any] = {}
    interp._get_np_dtype = floats.get_np_dtype
    interp._interpreter = _CheckedLibrary(original_lib, checker, races)
    interp._patch_lang_tensor = patch_tensor
    integers = IntegerFixes(tl, interp, builder, floats.binary_op)
    builder_scope = _PatchScope(
        [(builder, name, method) for name, method in (floats.patches() | integers.patches()).items()]
        + [(builder, "create_descriptor_load", descriptor_load)]
        + extern.patches(interp)
        + descriptors.patches(interp)
        + ReductionOrder(tl, interp).patches()
    )
    builder.options = dataclasses.replace(original_options, sanitize_overflow=debug, debug=debug)
    JITFunction.__call__ = call_helper  # type: ignore[method-assign]
    try:
        yield patched_langs
    finally:
        for scope in reversed(list(patched_langs.values())):
            scope.restore()
        JITFunction.__call__ = original_call  # type: ignore[method-assign]
        builder.options = original_options
        builder_scope.restore()
        interp._patch_lang_tensor = original_patch_tensor
        interp._interpreter = original_lib
        interp._get_np_dtype = floats.original_get_np_dtype


def scalar_argument(type_str: str, value: Any) -> Any:
    """A scalar kernel argument as the interpreter's ``tl.tensor``."""
    import triton.language as tl
    from triton.runtime import interpreter as interp

    if type_str == "constexpr":
        return value
    ty = triton_type(type_str)
    # Converted with subnormals kept: XLA's threads, which call the interpreter, would turn a float32 subnormal
    # (1e-40 for a float32 parameter) into zero, where a GPU's kernel receives it as it is.
    with subnormals_kept():
        data = np.array([value], dtype=_SCALAR_NUMPY[type_str])
    return tl.tensor(interp.TensorHandle(data, ty), ty)


def pointer_argument(type_str: str, array: np.ndarray, address: int | None = None) -> Any:
    """A pointer kernel argument to ``array`` as the interpreter's ``tl.tensor``: ``array``'s address, or in a
    checked run the ``address`` `jt_core.interpreter.access.addresses` gives it."""
    import triton.language as tl
    from triton.runtime import interpreter as interp

    ty = triton_type(type_str)
    value = array.ctypes.data if address is None else address
    return tl.tensor(interp.TensorHandle(np.array([value], dtype=np.uint64), ty), ty)


@dataclasses.dataclass(frozen=True)
class DescriptorArgument:
    """A host-side tensor descriptor argument; it becomes the interpreter's descriptor when the run starts.

    The interpreter's descriptor is made by Triton's own ``make_tensor_descriptor`` (the path Triton's interpreter
    takes for a host ``TensorDescriptor``), which needs the interpreter's builder, so it is built under the run's
    lock. Its loads and stores go through the checked library like any other access.
    """

    pointer: Any
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    block_shape: tuple[int, ...]
    padding: str
    round_f32_to_tf32: bool = False

    def build(self) -> Any:
        """The interpreter's ``tl.tensor_descriptor``."""
        import triton.language as tl
        from triton.runtime import interpreter as interp

        shape = [scalar_argument("i32", size) for size in self.shape]
        strides: list[Any] = [scalar_argument("i64", stride) for stride in self.strides[:-1]]
        strides.append(tl.constexpr(1))
        desc = interp.interpreter_semantic.make_tensor_descriptor(
            base=self.pointer,
            shape=shape,
            strides=strides,
            block_shape=[tl.constexpr(b) for b in self.block_shape],
            padding_option=self.padding,
        )
        # Read by the run's descriptor load (Triton 3.6's interpreter has no rounding of its own).
        desc.handle.jt_round_f32_to_tf32 = self.round_f32_to_tf32
        return desc


def round_to_tf32(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 (10 mantissa bits), to nearest with ties to even, as a TMA load through a
    TF32 tensor map rounds them; infinities and NaNs are kept."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    dropped = np.uint32(13)
    keep_odd = (bits >> dropped) & np.uint32(1)
    rounded = (bits + np.uint32((1 << 12) - 1) + keep_odd) & ~np.uint32((1 << 13) - 1)
    finite = (bits & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    return np.where(finite, rounded, bits).view(np.float32)


def descriptor_argument(
    element_type: str,
    array: np.ndarray,
    shape: Sequence[int],
    strides: Sequence[int],
    block_shape: Sequence[int],
    padding: str,
    round_f32_to_tf32: bool = False,
    address: int | None = None,
) -> DescriptorArgument:
    """A tensor descriptor argument over ``array`` (its element type as a Triton type string, ``"fp16"``).

    ``shape`` and ``strides`` (in elements) describe the tensor, which may be a view of ``array`` starting at its
    first element; every access is still checked against the whole buffer. ``address`` as for `pointer_argument`.
    """
    return DescriptorArgument(
        pointer_argument("*" + element_type, array, address),
        tuple(shape),
        tuple(strides),
        tuple(block_shape),
        padding,
        round_f32_to_tf32,
    )


def _build_descriptors(value: Any) -> Any:
    if isinstance(value, DescriptorArgument):
        return value.build()
    if isinstance(value, tuple):
        items = [_build_descriptors(item) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    return value


def _in_kernel(kernel_name: str, exc: Exception) -> str:
    """The message of an error raised inside a kernel, naming the kernel once."""
    text = str(exc)
    return text if text.startswith(f"kernel {kernel_name!r}") else f"kernel {kernel_name!r}: {text}"


def _at(error: BaseException) -> str:
    """`` at FILE:LINE: TEXT``, the kernel line ``error`` was raised at, or nothing."""
    line = rewriting.failing_line(error, _kernel_codes)
    return f" at {line}" if line else ""


def run(
    py_fn: Callable[..., Any],
    kernel_name: str,
    arguments: dict[str, Any],
    grid: tuple[int, int, int],
    buffers: Sequence[Buffer] | None,
    debug: bool,
    race_check: bool = False,
    keep_subnormals: bool = True,
    fuse: bool = False,
) -> RaceTracker | None:
    """Runs every program of ``grid``. ``buffers=None`` skips the address checks.

    Args:
        race_check: Watch for data races between the programs (needs ``buffers``).
        keep_subnormals: Run with subnormal floats kept (else in the calling thread's floating-point mode).
        fuse: Fuse products into the sums that read them, as Triton's compiler does with ``enable_fp_fusion``.

    Returns:
        With ``race_check``, the race tracker of the run (which outputs' elements were written); else ``None``.

    Raises:
        OutOfBoundsAccessError: An access outside the buffers (or a store into an input).
        DataRaceError: With ``race_check``, two programs touching one element, one writing, not both atomically.
        KernelRuntimeError: Any other error inside the kernel, naming the kernel and the program.
        UnsupportedKernelError: Inline assembly and other constructs the interpreter cannot run.
    """
    from triton.runtime import interpreter as interp

    checker = AccessChecker(kernel_name, buffers) if buffers is not None else None
    races = RaceTracker(kernel_name, grid, checker.buffers, _kernel_codes) if race_check and checker else None
    if 0 in grid:
        return races
    fn = interpreted(py_fn)
    with (
        frontend.interpreting(),
        frontend.cpu_dot_precision(),
        subnormals_kept() if keep_subnormals else contextlib.nullcontext(),
        _patched(checker, races, debug, fuse) as patched_langs,
    ):
        patched_langs[_lang_key(fn)] = _apply_lang_patches(fn)
        program = (0, 0, 0)
        try:
            arguments = {name: _build_descriptors(value) for name, value in arguments.items()}
            interp.interpreter_builder.set_grid_dim(*grid)
            linear = 0  # the race check's number of the program: z varies fastest, as the loops run
            for x in range(grid[0]):
                for y in range(grid[1]):
                    for z in range(grid[2]):
                        program = (x, y, z)
                        if races is not None:
                            races.program = linear
                            linear += 1
                        interp.interpreter_builder.set_grid_idx(x, y, z)
                        new_stretch()
                        fn(**arguments)
        except DataRaceError:
            raise  # names both programs already
        except OutOfBoundsAccessError as exc:
            raise type(exc)(f"{_in_kernel(kernel_name, exc)} [program_id {program}{_at(exc)}]") from None
        except UnsupportedKernelError as exc:
            raise type(exc)(f"{_in_kernel(kernel_name, exc)}{_at(exc)} [program_id {program}]") from None
        except NotImplementedError as exc:
            raise UnsupportedKernelError(
                f"kernel {kernel_name!r} uses something Triton's interpreter cannot run on the CPU ({exc}){_at(exc)}; "
                "run it on a GPU platform such as 'cuda' (jt-cuda) or 'rocm' (jt-rocm)"
            ) from exc
        except Exception as exc:
            cause: BaseException = exc
            while cause.__cause__ is not None and type(cause).__name__ == "InterpreterError":
                cause = cause.__cause__
            if isinstance(cause, DataRaceError):
                raise DataRaceError(str(cause)) from None
            if isinstance(cause, OutOfBoundsAccessError):
                raise type(cause)(f"{_in_kernel(kernel_name, cause)} [program_id {program}{_at(exc)}]") from None
            if isinstance(cause, UnsupportedKernelError):
                raise type(cause)(f"{_in_kernel(kernel_name, cause)}{_at(exc)} [program_id {program}]") from None
            if isinstance(cause, spins.Spinning):
                raise KernelRuntimeError(spins.message(kernel_name, program, _at(exc))) from None
            raise KernelRuntimeError(
                f"kernel {kernel_name!r} failed on the CPU interpreter at program_id {program}{_at(exc)}: "
                f"{type(cause).__name__}: {cause}"
            ) from exc
    return races
