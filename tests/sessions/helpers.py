"""Message builders, backend openers and the contended-append worker shared by the session
tests (the worker runs in threads and in spawned processes, so it lives in a module)."""

from __future__ import annotations

import functools
import os
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from chatmem.errors import StoreUnavailableError, ValidationError
from chatmem.messages import Message, SessionKey
from chatmem.sessions import InMemorySessionStore, SessionStore, SQLiteSessionStore

REDIS_URL = os.environ.get("CHATMEM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def message(content: str, turn_id: int | None = None, role: str = "user", **fields: Any) -> Message:
    return Message.model_validate({"role": role, "content": content, "turn_id": turn_id, **fields})


def random_key(tenant: str | None = None) -> SessionKey:
    return SessionKey(tenant or f"t-{uuid.uuid4().hex[:12]}", "alice", f"s-{uuid.uuid4().hex[:8]}")


@functools.cache
def _redis_unreachable() -> str | None:
    """Why the test Redis cannot be used, or None when it answers (asked once per run)."""
    try:
        from chatmem.sessions.redis import RedisSessionStore
    except ImportError:
        return "redis-py is not installed (pip install 'chatmem[redis]')"
    try:
        RedisSessionStore(REDIS_URL).close()
    except StoreUnavailableError as exc:
        return f"no Redis server at {REDIS_URL} (set CHATMEM_TEST_REDIS_URL): {exc}"
    return None


def require_redis() -> None:
    """Skip the test unless the test Redis answers."""
    if reason := _redis_unreachable():
        pytest.skip(reason)


def open_redis(prefix: str, **options: Any) -> SessionStore:
    """A Redis store under ``prefix``; skips the test when no server answers."""
    require_redis()
    from chatmem.sessions.redis import RedisSessionStore

    return RedisSessionStore(REDIS_URL, prefix=prefix, **options)


def drop_redis_prefix(prefix: str) -> None:
    """Delete every key under ``prefix`` (what a test's store wrote)."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        doomed = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if doomed:
            client.delete(*doomed)
    finally:
        client.close()


#: The test PostgreSQL database's URI, set by the ``backend`` fixture for the postgres runs.
POSTGRES: dict[str, str] = {}


def postgres_schema(prefix: str) -> str:
    """The schema a postgres run uses for a Redis-style ``prefix``."""
    return "t_" + prefix.rsplit("-", 1)[-1]


def open_backend(backend: str, directory: Path, prefix: str) -> SessionStore:
    if backend == "memory":
        return InMemorySessionStore()
    if backend == "sqlite":
        return SQLiteSessionStore(directory / "sessions.db")
    if backend == "postgres":
        from chatmem.sessions.postgres import PostgresSessionStore

        return PostgresSessionStore(POSTGRES["uri"], schema=postgres_schema(prefix))
    return open_redis(prefix)


class Contention(NamedTuple):
    refused_races: int
    refused_stale: int


def append_under_contention(
    store: SessionStore, key: SessionKey, writer: str, n: int
) -> Contention:
    """Append ``n`` messages, each at the turn this writer believes is the latest.

    When another writer has moved the session on, the store must refuse the append; the
    writer then catches up to the stored last turn and tries again. After every success it
    also sends a message one turn behind its own, which the store must always refuse, so the
    turn-order check runs against the freshest state under contention.
    """
    turn = 0
    races = stale = 0
    for i in range(n):
        while True:
            try:
                store.append(key, [message(f"{writer} #{i}", turn)])
                break
            except ValidationError:
                races += 1
                turn = _stored_last_turn(store, key)
        if turn > 0:
            try:
                store.append(key, [message(f"{writer} stale", turn - 1)])
            except ValidationError:
                stale += 1
            else:
                raise AssertionError(f"{writer}: turn {turn - 1} was stored after turn {turn}")
        turn += 1
    return Contention(races, stale)


def _stored_last_turn(store: SessionStore, key: SessionKey) -> int:
    (last,) = store.read(key, -1)
    assert last.turn_id is not None
    return last.turn_id


def check_contended_log(store: SessionStore, key: SessionKey, writers: list[str], n: int) -> None:
    """Every writer's messages are all there, once, in its order; turns never go back."""
    log = store.read(key)
    assert len(log) == store.length(key) == len(writers) * n
    turns = [m.turn_id or 0 for m in log]
    assert turns == sorted(turns)
    for writer in writers:
        mine = [m.content for m in log if m.content.startswith(f"{writer} ")]
        assert mine == [f"{writer} #{i}" for i in range(n)]
