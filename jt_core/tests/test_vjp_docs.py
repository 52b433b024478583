"""The example of docs/pages/gradients.md runs as written."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "pages" / "gradients.md"


def test_gradients_page_example_runs(tmp_path: Path) -> None:
    if not PAGE.exists():
        pytest.skip("docs/ is not part of this checkout")
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert blocks, "the Gradients page has no Python example"
    # Triton reads kernel source from files, so the example runs from one.
    script = tmp_path / "gradients_example.py"
    script.write_text("\n".join(blocks))
    runpy.run_path(str(script), run_name="__main__")
