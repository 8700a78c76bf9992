"""Connecting the Qdrant store: a server's client, or local mode's shared engine, and the
translation of qdrant-client's errors into chatmem's.

Local mode is qdrant-client's implementation of Qdrant's API in Python (numpy arrays, kept in
SQLite files in a directory), run in this process; "engine" here means one such instance. An
engine takes its directory's lock (one process at a time) and is not thread-safe. The stores
of one process on one directory share one engine, with one lock that serialises every call on
it; the last store to close the directory closes the engine, so another process can open it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from chatmem.errors import StoreError, StoreUnavailableError

#: Targets that name a server; anything else is a local directory.
SERVER_SCHEMES = ("http://", "https://")


class LocalEngines:
    """The open engines of this process, one per directory, with how many stores use each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, tuple[QdrantClient, threading.RLock, int]] = {}

    def acquire(self, path: str) -> tuple[QdrantClient, threading.RLock]:
        """The engine of ``path`` and its lock, opened if no store holds it (RuntimeError
        when another process does)."""
        with self._lock:
            if path in self._open:
                client, lock, users = self._open[path]
            else:
                client = QdrantClient(path=path, force_disable_check_same_thread=True)
                lock, users = threading.RLock(), 0
            self._open[path] = (client, lock, users + 1)
            return client, lock

    def release(self, path: str) -> None:
        """One store is done with ``path``'s engine; the last one closes it."""
        with self._lock:
            client, lock, users = self._open[path]
            if users > 1:
                self._open[path] = (client, lock, users - 1)
                return
            del self._open[path]
        with lock:
            client.close()


LOCAL_ENGINES = LocalEngines()


def connect(
    uri: str, api_key: str | None, timeout: float
) -> tuple[QdrantClient, AbstractContextManager[Any]]:
    """A client for ``uri`` (a server URL or a local directory) and the lock its calls take."""
    if uri.startswith(SERVER_SCHEMES):
        # The store checks the server itself, with a typed error (the client only warns).
        client = QdrantClient(
            url=uri, api_key=api_key, timeout=int(timeout), check_compatibility=False
        )
        return client, nullcontext()
    try:
        return LOCAL_ENGINES.acquire(uri)
    except RuntimeError as exc:  # qdrant-client's "already accessed by another instance"
        raise StoreUnavailableError(
            f"cannot open Qdrant at {uri!r} (is another process using it?): {exc}"
        ) from exc


@contextmanager
def translated(uri: str, remote: bool) -> Iterator[None]:
    """Raise qdrant-client's errors as chatmem's (StoreUnavailableError when the server
    cannot answer, else StoreError)."""
    try:
        yield
    except ResponseHandlingException as exc:
        raise StoreUnavailableError(f"Qdrant at {uri!r} is unreachable: {exc}") from exc
    except UnexpectedResponse as exc:
        status = exc.status_code or 0
        detail = exc.content.decode("utf-8", "replace")[:500]
        if status in (502, 503, 504):
            raise StoreUnavailableError(f"Qdrant at {uri!r}: {status} {detail}") from exc
        raise StoreError(f"Qdrant error {status}: {detail}") from exc
    except (ValueError, RuntimeError) as exc:
        if remote:
            raise
        # Local mode refuses a request (a missing collection, a closed engine) this way.
        raise StoreError(f"Qdrant error: {exc}") from exc
