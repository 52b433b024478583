"""Which kernel parameter each argument of a ``triton_call`` fills: keywords, the two readings of positional
values, the classic and current conventions, and the error when a call fits none of them.

A keyword that names a parameter fills it: a constexpr parameter's value is a metaparameter, any other is an
operand. Positional values are then read in one of two orders, as Python binds a call:

* **operand order** (jax-triton 0.3, and jt's classic convention): the i-th value fills the i-th non-constexpr
  parameter; constexpr parameters are given by keyword or take their defaults;
* **declaration order** (jax-triton 0.4): the i-th value fills the i-th parameter, constexprs included, and a value
  that lands on a constexpr parameter becomes its metaparameter.

The two orders agree unless a positional value reaches a constexpr parameter. The non-constexpr parameters left
unfilled take the outputs: one per output (*classic*: an aliased output keeps a pointer of its own) or one per
output not aliased to an input (*current*). Operand order may end in either convention; declaration order only in
the current one, the only convention of the release that introduced it. The counts are such that at most one
reading fits a call (the declaration reading fills more operands by positional values than the operand reading
does, and the current convention leaves fewer parameters for outputs than the classic one): the one that fits
is used, and when none does the error says how many operands the kernel takes and what each reading bound.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from jt_core import _compat
from jt_core.call import CLASSIC, CURRENT, KernelParam
from jt_core.configs import check_constexpr_value
from jt_core.errors import KernelCallTypeError, short_repr
from jt_core.tensordesc import TensorDescriptor

__all__ = ["Assignment", "assign_arguments", "describe_value", "suggest"]


@dataclasses.dataclass(frozen=True)
class Assignment:
    """Where a call's arguments go.

    Attributes:
        operands: Non-constexpr parameter name to the value given for it, in signature order.
        metaparams: Constexpr parameter name to the value given for it (by keyword or, in declaration order, by
            position).
        outputs: The non-constexpr parameters left unfilled, which take the outputs, in signature order.
        convention: `CLASSIC` or `CURRENT`.
        declaration_order: Whether positional values were read in declaration order (one of them set a constexpr).
    """

    operands: dict[str, Any]
    metaparams: dict[str, Any]
    outputs: tuple[KernelParam, ...]
    convention: str
    declaration_order: bool


@dataclasses.dataclass
class _Reading:
    """Positional values read in one order: what they filled, or why they cannot be read so."""

    declaration_order: bool
    operands: dict[str, Any] = dataclasses.field(default_factory=dict)
    metaparams: dict[str, Any] = dataclasses.field(default_factory=dict)
    problem: str | None = None
    left: tuple[KernelParam, ...] = ()
    unplaced: int = 0  # outputs left without a parameter and without an alias


def assign_arguments(
    params: Sequence[KernelParam],
    signature: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    outputs: Sequence[Any],
    aliased: Collection[int],
) -> Assignment:
    """Assigns a call's positional and keyword arguments to the kernel's parameters.

    Args:
        params: The kernel's parameters.
        signature: The kernel's signature as text, for errors.
        args: The positional values.
        kwargs: The keyword values that are not ``triton_call`` options: operands and metaparameters by name.
        outputs: The outputs the call describes (objects with ``shape`` and ``dtype``).
        aliased: The indices of those aliased to an input (``input_output_aliases``' values).

    Raises:
        KernelCallTypeError: A keyword that names no parameter, a parameter given twice (``got multiple values
            for argument 'x_ptr'``), or arguments that fit no convention: the message starts with how many operands
            and outputs the kernel takes and how many the call gives, then shows what each reading bound; when the
            operands leave too few parameters for the outputs, it says how to alias them instead.
    """
    num_outputs, num_aliased = len(outputs), len(aliased)
    by_name = {p.name: p for p in params}
    keyword_operands: dict[str, Any] = {}
    keyword_meta: dict[str, Any] = {}
    for key, value in kwargs.items():
        param = by_name.get(key)
        if param is None:
            raise KernelCallTypeError(
                f"triton_call got keyword {key!r}, which is not a parameter of the kernel {signature}."
                f"{suggest(key, list(by_name))}"
            )
        if param.is_constexpr:
            check_constexpr_value(key, value, signature)
            keyword_meta[key] = value
        else:
            keyword_operands[key] = value

    nonconstexpr = [p for p in params if not p.is_constexpr]
    readings = [_read(args, nonconstexpr, keyword_operands, keyword_meta, signature, declaration_order=False)]
    if any(p.is_constexpr for p in params[: len(args)]):
        readings.append(_read(args, list(params), keyword_operands, keyword_meta, signature, declaration_order=True))
    for reading in readings:
        if reading.problem is not None:
            continue
        count = len(reading.left)
        if count == num_outputs - num_aliased:
            convention = CURRENT if reading.declaration_order or num_aliased else CLASSIC
        elif count == num_outputs and not reading.declaration_order:
            convention = CLASSIC
        else:
            reading.problem = (
                f"{count} non-constexpr parameters are left ({[p.name for p in reading.left]}) for "
                f"{_count(num_outputs, 'output')} ({num_aliased} of them aliased)"
            )
            reading.unplaced = max(num_outputs - num_aliased - count, 0)
            continue
        return Assignment(
            operands={p.name: reading.operands[p.name] for p in nonconstexpr if p.name in reading.operands},
            metaparams=reading.metaparams,
            outputs=reading.left,
            convention=convention,
            declaration_order=reading.declaration_order,
        )
    raise KernelCallTypeError(_misfit(params, signature, args, keyword_operands, readings, outputs, aliased))


def _read(
    args: Sequence[Any],
    targets: Sequence[KernelParam],
    keyword_operands: Mapping[str, Any],
    keyword_meta: Mapping[str, Any],
    signature: str,
    declaration_order: bool,
) -> _Reading:
    reading = _Reading(declaration_order, dict(keyword_operands), dict(keyword_meta))
    if len(args) > len(targets):
        kind = "parameters" if declaration_order else "non-constexpr parameters"
        reading.problem = (
            f"{len(args)} positional operands but the kernel has only {len(targets)} {kind} "
            f"({[p.name for p in targets]})"
        )
        return reading
    for position, (param, value) in enumerate(zip(targets, args)):
        if param.name in keyword_operands or param.name in keyword_meta:
            reading.problem = (
                f"got multiple values for argument {param.name!r}: positional operand {position} "
                f"({describe_value(value)}) fills it, and the keyword {param.name}= too"
            )
            return reading
        if param.is_constexpr:
            if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, (int, float, np.generic)):
                reading.problem = (
                    f"positional operand {position} ({describe_value(value)}) would set constexpr parameter "
                    f"{param.name!r}, which takes a static Python value, not an array"
                )
                return reading
            check_constexpr_value(param.name, value, signature)
            reading.metaparams[param.name] = value
        else:
            reading.operands[param.name] = value
    reading.left = tuple(p for p in targets if not p.is_constexpr and p.name not in reading.operands)
    return reading


def _misfit(
    params: Sequence[KernelParam],
    signature: str,
    args: Sequence[Any],
    keyword_operands: Mapping[str, Any],
    readings: Sequence[_Reading],
    outputs: Sequence[Any],
    aliased: Collection[int],
) -> str:
    """The error for a call no reading fits: a summary line, how to alias outputs when the operands fill the
    parameters the outputs need, then each reading's problem."""
    num_outputs, num_aliased = len(outputs), len(aliased)
    nonconstexpr = [p.name for p in params if not p.is_constexpr]
    taken = max(len(nonconstexpr) - num_outputs, 0)
    # The operands: those named by keyword, then the first others; the outputs: the parameters after them.
    free = [name for name in nonconstexpr if name not in keyword_operands]
    operand_set = set(keyword_operands) | set(free[: max(taken - len(keyword_operands), 0)])
    operand_names = ", ".join(name for name in nonconstexpr if name in operand_set)
    output_names = ", ".join(name for name in nonconstexpr if name not in operand_set)
    summary = (
        f"kernel {signature.split('(', 1)[0]} takes {_count(taken, 'operand')} ({operand_names}) and "
        f"{_count(num_outputs, 'output')} ({output_names})"
    )
    if num_aliased:
        summary += (
            f", or {_count(taken + num_aliased, 'operand')} when "
            + (
                "its aliased output has no pointer parameter of its own"
                if num_aliased == 1
                else f"its {num_aliased} aliased outputs have no pointer parameters of their own"
            )
            + " (current convention)"
        )
    summary += f"; the call gives {_count(len(args) + len(keyword_operands), 'operand')}"
    if keyword_operands:
        summary += f" ({len(args)} positional, {len(keyword_operands)} by keyword)"
    in_place = next((r for r in readings if r.unplaced), None)
    if in_place is not None and (
        len(keyword_operands) > taken
        or any(not _is_array(in_place.operands[name]) for name in nonconstexpr if name not in operand_set)
    ):
        # The parameters the summary would call outputs hold scalars or were named as operands: they are no
        # outputs, so say what the operands fill instead.
        summary = _filled_summary(nonconstexpr, in_place, num_outputs)
    first = readings[0]
    missing = None
    if first.problem is not None and first.problem.startswith("got multiple values"):
        lines = [f"triton_call {first.problem}. The signature is {signature}: {summary}."]
    else:
        order = {name: i for i, name in enumerate(nonconstexpr)}
        bound = sorted(first.operands.items(), key=lambda item: order[item[0]])
        bound_text = ", ".join(f"{k}={describe_value(v)}" for k, v in bound) or "nothing"
        if first.problem is not None and len(first.left) > num_outputs:
            missing = _missing_arguments(nonconstexpr, args, keyword_operands, num_outputs)
            if num_aliased and missing is not None:
                current = _missing_arguments(nonconstexpr, args, keyword_operands, num_outputs - num_aliased)
                if current is not None and current.misfit < missing.misfit:
                    other = current.other and dataclasses.replace(current.other, current=True)
                    missing = dataclasses.replace(current, current=True, other=other)
        if missing is not None:
            lines = _missing_lines(signature, missing, args, keyword_operands, free, num_outputs, num_aliased)
        else:
            lines = [f"triton_call arguments do not fit kernel {signature}: {summary}."]
        lines.append(
            f"  Positional operands in operand order (constexprs by keyword): bound {bound_text}; {first.problem}."
        )
    if in_place is not None and missing is None:
        lines.insert(1, _alias_hint(nonconstexpr, in_place, outputs, aliased))
    if len(readings) > 1:
        second = readings[1]
        problem = second.problem
        if problem is not None and second.metaparams and "parameters are left" in problem:
            problem += ", with " + ", ".join(f"{k}={describe_value(v)}" for k, v in second.metaparams.items())
        lines.append(
            "  Positional values in declaration order (a value that lands on a constexpr parameter sets it, as in "
            f"jax-triton 0.4): {problem}."
        )
    lines.append(
        "  Either every output gets a parameter (outputs appended after the inputs), or only the non-aliased ones "
        "do; constexpr parameters are given by keyword, or positionally in declaration order."
    )
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class _Missing:
    """The likeliest reading of a call that gives too few arguments: which parameters take the positional values,
    which the outputs, and which are left without a value.

    Attributes:
        missing: The parameters no argument fills, in signature order.
        outputs: The parameters the outputs take.
        positional: Parameter name to the index of the positional value that fills it.
        alternatives: Other parameters that are as likely to be the missing ones (the names and values of the
            arguments do not tell them apart; positional values then fill the earliest parameters).
        misfit: How badly the arguments fit this reading (0: not at all badly).
        current: Whether aliased outputs have no parameter of their own in this reading (the current convention).
        other: The next likeliest reading when it leaves other parameters without a value and fits almost as well
            (it differs only in what the names weakly suggest: that outputs come last, that an integer is a
            count), so that the error gives both and the fix for each.
    """

    missing: tuple[str, ...]
    outputs: tuple[str, ...]
    positional: dict[str, int]
    alternatives: tuple[str, ...]
    misfit: float = 0.0
    current: bool = False
    other: _Missing | None = None


#: How much worse than the likeliest reading another may fit and still be offered beside it: less than one
#: output on a parameter not named like an output.
_NEAR = 0.5


#: The most readings of a call with too few arguments that are weighed against each other.
_MAX_READINGS = 20000


def _pointer_name(name: str) -> bool:
    """Whether a parameter's name says it takes a pointer (``x_ptr``, ``out_pointer``, ``a_desc``)."""
    lowered = name.lower()
    return "ptr" in lowered or "pointer" in lowered or lowered.endswith(("_p", "_desc"))


def _size_name(name: str) -> bool:
    """Whether a parameter's name says it takes a count or a stride (``n``, ``N``, ``n_cols``, ``stride_xm``)."""
    lowered = name.lower()
    return (
        lowered in ("n", "m", "k", "size", "length", "numel")
        or lowered.startswith(("n_", "num_", "stride"))
        or lowered.endswith(("_size", "_len", "_numel", "_elements", "_stride"))
    )


def _output_name(name: str) -> bool:
    """Whether a parameter's name says it takes an output (``out_ptr``, ``dst``, ``result``)."""
    lowered = name.lower()
    return any(word in lowered for word in ("out", "dst", "result"))


def _missing_arguments(
    nonconstexpr: Sequence[str], args: Sequence[Any], keyword_operands: Mapping[str, Any], num_outputs: int
) -> _Missing | None:
    """Which parameters a call that gives too few arguments leaves without one, or ``None`` when it gives enough.

    Every way of placing the positional values (in order), the outputs and the gaps on the parameters not named by
    keyword is weighed: an array on a parameter whose name says pointer and a scalar on one whose name does not fit
    (when the kernel's names tell the two apart), a float does not fit a parameter named like a count or a stride
    (``n``, ``n_cols``, ``stride_xm``) and an integer fits one better than another scalar, an output fits a
    pointer's name and better one named like an output (``out``, ``dst``, ``result``), and outputs fit best after
    the operands (the classic convention). Among the readings that fit best, positional values on the earliest
    parameters come first.
    """
    free = [name for name in nonconstexpr if name not in keyword_operands]
    gaps = len(free) - len(args) - num_outputs
    if gaps <= 0:
        return None
    pointers = {name: _pointer_name(name) for name in nonconstexpr}
    named_apart = len(set(pointers.values())) == 2  # some names say pointer, some do not
    output_like = any(_output_name(name) for name in free)
    sized = any(_size_name(name) for name in free)
    if math.comb(len(free), num_outputs) * math.comb(len(free) - num_outputs, gaps) > _MAX_READINGS:
        return _Missing(
            missing=tuple(free[len(args) : len(args) + gaps]),
            outputs=tuple(free[len(args) + gaps :]),
            positional={name: i for i, name in enumerate(free[: len(args)])},
            alternatives=(),
        )
    scored = []
    for outs in itertools.combinations(range(len(free)), num_outputs):
        rest = [i for i in range(len(free)) if i not in outs]
        for holes in itertools.combinations(rest, gaps):
            filled = [i for i in rest if i not in holes]
            cost = 0.0
            if named_apart:
                cost += sum(_is_array(args[k]) != pointers[free[i]] for k, i in enumerate(filled))
                cost += sum(not pointers[free[i]] for i in outs)
            if output_like:
                cost += 0.5 * sum(not _output_name(free[i]) for i in outs)
                cost += 0.5 * sum(_output_name(free[i]) for i in holes)
            cost += 0.25 * sum(any(j > i for j in rest) for i in outs)  # outputs usually come last
            if sized:  # a float is no count; an integer is likelier one than another scalar
                for k, i in enumerate(filled):
                    if isinstance(args[k], (float, np.floating)) and _size_name(free[i]):
                        cost += 1
                    elif _is_integer(args[k]) and not pointers[free[i]] and not _size_name(free[i]):
                        cost += 0.25
            scored.append((cost, [-i for i in outs], [-i for i in holes], outs, holes, filled))
    scored.sort(key=lambda entry: entry[:3])
    cost, _, _, outs, holes, filled = scored[0]
    chosen = {free[i] for i in holes}
    others = {free[i] for entry in scored if entry[0] == cost for i in entry[4]} - chosen
    near = next((e for e in scored[1:] if e[0] - cost < _NEAR and {free[i] for i in e[4]} != chosen), None)
    return _Missing(
        missing=tuple(free[i] for i in holes),
        outputs=tuple(free[i] for i in outs),
        positional={free[i]: k for k, i in enumerate(filled)},
        alternatives=tuple(name for name in free if name in others),
        misfit=cost,
        other=None
        if near is None
        else _Missing(
            missing=tuple(free[i] for i in near[4]),
            outputs=tuple(free[i] for i in near[3]),
            positional={free[i]: k for k, i in enumerate(near[5])},
            alternatives=(),
            misfit=near[0],
        ),
    )


def _missing_lines(
    signature: str,
    found: _Missing,
    args: Sequence[Any],
    keyword_operands: Mapping[str, Any],
    free: Sequence[str],
    num_outputs: int,
    num_aliased: int,
) -> list[str]:
    """The head of the error for a call that gives too few arguments: what is missing, how the arguments read, and
    how to give what is missing."""
    count = len(found.missing)
    names = ", ".join(found.missing)
    head = f"triton_call is missing {_count(count, 'argument')} of kernel {signature}: {names}"
    if found.alternatives:
        head += (
            f" (or {', '.join(found.alternatives)}: the arguments' names and values fit either, and positional values "
            "fill the earliest parameters first)"
        )
    elif found.other is not None:
        head += f" (or {', '.join(found.other.missing)}: the call reads two ways, each below with its fix)"
    if found.other is None:
        best = "  The arguments read best as" if found.positional or keyword_operands else "  The call gives"
        lines = [f"{head}.", _reading_line(best, found, args, keyword_operands, num_aliased)]
    else:
        lines = [
            f"{head}.",
            _reading_line("  One reading:", found, args, keyword_operands, num_aliased),
            _reading_line("  The other reading:", found.other, args, keyword_operands, num_aliased),
        ]
    in_order = list(free[: len(args)])
    placed = list(found.positional)
    if placed != in_order:
        later = placed[next(k for k, (a, b) in enumerate(zip(placed, in_order)) if a != b) :]
        lines.append(
            f"  {'In the first reading, p' if found.other is not None else 'P'}ositional values fill the "
            f"non-constexpr parameters in order ({', '.join(in_order)}): pass "
            f"{', '.join(later)} by keyword too ({', '.join(f'{name}=...' for name in later)})."
        )
    last_bound = max((free.index(name) for name in found.positional), default=-1)
    # Pointers left after every bound operand (or named like outputs) may be outputs out_shape leaves out.
    pointers = all(_pointer_name(name) or _output_name(name) for name in found.missing)
    if pointers and any(_output_name(name) or free.index(name) > last_bound for name in found.missing):
        lines.append(
            f"  If {names} {'takes an output' if count == 1 else 'take outputs'}, out_shape (or out_type) describes "
            f"{_count(num_outputs, 'output')} and needs {num_outputs + count}."
        )
    one = num_aliased == 1
    its = "its aliased output" if one else f"its {num_aliased} aliased outputs"
    if num_aliased and not found.current:
        lines.append(
            f"  If {its} {'has' if one else 'have'} no pointer parameter of {'its' if one else 'their'} own (current "
            f"convention), {_count(count + num_aliased, 'argument')} {'is' if count + num_aliased == 1 else 'are'} "
            "missing."
        )
    elif found.current and count > num_aliased:
        rest = count - num_aliased
        lines.append(
            f"  If {its} {'has' if one else 'have'} a pointer parameter of {'its' if one else 'their'} own (classic "
            f"convention), {_count(rest, 'argument')} {'is' if rest == 1 else 'are'} missing."
        )
    return lines


def _reading_line(
    opening: str, found: _Missing, args: Sequence[Any], keyword_operands: Mapping[str, Any], num_aliased: int
) -> str:
    """One reading of a call that gives too few arguments: what each argument fills, which parameters the outputs
    take, what is left without a value, and how to give it."""
    bound = [f"{name}={describe_value(args[index])} (positional {index})" for name, index in found.positional.items()]
    bound += [f"{name}={describe_value(value)} (keyword)" for name, value in keyword_operands.items()]
    reading = f"{opening} {', '.join(bound) or 'no operand'}"
    if found.outputs:
        taken = "takes" if len(found.outputs) == 1 else "take"
        outputs = _count(len(found.outputs), "output" if not found.current else "output not aliased")
        reading += f", and its {outputs} (out_shape/out_type) {taken} {', '.join(found.outputs)}"
    if found.current:
        writes = "writes" if num_aliased == 1 else "write"
        reading += f", and its {_count(num_aliased, 'aliased output')} {writes} through the input's pointer"
    count, names = len(found.missing), ", ".join(found.missing)
    given = ", ".join(f"{name}=..." for name in found.missing)
    return f"{reading}; nothing is given for {names}. Give {'it' if count == 1 else 'them'} by keyword ({given})."


def _filled_summary(nonconstexpr: Sequence[str], reading: _Reading, num_outputs: int) -> str:
    """``its 3 non-constexpr parameters take the operands and outputs, and the call's 3 operands (...) fill them
    all, leaving none for the 1 output``."""
    filled = [name for name in nonconstexpr if name in reading.operands]
    left = [p.name for p in reading.left]
    leaving = f"leaving {len(left)} ({', '.join(left)})" if left else "leaving none"
    of_them = f"{len(filled)} of them" if left else "them all"
    return (
        f"its {_count(len(nonconstexpr), 'non-constexpr parameter')} take the operands and outputs, and the call's "
        f"{_count(len(filled), 'operand')} ({', '.join(filled)}) fill {of_them}, {leaving} for the "
        f"{_count(num_outputs, 'output')}"
    )


def _alias_hint(
    nonconstexpr: Sequence[str], reading: _Reading, outputs: Sequence[Any], aliased: Collection[int]
) -> str:
    """How to alias the outputs the reading leaves without a parameter to operands of their shape and dtype."""
    # Operand indices as input_output_aliases counts them (the current convention): every flattened operand.
    leaves = [leaf for name in nonconstexpr if name in reading.operands for leaf in _flat(reading.operands[name], name)]
    suggested: dict[int, int] = {}
    unmatched: list[int] = []
    for out_index, out in enumerate(outputs):
        if out_index in aliased or len(suggested) + len(unmatched) == reading.unplaced:
            continue
        match = next((i for i, (_, v) in enumerate(leaves) if i not in suggested and _same_type(v, out)), None)
        if match is None:
            unmatched.append(out_index)
        else:
            suggested[match] = out_index
    writes = "writes its output" if len(outputs) == 1 else "writes outputs"
    if not unmatched:
        pairs = "; ".join(
            f"{leaves[i][0]}, {describe_value(leaves[i][1])}, has the shape and dtype of output {o}"
            for i, o in suggested.items()
        )
        mapping = ", ".join(f"{i}: {o}" for i, o in suggested.items())
        return (
            f"  If the kernel {writes} in place, through an operand's pointer, say which: "
            f"input_output_aliases={{{mapping}}} ({pairs}); an aliased output needs no parameter of its own."
        )
    missing = unmatched[0]
    return (
        f"  If the kernel {writes} in place, through an operand's pointer, give input_output_aliases="
        f"{{operand index: output index}}; but no operand has the shape and dtype of output {missing} "
        f"({describe_value(outputs[missing])}), so none can be aliased to it: check out_shape, or the kernel "
        "needs a parameter for that output."
    )


def _is_integer(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_array(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, (int, float, np.generic))


def _flat(value: Any, name: str) -> list[tuple[str, Any]]:
    """The leaves of an operand (tuple parameters hold several) with readable names."""
    if isinstance(value, tuple) and not hasattr(value, "shape"):
        return [leaf for i, item in enumerate(value) for leaf in _flat(item, f"{name}[{i}]")]
    return [(name, value)]


def _same_type(value: Any, out: Any) -> bool:
    """Whether an operand could be aliased to ``out``: an array of its shape and dtype."""
    if not _is_array(value) or isinstance(value, TensorDescriptor):
        return False
    if _compat.is_ref(value):
        return False  # a Ref is updated in place already
    try:
        return tuple(value.shape) == tuple(out.shape) and np.dtype(value.dtype) == np.dtype(out.dtype)
    except TypeError:
        return False


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def describe_value(value: Any) -> str:
    """A short description of an argument for messages: ``float32[20]`` for arrays, a cut repr otherwise."""
    if isinstance(value, TensorDescriptor):
        return repr(value)
    if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, (int, float, complex, bool)):
        try:
            return f"{value.dtype}{list(value.shape)}"
        except TypeError:
            pass
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return "(" + ", ".join(describe_value(v) for v in value[:4]) + (", ...)" if len(value) > 4 else ")")
    return short_repr(value)


def suggest(name: str, candidates: Sequence[str]) -> str:
    """`` Did you mean 'BLOCK'?`` for a close match among ``candidates``, else an empty string."""
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""
