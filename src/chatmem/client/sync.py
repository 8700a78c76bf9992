"""``Client``: the service's memory, sessions and keys with ``LongTermMemory``'s methods."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Concatenate, ParamSpec, TypeVar

import httpx

from chatmem.client.calls import (
    MAX_PAGE,
    AdminCalls,
    Call,
    MemoryCalls,
    SessionCalls,
    jsonl_chunks,
    with_self,
)
from chatmem.client.transport import DEFAULT_BASE_URL, RetryPolicy, SyncTransport
from chatmem.long_term import OnConflict
from chatmem.records import Filter, MemoryRecord, Page

P = ParamSpec("P")
R = TypeVar("R")


class _Part:
    """A part of the client that sends over its transport."""

    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport


def _sent(build: Callable[P, Call[R]]) -> Callable[Concatenate[_Part, P], R]:
    """A method that sends the call ``build`` makes and returns what its answer says."""

    def method(self: _Part, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._transport.send(build(*args, **kwargs))

    functools.update_wrapper(method, build)
    method.__signature__ = with_self(build)  # type: ignore[attr-defined]
    return method


class Sessions(_Part):
    """``client.sessions``: short-term memory (``/v1/sessions``)."""

    append = _sent(SessionCalls.append)
    read = _sent(SessionCalls.read)
    list = _sent(SessionCalls.list)
    end = _sent(SessionCalls.end)
    delete = _sent(SessionCalls.delete)
    set_system = _sent(SessionCalls.set_system)
    get_system = _sent(SessionCalls.get_system)
    delete_system = _sent(SessionCalls.delete_system)


class Admin(_Part):
    """``client.admin``: keys and tenants (``/v1/admin``), for the admin key."""

    create_key = _sent(AdminCalls.create_key)
    keys = _sent(AdminCalls.keys)
    revoke_key = _sent(AdminCalls.revoke_key)
    tenants = _sent(AdminCalls.tenants)


class Client(_Part):
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

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        tenant_id: str | None = None,
        timeout: float | httpx.Timeout = 30.0,
        retry: RetryPolicy | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        super().__init__(
            SyncTransport(
                base_url,
                api_key=api_key,
                tenant_id=tenant_id,
                retry=retry or RetryPolicy(),
                timeout=timeout,
                http_client=http_client,
            )
        )
        self.sessions = Sessions(self._transport)
        self.admin = Admin(self._transport)

    add = _sent(MemoryCalls.add)
    search = _sent(MemoryCalls.search)
    get = _sent(MemoryCalls.get)
    update = _sent(MemoryCalls.update)
    delete = _sent(MemoryCalls.delete)
    delete_all = _sent(MemoryCalls.delete_all)
    history = _sent(MemoryCalls.history)
    list = _sent(MemoryCalls.list)

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

    def count(self, scope: Filter) -> int:
        """How many memories match ``scope`` (that the key may see), in one call."""
        return self._transport.send(MemoryCalls.count(scope))

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
