"""A kernel's Python source rewritten for Triton's interpreter, so that it means what compiled Triton makes of it.

Triton's code generator gives some Python constructs a meaning of its own, where the interpreter, which runs the
kernel as Python, gives them Python's. On top of Triton's own rewrite (assignments, chained comparisons), the kernel's
syntax tree is rewritten so that:

* ``a and b``, ``a or b`` and their chains combine tensors elementwise (``logical_and`` / ``logical_or``), as the
  code generator's ``visit_BoolOp`` does, instead of taking a whole tensor's truth value (a block is always true
  to the interpreter, so ``causal and in_bounds`` was ``in_bounds``). Operands known before the run (constexprs,
  Python values) keep Python's short circuit exactly where the code generator keeps it: the operands are
  evaluated left to right, one known to be false ends an ``and`` (true ends an ``or``) and is its value, the
  following ones are not evaluated, and one known to be true (false for ``or``) drops out. The tensors left are
  combined from the right, as the code generator does;
* ``not t`` on a tensor is the elementwise logical not (``t.__not__()``, as the code generator calls it), and
  Python's ``not`` on anything else;
* a name bound outside the kernel (a module global or a closure variable) to a member of ``triton.language``
  (``exp = tl.exp``, ``from triton.language import exp as e``) or of a libdevice module (``from
  triton.language.extra.libdevice import tanh``) reads that member when it runs, as ``tl.exp`` would: the
  interpreter replaces those members for the run, and the code generator resolves such a name to the same builtin.
  Without this the name keeps the builtin itself, which refuses to run outside a compile (``_semantic`` argument
  must be provided), or libdevice's empty stand-in, which returns ``None``;
* the index of a ``for`` loop over ``range`` or ``tl.range`` is a scalar tensor of its bounds' type (int32 for
  most loops), as the code generator's ``scf.for`` makes it, where the interpreter gave a Python int
  (``i.to(tl.int64)`` failed, and its arithmetic did not wrap). ``tl.static_range`` keeps Python ints, as the code
  generator unrolls it with constants;
* each trip of a ``while`` loop starts by checking that the previous trip changed something (`spins`): one that
  wrote nothing and left the loop's variables as they were would repeat forever, as a spin lock that no program
  releases does when the programs run one after another.

The same rewrite applies to the ``@triton.jit`` helpers a kernel calls, in whichever module they live. The
rewritten function runs in a namespace made of Triton's interpreter module, the kernel's module globals and its
closure variables; the kernel's module is not written to.
"""

from __future__ import annotations

import ast
import functools
import importlib
import linecache
import types
from collections.abc import Callable, Container, Iterator, Mapping
from typing import Any

from jt_core import _compat, frontend
from jt_core.errors import UnsupportedKernelError
from jt_core.interpreter import spins
from jt_core.interpreter.numerics import new_stretch

__all__ = ["BooleanChain", "failing_line", "logical_not", "loop_indices", "rewrite", "source_line"]

#: The names the rewritten source uses for its helpers and for the language modules it reads aliases from.
_CHAIN = "_jt_boolean_chain"
_NOT = "_jt_logical_not"
_INDICES = "_jt_loop_indices"
_STRETCH = "_jt_new_stretch"
_BRANCH = "_jt_branch"
_BRANCH_END = "_jt_branch_end"
_TRIPS = "_jt_while_trips"
_TRIP = "_jt_while_trip"
_END_MARK = "_jt_ends_branch"
_MODULES = {
    "_jt_language": "triton.language",
    "_jt_language_math": "triton.language.math",
    "_jt_language_core": "triton.language.core",
    "_jt_libdevice": "triton.language.extra.libdevice",
    "_jt_libdevice_cuda": "triton.language.extra.cuda.libdevice",
    "_jt_libdevice_hip": "triton.language.extra.hip.libdevice",
}


