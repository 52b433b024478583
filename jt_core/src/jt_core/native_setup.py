"""Platform wheels: the setuptools commands that compile a distribution's native libraries into its wheel.

jt's C++ libraries (the CPU backend's XLA FFI handler, the CUDA and ROCm launch handlers) need no Python ABI: they are
plain shared libraries, built from a `LibrarySpec` and loaded with ``ctypes``. A wheel built
as usual is pure Python, and each library is built on the machine at first use (`jt_core.native`). With
``JT_BUILD_PLATFORM_WHEEL=1``, the ``setup.py`` of jt-core, jt-cuda and jt-rocm compiles them into the wheel instead:

* the libraries are the specs that the distribution's ``[tool.jt] native-libraries`` names in its
  ``pyproject.toml`` (``"module:attribute"``, a callable that returns the spec, as the launcher's
  ``native_library()`` does): what a library is built from stays in its spec, so a source added to a spec is
  compiled into the wheel too;
* each is compiled by `jt_core.native.build_prebuilt` into the build folder, at the place its
  `prebuilt_path` names in the installed package, with its build record;
* against the XLA FFI headers of the oldest jaxlib jt supports (jt-core's ``jaxlib>=`` floor), or of the later one a
  distribution's ``[tool.jt] native-jaxlib`` names (jt-cuda's: the oldest whose XLA FFI has the record extension),
  which must be the jaxlib of the build environment: ``setup.py`` asks for ``jax`` and ``jaxlib`` at that version,
  and for what importing jt takes, as build requirements (setuptools' ``setup_requires``, which a PEP 517 front end
  such as ``python -m build`` installs into an isolated build environment, or checks with ``--no-isolation``);
* the wheel is tagged ``py3-none-<platform>`` (the build machine's, ``linux_x86_64``); ``auditwheel repair`` then
  gives it the manylinux tag its symbols allow (``.ci/wheels.sh``).

Editable installs are left as they are: their libraries are built at first use. ``setup.py`` loads this file by its
path, before anything but setuptools is in the build environment, so at module level it imports only the standard
library; setuptools is imported when the commands are made, jt itself when the libraries are compiled. jt-cuda and
jt-rocm take this file from jt-core's sources beside them in the repository checkout, whose headers their handlers
are compiled from.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

__all__ = ["VARIABLE", "build_jaxlib", "build_requirements", "compile_libraries", "requested", "setup_arguments"]

#: The switch that makes the wheel a platform wheel with its libraries prebuilt.
VARIABLE = "JT_BUILD_PLATFORM_WHEEL"
#: The folder holding the ``jt_core`` package this file belongs to (``src`` of a checkout or an sdist).
_PACKAGES = Path(__file__).resolve().parents[1]
#: The requirement lines jt-core declares, e.g. ``jaxlib>=0.11.2``.
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:(>=|==)\s*([0-9][^,;\s]*))?")
#: What importing jt does not need from jt-core's requirements (no library spec imports Triton).
_NOT_NEEDED = {"triton"}


def requested() -> bool:
    """Whether ``JT_BUILD_PLATFORM_WHEEL`` asks for a platform wheel (unset, empty, ``0``, ``false``, ``no``,
    ``off``: no)."""
    return os.environ.get(VARIABLE, "").strip().lower() not in ("", "0", "false", "no", "off")


def setup_arguments(root: str | os.PathLike[str]) -> dict[str, Any]:
    """The keyword arguments for ``setup()`` of the distribution in the folder ``root``: none unless
    `requested`; then the build requirements and the commands that compile the libraries and tag the wheel."""
    if not requested():
        return {}
    from setuptools import Distribution
    from setuptools.command.bdist_wheel import bdist_wheel
    from setuptools.command.build_py import build_py

    folder = Path(root).resolve()

    class PlatformDistribution(Distribution):
        """A distribution whose wheel holds binaries: installed to the platform's library folder, not purelib."""

        def has_ext_modules(self) -> bool:
            return True

    class PrebuildingBuildPy(build_py):
        """``build_py``, then the distribution's native libraries compiled into the build folder (not for
        editable installs, which build them at first use)."""

        def run(self) -> None:
            super().run()
            if not self.editable_mode:
                compile_libraries(folder, Path(self.build_lib))

    class PlatformWheel(bdist_wheel):
        """``bdist_wheel`` of a wheel whose libraries need no Python ABI: tagged ``py3-none-<platform>``."""

        def get_tag(self) -> tuple[str, str, str]:
            return "py3", "none", super().get_tag()[2]

    return {
        "setup_requires": build_requirements(folder),
        "distclass": PlatformDistribution,
        "cmdclass": {"build_py": PrebuildingBuildPy, "bdist_wheel": PlatformWheel},
    }


