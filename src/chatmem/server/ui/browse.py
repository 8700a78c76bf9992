"""Reading pages: users, a user's sessions, a session's messages, memories and one memory
whole with its provenance and history (issue 13, items 1 and 2).

Every memory read is built from the viewer's ``Reader`` (tenant and roles), so a memory
restricted to roles the key lacks is never listed, opened, counted or linked here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from chatmem.errors import NotFoundError, ValidationError
from chatmem.long_term import LongTermMemory
from chatmem.messages import SessionKey, now_ms
from chatmem.records import (
    LATEST,
    Filter,
    HistoryEntry,
    MemoryRecord,
    MemoryType,
    RelationType,
    Scope,
    shifted,
    utcnow,
)
from chatmem.server.auth import Reader
from chatmem.server.runtime import Runtime
from chatmem.server.ui.login import ViewerDep, runtime_of
from chatmem.server.ui.render import page, path
from chatmem.server.visibility import visible_session

router = APIRouter(prefix="/ui", include_in_schema=False)

#: Memories read at most to count users on the users page.
MAX_USER_SCAN = 20_000
#: Memories read at most to fill one filtered page (tags and superseded are checked here).
MAX_FILTER_SCAN = 5_000
PAGE_SIZE = 50
#: Links followed at most along a supersede chain, each way.
MAX_CHAIN = 20
_SUPERSEDED_BY = re.compile(r"superseded by ([0-9A-Za-z_-]+)")


class Missing(Exception):
    """What the viewer asked for is absent or hidden from it (answered 404, as the API)."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(what)


def long_term(runtime: Runtime) -> LongTermMemory:
    if runtime.long_term is None:
        raise Missing(f"memory is off: {runtime.memory_error or 'memory.enabled is false'}")
    return runtime.long_term


# -- users and sessions ------------------------------------------------------------------------


@dataclass
class UserRow:
    user_id: str
    memories: int = 0
    sessions: int = 0
    last_ms: int = 0


def user_rows(runtime: Runtime, reader: Reader) -> tuple[list[UserRow], int, bool]:
    """The tenant's users with counts, the memories read, and whether the scan stopped at
    ``MAX_USER_SCAN``. Users come from memories and from live sessions."""
    rows: dict[str, UserRow] = {}
    scanned, cursor, truncated = 0, None, False
    if runtime.long_term is not None:
        while True:
            found = runtime.long_term.list(reader.filter(), limit=500, cursor=cursor)
            for record in found.records:
                row = rows.setdefault(record.user_id, UserRow(record.user_id))
                row.memories += 1
                row.last_ms = max(row.last_ms, _ms(record.time.updated_at))
            scanned += len(found.records)
            cursor = found.next_cursor
            if cursor is None or scanned >= MAX_USER_SCAN:
                truncated = cursor is not None
                break
    for key in runtime.short_term.store.idle(now_ms() + 1, limit=1000):
        if key.tenant_id == reader.tenant_id:
            rows.setdefault(key.user_id, UserRow(key.user_id))
    for row in rows.values():
        infos = runtime.short_term.store.sessions(reader.tenant_id, row.user_id)
        row.sessions = len(infos)
        row.last_ms = max([row.last_ms, *(i.updated_at for i in infos)])
    ordered = sorted(rows.values(), key=lambda r: (-r.last_ms, r.user_id))
    return ordered, scanned, truncated


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@router.get("", response_class=HTMLResponse)
def home() -> RedirectResponse:
    return RedirectResponse("/ui/users", status_code=303)


@router.get("/users", response_class=HTMLResponse)
def users(request: Request, viewer: ViewerDep, user_id: str = "") -> HTMLResponse:
    """The tenant's users with counts; ``user_id`` opens one directly."""
    if user_id.strip():
        return RedirectResponse(path("users", user_id.strip()), status_code=303)  # type: ignore[return-value]
    rows, scanned, truncated = user_rows(runtime_of(request), viewer.reader)
    return page(request, "users.html", viewer, rows=rows, scanned=scanned, truncated=truncated)


@router.get("/users/{user_id}", response_class=HTMLResponse)
def user(request: Request, viewer: ViewerDep, user_id: str) -> HTMLResponse:
    """One user: counts and sessions, most recent first."""
    runtime, reader = runtime_of(request), viewer.reader
    sessions = runtime.short_term.store.sessions(reader.tenant_id, user_id)
    count = long_term(runtime).count(reader.filter(user_id=user_id))
    current = long_term(runtime).count(reader.filter(user_id=user_id, valid_at=utcnow()))
    return page(
        request,
        "user.html",
        viewer,
        user_id=user_id,
        sessions=sessions,
        count=count,
        current=current,
    )


