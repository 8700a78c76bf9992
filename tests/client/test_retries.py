"""Retries against real servers: a service with memory off (503 on every memory route), the
scripted server from ``chatmem.testing`` for the headers a chatmem service does not send
on these routes (Retry-After, ``x-should-retry``), nothing listening at all, and a real
``chatmem serve`` stopped and started again on the same port. Requests are counted with
httpx's own event hooks on a real ``httpx.Client``; nothing is mocked."""

from __future__ import annotations

import asyncio
import email.utils
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from chatmem import (
    AsyncClient,
    Client,
    Filter,
    LocalEmbedder,
    NotFoundError,
    StoreUnavailableError,
)
from chatmem.client import RetryPolicy
from chatmem.client.transport import retry_after_s
from chatmem.testing import ScriptedOpenAIServer
from tests.client.conftest import serving

QUICK = RetryPolicy(max_retries=2, backoff_s=0.01, max_backoff_s=0.05)


def test_reads_are_retried_on_a_503_and_writes_are_not(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    sent: list[str] = []
    hooks = {"request": [lambda request: sent.append(request.method)]}
    with (
        serving(tmp_path, embedder, memory={"enabled": False}) as off,
        httpx.Client(event_hooks=hooks) as http,
        Client(off.url, retry=QUICK, http_client=http) as client,
    ):
        for read in (
            lambda: client.list(Filter(user_id="u")),
            lambda: client.search("anything", user_id="u"),  # a POST that changes nothing
            lambda: client.delete("some-id"),  # the same effect twice
        ):
            sent.clear()
            with pytest.raises(StoreUnavailableError, match="503.*memory is off"):
                read()
            assert len(sent) == 3, sent
        sent.clear()
        with pytest.raises(StoreUnavailableError):
            client.add("I would be stored twice by a retry.", user_id="u")
        assert sent == ["POST"]
        sent.clear()
        assert client.sessions.append("s", [{"role": "user", "content": "hi"}], user_id="u") == 1
        assert sent == ["POST"]  # sessions work with memory off


def test_the_async_client_retries_as_the_sync_one(tmp_path: Path, embedder: LocalEmbedder) -> None:
    sent: list[str] = []

    async def count(request: httpx.Request) -> None:
        sent.append(request.method)

    async def scenario() -> None:
        async with (
            httpx.AsyncClient(event_hooks={"request": [count]}) as http,
            AsyncClient(off.url, retry=QUICK, http_client=http) as client,
        ):
            with pytest.raises(StoreUnavailableError):
                await client.get("some-id")
            assert sent == ["GET"] * 3
            sent.clear()
            with pytest.raises(StoreUnavailableError):
                await client.add("once", user_id="u")
            assert sent == ["POST"]

    with serving(tmp_path, embedder, memory={"enabled": False}) as off:
        asyncio.run(scenario())


def test_retry_after_and_x_should_retry_are_obeyed() -> None:
    with ScriptedOpenAIServer() as server:
        base = server.base_url.removesuffix("/v1")
        with Client(base, retry=QUICK) as client:
            # Retry-After is waited for; the retry reaches a server without memory routes.
            server.fail_next(503, headers={"Retry-After": "0.5"})
            began = time.monotonic()
            with pytest.raises(NotFoundError):
                client.get("m1")
            assert time.monotonic() - began >= 0.5
            assert len(server.request_headers) == 2

            # x-should-retry: false stops even a read.
            server.fail_next(503, headers={"x-should-retry": "false"})
            with pytest.raises(StoreUnavailableError):
                client.get("m2")
            assert len(server.request_headers) == 3

            # x-should-retry: true lets even a write go again: the service says it is safe.
            server.fail_next(503, headers={"x-should-retry": "true"})
            with pytest.raises(NotFoundError):
                client.add("hello", user_id="u")
            assert len(server.request_headers) == 5

            # A 429 is "not now" too, and the retries run out.
            for _ in range(3):
                server.fail_next(429, {"error": {"message": "slow down"}})
            with pytest.raises(StoreUnavailableError, match="429: slow down"):
                client.get("m3")
            assert len(server.request_headers) == 8
        assert all(h["user-agent"].startswith("chatmem-client/") for h in server.request_headers)


def test_retry_after_is_read_as_seconds_or_a_date_and_capped() -> None:
    def asked(value: str) -> float | None:
        return retry_after_s(httpx.Response(503, headers={"Retry-After": value}))

    soon = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert asked("2") == 2.0 and asked("0.25") == 0.25
    assert 28 <= (asked(soon) or 0) <= 30
    assert asked("3600") is None and asked("next tuesday") is None  # the backoff applies
    assert asked("-5") == 0.0
    assert retry_after_s(httpx.Response(503)) is None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_nothing_listening_is_store_unavailable_after_the_retries() -> None:
    with (
        Client(f"http://127.0.0.1:{_free_port()}", retry=QUICK) as client,
        pytest.raises(StoreUnavailableError, match="no answer from the service") as down,
    ):
        client.add("never sent", user_id="u")
    assert isinstance(down.value.__cause__, httpx.ConnectError)


def _serve(data: Path, port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATMEM")}
    env["XDG_DATA_HOME"] = str(data)
    command = [sys.executable, "-m", "chatmem.cli", "serve", "--port", str(port)]
    return subprocess.Popen(
        [*command, "--scripted-upstream"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _stop(server: subprocess.Popen[str]) -> str:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
    output, _ = server.communicate(timeout=60)
    return output


@pytest.mark.slow
def test_a_restarted_chatmem_serve_is_waited_for(tmp_path: Path) -> None:
    port = _free_port()
    patient = RetryPolicy(max_retries=60, backoff_s=0.1, max_backoff_s=1.0)
    first = _serve(tmp_path, port)
    second: list[subprocess.Popen[str]] = []
    try:
        with Client(f"http://127.0.0.1:{port}", retry=patient) as client:
            [kept] = client.add("Stored before the restart.", user_id="u")  # waits for start
            _stop(first)
            restart = threading.Timer(1.0, lambda: second.append(_serve(tmp_path, port)))
            restart.start()
            # Sent while nothing listens: a refused connection never reached the service,
            # so even this write is tried again, and stored once.
            [later] = client.add("Stored across the restart.", user_id="u")
            restart.join()
            assert client.get(kept.id).text == "Stored before the restart."
            assert [r.id for r in client.list_all(Filter(user_id="u"))] == [kept.id, later.id]
    finally:
        for server in [first, *second]:
            output = _stop(server)
            assert "Traceback" not in output, output[-4000:]
