"""Stored text reaches the terminal as the text it is (issue 11, item 9): never Rich markup,
never a hyperlink, never a control sequence. A real subprocess on a real SQLite file, with
Rich told the output is a colour terminal, so markup would render if it were parsed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HOSTILE = [
    "I said [/] and it broke",
    "[link=http://evil.example]click[/link] for a prize",
    "[bold red]LOUD[/] words",
    "a bell \x07 and \x1b[31mred\x1b[0m and a title \x1b]0;pwned\x07",
]


def _cli(tmp_path: Path, *args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "CHATMEM_STORE": f"sqlite:///{tmp_path}/cli.db",
        "COLUMNS": "250",
        "TTY_COMPATIBLE": "1",
        "FORCE_COLOR": "1",
        **variables,
    }
    return subprocess.run(
        [sys.executable, "-m", "chatmem.cli", *args],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip


@pytest.fixture
def hostile_store(tmp_path: Path) -> list[str]:
    ids = []
    for text in HOSTILE:
        added = _cli(tmp_path, "add", "--user", "mallory", text)
        assert added.returncode == 0, added.stderr
        ids.append(added.stdout.strip())
    return ids


def _shown(text: str) -> str:
    """How the CLI shows stored text: control characters as escapes."""
    return text.replace("\x07", "\\x07").replace("\x1b", "\\x1b")


@pytest.mark.parametrize(
    "command",
    [("list", "--user", "mallory"), ("search", "--user", "mallory", "--all", "--k", "10", "x")],
)
@pytest.mark.slow
def test_list_and_search_show_stored_markup_as_text(
    tmp_path: Path, hostile_store: list[str], command: tuple[str, ...]
) -> None:
    done = _cli(tmp_path, *command)
    assert done.returncode == 0, done.stderr
    for text in HOSTILE:
        assert _shown(text) in done.stdout
    assert "\x1b]" not in done.stdout  # no OSC: no hyperlink, no window title
    assert "\x07" not in done.stdout


@pytest.mark.slow
def test_history_shows_stored_markup_as_text(tmp_path: Path, hostile_store: list[str]) -> None:
    done = _cli(tmp_path, "history", hostile_store[1])
    assert done.returncode == 0, done.stderr
    assert HOSTILE[1] in done.stdout and "\x1b]8;" not in done.stdout


@pytest.mark.slow
def test_json_keeps_the_text_and_escapes_control_characters(
    tmp_path: Path, hostile_store: list[str]
) -> None:
    done = _cli(tmp_path, "list", "--user", "mallory", "--json")
    assert "\x1b" not in done.stdout
    stored = [m["content"] for m in json.loads(done.stdout)["memories"]]
    assert stored == HOSTILE


def test_an_error_keeps_its_brackets(tmp_path: Path) -> None:
    """The install hint names the extra, 'chatmem[milvus]', as written. pymilvus is
    installed here, so this run hides it as an environment without the extra would."""
    hide = "import sys; sys.modules['pymilvus'] = None; from chatmem.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", hide, "--store", f"milvus:///{tmp_path}/m", "add", "-u", "u", "x"],
        capture_output=True, text=True, env={**os.environ, "COLUMNS": "250"}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: ") and line.endswith("pip install 'chatmem[milvus]'")


def test_a_user_name_with_markup_is_text_in_errors(tmp_path: Path) -> None:
    _cli(tmp_path, "add", "--user", "someone", "the store exists")
    done = _cli(tmp_path, "get", "[bold]x[/]", "--user", "[link=http://evil.example]u")
    assert done.returncode == 1
    plain = re.sub(r"\x1b\[[0-9;]*m", "", done.stderr)  # the CLI's own red "error:"
    assert plain.splitlines() == ["error: memory '[bold]x[/]' not found"]
