"""The host's C++ compiler, as jt's native libraries are built with it: found (``$CXX``, else ``c++``, ``g++`` or
``clang++`` on ``PATH``), named (its command and version line), and the error when there is none or it fails."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Sequence

from jt_core import settings
from jt_core.errors import JtError

__all__ = ["NativeBuildError", "compiler_identity", "find_compiler", "jax_version"]


class NativeBuildError(JtError, RuntimeError):
    """A native library could not be built (no compiler, or the compiler failed)."""


def find_compiler() -> list[str]:
    """The C++ compiler command: ``$CXX`` if set, else the first of ``c++``, ``g++``, ``clang++`` on ``PATH``.

    Raises:
        NativeBuildError: When none is found, saying how to install one or set ``CXX``.
    """
    env = settings.text("CXX")
    if env:
        command = shlex.split(env)
        if command and shutil.which(command[0]):
            return command
        raise NativeBuildError(f"CXX={env!r} does not name an executable compiler; set CXX to a C++17 compiler")
    for candidate in ("c++", "g++", "clang++"):
        found = shutil.which(candidate)
        if found:
            return [found]
    raise NativeBuildError(
        "no C++ compiler found (looked for $CXX, c++, g++, clang++ on PATH); install one (e.g. apt-get install "
        "g++) or set CXX to a C++17 compiler"
    )


def compiler_identity(command: Sequence[str]) -> str:
    """The compiler's command and the first line of its ``--version`` (part of every built library's cache key)."""
    try:
        result = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except OSError as exc:
        raise NativeBuildError(f"C++ compiler {command[0]!r} cannot be run: {exc}") from exc
    first_line = (result.stdout or result.stderr).strip().splitlines()[:1]
    return f"{' '.join(command)} | {first_line[0] if first_line else '?'}"


def jax_version() -> str:
    """The installed jax and jaxlib versions, as a built library's cache key and a prebuilt one's record hold them."""
    import jax
    import jaxlib

    return f"jax {jax.__version__} jaxlib {getattr(jaxlib, '__version__', '?')}"
