"""The CLI's comforts (issue 17, items 6 and 11): --version, forget asks first, search
filters and the configured threshold, short ids, import's progress and --on-conflict,
plurals, and errors that name the option the user gave. Commands run in process through
typer's runner where only their output matters, and as real subprocesses (on a terminal,
through a pseudo-terminal, where that matters) for exit status and error lines."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from chatmem.cli import app, short_ids
from chatmem.version import __version__

Cli = Callable[..., Result]


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/cli.db"


@pytest.fixture
def cli(store: str) -> Cli:
    runner = CliRunner()

    def run(*args: str, input: str | None = None) -> Result:
        done = runner.invoke(app, list(args), input=input, env={"CHATMEM_STORE": store})
        assert done.exit_code == 0, (done.output, done.exception)
        return done

    return run


def _subprocess(
    store: str, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHATMEM_STORE": store, "COLUMNS": "250"}
    return subprocess.run(
        [sys.executable, "-m", "chatmem.cli", *args],
        capture_output=True, text=True, env=env, input=input, timeout=120,
    )  # fmt: skip


def _on_a_terminal(store: str, *args: str, answer: str = "", columns: int = 120) -> tuple[int, str]:
    """Run the CLI with a pseudo-terminal as stdin, stdout and stderr; type ``answer`` once
    it asks. Returns the exit status and everything the terminal showed."""
    main, side = pty.openpty()
    env = {**os.environ, "CHATMEM_STORE": store, "COLUMNS": str(columns), "TERM": "xterm"}
    process = subprocess.Popen(
        [sys.executable, "-m", "chatmem.cli", *args],
        stdin=side, stdout=side, stderr=side, env=env, close_fds=True,
    )  # fmt: skip
    os.close(side)
    shown = b""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
                if answer and b"[y/N]" in shown:
                    os.write(main, answer.encode() + b"\n")
                    answer = ""
            elif process.poll() is not None:
                break
        return process.wait(30), shown.decode(errors="replace")
    finally:
        os.close(main)
        if process.poll() is None:
            process.kill()


# -- --version ---------------------------------------------------------------------------------


def test_version_option(cli: Cli) -> None:
    assert cli("--version").stdout == f"{__version__}\n"
    assert cli("version").stdout == f"{__version__}\n"


# -- forget asks first -------------------------------------------------------------------------


def _ids(cli: Cli, user: str) -> list[str]:
    return [m["id"] for m in json.loads(cli("list", "--user", user, "--json").stdout)["memories"]]


def test_forget_everything_needs_yes_without_a_terminal(cli: Cli, store: str) -> None:
    cli("add", "--user", "alice", "I keep bees")
    cli("add", "--user", "alice", "I live in Lisbon")
    refused = _subprocess(store, "forget", "--user", "alice", input="y\n")
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        "error: forget 2 memories of 'alice' needs --yes when stdin is not a terminal"
    ]
    assert len(_ids(cli, "alice")) == 2
    assert cli("forget", "--user", "alice", "--yes").stdout == "forgot 2 memories\n"
    assert _ids(cli, "alice") == []


def test_forget_everything_asks_on_a_terminal(cli: Cli, store: str) -> None:
    cli("add", "--user", "alice", "I keep bees")
    status, shown = _on_a_terminal(store, "forget", "--user", "alice", answer="n")
    assert status == 0 and "forget 1 memory of 'alice'? [y/N]" in shown
    assert "nothing forgotten" in shown and len(_ids(cli, "alice")) == 1
    status, shown = _on_a_terminal(store, "forget", "--user", "alice", answer="y")
    assert status == 0 and "forgot 1 memory" in shown
    assert _ids(cli, "alice") == []


def test_forget_one_memory_does_not_ask(cli: Cli) -> None:
    kept = cli("add", "--user", "alice", "I keep bees").stdout.strip()
    gone = cli("add", "--user", "alice", "I live in Lisbon").stdout.strip()
    assert cli("forget", "--user", "alice", "--id", gone).stdout == "forgot 1 memory\n"
    assert _ids(cli, "alice") == [kept]


# -- search: filters and the threshold ---------------------------------------------------------


@pytest.fixture
def travel(cli: Cli) -> dict[str, str]:
    added = {
        "rome": ("--session", "s1", "--project", "trips", "My hotel in Rome is the Hotel Artemide"),
        "paris": ("--session", "s2", "--project", "trips", "My hotel in Paris is Le Marais Inn"),
        "work": ("--session", "s2", "--type", "procedural", "Book hotels through the travel desk"),
    }
    return {
        name: cli("add", "--user", "alice", *args).stdout.strip() for name, args in added.items()
    }


def _hits(cli: Cli, *args: str) -> list[str]:
    found = cli("search", "--user", "alice", "--json", *args, "which hotel am I staying at")
    return [hit["id"] for hit in json.loads(found.stdout)]


def test_search_filters(cli: Cli, travel: dict[str, str]) -> None:
    every = ("--all", "--k", "10")
    assert set(_hits(cli, *every)) == set(travel.values())
    assert _hits(cli, *every, "--session", "s1") == [travel["rome"]]
    assert set(_hits(cli, *every, "--project", "trips")) == {travel["rome"], travel["paris"]}
    assert _hits(cli, *every, "--type", "procedural") == [travel["work"]]
    both = _hits(cli, *every, "--type", "procedural", "--type", "semantic", "--session", "s2")
    assert set(both) == {travel["paris"], travel["work"]}


def test_search_uses_the_configured_threshold(cli: Cli, store: str, travel: dict[str, str]) -> None:
    cli("add", "--user", "alice", "I walk my dog every morning")
    scores = json.loads(
        cli("search", "--user", "alice", "--json", "--all", "--k", "10", "my hotel").stdout
    )
    relevance = {hit["id"]: hit["relevance"] for hit in scores}
    assert min(relevance.values()) < 0.6 <= max(relevance.values())
    assert set(_hits_for(cli, "my hotel")) == {i for i, r in relevance.items() if r >= 0.6}
    assert set(_hits_for(cli, "my hotel", "--threshold", "0")) == set(relevance)
    assert set(_hits_for(cli, "my hotel", "--threshold", "0.99")) == {
        i for i, r in relevance.items() if r >= 0.99
    }
    # The configured threshold is the service's, CHATMEM__ overrides included.
    configured = CliRunner().invoke(
        app,
        ["search", "--user", "alice", "--json", "--k", "10", "my hotel"],
        env={"CHATMEM_STORE": store, "CHATMEM__MEMORY__DEFAULT_SIMILARITY_THRESHOLD": "0.99"},
    )
    assert configured.exit_code == 0, configured.output
    assert {h["id"] for h in json.loads(configured.stdout)} == {
        i for i, r in relevance.items() if r >= 0.99
    }


def _hits_for(cli: Cli, query: str, *args: str) -> list[str]:
    found = cli("search", "--user", "alice", "--json", "--k", "10", *args, query)
    return [hit["id"] for hit in json.loads(found.stdout)]


def test_search_says_when_the_threshold_hid_every_hit(cli: Cli, store: str) -> None:
    cli("add", "--user", "alice", "I walk my dog every morning")
    done = _subprocess(store, "search", "--user", "alice", "quantum chromodynamics")
    assert done.returncode == 0
    assert done.stdout == "0 results for 'quantum chromodynamics'\n"
    assert done.stderr == "none reached a relevance of 0.6; --all shows every hit\n"
    clash = _subprocess(store, "search", "--user", "alice", "--all", "--threshold", "0.5", "q")
    assert clash.stderr == "error: --all: give --threshold or --all, not both\n"


# -- short ids ---------------------------------------------------------------------------------


def test_short_ids_are_unique_prefixes() -> None:
    ids = ["abcdef0123", "abcdef0199", "abcdef1000", "1234567890ab"]
    assert short_ids(ids) == {
        "abcdef0123": "abcdef012",
        "abcdef0199": "abcdef019",
        "abcdef1000": "abcdef10",
        "1234567890ab": "12345678",
    }


def _import_ids(cli: Cli, tmp_path: Path, ids: list[str], user: str = "alice") -> None:
    lines = [
        json.dumps(
            {
                "format": "chatmem.export/1",
                "record": {"id": i, "user_id": user, "content": {"raw": f"fact {n}"}},
                "vector": None,
            }
        )
        for n, i in enumerate(ids)
    ]
    path = tmp_path / "ids.jsonl"
    path.write_text("\n".join(lines) + "\n")
    cli("import", str(path))


def test_list_shows_short_ids_and_get_takes_them(cli: Cli, store: str, tmp_path: Path) -> None:
    twins = ["a1b2c3d4e5f60718293a4b5c6d7e8f90", "a1b2c3d4e5f6ffff293a4b5c6d7e8f90"]
    single = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    _import_ids(cli, tmp_path, [*twins, single])
    listed = cli("list", "--user", "alice").stdout
    for shown in ("a1b2c3d4e5f60", "a1b2c3d4e5f6f", "0f1e2d3c "):
        assert f" {shown}" in listed
    assert single not in listed and twins[0] not in listed

    assert json.loads(cli("get", "0f1e2d3c").stdout)["id"] == single
    assert json.loads(cli("get", "a1b2c3d4e5f6f").stdout)["id"] == twins[1]
    assert "fact 0" in cli("history", "a1b2c3d4e5f60").stdout
    ambiguous = _subprocess(store, "get", "a1b2c3d4")
    assert ambiguous.returncode == 1
    assert ambiguous.stderr == (
        "error: 'a1b2c3d4' is ambiguous: 2 memories start with it (a1b2c3d4e5f60, a1b2c3d4e5f6f…)\n"
    )
    # Too short to be a prefix, and another user's memory is not found by its prefix.
    assert _subprocess(store, "get", "a1b").stderr == "error: memory 'a1b' not found\n"
    other = _subprocess(store, "get", "0f1e2d3c", "--user", "bob")
    assert other.stderr == "error: memory '0f1e2d3c' not found\n"


# -- import: progress and conflicts ------------------------------------------------------------


@pytest.mark.slow
def test_import_shows_a_count_and_the_time_left(cli: Cli, store: str, tmp_path: Path) -> None:
    lines = [
        json.dumps(
            {
                "format": "chatmem.export/1",
                "record": {"user_id": "bulk", "content": {"raw": f"fact number {n} of the bulk"}},
                "vector": None,
            }
        )
        for n in range(1500)
    ]
    path = tmp_path / "bulk.jsonl"
    path.write_text("\n".join(lines) + "\n")
    status, shown = _on_a_terminal(store, "import", str(path))
    assert status == 0, shown
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)  # colours, cursor moves
    assert re.search(r"embedding .* \d+/1500 texts \d+:\d\d:\d\d", shown), shown
    assert "imported 1500 memories" in shown


def test_import_on_conflict(cli: Cli, store: str, tmp_path: Path) -> None:
    kept = cli("add", "--user", "alice", "I keep bees").stdout.strip()
    cli("add", "--user", "alice", "I live in Lisbon")
    export = tmp_path / "alice.jsonl"
    cli("export", "--user", "alice", "-o", str(export))
    cli("forget", "--user", "alice", "--yes", "--id", kept)
    changed = export.read_text().replace("I live in Lisbon", "I live in Porto")
    export.write_text(changed)

    failed = _subprocess(store, "import", str(export))
    assert failed.returncode == 1
    (line,) = failed.stderr.splitlines()
    assert line.endswith("already exists; nothing was imported (--on-conflict skip or replace)")
    assert len(_ids(cli, "alice")) == 1

    skipped = cli("import", "--on-conflict", "skip", str(export)).stdout
    assert skipped == "imported 1 memory, skipped 1 already stored\n"

    def texts() -> list[str]:
        listed = json.loads(cli("list", "--user", "alice", "--json").stdout)["memories"]
        return sorted(m["content"] for m in listed)

    assert texts() == ["I keep bees", "I live in Lisbon"]

    replaced = cli("import", "--on-conflict", "replace", str(export)).stdout
    assert replaced == "imported 2 memories\n"
    assert texts() == ["I keep bees", "I live in Porto"]


# -- words -------------------------------------------------------------------------------------


def test_one_memory_is_singular(cli: Cli, tmp_path: Path) -> None:
    memory_id = cli("add", "--user", "alice", "I keep bees").stdout.strip()
    assert "1 memory" in cli("list").stdout
    found = cli("search", "--user", "alice", "do I keep bees")
    assert "1 result for 'do I keep bees'" in found.stdout
    out = tmp_path / "one.jsonl"
    assert cli("export", "-o", str(out)).stderr == "exported 1 memory\n"
    cli("forget", "--user", "alice", "--id", memory_id)
    assert cli("import", str(out)).stdout == "imported 1 memory\n"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("add", "--user", "alice", "   "), "error: TEXT: text is blank"),
        (("add", "--user", "", "x"), "error: --user: String should have at least 1 character"),
        (("list", "--user", ""), "error: --user: String should have at least 1 character"),
        (("list", "--limit", "0"), "error: --limit: must be 1 to 10000"),
        (
            ("add", "--user", "a", "--metadata", "[1]", "x"),
            "error: --metadata: must be a JSON object",
        ),
    ],
)
def test_errors_name_the_option_the_user_gave(store: str, args: tuple[str, ...], line: str) -> None:
    _subprocess(store, "add", "--user", "someone", "the store exists")
    done = _subprocess(store, *args)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [line]


def test_add_of_a_long_text_prints_the_id_of_every_part(cli: Cli) -> None:
    text = "\n\n".join(f"Paragraph {n} of a pasted report about region{n}." for n in range(2000))
    ids = cli("add", "--user", "alice", text).stdout.split()
    assert len(ids) > 1
    assert sorted(_ids(cli, "alice")) == sorted(ids)
