"""The inspector's doors: log in with a key, log out, choose a tenant (the admin), and how
a page answers a missing login, a forbidden form or something not found."""

from __future__ import annotations

import hmac
import secrets

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from chatmem.server.auth import check_tenant
from chatmem.server.runtime import Runtime
from chatmem.server.ui import browse, correct, explain, operations
from chatmem.server.ui.browse import Missing
from chatmem.server.ui.login import (
    COOKIE,
    COOKIE_PATH,
    LOGIN_COOKIE,
    Forbidden,
    FormDep,
    LoginNeeded,
    LoginSessions,
    TenantNeeded,
    ViewerDep,
    form_of,
    runtime_of,
    same_origin,
    secure,
    sessions_of,
)
from chatmem.server.ui.render import STATIC, page, path, set_session_cookie

router = APIRouter(prefix="/ui", include_in_schema=False)


def _login_page(request: Request, status: int = 200, error: str | None = None) -> HTMLResponse:
    """The login form, with a fresh token that the POST must repeat (login CSRF)."""
    token = secrets.token_urlsafe(24)
    response = page(request, "login.html", None, status=status, error=error, csrf=token)
    response.set_cookie(
        LOGIN_COOKIE, token, httponly=True, samesite="strict", secure=secure(request),
        path=COOKIE_PATH,
    )  # fmt: skip
    return response


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> HTMLResponse:
    return _login_page(request)


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    """Check the key; open a session whose token is the cookie (the key stays here)."""
    form = await form_of(request)
    expected = request.cookies.get(LOGIN_COOKIE, "")
    if (
        not expected
        or not same_origin(request)
        or not hmac.compare_digest(form.get("csrf", ""), expected)
    ):
        return _login_page(request, 400, "the form expired; enter the key again")
    key = form.get("key", "").strip()
    principal = runtime_of(request).keys.authenticate(key) if key else None
    if principal is None:
        why = "enter an API key" if not key else "unknown or revoked key"
        return _login_page(request, 401, why)
    token = sessions_of(request).open(key, principal.tenant_id)
    target = "/ui/users" if principal.tenant_id is not None else "/ui/tenant"
    response = RedirectResponse(target, status_code=303)
    set_session_cookie(request, response, token)  # type: ignore[arg-type]
    response.delete_cookie(LOGIN_COOKIE, path=COOKIE_PATH)
    return response


@router.post("/logout", response_class=HTMLResponse)
def logout(request: Request, viewer: ViewerDep, form: FormDep) -> Response:
    sessions_of(request).close(viewer.token)
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path=COOKIE_PATH)
    return response


@router.get("/tenant", response_class=HTMLResponse)
def tenant_form(request: Request, viewer: ViewerDep) -> HTMLResponse:
    """The admin chooses the tenant to look at (a tenant key has its own)."""
    known = known_tenants(runtime_of(request))
    return page(request, "tenant.html", viewer, known=known, error=None)


def known_tenants(runtime: Runtime) -> list[str]:
    """The tenants that have keys, and the anonymous tenant."""
    named = {info.tenant_id for info in runtime.keys.keys(tenant_id=None)}
    return sorted(named | {runtime.config.auth.anonymous_tenant or "default"})


@router.post("/tenant", response_class=HTMLResponse)
def choose_tenant(request: Request, viewer: ViewerDep, form: FormDep) -> Response:
    if not viewer.is_admin:
        return page(request, "error.html", viewer, status=403,
                    message="only the admin key chooses the tenant")  # fmt: skip
    tenant = form.get("tenant_id", "").strip()
    try:
        check_tenant(tenant)
    except ValueError as exc:
        known = known_tenants(runtime_of(request))
        return page(request, "tenant.html", viewer, status=400, known=known, error=str(exc))
    sessions_of(request).choose_tenant(viewer.token, tenant)
    return RedirectResponse(path("users"), status_code=303)


def _register_errors(app: FastAPI) -> None:
    @app.exception_handler(LoginNeeded)
    async def login_needed(request: Request, _: LoginNeeded) -> Response:
        if request.method == "GET":
            return RedirectResponse("/ui/login", status_code=303)
        return page(request, "error.html", None, status=401, message="log in first")

    @app.exception_handler(TenantNeeded)
    async def tenant_needed(request: Request, _: TenantNeeded) -> Response:
        return RedirectResponse("/ui/tenant", status_code=303)

    @app.exception_handler(Forbidden)
    async def forbidden(request: Request, exc: Forbidden) -> Response:
        return page(request, "error.html", None, status=403, message=str(exc))

    @app.exception_handler(Missing)
    async def missing(request: Request, exc: Missing) -> Response:
        message = f"{exc.what}: not found (or not visible to this key)"
        return page(request, "error.html", None, status=404, message=message)


def mount(app: FastAPI) -> None:
    """Serve the inspector at ``/ui`` in ``app``: its pages, its static files and its
    error pages. Sessions live in ``app.state.ui_sessions`` (one store per app)."""
    app.state.ui_sessions = LoginSessions()
    app.mount("/ui/static", StaticFiles(directory=str(STATIC)), name="ui-static")
    for module in (browse, explain, correct, operations):
        app.include_router(module.router)
    app.include_router(router)
    _register_errors(app)


__all__ = ["mount"]
