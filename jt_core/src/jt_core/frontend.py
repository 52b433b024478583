"""Triton's front end on its own: a kernel's Python source to Triton IR, without a GPU and without compiling further.

The CPU backend runs kernels with Triton's interpreter, which finds mistakes only when a program reaches them (a
block size that is not a power of two, a pointer used as a number). Triton's front end finds them all up front,
in milliseconds per kernel (6 for a vector add, 15 to 35 for a matrix product), so the CPU backend runs it when a
call is lowered and binding uses it to tell how a kernel uses an argument (`refusal`).

The front end needs a target's code generation hooks; it takes Triton's own CUDA backend (shipped in every Triton
wheel, usable without a GPU) with one change: ``tl.dot`` may take any block size, as the interpreter does, where
real GPUs want at least 16 rows.

Triton's interpreter (the CPU backend) works by patching ``triton.language`` for the whole process while it runs a
kernel, and Triton's front end reads those same functions when it turns a kernel into IR. So the two must never
overlap, whichever threads they run on: every path of jt into Triton's front end (a compile for any backend, the
checks here) holds `compiling`, which any number of threads may hold together, and every interpreter run holds
`interpreting`, which excludes everything else.

Triton's front end takes time quadratic in the number of a kernel's parameters in three places, each a lookup or an
update that walks every parameter for each parameter, and in MLIR, which rewrites the attributes of every argument
to set one argument's: a kernel with 10,000 output pointers spent two minutes there. While any compile runs (the
CPU backend's and every GPU backend's), the three places take constant time per parameter (`linear_front_end`),
each replaced only where the installed Triton's function is the one it stands in for, word for word, so a Triton
that changes them keeps its own; and the CPU backend's front end sets no argument attributes, which only later
passes read.
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import textwrap
import threading
import traceback
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from jt_core import _compat

__all__ = [
    "build",
    "check",
    "compiling",
    "cpu_dot_precision",
    "interpreting",
    "is_front_end_error",
    "linear_front_end",
    "refusal",
    "release_frames",
    "settle_source_key",
]

#: The target whose front end stands in for every platform (Hopper: every language feature is available).
_ARCH = 90

_lock = threading.Lock()


class _SharedExclusiveLock:
    """A lock held by many threads together (shared) or by one alone (exclusive), re-entrant in each thread.

    A thread holding the exclusive side may also take the shared side. Threads waiting for the exclusive side go
    first: new shared holders wait behind them (those already holding it may re-enter), so a stream of compiles
    cannot starve an interpreter run.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._shared = 0
        self._owner: int | None = None
        self._waiting_exclusive = 0
        self._local = threading.local()

    def _depths(self) -> tuple[int, int]:
        return getattr(self._local, "shared", 0), getattr(self._local, "exclusive", 0)

    @contextmanager
    def shared(self) -> Iterator[None]:
        shared, exclusive = self._depths()
        if shared or exclusive:
            self._local.shared = shared + 1
            try:
                yield
            finally:
                self._local.shared -= 1
            return
        with self._condition:
            while self._owner is not None or self._waiting_exclusive:
                self._condition.wait()
            self._shared += 1
        self._local.shared = 1
        try:
            yield
        finally:
            self._local.shared = 0
            with self._condition:
                self._shared -= 1
                if not self._shared:
                    self._condition.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        shared, exclusive = self._depths()
        if exclusive:
            self._local.exclusive = exclusive + 1
            try:
                yield
            finally:
                self._local.exclusive -= 1
            return
        if shared:
            raise RuntimeError(
                "Triton's interpreter was started from inside a Triton compile on the same thread; the two cannot "
                "overlap (the interpreter patches triton.language for the whole process)"
            )
        me = threading.get_ident()
        with self._condition:
            self._waiting_exclusive += 1
            try:
                while self._owner is not None or self._shared:
                    self._condition.wait()
            finally:
                self._waiting_exclusive -= 1
            self._owner = me
        self._local.exclusive = 1
        try:
            yield
        finally:
            self._local.exclusive = 0
            with self._condition:
                self._owner = None
                self._condition.notify_all()


_triton = _SharedExclusiveLock()


