"""Binding a ``triton_call`` to the kernel's parameters: calling conventions, operands, outputs and scalars.

`bind_call` turns the user's arguments and `CallOptions` into a
`KernelCall` (see `jt_core.call`), with the configurations expanded by
`jt_core.configs`.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax import tree_util

from jt_core import _compat, frontend
from jt_core.call import (
    CLASSIC,
    CURRENT,
    INPUT,
    OUTPUT,
    SCALAR,
    CallOptions,
    KernelCall,
    KernelParam,
    ParamSlot,
    kernel_name,
    kernel_params,
    kernel_signature_text,
)
from jt_core.configs import KernelWrappers, expand_configs
from jt_core.conventions import assign_arguments
from jt_core.dtypes import int_type, triton_scalar_type
from jt_core.errors import KernelCallTypeError, KernelCallValueError, short_repr
from jt_core.plugin.roles import Dialect, invoke
from jt_core.probes import refuse_float_sizes, refuse_needed_nones, refuse_traced_scalars
from jt_core.tensordesc import TensorDescriptor

__all__ = ["BoundCall", "bind_call"]

_FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclasses.dataclass(frozen=True)
class BoundCall:
    """What binding a call produces.

    Attributes:
        call: The static description the primitive carries.
        operands: The array operands, in `KernelCall.operand_avals` order.
        refs: ``(operand index, Ref)`` pairs: the Refs to write back after the call.
        out_tree: The pytree structure of the user's outputs.
    """

    call: KernelCall
    operands: list[Any]
    refs: list[tuple[int, Any]]
    out_tree: Any


@dataclasses.dataclass
class _Bound:
    """Intermediate state while binding."""

    operands: list[Any] = dataclasses.field(default_factory=list)
    operand_avals: list[Any] = dataclasses.field(default_factory=list)
    refs: list[tuple[int, Any]] = dataclasses.field(default_factory=list)  # (operand index, ref)
    leaf_to_operand: dict[int, int] = dataclasses.field(default_factory=dict)  # flat leaf index -> operand index
    leaf_names: list[str] = dataclasses.field(default_factory=list)


def bind_call(
    kernel: Any,
    wrappers: KernelWrappers,
    dialect: Dialect,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    options: CallOptions,
) -> BoundCall:
    """Binds a call to its kernel.

    Args:
        kernel: The object the user passed (kept in the call).
        wrappers: What `jt_core.configs.unwrap_kernel` read from it.
        dialect: The dialect that claims ``wrappers.fn``.
        args: The positional operands.
        kwargs: The keyword arguments: operands by parameter name, and metaparameters.
        options: The call's options.

    Raises:
        KernelCallTypeError, KernelCallValueError: For every mismatch, naming the argument.
    """
    fn = wrappers.fn
    frontend.settle_source_key(fn)
    params = kernel_params(fn)
    call_name = str(options.name or kernel_name(fn))
    signature = kernel_signature_text(params, kernel_name(fn))

    # Outputs.
    flat_outs, out_tree = tree_util.tree_flatten(options.out_spec, is_leaf=lambda x: hasattr(x, "shape"))
    out_structs = [_to_shape_dtype(o, f"out_shape[{i}]") for i, o in enumerate(flat_outs)]
    aliases_in = dict(options.input_output_aliases or {})
    n_out = len(out_structs)

    # Arguments to parameters (keywords, the two readings of positional values, the convention).
    assignment = assign_arguments(params, signature, args, kwargs, out_structs, list(aliases_in.values()))
    given = assignment.operands
    user_meta = assignment.metaparams
    convention = assignment.convention
    missing = list(assignment.outputs)
    nonconstexpr = [p for p in params if not p.is_constexpr]
    has_refs = any(
        _compat.is_ref(leaf) for v in given.values() for leaf in tree_util.tree_leaves(v, is_leaf=_compat.is_ref)
    )
    if not out_structs and not has_refs:
        raise KernelCallValueError(
            "out_shape/out_type describes no outputs and no operand is a Ref (jax.new_ref): the call could have "
            "no effect"
        )
    if has_refs and aliases_in:
        raise KernelCallValueError(
            "input_output_aliases cannot be combined with Ref operands (jax.new_ref): a Ref is already updated "
            "in place; drop input_output_aliases or pass plain arrays"
        )

    outputs_for_params = list(range(n_out))
    if convention == CURRENT:
        aliased_outs = set(aliases_in.values())
        outputs_for_params = [o for o in range(n_out) if o not in aliased_outs]
    out_param_of = {p.name: o for p, o in zip(missing, outputs_for_params)}
    _refuse_crossed_output_names(options.out_spec, out_param_of)

    # Slots, operands, scalars.
    bound = _Bound()
    slots: list[ParamSlot] = []
    trees: list[tuple[int, Any]] = []
    leaf_index = 0
    for param in nonconstexpr:
        if param.name in out_param_of:
            out = out_param_of[param.name]
            slots.append(
                ParamSlot(
                    (param.index,),
                    param.name,
                    OUTPUT,
                    out,
                    None,
                    "*" + triton_scalar_type(out_structs[out].dtype, f"out_shape[{out}]"),
                    True,
                )
            )
            trees.append((param.index, None))
            continue
        value = given[param.name]
        if _compat.is_transformed_ref(value):
            raise KernelCallTypeError(
                f"argument {param.name!r} is a sliced/transformed Ref; pass the whole Ref (jax.new_ref(...))"
            )
        if isinstance(value, tuple) and not hasattr(value, "shape"):
            leaves, treedef = tree_util.tree_flatten(value, is_leaf=_is_tuple_leaf)
            paths = [(param.index, i) for i in range(len(leaves))]
            names = [f"{param.name}[{i}]" for i in range(len(leaves))]
            trees.append((param.index, treedef))
        else:
            leaves, paths, names = [value], [(param.index,)], [param.name]  # type: ignore[list-item]
            trees.append((param.index, None))
        for leaf, path, leaf_name in zip(leaves, paths, names):
            bound.leaf_names.append(leaf_name)
            if isinstance(leaf, TensorDescriptor):
                _refuse_narrowed(leaf.base, f"{leaf_name}.base", signature)
                spec = leaf.spec(leaf_name)
                operand_index = len(bound.operands)
                bound.operands.append(leaf.base)
                bound.operand_avals.append(jax.core.ShapedArray(tuple(leaf.base.shape), spec.dtype))
                bound.leaf_to_operand[leaf_index] = operand_index
                slots.append(ParamSlot(path, leaf_name, INPUT, operand_index, None, spec.type_str, False, spec))
            elif _compat.is_ref(leaf):
                aval = jax.typeof(leaf)
                inner = getattr(aval, "inner_aval", aval)
                triton_scalar_type(inner.dtype, what=f"Ref argument {leaf_name!r}")
                operand_index = len(bound.operands)
                bound.refs.append((operand_index, leaf))
                bound.operands.append(leaf[...])
                bound.operand_avals.append(jax.core.ShapedArray(inner.shape, inner.dtype))
                bound.leaf_to_operand[leaf_index] = operand_index
                slots.append(ParamSlot(path, leaf_name, INPUT, operand_index, None, "*" + _ptr(inner.dtype), True))
            elif _is_array(leaf):
                if np.dtype(leaf.dtype).kind == "c":
                    raise KernelCallTypeError(
                        f"argument {leaf_name!r} has dtype {leaf.dtype}; Triton kernels take no complex arrays"
                    )
                type_str = "*" + triton_scalar_type(leaf.dtype, what=f"argument {leaf_name!r}")
                _refuse_narrowed(leaf, leaf_name, signature)
                operand_index = len(bound.operands)
                bound.operands.append(leaf)
                bound.operand_avals.append(jax.core.ShapedArray(tuple(leaf.shape), leaf.dtype))
                bound.leaf_to_operand[leaf_index] = operand_index
                slots.append(ParamSlot(path, leaf_name, INPUT, operand_index, None, type_str, True))
            elif _is_scalar(leaf):
                slots.append(_scalar_slot(path, leaf_name, leaf, param))
            elif leaf is None:
                # As Triton does: None specialises the parameter as a constant, which `is None` tests and
                # heuristics see, and the kernel takes no argument for it.
                slots.append(ParamSlot(path, leaf_name, SCALAR, -1, None, "constexpr", False))
            else:
                raise KernelCallTypeError(
                    f"argument {leaf_name!r} of kernel {signature} is {type(leaf).__name__} ({short_repr(leaf)}); "
                    "expected an array, a Ref, a jt.TensorDescriptor, a bool/int/float/NumPy scalar or None"
                )
            leaf_index += 1
    _check_descriptor_layouts(dialect, fn, slots)
    _refuse_64_bit_outputs(out_structs)

    # Aliases. Keys count the flattened non-constexpr operands (arrays and scalars) in signature order, as
    # jax-triton 0.4 does; in the classic convention, which only calls written for jax-triton 0.3 use, they count
    # the array operands alone, as 0.3 did.
    aliases: list[tuple[int, int]] = []
    seen_outs: set[int] = set()
    n_leaves = leaf_index
    classic = convention == CLASSIC
    key_space = sorted(bound.leaf_to_operand) if classic else list(range(n_leaves))
    for key, out_idx in aliases_in.items():
        if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < len(key_space):
            counted = "array operands (the classic convention counts arrays only)" if classic else "operands"
            hint = ""
            if classic and isinstance(key, int) and 0 <= key < n_leaves:
                hint = f"; counting scalars too, as the current convention does, it would be {bound.leaf_names[key]!r}"
            raise KernelCallValueError(
                f"input_output_aliases key {key!r} is not an operand index; {counted} are 0..{len(key_space) - 1} "
                f"({[bound.leaf_names[i] for i in key_space]}){hint}"
            )
        in_idx = key_space[key]
        if not isinstance(out_idx, int) or not 0 <= out_idx < n_out:
            raise KernelCallValueError(
                f"input_output_aliases maps operand {key} to output {out_idx!r}, but there are {n_out} outputs"
            )
        if out_idx in seen_outs:
            raise KernelCallValueError(f"input_output_aliases maps two operands to output {out_idx}")
        seen_outs.add(out_idx)
        if in_idx not in bound.leaf_to_operand:
            raise KernelCallValueError(
                f"input_output_aliases key {key} names operand {bound.leaf_names[in_idx]!r}, a scalar; only "
                "arrays can be aliased"
            )
        operand = bound.leaf_to_operand[in_idx]
        in_aval = bound.operand_avals[operand]
        out_struct = out_structs[out_idx]
        if tuple(in_aval.shape) != tuple(out_struct.shape) or np.dtype(in_aval.dtype) != np.dtype(out_struct.dtype):
            raise KernelCallValueError(
                f"input_output_aliases {{{key}: {out_idx}}}: operand {bound.leaf_names[in_idx]!r} is "
                f"{np.dtype(in_aval.dtype)}{list(in_aval.shape)} but output {out_idx} is "
                f"{np.dtype(out_struct.dtype)}{list(out_struct.shape)}; "
                "aliased buffers must have the same shape and dtype"
            )
        aliases.append((operand, out_idx))

    out_avals = [jax.core.ShapedArray(s.shape, s.dtype) for s in out_structs]
    for operand_index, _ in bound.refs:
        aliases.append((operand_index, len(out_avals)))
        out_avals.append(bound.operand_avals[operand_index])

    # Configurations.
    named_values: dict[str, Any] = {bound.leaf_names[i]: None for i in range(n_leaves)}
    for slot in slots:
        if slot.kind == INPUT:
            named_values[slot.name] = bound.operand_avals[slot.index]
        elif slot.kind == OUTPUT:
            named_values[slot.name] = out_avals[slot.index]
        else:
            named_values[slot.name] = slot.value
    configs = expand_configs(
        wrappers,
        params=params,
        signature=signature,
        user_meta=user_meta,
        named_values=named_values,
        grid=options.grid,
        zeroed_outputs=options.zeroed_outputs,
        explicit_options=options.compile_options,
        backend_options=options.backend_options or {},
        num_outputs=len(out_avals),
        slots=slots,
        keywords=frozenset(kwargs),
    )
    call = KernelCall(
        kernel=kernel,
        fn=fn,
        dialect=dialect,
        name=call_name,
        params=params,
        slots=tuple(slots),
        param_trees=tuple(trees),
        operand_avals=tuple(bound.operand_avals),
        out_avals=tuple(out_avals),
        num_user_outputs=n_out,
        aliases=tuple(aliases),
        convention=convention,
        configs=tuple(configs),
        autotune_keys=tuple(wrappers.keys),
        launch=options.launch_options(),
        backend_arguments=options.backend_arguments(),
    )
    refuse_traced_scalars(call, signature)
    refuse_needed_nones(call, signature)
    refuse_float_sizes(call, signature, wrappers, user_meta)
    return BoundCall(call, bound.operands, bound.refs, out_tree)


def _refuse_narrowed(array: Any, name: str, signature: str) -> None:
    """Refuses an array that JAX would narrow before the kernel sees it (a 64-bit NumPy array with x64 off)."""
    if isinstance(array, (jax.Array, jax.core.Tracer)):
        return  # JAX's own: already of the type the kernel gets
    dtype = np.dtype(array.dtype)
    passed = _narrowed(dtype)
    if passed is not None:
        raise KernelCallTypeError(
            f"argument {name!r} of kernel {signature} is a {dtype} NumPy array, but JAX's 64-bit mode is off "
            f"(jax_enable_x64), so JAX would pass it as {passed}: the kernel would read {passed} values through a "
            f"pointer the call declares as {dtype}. Enable 64-bit types (jax.config.update('jax_enable_x64', True) "
            f"at startup, or JAX_ENABLE_X64=1), or convert the array first (x.astype(np.{passed}))"
        )


def _is_operand_leaf(value: Any) -> bool:
    return _compat.is_ref(value) or isinstance(value, TensorDescriptor)


def _is_tuple_leaf(value: Any) -> bool:
    """A leaf of a tuple argument: an operand, or ``None`` (a constant leaf, which JAX's pytrees would drop)."""
    return value is None or _is_operand_leaf(value)


def _check_descriptor_layouts(dialect: Dialect, kernel: Any, slots: Sequence[ParamSlot]) -> None:
    """Refuses descriptors whose layout does not fit the kernel's dialect (Gluon needs one, Triton takes none)."""
    described = [s for s in slots if s.descriptor is not None]
    if not described:
        return
    required = invoke(dialect, "requires_descriptor_layout", kernel=kernel)
    for slot in described:
        assert slot.descriptor is not None
        has_layout = slot.descriptor.layout is not None
        if required and not has_layout:
            raise KernelCallValueError(
                f"tensor descriptor argument {slot.name!r} has no layout, but {dialect.name} kernels need the block's "
                "shared-memory layout: jt.TensorDescriptor(x, block_shape=..., layout=...) (for Gluon, e.g. "
                "gl.NVMMASharedLayout.get_default_for(block_shape, gl.float16))"
            )
        if has_layout and not required:
            raise KernelCallValueError(
                f"tensor descriptor argument {slot.name!r} has layout={slot.descriptor.layout!r}, but {dialect.name} "
                "kernels take descriptors without one (layout= is for Gluon kernels); drop layout="
            )


def _ptr(dtype: Any) -> str:
    return triton_scalar_type(dtype)


def _is_array(value: Any) -> bool:
    if isinstance(value, (bool, int, float, complex, np.generic, str, bytes)) or value is None:
        return False
    return hasattr(value, "shape") and hasattr(value, "dtype")


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (bool, int, float, np.generic))


