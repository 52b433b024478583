"""Binding a ``triton_call`` to the kernel's parameters: calling conventions, outputs, scalars, configurations.

The result is a :class:`KernelCall`, the hashable static description carried by the primitive. It records, for
every leaf of every non-constexpr parameter, where its value comes from (an input operand, an output buffer or a
scalar), and one :class:`LaunchConfig` per autotuning candidate with the constexpr values, grid, options and zeroed
outputs of that candidate.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax import tree_util

from jt_core import _compat
from jt_core.autotune import KernelWrappers, expand_configs, unwrap_kernel
from jt_core.backend import CompileOptions, Specialization
from jt_core.dtypes import int_type, triton_scalar_type
from jt_core.errors import KernelCallTypeError, KernelCallValueError
from jt_core.tensordesc import TensorDescriptor, TensorDescriptorSpec

INPUT = "input"
OUTPUT = "output"
SCALAR = "scalar"

CLASSIC = "classic"
CURRENT = "current"


@dataclasses.dataclass(frozen=True)
class KernelParam:
    """One parameter of the kernel function.

    Attributes:
        index: Its position in the signature.
        name: Its name.
        is_constexpr: Whether it is annotated ``tl.constexpr``.
        has_default: Whether the signature declares a default.
        default: That default.
        do_not_specialize: Whether Triton's value specialisation is off for it.
    """

    index: int
    name: str
    is_constexpr: bool
    has_default: bool
    default: Any
    do_not_specialize: bool


@dataclasses.dataclass(frozen=True)
class ParamSlot:
    """One leaf of a non-constexpr parameter and where its runtime value comes from.

    Attributes:
        path: The full parameter path: ``(param_index,)`` or ``(param_index, i, ...)`` inside tuple parameters.
        name: A readable name (``x_ptr`` or ``pair[1]``).
        kind: ``"input"`` (an array operand, or the base of a tensor descriptor), ``"output"`` (an output buffer)
            or ``"scalar"``.
        index: The operand index (inputs) or output index (outputs); -1 for scalars.
        value: The scalar value (scalars only).
        type_str: The Triton type (``"*fp32"``, ``"i32"``, ``"tensordesc<fp16[64, 64]>"``, ``"constexpr"`` for
            scalars specialised to a value).
        divisible_by_16: Whether Triton may assume divisibility by 16 (pointers, integers that are).
        descriptor: For a host-side tensor descriptor (an input whose operand is the descriptor's base), its
            shape, strides, block shape, padding and layout; ``None`` otherwise.
    """

    path: tuple[int, ...]
    name: str
    kind: str
    index: int
    value: Any
    type_str: str
    divisible_by_16: bool
    descriptor: TensorDescriptorSpec | None = None


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """One configuration (autotuning candidate) of a call.

    Attributes:
        constexprs: Every constexpr parameter's value, as ``(name, value)`` pairs in signature order.
        grid: The grid, always three axes.
        options: Compiler options.
        zeroed_outputs: Output indices zeroed before the launch.
        label: A readable description, used in errors.
    """

    constexprs: tuple[tuple[str, Any], ...]
    grid: tuple[int, int, int]
    options: CompileOptions
    zeroed_outputs: tuple[int, ...]
    label: str

    @property
    def constexpr_dict(self) -> dict[str, Any]:
        """The constexpr values as a dict."""
        return dict(self.constexprs)


@dataclasses.dataclass(frozen=True)
class KernelCall:
    """Everything static about one ``triton_call``: the primitive's only parameter.

    Attributes:
        kernel: The object the user passed (a ``JITFunction``, ``Heuristics`` or ``Autotuner``).
        fn: The underlying kernel function object (wrappers removed).
        name: The call's name (``name=`` or the kernel's).
        params: The kernel's parameters.
        slots: The non-constexpr parameter leaves in signature order.
        param_trees: For each non-constexpr parameter, the pytree structure of its leaves (tuples).
        operand_avals: The avals of the array operands, in slot order.
        out_avals: The avals of the outputs (user outputs, then the hidden ones backing Refs).
        num_user_outputs: How many of ``out_avals`` the user asked for.
        aliases: ``(operand index, output index)`` pairs of buffers shared by an input and an output.
        configs: The configurations; more than one only for autotuned kernels.
        autotune_keys: The autotuner's ``key`` names (empty if not autotuned).
        restore_operands: Operand indices whose values autotuning trials must restore.
        convention: ``"classic"`` or ``"current"``.
        compute_capability: The ``compute_capability=`` argument.
        has_side_effect: Whether the call must never be removed.
        launcher: The ``launcher=`` argument.
        serialized_metadata: Opaque bytes carried into the lowered call.
        cost_estimate: ``(("flops", n), ("bytes_accessed", n), ...)`` or ``None``.
        bounds_check: Whether the CPU backend checks memory accesses.
        vmap: The batching strategy under ``jax.vmap``: ``"auto"``, ``"grid"`` or ``"sequential"``.
        batch: For a call produced by the grid batching strategy, its :class:`jt_core.batching.BatchInfo`
            (the unbatched call and the batch dimensions); ``None`` otherwise.
    """

    kernel: Any
    fn: Any
    name: str
    params: tuple[KernelParam, ...]
    slots: tuple[ParamSlot, ...]
    param_trees: tuple[tuple[int, Any], ...]
    operand_avals: tuple[Any, ...]
    out_avals: tuple[Any, ...]
    num_user_outputs: int
    aliases: tuple[tuple[int, int], ...]
    configs: tuple[LaunchConfig, ...]
    autotune_keys: tuple[str, ...]
    restore_operands: tuple[int, ...]
    convention: str
    compute_capability: int | None
    has_side_effect: bool
    launcher: str | None
    serialized_metadata: bytes
    cost_estimate: tuple[tuple[str, Any], ...] | None
    bounds_check: bool
    vmap: str = "auto"
    batch: Any = None

    def signature_text(self) -> str:
        """The kernel's signature, for error messages."""
        return kernel_signature_text(self.params, getattr(getattr(self.fn, "fn", self.fn), "__name__", "kernel"))

    def specialization(self, config: LaunchConfig) -> Specialization:
        """The Triton specialisation of one configuration, keyed by full parameter path."""
        signature: dict[str, Any] = {}
        constexprs: dict[tuple[int, ...], Any] = {}
        attrs: dict[tuple[int, ...], list[list[Any]]] = {}
        values = config.constexpr_dict
        slots_by_param: dict[int, list[ParamSlot]] = {}
        for slot in self.slots:
            slots_by_param.setdefault(slot.path[0], []).append(slot)
        trees = dict(self.param_trees)
        for param in self.params:
            if param.is_constexpr:
                signature[param.name] = "constexpr"
                constexprs[(param.index,)] = values[param.name]
                continue
            leaves = slots_by_param[param.index]
            for slot in leaves:
                if slot.type_str == "constexpr":
                    constexprs[slot.path] = slot.value
                elif slot.divisible_by_16:
                    attrs[slot.path] = [["tt.divisibility", 16]]
            types = [slot.type_str for slot in leaves]
            tree = trees[param.index]
            signature[param.name] = types[0] if tree is None else _types_tree(tree, types)
        return Specialization(signature=signature, constexprs=constexprs, attrs=attrs)


