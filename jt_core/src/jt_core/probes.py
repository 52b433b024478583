"""What Triton's own front end says of a bound call, asked where only the kernel's code can tell: a 0-d array bound
to a parameter the kernel uses as a number (`refuse_traced_scalars`), a whole-number float constexpr the
kernel needs as an int (`refuse_float_sizes`), ``None`` for a parameter the kernel uses unconditionally
(`refuse_needed_nones`). Each refuses the call with the fix; the front end's verdicts
are remembered per kernel and specialisation."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jt_core import frontend, memory
from jt_core.call import INPUT, SCALAR, KernelCall, KernelDialect, KernelParam, Specialization
from jt_core.configs import KernelWrappers
from jt_core.dtypes import triton_scalar_type
from jt_core.errors import KernelCallTypeError
from jt_core.plugin.roles import invoke
from jt_core.plugin.values import Target

__all__ = ["refuse_float_sizes", "refuse_needed_nones", "refuse_traced_scalars"]


#: The target the front end probes kernels for (its code generation is the CUDA backend's; see ``frontend``).
_PROBE_TARGET = Target(platform="cuda", arch=90, warp_size=32)


def refuse_traced_scalars(call: KernelCall, signature: str) -> None:
    """Refuses a 0-d array bound to a parameter the kernel uses as a number.

    A Python number given to a ``jax.jit`` function arrives as a 0-d array, which binds to a pointer parameter
    like any array. Whether the kernel treats the parameter as a pointer or a number is only in the kernel's
    code, so the kernel's own front end decides: when it refuses the call as bound and accepts it with that
    argument passed as a scalar of the array's dtype, the argument was meant as a scalar. Calls without 0-d
    array operands never run the probe; verdicts are remembered per kernel and specialisation.
    """
    zero_d = [
        slot
        for slot in call.slots
        if slot.kind == INPUT
        and slot.descriptor is None
        and len(slot.path) == 1
        and tuple(call.operand_avals[slot.index].shape) == ()
    ]
    if not zero_d:
        return
    spec = call.specialization(call.configs[0])
    for slot in zero_d:
        dtype = np.dtype(call.operand_avals[slot.index].dtype)
        refused = _probe(call.dialect, call.fn, spec, slot.name, slot.path, triton_scalar_type(dtype))
        if refused is not None:
            raise KernelCallTypeError(
                f"argument {slot.name!r} of kernel {signature} is a 0-d {dtype} array, which a kernel receives as a "
                f"pointer, but the kernel uses {slot.name} as a number: Triton refuses the kernel with a pointer there "
                f"({refused}) and accepts it with a scalar. Scalars must be static Python numbers, and a number "
                "passed into jax.jit becomes a traced 0-d array: mark that argument static (jax.jit(f, "
                "static_argnums=...) or static_argnames=...) or pass int(...)/float(...) of a concrete value. To "
                f"pass a value computed on the device instead, keep the 0-d array and read it in the kernel with "
                f"tl.load({slot.name})"
            )


#: What a parameter given ``None`` is tried as, to tell whether the kernel needs a value there: an array, or a number.
_STAND_INS = (("*fp32", "an array"), ("*i32", "an array"), ("fp32", "a number"), ("i32", "a number"))


def refuse_needed_nones(call: KernelCall, signature: str) -> None:
    """Refuses ``None`` for a parameter that the kernel uses whatever its value (it loads through it, say).

    ``None`` is a constant the kernel may test (``if w_ptr is not None:``); whether the kernel guards every use
    is only in its code, so the front end decides: when it refuses the call as bound and accepts it with that
    parameter given an array (or a number) instead, the kernel needs one there. Calls without ``None`` never run
    the probe; verdicts are remembered per kernel and specialisation.

    Raises:
        KernelCallTypeError: Naming the parameter, what the kernel needs there, the front end's words and the fix.
    """
    nones = [slot for slot in call.slots if slot.kind == SCALAR and slot.value is None]
    if not nones:
        return
    spec = call.specialization(call.configs[0])
    refused = _refusal(call.dialect, call.fn, spec)
    if refused is None:
        return
    for slot in nones:
        constexprs = {path: value for path, value in spec.constexprs.items() if path != slot.path}
        for type_str, needed in _STAND_INS:
            signature_with = _with_leaf_type(spec.signature, call, slot.path, type_str)
            given = Specialization(signature=signature_with, constexprs=constexprs, attrs=spec.attrs)
            if _refusal(call.dialect, call.fn, given) is None:
                raise KernelCallTypeError(
                    f"argument {slot.name!r} of kernel {signature} is None, but the kernel uses {slot.name} where it "
                    f"needs {needed}: Triton refuses the kernel with None there ({refused}) and accepts it with "
                    f"{needed}. Pass {needed} for {slot.name}, or guard its uses in the kernel (if {slot.name} is "
                    "not None: ..., or a constexpr flag set from it)"
                )


def _with_leaf_type(signature: Mapping[str, Any], call: KernelCall, path: tuple[int, ...], type_str: str) -> dict:
    """``signature`` with the leaf at ``path`` typed ``type_str`` (inside its tuple, for a tuple parameter)."""
    name = call.params[path[0]].name
    changed = dict(signature)

    def replace(value: Any, rest: tuple[int, ...]) -> Any:
        if not rest:
            return type_str
        items = list(value)
        items[rest[0]] = replace(items[rest[0]], rest[1:])
        return type(value)(items)

    changed[name] = replace(signature[name], path[1:])
    return changed


def _whole_float(value: Any) -> bool:
    return isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer()


def refuse_float_sizes(
    call: KernelCall, signature: str, wrappers: KernelWrappers, user_meta: Mapping[str, Any]
) -> None:
    """Refuses a whole-number float (``BLOCK=64.0``) for a constexpr parameter the kernel needs as an int.

    A float constexpr can be right (a factor the kernel multiplies by); whether the kernel needs an int there (a
    ``tl.arange`` bound, a block shape, a ``range`` step) is only in its code, so Triton's front end decides: when
    it refuses a configuration and accepts it with those floats given as ints, they were meant as ints. Calls
    without whole-number float constexprs never run the probe; verdicts are remembered.
    """
    for config in call.configs:
        floats = {name: value for name, value in config.constexprs if _whole_float(value)}
        if not floats:
            continue
        spec = call.specialization(config)
        verdict = _float_probe(call.dialect, call.fn, call.params, spec, tuple(floats))
        if verdict is None:
            continue
        names, refused = verdict
        fixes = "; ".join(_int_fix(name, floats[name], wrappers, user_meta) for name in names)
        shown = ", ".join(f"{name}={floats[name]!r}" for name in names)
        as_ints = ", ".join(f"{name}={int(floats[name])}" for name in names)
        raise KernelCallTypeError(
            f"constexpr {shown} of kernel {signature} is a float, but the kernel uses it where Triton needs an int: "
            f"Triton refuses the kernel with {shown} ({refused}) and accepts it with {as_ints}. {fixes}"
        )


def _int_fix(name: str, value: Any, wrappers: KernelWrappers, user_meta: Mapping[str, Any]) -> str:
    """How to give ``name`` as an int, said for where its float came from."""
    whole = int(value)
    if name in user_meta:
        return f"pass {name}={whole}"
    if any(heuristic == name for heuristic, _ in wrappers.heuristics):
        return (
            f"the @triton.heuristics function for {name} returned {value!r}: return an int (int(...), or // "
            "for division)"
        )
    if any(name in dict(config.kwargs) for config in wrappers.configs):
        return f"a triton.Config sets {name}={value!r}: write {name}={whole}"
    return f"its default in the kernel's signature is {value!r}: write {name}: tl.constexpr = {whole}"


#: The front end's answers, by kernel (held weakly), dialect and specialisation (`jt_core.memory`).
_refusals: memory.BoundedStore[tuple[Any, ...], tuple[str | None]] = memory.BoundedStore("front-end refusals")
memory.mourn_in(_refusals)


def _refusal(dialect: KernelDialect, fn: Any, spec: Specialization) -> str | None:
    """Triton's front end's refusal of the kernel specialised as ``spec`` (`jt_core.frontend.refusal`), or
    ``None`` when it accepts it; remembered per kernel and specialisation, for every probe below."""
    key = (memory.kernel_key(fn), dialect.name, spec.key())
    known = _refusals.get(key)
    if known is None:
        refusal = frontend.refusal(invoke(dialect, "make_source", kernel=fn, specialization=spec, target=_PROBE_TARGET))
        known = _refusals.setdefault(key, (refusal,))
    return known[0]


def _float_probe(
    dialect: KernelDialect, fn: Any, params: Sequence[KernelParam], spec: Specialization, floats: tuple[str, ...]
) -> tuple[tuple[str, ...], str] | None:
    """Which of the float constexprs ``floats`` the front end needs as ints, and its refusal of ``spec``; ``None``
    when it accepts ``spec`` or refuses it with ints too."""
    refused = _refusal(dialect, fn, spec)
    if refused is None:
        return None
    paths = {p.name: (p.index,) for p in params if p.name in floats}

    def accepted(names: Sequence[str]) -> bool:
        constexprs = dict(spec.constexprs)
        for name in names:
            constexprs[paths[name]] = int(constexprs[paths[name]])
        changed = Specialization(signature=spec.signature, constexprs=constexprs, attrs=spec.attrs)
        return _refusal(dialect, fn, changed) is None

    if not accepted(floats):
        return None
    alone = tuple(name for name in floats if len(floats) > 1 and accepted([name]))
    return (alone or floats), refused


def _probe(
    dialect: KernelDialect, fn: Any, spec: Specialization, name: str, path: tuple[int, ...], scalar_type: str
) -> str | None:
    """The front end's refusal of ``spec`` when the same kernel takes parameter ``name`` as ``scalar_type``
    instead; ``None`` when the pointer is fine or the scalar is no better."""
    refused = _refusal(dialect, fn, spec)
    if refused is None:
        return None
    signature = dict(spec.signature)
    signature[name] = scalar_type
    attrs = {key: value for key, value in spec.attrs.items() if key != path}
    as_scalar = Specialization(signature=signature, constexprs=spec.constexprs, attrs=attrs)
    if _refusal(dialect, fn, as_scalar) is not None:
        return None
    return refused
