"""``chatmem backup`` and ``chatmem restore``, run as a user runs them (a subprocess) on real
SQLite files: a backup taken while a writer adds memories restores every memory
acknowledged before it began; a damaged backup, a newer schema and an existing database
without --force are refused in one line; stores on servers are named with their own tools.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from chatmem import LocalEmbedder, LongTermMemory
from chatmem.cli.backup import known_versions, native_tools, schema_versions
from chatmem.records import Filter
from chatmem.server.auth import KeyStore
from chatmem.server.config import ServiceConfig
from chatmem.server.runtime import Runtime
from chatmem.stores import SQLiteStore
from chatmem.stores.sqlite.file import sqlite3


def _cli(data_dir: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """``chatmem ARGS`` for a service whose data dir is ``data_dir``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATMEM")}
    env.update({"CHATMEM__SERVER__DATA_DIR": str(data_dir), "COLUMNS": "300"})
    done = subprocess.run(
        [sys.executable, "-m", "chatmem.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if ok:
        assert done.returncode == 0, done.stderr
    return done


def _one_line_error(done: subprocess.CompletedProcess[str], *words: str) -> str:
    assert done.returncode == 1
    line = done.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, done.stderr
    assert line.startswith("error: ")
    for word in words:
        assert word in line, line
    return line


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextmanager
def _memories(path: Path, embedder: LocalEmbedder) -> Iterator[LongTermMemory]:
    with LongTermMemory(SQLiteStore(path), embedder) as memory:
        yield memory


def _small_service(data_dir: Path, embedder: LocalEmbedder, fact: str) -> str:
    """A data dir with one memory of alice's and one API key; returns the key."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with _memories(data_dir / "chatmem.db", embedder) as memory:
        memory.add(fact, user_id="alice")
    keys = KeyStore(data_dir / "service.db")
    key, _ = keys.create("default", [], name="backup test")
    keys.close()
    return key


# -- a consistent backup while writing ---------------------------------------------------------


class _Writer(threading.Thread):
    """Adds memories one at a time until stopped; ``acknowledged`` holds each memory
    whose add returned, in order."""

    def __init__(self, memory: LongTermMemory) -> None:
        super().__init__(daemon=True)
        self.memory = memory
        self.acknowledged: list[tuple[str, str]] = []
        self.stop = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        # No checkpoints: what was acknowledged stays in the WAL, where only an online
        # backup sees it (a copy of the main file would miss it), as under a busy reader.
        store = self.memory.store
        assert isinstance(store, SQLiteStore)
        store._file.connection().execute("PRAGMA wal_autocheckpoint = 0")
        n = 0
        try:
            while not self.stop.is_set():
                text = f"Parcel {n} went to warehouse {n * 7 % 97} in crate {n}"
                (record,) = self.memory.add(text, user_id="writer")
                self.acknowledged.append((record.id, text))
                n += 1
        except BaseException as exc:  # boundary: the writer thread's error, read after join
            self.failure = exc

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + 60
        while len(self.acknowledged) < count and time.monotonic() < deadline:
            assert self.failure is None and self.is_alive(), self.failure
            time.sleep(0.01)


@pytest.mark.slow
def test_a_backup_taken_while_writing_restores_every_acknowledged_memory(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    live, restored, dest = tmp_path / "live", tmp_path / "restored", tmp_path / "backup"
    key = _small_service(live, embedder, "I keep the spare key under the blue pot")
    with _memories(live / "chatmem.db", embedder) as memory:
        writer = _Writer(memory)
        writer.start()
        writer.wait_for(20)
        before = list(writer.acknowledged)
        done = _cli(live, "backup", str(dest))
        during = len(writer.acknowledged) - len(before)
        writer.stop.set()
        writer.join(30)
    assert writer.failure is None, writer.failure
    assert during > 0, "the writer must keep adding while the backup runs"
    assert "service.db" in done.stdout and "chatmem.db" in done.stdout

    _cli(restored, "restore", str(dest))
    with _memories(restored / "chatmem.db", embedder) as memory:
        for memory_id, text in before:
            assert memory.get(memory_id, user_id="writer").content.raw == text
            found = memory.search(text, user_id="writer", k=3)
            assert memory_id in [hit.record.id for hit in found], text
        writer_scope = Filter(tenant_id="default", user_id="writer")
        kept = {r.id for r in memory.list(writer_scope, limit=10_000).records}
    assert kept <= {memory_id for memory_id, _ in writer.acknowledged}
    keys = KeyStore(restored / "service.db")
    assert keys.authenticate(key) is not None
    keys.close()


def test_the_manifest_lists_each_file_with_its_checksum_and_schema(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    _small_service(tmp_path / "live", embedder, "I like green tea")
    _cli(tmp_path / "live", "backup", str(tmp_path / "backup"))
    manifest = json.loads((tmp_path / "backup" / "manifest.json").read_text())
    assert manifest["format"] == 1 and manifest["created_at"].endswith("Z")
    assert [f["name"] for f in manifest["files"]] == ["service.db", "chatmem.db"]
    for entry in manifest["files"]:
        copy = tmp_path / "backup" / entry["name"]
        assert entry["size"] == copy.stat().st_size and entry["sha256"] == _sha(copy)
    assert manifest["files"][1]["schema_versions"] == {"chatmem": known_versions()["chatmem"]}


def test_restore_knows_every_component_the_service_keeps_in_sqlite(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    """A component added to service.db but not to ``known_versions`` would make every
    backup unrestorable: the service's own files must match it exactly."""
    config = ServiceConfig.parse(
        {
            "server": {"data_dir": str(tmp_path / "live")},
            "webhooks": {"session_end": {"url": "http://127.0.0.1:9/hook"}},
        }
    )
    Runtime.start(config, embedder=embedder).close()
    found: dict[str, int] = {}
    for name in ("service.db", "chatmem.db"):
        with closing(sqlite3.connect(tmp_path / "live" / name)) as conn:
            found |= schema_versions(conn)
    assert found == known_versions()
    _cli(tmp_path / "live", "backup", str(tmp_path / "backup"))
    _cli(tmp_path / "restored", "restore", str(tmp_path / "backup"))


# -- refusals ----------------------------------------------------------------------------------


def test_a_damaged_backup_is_refused_in_one_line_and_nothing_is_restored(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    _small_service(tmp_path / "live", embedder, "I like green tea")
    dest = tmp_path / "backup"
    _cli(tmp_path / "live", "backup", str(dest))
    copy = dest / "chatmem.db"
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF
    copy.write_bytes(bytes(data))
    done = _cli(tmp_path / "restored", "restore", str(dest), ok=False)
    _one_line_error(done, "chatmem.db", "sha256", "nothing was restored")
    assert not (tmp_path / "restored").exists() or not list((tmp_path / "restored").iterdir())


def test_a_schema_newer_than_this_release_is_refused(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    live = tmp_path / "live"
    _small_service(live, embedder, "I like green tea")
    newer = known_versions()["chatmem"] + 1
    with closing(sqlite3.connect(live / "chatmem.db")) as conn, conn:
        conn.execute("INSERT INTO chatmem_schema VALUES ('chatmem', ?, 0)", (newer,))
    _cli(live, "backup", str(tmp_path / "backup"))
    done = _cli(tmp_path / "restored", "restore", str(tmp_path / "backup"), ok=False)
    _one_line_error(done, f"version {newer} is newer", "upgrade chatmem")


@pytest.mark.slow
def test_restore_over_an_existing_database_needs_force(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    _small_service(tmp_path / "live", embedder, "I keep my bike in the shed")
    _cli(tmp_path / "live", "backup", str(tmp_path / "backup"))
    target = tmp_path / "target"
    _small_service(target, embedder, "I keep my kayak at the lake")
    _crash_with_wal_frames(target / "chatmem.db")
    was = _sha(target / "chatmem.db")

    done = _cli(target, "restore", str(tmp_path / "backup"), ok=False)
    _one_line_error(done, "exists", "--force")
    assert _sha(target / "chatmem.db") == was

    _cli(target, "restore", "--force", str(tmp_path / "backup"))
    assert not list(target.glob(".*")), "no temporary or replaced file is left"
    with _memories(target / "chatmem.db", embedder) as memory:
        found = memory.search("where is my bike", user_id="alice", k=5)
        assert [hit.record.content.raw for hit in found] == ["I keep my bike in the shed"]
        assert memory.search("crashed", user_id="crash", k=5) == []


def _crash_with_wal_frames(path: Path) -> None:
    """A writer that dies with its last commit only in the WAL, as a killed server does:
    the WAL belongs to the file it was written for, never to a restored one."""
    script = (
        "import os, sys\n"
        "from chatmem import LongTermMemory\n"
        "from chatmem.stores import SQLiteStore\n"
        "m = LongTermMemory(SQLiteStore(sys.argv[1]), __import__('chatmem').LocalEmbedder())\n"
        "m.store._file.connection().execute('PRAGMA wal_autocheckpoint = 0')\n"
        "m.add('crashed writer was here', user_id='crash')\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=120)
    assert path.with_name(path.name + "-wal").stat().st_size > 0


# -- stores on servers -------------------------------------------------------------------------


@pytest.mark.postgres
def test_a_postgresql_store_is_named_with_pg_dump(tmp_path: Path, postgres_uri: str) -> None:
    done = _cli(tmp_path, "--store", postgres_uri, "backup", str(tmp_path / "b"), ok=False)
    _one_line_error(done, "is PostgreSQL", "pg_dump", "pg_restore")
    assert not (tmp_path / "b").exists()


def test_sessions_in_redis_are_named_beside_a_sqlite_backup(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    _small_service(tmp_path / "live", embedder, "I like green tea")
    config = tmp_path / "chatmem.yaml"
    config.write_text("memory:\n  sessions: {store: 'redis://127.0.0.1:6379/0'}\n")
    done = _cli(tmp_path / "live", "backup", "-c", str(config), str(tmp_path / "b"))
    assert done.stderr.strip() == (
        "note: redis://127.0.0.1:6379/0 is Redis: back it up with BGSAVE (copy dump.rdb)"
        " or its AOF files"
    )


@pytest.mark.parametrize(
    ("uri", "tool"),
    [
        ("postgresql://me:secret@db:5432/chat?prefix=acme", "--schema=acme_service"),
        ("rediss://cache:6380/0", "BGSAVE"),
        ("milvus://milvus:19530", "milvus-backup"),
        ("milvus:///var/lib/milvus", "copy it while chatmem serve is stopped"),
        ("qdrant://qdrant:6333/chat", "Qdrant snapshots"),
        ("qdrant+local:///var/lib/qdrant", "copy it while chatmem serve is stopped"),
    ],
)
def test_each_server_store_names_its_own_tools(uri: str, tool: str) -> None:
    line = native_tools(uri)
    assert line is not None and tool in line and "secret" not in line
