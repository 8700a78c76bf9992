"""Templates and the small helpers every page uses.

Autoescaping is on for every template and every string rendered (memory text and message
content are user input, SPEC issue 11.9): nothing in the inspector marks stored text safe.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse

from chatmem.server.ui.login import COOKIE, COOKIE_PATH, Viewer, secure

#: Headers of every inspector page: scripts and styles from this origin only (htmx
#: evaluates nothing: see base.html's htmx-config), never framed, never cached.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

#: What a redirect after a change says (fixed texts: a URL never puts words on the page).
NOTICES = {
    "edited": "Saved as a new version; the old one is in the history below.",
    "pinned": "Saved: pinning is a new version too.",
    "access": "Access changed (a new version).",
    "forgotten": "The memory was forgotten.",
    "user-forgotten": "The user was forgotten: memories, sessions and queued extraction.",
    "retried": "The batch is queued again.",
}

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"


def path(*segments: object, **query: object) -> str:
    """``/ui/<segments>`` with each segment quoted whole (a user id is one segment), and
    the query's non-empty values."""
    url = "/ui/" + "/".join(quote(str(s), safe="") for s in segments)
    shown = {k: v for k, v in query.items() if v not in (None, "")}
    return f"{url}?{urlencode(shown)}" if shown else url


def when(value: datetime | int | None) -> str:
    """A time as ``2026-05-03 14:02:11 UTC`` (an int is milliseconds since the epoch)."""
    if value is None:
        return "—"
    moment = datetime.fromtimestamp(value / 1000, tz=UTC) if isinstance(value, int) else value
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def pretty(value: Any) -> str:
    """JSON for a <pre> block (escaped by the template like any text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def number(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,  # every template, whatever its name (never select_autoescape)
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["path"] = path
    env.filters["when"] = when
    env.filters["pretty"] = pretty
    env.filters["number"] = number
    return env


def page(
    request: Request,
    name: str,
    viewer: Viewer | None,
    status: int = 200,
    **context: Any,
) -> HTMLResponse:
    """Template ``name`` rendered for ``viewer``; an htmx request for a page that has a
    fragment (``fragment`` in the context) gets the fragment alone."""
    template = environment().get_template(name)
    fragment = context.pop("fragment", None)
    if fragment is not None and request.headers.get("hx-request") == "true":
        template = environment().get_template(fragment)
    notice = NOTICES.get(request.query_params.get("notice", ""))
    html = template.render(viewer=viewer, request_path=request.url.path, notice=notice, **context)
    response = HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)
    set_new_session(request, response)
    return response


def set_new_session(request: Request, response: HTMLResponse) -> None:
    """The cookie of a session opened during this request (the anonymous tenant's)."""
    token = getattr(request.state, "ui_new_token", None)
    if token is not None:
        set_session_cookie(request, response, token)


def set_session_cookie(request: Request, response: HTMLResponse, token: str) -> None:
    response.set_cookie(
        COOKIE,
        token,
        httponly=True,
        samesite="strict",
        secure=secure(request),
        path=COOKIE_PATH,
    )


__all__ = ["STATIC", "environment", "page", "path", "set_session_cookie", "when"]
