"""The documentation site builds with ``mkdocs build --strict``, and what it shows reads right: no markup that
mkdocstrings does not render (Sphinx roles, reStructuredText directives and literal blocks), no private name as a
default in a signature, and nothing the CPU backend no longer does.

The site is built once for the module, into a temporary folder. CI builds it before the test suites run (the step
``mkdocs build --strict`` of ``.ci/test.sh``) and names that folder in ``JT_DOCS_SITE``: the tests then read it
instead of building it again in each run of the suite.
"""

from __future__ import annotations

import html.parser
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: The folder of a site built from this checkout (CI's build), read instead of building one.
SITE_ENV = "JT_DOCS_SITE"


def build_site(destination: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(DOCS / "mkdocs.yml"), "-d", str(destination)],
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get(SITE_ENV)
    if given:
        assert (Path(given) / "index.html").is_file(), f"{SITE_ENV}={given} names no built site"
        return Path(given)
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("the docs tools are not installed (pip install -r docs/requirements.txt)")
    destination = tmp_path_factory.mktemp("site")
    built = build_site(destination)
    assert built.returncode == 0, built.stdout + built.stderr
    return destination


class _Text(html.parser.HTMLParser):
    """The text a reader sees on a page: everything outside ``<script>`` and ``<style>``, inline elements joined
    as they read (``:class:`` followed by a code span reads ``:class:Name``)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self._hidden += 1
        elif tag in ("p", "li", "tr", "td", "th", "h1", "h2", "h3", "h4", "pre", "div", "br", "dt", "dd"):
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def page_text(markup: str) -> str:
    """The text of a page's HTML (see `_Text`)."""
    parser = _Text()
    parser.feed(markup)
    return "".join(parser.parts)


@pytest.fixture(scope="module")
def pages(site: Path) -> dict[str, str]:
    """The text of every page of the site, by its path in the site (``reference/index.html``)."""
    return {str(p.relative_to(site)): page_text(p.read_text(encoding="utf-8")) for p in sorted(site.rglob("*.html"))}


#: Markup that mkdocstrings shows as it is written (it renders Markdown): what each looks like on a page.
RAW_MARKUP = {
    "a Sphinx role (name the code in backticks)": re.compile(
        r"(?<![\w:]):(?:py:)?(?:class|mod|func|meth|attr|data|obj|exc|const|ref|doc|term|envvar):(?=\S)"
    ),
    "a reStructuredText field (use the Google sections Args:, Returns:, Raises:)": re.compile(
        r"^\s*:(?:param|type|returns?|rtype|raises?|ivar|cvar|var|keyword)\b[^:\n]*:", re.MULTILINE
    ),
    "a reStructuredText directive (use an admonition or plain text)": re.compile(r"\.\. [\w-]+::"),
    "a reStructuredText literal block (use a fenced code block)": re.compile(r"[^\s:]::[ \t]*$", re.MULTILINE),
    "a reStructuredText link (use [text](url))": re.compile(r"<https?://[^>\s]+>`?_"),
}


def markup_problems(pages: dict[str, str]) -> list[str]:
    """Each piece of raw markup on the pages, with its page and a few characters around it."""
    problems = []
    for name, text in pages.items():
        for what, pattern in RAW_MARKUP.items():
            for found in pattern.finditer(text):
                around = text[max(0, found.start() - 60) : found.end() + 60].replace("\n", " ")
                problems.append(f"{name}: {what}: ...{around}...")
    return problems


def test_the_markup_check_finds_what_mkdocstrings_leaves_raw() -> None:
    text = page_text(
        "<p>Returns a <code>:class:</code><code>KernelCall</code> and implements hooks::</p><pre>x</pre>"
        "<p>.. note:: read it</p><p>:param x: the input</p><p>see `docs &lt;https://example.org&gt;`_</p>"
        "<p>plain text: a colon, <code>jt_core.plugin</code>, std::vector&lt;int&gt; v</p>"
    )
    found = markup_problems({"p.html": text})
    assert [problem.split(": ", 2)[1].split(" (")[0] for problem in found] == [
        "a Sphinx role",
        "a reStructuredText field",
        "a reStructuredText directive",
        "a reStructuredText literal block",
        "a reStructuredText link",
    ], found


def test_the_site_builds_and_holds_its_parts(site: Path) -> None:
    performance = (site / "performance" / "index.html").read_text(encoding="utf-8")
    assert "CPU interpreter backend" in performance, "benchmarks/RESULTS.md was not included"
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    assert reference.count("input_output_aliases") >= 1
    assert (site / "search" / "search_index.json").is_file(), "no search index"
    getting_started = (site / "getting-started" / "index.html").read_text(encoding="utf-8")
    assert re.search(r'name="generator" content="mkdocs-[\d.]+, mkdocs-material-', getting_started), "not the theme"
    assert '"content.code.copy"' in getting_started, "no copy buttons on code blocks"


def test_no_page_shows_markup_that_mkdocstrings_does_not_render(pages: dict[str, str]) -> None:
    problems = markup_problems(pages)
    assert not problems, "\n".join(problems)


def test_signatures_show_no_private_names_as_defaults(pages: dict[str, str]) -> None:
    """A default is shown as its source expression: a private sentinel would read ``kernel=_MISSING``."""
    reference = pages["reference/index.html"]
    private = sorted(set(re.findall(r"\b\w+=_\w+", reference)))
    assert not private, f"the reference shows private names as defaults: {private}"
    for shown in ("kernel=REQUIRED", "out_shape=NOT_GIVEN", "out_type=NOT_GIVEN", "grid=REQUIRED"):
        assert shown in reference, f"triton_call's signature does not show {shown}"


#: Sentences about the CPU backend that were true when it ran every kernel in Triton's interpreter behind a host
#: callback, and are not since the compiled path is its default: a page that says one of them describes the wrong
#: path (the interpreter is what the compiled path hands kernels to, and what launcher="interpreter" asks for).
STALE = (
    "about a hundred programs",
    "keep cpu grids",
    "same kernels through triton's interpreter",
    "same kernels with triton's interpreter",
    "runs the kernel with triton's interpreter",
    "runs the *same* kernel with triton's interpreter",
    "cpu backend (triton's interpreter)",
    "the cpu (triton's interpreter)",
    "the cpu backend writes nothing",
    "before the interpreter ever runs it",
    "device code loaded onto the gpu",
    "for cpu interpreter",
    "cannot express the call runs",
)


def stale_sentences(name: str, text: str) -> list[str]:
    flat = " ".join(text.split()).lower()
    return [f"{name}: {phrase!r}" for phrase in STALE if phrase in flat]


def test_no_page_describes_the_cpu_backend_as_it_was(pages: dict[str, str]) -> None:
    """The site, the READMEs, and what ``python -m jt_core cache info`` says each folder holds."""
    from jt_core import files

    readmes = [ROOT / "README.md", *sorted(ROOT.glob("jt_*/README.md"))]
    problems = [problem for name, text in pages.items() for problem in stale_sentences(name, text)]
    for readme in readmes:
        problems += stale_sentences(str(readme.relative_to(ROOT)), readme.read_text(encoding="utf-8"))
    problems += stale_sentences("python -m jt_core cache info", "\n".join(files.PURPOSES.values()))
    assert not problems, "\n".join(problems)
