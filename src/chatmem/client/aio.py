"""``AsyncClient``: ``Client`` awaited, with the methods of ``AsyncLongTermMemory``."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import IO

import httpx

from chatmem.client.calls import MAX_PAGE, MemoryCalls
from chatmem.client.chunks import async_chunks
from chatmem.client.methods import AdminMethods, MemoryMethods, SessionMethods
from chatmem.client.transport import AsyncTransport, Connection
from chatmem.long_term import OnConflict
from chatmem.records import Filter, MemoryRecord, Page


class AsyncSessions(SessionMethods[AsyncTransport]):
    """``client.sessions``: short-term memory (``/v1/sessions``), awaited."""


class AsyncAdmin(AdminMethods[AsyncTransport]):
    """``client.admin``: keys and tenants (``/v1/admin``), awaited."""


class AsyncClient(MemoryMethods[AsyncTransport, httpx.AsyncClient]):
    """``Client`` for asyncio: the methods of ``AsyncLongTermMemory``, awaited, over one
    ``httpx.AsyncClient``. See ``Client`` for tenants, errors and retries."""

    sessions: AsyncSessions
    admin: AsyncAdmin

    def _connect(self, connection: Connection[httpx.AsyncClient]) -> AsyncTransport:
        transport = AsyncTransport(connection)
        self.sessions = AsyncSessions(transport)
        self.admin = AsyncAdmin(transport)
        return transport

    async def pages(self, scope: Filter, *, limit: int = 100) -> AsyncIterator[Page]:
        """Every page of ``list(scope)``, following the cursors."""
        cursor: str | None = None
        while True:
            page = await self.list(scope, limit=limit, cursor=cursor)
            yield page
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def list_all(
        self, scope: Filter, *, page_size: int = MAX_PAGE
    ) -> AsyncIterator[MemoryRecord]:
        """Every memory ``scope`` matches, oldest first, a page fetched at a time."""
        async for page in self.pages(scope, limit=page_size):
            for record in page.records:
                yield record

    async def export_lines(self, scope: Filter) -> AsyncIterator[str]:
        """One user's memories as export lines, read as the answer streams in."""
        response = await self._transport.open(MemoryCalls.export(scope))
        try:
            async for line in response.aiter_lines():
                if line.strip():
                    yield line
        finally:
            await response.aclose()

    async def export_jsonl(self, scope: Filter, out: IO[str], *, page_size: int = MAX_PAGE) -> int:
        """Write one user's memories to ``out`` as JSON lines; returns the count."""
        written = 0
        async for line in self.export_lines(scope):
            out.write(line + "\n")
            written += 1
        return written

    async def import_jsonl(
        self,
        lines: Iterable[str] | AsyncIterable[str],
        *,
        on_conflict: OnConflict = "fail",
        tenant_id: str | None = None,
    ) -> int:
        """Store the lines of an export, all or none; ``lines`` (a file, an iterable, an
        async iterable such as ``export_lines``) are streamed. See ``Client.import_jsonl``."""
        call = MemoryCalls.import_(tenant_id, on_conflict)
        return await self._transport.send(call, content=async_chunks(lines))

    async def close(self) -> None:
        """Close the connections (not those of an ``http_client`` the caller passed)."""
        await self._transport.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["AsyncAdmin", "AsyncClient", "AsyncSessions"]
