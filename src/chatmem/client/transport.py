"""Sending a ``Call`` to the service: retries with backoff where they are safe, and every
failure translated into chatmem's exception tree at this one boundary.

What the service answers maps as the embedded library raises:

=====================  =============================================================
400, 413, 422          ``ValidationError`` (``field`` is the answer's ``param``); a
                       line of an import: ``ImportFormatError`` (``line`` and ``field``)
401, 403               ``AuthenticationError`` (``status_code`` says which)
404                    ``NotFoundError`` (naming the memory, session or key asked for)
409                    ``ConflictError``
502 from a model       ``LLMUnavailableError``
429, 5xx, no answer    ``StoreUnavailableError`` (the service is this client's store)
=====================  =============================================================
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import re
import time
from collections.abc import AsyncIterable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, ParamSpec, TypeVar

import httpx
import pydantic

from chatmem.client.calls.call import IMPORT_PATH, TENANT_HEADER, Call, Safety
from chatmem.errors import (
    AuthenticationError,
    ChatmemError,
    ConfigError,
    ConflictError,
    ImportFormatError,
    LLMUnavailableError,
    NotFoundError,
    StoreError,
    StoreUnavailableError,
    ValidationError,
)
from chatmem.version import __version__

logger = logging.getLogger("chatmem.client")

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
#: Statuses that say "not now": another try may succeed.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: A Retry-After longer than this is not waited for (the backoff applies instead).
MAX_RETRY_AFTER_S = 60.0
#: Failures before any byte of the request could have reached the service.
_UNSENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_LINE = re.compile(r"line (\d+): (.*)", re.S)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to wait before sending a request again."""

    #: Tries after the first.
    max_retries: int = 2
    #: The first wait; each next one doubles, up to ``max_backoff_s``, less up to a quarter
    #: at random so that many clients do not come back at once.
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def delay(self, attempt: int, response: httpx.Response | None) -> float:
        """The wait before retry number ``attempt`` (from 0): the service's Retry-After
        when it gives a usable one, else the backoff."""
        asked = retry_after_s(response) if response is not None else None
        if asked is not None:
            return asked
        backoff = min(self.max_backoff_s, self.backoff_s * 2.0**attempt)
        return backoff * (1 - random.random() / 4)


def retry_after_s(response: httpx.Response) -> float | None:
    """Retry-After in seconds (a number or an HTTP date); None when absent, unreadable or
    longer than ``MAX_RETRY_AFTER_S``."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if seconds <= MAX_RETRY_AFTER_S else None


def may_retry_answer(call: Call[Any], response: httpx.Response) -> bool:
    """Whether an answer invites another try: the service's ``x-should-retry`` decides
    when it says; else a "not now" status for a call that is safe to repeat."""
    told = response.headers.get("x-should-retry")
    if told == "false":
        return False
    if told == "true":
        return True
    return response.status_code in RETRY_STATUSES and call.safety is not Safety.WRITE


def may_retry_error(call: Call[Any], error: httpx.TransportError) -> bool:
    """Whether a request that got no answer may be sent again: always when it never left
    (no connection), else only when it changes nothing."""
    return isinstance(error, _UNSENT) or call.safety is Safety.READ


def unreachable(call: Call[Any], error: httpx.TransportError) -> ChatmemError:
    if isinstance(error, httpx.UnsupportedProtocol):
        return ConfigError(f"the service URL is not usable: {error}")
    return StoreUnavailableError(
        f"{call.method} {call.path}: no answer from the service: {error!r}"
    )


def error_for(call: Call[Any], response: httpx.Response) -> ChatmemError:
    """The exception an error answer stands for."""
    status = response.status_code
    message, param, code = _detail(response)
    if status in (400, 413, 422):
        return _invalid(call, message, param)
    if status in (401, 403):
        return AuthenticationError(message, status_code=status)
    if status == 404:
        what, name = call.subject or ("route", f"{call.method} {call.path}")
        return NotFoundError(name, what=what)
    if status == 409:
        return ConflictError(message)
    if status == 502 and code == "model_error":
        return LLMUnavailableError(message, status_code=status)
    if status == 429 or status >= 500:
        return StoreUnavailableError(f"the service answered {status}: {message}")
    return ChatmemError(f"the service answered {status}: {message}")


def _detail(response: httpx.Response) -> tuple[str, str | None, str | None]:
    """The error's message, param and code (the service's OpenAI-shaped body), or the
    body's text when it is not that shape (a proxy in front of the service)."""
    try:
        error = response.json()["error"]
        message, param, code = error["message"], error.get("param"), error.get("code")
    except (ValueError, KeyError, TypeError):
        return response.text[:1000] or response.reason_phrase, None, None
    return str(message), param if isinstance(param, str) else None, code


