"""Session stores for short-term memory, chosen by URI.

- ``memory://`` (or no URI): in the process (the default for a Memory object with no store).
- ``redis://host:6379/0`` or ``rediss://…`` (``?prefix=…&ttl=…`` seconds): Redis; needs
  ``pip install 'chatmem[redis]'``; other query options go to redis-py.
- ``postgresql://user:password@host:5432/dbname`` or ``postgres://…`` (``?schema=…``, default
  ``chatmem_service``): PostgreSQL, shared by every replica; needs ``pip install
  'chatmem[postgres]'``; other query options go to libpq.
- ``sqlite:///relative.db``, ``sqlite:////absolute.db`` or a bare path (``?synchronous=full``):
  SQLite; it may be the long-term store's file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from chatmem.errors import ConfigError
from chatmem.sessions.base import SessionInfo, SessionState, SessionStore
from chatmem.sessions.memory import InMemorySessionStore
from chatmem.sessions.sqlite import SQLiteSessionStore

if TYPE_CHECKING:
    from chatmem.sessions.redis import RedisSessionStore

_POSTGRES_EXTRA = "the postgres session store needs psycopg: pip install 'chatmem[postgres]'"
_REDIS_EXTRA = "the redis session store needs redis-py: pip install 'chatmem[redis]'"


def open_session_store(uri: str | None = None) -> SessionStore:
    """Open the session store a URI names (see the module docstring)."""
    if uri is None:
        return InMemorySessionStore()
    if "://" not in uri:
        return SQLiteSessionStore(uri)
    parts = urlsplit(uri)
    if parts.scheme == "memory":
        return InMemorySessionStore()
    if parts.scheme in {"redis", "rediss"}:
        return _open_redis(uri)
    if parts.scheme in {"postgresql", "postgres"}:
        return _open_postgres(uri)
    if parts.scheme == "sqlite":
        options = dict(parse_qsl(parts.query))
        path = _sqlite_path(parts.netloc, parts.path, uri)
        return SQLiteSessionStore(path, synchronous=options.get("synchronous", "NORMAL"))
    raise ConfigError(
        f"unknown session store scheme {parts.scheme!r} in {uri!r}"
        " (memory, redis, rediss, postgresql, sqlite)"
    )


def _open_redis(uri: str) -> SessionStore:
    try:
        from chatmem.sessions.redis import RedisSessionStore
    except ImportError as exc:
        raise ConfigError(_REDIS_EXTRA) from exc
    parts = urlsplit(uri)
    options = parse_qsl(parts.query)
    ours = dict(options)
    # prefix and ttl are chatmem's; every other option is redis-py's (db, password, timeouts).
    rest = urlencode([(name, value) for name, value in options if name not in {"prefix", "ttl"}])
    return RedisSessionStore(
        urlunsplit(parts._replace(query=rest)),
        prefix=ours.get("prefix", "chatmem"),
        ttl_s=_ttl(ours.get("ttl"), uri),
    )


def _open_postgres(uri: str) -> SessionStore:
    try:
        from chatmem.sessions.postgres import PostgresSessionStore
    except ImportError as exc:
        raise ConfigError(_POSTGRES_EXTRA) from exc
    parts = urlsplit(uri)
    options = parse_qsl(parts.query)
    schema = dict(options).get("schema", "chatmem_service")
    rest = urlencode([(name, value) for name, value in options if name != "schema"])
    return PostgresSessionStore(urlunsplit(parts._replace(query=rest)), schema=schema)


def _ttl(value: str | None, uri: str) -> int | None:
    if value is None:
        return None
    try:
        seconds = int(value)
    except ValueError:
        seconds = 0
    if seconds < 1:
        raise ConfigError(f"{uri!r}: ttl must be a whole number of seconds, at least 1")
    return seconds


def _sqlite_path(netloc: str, path: str, uri: str) -> str:
    if netloc:
        raise ConfigError(f"{uri!r}: a local store URI has three slashes, e.g. sqlite:///x.db")
    if not path.strip("/"):
        raise ConfigError(f"{uri!r} names no file")
    return path[1:]


def __getattr__(name: str) -> Any:
    # RedisSessionStore is imported on first use, so chatmem works without redis-py.
    if name == "RedisSessionStore":
        try:
            from chatmem.sessions.redis import RedisSessionStore
        except ImportError as exc:
            raise ImportError(_REDIS_EXTRA) from exc
        return RedisSessionStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "InMemorySessionStore",
    "RedisSessionStore",
    "SQLiteSessionStore",
    "SessionInfo",
    "SessionState",
    "SessionStore",
    "open_session_store",
]