def _scalar_slot(path: tuple[int, ...], name: str, value: Any, param: KernelParam) -> ParamSlot:
    if isinstance(value, np.generic):
        if np.dtype(value.dtype).kind == "c":
            raise KernelCallTypeError(
                f"argument {name!r} is a complex scalar ({short_repr(value)}); Triton kernels take no complex values"
            )
        type_str = triton_scalar_type(value.dtype, what=f"scalar argument {name!r}")
        plain = value.item()
        divisible = isinstance(plain, int) and not isinstance(plain, bool) and plain % 16 == 0
        return ParamSlot(path, name, SCALAR, -1, value, type_str, divisible and not param.do_not_specialize)
    if isinstance(value, bool):
        return ParamSlot(path, name, SCALAR, -1, value, "i1", False)
    if isinstance(value, int):
        type_str = int_type(value, what=f"argument {name!r}")
        if value == 1 and not param.do_not_specialize:
            return ParamSlot(path, name, SCALAR, -1, 1, "constexpr", False)
        return ParamSlot(path, name, SCALAR, -1, value, type_str, value % 16 == 0 and not param.do_not_specialize)
    if isinstance(value, float):
        if math.isfinite(value) and abs(value) > _FLOAT32_MAX:
            raise KernelCallValueError(
                f"argument {name!r}={value!r} does not fit float32, the type Python floats are passed as (as "
                f"Triton's launcher does); pass np.float64({value!r}) for a double"
            )
        return ParamSlot(path, name, SCALAR, -1, value, "fp32", False)
    raise KernelCallTypeError(
        f"argument {name!r} is {type(value).__name__} ({short_repr(value)}); a kernel operand must be an array, a Ref, "
        "or a bool/int/float/NumPy scalar"
    )


