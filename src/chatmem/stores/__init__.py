"""Stores, chosen by URI.

- ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` or a bare file path: the
  embedded default. Option: ``?synchronous=full`` (fsync each commit; survives power loss).
- ``milvus:///relative/dir``, ``milvus:////absolute/dir``: Milvus Lite in a local directory.
- ``milvus://host:19530`` (``?token=…&db=…&prefix=…``): a Milvus standalone or cluster server.
- ``qdrant://host:6333/prefix`` (``qdrant+https://…``, ``?api_key=…``): a Qdrant server, its
  collections named ``<prefix>_…`` (default ``chatmem``; ``pip install 'chatmem[qdrant]'``).
- ``qdrant+local:///relative/dir``, ``qdrant:////absolute/dir`` (``?prefix=…``): qdrant-client's
  local mode (its in-process implementation of Qdrant's API) over a local directory.
- ``postgresql://user:password@host:5432/dbname`` or ``postgres://…``: PostgreSQL with
  pgvector (``pip install 'chatmem[postgres]'``). Any libpq URI works (``?sslmode=…``,
  ``?host=/socket/dir``); ``?prefix=name`` picks the schema that holds the store's tables
  (default ``chatmem``) and is not passed to libpq.

Any URI (not a bare path) may add a Redis hot cache in front of the store (SPEC B3):
``?cache=redis://host:6379/0`` wraps it in ``CachedStore``; ``cache_ttl`` (seconds, default
300) and ``cache_prefix`` (key prefix, default ``chatmem:cache``) tune it. A Redis URL with a
query of its own must be percent-encoded.

``CHATMEM_STORE`` supplies the URI when none is given.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

from chatmem.errors import ConfigError
from chatmem.stores.base import Capabilities, Change, MemoryStore, SearchQuery, Usage
from chatmem.stores.sqlite import SQLiteStore

ENV_VAR = "CHATMEM_STORE"
_MILVUS = frozenset({"milvus", "milvus+http", "milvus+https"})
_POSTGRES = frozenset({"postgresql", "postgres"})
_QDRANT = frozenset({"qdrant", "qdrant+http", "qdrant+https", "qdrant+local"})


def default_store_uri() -> str:
    """``$CHATMEM_STORE``, else a SQLite file in the user's data directory."""
    if uri := os.environ.get(ENV_VAR):
        return uri
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    # An absolute path after "sqlite:///" gives the four slashes of an absolute URI.
    return f"sqlite:///{(base / 'chatmem' / 'chatmem.db').resolve()}"


def open_store(uri: str | None = None) -> MemoryStore:
    """Open the store a URI names (see the module docstring)."""
    uri = uri or default_store_uri()
    if "://" not in uri:
        return SQLiteStore(uri)
    parts = urlsplit(uri)
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    cache = _cache_options(options, uri)
    store = _open(parts, options, uri)
    return store if cache is None else _with_cache(store, *cache)


def check_store_uri(uri: str) -> Path | None:
    """Check, opening nothing, that ``uri`` can name a store: a known scheme, and a path
    where the store is local. Returns the local file or folder it names (None for a server
    or ``:memory:``); raises ConfigError."""
    if "://" not in uri:
        if not uri.strip():
            raise ConfigError("the store URI is empty")
        return None if uri == ":memory:" else Path(uri)
    parts = urlsplit(uri)
    servers = _MILVUS | _QDRANT - {"qdrant+local"}
    if parts.scheme in _POSTGRES or (parts.scheme in servers and parts.netloc):
        return None
    if parts.scheme != "sqlite" and parts.scheme not in _MILVUS | _QDRANT:
        raise _unknown_scheme(parts.scheme, uri)
    path = _local_path(parts.netloc, parts.path, uri)
    return None if path == ":memory:" else Path(path)


def _unknown_scheme(scheme: str, uri: str) -> ConfigError:
    return ConfigError(
        f"unknown store scheme {scheme!r} in {uri!r} (sqlite, milvus, postgresql, qdrant)"
    )


