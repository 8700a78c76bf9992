"""``AsyncClient``: ``Client`` awaited, with the methods of ``AsyncLongTermMemory``."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterable, AsyncIterator, Callable, Coroutine, Iterable
from typing import IO, Any, Concatenate, ParamSpec, TypeVar

import httpx

from chatmem.client.calls import (
    MAX_PAGE,
    AdminCalls,
    Call,
    Chunker,
    MemoryCalls,
    SessionCalls,
    jsonl_chunks,
    with_self,
)
from chatmem.client.transport import DEFAULT_BASE_URL, AsyncTransport, RetryPolicy
from chatmem.long_term import OnConflict
from chatmem.records import Filter, MemoryRecord, Page

P = ParamSpec("P")
R = TypeVar("R")


class _AsyncPart:
    """A part of the async client that sends over its transport."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport


def _awaited(
    build: Callable[P, Call[R]],
) -> Callable[Concatenate[_AsyncPart, P], Coroutine[Any, Any, R]]:
    """A coroutine method that sends the call ``build`` makes."""

    async def method(self: _AsyncPart, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._transport.send(build(*args, **kwargs))

    functools.update_wrapper(method, build)
    method.__signature__ = with_self(build)  # type: ignore[attr-defined]
    return method


async def _async_chunks(lines: Iterable[str] | AsyncIterable[str]) -> AsyncIterator[bytes]:
    """``jsonl_chunks`` of sync or async lines."""
    if not isinstance(lines, AsyncIterable):
        for chunk in jsonl_chunks(lines):
            yield chunk
        return
    chunker = Chunker()
    async for line in lines:
        full = chunker.add(line)
        if full is not None:
            yield full
    last = chunker.rest()
    if last:
        yield last


class AsyncSessions(_AsyncPart):
    """``client.sessions``: short-term memory (``/v1/sessions``), awaited."""

    append = _awaited(SessionCalls.append)
    read = _awaited(SessionCalls.read)
    list = _awaited(SessionCalls.list)
    end = _awaited(SessionCalls.end)
    delete = _awaited(SessionCalls.delete)
    set_system = _awaited(SessionCalls.set_system)
    get_system = _awaited(SessionCalls.get_system)
    delete_system = _awaited(SessionCalls.delete_system)


class AsyncAdmin(_AsyncPart):
    """``client.admin``: keys and tenants (``/v1/admin``), awaited."""

    create_key = _awaited(AdminCalls.create_key)
    keys = _awaited(AdminCalls.keys)
    revoke_key = _awaited(AdminCalls.revoke_key)
    tenants = _awaited(AdminCalls.tenants)


class AsyncClient(_AsyncPart):
    """``Client`` for asyncio: the methods of ``AsyncLongTermMemory``, awaited, over one
    ``httpx.AsyncClient``. See ``Client`` for tenants, errors and retries."""

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        tenant_id: str | None = None,
        timeout: float | httpx.Timeout = 30.0,
        retry: RetryPolicy | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(
            AsyncTransport(
                base_url,
                api_key=api_key,
                tenant_id=tenant_id,
                retry=retry or RetryPolicy(),
                timeout=timeout,
                http_client=http_client,
            )
        )
        self.sessions = AsyncSessions(self._transport)
        self.admin = AsyncAdmin(self._transport)

    add = _awaited(MemoryCalls.add)
    search = _awaited(MemoryCalls.search)
    get = _awaited(MemoryCalls.get)
    update = _awaited(MemoryCalls.update)
    delete = _awaited(MemoryCalls.delete)
    delete_all = _awaited(MemoryCalls.delete_all)
    history = _awaited(MemoryCalls.history)
    list = _awaited(MemoryCalls.list)

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

    async def count(self, scope: Filter) -> int:
        """How many memories match ``scope`` (that the key may see), in one call."""
        return await self._transport.send(MemoryCalls.count(scope))

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
        return await self._transport.send(call, content=_async_chunks(lines))

    async def close(self) -> None:
        """Close the connections (not those of an ``http_client`` the caller passed)."""
        await self._transport.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["AsyncAdmin", "AsyncClient", "AsyncSessions"]
