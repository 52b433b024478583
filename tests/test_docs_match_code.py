"""Pages that describe the code agree with it: the sample output of ``python -m jt_core plugins`` in "Plugins", and
the layers of jt-core in "How jt is built" against the import-linter contract in the root ``pyproject.toml``."""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

import jt_core

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "pages"
TEXT_BLOCK = re.compile(r"^```text\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
HEADER = ("NAME", "DISTRIBUTION", "VERSION", "STATUS", "PROVIDES")
LOWERS_ONLY = re.compile(r"^\S+:\S+ +lowers only: .*$", re.MULTILINE)

# -- the sample output of `python -m jt_core plugins` ---------------------------------------------------------

# The plugins the page's samples list besides jt's own, installed for real: the faulty launcher of "Plugin faults"
# (after one call, so that its fault is kept) and a plugin whose import fails, as in "Broken plugins".
FASTCPU = """
import jt_core as jt
from jt_core.plugin import Launcher

JT_PLUGIN_API = 1


class FastLauncher(Launcher):
    platform = "cpu"
    name = "fast"
    priority = 100

    def lower(self, ctx, call, kernels, operands, device):
        raise RuntimeError(f"cannot lower {call.name!r} yet")


@jt.hookimpl
def jt_register_launchers(platform):
    return [FastLauncher()] if platform in (None, "cpu") else []
"""
ADD = """
import warnings
import jax.numpy as jnp
import triton
import triton.language as tl
import jt_core as jt


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n) + tl.load(y_ptr + i, mask=i < n), mask=i < n)


warnings.simplefilter("ignore")
x = jnp.arange(8, dtype=jnp.float32)
print(jt.triton_call(x, x, kernel=add_kernel, out_shape=x, grid=1, n=8, BLOCK=8))
"""


def _install(site: Path, distribution: str, entry_point: str, package: str, plugin: str | None) -> None:
    info = site / f"{distribution.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[jt]\n{entry_point}\n")
    if plugin is not None:
        (site / package).mkdir()
        (site / package / "__init__.py").write_text("")
        (site / package / "plugin.py").write_text(textwrap.dedent(plugin))


def _cells(line: str) -> list[str]:
    """A table line's five cells (the columns are set apart by two spaces or more; the last may hold anything)."""
    return re.split(r" {2,}", line.rstrip(), maxsplit=4)


def _tables(text: str) -> list[list[str]]:
    """The tables of ``python -m jt_core plugins`` in the text blocks of a page: the header line and the rows."""
    tables = []
    for block in TEXT_BLOCK.finditer(text):
        lines = block["body"].splitlines()
        for i, line in enumerate(lines):
            if tuple(line.split()) == HEADER:
                rows = []
                for row in lines[i + 1 :]:
                    if not row.strip() or row.startswith("[..."):
                        break
                    rows.append(row)
                tables.append([line, *rows])
    return tables


@pytest.fixture(scope="module")
def listing(tmp_path_factory: pytest.TempPathFactory) -> str:
    """What ``python -m jt_core plugins`` prints with the page's plugins installed and the fault kept."""
    site = tmp_path_factory.mktemp("site")
    _install(site, "jt-fastcpu", "fastcpu = jt_fastcpu.plugin", "jt_fastcpu", FASTCPU)
    _install(site, "jt-broken", "broken = jt_broken.plugin", "jt_broken", "import missing_dependency\n")
    (site / "add.py").write_text(ADD)
    env = {**os.environ, "PYTHONPATH": str(site), "JT_CACHE_DIR": str(site / "cache")}
    env.pop("JT_STRICT_PLUGINS", None)
    subprocess.run([sys.executable, "add.py"], cwd=site, env=env, check=True, capture_output=True, text=True)
    listed = subprocess.run(
        [sys.executable, "-m", "jt_core", "plugins"], env=env, check=True, capture_output=True, text=True
    )
    return listed.stdout


SAMPLES = _tables((PAGES / "plugins.md").read_text(encoding="utf-8"))


def test_the_page_shows_tables_of_the_cli() -> None:
    assert len(SAMPLES) >= 3, "the samples of `python -m jt_core plugins` in plugins.md were not found"


