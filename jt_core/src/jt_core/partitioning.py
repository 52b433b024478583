"""Sharding rules: how a kernel call partitions when its operands are sharded under ``jax.jit``.

JAX cannot see inside a Triton kernel, so by default XLA gathers sharded operands and runs the call on whole
arrays on every device. A call whose author declares how it partitions runs once per shard instead, on the local
pieces, with no gather, through ``jax.experimental.custom_partitioning`` (with a Shardy sharding rule):

* `Elementwise`: every array operand and output has the same shape and element ``i`` of each output
  depends only on element ``i`` of the operands: any sharding works.
* `BatchDims`: the listed dimensions of every operand and output are independent batch dimensions (same
  size everywhere): they may be sharded; the other dimensions are replicated (gathered if they arrive sharded).

Declare it on a function making any number of calls (``@jt.partitioned(jt.BatchDims(0))``), which is traced again
for each shard with the local arrays, so grids and sizes derived from shapes are the shard's; or on one call
(``triton_call(..., partition=jt.Elementwise(), grid=lambda meta: ...)``), whose grid callable is evaluated again
with the local shapes while its scalars reach every shard unchanged: an integer scalar that is a global size the
shards do not have is refused, since the kernel would run past its piece.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import tree_util
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

from jt_core import _compat, distributed
from jt_core.call import SCALAR, CallOptions, KernelCall
from jt_core.errors import KernelCallTypeError, KernelCallValueError, UnsupportedKernelError
from jt_core.lowering import agreement
from jt_core.plugin import facade

F = TypeVar("F", bound=Callable[..., Any])
Shape = tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Factors:
    """A partition rule applied to concrete shapes: one factor name per dimension of every array.

    Dimensions that share a factor are sharded alike (they must have the same size); factors listed in
    ``replicated`` are never sharded.

    Attributes:
        operands: Factor names of each operand's dimensions.
        outputs: Factor names of each output's dimensions.
        replicated: Factors that must not be sharded.
    """

    operands: tuple[tuple[str, ...], ...]
    outputs: tuple[tuple[str, ...], ...]
    replicated: frozenset[str]

    def einsum(self) -> str:
        """The Shardy sharding rule in JAX's einsum-like notation (``"i j, i j -> i j"``)."""
        ins = ", ".join(" ".join(f) for f in self.operands)
        outs = ", ".join(" ".join(f) for f in self.outputs)
        return f"{ins} -> {outs}"


class PartitionRule(ABC):
    """How a call partitions: subclasses name a factor for each dimension of each operand and output."""

    @abstractmethod
    def factors(self, operand_shapes: Sequence[Shape], output_shapes: Sequence[Shape]) -> Factors:
        """The factors of every dimension.

        Raises:
            KernelCallValueError: When the shapes do not fit the rule (the message shows them).
        """


@dataclasses.dataclass(frozen=True)
class Elementwise(PartitionRule):
    """Every array operand and output has one shape, and output element ``i`` reads only operand elements ``i``.

    Zero-dimensional operands (scalars held in arrays) are broadcast to every shard.
    """

    def factors(self, operand_shapes: Sequence[Shape], output_shapes: Sequence[Shape]) -> Factors:
        shape = tuple(output_shapes[0])
        for kind, shapes in (("operand", operand_shapes), ("output", output_shapes)):
            for i, s in enumerate(shapes):
                if tuple(s) != shape and len(s) != 0:
                    raise KernelCallValueError(
                        f"partition=Elementwise() needs every array operand and output to have one shape; {kind} "
                        f"{i} has shape {tuple(s)}, output 0 has {shape} (operands: "
                        f"{[tuple(x) for x in operand_shapes]}, outputs: {[tuple(x) for x in output_shapes]}). "
                        "Use BatchDims(...) for arrays that "
                        "only share some dimensions"
                    )
        dims = tuple(f"d{k}" for k in range(len(shape)))
        return Factors(
            operands=tuple(dims if len(s) else () for s in operand_shapes),
            outputs=tuple(dims for _ in output_shapes),
            replicated=frozenset(),
        )


