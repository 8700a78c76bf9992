"""Fixtures for the service: a real app on real SQLite files, the real local embedder,
and the scripted OpenAI-compatible upstream from ``chatmem.testing`` on loopback."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from chatmem import LocalEmbedder
from chatmem.server import Runtime, ServiceConfig, create_app
from chatmem.testing import ScriptedOpenAIServer

ADMIN_KEY = "admin-key-0123456789abcdef"


def echo(body: dict[str, Any]) -> str:
    """The upstream's answer: what it was sent, so tests can see what memory injected."""
    return "seen: " + " | ".join(str(m.get("content")) for m in body["messages"])


@pytest.fixture
def upstream() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(responder=echo) as server:
        yield server


ServiceFactory = Callable[..., TestClient]


@pytest.fixture
def make_service(
    tmp_path: Path, embedder: LocalEmbedder, upstream: ScriptedOpenAIServer
) -> Iterator[ServiceFactory]:
    """``make_service(**overrides)``: a started service (TestClient) whose config is the
    defaults plus ``overrides`` (nested dicts, as in the YAML file). The data directory is
    ``tmp_path / "data"``, the upstream the scripted server, the admin key ``ADMIN_KEY``,
    extraction after every user turn, a 5 s search budget."""
    opened: list[TestClient] = []

    def make(**overrides: Any) -> TestClient:
        data: dict[str, Any] = {
            "server": {"data_dir": str(tmp_path / "data")},
            "upstream": {"base_url": upstream.base_url},
            "auth": {"admin_key": ADMIN_KEY},
            # A search budget no loaded CI machine misses (the budget has its own test).
            "memory": {"extraction_batch_size": 1, "search_budget_ms": 5000},
        }
        for section, values in overrides.items():
            if isinstance(values, dict):
                data[section] = {**data.get(section, {}), **values}
            else:
                data[section] = values
        config = ServiceConfig.parse(data)
        runtime = Runtime.start(config, embedder=embedder)
        client = TestClient(create_app(runtime=runtime))
        client.__enter__()
        opened.append(client)
        _RUNNING.append(runtime)
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)
    _RUNNING.clear()


#: The runtimes of the services the current test started, for ``settle``.
_RUNNING: list[Runtime] = []


@pytest.fixture
def service(make_service: ServiceFactory) -> TestClient:
    """A service with the defaults (anonymous tenant "default", admin key ADMIN_KEY)."""
    return make_service()


def runtime_of(client: TestClient) -> Runtime:
    runtime: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    return runtime


def settle(timeout_s: float = 10.0) -> None:
    """Wait until the turns of answered requests are stored (that runs after the answer)."""
    wait_for(lambda: not any(len(r.after_answer) for r in _RUNNING), timeout_s)


def drain(client: TestClient, timeout_s: float = 30.0) -> None:
    """Store the answered turns, run queued extraction now, and wait for a batch the worker
    thread holds."""
    runtime = runtime_of(client)
    assert runtime.worker is not None
    settle()
    deadline = time.monotonic() + timeout_s
    while True:
        runtime.worker.drain()
        if runtime.queue_depth() == 0:
            return
        assert time.monotonic() < deadline, "extraction did not finish"
        time.sleep(0.01)


def wait_for(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Until ``check()`` holds (work done after a response was sent, such as storing a
    streamed answer)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