@pytest.mark.parametrize("index", range(len(SAMPLES)))
def test_a_sample_table_is_what_the_cli_prints(listing: str, index: int) -> None:
    """Each sample's header and rows are laid out as the CLI lays them out, and each row says what the CLI says for
    that plugin (versions of jt's own distributions aside)."""
    table = SAMPLES[index]
    header, *rows = [_cells(line) for line in table]
    widths = [max(len(cells[i]) for cells in (header, *rows)) for i in range(4)]
    laid_out = ["  ".join(c.ljust(w) for c, w in zip(cells[:4], widths)) + "  " + cells[4] for cells in (header, *rows)]
    assert table == laid_out, "the sample is not laid out as the CLI lays out its table (column widths)"
    real_header, *real_rows = [_cells(line) for line in listing.split("\n\n", 1)[0].splitlines()]
    assert header == real_header
    real = {cells[0]: cells for cells in real_rows}
    missing = [cells[0] for cells in rows if cells[0] not in real]
    if missing:
        pytest.skip(f"the sample lists plugins that are not installed here: {missing}")
    for cells in rows:
        expected = real[cells[0]]
        if expected[1].startswith("jt-") and expected[2] == jt_core.__version__:
            expected = [*expected[:2], cells[2], *expected[3:]]  # a sample written at an earlier version
        assert cells == expected, f"plugins.md, table {index + 1}: the row of {cells[0]!r}\n{listing}"


HANDS_ON = re.compile(r"^\S+:\S+ hands a call to the platform's next launcher for: .*$", re.MULTILINE)
NATIVE_LINE = re.compile(r"^  (?P<label>cpu:\S+) +(?P<library>\S+) ", re.MULTILINE)


def test_the_first_sample_shows_the_cpu_launchers_lines_as_the_cli_prints_them(listing: str) -> None:
    """The CPU's launchers have a device everywhere, so every listing says which calls each hands on and which
    library each uses: the first sample shows those lines as the CLI prints them."""
    text = (PAGES / "plugins.md").read_text(encoding="utf-8")
    first = TEXT_BLOCK.search(text)
    assert first is not None and tuple(first["body"].split("\n", 1)[0].split()) == HEADER
    sample = first["body"]
    cpu_rules = [line for line in HANDS_ON.findall(listing) if line.startswith("cpu:")]
    assert cpu_rules, listing
    assert [line for line in HANDS_ON.findall(sample) if line.startswith("cpu:")] == cpu_rules, (
        f"plugins.md's first sample differs from `python -m jt_core plugins` on the CPU launchers' rules:\n{listing}"
    )
    native = [(m["label"], m["library"]) for m in NATIVE_LINE.finditer(listing)]
    assert native and [(m["label"], m["library"]) for m in NATIVE_LINE.finditer(sample)] == native, listing


def test_the_sample_lines_of_launchers_that_only_lower_are_the_cli_s(listing: str) -> None:
    text = (PAGES / "plugins.md").read_text(encoding="utf-8")
    sample = LOWERS_ONLY.findall(text)
    assert sample, "plugins.md shows no launcher that only lowers"
    if not set(LOWERS_ONLY.findall(listing)):
        pytest.skip("every launcher's platform has a device here")
    assert set(sample) <= set(LOWERS_ONLY.findall(listing)), listing


# -- the layers of jt-core --------------------------------------------------------------------------------------

LAYERS_CONTRACT = "jt-core layers"
LAYERS_SECTION = "## The layers of jt-core"
LAYER_ROW = re.compile(r"^\| (?P<number>\d+) \| (?P<modules>[^|]*) \|", re.MULTILINE)