def compiling() -> Any:
    """Held while Triton's front end runs (any compile): many threads at once, never during an interpreter run.
    Triton's parse of a kernel's source runs one at a time (`jt_core._compat.serialize_kernel_parsing`)."""
    _compat.serialize_kernel_parsing()
    return _triton.shared()


def interpreting() -> Any:
    """Held while Triton's interpreter runs a kernel: by one thread, while no compile runs anywhere."""
    return _triton.exclusive()


def settle_source_key(fn: Any) -> None:
    """Computes Triton's ``cache_key`` of a ``@triton.jit`` function, which Triton keeps once computed, while no
    interpreter run patches the language. The key's walk reads the module attributes the kernel names
    (``libdevice.pow``), which an interpreter run on another thread (a host callback of an earlier call, still
    running) replaces with its own functions for its duration: read then, the key fails with Triton's
    "Unsupported function referenced"."""
    if getattr(fn, "hash", "") is None:
        with compiling():
            fn.cache_key  # noqa: B018 (computed for its side effect: Triton keeps it)


#: Whether this thread runs Triton's front end or its interpreter for the CPU (`cpu_dot_precision`).
_cpu = threading.local()


class _CpuFloat32Default:
    """Triton's ``knobs.language.fp32_default`` (``TRITON_F32_DEFAULT``), read as ``"ieee"`` by a thread inside
    `cpu_dot_precision` where nothing sets it: ``tl.dot`` takes that knob, else ``"tf32"`` wherever the target
    allows it, for a float32 product without an ``input_precision``. Every other thread reads it as Triton does."""

    def __init__(self, original: Any) -> None:
        self.original = original

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        value = self.original.__get__(obj, objtype)
        if value is None and obj is not None and getattr(_cpu, "dot", False):
            return "ieee"
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        self.original.__set__(obj, value)

    def __delete__(self, obj: Any) -> None:
        self.original.__delete__(obj)


_knob_lock = threading.Lock()


@contextmanager
def cpu_dot_precision() -> Iterator[None]:
    """While the body runs on this thread, ``tl.dot`` on float32 without an ``input_precision`` computes in float32
    (``"ieee"``), the CPU's default on both of its paths; ``TRITON_F32_DEFAULT``, where set, still decides. A
    kernel asking for ``"tf32"`` or ``"tf32x3"`` gets it."""
    from triton import knobs

    owner = type(knobs.language)
    with _knob_lock:
        if not isinstance(owner.__dict__.get("fp32_default"), _CpuFloat32Default):
            owner.fp32_default = _CpuFloat32Default(owner.__dict__["fp32_default"])
    outer = getattr(_cpu, "dot", False)
    _cpu.dot = True
    try:
        yield
    finally:
        _cpu.dot = outer


@functools.cache
def _backend() -> tuple[Any, Any, Any, Any]:
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    target = GPUTarget("cuda", _ARCH, 32)
    backend = make_backend(target)
    # tl.dot on float32 without an input_precision computes in float32 on the CPU (`cpu_dot_precision`), where
    # GPUs default to TF32; a kernel asking for "tf32" gets it on both.
    options = backend.parse_options({"enable_fp_fusion": True, "default_dot_input_precision": "ieee"})
    codegen = dict(backend.get_codegen_implementation(options))
    codegen["min_dot_size"] = lambda lhs, rhs: (1, 1, 1)
    return target, backend, options, codegen


T = TypeVar("T")


def build(source: Any, visit: Callable[[Any], T], stops: list[str] | None = None) -> T:
    """Runs Triton's front end on an ``ASTSource`` (what a dialect's ``make_source`` returns) and hands the module it
    makes (the kernel's TTIR) to ``visit``, whose result it returns; the module lives only for that call.

    A ``breakpoint()`` in the kernel or a helper it calls is let through (`_breakpoints_let_through`): it leaves
    nothing in the TTIR, and where each one the front end reached stands (``"file:line"``) is appended to
    ``stops``.

    Raises:
        Exception: Triton's own (``CompilationError`` with the source line), for a kernel the front end refuses.
    """
    from triton._C.libtriton import ir

    target, backend, options, codegen = _backend()
    if getattr(source, "attrs", None):
        # The arguments' attributes (divisibility hints for later passes) change nothing the front end accepts or
        # refuses, and MLIR rewrites every argument's attributes to set one: time quadratic in the parameters.
        source = copy.copy(source)
        source.attrs = {}
    reached: list[str] = [] if stops is None else stops
    # the builder state is not shared between threads
    with compiling(), _lock, linear_front_end(source.fn), _breakpoints_let_through(reached), cpu_dot_precision():
        context = ir.context()
        ir.load_dialects(context)
        backend.load_dialects(context)
        module = source.make_ir(target, options, codegen, backend.get_module_map(), context)
        return visit(module)


