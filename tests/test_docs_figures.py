"""The figures the documents quote are the ones measured or built: the number of distributions is the number of
distribution folders; the CPU paths' times and ratios are the newest CPU run's in ``benchmarks/RESULTS.md``, the TPU
kernels' the newest TPU run's; the test commands' times, the virtualenvs' sizes and the quick command's count of tests
are those recorded in ``benchmarks/RESULTS.md`` (and counted here). A document that drifts fails here with the figure
to write. The wheels' sizes are checked against the wheelhouse by ``tests/check_wheelhouse.py``, which CI runs once
it has built it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
README = ROOT / "README.md"
PAGES = ROOT / "docs" / "pages"
DISTRIBUTIONS = sorted(path.parent.name for path in ROOT.glob("jt_*/pyproject.toml"))
NUMBER_WORDS = (
    *("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"),
    *("eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"),
)
#: How the documents write a range and a ratio: ``0.7{DASH}2.1{TIMES}``.
DASH, TIMES = "\N{EN DASH}", "\N{MULTIPLICATION SIGN}"


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def sections(document: str) -> dict[str, str]:
    """A Markdown document's ``## `` sections, by title, in the order they come (the newest first in RESULTS.md)."""
    parts = re.split(r"^## ", document, flags=re.MULTILINE)[1:]
    return {part.split("\n", 1)[0]: part.split("\n", 1)[1] for part in parts}


def newest(pattern: str, holding: str = "") -> tuple[str, str]:
    """The title and body of the first (newest) section of RESULTS.md whose title matches ``pattern`` and whose body
    holds ``holding``."""
    for title, body in sections(text(RESULTS)).items():
        if re.search(pattern, title) and holding in body:
            return title, body
    raise AssertionError(f"no section of benchmarks/RESULTS.md matches {pattern!r}")


def table(body: str, header: str) -> list[list[str]]:
    """The rows (cells stripped) of the first Markdown table in ``body`` whose header line contains ``header``."""
    lines = body.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and header in line:
            rows = []
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                rows.append([cell.strip() for cell in row.strip().strip("|").split("|")])
            return rows
    raise AssertionError(f"no table with {header!r} in its header")


def median(cell: str) -> float:
    """The median of a cell such as ``**0.341** [0.270, 0.533]`` or ``0.27`` (the first number)."""
    return float(re.match(r"\**([\d.]+)", cell)[1])


def section_of(path: Path, title: str) -> str:
    found = sections(text(path)).get(title)
    assert found is not None, f"{path.relative_to(ROOT)} has no section {title!r}"
    return found


# -- the number of distributions ------------------------------------------------------------------------------


def prose_files() -> list[Path]:
    """Where jt speaks of itself: the README, the docs (the changelog's entries keep what was true when written),
    each distribution's README, the CI and benchmark scripts' headers, the tests' docstrings and the root
    pyproject.toml's comments."""
    pages = [p for p in sorted(PAGES.glob("*.md")) if p.name != "changelog.md"]
    scripts = [*sorted((ROOT / ".ci").iterdir()), *sorted((ROOT / "benchmarks").glob("*.sh"))]
    tests = [path for path in sorted((ROOT / "tests").glob("*.py")) if path.name != Path(__file__).name]
    return [README, *pages, *(ROOT / d / "README.md" for d in DISTRIBUTIONS), *scripts, ROOT / "pyproject.toml", *tests]


COUNT = re.compile(
    rf"\b(?:(?:the|jt's|all|is|its) )({'|'.join(NUMBER_WORDS[2:])})(?: jt)? (distributions|plugins)\b", re.I
)


def test_the_repository_has_the_distributions_the_documents_count() -> None:
    assert DISTRIBUTIONS == ["jt_core", "jt_cuda", "jt_gluon", "jt_rocm", "jt_tpu"]


