"""Every ``python`` code block of the documentation runs on the CPU backend as a reader would paste it, and the site
builds.

The blocks of one page run in order as one script, in a fresh Python process started outside the repository (a
page reads like a session; a name a block uses without importing or defining it fails). A block preceded by the
line ``<!-- not run: REASON -->`` is left out, for the reason it states (it needs a GPU, it waits for a debugger's
commands); every other ``python`` block runs. A block titled with a file of the repository
(`` ```python title="docs/examples/.../plugin.py" ``) shows that file, to the letter: it is not part of the page's
session (the file is tested where it lives), and a test fails when the two differ. After changing such a file,
``python tests/test_docs_examples.py --sync-shown-files`` copies it into every block that shows it.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import importlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = DOCS / "pages"
EXAMPLE_PLUGIN = DOCS / "examples" / "jt_example_backend"
EXAMPLE_LAUNCHER = DOCS / "examples" / "jt_example_launcher"
EXAMPLES = (EXAMPLE_PLUGIN, EXAMPLE_LAUNCHER)
#: The line before a ``python`` block that is not run, with the reason.
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>\S.*?) -->$")
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)(?P<info>[^\n]*)\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)
#: Every fence that opens a block of Python, however it is indented or spelled.
PYTHON_FENCE = re.compile(r"^(?P<indent>[ \t]*)```+ *(?P<lang>py|python|python3|pycon|ipython)\b", re.MULTILINE | re.I)
TITLE = re.compile(r'\btitle="(?P<path>[^"]+)"')
DONE = "docs-session-finished"


def _load_hooks():
    spec = importlib.util.spec_from_file_location("jt_docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOKS = _load_hooks()


@dataclasses.dataclass(frozen=True)
class CodeBlock:
    page: str
    line: int  # the line of the page where the block's body starts
    source: str
    not_run: str | None  # why the block is not run (its ``<!-- not run: REASON -->`` line), or None
    shows: str | None = None  # the repository file the block shows (its title)
    before: str = ""  # the line before the block


def fenced_blocks(page: Path) -> list[tuple[re.Match[str], CodeBlock]]:
    """Every fenced block of a page, with its first line number, why it is not run and the file it shows."""
    text = page.read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        line = text.count("\n", 0, match.start("body")) + 1
        marker = NOT_RUN.match(before)
        reason = marker["reason"] if marker else None
        blocks.append((match, CodeBlock(page.name, line, match["body"], reason, _shows(match), before)))
    return blocks


def python_blocks(page: Path) -> list[CodeBlock]:
    """The ``python`` fenced blocks of a page (see `fenced_blocks`)."""
    return [block for match, block in fenced_blocks(page) if match["lang"] == "python"]


def session_blocks(page: Path) -> list[CodeBlock]:
    """The blocks a reader runs on a machine without a GPU: neither marked not run nor a shown file."""
    return [b for b in python_blocks(page) if b.not_run is None and b.shows is None]


def shown_files(page: Path) -> list[CodeBlock]:
    """The blocks of a page, of any language, that show a file of the repository (titled with its path)."""
    return [block for _, block in fenced_blocks(page) if block.shows is not None]


def page_script(page: Path) -> str:
    """The page's session blocks as one script in which every line keeps its line number on the page."""
    lines = [""] * page.read_text(encoding="utf-8").count("\n")
    for block in session_blocks(page):
        body = block.source.splitlines()
        lines[block.line - 1 : block.line - 1 + len(body)] = body
    return "\n".join(lines) + f"\nprint({DONE!r})\n"


def sync_shown_files(page: Path) -> bool:
    """Copies each file a block of ``page`` shows into that block; returns whether the page changed."""
    text = page.read_text(encoding="utf-8")

    def synced(match: re.Match[str]) -> str:
        path = _shows(match)
        if path is None or not (ROOT / path).is_file():
            return match[0]
        start, end = match.start("body") - match.start(), match.end("body") - match.start()
        return match[0][:start] + (ROOT / path).read_text(encoding="utf-8") + match[0][end:]

    new = FENCE.sub(synced, text)
    if new != text:
        page.write_text(new, encoding="utf-8")
    return new != text


def _shows(match: re.Match[str]) -> str | None:
    """The file a fenced block shows: the path in its title (``title="PATH"``, relative to the repository root)."""
    title = TITLE.search(match["info"])
    return title["path"] if title else None