class BooleanChain:
    """One operand of a rewritten ``a and b and c`` (or ``or``), carrying what the operands before it left.

    The rewritten expression is ``(_jt_boolean_chain(True) < _jt_boolean_chain(a) < _jt_boolean_chain(b)).result()``:
    Python evaluates a chained comparison left to right and evaluates the next operand only while the comparisons so
    far are true, so ``<`` passes the state on and stops the chain where the code generator stops evaluating (the
    trick Triton's interpreter uses for chained comparisons). Unlike a lambda per operand, this keeps the operands in
    the kernel's own scope (an assignment expression in one still binds there).

    Args:
        value: The operand (none for the chain's start).
        conjunction: ``True`` for ``and``, ``False`` for ``or`` (read from the chain's start).
    """

    __slots__ = ("conjunction", "decided", "tensors", "value")

    def __init__(self, value: Any = None, conjunction: bool = True) -> None:
        self.value = value
        self.conjunction = conjunction
        self.tensors: list[Any] = []
        self.decided = False

    def __lt__(self, operand: BooleanChain) -> BooleanChain:
        operand.conjunction = self.conjunction
        operand.tensors = self.tensors
        if _compat.lowered_boolean_operand(operand.value):
            operand.tensors.append(operand.value)
        elif bool(operand.value) is not self.conjunction:
            operand.decided = True  # false ends an `and`, true an `or`: the expression's value
        return operand

    def __bool__(self) -> bool:
        return not self.decided

    def result(self) -> Any:
        """The expression's value: the operand that decided it, else the tensors combined from the right, else (no
        tensor, nothing decided) the last operand."""
        if self.decided or not self.tensors:
            return self.value
        method = "logical_and" if self.conjunction else "logical_or"
        tensors = list(self.tensors)
        while len(tensors) >= 2:
            rhs = tensors.pop()
            lhs = tensors.pop()
            tensors.append(_apply(method, lhs, rhs))
        return tensors[0]


def _apply(method: str, lhs: Any, rhs: Any) -> Any:
    for owner, other in ((lhs, rhs), (rhs, lhs)):
        bound = getattr(owner, method, None)
        if bound is not None:
            return bound(other)
    symbol = "and" if method == "logical_and" else "or"
    raise TypeError(f"unsupported operand type(s) for {symbol}: {type(lhs).__name__!r} and {type(rhs).__name__!r}")


def logical_not(value: Any) -> Any:
    """``not value`` as Triton's code generator computes it: the value's ``__not__`` (elementwise on a tensor),
    else Python's ``not`` for a value known before the run."""
    method = getattr(value, "__not__", None)
    if method is not None:
        return method()
    if _compat.lowered_boolean_operand(value):
        raise TypeError(f"unary operator 'not' is not implemented on type {type(value).__name__!r}")
    return not value


def branch(condition: Any) -> Any:
    """The condition of an ``if``, starting a stretch of code where it is known only when the kernel runs."""
    if _at_run_time(condition):
        new_stretch()
    return condition


def branch_end(condition: Any) -> None:
    """After an ``if``: a new stretch of code, where its condition was known only when the kernel ran."""
    if _at_run_time(condition):
        new_stretch()


def _at_run_time(value: Any) -> bool:
    import triton.language as tl

    return isinstance(value, tl.tensor)


