"""Configurations: unwrapping ``@triton.autotune`` / ``@triton.heuristics`` and expanding them into launch configs.

The user's ``Autotuner`` / ``Heuristics`` objects are only read, never mutated. Values the caller fixes (constexpr
keywords, ``num_warps=`` ...) prune the autotuning configs that disagree with them; heuristics are evaluated per
remaining config; `normalize_grid` turns each config's grid into three axes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from jt_core.call import OUTPUT, CompileOptions, KernelParam, LaunchConfig, ParamSlot, static_key
from jt_core.errors import KernelCallTypeError, KernelCallValueError, short_repr

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
    """A read-only copy of one ``triton.Config``."""

    kwargs: tuple[tuple[str, Any], ...]
    options: tuple[tuple[str, Any], ...]


@dataclasses.dataclass
class KernelWrappers:
    """What the autotune/heuristics wrappers around a kernel say.

    Attributes:
        fn: The innermost kernel function object.
        configs: The autotuner's configs (empty if not autotuned).
        keys: The autotuner's key names.
        heuristics: ``(name, function)`` pairs, innermost last.
        reset_to_zero: Names the autotuner zeroes before each trial.
        restore_value: Names the autotuner restores after each trial.
    """

    fn: Any
    configs: list[AutotuneConfig] = dataclasses.field(default_factory=list)
    keys: list[str] = dataclasses.field(default_factory=list)
    heuristics: list[tuple[str, Callable[[dict[str, Any]], Any]]] = dataclasses.field(default_factory=list)
    reset_to_zero: list[str] = dataclasses.field(default_factory=list)
    restore_value: list[str] = dataclasses.field(default_factory=list)
    autotuned: bool = False


def unwrap_kernel(kernel: Any) -> KernelWrappers:
    """Reads the autotune/heuristics wrappers around ``kernel``.

    Raises:
        KernelCallTypeError: When ``kernel`` is not a jitted kernel (a plain Python function, say).
        NotImplementedError: For an autotuner or config ``pre_hook``/``post_hook``.
    """
    from triton.runtime.autotuner import Autotuner, Heuristics

    wrappers = KernelWrappers(fn=None)
    current = kernel
    for _ in range(16):
        if isinstance(current, Autotuner):
            if wrappers.autotuned:
                raise KernelCallTypeError("kernel is wrapped in @triton.autotune twice; keep one")
            if getattr(current, "user_defined_pre_hook", False) or getattr(current, "user_defined_post_hook", False):
                raise NotImplementedError(
                    "triton_call does not run @triton.autotune pre_hook/post_hook functions (they take torch "
                    "tensors); use reset_to_zero=/restore_value= or zeroed_outputs= instead"
                )
            wrappers.autotuned = True
            for cfg in current.configs:
                if getattr(cfg, "pre_hook", None) is not None:
                    raise NotImplementedError(
                        f"triton.Config({cfg.kwargs}) has a pre_hook; triton_call cannot run config pre_hooks"
                    )
                options = tuple(
                    (name, getattr(cfg, name))
                    for name in ("num_warps", "num_stages", "num_ctas")
                    if getattr(cfg, name, None) is not None
                )
                if getattr(cfg, "maxnreg", None) is not None:
                    options += (("maxnreg", cfg.maxnreg),)
                wrappers.configs.append(AutotuneConfig(tuple(cfg.kwargs.items()), options))
            wrappers.keys = list(current.keys)
            wrappers.reset_to_zero = list(getattr(current, "reset_to_zero", []) or [])
            wrappers.restore_value = list(getattr(current, "restore_value", []) or [])
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
) -> list[LaunchConfig]:
    """Builds one `LaunchConfig` per autotuning candidate (one when not autotuned)."""
    constexpr_params = [p for p in params if p.is_constexpr]
    constexpr_names = {p.name for p in constexpr_params}
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
        kept.append((cfg_kwargs, cfg_options))
    if not kept:
        described = [dict(c.kwargs) | dict(c.options) for c in candidates]
        fixed = dict(user_meta) | dict(explicit_options)
        raise KernelCallValueError(
            f"the values fixed by the caller ({fixed}) rule out every @triton.autotune config of {signature}: "
            f"{described}"
        )
    zero_names = [s.index for s in slots if s.kind == OUTPUT and s.name in wrappers.reset_to_zero]

    configs: list[LaunchConfig] = []
    seen = set()
    for cfg_kwargs, cfg_options in kept:
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
                **named_values,
                **CompileOptions().as_dict(),
                **options_from_config,
                **explicit_options,
                **meta,
            }
            try:
                value = heur(view)
            except Exception as exc:
                raise KernelCallValueError(
                    f"@triton.heuristics value for {heur_name!r} raised {type(exc).__name__}: {exc}"
                ) from exc
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
        key = static_key((constexprs, options, grid3, tuple(zeroed_list)))
        if key in seen:
            continue
        seen.add(key)
        label = ", ".join(
            [f"{k}={v!r}" for k, v in constexprs]
            + [f"num_warps={options.num_warps}", f"num_stages={options.num_stages}"]
        )
        configs.append(LaunchConfig(constexprs, grid3, options, tuple(zeroed_list), label))
    _refuse_fixed_grid(grid, configs, signature)
    return configs


def _refuse_fixed_grid(grid: Any, configs: Sequence[LaunchConfig], signature: str) -> None:
    """Refuses a grid that is not a callable when the configurations differ in their metaparameters.

    A fixed grid launches as many programs whichever configuration wins, so with block sizes that differ most
    configurations would leave part of the outputs unwritten (or write them twice). Configurations that differ only
    in compiler options (``num_warps``, ``num_stages``) are fine with a fixed grid. A kernel whose programs cover
    the data whatever their number (a persistent kernel) says so with a callable that ignores the metaparameters.

    Raises:
        KernelCallValueError: Naming ``grid``, the metaparameters that differ and the fix.
    """
    if callable(grid) or len(configs) < 2:
        return
    values: dict[str, list[Any]] = {}
    for config in configs:
        for name, value in config.constexprs:
            known = values.setdefault(name, [])
            if static_key(value) not in (static_key(v) for v in known):
                known.append(value)
    differing = {name: seen for name, seen in values.items() if len(seen) > 1}
    if not differing:
        return
    name = next(iter(differing))
    shown = "; ".join(f"{key} = {', '.join(repr(v) for v in seen)}" for key, seen in differing.items())
    raise KernelCallValueError(
        f"grid={short_repr(grid)} is fixed, but the @triton.autotune configs of {signature} differ in their "
        f"metaparameters ({shown}): a fixed grid launches the same programs whichever config wins, so the others "
        "would leave part of the output unwritten or write it twice. Pass grid as a callable of the "
        f"metaparameters, e.g. grid=lambda meta: (triton.cdiv(n, meta[{name!r}]),); for a kernel whose programs "
        f"cover the data whatever their number (a persistent kernel), a callable that ignores them: "
        f"grid=lambda meta: {short_repr(grid)}"
    )


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
