"""Every ``python`` code block of the documentation runs on the CPU backend, and the site builds.

The blocks of one page run in order in one namespace (a page reads like a session). A block preceded by the
line ``<!-- gpu-only -->`` needs a GPU and is skipped here.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import linecache
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = DOCS / "pages"
GPU_ONLY = "<!-- gpu-only -->"
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)


@dataclasses.dataclass(frozen=True)
class CodeBlock:
    page: str
    line: int
    source: str
    gpu_only: bool


def python_blocks(page: Path) -> list[CodeBlock]:
    """The ``python`` fenced blocks of a page, with their first line number and the gpu-only flag."""
    text = page.read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        if match["lang"] != "python":
            continue
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        line = text.count("\n", 0, match.start("body")) + 1
        blocks.append(CodeBlock(page.name, line, match["body"], before == GPU_ONLY))
    return blocks


def run_page(page: Path) -> int:
    """Runs a page's CPU blocks in one namespace; returns how many ran."""
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    ran = 0
    for block in python_blocks(page):
        if block.gpu_only:
            continue
        # A file name that linecache knows, so that inspect.getsource (used by @triton.jit) finds the source.
        filename = f"<docs/pages/{block.page}:{block.line}>"
        padded = "\n" * (block.line - 1) + block.source
        linecache.cache[filename] = (len(padded), None, padded.splitlines(keepends=True), filename)
        exec(compile(padded, filename, "exec"), namespace)
        ran += 1
    return ran


PAGE_FILES = sorted(PAGES.glob("*.md"))


def test_fence_parser_finds_blocks_and_gpu_markers(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "# t\n\n```python\na = 1\n```\n\n<!-- gpu-only -->\n```python\nb = 2\n```\n\n```bash\nls\n```\n",
        encoding="utf-8",
    )
    blocks = python_blocks(page)
    assert [(b.line, b.source, b.gpu_only) for b in blocks] == [(4, "a = 1\n", False), (9, "b = 2\n", True)]


def test_every_page_is_in_the_navigation() -> None:
    config = (DOCS / "mkdocs.yml").read_text(encoding="utf-8")
    missing = [p.name for p in PAGE_FILES if f": {p.name}" not in config]
    assert not missing, f"pages missing from nav in docs/mkdocs.yml: {missing}"


@pytest.mark.parametrize("page", PAGE_FILES, ids=[p.name for p in PAGE_FILES])
def test_code_blocks_run_on_cpu(page: Path) -> None:
    blocks = python_blocks(page)
    if not any(not b.gpu_only for b in blocks):
        pytest.skip(f"{page.name} has no CPU code block")
    assert run_page(page) == sum(not b.gpu_only for b in blocks)


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings_handlers") is None:
        pytest.skip("mkdocs and mkdocstrings[python] are not installed (pip install mkdocs 'mkdocstrings[python]')")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(DOCS / "mkdocs.yml"), "-d", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    performance = (tmp_path / "performance" / "index.html").read_text(encoding="utf-8")
    assert "CPU interpreter backend" in performance, "benchmarks/RESULTS.md was not included"
    assert (tmp_path / "reference" / "index.html").read_text(encoding="utf-8").count("input_output_aliases") >= 1
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_example_plugin_passes_its_own_tests(tmp_path: Path) -> None:
    """docs/examples/jt_example_backend installs with pip and passes its own test suite."""
    source = tmp_path / "src"
    shutil.copytree(
        DOCS / "examples" / "jt_example_backend", source, ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    target = tmp_path / "site-packages"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    assert list(target.glob("jt_example_backend-*.dist-info/entry_points.txt"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])}
    env.pop("JT_LOAD_PLUGINS", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "12 passed" in result.stdout, result.stdout
