"""The folders a test session writes to: its own, never the user's.

jt keeps compiled kernels, tuning winners, batching wrappers and built libraries in ``JT_CACHE_DIR`` (by default
``$XDG_CACHE_HOME/jt`` or ``~/.cache/jt``), and Triton keeps its compile cache in ``TRITON_CACHE_DIR`` (by default
``~/.triton/cache``). A test session that wrote there would leave its kernels in the user's cache, where
``python -m jt_core cpu`` lists them beside the user's own, and could serve a stale entry to a later session. So when
the plugin starts a session it points both variables at a folder of the session's (`isolate_caches`): a fresh
temporary folder, removed when the session ends, or the folder ``JT_TEST_CACHE_DIR`` names, kept between sessions
(a machine that runs the suite often keeps its built libraries and compiled kernels there). The variables are set in
the environment, so everything the session starts inherits them: pytest-xdist's workers, and the processes tests
start with ``os.environ`` as their base. A session started inside another one's folders (a worker, or pytest run by a
test) keeps them; the outer session removes them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

__all__ = ["CACHE_VARIABLES", "TEST_CACHE_VARIABLE", "isolate_caches", "restore_caches"]

#: The variable that names a folder for the suite's caches, kept between sessions (unset: a fresh folder each time).
TEST_CACHE_VARIABLE = "JT_TEST_CACHE_DIR"
#: The variables a session points at its own folders, and the subfolder each gets.
CACHE_VARIABLES = {"JT_CACHE_DIR": "jt", "TRITON_CACHE_DIR": "triton"}
#: Set to the session's folder by the session that chose it, so that a session started inside it keeps it.
_SESSION_VARIABLE = "JT_TEST_SESSION_CACHE_DIR"

_saved = pytest.StashKey[dict[str, str | None]]()
_owned = pytest.StashKey[Path | None]()


def _inside_a_session() -> bool:
    """Whether this process runs inside a session that already points the variables at its folders."""
    root = os.environ.get(_SESSION_VARIABLE)
    if not root:
        return False
    return all(os.environ.get(name) == str(Path(root) / sub) for name, sub in CACHE_VARIABLES.items())


def isolate_caches(config: pytest.Config) -> None:
    """Points ``JT_CACHE_DIR`` and ``TRITON_CACHE_DIR`` at the session's own folders (see the module's text), unless
    this session runs inside one that did (an xdist worker, or pytest started by a test)."""
    config.stash[_saved] = {}
    config.stash[_owned] = None
    if _inside_a_session():
        return
    kept = os.environ.get(TEST_CACHE_VARIABLE, "").strip()
    if kept:
        root = Path(kept).expanduser().absolute()
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    else:
        root = Path(tempfile.mkdtemp(prefix="jt-test-caches-"))
        config.stash[_owned] = root
    saved = config.stash[_saved]
    for name, sub in {**CACHE_VARIABLES, _SESSION_VARIABLE: ""}.items():
        saved[name] = os.environ.get(name)
        os.environ[name] = str(root / sub) if sub else str(root)


def restore_caches(config: pytest.Config) -> None:
    """Gives the variables back the values they had before `isolate_caches`, and removes the session's temporary
    folder."""
    for name, value in config.stash.get(_saved, {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    owned = config.stash.get(_owned, None)
    if owned is not None:
        shutil.rmtree(owned, ignore_errors=True)
