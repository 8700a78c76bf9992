"""The upstream model, as the proxy reaches it: one pooled client per app, the headers and
URL of a forwarded request, its answer passed through as it came (or a 502/504 when it
cannot be reached), and the reading of a chat-completions stream's lines.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import Request
from fastapi.responses import Response

from chatmem.server.errors import ApiError, error_response
from chatmem.server.runtime import Runtime

logger = logging.getLogger("chatmem.server.chat")

#: Request headers passed on to the upstream (the rest are chatmem's or hop-by-hop).
_FORWARDED = ("openai-organization", "openai-project", "openai-beta")


@asynccontextmanager
async def upstream_client(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    """One pooled client per app for the upstream model."""
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    timeout = httpx.Timeout(runtime.config.upstream.timeout_s, connect=10.0)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        yield client


def upstream_headers(runtime: Runtime, request: Request) -> dict[str, str]:
    config = runtime.config.upstream
    headers = {name: request.headers[name] for name in _FORWARDED if name in request.headers}
    key = os.environ.get(config.api_key_env) if config.api_key_env else None
    if key:
        headers["Authorization"] = f"Bearer {key}"
    elif config.pass_authorization and "authorization" in request.headers:
        headers["Authorization"] = request.headers["authorization"]
    return headers


def upstream_url(runtime: Runtime, path: str) -> str:
    base = runtime.config.upstream.base_url
    if base is None:
        raise ApiError(
            503,
            "no upstream model is configured: start chatmem serve with --upstream URL (or "
            "--scripted-upstream, a stand-in that needs no model), or set upstream.base_url",
            code="no_upstream",
            retry=False,
        )
    return f"{base}{path}"


def passthrough(response: httpx.Response, extra: Mapping[str, str]) -> Response:
    """The upstream's answer as it came: status, body and content type."""
    media = response.headers.get("content-type", "application/json")
    return Response(
        response.content, status_code=response.status_code, media_type=media, headers=dict(extra)
    )


def unreachable(exc: httpx.HTTPError, extra: Mapping[str, str]) -> Response:
    status = 504 if isinstance(exc, httpx.TimeoutException) else 502
    logger.warning("upstream %s: %s", "timed out" if status == 504 else "unreachable", exc)
    response = error_response(
        status,
        f"upstream model unreachable: {type(exc).__name__}: {exc}",
        code="upstream_unreachable",
    )
    response.headers.update(extra)
    return response


async def forward(
    request: Request, runtime: Runtime, method: str, path: str, body: Any = None
) -> Response:
    """The upstream's answer to the same request, as it came."""
    url = upstream_url(runtime, path)
    client: httpx.AsyncClient = request.app.state.upstream
    headers = upstream_headers(runtime, request)
    try:
        answer = await client.request(method, url, json=body, headers=headers)
    except httpx.HTTPError as exc:
        return unreachable(exc, {})
    return passthrough(answer, {})


def collect_line(
    line: str, pieces: list[str], calls: dict[int, dict[str, Any]] | None = None
) -> bool:
    """Gather a streamed answer's text (and, given ``calls``, its tool calls by index, their
    arguments joined from the pieces); True at ``[DONE]``."""
    if not line.startswith("data:"):
        return False
    data = line[5:].strip()
    if data == "[DONE]":
        return True
    try:
        chunk = json.loads(data)
    except ValueError:
        return False
    for choice in chunk.get("choices") or []:
        if isinstance(choice, Mapping) and choice.get("index", 0) == 0:
            delta = choice.get("delta") or {}
            if isinstance(delta, Mapping) and isinstance(delta.get("content"), str):
                pieces.append(delta["content"])
            if calls is not None and isinstance(delta, Mapping):
                _collect_calls(delta.get("tool_calls"), calls)
    return False


def _collect_calls(deltas: Any, calls: dict[int, dict[str, Any]]) -> None:
    for piece in deltas if isinstance(deltas, list) else []:
        if not isinstance(piece, Mapping) or not isinstance(piece.get("index"), int):
            continue
        call = calls.setdefault(
            piece["index"],
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        for field_name in ("id", "type"):
            if isinstance(piece.get(field_name), str):
                call[field_name] = piece[field_name]
        function = piece.get("function")
        if isinstance(function, Mapping):
            if isinstance(function.get("name"), str):
                call["function"]["name"] += function["name"]
            if isinstance(function.get("arguments"), str):
                call["function"]["arguments"] += function["arguments"]


__all__ = [
    "collect_line",
    "forward",
    "passthrough",
    "unreachable",
    "upstream_client",
    "upstream_headers",
    "upstream_url",
]
