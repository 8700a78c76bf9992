"""Talking to Milvus: pymilvus' client for a uri, its errors as chatmem's, and long reads.

A uri ending in ``.db``, or any other local path, opens Milvus Lite, an in-process server over
a data directory that only one process may open at a time; ``http(s)://host:19530`` (or
``tcp://``, ``unix:``) connects to a server. Milvus Lite keeps one server per directory
running in the process until exit: the last store of this process to close a directory stops
its server, so another process can open it. pymilvus and grpc are imported when a store
opens, so chatmem imports without them.

A Lite server listens on a free port of 127.0.0.1, and a port is no identity: once the server
stops, the OS may hand the port to another directory's server. pymilvus shares connections
through a process-wide registry keyed by address and reconnects a failed call to the same
address, so a store that outlived its server could read and write another database. A Lite
store therefore opens a connection of its own (closed with the store, never left in the
registry), turns pymilvus' reconnection off, and checks before each call that its server is
still the one it connected to.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from chatmem.errors import ConfigError, StoreError, StoreUnavailableError
from chatmem.stores.milvus.features import FULL, ServerFeatures, features_of

T = TypeVar("T")
log = logging.getLogger("chatmem.stores.milvus")

#: Largest offset + limit of one Milvus query, and largest top-k of one search.
QUERY_WINDOW = 16_384
#: Rows per batch when a query must be read with an iterator.
SCAN_BATCH = 4_096
#: Milvus Lite keeps what was written since its last flush in a memtable, and any read
#: with a condition other than ids walks all of it in Python, vectors included: 27 ms at
#: 500 rows, 72 ms at 2,000 (it flushes on its own only at 128 MB). So a Lite store flushes
#: a collection once this many rows were written to it (a flush of 200 rows took 28-47 ms;
#: the same read took 2.8 ms at 1,000 rows flushed so, 12 ms at 8,000). A server flushes on
#: its own.
LITE_FLUSH_ROWS = 200
_SERVER_SCHEMES = ("http://", "https://", "tcp://", "unix:")


def load_pymilvus() -> Any:
    """The pymilvus module; a ConfigError naming the extra when it is missing."""
    try:
        return importlib.import_module("pymilvus")
    except ImportError as exc:
        raise ConfigError("the Milvus store needs pymilvus: pip install 'chatmem[milvus]'") from exc


def resolve_uri(uri: str | Path) -> tuple[str, Path | None]:
    """The uri to hand to pymilvus, and the Milvus Lite data directory if it is local."""
    text = str(uri)
    if text.startswith(_SERVER_SCHEMES):
        return text, None
    path = Path(text).expanduser()
    if path.suffix != ".db":
        path = path / "milvus.db"
    path = path.absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(path), path


class _LiteServers:
    """How many open stores use each Milvus Lite directory of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[Path, int] = {}

    def acquire(self, path: Path) -> None:
        with self._lock:
            self._users[path] = self._users.get(path, 0) + 1

    def release(self, path: Path) -> None:
        with self._lock:
            remaining = self._users.get(path, 1) - 1
            if remaining > 0:
                self._users[path] = remaining
                return
            self._users.pop(path, None)
        try:
            manager = importlib.import_module("milvus_lite.server_manager")
        except ImportError:  # pragma: no cover - the server could not have started either
            return
        manager.server_manager_instance.release_server(str(path))

    @staticmethod
    def running(path: Path) -> object | None:
        """The Lite server this process runs for ``path`` now, if any (an opaque token: the
        same object for as long as that server lives)."""
        try:
            manager = importlib.import_module("milvus_lite.server_manager")
        except ImportError:  # pragma: no cover - the server could not have started either
            return None
        entry = manager.server_manager_instance._servers.get(os.path.abspath(path))
        return None if entry is None else entry[0]


LITE_SERVERS = _LiteServers()


def _no_reconnection(error: BaseException) -> bool:
    """pymilvus' hook for a failed call, on a Lite connection: never reconnect."""
    return False


