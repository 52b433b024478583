"""What ``@triton.autotune`` says besides its configs: ``prune_configs_by`` and the hooks.

* ``prune_configs_by={"early_config_prune": f, "perf_model": g, "top_k": k}`` runs as Triton runs it, before
  anything is compiled: ``f(configs, named_args, **kwargs)`` returns the configs to keep, then, with a perf model,
  the ``k`` configs it estimates fastest are kept (``k`` an int, or a fraction of the configs, at least one). jt
  calls them while it binds the call, with stand-ins for the arguments (`jt_core.stand_ins`: an array's shape,
  dtype and strides, a scalar's value). As in Triton, ``named_args`` holds the arguments given by position and
  ``kwargs`` every keyword of the call (operands, metaparameters, compile options such as ``num_warps``), with the
  values of ``@triton.heuristics`` stacked outside the autotuner (Triton computes those before it prunes). The
  configs are copies of the user's ``triton.Config`` objects, which are never mutated.
* A config's ``pre_hook`` and the autotuner's ``pre_hook``/``post_hook`` take the kernel's arguments; Triton's
  fused-attention tutorial uses them only to set its host-side tensor descriptors' block shapes from the config
  (``nargs["desc_q"].block_shape = [BLOCK_M, HEAD_DIM]``), and return at once when the kernel makes its descriptors
  itself (``tl.make_tensor_descriptor``: the arguments are then arrays). jt runs each hook when it binds each config,
  on stand-ins that record what the hook does: setting ``block_shape`` on a `jt_core.TensorDescriptor` argument is
  kept, and becomes that config's block shape; a hook that sets nothing is harmless; anything else (writing to
  another attribute or to the dict, calling a tensor method such as ``zero_()``, raising) refuses the call, naming
  the hook and what it did. A hook never sees a buffer, so it cannot touch data.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from jt_core.call import INPUT, OUTPUT, ParamSlot
from jt_core.errors import KernelCallTypeError, KernelCallValueError
from jt_core.stand_ins import ANSWERS, DescriptorStandIn, HookEffectError, stand_in_for

__all__ = [
    "ALLOWED_HOOKS",
    "AutotunerHooks",
    "PruneSpec",
    "config_copy",
    "hook_block_shapes",
    "launch_arguments",
    "named_arguments",
    "prune_configs",
]

#: What jt runs of a hook, for messages.
ALLOWED_HOOKS = (
    "jt runs a hook while it binds each config, on stand-ins of the arguments, and keeps what it does only when it "
    "sets block_shape of jt.TensorDescriptor arguments (nargs['desc'].block_shape = [BLOCK_M, HEAD_DIM]) or sets "
    "nothing; a hook that does anything else cannot run: zero outputs with reset_to_zero=[...] or zeroed_outputs=, "
    "keep inputs with restore_value=[...]"
)


@dataclasses.dataclass(frozen=True)
class PruneSpec:
    """``prune_configs_by`` of an autotuner.

    Attributes:
        early_config_prune: ``f(configs, named_args, **kwargs) -> configs``, or ``None``.
        perf_model: ``g(**named_args, **kwargs, **config.all_kwargs()) -> estimated time``, or ``None``.
        top_k: How many configs the perf model keeps: an int, or a fraction (at most 1.0) of the configs.
    """

    early_config_prune: Callable[..., Any] | None = None
    perf_model: Callable[..., Any] | None = None
    top_k: Any = 1.0

    @classmethod
    def of(cls, autotuner: Any) -> PruneSpec:
        """The pruning an autotuner asks for (as ``triton.autotune`` stores ``prune_configs_by``)."""
        return cls(
            getattr(autotuner, "early_config_prune", None),
            getattr(autotuner, "perf_model", None),
            getattr(autotuner, "configs_top_k", 1.0),
        )

    @property
    def active(self) -> bool:
        """Whether it prunes at all."""
        return self.early_config_prune is not None or self.perf_model is not None


@dataclasses.dataclass(frozen=True)
class AutotunerHooks:
    """The user's ``pre_hook``/``post_hook`` of an autotuner (``None`` where it has the default)."""

    pre_hook: Callable[..., Any] | None = None
    post_hook: Callable[..., Any] | None = None

    @classmethod
    def of(cls, autotuner: Any) -> AutotunerHooks:
        """The hooks the user gave ``triton.autotune`` (its defaults, for ``reset_to_zero``/``restore_value``, are
        jt's ``zeroed_outputs``)."""
        pre = autotuner.pre_hook if getattr(autotuner, "user_defined_pre_hook", False) else None
        post = autotuner.post_hook if getattr(autotuner, "user_defined_post_hook", False) else None
        return cls(pre, post)


