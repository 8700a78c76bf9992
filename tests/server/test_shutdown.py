"""Stopping the service (issue 20) and crashing it (issue 11, F5): every answered turn is in
its session, and every turn in a session reaches extraction, whatever way the service ends.

The in-process test shuts uvicorn down while answers are arriving, many times over. The
subprocess tests run ``chatmem serve`` as a user does and send it SIGTERM or SIGKILL with
requests in flight, then restart it on the same data.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from chatmem import LocalEmbedder
from chatmem.messages import Role, SessionKey
from chatmem.server import Runtime, ServiceConfig, create_app
from chatmem.server.serving import ServiceThread
from chatmem.sessions.sqlite import SQLiteSessionStore
from chatmem.testing import ScriptedOpenAIServer
from chatmem.worker import BatchState, SQLiteOutbox
from tests.server.conftest import ADMIN_KEY

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}

USERS = ("ana", "ben", "cy")


def _ask(base: str, number: int, *, stream: bool) -> str | None:
    """One chat turn; its user text when the whole answer arrived, else None."""
    user = USERS[number % len(USERS)]
    text = f"Note number {number}: my locker code is {8000 + number}."
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": text}],
        "memory_context": {"user_id": user, "session_id": f"s{number % 2}"},
        "stream": stream,
    }
    try:
        with httpx.Client(timeout=30) as http:
            if not stream:
                answer = http.post(f"{base}/v1/chat/completions", json=body)
                return text if answer.status_code == 200 and answer.json()["choices"] else None
            with http.stream("POST", f"{base}/v1/chat/completions", json=body) as answer:
                lines = [line for line in answer.iter_lines() if line]
                return text if answer.status_code == 200 and lines[-1] == "data: [DONE]" else None
    except httpx.HTTPError:
        return None  # the service stopped first: not answered, nothing promised


def _user_texts(path: Path) -> dict[SessionKey, list[str]]:
    """Every session's user messages, read from the service database itself."""
    store = SQLiteSessionStore(path)
    try:
        found = {}
        for user in USERS:
            for info in store.sessions("default", user):
                key = SessionKey("default", user, info.session_id)
                found[key] = [m.content for m in store.read(key) if m.role is Role.USER]
        return found
    finally:
        store.close()


def _queued_texts(path: Path) -> set[str]:
    outbox = SQLiteOutbox(path)
    try:
        return {
            m.content
            for batch in outbox.batches(limit=100_000)
            for m in batch.messages
            if m.role is Role.USER
        }
    finally:
        outbox.close()


def _burst(base: str, count: int, on_answer: Callable[[], None]) -> list[str]:
    answered: list[str] = []

    def one(number: int) -> None:
        said = _ask(base, number, stream=number % 2 == 0)
        if said is not None:
            answered.append(said)
            on_answer()

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, range(count)))
    return answered


@pytest.mark.parametrize("round_", range(6))
def test_a_stop_as_answers_arrive_keeps_every_answered_turn(
    tmp_path: Path, embedder: LocalEmbedder, round_: int
) -> None:
    def slow(body: dict[str, Any]) -> str:
        time.sleep(0.02 * (round_ % 3))
        return "Noted."

    with ScriptedOpenAIServer(responder=slow) as upstream:
        config = ServiceConfig.parse(
            {
                "server": {"data_dir": str(tmp_path), "shutdown_grace_s": 10},
                "upstream": {"base_url": upstream.base_url},
                "memory": {"extraction_batch_size": 3},
            }
        )
        service = ServiceThread(create_app(runtime=Runtime.start(config, embedder=embedder)))
        service.__enter__()
        stop = threading.Thread(target=service.__exit__, args=(None, None, None))
        answers = 0
        lock = threading.Lock()

        def on_answer() -> None:
            nonlocal answers
            with lock:
                answers += 1
                if answers == 4 + round_:  # stop while the others are in flight
                    stop.start()

        answered = _burst(service.url, 24, on_answer)
        if not stop.is_alive() and stop.ident is None:
            stop.start()
        stop.join(60)
    assert answered, "no request was answered before the stop"
    stored = _user_texts(tmp_path / "service.db")
    kept = {text for texts in stored.values() for text in texts}
    assert set(answered) <= kept, f"answered turns missing: {set(answered) - kept}"
    # Nothing waits in memory: every stored turn was queued for extraction at the stop.
    assert kept <= _queued_texts(tmp_path / "service.db")


# -- a real chatmem serve, stopped and killed ------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _serve(tmp_path: Path, port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATMEM")}
    env.update(
        XDG_DATA_HOME=str(tmp_path / "xdg"),
        CHATMEM__MEMORY__EXTRACTION_BATCH_SIZE="5",
        CHATMEM__AUTH__ADMIN_KEY=ADMIN_KEY,  # /readyz shows the queue's depth to the admin
        PYTHONFAULTHANDLER="1",
    )
    return subprocess.Popen(
        [sys.executable, "-m", "chatmem.cli", "serve", "--port", str(port),
         "--scripted-upstream"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _wait_up(server: subprocess.Popen[str], base: str) -> None:
    deadline = time.monotonic() + 120
    while True:
        assert server.poll() is None, server.stdout.read() if server.stdout else ""
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the service did not start"
        time.sleep(0.1)


def _stop(server: subprocess.Popen[str], how: signal.Signals) -> tuple[int, str]:
    server.send_signal(how)
    output, _ = server.communicate(timeout=90)
    return server.returncode, output


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
def test_a_served_process_stopped_mid_burst_loses_no_answered_turn(
    tmp_path: Path, how: signal.Signals
) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = _serve(tmp_path, port)
    try:
        _wait_up(server, base)
        answered_before = _burst(base, 8, lambda: None)  # all answered: some turns wait
        fired = threading.Event()
        later: list[str] = []
        worker = threading.Thread(
            target=lambda: later.extend(_burst(base, 16, fired.set)), daemon=True
        )
        worker.start()
        fired.wait(60)
        code, output = _stop(server, how)
        worker.join(60)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate(timeout=30)
    assert "Fatal Python error" not in output, output[-4000:]
    if how is signal.SIGTERM:
        assert code == 0, output[-4000:]
    answered = set(answered_before) | set(later)
    database = tmp_path / "xdg" / "chatmem" / "service.db"
    kept = {text for texts in _user_texts(database).values() for text in texts}
    assert answered <= kept, f"answered turns missing: {answered - kept}"

    # After a restart every turn in a session is extracted within seconds (no lease of the
    # dead process holds a user back, and what waited for a trigger is queued at start).
    server = _serve(tmp_path, port)
    try:
        _wait_up(server, base)
        deadline = time.monotonic() + 30
        while httpx.get(f"{base}/readyz", headers=ADMIN).json()["extraction_queue"] > 0:
            assert time.monotonic() < deadline, "the queue did not drain within 30 s"
            time.sleep(0.2)
    finally:
        code, output = _stop(server, signal.SIGTERM)
    assert code == 0 and "Fatal Python error" not in output, output[-4000:]
    outbox = SQLiteOutbox(database)
    try:
        done = {
            m.content
            for batch in outbox.batches(BatchState.DONE, limit=100_000)
            for m in batch.messages
        }
    finally:
        outbox.close()
    assert kept <= done, f"turns never extracted: {kept - done}"