def _types_tree(treedef: Any, types: list[str]) -> Any:
    return tree_util.tree_unflatten(treedef, types)


def kernel_signature_text(params: Sequence[KernelParam], name: str) -> str:
    """``name(x_ptr, n, BLOCK: tl.constexpr = 128)``."""
    parts = []
    for p in params:
        text = p.name + (": tl.constexpr" if p.is_constexpr else "")
        if p.has_default:
            text += f" = {p.default!r}"
        parts.append(text)
    return f"{name}({', '.join(parts)})"


def kernel_params(fn: Any) -> tuple[KernelParam, ...]:
    """The parameters of a kernel function object (``JITFunction`` or a dialect's equivalent)."""
    py_fn = getattr(fn, "fn", fn)
    sig = inspect.signature(py_fn)
    do_not_specialize = set()
    params = []
    triton_params = {p.name: p for p in getattr(fn, "params", ())}
    for index, (name, p) in enumerate(sig.parameters.items()):
        tp = triton_params.get(name)
        if tp is not None:
            is_constexpr = bool(tp.is_constexpr)
            if getattr(tp, "do_not_specialize", False):
                do_not_specialize.add(name)
        else:
            annotation = p.annotation
            text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
            is_constexpr = "constexpr" in str(text)
        params.append(
            KernelParam(
                index=index,
                name=name,
                is_constexpr=is_constexpr,
                has_default=p.default is not inspect.Parameter.empty,
                default=None if p.default is inspect.Parameter.empty else p.default,
                do_not_specialize=name in do_not_specialize,
            )
        )
    return tuple(params)


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
                f"argument {name!r} is a complex scalar ({value!r}); Triton kernels take no complex values"
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
        return ParamSlot(path, name, SCALAR, -1, value, "fp32", False)
    raise KernelCallTypeError(
        f"argument {name!r} is {type(value).__name__} ({value!r}); a kernel operand must be an array, a Ref, "
        "or a bool/int/float/NumPy scalar"
    )