@dataclasses.dataclass(frozen=True)
class BatchDims(PartitionRule):
    """The given dimensions of every array operand and output are independent batch dimensions.

    ``BatchDims(0)``: row ``b`` of each output depends only on row ``b`` of each operand. Negative dimensions
    count from the end. The batch dimensions may be sharded; every other dimension is replicated.
    ``BatchDims(0, whole=(1,))``: array operand 1 (a norm's weight, a table every row reads) has no batch
    dimension and every shard receives it whole; zero-dimensional operands always are.
    """

    dims: tuple[int, ...]
    whole: frozenset[int]

    def __init__(self, *dims: int, whole: Sequence[int] = ()) -> None:
        if not dims or any(isinstance(d, bool) or not isinstance(d, int) for d in dims):
            raise KernelCallTypeError(f"BatchDims takes one or more dimension indices (ints), got {dims!r}")
        if isinstance(whole, int) or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in whole):
            raise KernelCallTypeError(
                f"BatchDims(whole=...) takes the positions of array operands as a tuple of ints >= 0, got {whole!r}"
            )
        object.__setattr__(self, "dims", tuple(dims))
        object.__setattr__(self, "whole", frozenset(whole))

    def __repr__(self) -> str:
        whole = f", whole={tuple(sorted(self.whole))}" if self.whole else ""
        return f"BatchDims({', '.join(map(str, self.dims))}{whole})"

    def factors(self, operand_shapes: Sequence[Shape], output_shapes: Sequence[Shape]) -> Factors:
        sizes: dict[int, int] = {}
        replicated: set[str] = set()
        past = sorted(i for i in self.whole if i >= len(operand_shapes))
        if past:
            raise KernelCallValueError(
                f"partition={self!r} names operand {past[0]} whole, but the call has {len(operand_shapes)} array "
                "operands (counted from 0, in the order given)"
            )

        def one(kind: str, index: int, shape: Shape) -> tuple[str, ...]:
            rank = len(shape)
            if kind == "operand" and (index in self.whole or rank == 0):
                replicated.update(f"o{index}_{axis}" for axis in range(rank))
                return tuple(f"o{index}_{axis}" for axis in range(rank))
            hint = f" (name it in whole=(..., {index}) if every shard takes it whole)" if kind == "operand" else ""
            batch = {}
            for k, d in enumerate(self.dims):
                axis = d + rank if d < 0 else d
                if not 0 <= axis < rank:
                    raise KernelCallValueError(
                        f"partition={self!r}: {kind} {index} has shape {tuple(shape)}, which has no dimension {d}{hint}"
                    )
                if axis in batch:
                    raise KernelCallValueError(f"partition={self!r} names dimension {axis} twice")
                batch[axis] = k
                if sizes.setdefault(k, shape[axis]) != shape[axis]:
                    raise KernelCallValueError(
                        f"partition={self!r}: batch dimension {d} has size {shape[axis]} in {kind} "
                        f"{index} (shape {tuple(shape)}) but {sizes[k]} elsewhere; batch dimensions must match{hint}"
                    )
            names = []
            for axis in range(rank):
                if axis in batch:
                    names.append(f"b{batch[axis]}")
                else:
                    name = f"{kind[0]}{index}_{axis}"
                    replicated.add(name)
                    names.append(name)
            return tuple(names)

        operands = tuple(one("operand", i, tuple(s)) for i, s in enumerate(operand_shapes))
        outputs = tuple(one("output", i, tuple(s)) for i, s in enumerate(output_shapes))
        return Factors(operands, outputs, frozenset(replicated))


# --------------------------------------------------------------------------------------------------------------
# Choosing shardings and wiring custom_partitioning.


def _spec_axes(sharding: Any, rank: int) -> list[tuple[str, ...]]:
    """Mesh axes sharding each dimension (empty tuples for unsharded ones or non-named shardings)."""
    spec = getattr(sharding, "spec", None)
    out: list[tuple[str, ...]] = [() for _ in range(rank)]
    if spec is None:
        return out
    for k, entry in enumerate(tuple(spec)[:rank]):
        if entry is None or not isinstance(entry, (str, tuple)):
            continue
        out[k] = (entry,) if isinstance(entry, str) else tuple(e for e in entry if isinstance(e, str))
    return out


