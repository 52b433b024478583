"""A failed compile's error keeps nothing of Triton's compiler alive: its tracebacks end where they enter Triton
(whose frames stay readable in a note, except those of a front-end error, whose message says where in the kernel),
so keeping the error does not keep the code generator and its IR. The Gluon suite checks what this prevented:
Triton's bindings reporting leaked objects at exit."""

from __future__ import annotations

import gc
import traceback

import core_kernels as k
import jax
import jax.numpy as jnp
import pytest

import jt_core as jt


def _chain(error: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is not None and all(current is not seen for seen in found):
            found.append(current)
            pending += [current.__cause__, current.__context__]
    return found


def _compile_error() -> jt.errors.KernelCompileError:
    x = jnp.zeros(8, jnp.float32)
    with pytest.raises(jt.errors.KernelCompileError, match="name_defined_nowhere") as info:
        jax.jit(lambda x: jt.triton_call(x, kernel=k.unknown_name_kernel, out_shape=x, grid=(1,), BLOCK=8))(x)
    return info.value


def test_a_kept_compile_error_holds_no_code_generator() -> None:
    kept = _compile_error()
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o).__name__ == "CodeGenerator"]
    frames = [
        frame.f_globals.get("__name__", "")
        for error in _chain(kept)
        for frame, _ in traceback.walk_tb(error.__traceback__)
    ]
    assert not [name for name in frames if name.partition(".")[0] == "triton"]


def test_a_front_end_error_prints_no_frames_of_triton_s_code_generator() -> None:
    """Triton's own error stays the cause, with its message (which locates the refusal in the kernel's source) and
    no traceback: its frames are the code generator's recursion over the kernel, a hundred lines of nothing the
    caller can act on."""
    kept = _compile_error()
    cause = kept.__cause__
    while cause is not None and type(cause).__name__ != "CompilationError":  # JAX's stack trace of the call between
        cause = cause.__cause__
    assert cause is not None and cause.__traceback__ is None and not getattr(cause, "__notes__", None)
    printed = "".join(traceback.format_exception(kept))
    assert "name_defined_nowhere" in printed and "code_generator.py" not in printed


def test_frames_of_an_error_inside_triton_are_kept_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """With Triton's front-end debugging on, the code generator raises the kernel's own error (a ``NameError``)
    from its frames instead of a ``CompilationError``: those frames, which then say where, stay readable."""
    import triton

    monkeypatch.setattr(triton.knobs.compilation, "front_end_debugging", True)
    kept = _compile_error()
    assert any(isinstance(error, NameError) for error in _chain(kept))
    notes = "\n".join(note for error in _chain(kept) for note in getattr(error, "__notes__", ()))
    assert "Triton's frames of this error" in notes and "code_generator.py" in notes
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o).__name__ == "CodeGenerator"]
