"""jt's warnings name the user's line, not jt's: the call of the jitted function (lowering happens there), or the
``triton_call`` outside ``jax.jit``; ``warnings`` filters by module and ``-W`` options read that attribution."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core.errors import CpuFallbackWarning


@triton.jit
def printing_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    tl.device_print("x", x)
    tl.store(out_ptr + offsets, x * 2)


@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 64})], key=["n"])
@triton.jit
def tuned_copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


@pytest.fixture(autouse=True)
def _hand_overs_warn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CPU_FALLBACK", "warn")


def _caught(category: type[Warning], caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, category)]


def _line_of(marker: str) -> int:
    """The line of this file that holds ``marker``."""
    source = Path(__file__).read_text().splitlines()
    return next(i + 1 for i, line in enumerate(source) if line.rstrip().endswith(f"# {marker}"))


def _printing(x: Any) -> Any:
    return jt.triton_call(x, kernel=printing_kernel, out_shape=x, grid=1, BLOCK=16)


def test_a_hand_over_warning_under_jit_names_the_call_of_the_jitted_function(capfd: pytest.CaptureFixture[str]) -> None:
    x = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    doubled = jax.jit(lambda v: _printing(v))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = doubled(x)  # jitted call
    np.testing.assert_array_equal(np.asarray(out), x * 2)
    (warning,) = _caught(CpuFallbackWarning, caught)
    assert (warning.filename, warning.lineno) == (__file__, _line_of("jitted call"))


def test_a_hand_over_warning_of_an_eager_call_names_the_triton_call(capfd: pytest.CaptureFixture[str]) -> None:
    x = np.random.default_rng(1).standard_normal(16).astype(np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = jt.triton_call(x, kernel=printing_kernel, out_shape=x, grid=1, BLOCK=16)  # eager call
    np.testing.assert_array_equal(np.asarray(out), x * 2)
    (warning,) = _caught(CpuFallbackWarning, caught)
    assert (warning.filename, warning.lineno) == (__file__, _line_of("eager call"))


def test_a_filter_on_the_users_module_applies_to_the_hand_over_warning(capfd: pytest.CaptureFixture[str]) -> None:
    x = np.random.default_rng(2).standard_normal(16).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("error", category=CpuFallbackWarning, module=__name__)
        with pytest.raises(CpuFallbackWarning, match="runs in Triton's interpreter"):
            jax.jit(lambda v: _printing(v))(x)


def test_a_skipped_config_warning_names_the_call_of_the_jitted_function() -> None:
    x = np.random.default_rng(3).standard_normal(64).astype(np.float32)
    # A fresh name: no tuning record of this machine's answers the call (the name is part of its key).
    tuned = jax.jit(
        lambda v: jt.triton_call(v, kernel=tuned_copy_kernel, out_shape=v, grid=1, n=64, name=uuid.uuid4().hex)
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = tuned(x)  # tuned call
    np.testing.assert_array_equal(np.asarray(out), x)  # BLOCK=16 leaves 48 elements unwritten: it is skipped
    (warning,) = _caught(jt.ConfigSkippedWarning, caught)
    assert "config [BLOCK=16" in str(warning.message)
    assert (warning.filename, warning.lineno) == (__file__, _line_of("tuned call"))


# The attribution walks the stack itself, so it also works where warnings.warn has no skip_file_prefixes (Python
# 3.11): a library posing as jt_core warns from two frames deep, and the warning names the script's line.
_LIBRARY = """
from errors import warn_in_user_code

def lower():
    return inner()

def inner():
    warn_in_user_code("lowered", RuntimeWarning)
"""
_SCRIPT = """
import importlib.util, sys, types, warnings
library_folder, errors_file = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("errors", errors_file)
errors = importlib.util.module_from_spec(spec)
spec.loader.exec_module(errors)
sys.modules["errors"] = errors
sys.path.insert(0, library_folder)
import jt_core
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    jt_core.lower()  # the user's line
(w,) = caught
print(w.filename == __file__, w.lineno, sys.version_info[:2])
"""


def _interpreters() -> list[str]:
    found = {sys.executable}
    for name in ("python3.11", *glob.glob(os.path.expanduser("~/.pyenv/versions/3.11*/bin/python3.11"))):
        path = shutil.which(name)
        if path:
            found.add(path)
            break
    return sorted(found)


@pytest.mark.parametrize("python", _interpreters())
def test_the_attribution_walks_the_stack_on_every_python_jt_supports(python: str, tmp_path: Path) -> None:
    library = tmp_path / "library" / "jt_core"
    library.mkdir(parents=True)
    (library / "__init__.py").write_text(textwrap.dedent(_LIBRARY))
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    errors_file = Path(jt.errors.__file__)
    ran = subprocess.run(
        [python, str(script), str(library.parent), str(errors_file)], capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    shown, line, _ = ran.stdout.split(" ", 2)
    user_line = next(i + 1 for i, text in enumerate(_SCRIPT.strip("\n").splitlines()) if "# the user's line" in text)
    assert (shown, int(line)) == ("True", user_line + 1), ran.stdout