def choose_shardings(
    factors: Factors, mesh: Any, operands: Sequence[Any], outputs: Sequence[Shape]
) -> tuple[list[Any], list[Any]]:
    """Consistent shardings of the operands and outputs: each factor takes the mesh axes the first operand
    sharding one of its dimensions uses, unless the factor must be replicated or a size does not divide.

    Args:
        factors: The rule applied to the shapes.
        mesh: The mesh.
        operands: The operands' shapes with their current ``sharding``.
        outputs: The outputs' shapes.

    Returns:
        ``NamedSharding``s for the operands and for the outputs.
    """
    chosen: dict[str, tuple[str, ...]] = {}
    used: set[str] = set()
    shapes = [tuple(o.shape) for o in operands] + [tuple(s) for s in outputs]
    all_factors = list(factors.operands) + list(factors.outputs)
    for op, names in zip(operands, factors.operands):
        for name, axes in zip(names, _spec_axes(getattr(op, "sharding", None), len(names))):
            if not axes or name in chosen or name in factors.replicated or used & set(axes):
                continue
            size = math.prod(mesh.shape[a] for a in axes)
            dims = [shape[k] for shape, fs in zip(shapes, all_factors) for k, f in enumerate(fs) if f == name]
            if all(d % size == 0 for d in dims):
                chosen[name] = axes
                used |= set(axes)

    def sharding(names: Sequence[str]) -> Any:
        entries = [
            None if name not in chosen else (chosen[name] if len(chosen[name]) > 1 else chosen[name][0])
            for name in names
        ]
        return NamedSharding(mesh, PartitionSpec(*entries))

    return [sharding(n) for n in factors.operands], [sharding(n) for n in factors.outputs]


@dataclasses.dataclass(frozen=True)
class ShardShapes:
    """The global and per-shard shapes of a partitioned computation's operands and outputs.

    Attributes:
        operands: Each operand's global shape.
        local_operands: Each operand's shape on one shard.
        outputs: Each output's global shape.
        local_outputs: Each output's shape on one shard.
    """

    operands: tuple[Shape, ...]
    local_operands: tuple[Shape, ...]
    outputs: tuple[Shape, ...]
    local_outputs: tuple[Shape, ...]


#: Looks at the calls of a shard's computation before it is compiled: ``check(calls, shapes)`` raises for what
#: cannot be partitioned.
ShardCheck = Callable[[Sequence[KernelCall], ShardShapes], None]


def _apply(
    rule: PartitionRule,
    body_for: Callable[[Sequence[Any] | None], Callable[..., tuple[Any, ...]]],
    arrays: Sequence[Any],
    out_shapes: Sequence[Any],
    check: ShardCheck | None = None,
) -> tuple[Any, ...]:
    """Runs ``body_for(None)(*arrays)`` under ``custom_partitioning`` with ``rule``.

    ``body_for(local_out_shapes)`` returns the computation for one shard, given the shard's output shapes;
    ``check`` looks at its calls first.
    """
    factors = rule.factors([tuple(a.shape) for a in arrays], [tuple(s.shape) for s in out_shapes])
    mesh = _explicit_mesh()
    if mesh is not None:
        return _shard_mapped(factors, mesh, body_for, arrays, out_shapes, check)

    def infer(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
        _, out_shardings = choose_shardings(factors, mesh, arg_shapes, [r.shape for r in result_shape])
        return tuple(out_shardings)

    def partition(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
        in_shardings, out_shardings = choose_shardings(factors, mesh, arg_shapes, [r.shape for r in result_shape])
        local = [
            jax.ShapeDtypeStruct(s.shard_shape(tuple(r.shape)), r.dtype) for s, r in zip(out_shardings, result_shape)
        ]
        body = body_for(local)
        on_cpu = any(d.platform == "cpu" for d in mesh.devices.flat)
        if on_cpu or check is not None:
            local_args = [
                jax.ShapeDtypeStruct(s.shard_shape(tuple(a.shape)), a.dtype) for s, a in zip(in_shardings, arg_shapes)
            ]
            equations = list(_equations(jax.make_jaxpr(body)(*local_args).jaxpr))
            if check is not None:
                shapes = ShardShapes(
                    tuple(tuple(a.shape) for a in arg_shapes),
                    tuple(tuple(a.shape) for a in local_args),
                    tuple(tuple(r.shape) for r in result_shape),
                    tuple(tuple(r.shape) for r in local),
                )
                check([eqn.params["call"] for eqn in equations if eqn.primitive.name == "triton_kernel_call"], shapes)
            if on_cpu:
                _refuse_host_callbacks(equations, mesh)
        return mesh, body, tuple(out_shardings), tuple(in_shardings)

    function = custom_partitioning(body_for(None))
    function.def_partition(
        partition=partition,
        infer_sharding_from_operands=infer,
        sharding_rule=factors.einsum(),
        need_replication_factors=tuple(sorted(factors.replicated)),
    )
    return tuple(function(*arrays))


def _explicit_mesh() -> Any | None:
    """The mesh of the context (``jax.set_mesh``) where its axes are explicit (JAX's explicit sharding: an array's
    type carries its sharding): the call is then split over it with ``jax.shard_map``, which ``jax.export``
    serializes, where ``custom_partitioning`` holds a host callback it cannot. ``None`` otherwise. The mesh is the
    concrete one, whose devices the lowering needs to compare the processes of a ``jax.distributed`` job."""
    mesh = _compat.concrete_mesh()
    if mesh is None or not all(_compat.is_explicit_axis(t) for t in getattr(mesh, "axis_types", ())):
        return None
    return mesh


def _shard_mapped(
    factors: Factors,
    mesh: Any,
    body_for: Callable[[Sequence[Any] | None], Callable[..., tuple[Any, ...]]],
    arrays: Sequence[Any],
    out_shapes: Sequence[Any],
    check: ShardCheck | None,
) -> tuple[Any, ...]:
    """The call split over an explicit mesh with ``jax.shard_map``, its operands and outputs sharded as the rule
    chooses from the operands' own shardings (`choose_shardings`)."""
    typed = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=_compat.typeof(a).sharding) for a in arrays]
    in_shardings, out_shardings = choose_shardings(factors, mesh, typed, [tuple(s.shape) for s in out_shapes])
    local_args = [jax.ShapeDtypeStruct(_local(s.spec, a.shape, mesh), a.dtype) for s, a in zip(in_shardings, arrays)]
    local = [jax.ShapeDtypeStruct(_local(s.spec, r.shape, mesh), r.dtype) for s, r in zip(out_shardings, out_shapes)]
    body = body_for(local)
    if check is not None:
        equations = list(_equations(jax.make_jaxpr(body)(*local_args).jaxpr))
        shapes = ShardShapes(
            tuple(tuple(a.shape) for a in arrays),
            tuple(tuple(a.shape) for a in local_args),
            tuple(tuple(r.shape) for r in out_shapes),
            tuple(tuple(r.shape) for r in local),
        )
        check([eqn.params["call"] for eqn in equations if eqn.primitive.name == "triton_kernel_call"], shapes)
    moved = [_compat.reshard(a, s) for a, s in zip(arrays, in_shardings)]
    split = jax.shard_map(
        body, mesh=mesh, in_specs=tuple(s.spec for s in in_shardings), out_specs=tuple(s.spec for s in out_shardings)
    )
    return tuple(split(*moved))