def run_page(page: Path, workdir: Path) -> subprocess.CompletedProcess[str]:
    """Runs a page's session in a fresh interpreter, in ``workdir`` (so the repository root is not on sys.path).

    The example plugins' source folders are put on the path for the pages that import them (``pip install
    ./docs/examples/jt_example_backend`` gives a reader the same), without installing them as plugins.
    """
    script = workdir / f"docs_{page.stem.replace('-', '_').lower()}.py"
    script.write_text(page_script(page), encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [*(str(example / "src") for example in EXAMPLES), os.environ.get("PYTHONPATH")])
        ),
    }
    return subprocess.run(
        [sys.executable, script.name], cwd=workdir, env=env, capture_output=True, text=True, timeout=900
    )


DOCUMENTS = [*sorted(PAGES.glob("*.md")), ROOT / "README.md", *sorted(ROOT.glob("jt_*/README.md"))]
PAGE_FILES = sorted(PAGES.glob("*.md"))
WITH_SESSIONS = [p for p in DOCUMENTS if session_blocks(p)]


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


INIT = "docs/examples/jt_example_backend/src/jt_example_backend/__init__.py"


def test_fence_parser_finds_blocks_gpu_markers_and_shown_files(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "# t\n\n```python\na = 1\n```\n\n<!-- not run: needs a GPU -->\n```python\nb = 2\n```\n\n```bash\nls\n```\n\n"
        f'```python title="{INIT}"\n__version__ = "0.1.0"\n```\n',
        encoding="utf-8",
    )
    blocks = python_blocks(page)
    assert [(b.line, b.source, b.not_run, b.shows) for b in blocks] == [
        (4, "a = 1\n", None, None),
        (9, "b = 2\n", "needs a GPU", None),
        (17, '__version__ = "0.1.0"\n', None, INIT),
    ]
    assert session_blocks(page) == blocks[:1] and shown_files(page) == blocks[2:]
    script = page_script(page).splitlines()
    assert script[3] == "a = 1" and "b = 2" not in script and script[-1] == f"print({DONE!r})"


def test_a_page_session_fails_on_a_name_it_does_not_define(tmp_path: Path) -> None:
    """The check that would have caught a block using a class that only a shown file defines."""
    page = tmp_path / "p.md"
    backend = "docs/examples/jt_example_backend/src/jt_example_backend/backend.py"
    page.write_text(
        f'```python title="{backend}"\n{(ROOT / backend).read_text()}```\n\n```python\nbackend = ToyBackend()\n```\n',
        encoding="utf-8",
    )
    result = run_page(page, tmp_path)
    assert result.returncode != 0
    assert "NameError: name 'ToyBackend' is not defined" in result.stderr
    line = (ROOT / backend).read_text().count("\n") + 5
    assert f'docs_p.py", line {line}' in result.stderr  # the line of the page


WITH_SHOWN_FILES = [p for p in DOCUMENTS if shown_files(p)]


@pytest.mark.parametrize("page", WITH_SHOWN_FILES, ids=[_id(p) for p in WITH_SHOWN_FILES])
def test_a_block_that_shows_a_file_holds_it_to_the_letter(page: Path) -> None:
    """A page read raw (in a checkout, on a forge) shows real files, so each copy is held to its file."""
    problems = []
    for block in shown_files(page):
        where = f"{_id(page)}, the block at line {block.line} (title={block.shows!r})"
        path = ROOT / str(block.shows)
        if not path.is_file():
            problems.append(f"{where} shows {block.shows}, which is not a file of the repository")
            continue
        if block.source != path.read_text(encoding="utf-8"):
            diff = difflib.unified_diff(
                block.source.splitlines(keepends=True),
                path.read_text(encoding="utf-8").splitlines(keepends=True),
                f"{_id(page)} (line {block.line})",
                str(block.shows),
            )
            problems.append(f"{where} differs from the file:\n{''.join(diff)}")
    assert not problems, (
        "\n".join(problems) + "\nRun `python tests/test_docs_examples.py --sync-shown-files` to copy the files into "
        "the pages, then read the prose around each block again."
    )