def _refuse_crossed_output_names(out_spec: Any, out_param_of: dict[str, int]) -> None:
    """Refuses a dict ``out_shape`` whose keys name output parameters other than the ones they fill.

    JAX orders a dict's entries by key, and outputs fill the kernel's output parameters in that order, so
    ``{"mean": ..., "max": ...}`` for ``mean_ptr, max_ptr`` would put the max into ``mean_ptr``: a result under the
    wrong name with no error. A key names parameter ``p`` when it is ``p`` or ``p`` without ``_ptr``.

    Raises:
        KernelCallValueError: Naming where each entry goes and the fix.
    """
    if not isinstance(out_spec, Mapping) or not all(isinstance(key, str) for key in out_spec):
        return
    keys = sorted(out_spec)
    if len(keys) != len(tree_util.tree_leaves(out_spec, is_leaf=lambda x: hasattr(x, "shape"))):
        return  # nested entries: outputs do not map one per key
    param_of = {output: name for name, output in out_param_of.items()}
    named = {name: name for name in out_param_of} | {
        name[: -len("_ptr")]: name for name in out_param_of if name.endswith("_ptr")
    }
    crossed = [
        (key, param_of[index], named[key])
        for index, key in enumerate(keys)
        if index in param_of and key in named and named[key] != param_of[index]
    ]
    if crossed:
        goes = ", ".join(f"{key!r} -> {param_of[i]}" for i, key in enumerate(keys) if i in param_of)
        key, filled, meant = crossed[0]
        raise KernelCallValueError(
            f"out_shape is a dict, whose entries JAX orders by key, so they fill the kernel's output parameters in "
            f"that order: {goes}. Entry {key!r} names {meant} but would fill {filled}. Pass out_shape as a tuple or "
            f"list in the order of the output parameters ({', '.join(param_of[i] for i in sorted(param_of))})"
        )