def named_arguments(
    slots: Sequence[ParamSlot], named_values: Mapping[str, Any], param_names: Mapping[int, str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The stand-ins of a call's arguments: by parameter name (a tuple parameter gets a tuple of its leaves'), and by
    leaf name (``pair[0]``), as heuristics also find them.

    Args:
        slots: The call's slots.
        named_values: Each leaf's value by leaf name (an array's aval, a scalar's value, ``None``).
        param_names: Parameter index to name.
    """
    by_leaf: dict[str, Any] = dict(named_values)
    leaves: dict[int, list[Any]] = {}
    single: dict[int, bool] = {}
    for slot in slots:
        value = named_values.get(slot.name)
        if slot.kind in (INPUT, OUTPUT):
            value = stand_in_for(slot.name, value, slot.descriptor)
        by_leaf[slot.name] = value
        leaves.setdefault(slot.path[0], []).append(value)
        single[slot.path[0]] = len(slot.path) == 1
    named = {param_names[index]: values[0] if single[index] else tuple(values) for index, values in leaves.items()}
    for name, value in named_values.items():
        base = name.split("[", 1)[0]
        if base not in named:  # leaves that are no slot (None)
            named[base] = value
    return named, {name: value for name, value in by_leaf.items() if "[" in name}


def launch_arguments(
    named_args: Mapping[str, Any],
    metaparams: Mapping[str, Any],
    options: Mapping[str, Any],
    keywords: Collection[str],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A call's arguments split as Triton's autotuner splits a launch's before it prunes: ``named_args`` holds the
    arguments given by position (Triton zips the positional values with the parameter names; jt's outputs count
    as positional, as a Triton launch passes their buffers), ``kwargs`` every keyword of the launch: operands
    (stand-ins, as in ``named_args``), metaparameters and compile options (``num_warps=``...).

    Args:
        named_args: `named_arguments`' stand-ins by parameter name.
        metaparams: The constexpr values the caller gave, by position or keyword.
        options: The compile options the caller gave.
        keywords: The parameter names the caller gave by keyword.

    Returns:
        ``(named_args, kwargs)`` for ``early_config_prune`` and ``perf_model``.
    """
    positional = {name: value for name, value in named_args.items() if name not in keywords}
    positional.update((name, value) for name, value in metaparams.items() if name not in keywords)
    kwargs = {name: named_args[name] for name in keywords if name in named_args}
    kwargs.update((name, value) for name, value in metaparams.items() if name in keywords)
    kwargs.update(options)
    return positional, kwargs


def _call_user_function(what: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return function(*args, **kwargs)
    except AttributeError as exc:
        raise KernelCallValueError(
            f"{what} raised AttributeError: {exc}. jt calls it while it binds the call, with stand-ins for the "
            f"arrays, which answer {ANSWERS}"
        ) from exc
    except Exception as exc:
        raise KernelCallValueError(f"{what} raised {type(exc).__name__}: {exc}") from exc


def prune_configs(
    spec: PruneSpec, configs: Sequence[Any], named_args: Mapping[str, Any], kwargs: Mapping[str, Any], signature: str
) -> list[Any]:
    """The configs ``prune_configs_by`` keeps, in the order it returns them (Triton's ``Autotuner.prune_configs``).

    Args:
        spec: The autotuner's pruning.
        configs: Copies of its ``triton.Config`` objects.
        named_args: The arguments given by position (`launch_arguments`).
        kwargs: The call's keywords and outer heuristics' values (`launch_arguments`).
        signature: The kernel's signature, for messages.

    Raises:
        KernelCallValueError: When a function raises, returns something else than configs, or prunes them all.
        KernelCallTypeError: For a ``top_k`` that is neither an int nor a fraction.
    """
    from triton import Config

    pruned = list(configs)
    if spec.early_config_prune is not None:
        returned = _call_user_function(
            f"prune_configs_by['early_config_prune'] of {signature}",
            spec.early_config_prune,
            list(configs),
            dict(named_args),
            **kwargs,
        )
        if returned is None or isinstance(returned, (str, bytes)) or not isinstance(returned, (list, tuple)):
            raise KernelCallValueError(
                f"prune_configs_by['early_config_prune'] of {signature} returned {returned!r}; it must return a "
                "list of triton.Config"
            )
        if not all(isinstance(config, Config) for config in returned):
            raise KernelCallValueError(
                f"prune_configs_by['early_config_prune'] of {signature} returned {list(returned)!r}; it must return "
                "a list of triton.Config"
            )
        if not returned:
            raise KernelCallValueError(
                f"prune_configs_by['early_config_prune'] of {signature} pruned every config; it should return at "
                "least one"
            )
        pruned = list(returned)
    if spec.perf_model is None:
        return pruned
    top_k = spec.top_k
    if isinstance(top_k, float) and top_k <= 1.0:
        top_k = max(1, int(len(pruned) * top_k))
    elif isinstance(top_k, bool) or not isinstance(top_k, int):
        raise KernelCallTypeError(
            f"prune_configs_by['top_k'] of {signature} is {top_k!r}; it must be an int or a float of at most 1.0"
        )
    if len(pruned) <= top_k:
        return pruned
    estimates = []
    for config in pruned:
        arguments = {**named_args, **kwargs, **config.all_kwargs()}
        estimates.append(
            _call_user_function(f"prune_configs_by['perf_model'] of {signature}", spec.perf_model, **arguments)
        )
    order = sorted(range(len(pruned)), key=lambda i: estimates[i])
    return [pruned[i] for i in order[:top_k]]


class _HookArguments(dict):  # type: ignore[type-arg]
    """The dict a hook is called with: read freely, never written."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise HookEffectError("changes the dict of arguments it was given")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _refuse  # type: ignore[assignment]


def hook_block_shapes(
    hooks: Sequence[tuple[str, Callable[..., Any]]],
    named_args: Mapping[str, Any],
    descriptors: Mapping[str, Any],
    values: Mapping[str, Any],
    label: str,
    signature: str,
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Runs one config's hooks on stand-ins and returns the block shapes they set, by descriptor leaf name.

    A hook that sets nothing for this call runs and is done with: Triton's fused-attention tutorial returns from
    its hook at once when the kernel makes its descriptors itself (its arguments are then arrays), so the same
    kernel runs with host descriptors or without.

    Args:
        hooks: ``(what, hook)`` pairs in Triton's order: the config's ``pre_hook``, the autotuner's ``pre_hook``,
            its ``post_hook`` (called with ``exception=None``).
        named_args: `named_arguments` (their descriptor stand-ins are replaced by fresh ones here).
        descriptors: Descriptor leaf name to its static description, for every descriptor argument.
        values: The config's metaparameters and options (``BLOCK_M``, ``num_warps``...).
        label: The config, for messages.
        signature: The kernel's signature, for messages.

    Raises:
        NotImplementedError: For a hook that does anything but set ``block_shape`` on descriptors (or raises).
        KernelCallValueError: For a hook that sets a block shape that is not a list of ints.
    """
    fresh: dict[str, DescriptorStandIn] = {}

    def renew(name: str, value: Any) -> Any:
        if isinstance(value, DescriptorStandIn):
            leaf = value._name
            fresh[leaf] = stand_in_for(leaf, None, descriptors[leaf])
            return fresh[leaf]
        if isinstance(value, tuple):
            return tuple(renew(name, item) for item in value)
        return value

    arguments = _HookArguments({name: renew(name, value) for name, value in named_args.items()})
    dict.update(arguments, values)
    for what, hook in hooks:
        try:
            if what.endswith("post_hook"):
                hook(arguments, exception=None)
            else:
                hook(arguments)
        except HookEffectError as exc:
            raise NotImplementedError(f"{what} of {signature} (config [{label}]) {exc}: {ALLOWED_HOOKS}") from None
        except KernelCallValueError:
            raise
        except Exception as exc:
            raise NotImplementedError(
                f"{what} of {signature} (config [{label}]) raised {type(exc).__name__}: {exc}. {ALLOWED_HOOKS}"
            ) from exc
    written = []
    for leaf, stand_in in fresh.items():
        block = stand_in.written_block_shape()
        if block is not None and block != tuple(descriptors[leaf].block_shape):
            written.append((leaf, block))
    return tuple(written)


def config_copy(config: Any) -> Any:
    """A copy of a ``triton.Config`` that a user function may change without changing the autotuner's."""
    made = copy.copy(config)
    made.kwargs = dict(config.kwargs)
    return made
