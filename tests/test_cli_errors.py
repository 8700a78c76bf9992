"""What the CLI says when something is wrong (issue 17, items 2 and 4): one line, ``error:``
and exit status 1, never a traceback; and a read never makes a store. Real subprocesses on
real files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _cli(
    tmp_path: Path, *args: str | bytes, input: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHATMEM_STORE": f"sqlite:///{tmp_path}/cli.db", "COLUMNS": "250"}
    env.pop("CHATMEM_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-m", "chatmem.cli", *args],
        capture_output=True, env=env, input=input, timeout=120,
    )  # fmt: skip
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode()
    )


def _one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    added = _cli(tmp_path, "add", "--user", "alice", "I keep bees on the roof")
    assert added.returncode == 0, added.stderr
    return tmp_path / "cli.db"


# -- files -------------------------------------------------------------------------------------


def test_import_of_a_missing_file(tmp_path: Path) -> None:
    line = _one_line_error(_cli(tmp_path, "import", str(tmp_path / "missing.jsonl")))
    assert line == f"error: {tmp_path / 'missing.jsonl'}: No such file or directory"
    assert not (tmp_path / "cli.db").exists()


def test_import_of_a_folder(tmp_path: Path) -> None:
    line = _one_line_error(_cli(tmp_path, "import", str(tmp_path)))
    assert line == f"error: {tmp_path}: Is a directory"


def test_import_of_a_file_that_is_not_utf8(tmp_path: Path, store: Path) -> None:
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes('{"note": "café"}\n'.encode("latin-1"))
    line = _one_line_error(_cli(tmp_path, "import", str(latin1)))
    assert line == f"error: {latin1} is not UTF-8 text (byte 0xe9 at offset 13)"
    piped = _one_line_error(_cli(tmp_path, "import", "-", input=b"\xff\n"))
    assert piped == "error: stdin is not UTF-8 text (byte 0xff at offset 0)"


def test_export_into_a_missing_folder(tmp_path: Path, store: Path) -> None:
    target = tmp_path / "no" / "such" / "out.jsonl"
    line = _one_line_error(_cli(tmp_path, "export", "-o", str(target)))
    assert line == f"error: --output: no folder {target.parent}"
    assert not (tmp_path / "no").exists()


def test_export_onto_a_folder(tmp_path: Path, store: Path) -> None:
    line = _one_line_error(_cli(tmp_path, "export", "-o", str(tmp_path)))
    assert line == f"error: --output: {tmp_path} is a folder; give a file name"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("search", "--user", "alice", b"caf\xe9"), "QUERY"),
        (("search", "--user", b"\xff", "bees"), "--user"),
        (("add", "--user", "alice", b"\xc3("), "TEXT"),
    ],
)
def test_an_argument_that_is_not_utf8(
    tmp_path: Path, store: Path, args: tuple[str | bytes, ...], field: str
) -> None:
    line = _one_line_error(_cli(tmp_path, *args))
    assert line.startswith(f"error: {field}: not UTF-8 text: b'")


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    done = _cli(tmp_path, "--debug", "import", str(tmp_path / "missing.jsonl"))
    assert done.returncode == 1 and "Traceback" in done.stderr


# -- typos in the store URI --------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("get", "0123456789abcdef"),
        ("list",),
        ("search", "--user", "alice", "bees"),
        ("stats",),
        ("export",),
        ("history", "0123456789abcdef"),
        ("forget", "--user", "alice", "--yes"),
    ],
)
def test_a_read_never_makes_a_store(tmp_path: Path, store: Path, command: tuple[str, ...]) -> None:
    typo = tmp_path / "typo.db"
    line = _one_line_error(_cli(tmp_path, "--store", f"sqlite:///{typo}", *command))
    assert line == f"error: no store at {typo}; add a memory first or check --store"
    assert not typo.exists()


def test_a_missing_folder_is_never_made(tmp_path: Path) -> None:
    folder = tmp_path / "nonexistent" / "dir"
    uri = f"sqlite:///{folder}/x.db"
    read = _one_line_error(_cli(tmp_path, "--store", uri, "list"))
    assert read == f"error: no store at {folder}/x.db; add a memory first or check --store"
    added = _one_line_error(_cli(tmp_path, "--store", uri, "add", "--user", "u", "x"))
    assert added == f"error: no folder {folder} for the store {uri}; check --store"
    assert not (tmp_path / "nonexistent").exists()


def test_add_makes_a_store_in_a_folder_that_exists(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/new.db"
    added = _cli(tmp_path, "--store", uri, "add", "--user", "u", "x")
    assert added.returncode == 0, added.stderr
    assert (tmp_path / "new.db").is_file()


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("foo://bar", "unknown store scheme 'foo' in 'foo://bar' (sqlite"),
        ("sqlite://host/x.db", "'sqlite://host/x.db': a local store URI has three slashes"),
        ("sqlite:///", "'sqlite:///' names no file"),
    ],
)
def test_a_store_uri_that_cannot_be_right(tmp_path: Path, uri: str, message: str) -> None:
    assert _one_line_error(_cli(tmp_path, "--store", uri, "list")).startswith(f"error: {message}")
