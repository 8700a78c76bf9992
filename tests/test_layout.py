"""The shape of the package (issue 16): small modules, short functions, no import circle.

These read the source as text (``ast``), so they hold for every module, imported by a test
or not. The limits are the project's: a module over 600 lines or a function over 60 is a
room too big for a newcomer to know what they may touch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "chatmem"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports_run(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Every import the module can run, at import time or later inside a function: a
    circle hidden in a function body is still a circle. Only ``if TYPE_CHECKING:`` blocks,
    which never run, are left out."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.If) and _is_type_checking(node):
            found += _imports_run(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for field in ("body", "orelse", "finalbody", "handlers"):
            found += _imports_run(getattr(node, field, []))
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(name: str, path: Path) -> set[str]:
    """The chatmem modules that ``name`` imports directly."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    targets: set[str] = set()
    for node in _imports_run(tree.body):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(name, path.name == "__init__.py", node)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                targets.add(submodule if submodule in MODULES else source)
    return {target for target in targets if target in MODULES and target != name}


def _cycle() -> list[str] | None:
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_no_module_is_over_the_limit() -> None:
    too_long = {
        name: lines
        for name, path in MODULES.items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert too_long == {}


def test_no_function_is_over_the_limit() -> None:
    too_long: dict[str, int] = {}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    too_long[f"{name}:{node.lineno} {node.name}"] = lines
    assert too_long == {}


def test_no_import_circle() -> None:
    assert _cycle() is None


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from chatmem import errors\n", {"chatmem.errors"}),
        ("from chatmem.records import Filter\n", {"chatmem.records"}),
        ("if TYPE_CHECKING:\n    from chatmem import memory\n", set()),
        ("def f():\n    from chatmem import memory\n", {"chatmem.memory"}),
        ("try:\n    import chatmem.text\nexcept ImportError:\n    pass\n", {"chatmem.text"}),
    ],
)
def test_the_import_reader_sees_every_import_that_can_run(
    tmp_path: Path, source: str, expected: set[str]
) -> None:
    path = tmp_path / "probe.py"
    path.write_text(source, encoding="utf-8")
    assert _imports("chatmem.probe", path) == expected
