"""jt-core's build (setuptools): a pure wheel; with ``JT_BUILD_PLATFORM_WHEEL=1`` a platform wheel that carries the
CPU backend's XLA FFI handler prebuilt (``src/jt_core/native_setup.py`` says how)."""

import runpy
from pathlib import Path

from setuptools import setup

here = Path(__file__).resolve().parent
setup(**runpy.run_path(str(here / "src" / "jt_core" / "native_setup.py"))["setup_arguments"](here))
