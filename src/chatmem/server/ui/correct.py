"""Correct and forget (issue 13, item 4): edit a memory (a new version, history kept), pin
it, change who may read it, forget it or a whole user, and export a user's memories.

Every form is a plain POST (it works without JavaScript) carrying the session's CSRF token.
A bad field is answered 400 with the page again, the message next to the field, and
nothing changed; a good one redirects to the page it changed (post/redirect/get).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from chatmem.errors import ConflictError, NotFoundError, ValidationError
from chatmem.records import MAX_TEXT_CHARS, MemoryRecord, Scope, utcnow
from chatmem.server.memory_api import JSONL
from chatmem.server.runtime import Runtime
from chatmem.server.ui.browse import Missing, detail_context, long_term, visible
from chatmem.server.ui.login import FormDep, Viewer, ViewerDep, runtime_of
from chatmem.server.ui.render import page, path
from chatmem.stores.base import Change
from chatmem.worker import BatchState

router = APIRouter(prefix="/ui", include_in_schema=False)

MAX_TAGS = 64
MAX_ROLES = 64


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def _unit(text: str) -> float | None:
    """A number in [0, 1], or None when it is not one."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0.0 <= value <= 1.0 else None


def _list(text: str) -> list[str]:
    return list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))


def edit_changes(
    form: Mapping[str, str], record: MemoryRecord
) -> tuple[dict[str, Any], dict[str, str]]:
    """What an edit form changes (``LongTermMemory.update``'s arguments) and its errors."""
    errors: dict[str, str] = {}
    changes: dict[str, Any] = {}
    content = form.get("content", "")
    if not content.strip():
        errors["content"] = "the memory's text cannot be blank"
    elif len(content) > MAX_TEXT_CHARS:
        errors["content"] = f"at most {MAX_TEXT_CHARS} characters"
    elif content != record.content.raw:
        changes["text"] = content
    for name in ("importance", "confidence"):
        value = _unit(form.get(name, ""))
        if value is None:
            errors[name] = "a number from 0 to 1"
        elif value != getattr(record.metadata, name):
            changes[name] = value
    tags = _list(form.get("tags", ""))
    if len(tags) > MAX_TAGS or any(len(t) > 64 for t in tags):
        errors["tags"] = f"at most {MAX_TAGS} tags of at most 64 characters, comma-separated"
    elif tags != record.metadata.tags:
        changes["tags"] = tags
    if len(form.get("reason", "")) > 1000:
        errors["reason"] = "at most 1000 characters"
    if not errors and not changes:
        errors["content"] = "nothing changed: edit the text or a field first"
    return changes, errors


def _again(
    request: Request, viewer: Viewer, user_id: str, memory_id: str, form: Mapping[str, str],
    errors: dict[str, str],
) -> HTMLResponse:  # fmt: skip
    """The memory page again with the form as sent and its errors (400)."""
    context = detail_context(runtime_of(request), viewer.reader, user_id, memory_id)
    return page(request, "memory.html", viewer, status=400, errors=errors, form=form, **context)


@router.post("/users/{user_id}/memories/{memory_id}/edit", response_class=HTMLResponse)
def edit(
    request: Request, viewer: ViewerDep, form: FormDep, user_id: str, memory_id: str
) -> Response:
    """A new version with the form's text and fields; the old one stays in history."""
    reader = viewer.reader
    memory = long_term(runtime_of(request))
    record = visible(memory, reader, user_id, memory_id)
    changes, errors = edit_changes(form, record)
    if not errors:
        try:
            memory.update(
                memory_id,
                changes.pop("text", None),
                tenant_id=reader.tenant_id,
                user_id=user_id,
                reason=form.get("reason") or "edited in the inspector",
                **changes,
            )
        except (ValidationError, ConflictError) as exc:
            field = getattr(exc, "field", None) or "content"
            errors[field if field in _EDIT_FIELDS else "content"] = str(exc)
    if errors:
        return _again(request, viewer, user_id, memory_id, form, errors)
    return _redirect(path("users", user_id, "memories", memory_id, notice="edited"))


_EDIT_FIELDS = ("content", "importance", "confidence", "tags", "reason")


@router.post("/users/{user_id}/memories/{memory_id}/pin", response_class=HTMLResponse)
def pin(
    request: Request, viewer: ViewerDep, form: FormDep, user_id: str, memory_id: str
) -> Response:
    """Pin (decay never rescores nor deletes it) or unpin, as a new version."""
    reader = viewer.reader
    memory = long_term(runtime_of(request))
    visible(memory, reader, user_id, memory_id)
    pinned = form.get("pinned") == "1"
    memory.update(
        memory_id,
        tenant_id=reader.tenant_id,
        user_id=user_id,
        metadata={"pinned": pinned},
        reason="pinned in the inspector" if pinned else "unpinned in the inspector",
    )
    return _redirect(path("users", user_id, "memories", memory_id, notice="pinned"))


