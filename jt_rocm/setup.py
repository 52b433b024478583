"""jt-rocm's build (setuptools): a pure wheel, or, from the repository checkout, what jt-core's ``native_setup.py``
makes of it (with ``JT_BUILD_PLATFORM_WHEEL=1``, a platform wheel carrying the ROCm launch handler prebuilt)."""

import runpy
from pathlib import Path

from setuptools import setup

here = Path(__file__).resolve().parent
helper = here.parent / "jt_core" / "src" / "jt_core" / "native_setup.py"
setup(**(runpy.run_path(str(helper))["setup_arguments"](here) if helper.is_file() else {}))