def loop_indices(make: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[Any]:
    """The indices of a ``for`` loop over ``make(*args, **kwargs)`` (``range``, or ``tl.range`` as the interpreter
    has it) as scalar tensors of the type compiled Triton gives the loop's counter: its bounds' and step's types
    promoted (a number typed as a kernel's scalar argument would be: int32, uint32, int64, uint64)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    dtype = tl.int32  # the start and step a loop may leave out
    for bound in args:
        dtype = _promoted(dtype, _bound_type(bound))
    np_dtype = np.dtype(f"{'i' if dtype.is_int_signed() else 'u'}{dtype.int_bitwidth // 8}")
    for value in make(*args, **kwargs):
        yield tl.tensor(TensorHandle(np.array([value]).astype(np_dtype), dtype), dtype)


def _bound_type(bound: Any) -> Any:
    import triton.language as tl

    if isinstance(bound, tl.constexpr):
        bound = bound.value
    if isinstance(bound, tl.tensor):
        return bound.dtype
    value = int(bound)
    for dtype, high in ((tl.int32, 2**31), (tl.uint32, 2**32), (tl.int64, 2**63)):
        if -(2**31 if dtype is tl.int32 else 2**63) <= value < high:
            return dtype
    return tl.uint64


def _promoted(a: Any, b: Any) -> Any:
    """Triton's promotion of two integer types: the wider; of a signed and an unsigned one of the same width, the
    unsigned."""
    if a.int_bitwidth != b.int_bitwidth:
        return a if a.int_bitwidth > b.int_bitwidth else b
    return b if a.is_int_signed() else a


class _CompiledMeaning(ast.NodeTransformer):
    """Rewrites ``and``/``or``/``not`` into calls of this module's helpers and reads language aliases at run time."""

    def __init__(self, aliases: Mapping[str, tuple[str, str]], shadowed: bool = False) -> None:
        self._aliases = aliases
        self._shadowed = shadowed  # whether the name ``range`` is bound to something other than Python's
        self._branches = 0
        self._loops = 0

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)  # rewrites the operands in place
        start = _call(_CHAIN, ast.Constant(value=None), ast.Constant(value=isinstance(node.op, ast.And)))
        chain = ast.Compare(
            left=start,
            ops=[ast.Lt() for _ in node.values],
            comparators=[_call(_CHAIN, value) for value in node.values],
        )
        result = ast.Call(func=ast.Attribute(value=chain, attr="result", ctx=ast.Load()), args=[], keywords=[])
        return _located(result, node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)  # rewrites the operands in place
        if not isinstance(node.op, ast.Not):
            return node
        return _located(_call(_NOT, node.operand), node)

    def visit_For(self, node: ast.For) -> Any:
        self.generic_visit(node)  # aliases in the iterable are read as members by now (`visit_Name`)
        call = node.iter
        if isinstance(call, ast.Call) and _counted(call.func, self._shadowed):
            indices = ast.Call(ast.Name(id=_INDICES, ctx=ast.Load()), [call.func, *call.args], call.keywords)
            node.iter = ast.copy_location(indices, call)
            # A loop's iterations, and what follows it, are stretches of code of their own (`new_stretch`).
            node.body.insert(0, _stretch(node))
            return [node, _stretch(node)]
        return node

    def visit_While(self, node: ast.While) -> Any:
        self.generic_visit(node)
        # Each trip of the body starts by comparing what the loop assigns, and whether anything was written, with
        # the previous trip: a trip that changed nothing would repeat forever (`spins`).
        self._loops += 1
        trips = f"_jt_trips_{self._loops}"
        assigned = {
            n.id
            for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and not n.id.startswith("_jt_")
        }
        start = ast.Assign(targets=[ast.Name(id=trips, ctx=ast.Store())], value=_call(_TRIPS))
        names = ast.Tuple(elts=[ast.Constant(value=name) for name in sorted(assigned)], ctx=ast.Load())
        check = ast.copy_location(ast.Expr(_call(_TRIP, ast.Name(id=trips, ctx=ast.Load()), names)), node)
        node.body[:0] = [_stretch(node), check]
        return [_located(start, node), node, _stretch(node)]

    def visit_If(self, node: ast.If) -> Any:
        self.generic_visit(node)
        # The condition is read once, into a name: a branch on a value known only when the kernel runs starts a
        # stretch of code, and so does what follows it (`branch`, `branch_end`); one known before the run (a
        # constexpr) makes no branch in compiled Triton.
        self._branches += 1
        name = f"_jt_condition_{self._branches}"
        condition = ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=node.test)
        node.test = _call(_BRANCH, ast.Name(id=name, ctx=ast.Load()))
        end = ast.Expr(_call(_BRANCH_END, ast.Name(id=name, ctx=ast.Load())))
        setattr(end, _END_MARK, True)  # placed by `_place_branch_ends`
        return [_located(condition, node), node, _located(end, node)]

    def visit_Name(self, node: ast.Name) -> ast.AST:
        found = self._aliases.get(node.id)
        if found is None or not isinstance(node.ctx, ast.Load):
            return node
        module, attr = found
        return _located(ast.Attribute(value=ast.Name(id=module, ctx=ast.Load()), attr=attr, ctx=ast.Load()), node)


def _place_branch_ends(tree: ast.AST) -> None:
    """Puts each statement that ends an ``if``'s stretch on the line of the statement after it, so that a debugger
    stopped inside the ``if`` (a ``breakpoint()``) stops next on the line that follows, not on the ``if``'s line
    again; one that ends its block goes (a loop's iteration or its end, the function's end and an enclosing ``if``'s
    own end each start a new stretch there anyway)."""
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            kept = []
            for i, statement in enumerate(block):
                if not getattr(statement, _END_MARK, False):
                    kept.append(statement)
                elif i + 1 < len(block):
                    kept.append(ast.copy_location(statement, block[i + 1]))
                elif not isinstance(node, ast.If | ast.For | ast.While | ast.FunctionDef):
                    kept.append(statement)  # after a `with` or a `try`: where the `if` is
            block[:] = kept


def _counted(func: ast.expr, shadowed: bool) -> bool:
    """Whether a loop over a call of ``func`` is an ``scf.for`` with a tensor counter: Python's ``range`` (unless the
    name is bound to something else) or ``tl.range`` (any ``.range`` attribute: not ``.static_range``)."""
    if isinstance(func, ast.Name):
        return func.id == "range" and not shadowed
    return isinstance(func, ast.Attribute) and func.attr == "range"


def _stretch(node: ast.AST) -> ast.stmt:
    """A statement starting a new stretch of straight-line code, placed at ``node``."""
    return ast.copy_location(ast.Expr(_call(_STRETCH)), node)


def _call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=[])


