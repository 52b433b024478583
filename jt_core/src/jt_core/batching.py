"""``jax.vmap`` of a ``triton_call``: the batching strategies and the generated batch-grid wrapper kernels.

Two strategies, chosen per call with ``triton_call(..., vmap=...)``:

* ``"grid"``: one launch for the whole batch. The batch becomes an extra grid axis that the kernel leaves free; a
  small generated ``@triton.jit`` wrapper reads the batch index from that axis, offsets every batched pointer by
  ``index * batch stride`` (in elements) and calls the user's kernel, unchanged, with the same constexprs. Operands
  that are not batched are shared by every batch element (stride 0, no copy). Nested ``vmap`` adds batch
  dimensions to the same wrapper: they are flattened onto the one free axis.
* ``"sequential"``: one launch per batch element (``jax.lax.map``); always applicable.

``"auto"`` (the default) uses the grid strategy where it applies and the sequential one elsewhere. The grid
strategy applies to plain ``@triton.jit`` kernels when some grid axis has size 1 in every configuration and
neither the kernel nor the ``@triton.jit`` helpers it calls read ``tl.program_id`` / ``tl.num_programs`` of that
axis (decided by reading their source).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.abc
import importlib.util
import inspect
import itertools
import linecache
import math
import os
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax import tree_util
from jax.interpreters import batching

from jt_core import _compat, files, memory
from jt_core.call import INPUT, OUTPUT, BatchInfo, KernelCall, KernelParam, LaunchConfig, kernel_name
from jt_core.configs import AXIS_LIMITS
from jt_core.errors import KernelCallValueError
from jt_core.primitive import triton_kernel_call_p

# Preferred order for the batch axis: the largest limit first.
_AXIS_ORDER = (0, 2, 1)
_PREFIX = "_jt_"


# --------------------------------------------------------------------------------------------------------------
# Which grid axes does a kernel read?

_AXIS_FUNCTIONS = ("program_id", "num_programs")


def program_axes_read(fn: Any, constexprs: dict[str, Any] | None = None) -> frozenset[int] | None:
    """The grid axes whose ``program_id`` / ``num_programs`` a kernel (or any helper it calls) reads.

    Args:
        fn: A ``JITFunction``.
        constexprs: The kernel's constexpr values, used to resolve ``tl.program_id(axis=AXIS)``.

    Returns:
        The set of axes, or ``None`` when it cannot be decided from the source (an axis computed at run time,
        ``program_id`` passed around as a value, a kernel without readable source).
    """
    seen: set[tuple[int, frozenset[tuple[str, Any]]]] = set()
    axes: set[int] = set()
    known_ints = {k: v for k, v in (constexprs or {}).items() if isinstance(v, int) and not isinstance(v, bool)}
    pending: list[tuple[Any, dict[str, int]]] = [(fn, known_ints)]
    for value in (constexprs or {}).values():
        if _is_jit_function(value):
            pending.append((value, {}))
    while pending:
        current, known = pending.pop()
        key = (id(current), frozenset(known.items()))
        if key in seen:
            continue
        seen.add(key)
        found = _axes_in_function(current, known)
        if found is None:
            return None
        current_axes, helpers = found
        axes |= current_axes
        pending.extend(helpers)
    return frozenset(axes)


def _is_jit_function(value: Any) -> bool:
    from triton.runtime.jit import JITFunction

    return isinstance(value, JITFunction)


def _axes_in_function(fn: Any, known: dict[str, int]) -> tuple[set[int], list[tuple[Any, dict[str, int]]]] | None:
    """The axes ``fn`` reads directly and the helpers it calls, with the integer constants passed to them."""
    py_fn = getattr(fn, "fn", fn)
    source = getattr(fn, "src", None)
    try:
        if not isinstance(source, str):
            source = inspect.getsource(py_fn)
        tree = _compat.parse_python(textwrap.dedent(source))
    except (OSError, TypeError, SyntaxError):
        return None
    namespace = dict(getattr(py_fn, "__globals__", {}))
    closure = getattr(py_fn, "__closure__", None) or ()
    for name, cell in zip(getattr(getattr(py_fn, "__code__", None), "co_freevars", ()), closure):
        try:
            namespace[name] = cell.cell_contents
        except ValueError:
            pass
    axes: set[int] = set()
    helpers: list[tuple[Any, dict[str, int]]] = []
    calls = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    for node in ast.walk(tree):
        name = _terminal_name(node)
        if name in _AXIS_FUNCTIONS and id(node) not in calls:
            return None  # program_id used as a value: cannot follow it
        if not isinstance(node, ast.Call):
            continue
        callee = _terminal_name(node.func)
        if callee in _AXIS_FUNCTIONS:
            axis_node = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "axis"), None)
            axis = _constant_int(axis_node, known)
            if axis is None:
                return None
            axes.add(axis)
            continue
        target = _resolve(node.func, namespace)
        if _is_jit_function(target):
            helpers.append((target, _constant_arguments(target, node, known)))
    return axes, helpers


def _constant_arguments(helper: Any, node: ast.Call, known: dict[str, int]) -> dict[str, int]:
    """The helper's parameters that receive integer constants at this call (literals, known names, defaults)."""

    try:
        params = list(inspect.signature(getattr(helper, "fn", helper)).parameters.values())
    except (TypeError, ValueError):
        return {}
    values: dict[str, int] = {}
    for param in params:
        if isinstance(param.default, int) and not isinstance(param.default, bool):
            values[param.name] = param.default
    for param, arg in zip(params, node.args):
        value = _constant_int(arg, known)
        if value is not None:
            values[param.name] = value
        else:
            values.pop(param.name, None)
    for keyword in node.keywords:
        if keyword.arg is None:
            continue
        value = _constant_int(keyword.value, known)
        if value is not None:
            values[keyword.arg] = value
        else:
            values.pop(keyword.arg, None)
    return values


