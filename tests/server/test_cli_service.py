"""``chatmem demo`` and ``chatmem serve`` as a user runs them: real subprocesses, real HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


@contextmanager
def _serving(tmp_path: Path, *args: str, env: dict[str, str]) -> Iterator[Served]:
    """``chatmem … serve`` on a free port, started (its /healthz answers) and stopped."""
    port = _free_port()
    command = [sys.executable, "-m", "chatmem.cli", *args, "--port", str(port)]
    server = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    served = Served(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stdout.read() if server.stdout else ""
            try:
                if httpx.get(f"{served.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the service did not start"
            time.sleep(0.2)
        yield served
    finally:
        server.terminate()
        server.wait(30)
        if server.stdout is not None:
            served.log = server.stdout.read()
            server.stdout.close()


@dataclass
class Served:
    url: str
    log: str = ""


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.slow
def test_serve_answers_with_memory_over_http(tmp_path: Path, workers: int) -> None:
    env = {
        **_env(tmp_path),
        "CHATMEM__MEMORY__EXTRACTION_BATCH_SIZE": "1",
        "CHATMEM__LOG_FORMAT": "json",
        "CHATMEM__AUTH__ADMIN_KEY": ADMIN_KEY,  # /readyz details are the admin's
    }
    http = httpx.Client(timeout=30)
    args = ("serve", "--workers", str(workers), "--scripted-upstream")
    with _serving(tmp_path, *args, env=env) as served:
        base = served.url
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
    http.close()
    # Extraction shows in the logs, one JSON object per line with the batch's fields.
    records = [json.loads(line) for line in served.log.splitlines() if line.startswith("{")]
    stored = [r for r in records if r["message"].startswith("Memory: stored")]
    assert stored and stored[0]["user_id"] == "alice" and stored[0]["stored"] >= 1


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chatmem.cli", *args],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("named_by", ["--store", "$CHATMEM_STORE"])
@pytest.mark.slow
def test_serve_opens_the_store_the_cli_writes(tmp_path: Path, named_by: str) -> None:
    uri = f"sqlite:///{tmp_path}/cli.db"
    given = ("--store", uri) if named_by == "--store" else ()
    env = _env(tmp_path) if given else {**_env(tmp_path), "CHATMEM_STORE": uri}
    added = _cli(*given, "add", "--user", "alice", "I keep bees on the roof", env=env)
    assert added.returncode == 0, added.stderr
    memory_id = added.stdout.strip()
    with _serving(tmp_path, *given, "serve", env=env) as served:
        got = httpx.get(f"{served.url}/v1/memory/{memory_id}", params={"user_id": "alice"})
    assert got.status_code == 200, got.text
    assert got.json()["content"]["raw"] == "I keep bees on the roof"
    assert f"store: {uri}" in served.log
    assert not (tmp_path / "xdg" / "chatmem" / "chatmem.db").exists()


@pytest.mark.parametrize(
    ("args", "variables", "source"),
    [
        (("--store", "foo://bar", "serve"), {}, "--store"),
        (("serve",), {"CHATMEM_STORE": "foo://bar"}, "$CHATMEM_STORE"),
        (("serve",), {"CHATMEM__MEMORY__STORE": "foo://bar"}, "memory.store"),
    ],
)
def test_serve_refuses_a_store_uri_that_cannot_be_right(
    tmp_path: Path, args: tuple[str, ...], variables: dict[str, str], source: str
) -> None:
    done = _cli(*args, "--port", str(_free_port()), env={**_env(tmp_path), **variables})
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()  # the schemes it knows follow, in parentheses
    assert line.startswith("error: ")
    assert f"{source}: unknown store scheme 'foo' in 'foo://bar' (sqlite" in line


@pytest.mark.slow
def test_config_check_reports_an_unknown_store_scheme(tmp_path: Path) -> None:
    config = tmp_path / "chatmem.yaml"
    config.write_text('memory:\n  store: "foo://bar"\n')
    done = _cli("config", "check", str(config), env=_env(tmp_path))
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        f"error: {config}: memory.store: unknown store scheme 'foo' in 'foo://bar' (sqlite"
    )
    config.write_text("memory:\n  store: null\n")
    unset = _cli("config", "check", str(config), env={**_env(tmp_path), "CHATMEM_STORE": "foo://"})
    assert unset.returncode == 1 and "$CHATMEM_STORE: unknown store scheme" in unset.stderr
    fine = _cli("config", "check", str(config), env=_env(tmp_path))
    assert fine.returncode == 0, fine.stderr
    assert f"store: {tmp_path / 'xdg' / 'chatmem' / 'chatmem.db'}" in fine.stdout


def test_demo_leaves_no_temp_folder(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = _cli("demo", env={**_env(tmp_path), "TMPDIR": str(temp)})
    assert done.returncode == 0, done.stderr
    assert "memory: injected" in done.stdout
    # Libraries keep caches there (tiktoken's data-gym-cache); the demo's own folder goes.
    assert list(temp.glob("chatmem-demo-*")) == []