@pytest.mark.parametrize("path", prose_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_count_of_jts_distributions_is_their_number(path: Path) -> None:
    wanted = {"distributions": len(DISTRIBUTIONS), "plugins": len(DISTRIBUTIONS) - 1}
    wrong = [
        f"{match[0]!r} (there are {NUMBER_WORDS[wanted[match[2].lower()]]})"
        for match in COUNT.finditer(text(path))
        if NUMBER_WORDS.index(match[1].lower()) != wanted[match[2].lower()]
    ]
    assert not wrong, f"{path.relative_to(ROOT)}: {wrong}"


def test_a_miscount_is_found() -> None:
    assert [m[0] for m in COUNT.finditer("It is four distributions; jt's five distributions; all four plugins")] == [
        "is four distributions",
        "jt's five distributions",
        "all four plugins",
    ]


# -- the CPU paths (benchmarks/cpu_paths.py) ---------------------------------------------------------------------

CPU_TITLE, CPU_RUN = newest(r"^CPU paths, ")
CPU_TABLE = {row[0]: row[1:] for row in table(CPU_RUN, "latest: ÷ `jnp`")}
# The columns: latest compiled ms, ÷ Pallas, ÷ jnp; pinned compiled ms, ÷ Pallas, ÷ jnp.
CPU_VERSIONS = {
    name: (jax, triton)
    for name, jax, triton in re.findall(r"(latest|pinned): jax (\d+(?:\.\d+)*) \+ Triton (\d+(?:\.\d+)*)", CPU_RUN)
}
CPU_FIRST_CALL = re.search(
    r"first call in a new process\s+with an empty cache: ([\d.]+) s \(latest\), ([\d.]+) s", CPU_RUN
)


def cpu_jnp_range() -> str:
    """The compiled path's time over ``jnp``'s, lowest to highest median of either set, as the documents write it."""
    ratios = [median(cells[i]) for cells in CPU_TABLE.values() for i in (2, 5)]
    return f"{min(ratios):.1f}{DASH}{max(ratios):.1f}{TIMES}"


def test_the_newest_cpu_run_has_its_four_kernels_on_both_sets() -> None:
    assert list(CPU_TABLE) == ["add", "softmax", "matmul", "tail"], CPU_TITLE
    assert set(CPU_VERSIONS) == {"latest", "pinned"} and CPU_FIRST_CALL is not None, CPU_TITLE


def test_the_readme_quotes_the_newest_cpu_run() -> None:
    body = section_of(README, "The CPU backend")
    assert re.findall(r"\d\.\d+\u2013\d\.\d+\u00d7", body)[:1] == [cpu_jnp_range()], (
        f"README, 'The CPU backend': write {cpu_jnp_range()} `jax.numpy`'s time ({CPU_TITLE})"
    )
    matmul = CPU_TABLE["matmul"]
    for ratio, version in ((matmul[1], CPU_VERSIONS["latest"][0]), (matmul[4], CPU_VERSIONS["pinned"][0])):
        short = ".".join(version.split(".")[:2]) if version.count(".") > 2 or version.endswith(".0") else version
        quoted = f"{median(ratio):.2f}{TIMES} (jax {short.removesuffix('.0')})"
        assert quoted in body or f"{median(ratio):.2f}{TIMES} (jax {version})" in body, f"README: write {quoted}"
    others = max(median(cells[i]) for name, cells in CPU_TABLE.items() if name != "matmul" for i in (1, 4))
    said = re.search(r"the others below ([\d.]+)\u00d7", body)
    assert said and others < float(said[1]), f"README: the other kernels reach {others}{TIMES} Pallas"


def test_the_getting_started_page_quotes_the_newest_cpu_run() -> None:
    body = text(PAGES / "getting-started.md")
    latest = [median(CPU_TABLE[name][0]) for name in ("add", "softmax", "matmul")]
    first = f"{float(CPU_FIRST_CALL[1]):.2f}{DASH}{float(CPU_FIRST_CALL[2]):.2f} s"
    wanted = (
        f"took {latest[0]:.2f} ms a call, a row softmax and a 256³ matmul {latest[1]:.2f} and {latest[2]:.2f} ms, "
        f"{cpu_jnp_range()} the time of"
    )
    flat = " ".join(body.split())
    assert wanted in flat, f"getting-started.md, the compiled path: write {wanted!r} ({CPU_TITLE})"
    assert f"XLA's compile ({first} for that matmul)" in flat, f"getting-started.md: write ({first} for that matmul)"


def test_the_cpu_page_quotes_the_newest_cpu_run() -> None:
    body = section_of(PAGES / "cpu.md", "Speed")
    rows = table(body, "compiled ÷ `jnp`")
    wanted = [[cell.replace("**", "") for cell in cells[:3]] for cells in CPU_TABLE.values()]
    assert [row[1:] for row in rows] == wanted, (
        f"cpu.md, Speed: the table is not the latest columns of {CPU_TITLE!r} in benchmarks/RESULTS.md"
    )
    load = re.search(r"load average ([\d.]+\u2013[\d.]+)", " ".join(CPU_RUN.split()))[1]
    jax, triton = CPU_VERSIONS["latest"]
    assert f"load average {load}), jax {jax} and Triton {triton}" in " ".join(body.split()), (load, jax, triton)
    pinned = [f"{median(cells[5]):.2f}" for cells in CPU_TABLE.values()]
    wanted = (
        f"With jax {CPU_VERSIONS['pinned'][0]} and Triton {CPU_VERSIONS['pinned'][1]} the same run gave "
        f"{', '.join(pinned[:-1])} and {pinned[-1]}{TIMES} `jnp`'s time and the matmul at "
        f"{median(CPU_TABLE['matmul'][4]):.3f}{TIMES} Pallas's"
    )
    assert wanted in " ".join(body.split()), f"cpu.md, Speed: write {wanted!r}"


# -- the TPU kernels (benchmarks/tpu_kernels.py) -----------------------------------------------------------------

TPU_TITLE, TPU_RUN = newest(r"TPU", holding="| add 16M |")  # the newest run of the benchmark's own kernels
TPU_TABLE = table(TPU_RUN, "jt / jnp")
TPU_RATIOS = [float(row[3]) for row in TPU_TABLE]
TPU_FIRST_CALLS = [float(row[4]) for row in TPU_TABLE]


def test_the_readme_quotes_the_newest_tpu_run() -> None:
    wanted = f"{NUMBER_WORDS[len(TPU_TABLE)]} public-style kernels ran on a TPU v5e at {min(TPU_RATIOS):.2f}{DASH}" + (
        f"{max(TPU_RATIOS):.2f}{TIMES} plain `jax.numpy`'s time"
    )
    assert wanted in " ".join(text(README).split()), f"README: write {wanted!r} ({TPU_TITLE})"


def test_the_tpu_page_quotes_the_newest_tpu_run() -> None:
    body = " ".join(section_of(PAGES / "tpu.md", "How fast").split())
    quoted = [float(x) for pair in re.findall(r"(\d\.\d\d)(?:\u2013(\d\.\d\d))? times", body) for x in pair if x]
    assert quoted, "tpu.md, How fast: no ratio quoted"
    assert set(quoted) <= set(TPU_RATIOS), f"tpu.md quotes {set(quoted) - set(TPU_RATIOS)}, not in {TPU_TITLE!r}"
    assert {min(TPU_RATIOS), max(TPU_RATIOS)} <= set(quoted), f"tpu.md: quote {min(TPU_RATIOS)} and {max(TPU_RATIOS)}"
    bound = re.search(r"within ([\d.]+) times `jnp`'s time", body)
    assert bound and max(TPU_RATIOS) <= float(bound[1]), bound
    under = re.search(r"Every first call takes under ([\d.]+) s", body)
    assert under and min(TPU_FIRST_CALLS) < float(under[1]) <= max(TPU_FIRST_CALLS), under
    for slower in (t for t in TPU_FIRST_CALLS if t >= float(under[1])):  # each named
        assert f"({slower:.1f} s" in body or f"({slower:.2f} s)" in body, f"tpu.md: a first call took {slower} s"


# -- the test commands -------------------------------------------------------------------------------------------

COMMANDS_TITLE, COMMANDS_RUN = newest(r"^The test commands")
RECORDED = table(COMMANDS_RUN, "| command | time | when |")
TIMES_SECTION = section_of(README, "Development").split("### How long the commands take", 1)[1].split("\n### ", 1)[0]


def minutes(time: str) -> float:
    """``18 min 37 s`` or ``75 s`` (the first figure of a cell), in minutes."""
    found = re.match(r"(?:(\d+) min)?\s*(?:(\d+) s)?", time)
    assert found and (found[1] or found[2]), time
    return int(found[1] or 0) + int(found[2] or 0) / 60


def newest_time(command: str) -> str:
    """The newest recorded time of ``command`` (the table lists the newest first)."""
    for row in RECORDED:
        if row[0] == f"`{command}`":
            return row[1]
    raise AssertionError(f"benchmarks/RESULTS.md records no time of {command}")


def test_the_readmes_table_of_times_is_recorded() -> None:
    rows = table(TIMES_SECTION, "| command | time | when |")
    assert rows, "README: no table of the commands' times"
    missing = [row for row in rows if row not in RECORDED]
    assert not missing, f"README's times not recorded in benchmarks/RESULTS.md ({COMMANDS_TITLE!r}): {missing}"
    for command in ("bash .ci/main.sh", "bash .ci/test.sh", "bash .ci/quick.sh"):
        assert [f"`{command}`", newest_time(command)] == next(row[:2] for row in rows if row[0] == f"`{command}`"), (
            f"README's first row of {command} is not its newest time"
        )


def test_the_readmes_first_lines_give_the_newest_times() -> None:
    first = text(README).split("```bash\n", 1)[1].split("```", 1)[0]
    main = re.search(r"main\.sh .*\((\d+) s\)", first)
    assert main and f"{main[1]} s" == newest_time("bash .ci/main.sh").split(" (")[0], main
    whole = re.search(r"test\.sh .*\(about (\d+) min\)", first)
    assert whole and int(whole[1]) == round(minutes(newest_time("bash .ci/test.sh"))), (
        f"README's first lines: write about {round(minutes(newest_time('bash .ci/test.sh')))} min for .ci/test.sh"
    )
    quick = newest_time("bash .ci/quick.sh").split(" (")[0]
    assert f"on the newest jax + triton: {quick} on a 2-core machine" in " ".join(text(README).split()), quick


def test_the_ci_homes_sizes_are_the_recorded_ones() -> None:
    sizes = {row[0].strip("`"): row[1] for row in table(COMMANDS_RUN, "| folder of `$JT_CI_HOME` |")}
    said = dict(re.findall(r"`(venv-[\w.-]+)` (?:\(|holds )?([\d.]+ [MG]iB)", TIMES_SECTION))
    assert said == sizes, f"README's sizes {said}; benchmarks/RESULTS.md ({COMMANDS_TITLE!r}): {sizes}"
    test_sh = text(ROOT / ".ci" / "test.sh") + text(ROOT / ".ci" / "env.sh") + text(ROOT / ".ci" / "wheels.sh")
    for name in sizes:
        stem = re.sub(r"-jaxlib-[\d.]+$", "-jaxlib-", name)
        assert stem.removeprefix("venv-") in test_sh, f"{name}: no script makes it"


def test_the_quick_commands_count_of_tests_is_what_pytest_collects() -> None:
    files = re.search(r"^tests=\(\n(.*?)^\)$", text(ROOT / ".ci" / "quick.sh"), re.M | re.S)[1].split()
    said = re.search(r"runs \d+ test files of that suite \((\d+) tests", " ".join(text(README).split()))
    assert said, "README: how many tests the quick command runs"
    installed = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(sorted(d.metadata['Name'] for d in "
         "m.distributions() if d.metadata['Name'].startswith('jt-') and d.metadata['Name'].count('-') == 1))"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    if installed.strip() != str(sorted(d.replace("_", "-") for d in DISTRIBUTIONS)):
        pytest.skip(f"the quick command runs with every distribution installed; here: {installed.strip()}")
    collected = subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", *files],
        cwd=ROOT, capture_output=True, text=True,
    ).stdout  # fmt: skip
    count = re.search(r"^(\d+) tests? collected", collected, re.M)
    assert count, collected[-2000:]
    assert said[1] == count[1], f"README: .ci/quick.sh's files hold {count[1]} tests, not {said[1]}"