def _open(parts: SplitResult, options: dict[str, str], uri: str) -> MemoryStore:
    if parts.scheme == "sqlite":
        path = _local_path(parts.netloc, parts.path, uri)
        return SQLiteStore(path, synchronous=options.pop("synchronous", "NORMAL"))
    if parts.scheme in _MILVUS:
        return _open_milvus(parts.scheme, parts.netloc, parts.path, options, uri)
    if parts.scheme in _POSTGRES:
        return _open_postgres(parts, options)
    if parts.scheme in _QDRANT:
        return _open_qdrant(parts, options, uri)
    raise _unknown_scheme(parts.scheme, uri)


def _local_path(netloc: str, path: str, uri: str) -> str:
    if netloc:
        raise ConfigError(f"{uri!r}: a local store URI has three slashes, e.g. sqlite:///x.db")
    if not path.strip("/"):
        raise ConfigError(f"{uri!r} names no file")
    return path[1:]


def _open_milvus(
    scheme: str, netloc: str, path: str, options: dict[str, str], uri: str
) -> MemoryStore:
    try:
        from chatmem.stores.milvus import MilvusStore
    except ImportError as exc:
        raise ConfigError("the milvus store needs pymilvus: pip install 'chatmem[milvus]'") from exc
    prefix = options.pop("prefix", "chatmem")
    if netloc:
        protocol = "https" if scheme == "milvus+https" else "http"
        return MilvusStore(
            f"{protocol}://{netloc}",
            token=options.pop("token", None),
            db_name=options.pop("db", None),
            collection_prefix=prefix,
        )
    return MilvusStore(_local_path(netloc, path, uri), collection_prefix=prefix)


def _open_qdrant(parts: SplitResult, options: dict[str, str], uri: str) -> MemoryStore:
    try:
        from chatmem.stores.qdrant import QdrantStore
    except ImportError as exc:
        raise ConfigError(
            "the qdrant store needs qdrant-client: pip install 'chatmem[qdrant]'"
        ) from exc
    if parts.netloc and parts.scheme != "qdrant+local":
        protocol = "https" if parts.scheme == "qdrant+https" else "http"
        return QdrantStore(
            f"{protocol}://{parts.netloc}",
            api_key=options.pop("api_key", None),
            collection_prefix=parts.path.strip("/") or options.pop("prefix", "chatmem"),
        )
    path = _local_path(parts.netloc, parts.path, uri)
    return QdrantStore(path, collection_prefix=options.pop("prefix", "chatmem"))


def _open_postgres(parts: SplitResult, options: dict[str, str]) -> MemoryStore:
    try:
        from chatmem.stores.postgres import PostgresStore
    except ImportError as exc:
        raise ConfigError(
            "the postgres store needs psycopg: pip install 'chatmem[postgres]'"
        ) from exc
    prefix = options.pop("prefix", "chatmem")
    # What is left of the query are libpq's own parameters (sslmode, host, …).
    conninfo = urlunsplit(parts._replace(query=urlencode(options)))
    return PostgresStore(conninfo, prefix=prefix)


def _cache_options(options: dict[str, str], uri: str) -> tuple[str, int, str] | None:
    """Take the cache options out of ``options``: (Redis URL, TTL, key prefix), or None."""
    redis_url = options.pop("cache", None)
    ttl = options.pop("cache_ttl", "300")
    prefix = options.pop("cache_prefix", "chatmem:cache")
    if redis_url is None:
        return None
    try:
        return redis_url, int(ttl), prefix
    except ValueError as exc:
        raise ConfigError(f"{uri!r}: cache_ttl must be a whole number of seconds") from exc


def _with_cache(store: MemoryStore, redis_url: str, ttl: int, prefix: str) -> MemoryStore:
    try:
        from chatmem.stores.cached import CachedStore
    except ImportError as exc:
        store.close()
        raise ConfigError("the Redis cache needs redis-py: pip install 'chatmem[redis]'") from exc
    try:
        return CachedStore(store, redis_url, ttl_s=ttl, prefix=prefix)
    except BaseException:  # boundary: close the opened store, then re-raise
        store.close()
        raise


__all__ = [
    "Capabilities",
    "Change",
    "MemoryStore",
    "SQLiteStore",
    "SearchQuery",
    "Usage",
    "check_store_uri",
    "default_store_uri",
    "open_store",
]
