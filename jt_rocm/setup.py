"""jt-rocm's build (setuptools): a pure wheel; with ``JT_BUILD_PLATFORM_WHEEL=1`` a platform wheel that carries the
ROCm launch handler prebuilt, by jt-core's ``native_setup.py`` from the repository checkout beside this folder,
whose headers the handler is compiled from (a pure wheel, from an sdist)."""

import os
import runpy
from pathlib import Path

from setuptools import setup

here = Path(__file__).resolve().parent
helper = here.parent / "jt_core" / "src" / "jt_core" / "native_setup.py"
if helper.is_file():
    setup(**runpy.run_path(str(helper))["setup_arguments"](here))
elif os.environ.get("JT_BUILD_PLATFORM_WHEEL", "0").strip().lower() not in ("", "0", "false", "no", "off"):
    raise SystemExit(
        "JT_BUILD_PLATFORM_WHEEL=1: jt-rocm's platform wheel is built from the repository checkout, where jt-core's "
        "sources lie beside it (its handler is compiled with their headers); without the variable the wheel is pure, "
        "and the handler is built at first use"
    )
else:
    setup()