# --------------------------------------------------------------------------------------------------------------
# breakpoint() in a kernel.


def _breakpoint_stand_in(*args: Any, **kwargs: Any) -> None:
    """What ``breakpoint`` names while jt runs Triton's front end; the code generator calls `_reach_breakpoint`
    in its place."""
    raise NameError("breakpoint is not defined")


#: Where the front end run by this thread appends the breakpoints it reaches (``None``: no such run).
_stops = threading.local()


def _reach_breakpoint(generator: Any, node: ast.Call) -> None:
    """Triton's code generator at a ``breakpoint()`` call: nothing to emit; where it stands is kept."""
    found = getattr(_stops, "found", None)
    if found is None:  # a compile on another thread than jt's front end run: Triton's own refusal
        raise NameError("breakpoint is not defined")
    found.append(f"{generator.file_name}:{generator.begin_line + node.lineno}")


@contextmanager
def _breakpoints_let_through(found: list[str]) -> Iterator[None]:
    """Runs the body with ``breakpoint()`` known to Triton's code generator, as a call that emits nothing and
    appends its ``"file:line"`` to ``found``.

    Python's debugger stops only where the kernel runs as Python (Triton's interpreter), and the front end checks
    the rest of such a kernel all the same: the CPU backend hands the configurations that reach one to the
    interpreter. Held under ``_lock``; a compile running at the same time on another thread, which Triton's front
    end is not run for by jt, still gets Triton's ``NameError``."""
    from triton.compiler import code_generator

    generator = code_generator.CodeGenerator
    names = generator.__dict__["builtin_namespace"]
    static = generator.__dict__["statically_implemented_functions"]
    generator.builtin_namespace = {**names, "breakpoint": _breakpoint_stand_in}
    generator.statically_implemented_functions = {**static, _breakpoint_stand_in: _reach_breakpoint}
    _stops.found = found
    try:
        yield
    finally:
        _stops.found = None
        generator.builtin_namespace = names
        generator.statically_implemented_functions = static


def check(source: Any) -> None:
    """Runs Triton's front end on an ``ASTSource``, for what it refuses.

    Raises:
        Exception: Triton's own (``CompilationError`` with the source line), for a kernel the front end refuses.
    """
    build(source, lambda module: None)


# --------------------------------------------------------------------------------------------------------------
# Triton's front end in time linear in the parameters.

#: The functions of Triton's front end that `linear_front_end` stands in for, as Triton 3.6 to 3.9 write them.
_SETITEM = """\
def _setitem(self, idx, value):
    idx = _unwrap_if_constexpr(idx)
    assert isinstance(idx, int)
    self.values[idx] = value
    self.type = _type_for_tuple_values(self.values, self.type.fields)
"""
_VISIT_ARG = """\
def visit_arg(self, node):
    ast.NodeVisitor.generic_visit(self, node)
    param = next(p for p in self.jit_fn.params if p.name == node.arg)
    if param.is_constexpr and (param.do_not_specialize or param.do_not_specialize_on_alignment):
        raise CompilationError(
            self.jit_fn.src, node,
            f"{node.arg} marked as constexpr and listed in do_not_specialize/do_not_specialize_on_alignment. "
            "Remove constexpr designation to skip specialization.")
    return node.arg
"""
_ARG_NAMES_INDEX = "idx = fn.arg_names.index(k)"


def _written_as(function: Any, text: str) -> bool:
    try:
        return textwrap.dedent(inspect.getsource(function)) == text
    except (OSError, TypeError):
        return False


#: The tuples whose elements the arguments' build set, per thread (``None``: no build running).
_building = threading.local()