def _terminal_name(node: Any) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _constant_int(node: Any, known: dict[str, int]) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name) and isinstance(known.get(node.id), int):
        return int(known[node.id])
    return None


def _resolve(node: Any, namespace: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        return namespace.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, namespace)
        return getattr(base, node.attr, None) if base is not None else None
    return None


# --------------------------------------------------------------------------------------------------------------
# The generated wrapper kernel.


@dataclasses.dataclass(frozen=True)
class _Wrapper:
    """A generated wrapper kernel, with what lives beside it: its module in ``sys.modules`` and its lines in
    ``linecache`` (released with it)."""

    fn: Any
    module_name: str
    source_name: str


def _release(key: Any, wrapper: _Wrapper) -> None:
    sys.modules.pop(wrapper.module_name, None)
    linecache.cache.pop(wrapper.source_name, None)
    _compat.forget_jit_functions(wrapper.module_name)


#: The generated wrappers, by wrapped kernel (held weakly) and source: bounded and emptied by
#: ``jax.clear_caches()`` (`jt_core.memory`); a wrapper needed again is generated again.
_wrappers: memory.BoundedStore[tuple[Any, str], _Wrapper] = memory.BoundedStore("generated vmap wrappers", _release)
memory.mourn_in(_wrappers)
_wrappers_lock = threading.Lock()
_module_numbers = itertools.count()


def cache_dir() -> Path:
    """Where generated kernel sources are written for reading: the cache root's ``vmap`` folder."""
    return files.cache_folder("vmap")


class _GeneratedModule(importlib.abc.SourceLoader):
    """Loads a generated module from its source in memory; the file it names is only for people to read.

    ``get_source`` serves the same text to ``inspect`` (Triton reads a kernel's source through it), so nothing done
    to the file afterwards (``cache clear`` in another process, a corrupt copy) changes or breaks the module.
    """

    def __init__(self, path: Path, source: str) -> None:
        self.path = str(path)
        self.source = source

    def get_filename(self, fullname: str) -> str:
        return self.path

    def get_data(self, path: str) -> bytes:
        return self.source.encode()


