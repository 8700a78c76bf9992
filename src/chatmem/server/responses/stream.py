"""A streamed response: the upstream's chat-completions stream read as it comes and relayed
as Responses events; the response is kept and the turn stored only once the upstream has
finished."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import httpx
from fastapi.responses import Response, StreamingResponse

from chatmem.server.response_store import ResponseStore
from chatmem.server.responses.answer import Answer, usage_of
from chatmem.server.responses.chain import Exchange, keep
from chatmem.server.responses.events import Events
from chatmem.server.responses.objects import Usage
from chatmem.server.runtime import Runtime
from chatmem.server.turns import store_turn
from chatmem.server.upstream import collect_line, passthrough, unreachable

logger = logging.getLogger("chatmem.server.responses")


async def stream_response(
    client: httpx.AsyncClient,
    upstream_request: httpx.Request,
    runtime: Runtime,
    store: ResponseStore,
    exchange: Exchange,
) -> Response:
    """Open the upstream's stream; its error status or a failure to reach it is answered as
    the non-streaming path answers it, before any event is sent."""
    extra = exchange.prepared.headers()
    try:
        upstream = await client.send(upstream_request, stream=True)
        if upstream.status_code != 200:
            try:
                await upstream.aread()
            finally:
                await upstream.aclose()
            return passthrough(upstream, extra)
    except httpx.HTTPError as exc:
        return unreachable(exc, extra)
    events = _relay(upstream, runtime, store, exchange)
    return StreamingResponse(
        events, media_type="text/event-stream", headers={**extra, "Cache-Control": "no-cache"}
    )


class _Said(NamedTuple):
    """What one line of the upstream's stream added: text, the tool calls it started (their
    indexes), and pieces of their arguments."""

    text: str
    started: list[int]
    arguments: list[tuple[int, str]]


@dataclass
class _Streamed:
    """What the upstream's chat-completions stream has said so far."""

    pieces: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)  # by the upstream's index
    done: bool = False  # [DONE] came
    finish_reason: str | None = None
    model: str | None = None
    usage: Usage | None = None
    error: str | None = None  # why the stream failed, when it did

    def read(self, line: str) -> _Said:
        """Fold one line of the stream in; what it adds."""
        before = len(self.pieces)
        known = {i: len(call["function"]["arguments"]) for i, call in self.calls.items()}
        self.done = collect_line(line, self.pieces, self.calls) or self.done
        chunk = _chunk(line)
        if chunk is not None:
            self._note(chunk)
        arguments = [
            (index, call["function"]["arguments"][known.get(index, 0) :])
            for index, call in sorted(self.calls.items())
        ]
        return _Said(
            "".join(self.pieces[before:]),
            [index for index in sorted(self.calls) if index not in known],
            [(index, piece) for index, piece in arguments if piece],
        )

    def _note(self, chunk: Mapping[str, Any]) -> None:
        error = chunk.get("error")
        if error:  # some servers report a failure inside the stream
            message = error.get("message") if isinstance(error, Mapping) else error
            self.error = f"the upstream failed mid-stream: {message}"
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        self.usage = usage_of(chunk.get("usage")) or self.usage
        for choice in chunk.get("choices") or []:
            if isinstance(choice, Mapping) and choice.get("index", 0) == 0:
                reason = choice.get("finish_reason")
                self.finish_reason = reason if isinstance(reason, str) else self.finish_reason

    @property
    def finished(self) -> bool:
        """Whether the upstream finished its answer (a stream ended cleanly after the finish
        reason counts, for servers that send no [DONE])."""
        return self.error is None and (self.done or self.finish_reason is not None)

    def answer(self) -> Answer:
        return Answer(
            text="".join(self.pieces),
            finish_reason=self.finish_reason,
            model=self.model,
            usage=self.usage,
            tool_calls=[self.calls[index] for index in sorted(self.calls)],
        )


def _chunk(line: str) -> Mapping[str, Any] | None:
    if not line.startswith("data:"):
        return None
    try:
        chunk = json.loads(line[5:])
    except ValueError:
        return None
    return chunk if isinstance(chunk, Mapping) else None


async def _relay(
    upstream: httpx.Response, runtime: Runtime, store: ResponseStore, exchange: Exchange
) -> AsyncIterator[bytes]:
    """The upstream's chat-completions stream as Responses events; the response is kept and
    the turn stored only when the upstream finished (a client that leaves first stops this
    generator at a yield, so nothing is kept)."""
    events = Events(exchange)
    streamed = _Streamed()
    try:
        yield events.opening()
        async for line in upstream.aiter_lines():
            said = streamed.read(line)
            if said.text:
                yield events.delta(said.text)
            for index in said.started:
                yield events.call_added(index, streamed.calls[index])
            for index, piece in said.arguments:
                yield events.arguments_delta(index, piece)
            if streamed.done or streamed.error:
                break
    except httpx.HTTPError as exc:
        logger.warning("upstream stream broke off: %s", exc)
        streamed.error = f"the upstream's stream broke off: {type(exc).__name__}: {exc}"
    finally:
        await upstream.aclose()
    if not streamed.finished:
        logger.warning("response %s failed: %s", exchange.response_id, streamed.error)
        yield events.failed(streamed.error or "the upstream's stream ended before its answer")
        return
    answer = streamed.answer()
    made = events.arrange(exchange.respond(answer, events.ids(len(answer.tool_calls))))
    # Both before the last events: a client may hang up on them, or chain from this one at once.
    await store_turn(
        runtime, exchange.prepared, exchange.turn, answer.text, answer.tool_calls or None
    )
    await keep(store, exchange, made, answer)
    yield events.closing(made)


__all__ = ["stream_response"]
