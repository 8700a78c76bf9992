"""``chatmem demo``: the whole loop, offline, through the real service over HTTP.

A scripted OpenAI-compatible model (``chatmem.testing``) stands in for the LLM; everything
else is what ``chatmem serve`` runs: the proxy on a local port, the SQLite store, the local
embedder and the offline extractor. Alice tells a fact in one session; in a new session her
question reaches the model with that fact injected; Bob asking the same gets nothing of hers.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from chatmem.server.app import create_app
from chatmem.server.config import ServiceConfig
from chatmem.server.serving import ServiceThread
from chatmem.testing import ScriptedOpenAIServer

CONTEXT_HEADER = "User's relevant context"

SESSION_A = [
    "Hi! I'm planning a trip to Hawaii in March.",
    "My budget for the Hawaii trip is $10,000.",
    "I'm vegetarian, so restaurants matter to me.",
]
SESSION_B = ["What's my budget for the trip?", "Any dietary restrictions I mentioned?"]
BOB = "What's my budget for the trip?"


def scripted_model(body: dict[str, Any]) -> str:
    """A stand-in model that answers from the memories chatmem injected, or says it has none."""
    for message in body.get("messages", []):
        content = message.get("content")
        injected = isinstance(content, str) and content.startswith(CONTEXT_HEADER)
        if injected and message.get("role") == "system":
            lines = [line[2:] for line in content.splitlines() if line.startswith("- ")]
            return "From what you told me before: " + "; ".join(lines)
    return "Noted. (no memory of yours was given to me)"


class _Captured(logging.Handler):
    """Keeps the lines that show extraction happening, to print them."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def run_demo(say: Callable[[str], None], *, data_dir: Path | None = None) -> dict[str, Any]:
    """Run the loop, narrating with ``say``; returns what happened (for tests). Without
    ``data_dir`` the files live in a temp folder that is removed at the end."""
    captured = _Captured()
    policy_log = logging.getLogger("chatmem.write_policy")
    policy_log.addHandler(captured)
    policy_log.setLevel(logging.INFO)
    try:
        with contextlib.ExitStack() as stack:
            folder = data_dir or Path(
                stack.enter_context(
                    tempfile.TemporaryDirectory(prefix="chatmem-demo-", ignore_cleanup_errors=True)
                )
            )
            model = stack.enter_context(ScriptedOpenAIServer(responder=scripted_model))
            # The demo's own admin key: /readyz tells only the admin how long the queue is.
            admin = secrets.token_hex(16)
            config = ServiceConfig.parse(
                {
                    "server": {"data_dir": str(folder)},
                    "upstream": {"base_url": model.base_url},
                    "auth": {"admin_key": admin},
                    "memory": {"extraction_batch_size": 3, "search_budget_ms": 1000},
                }
            )
            service = stack.enter_context(ServiceThread(create_app(config)))
            return _converse(service.url, folder, say, captured, admin)
    finally:
        policy_log.removeHandler(captured)


def _converse(
    url: str, folder: Path, say: Callable[[str], None], captured: _Captured, admin: str
) -> dict[str, Any]:
    say(f"service: {url}  (data: {folder})")
    result: dict[str, Any] = {}
    with httpx.Client(base_url=url, timeout=60) as http:
        say("\nSession A (alice):")
        for text in SESSION_A:
            answer, _ = _chat(http, "alice", "session-A", text)
            say(f"  alice: {text}\n  model: {answer}")
        result["extraction_drained"] = _wait_for_extraction(http, captured, admin)
        result["extraction_log"] = list(captured.lines)
        for line in captured.lines:
            say(f"  [log] {line}")
        say("\nSession B (alice, a new session: nothing carried over but memory):")
        result["recall"] = []
        for text in SESSION_B:
            began = time.perf_counter()
            answer, headers = _chat(http, "alice", "session-B", text)
            took = (time.perf_counter() - began) * 1000
            result["recall"].append((text, answer, headers.get("x-chatmem-memory")))
            say(f"  alice: {text}\n  model: {answer}")
            outcome, count = headers.get("x-chatmem-memory"), headers.get("x-chatmem-memory-count")
            say(f"         [memory: {outcome}, {count} injected, {took:.0f} ms round trip]")
        answer, headers = _chat(http, "bob", "session-X", BOB)
        result["bob"] = (answer, headers.get("x-chatmem-memory"))
        say(f"\nbob (another user) asks the same:\n  model: {answer}")
    return result


def _chat(http: httpx.Client, user: str, session: str, text: str) -> tuple[str, httpx.Headers]:
    response = http.post(
        "/v1/chat/completions",
        json={
            "model": "scripted-model",
            "messages": [{"role": "user", "content": text}],
            "memory_context": {"user_id": user, "session_id": session},
        },
    )
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"]), response.headers


def _wait_for_extraction(
    http: httpx.Client, captured: _Captured, admin: str, timeout_s: float = 30.0
) -> bool:
    """Until a batch was written and the queue is empty (turns are stored after the answer
    is sent, and extracted by the worker thread after that); False if it never was."""
    deadline = time.monotonic() + timeout_s
    headers = {"Authorization": f"Bearer {admin}"}
    while time.monotonic() < deadline:
        ready = http.get("/readyz", headers=headers).json()
        if captured.lines and ready.get("extraction_queue") == 0:
            return True
        time.sleep(0.05)
    return False


__all__ = ["run_demo", "scripted_model"]