def _source_name(path: Path) -> str:
    """The name a generated module's code is compiled under: its file's path, or, where that path is no valid
    UTF-8 (a home folder named in Latin-1), the path with those bytes escaped: Triton hands the name to MLIR,
    which takes UTF-8 only. The lines are kept in memory under that name, so tracebacks show them all the same."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = os.fsencode(path).decode("utf-8", "backslashreplace")
    return text


def _import_generated(module_name: str, path: Path, source: str, namespace: dict[str, Any]) -> Any:
    """Runs ``source`` as the module ``module_name`` whose file is ``path``, with ``namespace`` bound first."""
    path = Path(_source_name(path))
    loader = _GeneratedModule(path, source)
    spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(namespace)
    # The lines inspect reads, kept without a modification time so that linecache never checks them against the
    # file again (as IPython keeps the source of notebook cells).
    linecache.cache[str(path)] = (len(source), None, source.splitlines(keepends=True), str(path))
    sys.modules[module_name] = module
    loader.exec_module(module)
    return module


def _wrapper_source(base: KernelCall, num_dims: int, axis: int) -> tuple[str, str, list[str]]:
    """The wrapper's source, its function name, and the names of its added constexpr parameters."""
    for param in base.params:
        if param.name.startswith(_PREFIX):
            raise KernelCallValueError(
                f"kernel {base.signature_text()} has a parameter named {param.name!r}; names starting with "
                f"{_PREFIX!r} are reserved by jt's vmap wrapper (use vmap='sequential' or rename it)"
            )
    # The kernel's name may be anything (a function's __name__ can be set to "../x"): the wrapper's name, which is
    # also its file's, keeps only what a Python name and a file name both take.
    name = f"{_PREFIX}vmap_{files.safe_name(kernel_name(base.fn), 60).replace('-', '_')}"
    sizes = [f"{_PREFIX.upper()}B{k}" for k in range(num_dims)]
    pointer_slots = [s for s in base.slots if s.kind in (INPUT, OUTPUT)]
    strides = {s.path: [f"{_PREFIX.upper()}S{n}_{k}" for k in range(num_dims)] for n, s in enumerate(pointer_slots)}
    extra = sizes + [name_ for names in strides.values() for name_ in names]

    def leaf_expr(path: tuple[int, ...]) -> str:
        base_name = base.params[path[0]].name
        text = base_name + "".join(f"[{i}]" for i in path[1:])
        if path not in strides:
            return text
        offset = " + ".join(f"{_PREFIX}i{k} * {s}" for k, s in enumerate(strides[path]))
        return f"({text} + ({offset}))"

    slots_by_param: dict[int, list[Any]] = {}
    for slot in base.slots:
        slots_by_param.setdefault(slot.path[0], []).append(slot)
    trees = dict(base.param_trees)
    arguments = []
    for param in base.params:
        if param.is_constexpr:
            arguments.append(param.name)
            continue
        tree = trees[param.index]
        leaves = [leaf_expr(s.path) for s in slots_by_param[param.index]]
        arguments.append(leaves[0] if tree is None else _tuple_text(tree_util.tree_unflatten(tree, leaves)))

    params = [f"{p.name}: tl.constexpr" if p.is_constexpr else p.name for p in base.params]
    params += [f"{n}: tl.constexpr" for n in extra]
    lines = [
        "# Generated by jt (jt_core.batching): runs the wrapped kernel once per batch element, the batch index",
        f"# being read from grid axis {axis}.",
        "import triton",
        "import triton.language as tl",
        "",
        "",
        "@triton.jit",
        f"def {name}({', '.join(params)}):",
        f"    {_PREFIX}flat = tl.program_id({axis}).to(tl.int64)",
    ]
    for k in reversed(range(num_dims)):
        if k == 0:
            lines.append(f"    {_PREFIX}i0 = {_PREFIX}flat")
        else:
            lines.append(f"    {_PREFIX}i{k} = {_PREFIX}flat % {sizes[k]}")
            lines.append(f"    {_PREFIX}flat = {_PREFIX}flat // {sizes[k]}")
    lines.append(f"    {_PREFIX}kernel({', '.join(arguments)})")
    return "\n".join(lines) + "\n", name, extra