def contract_layers() -> list[tuple[str, set[str]]]:
    """The import-linter layers of jt-core, bottom first: each layer's text in ``pyproject.toml`` and its modules."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["name"] == LAYERS_CONTRACT]
    return [(layer, {m.strip() for m in re.split(r"[|:]", layer)}) for layer in reversed(contract["layers"])]


def page_layers(text: str) -> list[tuple[int, set[str]]]:
    """The rows of the page's table, bottom first: the layer's number (0 at the bottom) and its modules."""
    section = text.split(LAYERS_SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [(int(row["number"]), set(re.findall(r"`([\w.]+)`", row["modules"]))) for row in LAYER_ROW.finditer(section)]
    return sorted(rows, key=lambda row: row[0])


def _modules(modules: set[str]) -> str:
    return ", ".join(sorted(modules)) or "no module"


def layer_differences(page: list[tuple[int, set[str]]], contract: list[tuple[str, set[str]]]) -> list[str]:
    """Where the page and the contract differ, said exactly: a layer only one of them has, a layer whose modules
    differ, a row numbered otherwise than its place in the contract, a layer whose modules may import each other."""
    problems = []
    matcher = difflib.SequenceMatcher(
        a=[frozenset(m) for _, m in contract], b=[frozenset(m) for _, m in page], autojunk=False
    )
    for tag, c1, c2, p1, p2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        pairs = list(zip(range(c1, c2), range(p1, p2))) if tag == "replace" else []
        for c, r in pairs:
            text, modules = contract[c]
            number, listed = page[r]
            said = f"layer {c} ({text!r} in pyproject.toml) is row {number} on the page, with {_modules(listed)}"
            if modules - listed:
                said += f"; missing on the page: {_modules(modules - listed)}"
            if listed - modules:
                said += f"; not in that layer of the contract: {_modules(listed - modules)}"
            problems.append(said)
        for c in range(c1 + len(pairs), c2):
            below = f"above {contract[c - 1][0]!r}" if c else "at the bottom"
            problems.append(f"layer {c} ({contract[c][0]!r} in pyproject.toml, {below}) has no row on the page")
        for r in range(p1 + len(pairs), p2):
            number, listed = page[r]
            problems.append(f"the page's row {number} ({_modules(listed)}) is no layer of pyproject.toml's contract")
    if not problems:
        for place, (number, listed) in enumerate(page):
            if number != place:
                problems.append(
                    f"the page numbers the layer of {_modules(listed)} {number}; it is layer {place} of the contract "
                    f"(counting from 0 at the bottom): renumber the rows from there up"
                )
                break
    for text, _ in contract:
        if ":" in text:
            problems.append(f"layer {text!r} lets its modules import each other (':'); the page says a row's do not")
    return problems


def test_the_architecture_page_lists_the_layers_of_the_import_contract() -> None:
    page = page_layers((PAGES / "how-jt-is-built.md").read_text(encoding="utf-8"))
    problems = layer_differences(page, contract_layers())
    assert not problems, (
        "docs/pages/how-jt-is-built.md ('The layers of jt-core') and the import-linter contract "
        f"{LAYERS_CONTRACT!r} in pyproject.toml differ:\n" + "\n".join(problems)
    )


def test_a_layer_difference_is_named_exactly() -> None:
    contract = [("errors | _version", {"errors", "_version"}), ("call", {"call"}), ("api", {"api"})]
    page = [(0, {"errors", "_version"}), (1, {"call"}), (2, {"api"})]
    assert layer_differences(page, contract) == []
    assert layer_differences([page[0], (1, {"call", "tensordesc"}), page[2]], contract) == [
        "layer 1 ('call' in pyproject.toml) is row 1 on the page, with call, tensordesc; not in that layer of the "
        "contract: tensordesc"
    ]
    added = [*contract[:2], ("hooks | registry", {"hooks", "registry"}), contract[2]]
    assert layer_differences(page, added) == [
        "layer 2 ('hooks | registry' in pyproject.toml, above 'call') has no row on the page"
    ]
    assert layer_differences([*page[:2], (2, {"hooks", "registry"}), (3, {"api"})], added) == []
    assert layer_differences([*page[:2], (3, {"hooks", "registry"}), (4, {"api"})], added) == [
        "the page numbers the layer of hooks, registry 3; it is layer 2 of the contract (counting from 0 at the "
        "bottom): renumber the rows from there up"
    ]
    assert layer_differences([*page, (3, {"extra"})], contract) == [
        "the page's row 3 (extra) is no layer of pyproject.toml's contract"
    ]
    assert layer_differences(page, [*contract[:2], ("api : gradients", {"api", "gradients"})])[-1] == (
        "layer 'api : gradients' lets its modules import each other (':'); the page says a row's do not"
    )


# -- building the docs ----------------------------------------------------------------------------------------


def test_the_page_on_building_the_docs_gives_the_command_ci_runs() -> None:
    """ "Building the docs" shows the build CI runs (``.ci/test.sh``), with every argument the page names."""
    page = (PAGES / "building-the-docs.md").read_text(encoding="utf-8")
    (shown,) = re.findall(r"^mkdocs build .*$", page, re.MULTILINE)
    (ci,) = re.findall(r'^.*/bin/mkdocs" build .*$', (ROOT / ".ci" / "test.sh").read_text(), re.MULTILINE)
    ci_args = ci.split('/bin/mkdocs"', 1)[1].split()
    assert set(shown.split()[1:]) <= set(ci_args), f"the page: {shown}\n.ci/test.sh: {ci}"
    assert "--strict" in shown.split()
    assert "pip install -r docs/requirements.txt" in page


# -- the reference and the plugin surface ---------------------------------------------------------------------

#: The modules a plugin imports from jt-core, each of whose ``__all__`` names the reference must document.
PLUGIN_SURFACE = ("jt_core.plugin", "jt_core.gpu")
DIRECTIVE = re.compile(r"^::: (?P<path>[\w.]+)\n(?P<options>(?:    .*\n)*)", re.MULTILINE)


def _resolve(path: str) -> object:
    """The object a mkdocstrings path names: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            found = getattr(found, part)
        return found
    raise ImportError(path)


