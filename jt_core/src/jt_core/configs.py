"""Configurations: unwrapping ``@triton.autotune`` / ``@triton.heuristics`` and expanding them into launch configs.

The user's ``Autotuner`` / ``Heuristics`` objects are only read, never mutated. Values the caller fixes (constexpr
keywords, ``num_warps=`` ...) prune the autotuning configs that disagree with them, then ``prune_configs_by`` prunes
the rest (`jt_core.pruning`); heuristics are evaluated per remaining config, and the config's hooks give the
block shapes of tensor descriptor arguments; `normalize_grid` turns each config's grid into three axes. A grid
that is not a callable serves any configs: which of them cover the outputs is checked when they run
(`jt_core.coverage`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np

from jt_core.call import OUTPUT, CompileOptions, KernelParam, LaunchConfig, ParamSlot, static_key
from jt_core.errors import KernelCallTypeError, KernelCallValueError, short_repr
from jt_core.pruning import (
    AutotunerHooks,
    PruneSpec,
    config_copy,
    hook_block_shapes,
    launch_arguments,
    named_arguments,
    prune_configs,
)

__all__ = [
    "AutotuneConfig",
    "KernelWrappers",
    "check_constexpr_value",
    "expand_configs",
    "normalize_grid",
    "unwrap_kernel",
]


@dataclasses.dataclass(frozen=True)
class AutotuneConfig:
    """A read-only copy of one ``triton.Config``, with the object it was read from (``source``: what prune
    functions and hooks are given, as copies)."""

    kwargs: tuple[tuple[str, Any], ...]
    options: tuple[tuple[str, Any], ...]
    source: Any = dataclasses.field(default=None, compare=False)

    @classmethod
    def of(cls, config: Any) -> AutotuneConfig:
        """The copy of a ``triton.Config``."""
        options = tuple(
            (name, getattr(config, name))
            for name in ("num_warps", "num_stages", "num_ctas")
            if getattr(config, name, None) is not None
        )
        if getattr(config, "maxnreg", None) is not None:
            options += (("maxnreg", config.maxnreg),)
        return cls(tuple(config.kwargs.items()), options, config)


@dataclasses.dataclass
class KernelWrappers:
    """What the autotune/heuristics wrappers around a kernel say.

    Attributes:
        fn: The innermost kernel function object.
        configs: The autotuner's configs (empty if not autotuned).
        keys: The autotuner's key names.
        heuristics: ``(name, function)`` pairs, innermost last.
        outer_heuristics: How many of ``heuristics`` (the first ones) wrap the autotuner: Triton computes them before
            it prunes, so prune functions see their values.
        reset_to_zero: Names the autotuner zeroes before each trial.
        restore_value: Names the autotuner restores after each trial.
        prune: The autotuner's ``prune_configs_by``.
        hooks: The autotuner's own ``pre_hook``/``post_hook``.
    """

    fn: Any
    configs: list[AutotuneConfig] = dataclasses.field(default_factory=list)
    keys: list[str] = dataclasses.field(default_factory=list)
    heuristics: list[tuple[str, Callable[[dict[str, Any]], Any]]] = dataclasses.field(default_factory=list)
    outer_heuristics: int = 0
    reset_to_zero: list[str] = dataclasses.field(default_factory=list)
    restore_value: list[str] = dataclasses.field(default_factory=list)
    autotuned: bool = False
    prune: PruneSpec = dataclasses.field(default_factory=PruneSpec)
    hooks: AutotunerHooks = dataclasses.field(default_factory=AutotunerHooks)


def unwrap_kernel(kernel: Any) -> KernelWrappers:
    """Reads the autotune/heuristics wrappers around ``kernel``.

    Raises:
        KernelCallTypeError: When ``kernel`` is not a jitted kernel (a plain Python function, say).
    """
    from triton.runtime.autotuner import Autotuner, Heuristics

    wrappers = KernelWrappers(fn=None)
    current = kernel
    for _ in range(16):
        if isinstance(current, Autotuner):
            if wrappers.autotuned:
                raise KernelCallTypeError("kernel is wrapped in @triton.autotune twice; keep one")
            wrappers.autotuned = True
            wrappers.outer_heuristics = len(wrappers.heuristics)
            wrappers.configs = [AutotuneConfig.of(cfg) for cfg in current.configs]
            wrappers.keys = list(current.keys)
            wrappers.reset_to_zero = list(getattr(current, "reset_to_zero", []) or [])
            wrappers.restore_value = list(getattr(current, "restore_value", []) or [])
            wrappers.prune = PruneSpec.of(current)
            wrappers.hooks = AutotunerHooks.of(current)
            current = current.fn
        elif isinstance(current, Heuristics):
            wrappers.heuristics.extend(current.values.items())
            current = current.fn
        else:
            break
    if current is None or not hasattr(current, "fn") or not callable(getattr(current, "fn", None)):
        raise KernelCallTypeError(
            f"kernel={kernel!r} is not a jitted Triton kernel; decorate the function with @triton.jit (or @gluon.jit)"
        )
    wrappers.fn = current
    return wrappers


def _options(
    explicit: Mapping[str, Any], backend_options: Mapping[str, Any], from_config: Mapping[str, Any]
) -> CompileOptions:
    conflicts = sorted(set(explicit) & set(backend_options))
    if conflicts:
        raise KernelCallValueError(
            f"{', '.join(conflicts)} given both as triton_call arguments and in backend_options; give each once"
        )
    values = {**backend_options, **from_config}
    values.update(explicit)
    return CompileOptions.from_values(values)


def expand_configs(
    wrappers: KernelWrappers,
    *,
    params: Sequence[KernelParam],
    signature: str,
    user_meta: Mapping[str, Any],
    named_values: Mapping[str, Any],
    grid: Any,
    zeroed_outputs: Sequence[int] | Callable[[dict[str, Any]], Sequence[int]],
    explicit_options: Mapping[str, Any],
    backend_options: Mapping[str, Any],
    num_outputs: int,
    slots: Sequence[ParamSlot],
    keywords: Collection[str] = (),
) -> list[LaunchConfig]:
    """Builds one `LaunchConfig` per autotuning candidate (one when not autotuned).

    The autotuner's configs that the caller's values rule out are dropped, then ``prune_configs_by`` prunes the
    others (`jt_core.pruning`); heuristics are evaluated per remaining config, and the config's hooks run on
    stand-ins for the block shapes of tensor descriptor arguments.

    Args:
        keywords: The names of the kernel's parameters the caller gave by keyword: as in Triton, prune functions
            find those in ``kwargs`` and the others in ``named_args``.
    """
    constexpr_params = [p for p in params if p.is_constexpr]
    constexpr_names = {p.name for p in constexpr_params}
    named_args, leaf_args = named_arguments(slots, named_values, {p.index: p.name for p in params})
    candidates = wrappers.configs or [AutotuneConfig((), ())]
    kept = []
    for cfg in candidates:
        cfg_kwargs = dict(cfg.kwargs)
        unknown = [k for k in cfg_kwargs if k not in constexpr_names]
        if unknown:
            raise KernelCallValueError(
                f"triton.Config sets {unknown}, which are not constexpr parameters of {signature}"
            )
        cfg_options = dict(cfg.options)
        if any(k in user_meta and user_meta[k] != v for k, v in cfg_kwargs.items()):
            continue
        if any(k in explicit_options and explicit_options[k] != v for k, v in cfg_options.items()):
            continue
        kept.append(cfg)
    if not kept:
        described = [dict(c.kwargs) | dict(c.options) for c in candidates]
        fixed = dict(user_meta) | dict(explicit_options)
        raise KernelCallValueError(
            f"the values fixed by the caller ({fixed}) rule out every @triton.autotune config of {signature}: "
            f"{described}"
        )
    if len(wrappers.configs) > 1 and wrappers.prune.active:
        positional, kwargs = launch_arguments(named_args, user_meta, explicit_options, keywords)
        for heur_name, heur in wrappers.heuristics[: wrappers.outer_heuristics]:
            if heur_name not in kwargs:
                kwargs[heur_name] = _heuristic_value(heur_name, heur, {**named_args, **user_meta, **kwargs})
        returned = prune_configs(
            wrappers.prune, [config_copy(cfg.source) for cfg in kept], positional, kwargs, signature
        )
        kept = [AutotuneConfig.of(config) for config in returned]
        for cfg in kept:
            unknown = [k for k in dict(cfg.kwargs) if k not in constexpr_names]
            if unknown:
                raise KernelCallValueError(
                    f"a triton.Config that prune_configs_by returned sets {unknown}, which are not constexpr "
                    f"parameters of {signature}"
                )
    zero_names = [s.index for s in slots if s.kind == OUTPUT and s.name in wrappers.reset_to_zero]
    descriptors = {s.name: s.descriptor for s in slots if s.descriptor is not None}

    configs: list[LaunchConfig] = []
    seen = set()
    for cfg in kept:
        cfg_kwargs, cfg_options = dict(cfg.kwargs), dict(cfg.options)
        meta: dict[str, Any] = {}
        for p in constexpr_params:
            if p.name in user_meta:
                meta[p.name] = user_meta[p.name]
            elif p.name in cfg_options:
                # Triton's autotuner passes a config's options (num_warps= ...) as keywords, which a parameter of
                # the same name takes.
                meta[p.name] = cfg_options[p.name]
            elif p.name in cfg_kwargs:
                meta[p.name] = cfg_kwargs[p.name]
            elif p.has_default:
                meta[p.name] = p.default
        options_from_config = dict(cfg_options)
        for heur_name, heur in wrappers.heuristics:
            if heur_name in user_meta or heur_name in explicit_options:
                continue
            # A parameter's value over the option of the same name: Triton's heuristics see the launch's keywords.
            view = {
                **leaf_args,
                **named_args,
                **CompileOptions().as_dict(),
                **options_from_config,
                **explicit_options,
                **meta,
            }
            value = _heuristic_value(heur_name, heur, view)
            if heur_name in ("num_warps", "num_stages", "num_ctas"):
                options_from_config[heur_name] = value
            if heur_name in constexpr_names:
                check_constexpr_value(heur_name, value, signature, " returned by @triton.heuristics")
                meta[heur_name] = value
            elif heur_name not in ("num_warps", "num_stages", "num_ctas"):
                raise KernelCallValueError(
                    f"@triton.heuristics sets {heur_name!r}, which is not a constexpr parameter of {signature}"
                )
        missing = [p.name for p in constexpr_params if p.name not in meta]
        if missing:
            raise KernelCallTypeError(
                f"constexpr parameters {missing} of {signature} have no value; pass them as keywords "
                f"(e.g. {missing[0]}=...)"
            )
        options = _options(explicit_options, backend_options, options_from_config)
        meta_view = {**named_values, **options.as_dict(), **meta}
        grid3 = normalize_grid(grid, meta_view)
        zeroed = _zeroed(zeroed_outputs, meta_view)
        zeroed_list = sorted(set(zeroed) | set(zero_names))
        for index in zeroed_list:
            if not 0 <= index < num_outputs:
                raise KernelCallValueError(
                    f"zeroed_outputs contains {index}, but there are {num_outputs} outputs (0..{num_outputs - 1})"
                )
        constexprs = tuple((p.name, meta[p.name]) for p in constexpr_params)
        label = ", ".join(
            [f"{k}={v!r}" for k, v in constexprs]
            + [f"num_warps={options.num_warps}", f"num_stages={options.num_stages}"]
        )
        blocks = _hooked_block_shapes(wrappers, cfg, named_args, descriptors, meta, options, label, signature)
        key = static_key((constexprs, options, grid3, tuple(zeroed_list), blocks))
        if key in seen:
            continue
        seen.add(key)
        configs.append(LaunchConfig(constexprs, grid3, options, tuple(zeroed_list), label, blocks))
    return configs


def _heuristic_value(name: str, heuristic: Callable[[dict[str, Any]], Any], view: dict[str, Any]) -> Any:
    """What a ``@triton.heuristics`` function returns for ``view``.

    Raises:
        KernelCallValueError: When it raises, naming the value it computes.
    """
    try:
        return heuristic(view)
    except Exception as exc:
        raise KernelCallValueError(f"@triton.heuristics value for {name!r} raised {type(exc).__name__}: {exc}") from exc


def _hooked_block_shapes(
    wrappers: KernelWrappers,
    cfg: AutotuneConfig,
    named_args: Mapping[str, Any],
    descriptors: Mapping[str, Any],
    meta: Mapping[str, Any],
    options: CompileOptions,
    label: str,
    signature: str,
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The block shapes one config's hooks set on tensor descriptor arguments (`jt_core.pruning`)."""
    hooks = []
    pre_hook = getattr(cfg.source, "pre_hook", None)
    if pre_hook is not None:
        hooks.append(("the triton.Config pre_hook", pre_hook))
    if wrappers.hooks.pre_hook is not None:
        hooks.append(("the @triton.autotune pre_hook", wrappers.hooks.pre_hook))
    if wrappers.hooks.post_hook is not None:
        hooks.append(("the @triton.autotune post_hook", wrappers.hooks.post_hook))
    if not hooks:
        return ()
    values = {**meta, **options.as_dict()}
    return hook_block_shapes(hooks, named_args, descriptors, values, label, signature)


