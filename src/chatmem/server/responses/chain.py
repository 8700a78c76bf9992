"""One request read as a link of a chain: the response it continues (``previous_response_id``,
the tenant's and the user's own only), whose memory and which session it uses, what memory
did for it, and the finished response kept for the next link."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from chatmem.errors import ChatmemError
from chatmem.messages import Message
from chatmem.records import new_id
from chatmem.server.auth import Reader
from chatmem.server.deps import header_text
from chatmem.server.errors import ApiError
from chatmem.server.injection import (
    SESSION_HEADER,
    USER_HEADER,
    Prepared,
    check_memory_ids,
    prepare,
)
from chatmem.server.response_store import ResponseStore, StoredResponse
from chatmem.server.responses.answer import Answer, ItemIds, response_object
from chatmem.server.responses.request import ResponseRequest
from chatmem.server.runtime import Runtime
from chatmem.server.translate import assistant_message
from chatmem.server.turns import new_turn
from chatmem.server.visibility import join, may_see

logger = logging.getLogger("chatmem.server.responses")


async def visible_response(
    store: ResponseStore, reader: Reader, response_id: str
) -> StoredResponse | None:
    """The reader's tenant's response ``response_id``; None when there is none, or when it
    was built on memories the reader may not read (as for an id that does not exist)."""
    found = await asyncio.to_thread(store.get, reader.tenant_id, response_id)
    return found if found is not None and may_see(reader.roles, found.acl) else None


def store_of(request: Request) -> ResponseStore:
    """The runtime's response store (a table in service.db, or memory when that database is
    unavailable)."""
    store: ResponseStore = request.app.state.runtime.responses
    return store


def memory_identity(
    body: ResponseRequest, request: Request, previous: StoredResponse | None, response_id: str
) -> tuple[str | None, str]:
    """The memory user and session of a request (user None: memory is off for it)."""
    context = body.memory_context
    header_user = header_text(request, USER_HEADER) or None
    if context is not None:
        user_id: str | None = context.user_id
    else:
        user_id = (previous.user_id if previous else None) or body.user or header_user
    session = (context.session_id if context else None) or header_text(request, SESSION_HEADER)
    session_id = session or (previous.session_id if previous else response_id)
    check_memory_ids(user_id, session_id)
    return user_id, session_id


def named_user(body: ResponseRequest, request: Request) -> str | None:
    """The user a request names, wherever it names one; None when it names none."""
    context_user = body.memory_context.user_id if body.memory_context else None
    return context_user or body.user or header_text(request, USER_HEADER) or None


async def previous_response(
    store: ResponseStore, reader: Reader, response_id: str | None, user_id: str | None
) -> StoredResponse | None:
    """The response a request continues. A chain is bound to its user: a request that names
    another user (or names one for a chain made without) is answered as for an id that does
    not exist, so one user's conversation is never sent upstream for another. A request
    that names no user continues as the chain's user. So is a chain built on memories the
    reader's roles do not open (``chatmem.server.visibility``)."""
    if response_id is None:
        return None
    previous = await visible_response(store, reader, response_id)
    if previous is None or (user_id is not None and previous.user_id != user_id):
        raise ApiError(
            404,
            f"previous_response_id: no response {response_id!r}",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    return previous


@dataclass(frozen=True)
class Exchange:
    """One request, read: whose memory it uses, the conversation it continues, what memory
    did for it, and what its turn adds to the session."""

    body: ResponseRequest
    response_id: str
    tenant_id: str
    user_id: str | None
    session_id: str
    history: list[dict[str, Any]]  # the chain's messages, then the new input
    prepared: Prepared
    turn: list[Message]
    created_at: int = field(default_factory=lambda: int(time.time()))

    def respond(self, answer: Answer, ids: ItemIds | None = None) -> dict[str, Any]:
        """The Response object for ``answer``, as JSON."""
        made = response_object(
            self.response_id,
            self.body,
            answer,
            self.prepared,
            created_at=self.created_at,
            ids=ids,
        )
        return made.model_dump(mode="json")

    def kept(self, made: dict[str, Any], answer: Answer) -> StoredResponse:
        said = [*self.history, assistant_message(answer.text, answer.tool_calls)]
        return StoredResponse(
            self.response_id,
            self.tenant_id,
            self.user_id,
            self.session_id,
            said,
            made,
            self.created_at,
            self.prepared.memory_acl,
        )


async def read_exchange(
    body: ResponseRequest,
    new: list[dict[str, Any]],
    request: Request,
    runtime: Runtime,
    reader: Reader,
) -> Exchange:
    """Continue the chain with the new input messages and retrieve the user's memories (404
    for an unknown ``previous_response_id``)."""
    tenant_id = reader.tenant_id
    previous = await previous_response(
        store_of(request), reader, body.previous_response_id, named_user(body, request)
    )
    response_id = f"resp_{new_id()}"
    user_id, session_id = memory_identity(body, request, previous, response_id)
    history = (previous.messages if previous else []) + new
    instructions = [{"role": "system", "content": body.instructions}] if body.instructions else []
    project_id = body.memory_context.project_id if body.memory_context else None
    prepared = await prepare(
        runtime,
        reader,
        user_id,
        session_id,
        instructions + history,
        body.memory_config,
        project_id,
    )
    # The answer is built on the chain too: it is as restricted as the chain's memories.
    prepared.memory_acl = join(prepared.memory_acl, previous.acl if previous else [])
    turn = new_turn(new, project_id) if prepared.store else []
    return Exchange(body, response_id, tenant_id, user_id, session_id, history, prepared, turn)


async def keep(
    store: ResponseStore, exchange: Exchange, made: dict[str, Any], answer: Answer
) -> None:
    """Keep a finished response for the chain's next link (unless ``store`` is false)."""
    if not exchange.body.store:
        return
    try:
        await asyncio.to_thread(store.put, exchange.kept(made, answer))
    except ChatmemError as exc:  # boundary: the answer is made; a lost link is logged (F4)
        logger.error("response %s could not be stored: %s", exchange.response_id, exc)


__all__ = [
    "Exchange",
    "keep",
    "memory_identity",
    "named_user",
    "previous_response",
    "read_exchange",
    "store_of",
    "visible_response",
]