def _tuple_text(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_tuple_text(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return str(value)


def wrapper_kernel(base: KernelCall, num_dims: int, axis: int) -> tuple[Any, list[str]]:
    """The ``@triton.jit`` wrapper batching ``base`` over ``num_dims`` dimensions on grid ``axis`` (cached).

    The module is run from its source in memory (`_GeneratedModule`); the source is also written
    (atomically) to a file in `cache_dir`, named by its digest, for tracebacks and people to read: a file
    there that differs from it (corrupt, truncated, a folder) is replaced, and one that cannot be written is
    reported once and changes nothing. The user's kernel is bound to the module's ``_jt_kernel`` global.

    Returns:
        The wrapper ``JITFunction`` and the names of its added constexpr parameters (batch sizes, then strides).
    """
    source, name, extra = _wrapper_source(base, num_dims, axis)
    key = (memory.kernel_key(base.fn), source)
    with _wrappers_lock:
        cached = _wrappers.get(key)
        if cached is not None:
            return cached.fn, extra
        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        file_name = f"{name}_{digest}.py"
        path = files.entry_path("vmap", file_name)
        if path is None:
            path = Path("<jt vmap>") / file_name  # no folder: inspect reads the lines kept in memory all the same
        elif files.read_file(path) != source.encode():
            files.write_file(path, source.encode())
        module_name = f"jt_vmap_kernels.{name}_{digest}_{next(_module_numbers)}"
        module = _import_generated(module_name, path, source, {f"{_PREFIX}kernel": base.fn})
        wrapper = getattr(module, name)
        _wrappers.setdefault(key, _Wrapper(wrapper, module_name, module.__file__ or ""))
        return wrapper, extra


# --------------------------------------------------------------------------------------------------------------
# The batched call.


def grid_axis(base: KernelCall) -> tuple[int | None, str]:
    """The grid axis the grid strategy can use for ``base``, or ``None`` and the reason it cannot."""
    if base.dialect.name != "triton":
        return None, f"it is a {base.dialect.name} kernel; the batch wrapper is a plain @triton.jit kernel"
    described = [slot.name for slot in base.slots if slot.descriptor is not None]
    if described:
        return None, f"arguments {described} are tensor descriptors, whose shape is that of one batch element"
    read: set[int] = set()
    for config in base.configs:
        axes = program_axes_read(base.fn, config.constexpr_dict)
        if axes is None:
            return None, (
                "its source (or a helper's) reads tl.program_id/tl.num_programs with an axis that is not a "
                "constant, or uses them as values"
            )
        read |= axes
    grids = sorted({c.grid for c in base.configs})
    for axis in _AXIS_ORDER:
        if axis not in read and all(c.grid[axis] == 1 for c in base.configs):
            return axis, ""
    return None, (
        f"no grid axis is free: the grid is {grids[0] if len(grids) == 1 else grids} and the kernel reads "
        f"program_id/num_programs of axes {sorted(read)}; the grid strategy needs an axis of size 1 that the "
        "kernel never reads"
    )


def batched_call(base: KernelCall, info: BatchInfo) -> KernelCall:
    """The `KernelCall` running ``base`` over ``info.batch_shape`` through the wrapper kernel."""
    num_dims = len(info.batch_shape)
    wrapper, extra = wrapper_kernel(base, num_dims, info.axis)
    total = math.prod(info.batch_shape)

    def batched_shape(shape: tuple[int, ...], dims: tuple[bool, ...]) -> tuple[int, ...]:
        return tuple(b for b, present in zip(info.batch_shape, dims) if present) + tuple(shape)

    def strides(shape: tuple[int, ...], dims: tuple[bool, ...]) -> list[int]:
        size = math.prod(shape)
        out = []
        for k in range(num_dims):
            inner = math.prod(b for b, present in zip(info.batch_shape[k + 1 :], dims[k + 1 :]) if present)
            out.append(size * inner if dims[k] else 0)
        return out

    all_dims = (True,) * num_dims
    values: list[int] = list(info.batch_shape)
    for slot in base.slots:
        if slot.kind == INPUT:
            values += strides(tuple(base.operand_avals[slot.index].shape), info.operand_dims[slot.index])
        elif slot.kind == OUTPUT:
            values += strides(tuple(base.out_avals[slot.index].shape), all_dims)
    added = tuple((name, value) for name, value in zip(extra, values))
    n = len(base.params)
    params = base.params + tuple(KernelParam(n + i, name, True, False, None, False) for i, name in enumerate(extra))
    configs = []
    for config in base.configs:
        grid = list(config.grid)
        grid[info.axis] = total
        configs.append(
            LaunchConfig(
                constexprs=config.constexprs + added,
                grid=(grid[0], grid[1], grid[2]),
                options=config.options,
                zeroed_outputs=config.zeroed_outputs,
                label=f"{config.label}, vmap batch {info.batch_shape} on grid axis {info.axis}",
            )
        )
    operand_avals = tuple(
        jax.core.ShapedArray(batched_shape(tuple(a.shape), d), a.dtype)
        for a, d in zip(base.operand_avals, info.operand_dims)
    )
    out_avals = tuple(jax.core.ShapedArray(batched_shape(tuple(a.shape), all_dims), a.dtype) for a in base.out_avals)
    cost = base.launch.cost_estimate
    if cost is not None:
        cost = tuple((k, v * total if isinstance(v, (int, float)) else v) for k, v in cost)
    return dataclasses.replace(
        base,
        kernel=wrapper,
        fn=wrapper,
        params=params,
        operand_avals=operand_avals,
        out_avals=out_avals,
        configs=tuple(configs),
        launch=dataclasses.replace(base.launch, cost_estimate=cost),
        batch=info,
    )


def _batch_grid(
    args: Sequence[Any], dims: Sequence[Any], call: KernelCall, size: int, axis: int
) -> tuple[list[Any], list[int]]:
    previous: BatchInfo | None = call.batch
    base = previous.base if previous is not None else call
    old_shape = previous.batch_shape if previous is not None else ()
    old_dims = previous.operand_dims if previous is not None else ((),) * len(args)
    aliased = {op for op, _ in call.aliases}
    operands = []
    operand_dims = []
    for index, (arg, dim) in enumerate(zip(args, dims)):
        if dim is None and index in aliased:
            # The kernel writes through this operand: every batch element needs its own copy.
            arg = jnp.broadcast_to(arg, (size, *arg.shape))
            dim = 0
        if dim is None:
            operands.append(arg)
            operand_dims.append((False, *old_dims[index]))
        else:
            operands.append(jnp.moveaxis(arg, dim, 0))
            operand_dims.append((True, *old_dims[index]))
    info = BatchInfo(base=base, batch_shape=(size, *old_shape), operand_dims=tuple(operand_dims), axis=axis)
    new_call = batched_call(base, info)
    outs = triton_kernel_call_p.bind(*operands, call=new_call)
    return list(outs), [0] * len(outs)


def _batch_sequential(args: Sequence[Any], dims: Sequence[Any], call: KernelCall) -> tuple[list[Any], list[int]]:
    batched = [jnp.moveaxis(a, d, 0) if d is not None else None for a, d in zip(args, dims)]
    fixed = [a if d is None else None for a, d in zip(args, dims)]

    def one(xs: tuple[Any, ...]) -> list[Any]:
        it = iter(xs)
        full = [next(it) if b is not None else f for b, f in zip(batched, fixed)]
        return list(triton_kernel_call_p.bind(*full, call=call))

    outs = jax.lax.map(one, tuple(b for b in batched if b is not None))
    return list(outs), [0] * len(outs)


def batch_kernel_call(args: Sequence[Any], dims: Sequence[Any], *, call: KernelCall) -> tuple[list[Any], list[int]]:
    """The batching rule of ``triton_kernel_call``: picks the call's strategy and applies it.

    Raises:
        KernelCallValueError: With ``vmap="grid"`` on a call the grid strategy cannot batch (says why).
    """
    size = next(int(a.shape[d]) for a, d in zip(args, dims) if d is not None)
    if call.launch.vmap == "sequential":
        return _batch_sequential(args, dims, call)
    if call.batch is not None:
        axis: int | None = call.batch.axis
        reason = ""
        total = size * math.prod(call.batch.batch_shape)
    else:
        axis, reason = grid_axis(call)
        total = size
    if axis is not None and total > AXIS_LIMITS[axis]:
        reason = f"the batch ({total} elements in all) exceeds the launch limit {AXIS_LIMITS[axis]} of grid axis {axis}"
        axis = None
    if axis is None:
        if call.launch.vmap == "grid":
            raise KernelCallValueError(
                f"triton_call {call.name!r} with vmap='grid': the batch cannot become a grid axis because {reason}. "
                "Use vmap='sequential' (one launch per batch element) or vmap='auto'"
            )
        return _batch_sequential(args, dims, call)
    return _batch_grid(args, dims, call, size, axis)


batching.primitive_batchers[triton_kernel_call_p] = batch_kernel_call