def undocumented(reference: str, surface: tuple[str, ...] = PLUGIN_SURFACE) -> list[str]:
    """The names of ``surface``'s ``__all__`` that no ``::: path`` of ``reference`` documents: a path ending in the
    name that resolves to the same object, or, for a class or function, a module documented with its members in
    which it is defined."""
    directives = [(m["path"], "members: false" not in m["options"]) for m in DIRECTIVE.finditer(reference)]
    resolved = [(path, _resolve(path), members) for path, members in directives]
    missing = []
    for module_name in surface:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            named = any(path.rsplit(".", 1)[-1] == name and found is value for path, found, _ in resolved)
            in_module = (inspect.isclass(value) or inspect.isfunction(value)) and any(
                members and inspect.ismodule(found) and value.__module__ == found.__name__
                for _, found, members in resolved
            )
            if not (named or in_module):
                missing.append(f"{module_name}.{name}")
    return missing


def test_the_reference_documents_every_name_of_the_plugin_surface() -> None:
    missing = undocumented((PAGES / "reference.md").read_text(encoding="utf-8"))
    assert not missing, f"docs/pages/reference.md documents none of {missing}: add a `::: jt_core.plugin.NAME` line"


def test_a_name_left_out_of_the_reference_is_named() -> None:
    reference = "\n".join(
        [
            "::: jt_core.plugin.KernelCall",
            "::: jt_core.errors",
            "::: jt_core.plugin",
            "    options:",
            "      members: false",
            "",
        ]
    )
    missing = undocumented(reference, ("jt_core.plugin",))
    assert "jt_core.plugin.KernelCall" not in missing and "jt_core.plugin.JtError" not in missing
    assert {"jt_core.plugin.BatchInfo", "jt_core.plugin.run_on_host", "jt_core.plugin.INPUT"} <= set(missing)


# -- the README's first screen and the quick command -----------------------------------------------------------

README = ROOT / "README.md"
QUICK = ROOT / ".ci" / "quick.sh"


def test_the_readme_opens_with_its_title_then_the_main_job_and_the_whole_suite() -> None:
    text = README.read_text(encoding="utf-8")
    assert text.splitlines()[0] == "# jt"
    first = re.search(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```$", text, re.MULTILINE | re.DOTALL)
    assert first is not None and first["lang"] == "bash"
    commands = [line.split("#", 1)[0].split() for line in first["body"].splitlines()]
    assert commands == [["bash", ".ci/main.sh"], ["bash", ".ci/test.sh"]]
    assert all("#" in line for line in first["body"].splitlines()), "each command says what it does and how long"
    for script in (".ci/main.sh", ".ci/test.sh", ".ci/quick.sh"):
        assert (ROOT / script).is_file(), script
    after = text[first.end() :].split("```", 1)[0]
    assert "`bash .ci/quick.sh`" in after, "the quick command is documented right after the two commands"
    example = re.search(r"^```python\n(?P<body>.*?)^```$", text[first.end() :], re.MULTILINE | re.DOTALL)
    assert example is not None and len([line for line in example["body"].splitlines() if line.strip()]) <= 12
    assert "docs/pages/quick-start.md" in text[first.end() : first.end() + example.end() + 600]


def _quick_slice() -> list[str]:
    body = re.search(r"^tests=\(\n(?P<body>.*?)^\)$", QUICK.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)
    assert body is not None, "no tests=( ... ) array in .ci/quick.sh"
    return body["body"].split()


def test_the_quick_command_runs_existing_tests_of_every_distribution() -> None:
    files = _quick_slice()
    missing = [name for name in files if not (ROOT / name).is_file()]
    assert not missing, f".ci/quick.sh names test files that do not exist: {missing}"
    folders = {name.split("/", 1)[0] for name in files}
    distributions = {path.parent.name for path in ROOT.glob("jt_*/pyproject.toml")}
    assert distributions | {"tests"} <= folders, f"no test of {sorted(distributions - folders)} in .ci/quick.sh"
    readme = README.read_text(encoding="utf-8")
    assert f"runs {len(files)} test files of that suite" in readme


def test_the_quick_start_page_comes_first_in_the_navigation() -> None:
    config = (ROOT / "docs" / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config.split("\nnav:\n", 1)[1]
    assert nav.lstrip().startswith("- Quick start: quick-start.md")
