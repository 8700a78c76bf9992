"""Stand-ins for remote services that cannot run offline, shipped for tests (yours and ours).

``ScriptedOpenAIServer`` is a real HTTP server on loopback speaking the OpenAI wire format:

- ``POST /v1/embeddings`` answers with deterministic vectors;
- ``POST /v1/chat/completions`` answers from a script (a queue of replies, then a responder
  callable), plainly or as server-sent events when the request says ``"stream": true``;
- ``GET /v1/models`` lists the configured model name;

and any request can be made to fail (``fail_next``) or to answer late (``delay_next``).
``ScriptedChatModel`` is the in-process equivalent for unit tests that need no HTTP at all.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

import numpy as np

from chatmem.errors import LLMUnavailableError
from chatmem.records import Vector

#: Writes a reply from a chat request's JSON body (``model``, ``messages``, …).


@dataclass(frozen=True)
class ToolCalls:
    """A scripted assistant turn that calls tools instead of answering: ``calls`` are
    (function name, arguments as JSON text) pairs. The calls' ids are ``call_0``,
    ``call_1`` … in order."""

    calls: tuple[tuple[str, str], ...]

    def as_openai(self) -> list[dict[str, Any]]:
        return [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(self.calls)
        ]


#: A scripted chat reply of ``ScriptedOpenAIServer``: a text, or tool calls.
Reply = str | ToolCalls
Responder = Callable[[dict[str, Any]], str]

_CHAT_PATH = "/v1/chat/completions"


def hashed_vector(text: str, dimension: int) -> Vector:
    """A unit vector derived from ``text`` alone: equal texts, equal vectors."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(dimension).astype(np.float32)
    result: Vector = vector / np.linalg.norm(vector)
    return result


class _Reply(NamedTuple):
    """What the handler sends: a JSON body, or server-sent events when ``events`` is set."""

    status: int
    body: Any = None
    events: list[Any] | None = None
    headers: dict[str, str] | None = None