@functools.cache
def _stand_ins() -> tuple[tuple[Any, str, Callable[..., Any]], ...]:
    """``(owner, name, replacement)`` for each quadratic place of the installed Triton's front end that has the
    form jt knows."""
    from triton.compiler import code_generator
    from triton.language import core

    found: list[tuple[Any, str, Callable[..., Any]]] = []
    setitem = core.tuple._setitem
    deserialize = getattr(code_generator.ASTFunction, "deserialize", None)
    if _written_as(setitem, _SETITEM) and deserialize is not None:
        # Building a kernel's arguments (ASTFunction.deserialize) sets one element of a tuple per parameter, and
        # each set computed the types of all the tuple's elements again (Triton 3.6 also writes out the type's
        # name). While the arguments are built, a set only places the value; when they are built, each tuple that
        # was set gets its type once, inner tuples first, as Triton's last set gives it: from the values, whose
        # types are the declared ones, which is what an inner tuple not yet set holds too.
        def _setitem(self: Any, idx: Any, value: Any) -> None:
            pending = getattr(_building, "tuples", None)
            if pending is None:
                setitem(self, idx, value)
                return
            idx = core._unwrap_if_constexpr(idx)
            assert isinstance(idx, int)
            self.values[idx] = value
            pending[id(self)] = self

        def _retype(value: Any, pending: dict[int, Any]) -> None:
            for item in value.values:
                if isinstance(item, core.tuple):
                    _retype(item, pending)
            if id(value) in pending:
                value.type = core._type_for_tuple_values(value.values, value.type.fields)

        def _deserialize(self: Any, fn: Any) -> Any:
            outer = getattr(_building, "tuples", None)
            pending: dict[int, Any] = {}
            _building.tuples = pending
            try:
                values = deserialize(self, fn)
            finally:
                _building.tuples = outer
            if isinstance(values, core.tuple):
                _retype(values, pending)
            return values

        found += [(core.tuple, "_setitem", _setitem), (code_generator.ASTFunction, "deserialize", _deserialize)]
    visit_arg = code_generator.CodeGenerator.visit_arg
    if _written_as(visit_arg, _VISIT_ARG):
        # Each parameter of the signature was looked up by walking the kernel's parameters.
        def _visit_arg(self: Any, node: ast.arg) -> Any:
            by_name = self.__dict__.get("_jt_params")
            if by_name is None:
                by_name = self._jt_params = {}
                for param in self.jit_fn.params:
                    by_name.setdefault(param.name, param)
            param = by_name.get(node.arg)
            if param is None:
                return visit_arg(self, node)
            ast.NodeVisitor.generic_visit(self, node)
            if param.is_constexpr and (param.do_not_specialize or param.do_not_specialize_on_alignment):
                raise code_generator.CompilationError(
                    self.jit_fn.src,
                    node,
                    f"{node.arg} marked as constexpr and listed in do_not_specialize/do_not_specialize_on_alignment. "
                    "Remove constexpr designation to skip specialization.",
                )
            return node.arg

        found.append((code_generator.CodeGenerator, "visit_arg", _visit_arg))
    return tuple(found)


@functools.cache
def _indexes_arg_names() -> bool:
    """Whether the installed Triton's front end finds each parameter's position with ``fn.arg_names.index``."""
    from triton.compiler import code_generator

    try:
        return _ARG_NAMES_INDEX in inspect.getsource(code_generator.ast_to_ttir)
    except (OSError, TypeError):
        return False


