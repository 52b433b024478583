"""Environment switches: every variable jt reads, parsed one way.

Each switch is read when it is used (not cached at import), so tests and long-running programs may change it.

Flags (``flag``) are off when unset, empty or one of ``0``, ``false``, ``no``, ``off`` (any case); any other value
turns them on. Flags that default to on are turned off by those same values. Lists (``names``) are
comma-separated; an empty value is an empty list, which differs from an unset variable.

The variables:

============================ ===============================================================================
``JT_CACHE_DIR``             the per-machine cache folder (default ``$XDG_CACHE_HOME/jt`` or ``~/.cache/jt``)
``JT_DISABLE_CACHE``         flag: neither read nor write compiled kernels and tuning winners on disk
``JT_CACHE_MAX_BYTES``       size bound of the compiled-kernel cache (default 2 GiB)
``JT_MEMORY_CACHE_ENTRIES``  entries each in-memory store keeps (default 1024; `jt_core.memory`)
``JT_COMPILE_WORKERS``       threads compiling the configurations of one call (default: one per core)
``JT_LOAD_PLUGINS``          list: load only these plugins (empty: none but the builtins)
``JT_DISABLE_PLUGINS``       list: never load these plugins
``JT_TRACE_PLUGINS``         flag: trace plugin loading and every hook call to stderr
``JT_STRICT_PLUGINS``        flag: a plugin problem raises instead of being recorded
``JT_LAUNCHER_<P>``          the launcher of platform ``<P>`` (``JT_LAUNCHER_CUDA=jaxlib``)
``JT_CPU_BOUNDS_CHECK``      flag, on by default: the CPU backend checks every load and store address
``JT_CPU_RACE_CHECK``        flag: the CPU backend reports data races between the program instances of a launch
``JT_CPU_UNWRITTEN``         ``warn`` (default), ``error`` or ``ignore``: outputs left partly unwritten (race check)
``JT_CPU_AUTOTUNE``          flag: tune autotuned kernels on the CPU too
``JT_CPU_COMPILE_CHECK``     flag, on by default: lowering for the CPU runs Triton's front end on the kernel
``JT_DISTRIBUTED_TIMEOUT``   seconds a process of a ``jax.distributed`` job waits for another at lowering (600)
``JT_CPU_SIDE_BY_SIDE``      flag, on by default: the compiled CPU path runs a grid's programs side by side where it can
``JT_CPU_DIFFERENTIAL``      flag: every CPU call the compiled path takes also runs in the interpreter, compared
``JT_CPU_FALLBACK``          ``info`` (default), ``warn`` or ``error``: a kernel handed to the CPU interpreter
``JT_PREBUILT_NATIVE``       flag, on by default: load the native libraries a platform wheel carries prebuilt
``JT_TUNE_AHEAD``            flag, on by default: a GPU launch handler tunes an autotuned call before it is lowered
``JAX_TRITON_DUMP_DIR``      write every compiled kernel's IRs, binary and compile info under this folder
============================ ===============================================================================

Plugins read their own (``JT_CUDA_ARCH``, ``JT_ROCM_ARCH``, ``JT_CUDA_PRELOAD`` ...) through the same functions.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["DUMP_DIR", "choice", "flag", "integer", "launcher_overrides", "names", "text"]

#: The dump folder variable (the name jax-triton uses, so existing habits carry over).
DUMP_DIR = "JAX_TRITON_DUMP_DIR"

_OFF = ("", "0", "false", "no", "off")
_LAUNCHER_PREFIX = "JT_LAUNCHER_"


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def text(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's value with surrounding blanks removed; ``None`` when unset or blank."""
    value = _env(environ).get(name, "").strip()
    return value or None


def flag(name: str, default: bool = False, environ: Mapping[str, str] | None = None) -> bool:
    """A boolean switch: ``default`` when unset or blank, off for ``0``/``false``/``no``/``off``, on otherwise."""
    value = _env(environ).get(name)
    if value is None or not value.strip():
        return default
    return value.strip().lower() not in _OFF


def names(name: str, environ: Mapping[str, str] | None = None) -> list[str] | None:
    """A comma-separated list; ``None`` when unset (an empty value is an empty list)."""
    value = _env(environ).get(name)
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]


def integer(name: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    """A whole number; ``default`` when unset or blank.

    Raises:
        ValueError: For a value that is not a whole number, naming the variable.
    """
    value = text(name, environ)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name} must be a whole number, got {value!r}") from None


def choice(name: str, allowed: tuple[str, ...], environ: Mapping[str, str] | None = None) -> str:
    """One of ``allowed`` (any case); the first when unset or blank.

    Raises:
        ValueError: For any other value, naming the variable and the values it takes.
    """
    value = (text(name, environ) or allowed[0]).lower()
    if value not in allowed:
        raise ValueError(f"environment variable {name} must be one of {list(allowed)}, got {value!r}")
    return value


def launcher_overrides(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``JT_LAUNCHER_<PLATFORM>`` values by lower-case platform name (``{"cuda": "jaxlib"}``)."""
    return {
        key[len(_LAUNCHER_PREFIX) :].lower(): value.strip()
        for key, value in _env(environ).items()
        if key.startswith(_LAUNCHER_PREFIX) and value.strip()
    }