def _located(new: ast.AST, old: ast.AST) -> ast.AST:
    # The new nodes inside take this one's place in the source when the tree's locations are completed.
    return ast.copy_location(new, old)


@functools.cache
def _language_members() -> dict[int, tuple[str, str]]:
    """Where each callable member of ``triton.language`` (then ``.math``, then ``.core``, then the libdevice
    modules) lives, by identity.

    Read once, while no interpreter run has the members replaced (`frontend.compiling` excludes runs).
    """
    index: dict[int, tuple[str, str]] = {}
    with frontend.compiling():
        for variable, module_name in _MODULES.items():
            try:
                module = importlib.import_module(module_name)
            except ImportError:  # a Triton built without one of the backends' libraries
                continue
            for attr, value in vars(module).items():
                if attr.startswith("__") or isinstance(value, types.ModuleType) or not callable(value):
                    continue
                index.setdefault(id(value), (variable, attr))
    return index


def _outer_names(py_fn: Callable[..., Any]) -> dict[str, Any]:
    """The names a function reads from outside it: its module's globals, overridden by its closure variables."""
    names = dict(py_fn.__globals__)
    closure = py_fn.__closure__ or ()
    names.update({name: cell.cell_contents for name, cell in zip(py_fn.__code__.co_freevars, closure) if _full(cell)})
    return names


def _full(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # a closure variable not bound yet
        return False
    return True


def _aliases(py_fn: Callable[..., Any], outer: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """The names read from outside the function that stand for a member of ``triton.language``, with where that
    member lives (``exp`` -> ``("_jt_language", "exp")``)."""
    code = py_fn.__code__
    local = set(code.co_varnames) | set(code.co_cellvars)
    members = _language_members()
    found = {}
    for name, value in outer.items():
        if name in local or name.startswith("__"):
            continue
        where = members.get(id(value))
        if where is not None:
            found[name] = where
    return found


def rewrite(py_fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function Triton's interpreter runs for the kernel or helper ``py_fn`` (see the module's description).

    Raises:
        UnsupportedKernelError: The function has no readable source.
    """
    from triton.runtime import interpreter as interp

    outer = _outer_names(py_fn)
    aliases = _aliases(py_fn, outer)
    ours = _CompiledMeaning(aliases, shadowed="range" in outer or "range" in py_fn.__code__.co_varnames)

    class _Passes:
        """Triton's own rewrite of the tree, then this module's."""

        stock = interp.FunctionRewriter.ast_transformer

        def visit(self, tree: ast.AST) -> ast.AST:
            tree = ours.visit(self.stock.visit(tree))
            _place_branch_ends(tree)
            return tree

    class _Rewriter(interp.FunctionRewriter):  # type: ignore[misc,name-defined]
        ast_transformer = _Passes()

        def _compile_and_exec(self, transformed_ast: Any) -> Any:
            code = compile(transformed_ast, filename=self.filename, mode="exec")
            namespace = dict(vars(interp))
            namespace.update(outer)
            namespace.update(
                {
                    _CHAIN: BooleanChain,
                    _NOT: logical_not,
                    _INDICES: loop_indices,
                    _STRETCH: new_stretch,
                    _BRANCH: branch,
                    _BRANCH_END: branch_end,
                    _TRIPS: spins.Trips,
                    _TRIP: spins.trip,
                }
            )
            for variable in {module for module, _ in aliases.values()}:
                namespace[variable] = importlib.import_module(_MODULES[variable])
            local: dict[str, Any] = {}
            exec(code, namespace, local)
            return local[self.fn.__name__]

    with _compat.jit_registry_kept(py_fn):
        rewritten = _Rewriter(py_fn).rewrite_ast()
    if rewritten is py_fn:
        raise UnsupportedKernelError(
            f"kernel {py_fn.__name__!r} has no readable source, so Triton's interpreter cannot run it on the CPU"
        )
    return rewritten


def source_line(path: str, number: int) -> str:
    """``FILE:LINE: TEXT``, a line of a kernel's source (``FILE:LINE`` where the text cannot be read)."""
    text = linecache.getline(path, number).strip()
    return f"{path}:{number}: {text}" if text else f"{path}:{number}"


def failing_line(error: BaseException, codes: Container[Any]) -> str | None:
    """Where in a kernel ``error`` was raised: the `source_line` of the innermost frame of the rewritten kernels and
    helpers (their code objects, ``codes``) in its traceback or its causes', or ``None``."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    for raised in reversed(chain):  # the innermost first
        found = None
        tb = raised.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code in codes:
                found = (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
            tb = tb.tb_next
        if found is not None:
            return source_line(*found)
    return None
