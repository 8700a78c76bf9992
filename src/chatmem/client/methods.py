"""What ``Client`` and ``AsyncClient`` share, declared once: the constructor, and each
method as the call it sends (``Sends``). A method is the call's answer on the sync face
and a coroutine on the async one; ``sync`` and ``aio`` add only what differs in how they
page, stream and close.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Generic, ParamSpec, TypeVar, overload

import httpx

from chatmem.client.calls import AdminCalls, Call, MemoryCalls, SessionCalls
from chatmem.client.transport import (
    DEFAULT_BASE_URL,
    AsyncTransport,
    Connection,
    RetryPolicy,
    SyncTransport,
)

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T", bound=SyncTransport | AsyncTransport)
H = TypeVar("H", httpx.Client, httpx.AsyncClient)


class Part(Generic[T]):
    """A part of a client that sends over its transport."""

    def __init__(self, transport: T) -> None:
        self._transport: T = transport


def _signature(build: Callable[..., Any], *, with_self: bool) -> inspect.Signature:
    """``build``'s signature as the client method's: returning what the call reads
    (``Call[X]`` becomes ``X``), with ``self`` first when the method is unbound."""
    signature = inspect.signature(build)
    returns = signature.return_annotation
    if isinstance(returns, str) and returns.startswith("Call[") and returns.endswith("]"):
        returns = returns[len("Call[") : -1]
    parameters = list(signature.parameters.values())
    if with_self:
        parameters.insert(0, inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY))
    return signature.replace(parameters=parameters, return_annotation=returns)


class Sends(Generic[P, R]):
    """A method that sends the call ``build`` makes: on a sync part it returns what the
    answer says, on an async part it is a coroutine function."""

    def __init__(self, build: Callable[P, Call[R]]) -> None:
        self._build = build
        self.__name__ = build.__name__
        self.__qualname__ = build.__qualname__
        self.__doc__ = build.__doc__
        self.__signature__ = _signature(build, with_self=True)

    @overload
    def __get__(self, part: None, owner: type[Any]) -> Sends[P, R]: ...

    @overload
    def __get__(self, part: Part[SyncTransport], owner: type[Any]) -> Callable[P, R]: ...

    @overload
    def __get__(
        self, part: Part[AsyncTransport], owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(self, part: Part[Any] | None, owner: type[Any]) -> Any:
        return self if part is None else self.bound(part)

    def bound(self, part: Part[Any]) -> Callable[..., Any]:
        """The method of ``part``: it sends over ``part``'s transport."""
        method: Callable[..., Any] = part._transport.sender(self._build)
        functools.update_wrapper(method, self._build)
        method.__signature__ = _signature(self._build, with_self=False)  # type: ignore[attr-defined]
        return method

    def __call__(self, part: Part[Any], /, *args: Any, **kwargs: Any) -> Any:
        """The method called on the class, unbound: ``Client.add(client, ...)``."""
        return self.bound(part)(*args, **kwargs)


class SessionMethods(Part[T]):
    """``client.sessions``: short-term memory (``/v1/sessions``)."""

    append = Sends(SessionCalls.append)
    read = Sends(SessionCalls.read)
    list = Sends(SessionCalls.list)
    end = Sends(SessionCalls.end)
    delete = Sends(SessionCalls.delete)
    set_system = Sends(SessionCalls.set_system)
    get_system = Sends(SessionCalls.get_system)
    delete_system = Sends(SessionCalls.delete_system)


class AdminMethods(Part[T]):
    """``client.admin``: keys and tenants (``/v1/admin``), for the admin key."""

    create_key = Sends(AdminCalls.create_key)
    keys = Sends(AdminCalls.keys)
    revoke_key = Sends(AdminCalls.revoke_key)
    tenants = Sends(AdminCalls.tenants)


class MemoryMethods(Part[T], Generic[T, H]):
    """The service's long-term memory with the methods of ``LongTermMemory``, over a
    transport made of the constructor's arguments (see ``Client``)."""

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        tenant_id: str | None = None,
        timeout: float | httpx.Timeout = 30.0,
        retry: RetryPolicy | None = None,
        http_client: H | None = None,
    ) -> None:
        retry = retry or RetryPolicy()
        super().__init__(
            self._connect(Connection(base_url, api_key, tenant_id, timeout, retry, http_client))
        )

    def _connect(self, connection: Connection[H]) -> T:
        """The transport over ``connection``, with the client's parts on it."""
        raise NotImplementedError

    add = Sends(MemoryCalls.add)
    search = Sends(MemoryCalls.search)
    get = Sends(MemoryCalls.get)
    update = Sends(MemoryCalls.update)
    delete = Sends(MemoryCalls.delete)
    delete_all = Sends(MemoryCalls.delete_all)
    history = Sends(MemoryCalls.history)
    list = Sends(MemoryCalls.list)
    count = Sends(MemoryCalls.count)


__all__ = ["AdminMethods", "MemoryMethods", "Part", "SessionMethods", "Sends"]