class ScriptedOpenAIServer:
    """An OpenAI-compatible server on 127.0.0.1 with a scripted behaviour.

    Chat replies come from ``script_chat(*texts)`` in order, then from ``responder``; with
    neither, a chat request gets HTTP 500. ``response_format=False`` makes it refuse
    ``response_format`` with a 400, as some servers do. ``fail_next(status, body)`` and
    ``delay_next(seconds)`` script the next request of any route. ``requests`` records every
    JSON body received, ``chat_requests`` those of chat completions, ``request_headers`` the
    headers of every request (lowercased names); ``record=False`` keeps none of them, for a
    long run (a soak) where they would grow without end. ``keep_alive=True`` speaks HTTP/1.1
    and keeps a connection open between requests, as a hosted model's API does (a stream
    still ends with its connection); by default each request has a connection of its own
    (HTTP/1.0). ``connections`` counts the connections accepted. Use as a context manager;
    ``base_url`` ends in ``/v1``.
    """

    def __init__(
        self,
        *,
        dimension: int = 8,
        embed: Callable[[str], Vector] | None = None,
        model: str = "scripted-model",
        responder: Responder | None = None,
        response_format: bool = True,
        record: bool = True,
        keep_alive: bool = False,
    ) -> None:
        self.dimension = dimension
        self.keep_alive = keep_alive
        self.connections = 0
        self.record = record
        self.model = model
        self.responder = responder
        self.response_format = response_format
        self._embed = embed or (lambda text: hashed_vector(text, dimension))
        self.requests: list[dict[str, Any]] = []
        self.chat_requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        self._failures: deque[_Reply] = deque()
        self._delays: deque[float] = deque()
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        # Set on exit, so a delayed answer stops waiting instead of outliving the server.
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        # A short poll interval: leaving the block waits for the loop to notice the shutdown.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def fail_next(
        self, status: int, body: Any = None, *, headers: dict[str, str] | None = None
    ) -> None:
        """The next request gets ``status``, ``body`` (JSON) and ``headers`` instead of an
        answer."""
        answer = body if body is not None else {"error": "scripted"}
        with self._lock:
            self._failures.append(_Reply(status, answer, headers=headers))

    def delay_next(self, seconds: float) -> None:
        """The next request is answered ``seconds`` late (a slow upstream, for timeouts)."""
        with self._lock:
            self._delays.append(seconds)

    def script_chat(self, *texts: Reply) -> None:
        """Queue chat replies (texts, or ``ToolCalls``); each chat request takes the next."""
        with self._lock:
            self._replies.extend(texts)

    def __enter__(self) -> ScriptedOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()

    def _answer(
        self, method: str, path: str, body: dict[str, Any] | None, headers: dict[str, str]
    ) -> _Reply:
        route = path.split("?", 1)[0].rstrip("/")
        with self._lock:
            if self.record:
                self.request_headers.append(headers)
            if self.record and body is not None:
                self.requests.append(body)
                if route == _CHAT_PATH:
                    self.chat_requests.append(body)
            delay = self._delays.popleft() if self._delays else 0.0
            failure = self._failures.popleft() if self._failures else None
        # The answer is chosen on arrival, so a retry sent while this one waits gets the next.
        reply = failure or self._route(method, route, body)
        if delay:
            self._closing.wait(delay)
        return reply

    def _route(self, method: str, route: str, body: dict[str, Any] | None) -> _Reply:
        if method == "GET" and route == "/v1/models":
            return _Reply(200, self._models())
        if method == "POST" and route == "/v1/embeddings" and body is not None:
            return self._embeddings(body)
        if method == "POST" and route == _CHAT_PATH and body is not None:
            return self._chat(body)
        return _Reply(404, {"error": {"message": f"no route {method} {route}"}})

    def _models(self) -> dict[str, Any]:
        entry = {"id": self.model, "object": "model", "created": 0, "owned_by": "chatmem"}
        return {"object": "list", "data": [entry]}

    def _embeddings(self, body: dict[str, Any]) -> _Reply:
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list):
            return _Reply(400, _error("input must be a string or a list", "input"))
        # Token arrays (what some clients send instead of text) are embedded as their JSON.
        texts = [t if isinstance(t, str) else json.dumps(t) for t in texts]
        data = [
            {"object": "embedding", "index": i, "embedding": self._embed(t).tolist()}
            for i, t in enumerate(texts)
        ]
        return _Reply(200, {"object": "list", "data": data, "model": body.get("model")})

    def _chat(self, body: dict[str, Any]) -> _Reply:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _Reply(400, _error("messages must be a non-empty list", "messages"))
        if "response_format" in body and not self.response_format:
            return _Reply(
                400, _error("response_format is not supported by this model", "response_format")
            )
        text = self._next_reply(body)
        if text is None:
            return _Reply(500, _error("no scripted chat reply left and no responder", None))
        model = str(body.get("model") or self.model)
        if isinstance(text, ToolCalls):
            if body.get("stream"):
                return _Reply(200, events=list(_tool_call_chunks(text, model)))
            return _Reply(200, _tool_call_completion(text, model))
        if body.get("stream"):
            return _Reply(200, events=list(_stream_chunks(text, model)))
        return _Reply(200, _completion(text, model, messages))

    def _next_reply(self, body: dict[str, Any]) -> Reply | None:
        with self._lock:
            if self._replies:
                return self._replies.popleft()
        return self.responder(body) if self.responder is not None else None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        keep = self.keep_alive
        return type(
            "Handler",
            (_Handler,),
            {
                "scripted": self,
                "protocol_version": "HTTP/1.1" if keep else "HTTP/1.0",
                # Headers and body go out in separate writes: on a kept connection, Nagle's
                # algorithm held the body for the client's delayed ACK (about 40 ms an answer).
                "disable_nagle_algorithm": keep,
            },
        )