class MilvusConnection:
    """One pymilvus client, and every call through it with chatmem's errors."""

    def __init__(
        self, uri: str | Path, *, token: str | None, db_name: str | None, timeout: float
    ) -> None:
        self.pm = load_pymilvus()
        self._rpc_error: type[BaseException] = importlib.import_module("grpc").RpcError
        self.uri, self.lite_path = resolve_uri(uri)
        self.timeout = timeout
        self.closed = False
        self.client = self._connect(token, db_name)
        #: The Lite server this connection talks to (None for a server uri).
        self._lite_server = None if self.lite_path is None else LITE_SERVERS.running(self.lite_path)
        #: The version a server reports ("" for Milvus Lite, which is not asked).
        self.version = ""
        self._unflushed: dict[str, int] = {}
        self._flush_lock = threading.Lock()

    def _connect(self, token: str | None, db_name: str | None) -> Any:
        lite = self.lite_path is not None
        if self.lite_path is not None:
            LITE_SERVERS.acquire(self.lite_path)
        try:
            client = self.pm.MilvusClient(
                uri=self.uri,
                token=token or "",
                db_name=db_name or "",
                timeout=self.timeout,
                dedicated=lite,
            )
        except BaseException as exc:  # boundary: release the path; re-raised or translated
            if self.lite_path is not None:
                LITE_SERVERS.release(self.lite_path)
            if not isinstance(exc, self.pm.MilvusException):
                raise
            hint = " (is another process using it?)" if self.lite_path is not None else ""
            raise StoreUnavailableError(
                f"cannot open Milvus at {self.uri!r}{hint}: {exc.message}"
            ) from exc
        handler: Any = getattr(client, "_handler", None)
        if lite and hasattr(handler, "_on_rpc_error"):
            handler._on_rpc_error = _no_reconnection
        return client

    def features(self) -> ServerFeatures:
        """What the Milvus at the other end offers: everything on Lite, by version on a
        server (``features``)."""
        if self.lite_path is not None:
            return FULL
        self.version = str(self.call(self.client.get_server_version))
        return features_of(self.version, lite=False)

    def call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call pymilvus, translating its errors into chatmem's."""
        if self.closed:
            raise StoreError("store is closed")
        if (
            self.lite_path is not None
            and LITE_SERVERS.running(self.lite_path) is not self._lite_server
        ):
            raise StoreUnavailableError(
                f"the Milvus Lite server for {str(self.lite_path)!r} has stopped"
            )
        with self.translating():
            return method(*args, timeout=self.timeout, **kwargs)

    def write(self, method: Callable[..., Any], collection: str, rows: int, **kwargs: Any) -> None:
        """A write of ``rows`` rows (``insert``, ``upsert`` or ``delete`` with ``kwargs``);
        on Milvus Lite, then a flush of the collection every ``LITE_FLUSH_ROWS`` rows. A flush
        that fails is logged: the rows are written (and in Lite's log) either way."""
        self.call(method, collection, **kwargs)
        if self.lite_path is None:
            return
        with self._flush_lock:
            written = self._unflushed.get(collection, 0) + rows
            self._unflushed[collection] = 0 if written >= LITE_FLUSH_ROWS else written
        if written >= LITE_FLUSH_ROWS:
            try:
                self.call(self.client.flush, collection)
            except StoreError as exc:  # boundary: the write stands; only reads stay slower
                log.warning("Milvus Lite: flushing %s failed: %s", collection, exc)

    @contextmanager
    def translating(self) -> Iterator[None]:
        """Raise pymilvus' and grpc's errors as StoreError or StoreUnavailableError."""
        try:
            yield
        except self.pm.MilvusException as exc:
            raise self._translate(exc) from exc
        except self._rpc_error as exc:
            raise StoreUnavailableError(f"Milvus at {self.uri!r} is unreachable: {exc}") from exc

    def _translate(self, exc: Any) -> StoreError:
        errors = self.pm.exceptions
        unavailable = (
            errors.MilvusUnavailableException,
            errors.ConnectError,
            errors.ConnectionNotExistException,
        )
        # Status code 2 is pymilvus' CONNECT_FAILED.
        if isinstance(exc, unavailable) or exc.code == 2:
            return StoreUnavailableError(f"Milvus at {self.uri!r} is unavailable: {exc.message}")
        return StoreError(f"Milvus error: {exc.message}")

    def query(
        self, collection: str, expression: str, fields: list[str], **extra: Any
    ) -> list[dict[str, Any]]:
        """The rows matching ``expression`` that one query returns (ids, counts, a few rows)."""
        rows = self.call(
            self.client.query,
            collection,
            filter=expression,
            output_fields=fields,
            consistency_level="Strong",
            **extra,
        )
        return list(rows)

    def scan(self, collection: str, expression: str, fields: list[str]) -> list[dict[str, Any]]:
        """Every row matching ``expression``: one query, or an iterator past the query window."""
        rows = self.query(collection, expression, fields, limit=QUERY_WINDOW)
        if len(rows) < QUERY_WINDOW:
            return rows
        iterator = self.call(
            self.client.query_iterator,
            collection,
            batch_size=SCAN_BATCH,
            filter=expression,
            output_fields=fields,
            consistency_level="Strong",
        )
        everything: list[dict[str, Any]] = []
        try:
            with self.translating():
                while batch := iterator.next():
                    everything.extend(batch)
        finally:
            iterator.close()
        return everything

    def close(self) -> None:
        """Close the client; the last store on a Lite directory stops its server."""
        self.closed = True
        self.client.close()
        if self.lite_path is not None:
            LITE_SERVERS.release(self.lite_path)