def _invalid(call: Call[Any], message: str, param: str | None) -> ValidationError:
    """A refusal of the input; the service's ``"param: why"`` text loses the prefix that
    ``field`` already carries."""
    text = message.removeprefix(f"{param}: ") if param else message
    line = _LINE.fullmatch(text)
    if call.path == IMPORT_PATH and line is not None:
        why = line[2].removeprefix(f"{param}: ") if param else line[2]
        return ImportFormatError(why, line=int(line[1]), field=param)
    return ValidationError(text, field=param)


def answer(call: Call[R], response: httpx.Response) -> R:
    """The call's result from a successful answer, or the error it stands for."""
    if response.status_code >= 400:
        raise error_for(call, response)
    try:
        return call.read(response.json() if response.content else None)
    except (ValueError, KeyError, TypeError, pydantic.ValidationError) as exc:
        raise StoreError(
            f"{call.method} {call.path}: the service's answer is not what this client reads "
            f"(is it chatmem {__version__}?): {exc}"
        ) from exc


def headers_for(base: Mapping[str, str], call: Call[Any], tenant_id: str | None) -> dict[str, str]:
    headers = dict(base)
    tenant = call.tenant_id or tenant_id
    if tenant is not None:
        headers[TENANT_HEADER] = tenant
    return headers


def base_headers(api_key: str | None) -> dict[str, str]:
    headers = {"User-Agent": f"chatmem-client/{__version__}"}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


Content = Iterable[bytes] | AsyncIterable[bytes] | None
H = TypeVar("H", httpx.Client, httpx.AsyncClient)


@dataclass(frozen=True)
class Connection(Generic[H]):
    """Where and as whom a client talks to the service: the arguments of ``Client`` and
    ``AsyncClient``, as their transport takes them."""

    base_url: str
    api_key: str | None
    tenant_id: str | None
    timeout: float | httpx.Timeout
    retry: RetryPolicy
    #: The caller's own HTTP client (None: the transport makes one, and closes it).
    http_client: H | None


class _Transport:
    """What the sync and async transports share: where, who, and how to retry, and what
    to do when a try fails (the loops that try are theirs)."""

    def __init__(self, connection: Connection[Any]) -> None:
        self.base_url = connection.base_url.rstrip("/")
        self.tenant_id = connection.tenant_id
        self.retry = connection.retry
        self._headers = base_headers(connection.api_key)
        self._owned = connection.http_client is None

    def _build(
        self, http: httpx.Client | httpx.AsyncClient, call: Call[Any], content: Content
    ) -> httpx.Request:
        return http.build_request(
            call.method,
            self.base_url + call.path,
            params=call.params or None,
            json=call.json,
            content=content,
            headers=headers_for(self._headers, call, self.tenant_id),
        )

    def _after_no_answer(self, call: Call[Any], attempt: int, error: httpx.TransportError) -> float:
        """The wait before trying ``call`` again after it got no answer; raised as its
        exception when it may not be tried again."""
        if attempt >= self.retry.max_retries or not may_retry_error(call, error):
            raise unreachable(call, error) from error
        return self._waited(call, attempt, None, repr(error))

    def _after_refusal(self, call: Call[Any], attempt: int, response: httpx.Response) -> float:
        """The wait before trying ``call`` again after an error answer (read and closed);
        raised as its exception when it may not be tried again."""
        if attempt >= self.retry.max_retries or not may_retry_answer(call, response):
            raise error_for(call, response)
        return self._waited(call, attempt, response, f"HTTP {response.status_code}")

    def _waited(
        self, call: Call[Any], attempt: int, response: httpx.Response | None, why: str
    ) -> float:
        delay = self.retry.delay(attempt, response)
        logger.warning("%s %s: %s; trying again in %.2f s", call.method, call.path, why, delay)
        return delay


