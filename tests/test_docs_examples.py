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
EXAMPLE_PLUGIN = DOCS / "examples" / "jt_example_backend"
GPU_ONLY = "<!-- gpu-only -->"
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)


@dataclasses.dataclass(frozen=True)
class CodeBlock:
    page: str
    line: int
    source: str
    gpu_only: bool


def _load_hooks():
    spec = importlib.util.spec_from_file_location("jt_docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOKS = _load_hooks()


def python_blocks(page: Path) -> list[CodeBlock]:
    """The ``python`` fenced blocks of a page, with their first line number and the gpu-only flag.

    ``<!-- include: PATH -->`` markers are expanded first, as the site build does.
    """
    text = HOOKS.on_page_markdown(page.read_text(encoding="utf-8"))
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
    # The example plugin's package, for pages that show its tests (which import it); not installed, so jt does
    # not see it as a plugin.
    sys.path.insert(0, str(EXAMPLE_PLUGIN / "src"))
    try:
        for block in python_blocks(page):
            if not block.gpu_only:
                run_block(block, namespace)
                ran += 1
    finally:
        sys.path.remove(str(EXAMPLE_PLUGIN / "src"))
    return ran


def run_block(block: CodeBlock, namespace: dict[str, object]) -> None:
    """Executes one block in ``namespace``, with its source findable by ``inspect`` (``@triton.jit`` needs it)."""
    filename = f"<docs/pages/{block.page}:{block.line}>"
    padded = "\n" * (block.line - 1) + block.source
    linecache.cache[filename] = (len(padded), None, padded.splitlines(keepends=True), filename)
    exec(compile(padded, filename, "exec"), namespace)


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


PAGES_WITH_CODE = [p for p in PAGE_FILES if any(not b.gpu_only for b in python_blocks(p))]


def test_guide_pages_have_executed_examples() -> None:
    names = {p.name for p in PAGES_WITH_CODE}
    for expected in ("getting-started.md", "calling-conventions.md", "plugins.md", "writing-a-backend.md"):
        assert expected in names


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=[p.name for p in PAGES_WITH_CODE])
def test_code_blocks_run_on_cpu(page: Path) -> None:
    assert run_page(page) == sum(not b.gpu_only for b in python_blocks(page))


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