def _local(spec: Any, shape: Sequence[int], mesh: Any) -> Shape:
    """A global shape's shard under ``spec`` on ``mesh``."""
    local = list(shape)
    for axis, entry in enumerate(tuple(spec)[: len(shape)]):
        names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        for name in names:
            local[axis] //= mesh.shape[name]
    return tuple(local)


def _refuse_host_callbacks(equations: Sequence[Any], mesh: Any) -> None:
    """Raises instead of crashing when a per-shard body would run something through a host callback (CPU).

    JAX drops the host callbacks of a ``custom_partitioning`` body (they live in a temporary module), so the
    executable would call a callback that no longer exists. Kernels lowered by a CPU launcher that answers ``False``
    to `runs_through_host_callback` (such as the ``ffi`` launcher) run fine; one
    set aside for raising when asked counts as using them. In a multi-process job the processes compare their
    launchers first, so that one whose launcher differs (a host without a C++ compiler) fails on every process,
    naming itself, instead of on its own.
    """
    for eqn in equations:
        name = eqn.primitive.name
        if name == "triton_kernel_call":
            call = eqn.params["call"]
            launcher = facade.launcher_for("cpu", call.launch.launcher)
            needed = facade.requested("cpu", launcher, call.launch.launcher)
            if facade.ask(launcher, "runs_through_host_callback", otherwise=True, needed=needed, call=call):
                job = distributed.job_of(tuple(mesh.devices.flat))
                if job is not None:
                    exchange = distributed.Exchange(job, distributed.call_digest(call), f"triton_call {call.name!r}")
                    agreement.agree_on_lowering(exchange, call, "cpu", launcher)
                raise UnsupportedKernelError(
                    f"a partitioned triton_call ({call.name!r}, partition= / @jt.partitioned) cannot run on the "
                    f"CPU backend across several devices with launcher {launcher.name!r}: it runs kernels through a "
                    "JAX host callback, and JAX does not keep host callbacks made inside custom_partitioning "
                    "alive. Use the 'ffi' CPU launcher (launcher='ffi' or JT_LAUNCHER_CPU=ffi; it needs a C++ "
                    "compiler), jax.shard_map on the CPU (it runs the call per shard the same way), or GPUs"
                )
        elif "callback" in name:
            raise UnsupportedKernelError(
                f"a partitioned function (partition= / @jt.partitioned) calls a JAX host callback ({name}) and "
                "cannot run on the CPU backend across several devices: JAX does not keep host callbacks made "
                "inside custom_partitioning alive. Use jax.shard_map on the CPU instead"
            )


