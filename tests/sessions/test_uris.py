"""open_session_store: which backend each URI opens, and the errors for bad ones."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chatmem.errors import ConfigError, ValidationError
from chatmem.messages import Message, SessionKey
from chatmem.sessions import InMemorySessionStore, SQLiteSessionStore, open_session_store


@pytest.mark.parametrize("uri", [None, "memory://"])
def test_memory(uri: str | None) -> None:
    assert isinstance(open_session_store(uri), InMemorySessionStore)


def test_sqlite_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for uri, expected in [
        ("sqlite:///rel.db", "rel.db"),
        (f"sqlite:///{tmp_path}/abs.db?synchronous=full", f"{tmp_path}/abs.db"),
        (str(tmp_path / "bare.db"), str(tmp_path / "bare.db")),
    ]:
        opened = open_session_store(uri)
        assert isinstance(opened, SQLiteSessionStore) and opened.path == expected
        opened.close()
    assert (tmp_path / "rel.db").exists()


@pytest.mark.parametrize(
    ("uri", "error", "match"),
    [
        ("mysql://db/x", ConfigError, "unknown session store scheme"),
        ("sqlite://host/x.db", ConfigError, "three slashes"),
        ("sqlite:///", ConfigError, "names no file"),
        ("redis://127.0.0.1:1/0?ttl=soon", ConfigError, "ttl"),
        ("redis://127.0.0.1:1/0?ttl=0", ConfigError, "ttl"),
        ("sqlite:///x.db?synchronous=sometimes", ValidationError, "synchronous"),
    ],
)
def test_bad_uris(
    uri: str, error: type[Exception], match: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error, match=match):
        open_session_store(uri)


def test_redis_without_redis_py_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # what an import of a missing module sees
    monkeypatch.delitem(sys.modules, "chatmem.sessions.redis", raising=False)
    with pytest.raises(ConfigError, match=r"pip install 'chatmem\[redis\]'"):
        open_session_store("redis://127.0.0.1:6379/0")


@pytest.mark.postgres
def test_a_postgresql_uri_opens_the_postgres_store_in_its_schema(
    postgres_uri: str, pg_schema: str
) -> None:
    pytest.importorskip("psycopg")
    from chatmem.sessions.postgres import PostgresSessionStore

    separator = "&" if "?" in postgres_uri else "?"
    store = open_session_store(f"{postgres_uri}{separator}schema={pg_schema}")
    try:
        assert isinstance(store, PostgresSessionStore)
        key = SessionKey("t", "u", "s")
        assert store.append(key, [Message(role="user", content="hi")]) == 1
    finally:
        store.close()
