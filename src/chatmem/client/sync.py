"""``Client``: the service's memory, sessions and keys with ``LongTermMemory``'s methods."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import IO

import httpx

from chatmem.client.calls import MAX_PAGE, MemoryCalls
from chatmem.client.chunks import jsonl_chunks
from chatmem.client.methods import AdminMethods, MemoryMethods, SessionMethods
from chatmem.client.transport import Connection, SyncTransport
from chatmem.long_term import OnConflict
from chatmem.records import Filter, MemoryRecord, Page


class Sessions(SessionMethods[SyncTransport]):
    """``client.sessions``: short-term memory (``/v1/sessions``)."""


class Admin(AdminMethods[SyncTransport]):
    """``client.admin``: keys and tenants (``/v1/admin``), for the admin key."""


class Client(MemoryMethods[SyncTransport, httpx.Client]):
    """The chatmem service's long-term memory with the methods of ``LongTermMemory``: the
    same names, arguments and return types, so moving from the embedded library to the
    service changes one line::

        memory = LongTermMemory.open()                    # embedded
        memory = Client("http://127.0.0.1:8080", api_key=key)  # the service

    Sessions are under ``client.sessions`` and keys under ``client.admin``. The API key
    decides the tenant and the roles; ``tenant_id`` (here, or per call) names the tenant
    only for the admin key. Errors are chatmem's (see ``chatmem.client.transport``).
    Reads are retried with backoff on 429, 502, 503, 504 and lost connections; writes only
    when they never reached the service, or when the service says ``x-should-retry``.

    ``timeout`` is each request's, in seconds; ``retry`` how to try again
    (``RetryPolicy``); ``http_client`` an ``httpx.Client`` of the caller's (its proxies,
    certificates and hooks apply, and ``close`` leaves it open).
    """

    sessions: Sessions
    admin: Admin

    def _connect(self, connection: Connection[httpx.Client]) -> SyncTransport:
        transport = SyncTransport(connection)
        self.sessions = Sessions(transport)
        self.admin = Admin(transport)
        return transport

    def pages(self, scope: Filter, *, limit: int = 100) -> Iterator[Page]:
        """Every page of ``list(scope)``, following the cursors; each is fetched as the
        one before is used up."""
        cursor: str | None = None
        while True:
            page = self.list(scope, limit=limit, cursor=cursor)
            yield page
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def list_all(self, scope: Filter, *, page_size: int = MAX_PAGE) -> Iterator[MemoryRecord]:
        """Every memory ``scope`` matches, oldest first, a page fetched at a time."""
        for page in self.pages(scope, limit=page_size):
            yield from page.records

    def export_lines(self, scope: Filter) -> Iterator[str]:
        """One user's memories (``scope.user_id``, optional ``project_id``) as export
        lines, read from the answer as it streams in."""
        response = self._transport.open(MemoryCalls.export(scope))
        try:
            for line in response.iter_lines():
                if line.strip():
                    yield line
        finally:
            response.close()

    def export_jsonl(self, scope: Filter, out: IO[str], *, page_size: int = MAX_PAGE) -> int:
        """Write one user's memories to ``out`` as JSON lines (record and vector); returns
        the count. ``import_jsonl`` reads them back. ``page_size`` is the library's; the
        service sends the export in one answer, streamed here."""
        written = 0
        for line in self.export_lines(scope):
            out.write(line + "\n")
            written += 1
        return written

    def import_jsonl(
        self,
        lines: Iterable[str],
        *,
        on_conflict: OnConflict = "fail",
        tenant_id: str | None = None,
    ) -> int:
        """Store the lines of an export, all or none, in the key's tenant; returns how
        many. ``lines`` (a file, a generator, ``export_lines``) are streamed, never held
        whole. A malformed line raises ImportFormatError naming it; an id its user already
        holds is handled as ``on_conflict`` says (``fail``: a ValidationError, nothing
        stored; ``skip``; ``replace``)."""
        call = MemoryCalls.import_(tenant_id, on_conflict)
        return self._transport.send(call, content=jsonl_chunks(lines))

    def close(self) -> None:
        """Close the connections (not those of an ``http_client`` the caller passed)."""
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Admin", "Client", "Sessions"]