def _refuse_global_sizes(rule: PartitionRule) -> ShardCheck:
    """The check of a ``triton_call(..., partition=rule)``: an integer scalar equal to a global size (an array's
    element count or the length of a sharded dimension) that differs on a shard is almost surely meant to be the
    shard's size, which it is not: scalars reach every shard unchanged, so the kernel would read past its piece.
    A value that is also a size on the shard (the length of an unsharded dimension, say) is left alone."""

    def check(calls: Sequence[KernelCall], shapes: ShardShapes) -> None:
        sizes: dict[int, tuple[str, int]] = {}
        arrays = [("operand", i, g, loc) for i, (g, loc) in enumerate(zip(shapes.operands, shapes.local_operands))]
        arrays += [("output", i, g, loc) for i, (g, loc) in enumerate(zip(shapes.outputs, shapes.local_outputs))]
        local_sizes = {math.prod(local) for *_, local in arrays} | {d for *_, local in arrays for d in local}
        for kind, index, shape, local in arrays:
            what = f"{kind} {index} (global shape {shape}, shape {local} on each shard)"
            if math.prod(shape) != math.prod(local):
                sizes.setdefault(math.prod(shape), (f"the global element count of {what}", math.prod(local)))
            for axis, (whole, piece) in enumerate(zip(shape, local)):
                if whole != piece:
                    sizes.setdefault(whole, (f"the global length of dimension {axis} of {what}", piece))
        for call in calls:
            for slot in call.slots:
                value = slot.value
                if slot.kind != SCALAR or isinstance(value, (bool, np.bool_)):
                    continue
                if not isinstance(value, (int, np.integer)) or int(value) not in sizes or int(value) in local_sizes:
                    continue
                meaning, local_size = sizes[int(value)]
                raise KernelCallValueError(
                    f"triton_call {call.name!r} with partition={rule!r}: scalar argument {slot.name!r} is "
                    f"{int(value)}, {meaning}, but each shard's kernel only sees its local piece (where that size "
                    f"is {local_size}): scalars reach every shard unchanged, so the kernel would run past its "
                    "piece. Give sizes that follow the shards: make the call inside a function decorated with "
                    "@jt.partitioned(...) (its x.size and x.shape are then the shard's), or derive them in the grid "
                    "callable from operands given by keyword. A value that is meant to be global can be passed as "
                    "a 0-d array operand, which every shard receives whole"
                )

    return check


