"""``chatmem demo`` and ``chatmem serve`` as a user runs them: real subprocesses, real HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.server.conftest import ADMIN_KEY


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATMEM")}
    return {**env, "XDG_DATA_HOME": str(tmp_path / "xdg"), "COLUMNS": "200"}


def test_demo_recalls_across_sessions_through_the_proxy(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "chatmem.cli", "demo", "--data-dir", str(tmp_path / "demo")],
        capture_output=True, text=True, env=_env(tmp_path), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Memory: stored" in out
    session_b = out.split("Session B", 1)[1]
    assert "budget for the Hawaii trip is $10,000" in session_b.split("bob", 1)[0]
    assert "memory: injected" in session_b
    assert "$10,000" not in out.rsplit("bob (another user)", 1)[1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_answers_with_memory_over_http(tmp_path: Path, workers: int) -> None:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "chatmem.cli", "serve", "--port", str(port),
         "--workers", str(workers), "--scripted-upstream"],
        env={
            **_env(tmp_path),
            "CHATMEM__MEMORY__EXTRACTION_BATCH_SIZE": "1",
            "CHATMEM__LOG_FORMAT": "json",
            "CHATMEM__AUTH__ADMIN_KEY": ADMIN_KEY,  # /readyz details are the admin's
        },
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    http = httpx.Client(timeout=30)
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
        chat = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", http_client=http)
        chat.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "My budget for the Hawaii trip is $10,000."}],
            user="alice",
        )
        for _ in range(100):  # extraction runs in the worker thread after the answer
            ready = httpx.get(f"{base}/readyz", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
            if ready.json()["extraction_queue"] == 0:
                break
            time.sleep(0.1)
        time.sleep(0.3)
        answer = chat.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "What's my budget for the trip?"}],
            user="alice",
        )
        assert "$10,000" in (answer.choices[0].message.content or "")
        assert (tmp_path / "xdg" / "chatmem" / "chatmem.db").exists()
    finally:
        http.close()
        server.terminate()
        server.wait(30)
        log = server.stdout.read() if server.stdout is not None else ""
        if server.stdout is not None:
            server.stdout.close()
    # Extraction shows in the logs, one JSON object per line with the batch's fields.
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    stored = [r for r in records if r["message"].startswith("Memory: stored")]
    assert stored and stored[0]["user_id"] == "alice" and stored[0]["stored"] >= 1
