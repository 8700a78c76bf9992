"""The README's Python examples run, and its two opening commands stay as documented."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)


def test_python_examples_run() -> None:
    blocks = _blocks("python")
    assert blocks, "README has no python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {"__name__": "readme"})


def test_readme_opens_with_the_service_and_the_test_commands() -> None:
    first, second = _blocks("bash")[:2]
    assert "pip install -e ." in first and "chatmem demo &&" in first
    assert first.strip().endswith("chatmem serve")
    assert "pip install -e '.[dev]'" in second
    assert second.strip().endswith('pytest -m "not slow"')


def test_docs_name_no_path_of_a_developers_machine() -> None:
    root = README.parent
    pages = [README, root / "benchmarks" / "README.md", *sorted((root / "docs").rglob("*.md"))]
    for page in pages:
        text = page.read_text()
        assert "/work/" not in text and "/home/" not in text, page.name