class _Handler(BaseHTTPRequestHandler):
    """The scripted server's requests (``ScriptedOpenAIServer._handler`` sets ``scripted``)."""

    scripted: ScriptedOpenAIServer

    def setup(self) -> None:
        super().setup()
        with self.scripted._lock:
            self.scripted.connections += 1

    def do_GET(self) -> None:
        self._send(self.scripted._answer("GET", self.path, None, self._headers()))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            reply = _Reply(400, _error("body is not JSON", None))
        else:
            reply = self.scripted._answer("POST", self.path, body, self._headers())
        self._send(reply)

    def _headers(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.headers.items()}

    def _send(self, reply: _Reply) -> None:
        try:
            if reply.events is not None:
                self._send_events(reply.status, reply.events)
            else:
                self._send_json(reply.status, reply.body, reply.headers or {})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up first (a timeout test): nobody left to answer

    def _send_json(self, status: int, answer: Any, headers: dict[str, str]) -> None:
        payload = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _send_events(self, status: int, events: list[Any]) -> None:
        # Without a length: the body ends when the connection closes (in HTTP/1.1 too,
        # which says so in its headers).
        self.send_response(status)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        if self.scripted.keep_alive:  # the header closes it (``close_connection``)
            self.send_header("Connection", "close")
        self.end_headers()
        for event in [*map(json.dumps, events), "[DONE]"]:
            self.wfile.write(f"data: {event}\n\n".encode())
            self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read ``requests`` instead of logs."""


class ChatCall(NamedTuple):
    """One call made to a :class:`ScriptedChatModel`."""

    messages: list[dict[str, Any]]
    json: bool


class ScriptedChatModel:
    """A :class:`~chatmem.llm.ChatModel` in process: replies from a script, no HTTP.

    ``replies`` is either a sequence (each call takes the next; an exception instance in it is
    raised instead, to script failures) or a responder called with a request-shaped dict
    (``model``, ``messages``, and ``response_format`` when JSON was asked), so one responder
    serves this and :class:`ScriptedOpenAIServer` alike. ``calls`` records every call. When
    the script runs out, calls raise ``LLMUnavailableError``.
    """

    def __init__(
        self, replies: Iterable[str | BaseException] | Responder, *, model: str = "scripted-model"
    ) -> None:
        self.model = model
        self.calls: list[ChatCall] = []
        self._responder = replies if callable(replies) else None
        self._replies: deque[str | BaseException] = deque(() if callable(replies) else replies)

    def complete(self, messages: Sequence[dict[str, Any]], *, json: bool = False) -> str:
        """Record the call and return the next scripted reply."""
        self.calls.append(ChatCall([dict(message) for message in messages], json))
        if self._responder is not None:
            return self._responder(_request_body(self.model, messages, json=json))
        if not self._replies:
            raise LLMUnavailableError("ScriptedChatModel has no scripted reply left")
        reply = self._replies.popleft()
        if isinstance(reply, BaseException):
            raise reply
        return reply


def _request_body(model: str, messages: Sequence[dict[str, Any]], *, json: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [dict(m) for m in messages]}
    if json:
        body["response_format"] = {"type": "json_object"}
    return body


def _completion(text: str, model: str, messages: list[Any]) -> dict[str, Any]:
    # Words stand in for tokens: enough for a client that reads usage, no tokenizer needed.
    prompt_tokens = _words(messages)
    completion_tokens = len(text.split())
    return {
        "id": f"chatcmpl-{_short_hash(text)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _stream_chunks(text: str, model: str) -> Iterator[dict[str, Any]]:
    """OpenAI ``chat.completion.chunk`` events: the role, the text word by word, the stop."""
    base = {
        "id": f"chatcmpl-{_short_hash(text)}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": piece} for piece in _pieces(text)]
    for delta in deltas:
        yield {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    yield {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}


def _tool_call_completion(reply: ToolCalls, model: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": None, "tool_calls": reply.as_openai()}
    return {
        "id": f"chatcmpl-{_short_hash(repr(reply.calls))}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
    }


def _tool_call_chunks(reply: ToolCalls, model: str) -> Iterator[dict[str, Any]]:
    """Tool calls streamed as OpenAI does: each call's id and name first, then its arguments
    in two pieces, then ``finish_reason: tool_calls``."""
    base = {
        "id": f"chatcmpl-{_short_hash(repr(reply.calls))}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": None}]
    for index, call in enumerate(reply.as_openai()):
        head = {**call, "function": {"name": call["function"]["name"], "arguments": ""}}
        deltas.append({"tool_calls": [{"index": index, **head}]})
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        for piece in (arguments[:half], arguments[half:]):
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    for delta in deltas:
        yield {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    yield {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}


def _pieces(text: str) -> list[str]:
    """``text`` cut after each space, so the pieces join back to it exactly."""
    pieces = [word + " " for word in text.split(" ")]
    pieces[-1] = pieces[-1][:-1]
    return [piece for piece in pieces if piece]


def _words(messages: list[Any]) -> int:
    return sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict))


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _error(message: str, param: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param}}


__all__ = [
    "ChatCall",
    "Reply",
    "Responder",
    "ScriptedChatModel",
    "ScriptedOpenAIServer",
    "ToolCalls",
    "hashed_vector",
]
