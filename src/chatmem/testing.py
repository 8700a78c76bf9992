"""Stand-ins for remote services that cannot run offline, shipped for tests (yours and ours).

``ScriptedOpenAIServer`` is a real HTTP server on loopback speaking the OpenAI wire format:
``POST /v1/embeddings`` answers with deterministic vectors, or with scripted failures.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from chatmem.records import Vector


def hashed_vector(text: str, dimension: int) -> Vector:
    """A unit vector derived from ``text`` alone: equal texts, equal vectors."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(dimension).astype(np.float32)
    result: Vector = vector / np.linalg.norm(vector)
    return result


class ScriptedOpenAIServer:
    """An OpenAI-compatible server on 127.0.0.1 with a scripted behaviour.

    ``fail_next(status, body)`` makes the next request fail that way; ``requests`` records
    every JSON body received. Use as a context manager; ``base_url`` ends in ``/v1``.
    """

    def __init__(self, *, dimension: int = 8, embed: Callable[[str], Vector] | None = None) -> None:
        self.dimension = dimension
        self._embed = embed or (lambda text: hashed_vector(text, dimension))
        self.requests: list[dict[str, Any]] = []
        self._failures: deque[tuple[int, Any]] = deque()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def fail_next(self, status: int, body: Any = None) -> None:
        """The next request gets ``status`` and ``body`` (JSON) instead of an answer."""
        self._failures.append((status, body if body is not None else {"error": "scripted"}))

    def __enter__(self) -> ScriptedOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _answer(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        self.requests.append(body)
        if self._failures:
            return self._failures.popleft()
        if path.rstrip("/") == "/v1/embeddings":
            texts = body.get("input")
            texts = [texts] if isinstance(texts, str) else texts
            if not isinstance(texts, list):
                return 400, {"error": {"message": "input must be a string or a list"}}
            data = [
                {"object": "embedding", "index": i, "embedding": self._embed(t).tolist()}
                for i, t in enumerate(texts)
            ]
            return 200, {"object": "list", "data": data, "model": body.get("model")}
        return 404, {"error": {"message": f"no route {path}"}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    status, answer = 400, {"error": {"message": "body is not JSON"}}
                else:
                    status, answer = server._answer(self.path, body)
                payload = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: tests read ``requests`` instead of logs."""

        return Handler
