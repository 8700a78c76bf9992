"""Health over HTTP: readiness tells anonymous callers a status only and probes the real
upstream (cached), metrics need a key when keys are required or move to their own listen
address, and /docs is served offline from the package."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from chatmem.errors import ConfigError
from chatmem.server import ServiceConfig
from chatmem.testing import ScriptedOpenAIServer
from tests.server.conftest import ADMIN_KEY, ServiceFactory, runtime_of

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
SCRAPE_KEY = "scrape-key-0123456789abcdef"
KEYS_REQUIRED = {"anonymous_tenant": None, "admin_key": ADMIN_KEY}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def probes(upstream: ScriptedOpenAIServer) -> int:
    """How many requests the upstream has had that were not chats or embeddings."""
    return len(upstream.request_headers) - len(upstream.requests)


# -- readiness --------------------------------------------------------------------------------


def test_readiness_gives_anonymous_callers_only_a_status(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    anonymous = service.get("/readyz")
    assert anonymous.status_code == 200
    assert anonymous.json() == {"status": "ready"}
    assert "127.0.0.1" not in anonymous.text
    detailed = service.get("/readyz", headers=ADMIN).json()
    assert detailed["upstream"] == upstream.base_url
    assert detailed["memory"] == "on" and detailed["database"] == "ok"
    assert detailed["extraction_queue"] == 0


def test_readiness_with_keys_required_answers_without_a_key_but_details_only_the_admin(
    make_service: ServiceFactory, upstream: ScriptedOpenAIServer
) -> None:
    service = make_service(auth=KEYS_REQUIRED)
    tenant_key, _ = runtime_of(service).keys.create("acme", ["hr"])
    for headers in ({}, bearer(tenant_key), bearer("cm-not-a-key"), bearer("upstream-key")):
        answer = service.get("/readyz", headers=headers)
        assert (answer.status_code, answer.json()) == (200, {"status": "ready"}), headers
    assert service.get("/readyz", headers=ADMIN).json()["upstream"] == upstream.base_url


def test_readiness_without_an_upstream_says_so_and_nothing_more(
    make_service: ServiceFactory,
) -> None:
    service = make_service(upstream={"base_url": None})
    answer = service.get("/readyz")
    assert (answer.status_code, answer.json()) == (503, {"status": "no upstream"})


def test_readiness_follows_the_real_upstream_stopped_and_running(
    make_service: ServiceFactory, upstream: ScriptedOpenAIServer
) -> None:
    with ScriptedOpenAIServer(responder=lambda body: "hi") as model:
        service = make_service(upstream={"base_url": model.base_url, "ready_cache_s": 0})
        assert service.get("/readyz").json() == {"status": "ready"}
    stopped = service.get("/readyz")
    assert (stopped.status_code, stopped.json()) == (503, {"status": "upstream unreachable"})
    detailed = service.get("/readyz", headers=ADMIN).json()
    assert detailed["status"] == "upstream unreachable"
    assert "ConnectError" in detailed["upstream_error"]
    with ScriptedOpenAIServer(responder=lambda body: "hi") as again:
        running = make_service(upstream={"base_url": again.base_url, "ready_cache_s": 0})
        assert running.get("/readyz").status_code == 200


def test_the_probe_has_a_short_timeout(
    make_service: ServiceFactory, upstream: ScriptedOpenAIServer
) -> None:
    service = make_service(upstream={"ready_timeout_s": 0.3, "ready_cache_s": 0})
    upstream.delay_next(5)
    began = time.monotonic()
    answer = service.get("/readyz", headers=ADMIN)
    assert time.monotonic() - began < 3
    assert answer.status_code == 503
    assert answer.json()["upstream_error"].startswith("timed out")


def test_the_probe_answer_is_cached(
    make_service: ServiceFactory, upstream: ScriptedOpenAIServer
) -> None:
    service = make_service(upstream={"ready_cache_s": 60})
    before = probes(upstream)
    for _ in range(5):
        assert service.get("/readyz").status_code == 200
    assert probes(upstream) - before == 1
    upstream.fail_next(503)  # not asked again while the answer is fresh
    assert service.get("/readyz").status_code == 200


def test_an_upstream_that_answers_5xx_is_not_ready(
    make_service: ServiceFactory, upstream: ScriptedOpenAIServer
) -> None:
    service = make_service(upstream={"ready_cache_s": 0})
    upstream.fail_next(502)
    assert service.get("/readyz").json() == {"status": "upstream unreachable"}
    assert service.get("/readyz").json() == {"status": "ready"}


# -- metrics ----------------------------------------------------------------------------------


def test_metrics_need_a_key_when_keys_are_required(make_service: ServiceFactory) -> None:
    service = make_service(
        auth=KEYS_REQUIRED, server={"metrics": {"key_env": "CHATMEM_TEST_SCRAPE_KEY"}}
    )
    tenant_key, _ = runtime_of(service).keys.create("acme", [])
    assert service.get("/metrics").status_code == 401
    assert service.get("/metrics", headers=bearer(tenant_key)).status_code == 403
    assert service.get("/metrics", headers=bearer("x" * 20)).status_code == 401
    assert "chatmem_request_seconds" in service.get("/metrics", headers=ADMIN).text


def test_a_dedicated_metrics_key_reads_metrics_and_nothing_else(
    make_service: ServiceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATMEM_TEST_SCRAPE_KEY", SCRAPE_KEY)
    service = make_service(
        auth=KEYS_REQUIRED, server={"metrics": {"key_env": "CHATMEM_TEST_SCRAPE_KEY"}}
    )
    scraped = service.get("/metrics", headers=bearer(SCRAPE_KEY))
    assert scraped.status_code == 200 and "chatmem_extraction_queue_depth" in scraped.text
    assert service.get("/metrics", headers={"X-API-Key": SCRAPE_KEY}).status_code == 200
    assert service.get("/v1/memory", headers=bearer(SCRAPE_KEY)).status_code == 401
    assert service.get("/readyz", headers=bearer(SCRAPE_KEY)).json() == {"status": "ready"}


def test_metrics_stay_open_when_anonymous_requests_are_served(service: TestClient) -> None:
    assert service.get("/metrics").status_code == 200


def test_metrics_on_their_own_listen_address(make_service: ServiceFactory) -> None:
    service = make_service(auth=KEYS_REQUIRED, server={"metrics": {"listen": "127.0.0.1:0"}})
    host, port = service.app.state.metrics_address  # type: ignore[attr-defined]
    scraped = httpx.get(f"http://{host}:{port}/metrics", timeout=5)
    assert scraped.status_code == 200
    assert "chatmem_extraction_queue_depth" in scraped.text
    assert service.get("/metrics", headers=ADMIN).status_code == 404


def test_metrics_can_be_turned_off(make_service: ServiceFactory) -> None:
    service = make_service(server={"metrics": {"enabled": False}})
    assert service.get("/metrics").status_code == 404
    assert service.get("/metrics", headers=ADMIN).status_code == 404


def test_the_metrics_config_is_checked() -> None:
    with pytest.raises(ConfigError, match="server.metrics.listen: Value error|must be host:port"):
        ServiceConfig.parse({"server": {"metrics": {"listen": "9464"}}})
    with pytest.raises(ConfigError, match="needs workers 1"):
        ServiceConfig.parse({"server": {"workers": 2, "metrics": {"listen": "127.0.0.1:9464"}}})
    parsed = ServiceConfig.parse({"server": {"metrics": {"listen": "[::1]:9464"}}})
    assert parsed.server.metrics.address() == ("::1", 9464)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_chatmem_serve_starts_the_metrics_listener_and_keeps_readiness_terse(
    tmp_path: Path,
) -> None:
    port, metrics_port = _free_port(), _free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CHATMEM")},
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "CHATMEM__AUTH__ANONYMOUS_TENANT": "null",
        "CHATMEM__AUTH__ADMIN_KEY": ADMIN_KEY,
        "CHATMEM__SERVER__METRICS__LISTEN": f"127.0.0.1:{metrics_port}",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "chatmem.cli", "serve", "--port", str(port),
         "--scripted-upstream"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stdout.read() if server.stdout else ""
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the service did not start"
            time.sleep(0.2)
        assert httpx.get(f"{base}/readyz").json() == {"status": "ready"}
        scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
        assert "chatmem_request_seconds" in scraped.text
        assert httpx.get(f"{base}/metrics", headers=ADMIN).status_code == 404
    finally:
        server.terminate()
        output = server.communicate(timeout=60)[0]
    assert server.returncode == 0, output
    assert f"metrics on http://127.0.0.1:{metrics_port}/metrics" in output


# -- docs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_load_every_asset_from_chatmem_itself(service: TestClient, page: str) -> None:
    html = service.get(page)
    assert html.status_code == 200
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']|url:\s*['"]([^'"]+)['"]""", html.text)
    found = [a or b for a, b in urls]
    assert found, html.text
    assert not [u for u in found if "//" in u], found  # nothing from a CDN or elsewhere
    kinds = set()
    for url in found:
        asset = service.get(url)
        assert asset.status_code == 200, url
        kinds.add(asset.headers["content-type"].split(";")[0])
    assert "text/javascript" in kinds or "application/javascript" in kinds
    if page == "/docs":
        assert "text/css" in kinds
        assert "application/json" in kinds  # the spec itself