def _jt_core_requirements() -> list[str]:
    """jt-core's requirements: from its ``pyproject.toml`` beside this file's ``src`` folder."""
    project = tomllib.loads((_PACKAGES.parent / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return list(project["dependencies"])


def build_jaxlib(root: str | os.PathLike[str] | None = None) -> str | None:
    """The jaxlib whose XLA FFI headers the native libraries of the distribution in the folder ``root`` are compiled
    against: its ``[tool.jt] native-jaxlib``, else the oldest jt supports (jt-core's ``jaxlib>=`` floor, also for
    ``root=None``); ``None`` where jt-core declares no floor."""
    if root is not None:
        config = tomllib.loads((Path(root) / "pyproject.toml").read_text(encoding="utf-8"))
        pinned = config.get("tool", {}).get("jt", {}).get("native-jaxlib")
        if pinned:
            return str(pinned)
    for line in _jt_core_requirements():
        match = _REQUIREMENT.match(line)
        if match is not None and match[1] == "jaxlib" and match[2] == ">=":
            return match[3]
    return None


def build_requirements(root: str | os.PathLike[str] | None = None) -> list[str]:
    """What compiling the libraries of the distribution in the folder ``root`` (default: jt-core's) takes in the
    build environment: jax and jaxlib at `build_jaxlib` (the jaxlib whose XLA FFI headers the libraries are compiled
    against), and jt-core's other requirements, which importing jt takes, except Triton."""
    version = build_jaxlib(root)
    wanted = []
    for line in _jt_core_requirements():
        match = _REQUIREMENT.match(line)
        if match is None or match[1].lower() in _NOT_NEEDED:
            continue
        name, operator, _ = match.groups()
        wanted.append(f"{name}=={version}" if name in ("jax", "jaxlib") and operator == ">=" else line)
    return wanted


def _check_jaxlib(root: Path) -> None:
    """Refuses a build environment whose jaxlib is not the one ``root``'s libraries are compiled against, naming both
    and the fix."""
    wanted = build_jaxlib(root)
    try:
        installed = importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        installed = "none"
    if installed != wanted:
        raise SystemExit(
            f"{VARIABLE}=1: the native libraries of {root.name} are compiled against the XLA FFI headers of jaxlib "
            f"{wanted}, but the build environment has jaxlib {installed}; build in an isolated environment "
            f"(python -m build installs jaxlib=={wanted}), or install jax=={wanted} jaxlib=={wanted} into this one"
        )


def _resolve(reference: str) -> Any:
    """The object a ``"module:attribute.attribute"`` reference names."""
    module, _, attributes = reference.partition(":")
    found: Any = importlib.import_module(module)
    for name in attributes.split("."):
        found = getattr(found, name)
    return found


def compile_libraries(root: Path, build_lib: Path) -> list[Path]:
    """Compiles the libraries that ``root``'s ``[tool.jt] native-libraries`` names into ``build_lib``, each at the
    place its spec's ``prebuilt_path`` lies in the installed package; returns their paths.

    Raises:
        SystemExit: When the build environment's jaxlib is not the one the libraries are compiled against
            (`build_jaxlib`), or a reference names no spec of the distribution's own sources (setuptools shows the
            message).
    """
    _check_jaxlib(root)
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    references = config.get("tool", {}).get("jt", {}).get("native-libraries", [])
    sources = root / "src"
    # The distribution's own sources, then the jt-core this file belongs to (the same folder for jt-core itself).
    sys.path[:0] = [str(sources), str(_PACKAGES)]
    native = importlib.import_module("jt_core.native")
    built = []
    for reference in references:
        spec = _resolve(reference)()
        if not isinstance(spec, native.LibrarySpec):
            raise SystemExit(f"[tool.jt] native-libraries: {reference!r} returned {spec!r}, not a LibrarySpec")
        try:
            relative = spec.prebuilt_path.resolve().relative_to(sources.resolve())
        except ValueError:
            raise SystemExit(
                f"[tool.jt] native-libraries: {reference!r} builds {spec.name!r} from {spec.sources[0]}, outside "
                f"{sources}: a wheel carries only its own distribution's libraries"
            ) from None
        built.append(native.build_prebuilt(spec, build_lib / relative.parent))
        print(f"jt: compiled {spec.name} into {built[-1]}", flush=True)
    return built