def acl_of(form: Mapping[str, str], viewer: Viewer) -> tuple[dict[str, Any], dict[str, str]]:
    """The access control a form asks for, and its errors. A tenant key may name only
    roles it holds, so it can never lock itself out of a memory it restricts."""
    errors: dict[str, str] = {}
    roles = _list(form.get("roles", ""))
    visibility = form.get("visibility", "")
    if visibility not in {s.value for s in Scope}:
        errors["visibility"] = "choose private, shared or public"
    if len(roles) > MAX_ROLES or any(len(r) > 64 or r == "admin" for r in roles):
        errors["roles"] = "at most 64 roles of 1 to 64 characters, not 'admin'"
    elif not viewer.is_admin and not set(roles) <= viewer.principal.roles:
        held = ", ".join(sorted(viewer.principal.roles)) or "none"
        errors["roles"] = f"a key may name only roles it holds (this one holds: {held})"
    return {"visibility": visibility, "allowed_roles": sorted(roles)}, errors


@router.post("/users/{user_id}/memories/{memory_id}/acl", response_class=HTMLResponse)
def change_acl(
    request: Request, viewer: ViewerDep, form: FormDep, user_id: str, memory_id: str
) -> Response:
    """Change who may read the memory, as a new version (history keeps the old ACL)."""
    memory = long_term(runtime_of(request))
    old = visible(memory, viewer.reader, user_id, memory_id)
    access, errors = acl_of(form, viewer)
    if errors:
        return _again(request, viewer, user_id, memory_id, form, errors)
    fields = old.model_dump()
    fields["access_control"] = {**fields["access_control"], **access}
    fields["metadata"]["version"] = old.metadata.version + 1
    fields["time"]["updated_at"] = utcnow()
    new = MemoryRecord.checked(fields)
    try:
        why = "access changed in the inspector"
        memory.store.update([Change(new, None, old.metadata.version, why)])
    except ConflictError as exc:
        return _again(request, viewer, user_id, memory_id, form, {"roles": str(exc)})
    return _redirect(path("users", user_id, "memories", memory_id, notice="access"))


@router.get("/users/{user_id}/memories/{memory_id}/forget", response_class=HTMLResponse)
def forget_memory_form(
    request: Request, viewer: ViewerDep, user_id: str, memory_id: str
) -> HTMLResponse:
    record = visible(long_term(runtime_of(request)), viewer.reader, user_id, memory_id)
    return page(request, "forget_memory.html", viewer, user_id=user_id, record=record)


@router.post("/users/{user_id}/memories/{memory_id}/forget", response_class=HTMLResponse)
def forget_memory(
    request: Request, viewer: ViewerDep, form: FormDep, user_id: str, memory_id: str
) -> Response:
    """Forget one memory (its history stays, as the API's delete)."""
    reader = viewer.reader
    memory = long_term(runtime_of(request))
    visible(memory, reader, user_id, memory_id)
    try:
        why = "forgotten in the inspector"
        memory.delete(memory_id, tenant_id=reader.tenant_id, user_id=user_id, reason=why)
    except NotFoundError:
        raise Missing(f"memory {memory_id}") from None
    return _redirect(path("users", user_id, "memories", notice="forgotten"))


def what_goes(runtime: Runtime, viewer: Viewer, user_id: str) -> dict[str, int]:
    """What forgetting ``user_id`` deletes: memories (those this key sees), sessions,
    and extraction batches still queued."""
    reader = viewer.reader
    memories = long_term(runtime).count(reader.filter(user_id=user_id))
    sessions = len(runtime.short_term.store.sessions(reader.tenant_id, user_id))
    queued = sum(
        1
        for state in (BatchState.PENDING, BatchState.LEASED, BatchState.DEAD)
        for batch in runtime.outbox.batches(state, limit=10_000)
        if (batch.key.tenant_id, batch.key.user_id) == (reader.tenant_id, user_id)
    )
    return {"memories": memories, "sessions": sessions, "queued": queued}


@router.get("/users/{user_id}/forget", response_class=HTMLResponse)
def forget_user_form(request: Request, viewer: ViewerDep, user_id: str) -> HTMLResponse:
    goes = what_goes(runtime_of(request), viewer, user_id)
    return page(request, "forget_user.html", viewer, user_id=user_id, goes=goes, errors={})


@router.post("/users/{user_id}/forget", response_class=HTMLResponse)
def forget_user(request: Request, viewer: ViewerDep, form: FormDep, user_id: str) -> Response:
    """Forget the whole user (memories, sessions, queued extraction) once the form
    repeats the user id."""
    runtime = runtime_of(request)
    if form.get("confirm", "") != user_id:
        goes = what_goes(runtime, viewer, user_id)
        errors = {"confirm": "type the user id exactly to confirm; nothing was deleted"}
        return page(
            request, "forget_user.html", viewer, status=400, user_id=user_id, goes=goes,
            errors=errors,
        )  # fmt: skip
    runtime.forget_user(viewer.reader.tenant_id, user_id, roles=viewer.reader.roles)
    return _redirect(path("users", notice="user-forgotten"))


@router.get("/users/{user_id}/export")
def export(request: Request, viewer: ViewerDep, user_id: str) -> Response:
    """The user's memories this key may read, as JSON lines (``POST /v1/memory/import``)."""
    out = io.StringIO()
    memory = long_term(runtime_of(request))
    written = memory.export_jsonl(viewer.reader.filter(user_id=user_id), out)
    name = f"memories-{written}.jsonl"
    return Response(
        out.getvalue(),
        media_type=JSONL,
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


__all__ = ["acl_of", "edit_changes", "router", "what_goes"]
