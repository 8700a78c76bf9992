"""The inspector's browser tests: a real service over HTTP (``ServiceThread``) on real
SQLite files with the real local embedder, driven by real headless Chromium (Debian's
``chromium`` through Playwright; no browser download). Skipped, saying why, only when
Chromium or Playwright is missing (CI installs both)."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from chatmem import LocalEmbedder
from chatmem.server import Runtime, ServiceConfig, create_app
from chatmem.server.serving import ServiceThread
from chatmem.testing import ScriptedOpenAIServer

CHROMIUM = os.environ.get("CHATMEM_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ADMIN_KEY = "admin-key-0123456789abcdef"
#: Where screenshots go (docs/images/inspector-*.png are copied from here).
SHOTS = Path(os.environ.get("CHATMEM_UI_SCREENSHOTS", "bench-results/inspector"))

try:
    from playwright.sync_api import Browser, Page, sync_playwright
except ImportError:  # pragma: no cover - dev installs playwright
    sync_playwright = None  # type: ignore[assignment]

if sync_playwright is None or not Path(CHROMIUM).exists():
    pytest.skip(
        f"the inspector's browser tests need playwright and chromium at {CHROMIUM} "
        "(apt-get install chromium; CI installs it)",
        allow_module_level=True,
    )


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        opened = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield opened
        opened.close()


@dataclass
class Service:
    """A started service: its URL, runtime, and helpers for the REST API."""

    url: str
    runtime: Runtime

    def api(self, method: str, path: str, key: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}", **kwargs.pop("headers", {})}
        return httpx.request(method, self.url + path, headers=headers, timeout=30, **kwargs)

    def new_key(self, tenant: str, roles: list[str] | None = None) -> str:
        made = self.api("POST", "/v1/admin/keys", ADMIN_KEY,
                        json={"tenant_id": tenant, "roles": roles or []})  # fmt: skip
        assert made.status_code == 201, made.text
        return str(made.json()["key"])

    def remember(
        self, key: str, user: str, content: str, *, headers: dict[str, str] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:  # fmt: skip
        body = {"user_id": user, "content": content, **fields}
        made = self.api("POST", "/v1/memory", key, json=body, headers=headers or {})
        assert made.status_code == 201, made.text
        return dict(made.json()["memories"][0])

    def say(self, key: str, user: str, session: str, messages: list[dict[str, Any]]) -> None:
        sent = self.api("POST", f"/v1/sessions/{session}/messages", key,
                        json={"user_id": user, "messages": messages, "format": "rich"})  # fmt: skip
        assert sent.status_code == 201, sent.text

    def drain(self, timeout_s: float = 30) -> None:
        """Run queued extraction now (turns are queued after the response)."""
        deadline = time.monotonic() + timeout_s
        while True:
            time.sleep(0.05)
            if self.runtime.worker is not None:
                self.runtime.worker.drain()
            if self.runtime.queue_depth() == 0 and not len(self.runtime.after_answer):
                return
            assert time.monotonic() < deadline, "extraction did not finish"


ServiceMaker = Callable[..., Service]


@pytest.fixture
def make_service(tmp_path: Path, embedder: LocalEmbedder) -> Iterator[ServiceMaker]:
    """``make_service(**overrides)``: a service over HTTP with keys required (admin key
    ``ADMIN_KEY``), extraction after every turn, and the scripted upstream."""
    opened: list[tuple[ServiceThread, ScriptedOpenAIServer]] = []

    def make(**overrides: Any) -> Service:
        upstream = ScriptedOpenAIServer(responder=lambda body: "Noted.").__enter__()
        data: dict[str, Any] = {
            "server": {"data_dir": str(tmp_path / f"data{len(opened)}")},
            "upstream": {"base_url": upstream.base_url},
            "auth": {"admin_key": ADMIN_KEY, "anonymous_tenant": None},
            "memory": {"extraction_batch_size": 1, "search_budget_ms": 5000},
        }
        for section, values in overrides.items():
            data[section] = {**data.get(section, {}), **values}
        runtime = Runtime.start(ServiceConfig.parse(data), embedder=embedder)
        thread = ServiceThread(create_app(runtime=runtime)).__enter__()
        opened.append((thread, upstream))
        return Service(thread.url, runtime)

    yield make
    for thread, upstream in opened:
        thread.__exit__(None, None, None)
        upstream.__exit__(None, None, None)


@pytest.fixture
def service(make_service: ServiceMaker) -> Service:
    return make_service()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser context (no cookies) and page; any dialog fails the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    dialogs: list[str] = []
    opened.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    yield opened
    context.close()
    assert not dialogs, f"a dialog fired: {dialogs}"


def login(page: Page, service: Service, key: str) -> None:
    page.goto(service.url + "/ui/login")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state()


def choose_tenant(page: Page, tenant: str) -> None:
    page.get_by_label("Tenant id").fill(tenant)
    page.get_by_role("button", name="Inspect this tenant").click()
    page.wait_for_load_state()


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"inspector-{name}.png"), full_page=True)


def memory_id_in(url: str) -> str:
    found = re.search(r"/memories/([0-9a-f]+)", url)
    assert found, url
    return found.group(1)
