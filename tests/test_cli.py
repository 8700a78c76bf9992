"""The CLI as a user runs it: a real subprocess on a real SQLite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture
def cli(tmp_path: Path):  # type: ignore[no-untyped-def]
    env = {**os.environ, "CHATMEM_STORE": f"sqlite:///{tmp_path}/cli.db", "COLUMNS": "200"}

    def run(
        *args: str, input: str | None = None, ok: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "chatmem.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            input=input,
            timeout=120,
        )
        if ok:
            assert done.returncode == 0, done.stderr
        return done

    return run


@pytest.mark.slow
def test_add_search_get_history_export_forget_import(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    memory_id = cli(
        "add",
        "--user",
        "alice",
        "--session",
        "s1",
        "--metadata",
        '{"topic": "travel"}',
        "My budget for the Hawaii trip is $10,000",
    ).stdout.strip()
    cli("add", "--user", "alice", "I walk my dog every morning")
    cli("add", "--user", "bob", "My budget for the Hawaii trip is $3,000")

    query = ("search", "--user", "alice", "--json", "--k", "5", "what is my trip budget")
    hits = json.loads(cli(*query).stdout)
    # By default only hits past the configured threshold (0.6): the dog is not a budget.
    assert [h["content"] for h in hits] == ["My budget for the Hawaii trip is $10,000"]
    assert hits[0]["id"] == memory_id
    assert hits[0]["metadata"] == {"topic": "travel"}
    every = json.loads(cli(*query, "--all").stdout)
    assert [h["content"] for h in every] == [
        "My budget for the Hawaii trip is $10,000",
        "I walk my dog every morning",
    ]
    assert 0 <= every[-1]["score"] <= every[0]["score"] <= 1
    assert every[-1]["relevance"] < 0.6 <= every[0]["relevance"]

    record = json.loads(cli("get", memory_id).stdout)
    assert record["session_id"] == "s1" and record["user_id"] == "alice"
    assert "add" in cli("history", memory_id).stdout

    exported = cli("export", "--user", "alice").stdout
    assert len(exported.splitlines()) == 2
    assert "forgot 2 memories" in cli("forget", "--user", "alice", "--yes").stdout
    assert json.loads(cli("search", "--user", "alice", "--json", "budget").stdout) == []
    assert "imported 2 memories" in cli("import", "-", input=exported).stdout
    again = json.loads(cli("search", "--user", "alice", "--json", "budget").stdout)
    assert again[0]["id"] == memory_id
    listed = json.loads(cli("list", "--user", "alice", "--json", "--limit", "1").stdout)
    assert len(listed["memories"]) == 1 and listed["next_cursor"]
    assert "memories" in cli("stats").stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("get", "missing0"), "memory 'missing0' not found"),
        (("add", "--user", "", "text"), "--user: "),
        (("add", "--user", "u", "   "), "blank"),
        (("search", "--user", "u", "--k", "0", "q"), "--k: must be at least 1"),
        # Past 64 bits these were OverflowError tracebacks from SQLite.
        (("search", "--user", "u", "--k", "99999999999999999999", "q"), "--k: must be 1 to"),
        (("list", "--user", "u", "--limit", "99999999999999999999"), "--limit: must be 1 to"),
        (("--store", "redis://x", "stats"), "unknown store scheme"),
    ],
)
def test_errors_are_one_line_and_exit_non_zero(cli, args: tuple[str, ...], message: str) -> None:  # type: ignore[no-untyped-def]
    cli("add", "--user", "someone", "the store exists, so reads reach it")
    done = cli(*args, ok=False)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0]


def test_malformed_import_stores_nothing(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "chatmem.export/1", "record": {"user_id": "u"}}\n')
    done = cli("import", str(bad), ok=False)
    assert done.returncode == 1 and "line 1" in done.stderr
    assert json.loads(cli("list", "--json").stdout)["memories"] == []