@router.get("/users/{user_id}/sessions/{session_id}", response_class=HTMLResponse)
def session(
    request: Request, viewer: ViewerDep, user_id: str, session_id: str, turns: str = ""
) -> HTMLResponse:
    """A session's whole log with the rich fields; ``turns`` (message ids, comma-separated)
    are highlighted: the messages a memory came from."""
    runtime, reader = runtime_of(request), viewer.reader
    key = SessionKey.of(reader.tenant_id, user_id, session_id)
    if runtime.short_term.store.length(key) == 0:
        raise Missing(f"session {session_id}")
    history = runtime.short_term.history(key)
    window = runtime.short_term.window(key)
    state = runtime.short_term.store.state(key)
    # An answer built on memories the viewer's roles do not open is shown withheld (L7).
    shown = visible_session(reader.roles, history, window, state)
    marked = {t for t in turns.split(",") if t}
    return page(
        request,
        "session.html",
        viewer,
        user_id=user_id,
        session_id=session_id,
        messages=shown.messages,
        window=window._replace(summary=shown.summary, working_state=shown.working_state),
        state=state.model_copy(update={"episode": shown.episode}),
        marked=marked,
    )


# -- memories -------------------------------------------------------------------------------


@dataclass
class ListQuery:
    """The memory list's filters, as the form sends them (validated by ``list_query``)."""

    type: str = ""
    scope: str = ""
    project: str = ""
    state: str = "all"
    tag: str = ""
    since: str = ""
    until: str = ""
    cursor: str = ""
    errors: dict[str, str] = field(default_factory=dict)

    def narrow(self, reader: Reader, user_id: str, now: datetime) -> Filter:
        """The store filter (tags and superseded are checked on the records)."""
        return reader.filter(
            user_id=user_id,
            types=frozenset({MemoryType(self.type)}) if self.type else None,
            scopes=frozenset({Scope(self.scope)}) if self.scope else None,
            project_id=self.project or None,
            created_after=_day(self.since),
            created_before=_day(self.until, end=True),
            valid_at=now if self.state == "current" else None,
        )

    def keeps(self, record: MemoryRecord, now: datetime) -> bool:
        if self.tag and self.tag not in record.metadata.tags:
            return False
        ended = record.time.valid_to
        return self.state != "superseded" or (ended is not None and ended <= now)


def _day(text: str, *, end: bool = False) -> datetime | None:
    """A form's day as the UTC midnight it starts (``end``: the next one, and None after
    9999-12-31, whose end no time is past)."""
    if not text:
        return None
    day = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
    if not end:
        return day
    following = shifted(day, timedelta(days=1))
    return None if following == LATEST else following


def list_query(params: Mapping[str, str]) -> ListQuery:
    """The filters of ``params``, each bad one named in ``errors``."""
    query = ListQuery()
    for name in _FIELDS:
        setattr(query, name, params.get(name, "").strip())
    query.state = query.state or "all"
    checks: dict[str, Callable[[str], bool]] = {
        "type": lambda v: v in {t.value for t in MemoryType},
        "scope": lambda v: v in {s.value for s in Scope},
        "state": lambda v: v in {"all", "current", "superseded"},
        "since": _is_day,
        "until": _is_day,
        "project": lambda v: len(v) <= 256,
        "tag": lambda v: len(v) <= 64,
    }
    for name, check in checks.items():
        value = getattr(query, name)
        if value and not check(value):
            query.errors[name] = _HINTS[name]
    if not query.errors and query.since and query.until and query.since > query.until:
        query.errors["until"] = "must be on or after the 'from' day"
    return query


_FIELDS = ("type", "scope", "project", "state", "tag", "since", "until", "cursor")
_HINTS = {
    "type": "choose one of the listed types",
    "scope": "choose one of the listed scopes",
    "state": "choose all, current or superseded",
    "since": "a day as YYYY-MM-DD",
    "until": "a day as YYYY-MM-DD",
    "project": "at most 256 characters",
    "tag": "at most 64 characters",
}


def _is_day(text: str) -> bool:
    try:
        datetime.strptime(text, "%Y-%m-%d")
    except ValueError:
        return False
    return True


