"""A real chatmem service for the client: the app served by uvicorn on a loopback port, on
real SQLite files, with the real local embedder and the scripted upstream from
``chatmem.testing``. Nothing of the service or of httpx is mocked."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from chatmem import LocalEmbedder
from chatmem.server import Runtime, ServiceConfig, create_app
from chatmem.server.serving import ServiceThread
from chatmem.testing import ScriptedOpenAIServer

ADMIN_KEY = "client-admin-key-0123456789"


@dataclass
class Served:
    """A running service: its base URL and runtime."""

    url: str
    runtime: Runtime


@contextmanager
def serving(
    data_dir: Path, embedder: LocalEmbedder, *, port: int = 0, **overrides: Any
) -> Iterator[Served]:
    """Serve the app on ``data_dir`` until the block ends (config: the defaults, the admin
    key ``ADMIN_KEY``, the scripted upstream, and ``overrides`` by section)."""
    with ScriptedOpenAIServer(responder=lambda body: "Noted.") as upstream:
        data: dict[str, Any] = {
            "server": {"data_dir": str(data_dir)},
            "upstream": {"base_url": upstream.base_url},
            "auth": {"admin_key": ADMIN_KEY},
            "memory": {"search_budget_ms": 5000},
        }
        for section, values in overrides.items():
            data[section] = {**data.get(section, {}), **values}
        runtime = Runtime.start(ServiceConfig.parse(data), embedder=embedder)
        with ServiceThread(create_app(runtime=runtime), port=port) as service:
            yield Served(service.url, runtime)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, embedder: LocalEmbedder) -> Iterator[Served]:
    """One service for a test module; tests keep apart by user and tenant ids."""
    with serving(tmp_path_factory.mktemp("service"), embedder) as service:
        yield service


@pytest.fixture
def fresh(tmp_path: Path, embedder: LocalEmbedder) -> Iterator[Served]:
    """A service of the test's own, on an empty store."""
    with serving(tmp_path / "service", embedder) as service:
        yield service


class Blocking:
    """An async object driven from sync code: each coroutine it returns is run to the end
    on one event loop (an async generator is gathered into a list), so one test body
    drives sync and async faces alike."""

    def __init__(self, target: Any, runner: asyncio.Runner) -> None:
        self._target = target
        self._runner = runner

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not callable(attribute):
            return Blocking(attribute, self._runner)

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attribute(*args, **kwargs)
            if inspect.isasyncgen(result):
                return self._runner.run(_collected(result))
            return self._runner.run(result) if inspect.isawaitable(result) else result

        return call


async def _collected(items: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in items]


@pytest.fixture
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as loop:
        yield loop


Factory = Callable[..., Any]