def _example_files(example: Path, *folders: str) -> set[str]:
    """The ``.py`` and ``.toml`` files of an example plugin (``__init__.py`` and build output left out), in
    ``folders`` of it (all by default)."""
    roots = [example / folder for folder in folders] if folders else [example]
    return {
        str(path.relative_to(ROOT))
        for root in roots
        for path in root.rglob("*")
        if path.suffix in (".py", ".toml")
        and path.name != "__init__.py"
        and "build" not in path.parts
        and not any(part.endswith(".egg-info") for part in path.parts)
    }


def test_writing_a_backend_shows_every_file_of_the_example_plugin() -> None:
    shown = {block.shows for block in shown_files(PAGES / "writing-a-backend.md")}
    files = _example_files(EXAMPLE_PLUGIN)
    assert files <= shown, f"files of the example plugin the page does not show: {sorted(files - shown)}"


def test_writing_a_backend_shows_the_example_launcher_and_its_conformance_tests() -> None:
    shown = {block.shows for block in shown_files(PAGES / "writing-a-backend.md")}
    files = {*_example_files(EXAMPLE_LAUNCHER, "src"), str((EXAMPLE_LAUNCHER / "pyproject.toml").relative_to(ROOT))}
    files.add(str((EXAMPLE_LAUNCHER / "tests" / "test_logged_launcher_conformance.py").relative_to(ROOT)))
    assert files <= shown, f"files of the example launcher the page does not show: {sorted(files - shown)}"