class _IndexedNames(list[str]):
    """A kernel's ``arg_names`` whose ``index`` takes constant time (the front end looks each parameter up)."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(names)
        self._positions: dict[str, int] = {}
        for position, name in enumerate(names):
            self._positions.setdefault(name, position)

    def index(self, value: Any, *bounds: Any) -> int:
        if bounds or value not in self._positions:
            return super().index(value, *bounds)
        return self._positions[value]


#: How many bodies run `linear_front_end` now, with Triton's functions each stand-in replaced; and, by kernel,
#: the kernel, its own ``arg_names`` and how many bodies compile it.
_linear_lock = threading.Lock()
_linear_users: list[int] = [0]
_linear_originals: list[Any] = []
_indexed: dict[int, list[Any]] = {}


#: The number of parameters from which `linear_front_end` puts its stand-ins in place.
LINEAR_FROM_PARAMETERS = 64


@contextmanager
def linear_front_end(fn: Any) -> Iterator[None]:
    """Runs the body with Triton's front end in time linear in the parameters of kernel ``fn`` (see
    `_SETITEM`, `_VISIT_ARG`, `_ARG_NAMES_INDEX`): every compile of every backend runs in it
    (`jt_core.plugin.facade.compile_kernel`). The stand-ins compute what Triton's functions compute, whichever
    thread calls them, so bodies on several threads share them: the first to enter puts them in place, the last to
    leave takes them out. A kernel of fewer than `LINEAR_FROM_PARAMETERS` parameters runs Triton's own functions,
    which cost next to nothing there: a compile read back from a cache, or one that runs no front end, then loads
    nothing more of Triton (its code generator brings in the Gluon language)."""
    names = getattr(fn, "arg_names", None)
    if names is not None and len(names) < LINEAR_FROM_PARAMETERS:
        yield
        return
    indexed = type(names) is list and _indexes_arg_names()
    stand_ins = _stand_ins()
    with _linear_lock:
        if _linear_users[0] == 0:
            _linear_originals[:] = [owner.__dict__[name] for owner, name, _ in stand_ins]
            for owner, name, stand_in in stand_ins:
                setattr(owner, name, stand_in)
        _linear_users[0] += 1
        if indexed or id(fn) in _indexed:
            entry = _indexed.get(id(fn))
            if entry is None:
                _indexed[id(fn)] = [fn, names, 1]
                fn.arg_names = _IndexedNames(names)  # type: ignore[arg-type]
            else:
                entry[2] += 1
    try:
        yield
    finally:
        with _linear_lock:
            entry = _indexed.get(id(fn))
            if entry is not None:
                entry[2] -= 1
                if entry[2] == 0:
                    del _indexed[id(fn)]
                    fn.arg_names = entry[1]
            _linear_users[0] -= 1
            if _linear_users[0] == 0:
                for (owner, name, _), original in zip(stand_ins, _linear_originals, strict=True):
                    setattr(owner, name, original)


def refusal(source: Any) -> str | None:
    """Why the front end refuses ``source`` (the last line of its message), or ``None`` when it accepts it.

    Any failure counts, Triton's or not (a Triton without the CUDA backend refuses everything).
    """
    try:
        check(source)
    except Exception as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        return lines[-1].strip() if lines else type(exc).__name__
    return None


def is_front_end_error(error: BaseException) -> bool:
    """Whether ``error`` is Triton's front end refusing a kernel's source (``CompilationError``): it says where in
    the source itself, and its traceback is Triton's code generator walking the kernel."""
    from triton.compiler.errors import CompilationError

    return isinstance(error, CompilationError)


def release_frames(error: BaseException) -> None:
    """Lets go of what the finished frames in the tracebacks of a failed compile's ``error``, and of its causes,
    hold: the frames of the compile, from the plugin's hook down into Triton.

    A compile that fails leaves Triton's code generator in those frames, with its IR context, builder and module
    (megabytes of native objects); the frames' functions hold it too (the generator's name lookups are closures
    over it). Whatever keeps the error (a notebook's last exception, a test report, a list of failures) would keep
    them, and at exit Triton's bindings report every one still alive as leaked. So the tracebacks end where they
    enter Triton, whose frames are kept as text in a note (file, line and source, as a traceback prints them), and
    the finished frames before that drop their local variables. Frames still running (the caller's) are left alone.
    An error of Triton's front end (`is_front_end_error`) keeps no traceback and no note: its message locates the
    refusal in the kernel's source, and its frames, the code generator's recursion over the kernel, would print
    a hundred lines before the error that says what happened.
    """
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        pending += [current.__cause__, current.__context__]
        previous: types.TracebackType | None = None
        tb = current.__traceback__
        while tb is not None and tb.tb_frame.f_globals.get("__name__", "").partition(".")[0] != "triton":
            try:
                tb.tb_frame.clear()
            except RuntimeError:  # a frame still running
                pass
            previous, tb = tb, tb.tb_next
        if is_front_end_error(current):
            current.__traceback__ = None
            continue
        if tb is None:
            continue
        inside = "".join(traceback.format_list(traceback.extract_tb(tb)))
        current.add_note(f"Triton's frames of this error (kept as text, their objects released):\n{inside.rstrip()}")
        if previous is None:
            current.__traceback__ = None
        else:
            previous.tb_next = None