def _equations(jaxpr: Any) -> Any:
    """Every equation of a jaxpr, those of nested jaxprs (``jit``, control flow, custom rules) included."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for item in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(item, "jaxpr", item)
                if hasattr(inner, "eqns"):
                    yield from _equations(inner)


def _is_operand(leaf: Any) -> bool:
    if isinstance(leaf, (bool, int, float, complex, np.generic, str, bytes)) or leaf is None:
        return False
    return hasattr(leaf, "shape") and hasattr(leaf, "dtype")


def _split(tree: Any) -> tuple[list[Any], list[int], Any, list[Any]]:
    leaves, treedef = tree_util.tree_flatten(tree)
    positions = [i for i, leaf in enumerate(leaves) if _is_operand(leaf)]
    arrays = [jnp.asarray(leaves[i]) for i in positions]
    return leaves, positions, treedef, arrays


def partitioned(rule: PartitionRule) -> Callable[[F], F]:
    """Declares how a function of arrays partitions; under ``jax.jit`` it then runs per shard with no gather.

    The function is traced once more for each distinct shard shape, with the local arrays, so any
    ``triton_call`` inside it (its grid, sizes passed as scalars) sees the shard's shapes. Array arguments
    (positional or keyword, in pytrees) are the operands; other values are passed unchanged to every shard.
    The function must not close over arrays (pass them as arguments).

    Args:
        rule: `Elementwise`, `BatchDims` or another `PartitionRule`.

    Returns:
        A decorator.
    """
    if not isinstance(rule, PartitionRule):
        raise KernelCallTypeError(f"partitioned() takes a PartitionRule such as jt.Elementwise(), got {rule!r}")

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            leaves, positions, treedef, arrays = _split((args, kwargs))
            out_tree: list[Any] = []

            def body_for(local_out: Sequence[Any] | None) -> Callable[..., tuple[Any, ...]]:
                def body(*local_arrays: Any) -> tuple[Any, ...]:
                    full = list(leaves)
                    for i, a in zip(positions, local_arrays):
                        full[i] = a
                    a, k = tree_util.tree_unflatten(treedef, full)
                    flat, tree = tree_util.tree_flatten(fn(*a, **k))
                    out_tree[:] = [tree]
                    return tuple(flat)

                return body

            # Traced on unsharded values: under explicit sharding the operands' own types could clash (a weight
            # sharded like the rows), which the split resolves by resharding them first.
            unsharded = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays]
            closed, out_shapes = jax.make_jaxpr(body_for(None), return_shape=True)(*unsharded)
            _refuse_closures(fn, closed.consts)
            flat = _apply(rule, body_for, arrays, out_shapes)
            return tree_util.tree_unflatten(out_tree[0], flat)

        return wrapper  # type: ignore[return-value]

    return decorate


def _refuse_closures(fn: Any, consts: Sequence[Any]) -> None:
    """Raises where the function given to `partitioned` closes over arrays: each shard would need them whole,
    and neither ``custom_partitioning`` nor ``jax.shard_map`` over explicit axes can pass them on."""
    if not consts:
        return
    shapes = ", ".join(f"{jnp.dtype(c.dtype).name}{list(np.shape(c))}" for c in consts[:4])
    raise KernelCallValueError(
        f"@jt.partitioned function {getattr(fn, '__qualname__', fn)!r} closes over {len(consts)} array(s) "
        f"({shapes}{', ...' if len(consts) > 4 else ''}): pass them as arguments of the function instead; with "
        "BatchDims, name an array every shard takes whole in whole=(its position among the array arguments,)"
    )


#: Runs one ``triton_call``: ``run(args, metaparams, options)``.
CallRunner = Callable[[Sequence[Any], Mapping[str, Any], CallOptions], Any]


def partitioned_triton_call(
    rule: Any, run: CallRunner, args: Sequence[Any], metaparams: Mapping[str, Any], options: CallOptions
) -> Any:
    """``triton_call(*args, partition=rule, **metaparams)``: the call run per shard with the local shapes.

    Args:
        rule: The partition rule.
        run: Runs the call on (local) operands; ``triton_call`` passes its own unpartitioned path.
        args: The positional operands.
        metaparams: The keyword operands and metaparameters.
        options: The call's options; each shard's call gets the shard's output shapes.

    Raises:
        KernelCallTypeError: For a ``partition=`` that is not a rule.
        KernelCallValueError: For a grid that is not a callable (it could not follow the shard shapes).
    """
    if not isinstance(rule, PartitionRule):
        raise KernelCallTypeError(
            f"partition= takes a PartitionRule such as jt.Elementwise() or jt.BatchDims(0), got {rule!r}"
        )
    if not callable(options.grid):
        raise KernelCallValueError(
            f"triton_call with partition= needs grid= as a callable of the metaparameters (got "
            f"{options.grid!r}): each shard is launched on its local shapes, so the grid is computed again "
            "for them (operands given by keyword appear in the metaparameters with their local shapes). "
            "Scalars are passed to every shard unchanged; for sizes derived from shapes, wrap the call in a "
            "function decorated with @jt.partitioned(...) instead"
        )
    out_leaves, out_tree = tree_util.tree_flatten(options.out_spec, is_leaf=lambda x: hasattr(x, "shape"))
    out_shapes = [jax.ShapeDtypeStruct(tuple(o.shape), o.dtype) for o in out_leaves]
    leaves, positions, treedef, arrays = _split((tuple(args), dict(metaparams)))

    def body_for(local_out: Sequence[Any] | None) -> Callable[..., tuple[Any, ...]]:
        spec = tree_util.tree_unflatten(out_tree, list(local_out if local_out is not None else out_shapes))
        local_options = dataclasses.replace(options, out_spec=spec)

        def body(*local_arrays: Any) -> tuple[Any, ...]:
            full = list(leaves)
            for i, a in zip(positions, local_arrays):
                full[i] = a
            a, k = tree_util.tree_unflatten(treedef, full)
            return tuple(tree_util.tree_leaves(run(a, k, local_options)))

        return body

    flat = _apply(rule, body_for, arrays, out_shapes, _refuse_global_sizes(rule))
    return tree_util.tree_unflatten(out_tree, list(flat))