def memory_page(
    memory: LongTermMemory, reader: Reader, user_id: str, query: ListQuery
) -> tuple[list[MemoryRecord], str | None]:
    """One page of the filtered list (oldest first) and the cursor of the next."""
    now = utcnow()
    scope = query.narrow(reader, user_id, now)
    checked = bool(query.tag) or query.state == "superseded"
    size = 200 if checked else PAGE_SIZE
    found: list[MemoryRecord] = []
    cursor, scanned = query.cursor or None, 0
    while True:
        page_ = memory.list(scope, limit=size, cursor=cursor)
        found += [r for r in page_.records if query.keeps(r, now)]
        scanned += len(page_.records)
        cursor = page_.next_cursor
        if cursor is None or len(found) >= PAGE_SIZE or scanned >= MAX_FILTER_SCAN:
            return found, cursor


@router.get("/users/{user_id}/memories", response_class=HTMLResponse)
def memories(request: Request, viewer: ViewerDep, user_id: str) -> HTMLResponse:
    """A user's memories, filtered; the list alone for htmx."""
    query = list_query(request.query_params)
    records: list[MemoryRecord] = []
    next_cursor = None
    status = 400 if query.errors else 200
    if not query.errors:
        try:
            memory = long_term(runtime_of(request))
            records, next_cursor = memory_page(memory, viewer.reader, user_id, query)
        except ValidationError as exc:  # a cursor the store cannot read
            query.errors["cursor"] = exc.message
            status = 400
    return page(
        request,
        "memories.html",
        viewer,
        status=status,
        fragment="_memory_list.html",
        user_id=user_id,
        query=query,
        records=records,
        next_cursor=next_cursor,
        types=[t.value for t in MemoryType],
        scopes=[s.value for s in Scope],
        now=utcnow(),
    )


# -- one memory ------------------------------------------------------------------------------


def visible(memory: LongTermMemory, reader: Reader, user_id: str, memory_id: str) -> MemoryRecord:
    """The memory, if this reader may see it; Missing otherwise."""
    try:
        return memory.get(
            memory_id, tenant_id=reader.tenant_id, user_id=user_id, roles=reader.roles
        )
    except (NotFoundError, ValidationError):
        raise Missing(f"memory {memory_id}") from None


def history_of(
    memory: LongTermMemory, reader: Reader, user_id: str, memory_id: str
) -> list[HistoryEntry]:
    try:
        return memory.history(
            memory_id, tenant_id=reader.tenant_id, user_id=user_id, roles=reader.roles
        )
    except NotFoundError:
        return []


def chain(
    memory: LongTermMemory, reader: Reader, record: MemoryRecord, history: list[HistoryEntry]
) -> list[MemoryRecord]:
    """The supersede chain through ``record``, oldest first: the memories it ``updates``
    (followed back) and those that superseded it (the reason its history names)."""
    before: list[MemoryRecord] = []
    current = record
    for _ in range(MAX_CHAIN):
        targets = [r.target_id for r in current.relations if r.type is RelationType.UPDATES]
        found = _records(memory, reader, record.user_id, targets[:1])
        if not found or any(f.id in {b.id for b in before} for f in found):
            break
        current = found[0]
        before.insert(0, current)
    after: list[MemoryRecord] = []
    reasons = history
    for _ in range(MAX_CHAIN):
        named = [m.group(1) for e in reasons for m in [_SUPERSEDED_BY.search(e.reason or "")] if m]
        found = _records(memory, reader, record.user_id, named[-1:])
        if not found or found[0].id in {a.id for a in after} | {record.id}:
            break
        after.append(found[0])
        reasons = history_of(memory, reader, record.user_id, found[0].id)
    return [*before, record, *after] if before or after else []


def _records(
    memory: LongTermMemory, reader: Reader, user_id: str, ids: list[str]
) -> list[MemoryRecord]:
    return memory.store.get(ids, reader.filter(user_id=user_id)) if ids else []


def detail_context(
    runtime: Runtime, reader: Reader, user_id: str, memory_id: str
) -> dict[str, Any]:
    """What the memory page shows: the record, its history and its supersede chain."""
    memory = long_term(runtime)
    record = visible(memory, reader, user_id, memory_id)
    history = history_of(memory, reader, user_id, memory_id)
    return {
        "user_id": user_id,
        "record": record,
        "history": history,
        "chain": chain(memory, reader, record, history),
        "pinned": record.user_metadata.get("pinned") is True or "pinned" in record.metadata.tags,
        "now": utcnow(),
    }


@router.get("/users/{user_id}/memories/{memory_id}", response_class=HTMLResponse)
def memory_detail(
    request: Request, viewer: ViewerDep, user_id: str, memory_id: str
) -> HTMLResponse:
    """One memory whole: fields, provenance, history timeline and supersede chain."""
    context = detail_context(runtime_of(request), viewer.reader, user_id, memory_id)
    return page(request, "memory.html", viewer, errors={}, form={}, **context)


__all__ = ["Missing", "detail_context", "long_term", "router", "visible"]