class SyncTransport(_Transport):
    """Sends calls over an ``httpx.Client`` (one it makes, or the caller's)."""

    def __init__(self, connection: Connection[httpx.Client]) -> None:
        super().__init__(connection)
        given = connection.http_client
        self.http = given if given is not None else httpx.Client(timeout=connection.timeout)

    def sender(self, build: Callable[P, Call[R]]) -> Callable[P, R]:
        """A function that sends the call ``build`` makes and returns what its answer says."""

        def send(*args: P.args, **kwargs: P.kwargs) -> R:
            return self.send(build(*args, **kwargs))

        return send

    def send(self, call: Call[R], *, content: Iterable[bytes] | None = None) -> R:
        response = self.open(call, content=content)
        try:
            response.read()
        finally:
            response.close()
        return answer(call, response)

    def open(self, call: Call[Any], *, content: Iterable[bytes] | None = None) -> httpx.Response:
        """The streamed answer to ``call`` after the retries it allows; an error answer
        is raised as its exception. The caller closes the response."""
        attempt = 0
        while True:
            try:
                response = self.http.send(self._build(self.http, call, content), stream=True)
            except httpx.TransportError as exc:
                delay = self._after_no_answer(call, attempt, exc)
            else:
                if response.status_code < 400:
                    return response
                response.read()
                response.close()
                delay = self._after_refusal(call, attempt, response)
            time.sleep(delay)
            attempt += 1

    def close(self) -> None:
        if self._owned:
            self.http.close()


class AsyncTransport(_Transport):
    """Sends calls over an ``httpx.AsyncClient`` (one it makes, or the caller's)."""

    def __init__(self, connection: Connection[httpx.AsyncClient]) -> None:
        super().__init__(connection)
        given = connection.http_client
        self.http = given if given is not None else httpx.AsyncClient(timeout=connection.timeout)

    def sender(self, build: Callable[P, Call[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        """A coroutine function that sends the call ``build`` makes."""

        async def send(*args: P.args, **kwargs: P.kwargs) -> R:
            return await self.send(build(*args, **kwargs))

        return send

    async def send(self, call: Call[R], *, content: AsyncIterable[bytes] | None = None) -> R:
        response = await self.open(call, content=content)
        try:
            await response.aread()
        finally:
            await response.aclose()
        return answer(call, response)

    async def open(
        self, call: Call[Any], *, content: AsyncIterable[bytes] | None = None
    ) -> httpx.Response:
        """As ``SyncTransport.open``, awaited."""
        attempt = 0
        while True:
            try:
                request = self._build(self.http, call, content)
                response = await self.http.send(request, stream=True)
            except httpx.TransportError as exc:
                delay = self._after_no_answer(call, attempt, exc)
            else:
                if response.status_code < 400:
                    return response
                await response.aread()
                await response.aclose()
                delay = self._after_refusal(call, attempt, response)
            await asyncio.sleep(delay)
            attempt += 1

    async def close(self) -> None:
        if self._owned:
            await self.http.aclose()


__all__ = [
    "DEFAULT_BASE_URL",
    "AsyncTransport",
    "Connection",
    "RetryPolicy",
    "SyncTransport",
    "answer",
    "error_for",
    "may_retry_answer",
    "may_retry_error",
    "retry_after_s",
]