def _to_shape_dtype(value: Any, what: str) -> jax.ShapeDtypeStruct:
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        raise KernelCallTypeError(
            f"{what} must be an object with .shape and .dtype (e.g. jax.ShapeDtypeStruct or an array), "
            f"got {short_repr(value)}"
        )
    try:
        shape = tuple(operator.index(d) for d in value.shape)
    except TypeError:
        raise KernelCallTypeError(
            f"{what} has a shape that is not a tuple of ints: {short_repr(value.shape)}"
        ) from None
    if any(d < 0 for d in shape):
        raise KernelCallValueError(f"{what} has a negative dimension: shape {shape}")
    triton_scalar_type(value.dtype, what=what)
    return jax.ShapeDtypeStruct(shape, value.dtype)


def _narrowed(dtype: np.dtype[Any]) -> np.dtype[Any] | None:
    """The dtype JAX turns ``dtype`` into (a 64-bit type while ``jax_enable_x64`` is off), or ``None`` when JAX
    keeps it."""
    passed = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    return None if passed == dtype else passed


def _refuse_64_bit_outputs(out_structs: Sequence[jax.ShapeDtypeStruct]) -> None:
    """Refuses a 64-bit output while ``jax_enable_x64`` is off, when JAX keeps no 64-bit arrays (checked after
    the operands, whose own 64-bit message says more)."""
    for index, struct in enumerate(out_structs):
        dtype = np.dtype(struct.dtype)
        passed = _narrowed(dtype)
        if passed is not None:
            raise KernelCallTypeError(
                f"out_shape[{index}] has dtype {dtype}, a 64-bit type, but jax_enable_x64 is off, so JAX keeps no "
                "64-bit arrays (jax.pure_callback refuses them too): enable it (jax.config.update('jax_enable_x64', "
                f"True)) or give the output dtype {passed}"
            )
