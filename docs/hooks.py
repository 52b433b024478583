"""mkdocs hooks of jt's documentation site.

``<!-- include: PATH -->`` on a line of its own is replaced by the content of ``PATH`` (relative to the repository
root) when the site is built, so pages can show files kept elsewhere (benchmark results) without copying them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
INCLUDE = re.compile(r"^<!-- include: (?P<path>\S+) -->$", re.MULTILINE)


def _include(match: re.Match[str]) -> str:
    path = (REPO_ROOT / match["path"]).resolve()
    if REPO_ROOT not in path.parents:
        raise ValueError(f"include {match['path']!r} points outside the repository")
    return path.read_text(encoding="utf-8")


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Expands the include markers of a page."""
    return INCLUDE.sub(_include, markdown)