#: Launch limits of the grid axes (CUDA's; ROCm's are at least as large). Every backend keeps them, the CPU's too,
#: so that a call that runs on the CPU launches the same way on a GPU.
AXIS_LIMITS = (2**31 - 1, 65535, 65535)


def _resolved(name: str, value: Any, metaparams: Mapping[str, Any]) -> tuple[Any, str]:
    """``value``, or what it returns when it is a callable of the metaparameters, with how messages call it.

    Raises:
        KernelCallValueError: When the callable raises, naming the argument and what it is called with.
    """
    if not callable(value):
        return value, name
    try:
        return value(dict(metaparams)), f"{name} callable's result"
    except Exception as exc:
        raise KernelCallValueError(
            f"{name} callable raised {type(exc).__name__}: {exc} (it is called with a dict of the metaparameters: "
            f"{sorted(metaparams)})"
        ) from exc


def _zeroed(zeroed_outputs: Any, metaparams: Mapping[str, Any]) -> list[int]:
    """The output indices ``zeroed_outputs`` names (a sequence, or a callable of the metaparameters returning one).

    Raises:
        KernelCallTypeError: For entries that are not ints, or a callable that raises or returns something else.
    """
    zeroed, source = _resolved("zeroed_outputs", zeroed_outputs, metaparams)
    if isinstance(zeroed, (str, bytes)) or not isinstance(zeroed, (Sequence, set, frozenset)):
        raise KernelCallTypeError(f"{source} must be a sequence of output indices (ints), got {short_repr(zeroed)}")
    bad = [i for i in zeroed if not _is_index(i)]
    if bad:
        raise KernelCallTypeError(
            f"{source} must hold output indices (ints), got {short_repr(bad[0])} in {short_repr(zeroed)}; an output "
            "is named by its position among the outputs (0 for the first)"
        )
    return [int(i) for i in zeroed]