def _to_shape_dtype(value: Any, what: str) -> jax.ShapeDtypeStruct:
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        raise KernelCallTypeError(
            f"{what} must be an object with .shape and .dtype (e.g. jax.ShapeDtypeStruct or an array), got {value!r}"
        )
    try:
        shape = tuple(int(d) for d in value.shape)
    except TypeError:
        raise KernelCallTypeError(f"{what} has a non-integer shape {value.shape!r}") from None
    if any(d < 0 for d in shape):
        raise KernelCallValueError(f"{what} has a negative dimension: shape {shape}")
    triton_scalar_type(value.dtype, what=what)
    return jax.ShapeDtypeStruct(shape, value.dtype)


def normalize_grid(grid: Any, metaparams: Mapping[str, Any]) -> tuple[int, int, int]:
    """Turns ``grid`` (int, tuple of up to three ints, or a callable of the metaparameters) into three axes.

    Raises:
        KernelCallTypeError: For a grid of the wrong type, or a callable returning one.
        KernelCallValueError: For more than three axes or negative sizes.
    """
    source = "grid"
    if callable(grid):
        try:
            grid = grid(dict(metaparams))
        except Exception as exc:
            raise KernelCallValueError(
                f"grid callable raised {type(exc).__name__}: {exc} (it is called with a dict of the "
                f"metaparameters: {sorted(metaparams)})"
            ) from exc
        source = "grid callable's result"
    if isinstance(grid, (int, np.integer)) and not isinstance(grid, bool):
        grid = (int(grid),)
    if not isinstance(grid, (tuple, list)):
        raise KernelCallTypeError(f"{source} must be an int or a tuple of up to 3 ints, got {grid!r}")
    if len(grid) > 3:
        raise KernelCallValueError(f"{source} has {len(grid)} axes, {tuple(grid)}; Triton grids have at most 3")
    axes = []
    for axis, size in enumerate(grid):
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
            raise KernelCallTypeError(f"{source} axis {axis} must be an int, got {size!r} in {tuple(grid)}")
        if size < 0:
            raise KernelCallValueError(f"{source} axis {axis} is negative: {tuple(grid)}")
        if size >= 2**31:
            raise KernelCallValueError(f"{source} axis {axis} is {size}, above the launch limit 2**31-1")
        axes.append(int(size))
    while len(axes) < 3:
        axes.append(1)
    return (axes[0], axes[1], axes[2])


def _check_hashable(name: str, value: Any) -> None:
    try:
        hash(value)
    except TypeError:
        raise KernelCallTypeError(
            f"metaparameter {name}={value!r} is unhashable ({type(value).__name__}); constexpr values must be "
            "hashable (use a tuple instead of a list)"
        ) from None


