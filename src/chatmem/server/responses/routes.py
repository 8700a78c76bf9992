"""The routes: ``POST /v1/responses``, ``GET`` and ``DELETE /v1/responses/{id}``."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Body, Path, Request
from fastapi.responses import JSONResponse, Response

from chatmem.server.deps import ReaderDep, RuntimeDep
from chatmem.server.errors import ApiError, error_response
from chatmem.server.responses.answer import read_completion
from chatmem.server.responses.chain import keep, read_exchange, store_of, visible_response
from chatmem.server.responses.objects import DeletedResponse, ResponseObject
from chatmem.server.responses.request import (
    ResponseRequest,
    chat_payload,
    check_request,
    input_messages,
)
from chatmem.server.responses.stream import stream_response
from chatmem.server.turns import store_turn
from chatmem.server.upstream import passthrough, unreachable, upstream_headers, upstream_url

ResponseId = Annotated[str, Path(min_length=1, max_length=256)]

router = APIRouter(tags=["responses"])


@router.post(
    "/v1/responses",
    response_model=ResponseObject,
    responses={
        200: {
            "description": "The Response object; with stream true, server-sent events in "
            "OpenAI's Responses streaming shape, ending with response.completed (or "
            "response.incomplete, or response.failed when the upstream breaks off).",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        400: {
            "description": "A field that is invalid, or that cannot pass to a "
            "chat-completions upstream (code unsupported_parameter): tools other than "
            "functions, input other than text, background true."
        },
        404: {"description": "previous_response_id names no response of this tenant."},
        502: {"description": "The upstream could not be reached."},
    },
)
async def create_response(
    body: Annotated[ResponseRequest, Body()],
    request: Request,
    runtime: RuntimeDep,
    reader: ReaderDep,
) -> Response:
    """A model response with the user's memories injected, chained by
    ``previous_response_id``, streamed when ``stream`` is true, calling the request's
    function tools when the model does; the turn is stored in memory afterwards."""
    new = input_messages(body.input)  # checked before any memory work
    check_request(body)
    chat_payload(body, new)  # tools, tool_choice and text.format, checked before it too
    url = upstream_url(runtime, "/chat/completions")
    exchange = await read_exchange(body, new, request, runtime, reader)
    client: httpx.AsyncClient = request.app.state.upstream
    payload = chat_payload(body, exchange.prepared.messages)
    headers = upstream_headers(runtime, request)
    if body.stream:
        payload.update(stream=True, stream_options={"include_usage": True})
        upstream = client.build_request("POST", url, json=payload, headers=headers)
        return await stream_response(client, upstream, runtime, store_of(request), exchange)
    try:
        reply = await client.post(url, json=payload, headers=headers)
    except httpx.HTTPError as exc:
        return unreachable(exc, exchange.prepared.headers())
    if reply.status_code != 200:
        return passthrough(reply, exchange.prepared.headers())
    try:
        answer = read_completion(reply.json())
    except ValueError:
        answer = None
    if answer is None:
        failed = error_response(
            502, "the upstream's answer is not a chat completion", code="upstream_invalid"
        )
        failed.headers.update(exchange.prepared.headers())
        return failed
    made = exchange.respond(answer)
    await keep(store_of(request), exchange, made, answer)
    await store_turn(
        runtime, exchange.prepared, exchange.turn, answer.text, answer.tool_calls or None
    )
    return JSONResponse(made, headers=exchange.prepared.headers())


@router.get("/v1/responses/{response_id}", response_model=ResponseObject)
async def get_response(response_id: ResponseId, request: Request, reader: ReaderDep) -> Any:
    """A stored response of this tenant, as it was returned (404 when it was built on
    memories restricted to roles the key lacks, as for an id that does not exist)."""
    found = await visible_response(store_of(request), reader, response_id)
    if found is None:
        raise ApiError(404, f"no response {response_id!r}", code="not_found")
    return JSONResponse(found.body)


@router.delete("/v1/responses/{response_id}")
async def delete_response(
    response_id: ResponseId, request: Request, reader: ReaderDep
) -> DeletedResponse:
    """Forget a stored response (a chain can no longer continue from it)."""
    store = store_of(request)
    found = await visible_response(store, reader, response_id)
    if found is None or not await asyncio.to_thread(store.delete, reader.tenant_id, response_id):
        raise ApiError(404, f"no response {response_id!r}", code="not_found")
    return DeletedResponse(id=response_id)


__all__ = ["create_response", "delete_response", "get_response", "router"]