#: How a value passed into a ``jax.jit`` function becomes static, for messages about traced values.
_MAKE_STATIC = (
    "A value passed into a jax.jit function is traced unless it is marked static: jax.jit(f, static_argnums=...) or "
    "jax.jit(f, static_argnames=...), or fix it before jax.jit with functools.partial(f, ...)"
)


def _is_index(value: Any) -> bool:
    """Whether ``value`` is an int (Python's or NumPy's), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _traced_hint(value: Any) -> str:
    """For a value ``jax.jit`` traced, why it cannot size a launch and how to make it static; else ``""``."""
    import jax

    if not isinstance(value, jax.core.Tracer):
        return ""
    return (
        f": a traced value, which the launch cannot be sized by. {_MAKE_STATIC}; or compute the grid from shapes "
        "(x.shape[0]), which are static"
    )


def normalize_grid(grid: Any, metaparams: Mapping[str, Any]) -> tuple[int, int, int]:
    """Turns ``grid`` (int, tuple of up to three ints, or a callable of the metaparameters) into three axes.

    Raises:
        KernelCallTypeError: For a grid of the wrong type, or a callable returning one.
        KernelCallValueError: For more than three axes or negative sizes.
    """
    grid, source = _resolved("grid", grid, metaparams)
    if _is_index(grid):
        grid = (int(grid),)
    if not isinstance(grid, (tuple, list)):
        raise KernelCallTypeError(
            f"{source} must be an int or a tuple of up to 3 ints, got {short_repr(grid)}{_traced_hint(grid)}"
        )
    if len(grid) > 3:
        raise KernelCallValueError(f"{source} has {len(grid)} axes, {tuple(grid)}; Triton grids have at most 3")
    axes = []
    for axis, size in enumerate(grid):
        if not _is_index(size):
            raise KernelCallTypeError(
                f"{source} axis {axis} must be an int, got {short_repr(size)} in {short_repr(tuple(grid))}"
                f"{_traced_hint(size)}"
            )
        if size < 0:
            raise KernelCallValueError(f"{source} axis {axis} is negative: {tuple(grid)}")
        if size > AXIS_LIMITS[axis]:
            raise KernelCallValueError(
                f"{source} axis {axis} is {size}, above the launch limit {AXIS_LIMITS[axis]} of that axis (GPUs "
                f"launch at most {AXIS_LIMITS} programs along the three axes); put the large extent on axis 0"
            )
        axes.append(int(size))
    while len(axes) < 3:
        axes.append(1)
    return (axes[0], axes[1], axes[2])


def check_constexpr_value(name: str, value: Any, signature: str, source: str = "") -> None:
    """Refuses a value that cannot be compiled into a kernel as constexpr parameter ``name``.

    Args:
        name: The parameter.
        value: The value given for it.
        signature: The kernel's signature, for the message.
        source: Where the value comes from when not from the caller (`` returned by @triton.heuristics``).

    Raises:
        KernelCallTypeError: For a traced value (a ``jax.jit`` argument that is not static), an array, or a value
            that is not hashable.
    """
    import jax

    given = f"the value{source} given for constexpr parameter {name} of kernel {signature}"
    if isinstance(value, jax.core.Tracer):
        raise KernelCallTypeError(
            f"{given} is a traced value ({short_repr(value)}): a constexpr is compiled into the kernel, so its value "
            f"must be static, known when the function is traced. {_MAKE_STATIC}"
        )
    if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, np.generic):
        raise KernelCallTypeError(
            f"{given} is a {value.dtype}{list(value.shape)} array; a constexpr is a static Python value compiled "
            f"into the kernel: pass {name}=int(...) (or float(...), bool(...)) of a concrete value, or a tuple"
        )
    try:
        hash(value)
    except TypeError:
        raise KernelCallTypeError(
            f"metaparameter {name}={short_repr(value)} is unhashable ({type(value).__name__}); constexpr values "
            "must be hashable (use a tuple instead of a list)"
        ) from None