def test_sync_copies_a_changed_file_into_the_blocks_that_show_it(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(f'Text.\n\n```python title="{INIT}"\n__version__ = "0.0.1"\n```\n\nMore.\n', encoding="utf-8")
    assert sync_shown_files(page) and not sync_shown_files(page)
    assert page.read_text(encoding="utf-8") == (
        f'Text.\n\n```python title="{INIT}"\n{(ROOT / INIT).read_text(encoding="utf-8")}```\n\nMore.\n'
    )


def test_an_include_marker_is_named_for_readers_of_the_raw_page() -> None:
    """An ``<!-- include: PATH -->`` marker is invisible outside the site, so the text before it names the file."""
    problems = []
    for page in DOCUMENTS:
        text = page.read_text(encoding="utf-8")
        for marker in HOOKS.INCLUDE.finditer(text):
            before = text[: marker.start()].rstrip().rsplit("\n\n", 1)[-1]
            if f"`{marker['path']}`" not in before:
                problems.append(f"{_id(page)}: the paragraph before {marker[0]} does not name `{marker['path']}`")
    assert not problems, "\n".join(problems)


#: The modules of jt a documentation example may import: users import ``jt_core`` (and ``jt_core.triton_lib``, the
#: names kept from jax-triton); a plugin imports ``jt_core.plugin``, a GPU runtime's plugin ``jt_core.gpu`` too, and
#: tests ``jt_core.testing``. Each name imported from one of them must be in its ``__all__``.
PUBLIC_SURFACE = ("jt_core", "jt_core.plugin", "jt_core.gpu", "jt_core.testing", "jt_core.triton_lib")
#: The import packages of jt's distributions: nothing of them but the surface above is an interface.
JT_PACKAGES = ("jt_core", "jt_cuda", "jt_rocm", "jt_gluon", "jt_tpu")


def published(module: str) -> set[str]:
    """The names a module of the surface publishes: its ``__all__`` (for ``jt_core``, its public modules too)."""
    names = set(importlib.import_module(module).__all__)
    if module == "jt_core":
        names |= {m.split(".", 1)[1] for m in PUBLIC_SURFACE if "." in m}
    return names


def surface_problems(source: str) -> list[str]:
    """The imports of jt in ``source`` that reach past the public surface, as ``"line N: ..."``."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in JT_PACKAGES and alias.name not in PUBLIC_SURFACE:
                    problems.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in JT_PACKAGES:
            if node.module not in PUBLIC_SURFACE:
                problems.append(f"line {node.lineno}: from {node.module} import ...")
                continue
            hidden = [alias.name for alias in node.names if alias.name not in published(node.module)]
            if hidden:
                problems.append(f"line {node.lineno}: from {node.module} import {', '.join(hidden)}")
    return problems


def test_the_surface_check_finds_imports_past_the_surface() -> None:
    source = (
        "import jt_core as jt\n"
        "from jt_core import plugins, registry, plugin\n"
        "from jt_core.cpu.interpreter_launcher import CpuLauncher\n"
        "from jt_core.plugin import Launcher, run_on_host, execute\n"
        "from jt_core.testing import fake_entry_point, using_plugins\n"
        "import jt_core.cpu.backend\n"
        "from jt_cuda.launchers import CudaJtLauncher\n"
    )
    assert surface_problems(source) == [
        "line 2: from jt_core import plugins, registry",
        "line 3: from jt_core.cpu.interpreter_launcher import ...",
        "line 4: from jt_core.plugin import execute",
        "line 6: import jt_core.cpu.backend",
        "line 7: from jt_cuda.launchers import ...",
    ]


def test_docs_examples_import_only_the_public_surface() -> None:
    """Every ``python`` block of the documents, the files of the example plugins they show included, imports jt only
    through its public surface: what a reader copies is what jt promises to keep."""
    problems = []
    for document in DOCUMENTS:
        for block in python_blocks(document):
            where = f"{_id(document)}, the block at line {block.line}"
            problems += [f"{where}, {problem}" for problem in surface_problems(block.source)]
    assert not problems, (
        f"documentation examples import jt past its public surface {PUBLIC_SURFACE} (each name from the module's "
        "__all__); use what jt_core.plugin / jt_core.testing offer, or add it there:\n" + "\n".join(problems)
    )


def test_every_page_is_in_the_navigation() -> None:
    config = (DOCS / "mkdocs.yml").read_text(encoding="utf-8")
    missing = [p.name for p in PAGE_FILES if f": {p.name}" not in config]
    assert not missing, f"pages missing from nav in docs/mkdocs.yml: {missing}"


def test_guide_pages_have_executed_examples() -> None:
    names = {_id(p) for p in WITH_SESSIONS}
    for expected in ("getting-started.md", "calling-conventions.md", "plugins.md", "writing-a-backend.md"):
        assert f"docs/pages/{expected}" in names
    assert "README.md" in names


def python_block_problems(document: Path) -> list[str]:
    """The blocks of Python in ``document`` that would be neither run nor left out for a stated reason: a fence the
    runner does not read (indented, or spelled otherwise than ``python``), or a comment before a ``python`` block
    that is not the ``<!-- not run: REASON -->`` line (the block then runs, whatever the comment meant)."""
    text = document.read_text(encoding="utf-8")
    problems = []
    for fence in PYTHON_FENCE.finditer(text):
        if fence["indent"] or fence["lang"] != "python":
            line = text.count("\n", 0, fence.start()) + 1
            problems.append(
                f"{document.name}:{line}: a ```{fence['lang']} block that the docs test does not see (indented, or "
                "not spelled python): open it with ```python at the start of a line"
            )
    for block in python_blocks(document):
        if block.before.startswith("<!--") and block.not_run is None:
            problems.append(
                f"{document.name}:{block.line - 2}: {block.before!r} before a python block is no "
                "`<!-- not run: REASON -->` line, so the block runs"
            )
    return problems


def test_the_block_check_finds_blocks_that_would_not_run(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "* a list\n\n    ```python\n    a = 1\n    ```\n\n```py\nb = 2\n```\n\n<!-- gpu-only -->\n```python\n"
        "c = 3\n```\n\n<!-- not run: needs a GPU -->\n```python\nd = 4\n```\n",
        encoding="utf-8",
    )
    problems = python_block_problems(page)
    assert [problem.split(":", 2)[1] for problem in problems] == ["3", "7", "11"], problems
    assert [b.source for b in session_blocks(page)] == ["c = 3\n"]


@pytest.mark.parametrize("document", DOCUMENTS, ids=[_id(p) for p in DOCUMENTS])
def test_every_python_block_runs_or_says_why_not(document: Path) -> None:
    problems = python_block_problems(document)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", WITH_SESSIONS, ids=[_id(p) for p in WITH_SESSIONS])
def test_code_blocks_run_as_pasted_in_a_fresh_process(page: Path, tmp_path: Path) -> None:
    result = run_page(page, tmp_path)
    assert result.returncode == 0, f"{_id(page)}: the page's blocks failed as one script\n{result.stderr[-6000:]}"
    assert result.stdout.rstrip().endswith(DONE)


def test_the_many_processes_page_runs_as_a_two_process_job(tmp_path: Path) -> None:
    """The script of "Many processes and hosts" runs as it says: two processes of two CPU devices each."""
    from jt_core.testing import run_job

    page = PAGES / "multi-process.md"
    script = tmp_path / "job.py"
    script.write_text(page_script(page), encoding="utf-8")
    finished = run_job([str(script)], processes=2, devices=2, timeout=150, cwd=tmp_path)
    for process in finished:
        assert process.returncode == 0, f"process {process.index}:\n{process.output[-6000:]}"
        assert f"process {process.index} of 2: ok" in process.output, process.output[-2000:]


# Options of `pip install` that take a value, and the ones whose value is a local path.
PIP_OPTIONS_WITH_VALUE = {"-f", "--find-links", "-r", "--requirement", "-c", "--constraint", "-t", "--target"}
PIP_PATH_OPTIONS = {"-e", "--editable", "-r", "--requirement", "-c", "--constraint"}
OUR_DISTRIBUTIONS = {p.parent.name.replace("_", "-"): p for p in ROOT.glob("jt_*/pyproject.toml")}


def pip_install_commands() -> list[tuple[str, str]]:
    """Every ``pip install ...`` the documents show (code blocks and inline code), with the document's name."""
    found = []
    for doc in DOCUMENTS:
        for match in re.finditer(r"pip install ([^`\n#]*)", doc.read_text(encoding="utf-8")):
            found.append((_id(doc), match[1].strip()))
    return found


def test_documented_pip_installs_name_real_distributions_extras_and_paths() -> None:
    from packaging.requirements import Requirement

    problems = []
    commands = pip_install_commands()
    assert len(commands) >= 10
    for doc, command in commands:
        args = shlex.split(command)
        for i, arg in enumerate(args):
            previous = args[i - 1] if i else ""
            if arg.startswith("-") or (previous in PIP_OPTIONS_WITH_VALUE and previous not in PIP_PATH_OPTIONS):
                continue
            if previous in PIP_PATH_OPTIONS or arg.startswith(("./", "/")):
                if not (ROOT / re.sub(r"\[[\w,-]+\]$", "", arg)).exists():
                    problems.append(f"{doc}: `pip install {command}`: no {arg} in the repository")
                continue
            requirement = Requirement(arg)
            if not requirement.name.startswith("jt"):
                continue
            if requirement.name not in OUR_DISTRIBUTIONS:
                problems.append(f"{doc}: `pip install {command}`: {requirement.name} is not one of jt's distributions")
                continue
            project = tomllib.loads(OUR_DISTRIBUTIONS[requirement.name].read_text(encoding="utf-8"))["project"]
            unknown = requirement.extras - set(project.get("optional-dependencies", {}))
            if unknown:
                problems.append(f"{doc}: `pip install {command}`: {requirement.name} has no extra {sorted(unknown)}")
    assert not problems, "\n".join(problems)


#: Why a test of an example plugin may be skipped: the toy platform has no device, so nothing it lowers can run.
EXAMPLE_SKIPS = {"jt_example_backend": "JAX has no 'toy' device here", "jt_example_launcher": None}


@pytest.mark.parametrize("example", EXAMPLES, ids=[example.name for example in EXAMPLES])
def test_example_plugin_passes_its_own_tests(example: Path, tmp_path: Path) -> None:
    """An example plugin installs with pip beside jt-core alone (``--no-deps``) and passes its own test suite."""
    source = tmp_path / "src"
    shutil.copytree(example, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    target = tmp_path / "site-packages"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    assert list(target.glob(f"{example.name}-*.dist-info/entry_points.txt"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])}
    env.pop("JT_LOAD_PLUGINS", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests"],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # Every test passed: none expected to fail, and none skipped but those that cannot run here, for the reason given.
    summary = result.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"[1-9]\d* passed(, \d+ skipped)? in [\d.]+s( \([\d:]+\))?", summary), result.stdout
    skipped = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    allowed = EXAMPLE_SKIPS[example.name]
    assert all(allowed is not None and allowed in line for line in skipped), "\n".join(skipped)


if __name__ == "__main__":
    if sys.argv[1:] != ["--sync-shown-files"]:
        raise SystemExit(f"usage: python {_id(Path(__file__))} --sync-shown-files")
    for document in DOCUMENTS:
        if sync_shown_files(document):
            print(f"updated {_id(document)}")
