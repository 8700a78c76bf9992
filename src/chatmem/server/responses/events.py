"""The server-sent events of a streamed response, in OpenAI's Responses streaming shape,
numbered in order."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

from chatmem.records import new_id
from chatmem.server.responses.answer import Answer, ItemIds
from chatmem.server.responses.chain import Exchange
from chatmem.server.responses.objects import OutputText
from chatmem.server.translate import function_call_item


class Events:
    """Server-sent events in OpenAI's Responses streaming shape, numbered in order: the
    message item opens at the answer's first text, a function call item at the call's first
    piece, each taking the next output index."""

    def __init__(self, exchange: Exchange) -> None:
        self.message_id = f"msg_{new_id()}"
        self._call_ids: dict[int, str] = {}  # the upstream's call index → item id
        self._opened: list[str] = []  # item ids, in output order
        self._running = running_response(exchange)
        self._numbers = itertools.count()

    def ids(self, calls: int) -> ItemIds:
        """The ids the events gave the output items (the answer's calls in index order)."""
        ordered = [self._call_ids[index] for index in sorted(self._call_ids)]
        return ItemIds(self.message_id, tuple(ordered[:calls]))

    def opening(self) -> bytes:
        return b"".join(
            [
                self._event("response.created", response=self._running),
                self._event("response.in_progress", response=self._running),
            ]
        )

    def delta(self, text: str) -> bytes:
        opened = b"" if self.message_id in self._opened else self._open_message()
        where = self._where(self.message_id)
        delta = self._event("response.output_text.delta", **where, delta=text, logprobs=[])
        return opened + delta

    def call_added(self, index: int, call: Mapping[str, Any]) -> bytes:
        item_id = self._call_ids[index] = f"fc_{new_id()}"
        item = function_call_item(call, item_id, "in_progress") | {"arguments": ""}
        return self._open(item)

    def arguments_delta(self, index: int, piece: str) -> bytes:
        item_id = self._call_ids[index]
        return self._event(
            "response.function_call_arguments.delta",
            item_id=item_id,
            output_index=self._opened.index(item_id),
            delta=piece,
        )

    def arrange(self, made: dict[str, Any]) -> dict[str, Any]:
        """``made`` with its output in the order the events opened the items (an item none
        opened, an empty message, goes last)."""
        rank = {item_id: n for n, item_id in enumerate(self._opened)}
        output = sorted(made["output"], key=lambda item: rank.get(item["id"], len(rank)))
        return {**made, "output": output}

    def closing(self, made: dict[str, Any]) -> bytes:
        """Each item done, then the Response as the non-streaming path makes it
        (``response.incomplete`` when the answer was cut short)."""
        events = []
        for item in made["output"]:
            if item["id"] not in self._opened:  # an empty answer: its message opens now
                events.append(self._open_message())
            events.append(self._done(item))
        last = "response.completed" if made["status"] == "completed" else "response.incomplete"
        events.append(self._event(last, response=made))
        return b"".join(events)

    def failed(self, message: str) -> bytes:
        error = {"code": "server_error", "message": message}
        response = {**self._running, "status": "failed", "error": error}
        return self._event("response.failed", response=response)

    def _open_message(self) -> bytes:
        item = {
            "type": "message",
            "id": self.message_id,
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        part = OutputText(text="").model_dump(mode="json")
        opened = self._open(item)
        where = self._where(self.message_id)
        return opened + self._event("response.content_part.added", **where, part=part)

    def _open(self, item: dict[str, Any]) -> bytes:
        self._opened.append(item["id"])
        index = len(self._opened) - 1
        return self._event("response.output_item.added", output_index=index, item=item)

    def _done(self, item: dict[str, Any]) -> bytes:
        index = self._opened.index(item["id"])
        if item["type"] == "function_call":
            arguments = self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                name=item["name"],
                arguments=item["arguments"],
            )
            done = self._event("response.output_item.done", output_index=index, item=item)
            return arguments + done
        part = item["content"][0]
        where = self._where(item["id"])
        return b"".join(
            [
                self._event("response.output_text.done", **where, text=part["text"], logprobs=[]),
                self._event("response.content_part.done", **where, part=part),
                self._event("response.output_item.done", output_index=index, item=item),
            ]
        )

    def _where(self, item_id: str) -> dict[str, Any]:
        return {"item_id": item_id, "output_index": self._opened.index(item_id), "content_index": 0}

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = json.dumps({"type": kind, "sequence_number": next(self._numbers), **fields})
        return f"event: {kind}\ndata: {data}\n\n".encode()


def running_response(exchange: Exchange) -> dict[str, Any]:
    """The Response while the answer streams: no output yet, no usage."""
    empty = Answer(text="", finish_reason=None, model=None, usage=None)
    made = exchange.respond(empty)
    return {**made, "status": "in_progress", "completed_at": None, "output": []}


__all__ = ["Events", "running_response"]