def _suggest(name: str, candidates: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


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
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    out_spec: Any,
    grid: Any,
    input_output_aliases: Mapping[int, int] | None,
    zeroed_outputs: Sequence[int] | Callable[[dict[str, Any]], Sequence[int]],
    explicit_options: Mapping[str, Any],
    backend_options: Mapping[str, Any] | None,
    name: str | None,
    compute_capability: int | None,
    has_side_effect: bool,
    launcher: str | None,
    serialized_metadata: bytes,
    cost_estimate: Mapping[str, Any] | None,
    bounds_check: bool,
) -> tuple[KernelCall, list[Any], list[tuple[int, Any]], Any]:
    """Binds a call. Returns the :class:`KernelCall`, the operands, the Refs to write back and the output tree.

    Raises:
        KernelCallTypeError, KernelCallValueError: For every mismatch, naming the argument.
    """
    wrappers: KernelWrappers = unwrap_kernel(kernel)
    fn = wrappers.fn
    params = kernel_params(fn)
    kernel_name = str(getattr(getattr(fn, "fn", fn), "__name__", "kernel"))
    call_name = str(name or kernel_name)
    by_name = {p.name: p for p in params}
    signature = kernel_signature_text(params, kernel_name)

    # Keyword arguments: operands (non-constexpr parameters) or metaparameters (constexpr parameters).
    kw_operands: dict[str, Any] = {}
    user_meta: dict[str, Any] = {}
    for key, value in kwargs.items():
        param = by_name.get(key)
        if param is None:
            raise KernelCallTypeError(
                f"triton_call got keyword {key!r}, which is not a parameter of the kernel "
                f"{signature}.{_suggest(key, list(by_name))}"
            )
        if param.is_constexpr:
            _check_hashable(key, value)
            user_meta[key] = value
        else:
            kw_operands[key] = value

    # Positional arguments fill the non-constexpr parameters not named by keyword, in order.
    free_params = [p for p in params if not p.is_constexpr and p.name not in kw_operands]
    if len(args) > len(free_params):
        raise KernelCallTypeError(
            f"triton_call got {len(args)} positional operands but kernel {signature} has only "
            f"{len(free_params)} non-constexpr parameters left for them "
            f"({[p.name for p in free_params]}); pass constexpr parameters by keyword"
        )
    given: dict[str, Any] = dict(kw_operands)
    for param, value in zip(free_params, args):
        given[param.name] = value

    # Outputs.
    flat_outs, out_tree = tree_util.tree_flatten(out_spec, is_leaf=lambda x: hasattr(x, "shape"))
    out_structs = [_to_shape_dtype(o, f"out_shape[{i}]") for i, o in enumerate(flat_outs)]

    aliases_in = dict(input_output_aliases or {})

    nonconstexpr = [p for p in params if not p.is_constexpr]
    missing = [p for p in nonconstexpr if p.name not in given]
    n_out = len(out_structs)
    n_alias = len(aliases_in)
    has_refs = any(
        _compat.is_ref(leaf) for v in given.values() for leaf in tree_util.tree_leaves(v, is_leaf=_compat.is_ref)
    )
    if len(missing) == n_out:
        convention = CLASSIC
    elif len(missing) == n_out - n_alias:
        convention = CURRENT
    else:
        bound_text = ", ".join(f"{k}={_describe(v)}" for k, v in given.items()) or "nothing"
        raise KernelCallTypeError(
            f"triton_call arguments do not fit kernel {signature}: bound {bound_text}; "
            f"{len(missing)} non-constexpr parameters are left ({[p.name for p in missing]}) for "
            f"{n_out} outputs ({n_alias} of them aliased). Either every output gets a parameter (outputs appended "
            "after the inputs), or only the non-aliased ones do"
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
            leaves, treedef = tree_util.tree_flatten(value, is_leaf=_is_operand_leaf)
            paths = [(param.index, i) for i in range(len(leaves))]
            names = [f"{param.name}[{i}]" for i in range(len(leaves))]
            trees.append((param.index, treedef))
        else:
            leaves, paths, names = [value], [(param.index,)], [param.name]  # type: ignore[list-item]
            trees.append((param.index, None))
        for leaf, path, leaf_name in zip(leaves, paths, names):
            bound.leaf_names.append(leaf_name)
            if isinstance(leaf, TensorDescriptor):
                spec = leaf.spec(leaf_name)
                operand_index = len(bound.operands)
                bound.operands.append(leaf.base)
                bound.operand_avals.append(jax.core.ShapedArray(spec.shape, spec.dtype))
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
                operand_index = len(bound.operands)
                bound.operands.append(leaf)
                bound.operand_avals.append(jax.core.ShapedArray(tuple(leaf.shape), leaf.dtype))
                bound.leaf_to_operand[leaf_index] = operand_index
                slots.append(ParamSlot(path, leaf_name, INPUT, operand_index, None, type_str, True))
            elif _is_scalar(leaf):
                slots.append(_scalar_slot(path, leaf_name, leaf, param))
            else:
                raise KernelCallTypeError(
                    f"argument {leaf_name!r} of kernel {signature} is {type(leaf).__name__} ({leaf!r}); "
                    "expected an array, a Ref, a jt.TensorDescriptor or a bool/int/float/NumPy scalar"
                )
            leaf_index += 1
    _check_descriptor_layouts(fn, slots)

    # Aliases (indices over the flattened non-constexpr operand leaves, in signature order).
    aliases: list[tuple[int, int]] = []
    seen_outs: set[int] = set()
    n_leaves = leaf_index
    for in_idx, out_idx in aliases_in.items():
        if not isinstance(in_idx, int) or not 0 <= in_idx < n_leaves:
            raise KernelCallValueError(
                f"input_output_aliases key {in_idx!r} is not an operand index; operands are 0..{n_leaves - 1} "
                f"({bound.leaf_names})"
            )
        if not isinstance(out_idx, int) or not 0 <= out_idx < n_out:
            raise KernelCallValueError(
                f"input_output_aliases maps operand {in_idx} to output {out_idx!r}, but there are {n_out} outputs"
            )
        if out_idx in seen_outs:
            raise KernelCallValueError(f"input_output_aliases maps two operands to output {out_idx}")
        seen_outs.add(out_idx)
        if in_idx not in bound.leaf_to_operand:
            raise KernelCallValueError(
                f"input_output_aliases key {in_idx} names operand {bound.leaf_names[in_idx]!r}, a scalar; only "
                "arrays can be aliased"
            )
        operand = bound.leaf_to_operand[in_idx]
        in_aval = bound.operand_avals[operand]
        out_struct = out_structs[out_idx]
        if tuple(in_aval.shape) != tuple(out_struct.shape) or np.dtype(in_aval.dtype) != np.dtype(out_struct.dtype):
            raise KernelCallValueError(
                f"input_output_aliases {{{in_idx}: {out_idx}}}: operand {bound.leaf_names[in_idx]!r} is "
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
        grid=grid,
        zeroed_outputs=zeroed_outputs,
        explicit_options=explicit_options,
        backend_options=backend_options or {},
        num_outputs=len(out_avals),
        slots=slots,
    )
    restore = tuple(
        op
        for op, _ in aliases
        if any(s.kind == INPUT and s.index == op and s.name in wrappers.restore_value for s in slots)
    )

    call = KernelCall(
        kernel=kernel,
        fn=fn,
        name=call_name,
        params=params,
        slots=tuple(slots),
        param_trees=tuple(trees),
        operand_avals=tuple(bound.operand_avals),
        out_avals=tuple(out_avals),
        num_user_outputs=n_out,
        aliases=tuple(aliases),
        configs=tuple(configs),
        autotune_keys=tuple(wrappers.keys),
        restore_operands=restore,
        convention=convention,
        compute_capability=compute_capability,
        has_side_effect=bool(has_side_effect),
        launcher=launcher,
        serialized_metadata=bytes(serialized_metadata),
        cost_estimate=tuple(sorted(cost_estimate.items())) if cost_estimate else None,
        bounds_check=bounds_check,
    )
    return call, bound.operands, bound.refs, out_tree


def _is_operand_leaf(value: Any) -> bool:
    return _compat.is_ref(value) or isinstance(value, TensorDescriptor)


def _check_descriptor_layouts(fn: Any, slots: Sequence[ParamSlot]) -> None:
    """Refuses descriptors whose layout does not fit the kernel's dialect (Gluon needs one, Triton takes none)."""
    described = [s for s in slots if s.descriptor is not None]
    if not described:
        return
    from jt_core import hooks

    dialect = hooks.dialect_for(fn)
    for slot in described:
        assert slot.descriptor is not None
        has_layout = slot.descriptor.layout is not None
        if dialect.tensor_descriptor_layout and not has_layout:
            raise KernelCallValueError(
                f"tensor descriptor argument {slot.name!r} has no layout, but {dialect.name} kernels need the block's "
                "shared-memory layout: jt.TensorDescriptor(x, block_shape=..., layout=...) (for Gluon, e.g. "
                "gl.NVMMASharedLayout.get_default_for(block_shape, gl.float16))"
            )
        if has_layout and not dialect.tensor_descriptor_layout:
            raise KernelCallValueError(
                f"tensor descriptor argument {slot.name!r} has layout={slot.descriptor.layout!r}, but {dialect.name} "
                "kernels take descriptors without one (layout= is for Gluon kernels); drop layout="
            )


def _ptr(dtype: Any) -> str:
    return triton_scalar_type(dtype)


def _describe(value: Any) -> str:
    if isinstance(value, TensorDescriptor):
        return repr(value)
    if _is_array(value):
        return f"{np.dtype(value.dtype)}{list(value.shape)}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    return repr(value)
