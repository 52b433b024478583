"""The message of a kernel that Triton's compiler refuses: one error that says where in the kernel's source, what
Triton said, which call and configuration was compiling, and what to change.

Triton's front end raises ``CompilationError`` with the kernel's source up to the line it refuses and a caret, the
line counted from the kernel's ``def``; an error inside a ``@triton.jit`` helper comes wrapped in one raised at the
call of that helper. `compile_error_message` turns that chain into the lines a Python traceback would show (the
file, the line in the file, the function and the source, from the kernel down to the helper that failed), followed
by Triton's words, what the call gave each parameter, and the fix. Triton's error stays the ``__cause__`` of jt's.
"""

from __future__ import annotations

import inspect
import re
import types
from collections.abc import Iterator
from typing import Any

from jt_core.call import INPUT, OUTPUT, SCALAR, KernelCall, LaunchConfig
from jt_core.frontend import is_front_end_error

__all__ = ["compile_error_message", "placement_hint"]


def _jit_functions(kernel: Any) -> Iterator[Any]:
    """The kernel function object and the ``@triton.jit`` helpers it reaches through its globals (``helper(...)``,
    ``module.helper(...)``), once each."""
    seen: set[int] = set()
    pending = [kernel]
    while pending:
        current = pending.pop()
        if id(current) in seen or len(seen) > 256:
            continue
        seen.add(id(current))
        yield current
        fn = getattr(current, "fn", None)
        code, scope = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
        if code is None or scope is None:
            continue
        for name in code.co_names:
            value = scope.get(name)
            found = (
                [value] if not isinstance(value, types.ModuleType) else [getattr(value, n, None) for n in code.co_names]
            )
            pending += [item for item in found if hasattr(item, "fn") and hasattr(item, "src")]


def _frame(error: Any, kernel: Any) -> str | None:
    """A ``CompilationError``'s place as a traceback line: ``File "...", line N, in name`` and the source line with
    a caret, or ``None`` when the function it names cannot be found."""
    node, src = getattr(error, "node", None), getattr(error, "src", None)
    number = getattr(node, "lineno", None)
    if not isinstance(src, str) or not isinstance(number, int):
        return None
    owner = next((f for f in _jit_functions(kernel) if getattr(f, "src", None) == src), None)
    fn = getattr(owner, "fn", None)
    try:
        lines, first = inspect.getsourcelines(fn)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return None
    # Triton counts lines from the ``def`` (decorators dropped), as its source excerpt starts there.
    start = first + next((i for i, line in enumerate(lines) if line.lstrip().startswith("def ")), 0)
    text = src.split("\n")[number - 1] if number - 1 < len(src.split("\n")) else ""
    stripped = text.lstrip()
    caret = max(0, int(getattr(node, "col_offset", 0) or 0) - (len(text) - len(stripped)))
    return (
        f'  File "{fn.__code__.co_filename}", line {start + number - 1}, in {fn.__name__}\n'  # type: ignore[union-attr]
        f"    {stripped}\n    {' ' * caret}^"
    )


def _located(error: BaseException, kernel: Any) -> tuple[list[str], str] | None:
    """The traceback lines of a ``CompilationError`` chain, outermost first, and Triton's words of the innermost;
    ``None`` when a place cannot be found."""
    frames, words = [], ""
    current: BaseException | None = error
    while current is not None and is_front_end_error(current):
        frame = _frame(current, kernel)
        if frame is None:
            return None
        frames.append(frame)
        words = str(getattr(current, "error_message", None) or "")
        if words:
            break
        current = current.__cause__  # a helper's error, wrapped in one at the helper's call
    if not words and current is not None and not is_front_end_error(current):
        words = f"{type(current).__name__}: {current}"
    return frames, words


def placement_hint(call: KernelCall) -> str:
    """For a scalar given to a parameter named as a pointer (``*_ptr``): how values reach parameters, and the
    keyword that puts the scalar where it belongs, in the kernel's own parameter name (that of a parameter not
    named as a pointer that got an array instead); else ``""``."""
    misplaced = [
        slot for slot in call.slots if slot.kind == SCALAR and slot.value is not None and slot.name.endswith("_ptr")
    ]
    if not misplaced:
        return ""
    slot = misplaced[0]
    # The parameter the scalar was meant for: one not named as a pointer that got an array in its place, else the
    # first one not named as a pointer.
    meant = next((s.name for s in call.slots if s.kind in (INPUT, OUTPUT) and "ptr" not in s.name.lower()), None)
    if meant is None:
        meant = next((p.name for p in call.params if not p.is_constexpr and "ptr" not in p.name.lower()), None)
    example = f" (here {meant}={slot.value!r})" if meant is not None else ""
    return (
        f"Parameter {slot.name!r} got a scalar ({slot.value!r}): positional values fill the kernel's parameters in "
        f"order and outputs take the parameters left over. Fix: pass scalars by keyword{example} to put them where "
        "they belong."
    )


def _undefined_name(words: str) -> str | None:
    """The name in Triton's words for a name the kernel reads and nothing defines, or ``None``."""
    found = re.search(r"NameError\('(\w+) is not defined'\)|name '(\w+)' is not defined", words)
    return None if found is None else found.group(1) or found.group(2)


def _fix(config: LaunchConfig, words: str, where: str) -> str:
    """What to change, for the refusals whose fix the message can name; else where to look."""
    name = _undefined_name(words)
    if name is not None:
        return (
            f"Fix: define {name} where the kernel can see it (a global of its module: a @triton.jit function, or a "
            f"constant as tl.constexpr), or pass it as a parameter"
        )
    if "power of 2" in words or "power of two" in words:
        odd = [
            f"{key}={value}"
            for key, value in config.constexprs
            if isinstance(value, int) and not isinstance(value, bool) and value > 0 and value & (value - 1)
        ]
        if odd:
            return (
                f"Fix: give {', '.join(odd)} a power of two (triton.next_power_of_2 rounds up): Triton's block shapes "
                "are powers of two"
            )
    return f"Fix the kernel{where}, or the call where it gives that line something the kernel does not expect"


def compile_error_message(call: KernelCall, config: LaunchConfig, target: str, error: BaseException) -> str:
    """The message of jt's `KernelCompileError` for ``error``, raised compiling configuration ``config`` of
    ``call`` for ``target`` (``"cpu"``, ``"cuda sm90"``)."""
    head = (
        f"compiling triton_call {call.name!r} (kernel {call.signature_text()}) for {target} with config "
        f"[{config.label}] failed:"
    )
    binding = f"The call gave the kernel's parameters: {call.binding_text()}."
    hint = placement_hint(call)
    located = _located(error, call.fn) if is_front_end_error(error) else None
    if located is None:
        return "\n".join([head, f"{type(error).__name__}: {error}", binding] + ([hint] if hint else []))
    frames, words = located
    place = re.search(r'File "([^"]*)", line (\d+)', frames[-1])
    where = f" at {place.group(1)}:{place.group(2)}" if place else ""
    fix = hint or f"{_fix(config, words, where)}."
    return "\n".join([head, *frames, words or type(error).__name__, binding, fix])
