"""Who is looking at the inspector: a login by API key, kept as a server-side session.

A browser cannot send a bearer header when it follows a link, so the inspector takes the
key once in a form and answers with a cookie holding a random session token (HttpOnly,
SameSite=Strict, path ``/ui``). The key never travels in a URL and never sits in the
cookie: the token maps, in this process's memory, to the key, which is authenticated again
on every request (``KeyStore.authenticate``), so a revoked key logs its sessions out at
once. The rules are the API's: the admin key chooses the tenant, a tenant key sees its own
tenant only, and the anonymous tenant (when keys are not required) needs no login.

Every POST carries the session's CSRF token (a hidden field, compared in constant time)
besides the SameSite cookie, and a cross-origin ``Origin`` is refused.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Annotated
from urllib.parse import parse_qsl, urlsplit

from fastapi import Depends, Request

from chatmem.server.auth import Principal, Reader
from chatmem.server.runtime import Runtime

COOKIE = "chatmem_ui"
LOGIN_COOKIE = "chatmem_ui_login"
COOKIE_PATH = "/ui"
#: A session unused for this long is forgotten.
IDLE_S = 8 * 3600
#: Most sessions kept at once (the least recently used go first).
MAX_SESSIONS = 10_000
#: Largest form body the inspector reads, in bytes.
MAX_FORM_BYTES = 1024 * 1024


@dataclass(frozen=True)
class LoginSession:
    """One browser's login: the key (None for the anonymous tenant), the tenant it looks
    at (the admin chooses; None until it has), and its CSRF token."""

    key: str | None
    tenant_id: str | None
    csrf: str
    seen: float


@dataclass(frozen=True)
class Viewer:
    """The caller of one inspector request."""

    principal: Principal
    tenant_id: str | None
    csrf: str
    token: str

    @property
    def is_admin(self) -> bool:
        return self.principal.is_admin

    @property
    def reader(self) -> Reader:
        """Whose memories this viewer reads; the admin must have chosen a tenant."""
        if self.tenant_id is None:
            raise TenantNeeded()
        return Reader(self.tenant_id, self.principal.reader_roles)


class LoginNeeded(Exception):
    """No valid session: the browser is sent to the login form."""


class TenantNeeded(Exception):
    """The admin has not chosen a tenant yet: the browser is sent to choose one."""


class Forbidden(Exception):
    """A POST without the session's CSRF token, or from another origin."""


class LoginSessions:
    """Session tokens to logins, in memory, bounded in number and idle time."""

    def __init__(self, *, idle_s: float = IDLE_S, limit: int = MAX_SESSIONS) -> None:
        self._sessions: OrderedDict[str, LoginSession] = OrderedDict()
        self._lock = threading.Lock()
        self.idle_s = idle_s
        self.limit = limit

    def open(self, key: str | None, tenant_id: str | None) -> str:
        token = secrets.token_urlsafe(32)
        session = LoginSession(key, tenant_id, secrets.token_urlsafe(32), time.monotonic())
        with self._lock:
            self._sessions[token] = session
            while len(self._sessions) > self.limit:
                self._sessions.popitem(last=False)
        return token

    def get(self, token: str) -> LoginSession | None:
        now = time.monotonic()
        with self._lock:
            session = self._sessions.get(token)
            if session is None:
                return None
            if now - session.seen > self.idle_s:
                del self._sessions[token]
                return None
            self._sessions[token] = replace(session, seen=now)
            self._sessions.move_to_end(token)
            return session

    def choose_tenant(self, token: str, tenant_id: str) -> None:
        with self._lock:
            session = self._sessions.get(token)
            if session is not None:
                self._sessions[token] = replace(session, tenant_id=tenant_id)

    def close(self, token: str) -> None:
        with self._lock:
            self._sessions.pop(token, None)


def sessions_of(request: Request) -> LoginSessions:
    sessions: LoginSessions = request.app.state.ui_sessions
    return sessions


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def principal_for(runtime: Runtime, key: str | None) -> Principal | None:
    """The principal of a stored login now: the key's (None once revoked), or the
    anonymous tenant's while the service allows one."""
    if key is not None:
        return runtime.keys.authenticate(key)
    anonymous = runtime.config.auth.anonymous_tenant
    return Principal(anonymous) if anonymous is not None else None


def viewer_of(request: Request) -> Viewer:
    """The caller, from the session cookie; a browser with none is logged in as the
    anonymous tenant when the service has one, else sent to the login form."""
    runtime, sessions = runtime_of(request), sessions_of(request)
    token = request.cookies.get(COOKIE)
    session = sessions.get(token) if token else None
    if session is None or token is None:
        anonymous = runtime.config.auth.anonymous_tenant
        if anonymous is None:
            raise LoginNeeded()
        token = sessions.open(None, anonymous)
        request.state.ui_new_token = token  # set as a cookie on the way out
        session = sessions.get(token)
        assert session is not None
    principal = principal_for(runtime, session.key)
    if principal is None:
        sessions.close(token)
        raise LoginNeeded()
    tenant = principal.tenant_id if principal.tenant_id is not None else session.tenant_id
    return Viewer(principal, tenant, session.csrf, token)


ViewerDep = Annotated[Viewer, Depends(viewer_of)]


async def form_of(request: Request) -> dict[str, str]:
    """A url-encoded form body as field -> value (the last one of a repeated field)."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise Forbidden("the form is too large")
    text = body.decode("utf-8", "replace")
    return dict(parse_qsl(text, keep_blank_values=True, max_num_fields=1000))


def same_origin(request: Request) -> bool:
    """No ``Origin`` header (a same-origin form in some browsers), or this host's."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


async def posted_form(request: Request, viewer: ViewerDep) -> dict[str, str]:
    """The form of a POST whose CSRF token is the session's; Forbidden otherwise."""
    form = await form_of(request)
    sent = form.get("csrf", "")
    if not same_origin(request) or not hmac.compare_digest(sent, viewer.csrf):
        raise Forbidden("the form's CSRF token is missing or stale; reload the page")
    return form


FormDep = Annotated[dict[str, str], Depends(posted_form)]


def secure(request: Request) -> bool:
    return request.url.scheme == "https"


__all__ = [
    "COOKIE",
    "COOKIE_PATH",
    "FormDep",
    "Forbidden",
    "LOGIN_COOKIE",
    "LoginNeeded",
    "LoginSessions",
    "TenantNeeded",
    "Viewer",
    "ViewerDep",
    "form_of",
    "principal_for",
    "viewer_of",
]
