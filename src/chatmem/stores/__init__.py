"""Stores, chosen by URI.

- ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` or a bare file path: the
  embedded default. Option: ``?synchronous=full`` (fsync each commit; survives power loss).
- ``milvus:///relative/dir``, ``milvus:////absolute/dir``: Milvus Lite in a local directory.
- ``milvus://host:19530`` (``?token=…&db=…&prefix=…``): a Milvus standalone or cluster server.

``CHATMEM_STORE`` supplies the URI when none is given.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from chatmem.errors import ConfigError
from chatmem.stores.base import Capabilities, Change, MemoryStore, SearchQuery
from chatmem.stores.sqlite import SQLiteStore

ENV_VAR = "CHATMEM_STORE"


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
    options = dict(parse_qsl(parts.query))
    if parts.scheme == "sqlite":
        path = _local_path(parts.netloc, parts.path, uri)
        return SQLiteStore(path, synchronous=options.pop("synchronous", "NORMAL"))
    if parts.scheme in {"milvus", "milvus+http", "milvus+https"}:
        return _open_milvus(parts.scheme, parts.netloc, parts.path, options, uri)
    raise ConfigError(f"unknown store scheme {parts.scheme!r} in {uri!r} (sqlite, milvus)")


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


__all__ = [
    "Capabilities",
    "Change",
    "MemoryStore",
    "SQLiteStore",
    "SearchQuery",
    "default_store_uri",
    "open_store",
]
