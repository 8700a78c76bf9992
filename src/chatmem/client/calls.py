"""Each operation of the client as a request to build and an answer to read: no I/O here, so
``Client`` and ``AsyncClient`` share every route, body and parser and differ only in how
they send.

A ``Call`` says how safe it is to send again (``Safety``), which the retry loop obeys.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

from chatmem.client.models import (
    ApiKey,
    EndedSession,
    NewApiKey,
    SessionInfo,
    SessionView,
    TenantInfo,
)
from chatmem.errors import ValidationError
from chatmem.long_term import MessageLike, OnConflict
from chatmem.records import Filter, HistoryEntry, MemoryRecord, MemoryType, Page, SearchResult

R = TypeVar("R")

MEMORY = "/v1/memory"
IMPORT_PATH = f"{MEMORY}/import"
EXPORT_PATH = f"{MEMORY}/export"
SESSIONS = "/v1/sessions"
ADMIN = "/v1/admin"
#: The header that names the tenant an admin key acts for.
TENANT_HEADER = "X-Chatmem-Tenant"
#: The most memories the service lists in one page.
MAX_PAGE = 500

SessionFormat = Literal["openai", "vercel", "rich"]


class Safety(Enum):
    """When a request may be sent again after a failure."""

    #: Changes nothing (GET, search) or sets a value (PUT): again after any failure.
    READ = "read"
    #: Has the same effect twice (DELETE), but a second try after a lost answer would find
    #: nothing and say so: again after a refusal (502, 503, 504, 429) or a failed connect.
    IDEMPOTENT = "idempotent"
    #: Would act twice (POST, PATCH): again only when it never reached the service.
    WRITE = "write"


@dataclass(frozen=True)
class Call(Generic[R]):
    """One request and how to read its answer's JSON."""

    method: str
    path: str
    read: Callable[[Any], R]
    safety: Safety
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    #: Sent as ``X-Chatmem-Tenant`` (only the admin key acts for a tenant it names).
    tenant_id: str | None = None
    #: What a 404 means was not found: (what, id).
    subject: tuple[str, str] | None = None


def _segment(value: str) -> str:
    return quote(value, safe="")


def _present(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _tenant(tenant_id: str | None, scope: Filter | None) -> str | None:
    """The tenant a call names: its own argument, else one its filter set explicitly."""
    if tenant_id is not None:
        return tenant_id
    if scope is not None and "tenant_id" in scope.model_fields_set:
        return scope.tenant_id
    return None


def _narrowing(scope: Filter, allowed: frozenset[str], where: str = "filter") -> None:
    """Refuse, naming it, a field of ``scope`` the service cannot filter by (rather than
    act on more memories than the caller meant)."""
    for name, info in Filter.model_fields.items():
        if name == "tenant_id" or name in allowed or getattr(scope, name) == info.default:
            continue
        why = (
            "the service takes the reader's roles from its API key"
            if name == "reader_roles"
            else "the service does not filter by it here"
        )
        raise ValidationError(why, field=f"{where}.{name}")


#: The fields of a ``Filter`` that the service's list, count and export filter by.
LIST_FIELDS = frozenset(
    {"user_id", "project_id", "session_id", "agent_id", "types", "created_after", "created_before"}
)


def _list_params(scope: Filter) -> dict[str, Any]:
    """``scope`` as the list, count and export routes take it (a field they cannot filter
    by is refused by name)."""
    _narrowing(scope, LIST_FIELDS)
    return _present(
        {
            "user_id": scope.user_id,
            "project_id": scope.project_id,
            "session_id": scope.session_id,
            "agent_id": scope.agent_id,
            "type": sorted(t.value for t in scope.types) if scope.types else None,
            "created_after": scope.created_after.isoformat() if scope.created_after else None,
            "created_before": scope.created_before.isoformat() if scope.created_before else None,
        }
    )


def _wire_message(item: MessageLike, index: int) -> dict[str, Any]:
    if isinstance(item, str):
        raise ValidationError(
            "the service takes one text, or a list of chat messages, not a list of texts",
            field=f"messages[{index}]",
        )
    message = dict(item)
    if isinstance(message.get("timestamp"), datetime):
        message["timestamp"] = message["timestamp"].isoformat()
    return message


def _memories(data: Any) -> builtins.list[MemoryRecord]:
    return [MemoryRecord.model_validate(item) for item in data["memories"]]


def _page(data: Any) -> Page:
    return Page(_memories(data), data["next_cursor"])


def _deleted(data: Any) -> int:
    return int(data["deleted"])


def _nothing(data: Any) -> None:
    return None


#: Bytes of import lines gathered into one chunk of the streamed body.
CHUNK_BYTES = 64 * 1024


class Chunker:
    """Gathers import lines (with or without their newlines) into the chunks of a streamed
    body, so a file of any size is never held whole."""

    def __init__(self, size: int = CHUNK_BYTES) -> None:
        self.size = size
        self._held: builtins.list[bytes] = []
        self._bytes = 0

    def add(self, line: str) -> bytes | None:
        """Take a line; a chunk once enough is held."""
        data = (line.rstrip("\r\n") + "\n").encode("utf-8")
        self._held.append(data)
        self._bytes += len(data)
        return self.rest() if self._bytes >= self.size else None

    def rest(self) -> bytes:
        """What is held, as a chunk (empty when nothing is)."""
        chunk = b"".join(self._held)
        self._held, self._bytes = [], 0
        return chunk


def jsonl_chunks(lines: Iterable[str]) -> Iterator[bytes]:
    """``lines`` as the chunks of an import body, read one at a time."""
    chunker = Chunker()
    for line in lines:
        chunk = chunker.add(line)
        if chunk is not None:
            yield chunk
    last = chunker.rest()
    if last:
        yield last


def with_self(build: Callable[..., Any]) -> inspect.Signature:
    """``build``'s signature as the client method's: ``self`` first, returning what the
    call reads (``Call[X]`` becomes ``X``)."""
    signature = inspect.signature(build)
    returns = signature.return_annotation
    if isinstance(returns, str) and returns.startswith("Call[") and returns.endswith("]"):
        returns = returns[len("Call[") : -1]
    self = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    return signature.replace(
        parameters=[self, *signature.parameters.values()], return_annotation=returns
    )


class MemoryCalls:
    """``/v1/memory``: the methods of ``LongTermMemory``."""

    @staticmethod
    def add(
        messages: MessageLike | Sequence[MessageLike],
        *,
        user_id: str,
        tenant_id: str | None = None,
        agent_id: str | None = None,
        project_id: str | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        type: MemoryType | None = None,
        importance: float | None = None,
        tags: Sequence[str] | None = None,
        allowed_roles: Sequence[str] | None = None,
    ) -> Call[builtins.list[MemoryRecord]]:
        """Store a text (one semantic memory) or each message of a chat (one episodic
        memory each, with its neighbours as context) in one atomic write; returns the
        records. ``allowed_roles`` restricts who may read them to keys holding one of
        those roles. Never retried once sent: a second try could store them twice."""
        body = _present(
            {
                "user_id": user_id,
                "agent_id": agent_id,
                "project_id": project_id,
                "session_id": session_id,
                "metadata": dict(metadata) if metadata is not None else None,
                "type": type,
                "importance": importance,
                "tags": builtins.list(tags) if tags is not None else None,
                "allowed_roles": builtins.list(allowed_roles) if allowed_roles else None,
            }
        )
        if isinstance(messages, str):
            body["content"] = messages
        elif isinstance(messages, Mapping):
            body["messages"] = [_wire_message(messages, 0)]
        else:
            body["messages"] = [_wire_message(m, i) for i, m in enumerate(messages)]
        return Call("POST", MEMORY, _memories, Safety.WRITE, json=body, tenant_id=tenant_id)

    @staticmethod
    def search(
        query: str,
        *,
        user_id: str,
        tenant_id: str | None = None,
        k: int = 5,
        threshold: float | None = None,
        filter: Filter | None = None,
        include_superseded: bool = False,
    ) -> Call[builtins.list[SearchResult]]:
        """Hybrid search of one user's memories: the best ``k`` with a fused score of at
        least ``threshold``, best first. ``filter`` may narrow by ``project_id`` and
        ``types``; superseded facts are left out unless ``include_superseded``."""
        body: dict[str, Any] = {
            "user_id": user_id,
            "query": query,
            "k": k,
            "include_superseded": include_superseded,
        }
        if threshold is not None:
            body["threshold"] = threshold
        if filter is not None:
            if filter.user_id not in (None, user_id):
                raise ValidationError("differs from user_id", field="filter.user_id")
            _narrowing(filter, frozenset({"user_id", "project_id", "types"}))
            body.update(
                _present(
                    {
                        "project_id": filter.project_id,
                        "types": sorted(filter.types) if filter.types else None,
                    }
                )
            )

        def results(data: Any) -> builtins.list[SearchResult]:
            return [SearchResult.model_validate(item) for item in data["results"]]

        return Call(
            "POST",
            f"{MEMORY}/search",
            results,
            Safety.READ,
            json=body,
            tenant_id=_tenant(tenant_id, filter),
        )

    @staticmethod
    def get(
        memory_id: str, *, tenant_id: str | None = None, user_id: str | None = None
    ) -> Call[MemoryRecord]:
        """One memory by id; NotFoundError when it is absent or hidden from the key."""
        return Call(
            "GET",
            f"{MEMORY}/{_segment(memory_id)}",
            MemoryRecord.model_validate,
            Safety.READ,
            params=_present({"user_id": user_id}),
            tenant_id=tenant_id,
            subject=("memory", memory_id),
        )

    @staticmethod
    def update(
        memory_id: str,
        text: str | None = None,
        *,
        tenant_id: str | None = None,
        user_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        importance: float | None = None,
        confidence: float | None = None,
        tags: Sequence[str] | None = None,
        reason: str | None = None,
    ) -> Call[MemoryRecord]:
        """Change a memory's text and/or fields; its version goes up and history keeps the
        old one. ``metadata`` keys merge into the free-form metadata. ConflictError when a
        concurrent update won."""
        body = _present(
            {
                "user_id": user_id,
                "content": text,
                "metadata": dict(metadata) if metadata is not None else None,
                "importance": importance,
                "confidence": confidence,
                "tags": builtins.list(tags) if tags is not None else None,
                "reason": reason,
            }
        )
        return Call(
            "PATCH",
            f"{MEMORY}/{_segment(memory_id)}",
            MemoryRecord.model_validate,
            Safety.WRITE,
            json=body,
            tenant_id=tenant_id,
            subject=("memory", memory_id),
        )

    @staticmethod
    def delete(
        memory_id: str,
        *,
        tenant_id: str | None = None,
        user_id: str | None = None,
        reason: str | None = None,
    ) -> Call[None]:
        """Forget one memory (its history stays, with ``reason``); NotFoundError if it is
        not there."""
        return Call(
            "DELETE",
            f"{MEMORY}/{_segment(memory_id)}",
            _nothing,
            Safety.IDEMPOTENT,
            params=_present({"user_id": user_id, "reason": reason}),
            tenant_id=tenant_id,
            subject=("memory", memory_id),
        )

    @staticmethod
    def delete_all(scope: Filter, *, reason: str | None = None) -> Call[int]:
        """Forget a user's memories (``scope.user_id`` is required), or one project's of
        them; returns how many. Without ``project_id`` the service also forgets the
        user's sessions and queued extraction, so nothing comes back later."""
        scope.require_user()
        _narrowing(scope, frozenset({"user_id", "project_id"}))
        return Call(
            "DELETE",
            MEMORY,
            _deleted,
            Safety.IDEMPOTENT,
            params=_present({"user_id": scope.user_id, "project_id": scope.project_id}),
            tenant_id=_tenant(None, scope),
        )

    @staticmethod
    def history(
        memory_id: str, *, tenant_id: str | None = None, user_id: str | None = None
    ) -> Call[builtins.list[HistoryEntry]]:
        """Every version of a memory, oldest first, its deletion included."""

        def entries(data: Any) -> builtins.list[HistoryEntry]:
            return [HistoryEntry.model_validate(item) for item in data["entries"]]

        return Call(
            "GET",
            f"{MEMORY}/{_segment(memory_id)}/history",
            entries,
            Safety.READ,
            params=_present({"user_id": user_id}),
            tenant_id=tenant_id,
            subject=("memory", memory_id),
        )

    @staticmethod
    def list(scope: Filter, *, limit: int = 100, cursor: str | None = None) -> Call[Page]:
        """Memories matching ``scope`` (by ``LIST_FIELDS``), oldest first, a page at a
        time: follow ``next_cursor`` until it is None."""
        if not 1 <= limit <= MAX_PAGE:
            raise ValidationError(f"must be 1 to {MAX_PAGE}", field="limit")
        params = {**_list_params(scope), **_present({"limit": limit, "cursor": cursor})}
        return Call(
            "GET", MEMORY, _page, Safety.READ, params=params, tenant_id=_tenant(None, scope)
        )

    @staticmethod
    def count(scope: Filter) -> Call[int]:
        """How many memories match ``scope`` (by ``LIST_FIELDS``) that the key may see."""

        def counted(data: Any) -> int:
            return int(data["count"])

        return Call(
            "GET",
            f"{MEMORY}/count",
            counted,
            Safety.READ,
            params=_list_params(scope),
            tenant_id=_tenant(None, scope),
        )

    @staticmethod
    def export(scope: Filter) -> Call[None]:
        """The export of one user's memories (``scope.user_id``, narrowed by the other
        ``LIST_FIELDS``); read as lines, not JSON."""
        scope.require_user()
        params = _list_params(scope)
        return Call(
            "GET", EXPORT_PATH, _nothing, Safety.READ, params=params, tenant_id=_tenant(None, scope)
        )

    @staticmethod
    def import_(tenant_id: str | None, on_conflict: OnConflict = "fail") -> Call[int]:
        """An import of JSON lines (the body is sent as a stream by the caller)."""

        def imported(data: Any) -> int:
            return int(data["imported"])

        params = {"on_conflict": on_conflict}
        return Call("POST", IMPORT_PATH, imported, Safety.WRITE, params=params, tenant_id=tenant_id)


class SessionCalls:
    """``/v1/sessions``: short-term memory over the service."""

    @staticmethod
    def append(
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        user_id: str,
        format: SessionFormat = "openai",
        tenant_id: str | None = None,
    ) -> Call[int]:
        """Append messages (all or none) in ``format`` (openai, vercel or rich); returns
        the session's length. Extraction is queued. Never retried once sent."""
        body = {"user_id": user_id, "messages": [dict(m) for m in messages], "format": format}

        def length(data: Any) -> int:
            return int(data["length"])

        return Call(
            "POST",
            f"{SESSIONS}/{_segment(session_id)}/messages",
            length,
            Safety.WRITE,
            json=body,
            tenant_id=tenant_id,
        )

    @staticmethod
    def read(
        session_id: str,
        *,
        user_id: str,
        format: SessionFormat = "rich",
        tenant_id: str | None = None,
    ) -> Call[SessionView]:
        """The whole history, oldest first, with the running summary and window start."""
        return Call(
            "GET",
            f"{SESSIONS}/{_segment(session_id)}",
            SessionView.model_validate,
            Safety.READ,
            params={"user_id": user_id, "format": format},
            tenant_id=tenant_id,
            subject=("session", session_id),
        )

    @staticmethod
    def list(*, user_id: str, tenant_id: str | None = None) -> Call[builtins.list[SessionInfo]]:
        """A user's sessions, most recently updated first."""

        def sessions(data: Any) -> builtins.list[SessionInfo]:
            return [SessionInfo.model_validate(item) for item in data["sessions"]]

        return Call(
            "GET", SESSIONS, sessions, Safety.READ, params={"user_id": user_id}, tenant_id=tenant_id
        )

    @staticmethod
    def end(session_id: str, *, user_id: str, tenant_id: str | None = None) -> Call[EndedSession]:
        """End a session: its episodic summary is kept for the next one, its extraction
        queued and the ``session.ended`` webhook sent."""
        return Call(
            "POST",
            f"{SESSIONS}/{_segment(session_id)}/end",
            EndedSession.model_validate,
            Safety.WRITE,
            json={"user_id": user_id},
            tenant_id=tenant_id,
            subject=("session", session_id),
        )

    @staticmethod
    def delete(session_id: str, *, user_id: str, tenant_id: str | None = None) -> Call[None]:
        """Forget a session: its messages, its state and its system memory."""
        return Call(
            "DELETE",
            f"{SESSIONS}/{_segment(session_id)}",
            _nothing,
            Safety.IDEMPOTENT,
            params={"user_id": user_id},
            tenant_id=tenant_id,
            subject=("session", session_id),
        )

    @staticmethod
    def set_system(
        session_id: str, content: str, *, user_id: str, tenant_id: str | None = None
    ) -> Call[None]:
        """Set the system memory the chat proxy puts in front of the session's next
        request."""
        return Call(
            "PUT",
            f"{SESSIONS}/{_segment(session_id)}/system",
            _nothing,
            Safety.READ,
            json={"user_id": user_id, "content": content},
            tenant_id=tenant_id,
        )

    @staticmethod
    def get_system(session_id: str, *, user_id: str, tenant_id: str | None = None) -> Call[str]:
        """The session's system memory; NotFoundError when none is set."""

        def content(data: Any) -> str:
            return str(data["content"])

        return Call(
            "GET",
            f"{SESSIONS}/{_segment(session_id)}/system",
            content,
            Safety.READ,
            params={"user_id": user_id},
            tenant_id=tenant_id,
            subject=("system memory of session", session_id),
        )

    @staticmethod
    def delete_system(session_id: str, *, user_id: str, tenant_id: str | None = None) -> Call[None]:
        """Stop injecting the session's system memory; NotFoundError when none is set."""
        return Call(
            "DELETE",
            f"{SESSIONS}/{_segment(session_id)}/system",
            _nothing,
            Safety.IDEMPOTENT,
            params={"user_id": user_id},
            tenant_id=tenant_id,
            subject=("system memory of session", session_id),
        )


class AdminCalls:
    """``/v1/admin``: keys and tenants (the admin key only; others get AuthenticationError
    with status 403)."""

    @staticmethod
    def create_key(
        tenant_id: str, *, roles: Sequence[str] = (), name: str | None = None
    ) -> Call[NewApiKey]:
        """Make a key for ``tenant_id`` holding ``roles`` (which open memories restricted
        to them); the key itself is in the answer and never shown again."""
        body = _present({"tenant_id": tenant_id, "roles": builtins.list(roles), "name": name})
        return Call("POST", f"{ADMIN}/keys", NewApiKey.model_validate, Safety.WRITE, json=body)

    @staticmethod
    def keys(*, tenant_id: str | None = None) -> Call[builtins.list[ApiKey]]:
        """Every key, or one tenant's: config keys first, then by creation."""

        def keys(data: Any) -> builtins.list[ApiKey]:
            return [ApiKey.model_validate(item) for item in data["keys"]]

        params = _present({"tenant_id": tenant_id})
        return Call("GET", f"{ADMIN}/keys", keys, Safety.READ, params=params)

    @staticmethod
    def revoke_key(key_id: str) -> Call[ApiKey]:
        """Revoke a key made by ``create_key``; its next request is refused."""
        return Call(
            "DELETE",
            f"{ADMIN}/keys/{_segment(key_id)}",
            ApiKey.model_validate,
            Safety.IDEMPOTENT,
            subject=("API key", key_id),
        )

    @staticmethod
    def tenants() -> Call[builtins.list[TenantInfo]]:
        """The tenants known from keys, with how many keys each has."""

        def tenants(data: Any) -> builtins.list[TenantInfo]:
            return [TenantInfo.model_validate(item) for item in data["tenants"]]

        return Call("GET", f"{ADMIN}/tenants", tenants, Safety.READ)


__all__ = [
    "ADMIN",
    "EXPORT_PATH",
    "IMPORT_PATH",
    "MAX_PAGE",
    "MEMORY",
    "SESSIONS",
    "TENANT_HEADER",
    "CHUNK_BYTES",
    "AdminCalls",
    "Call",
    "Chunker",
    "MemoryCalls",
    "Safety",
    "SessionCalls",
    "jsonl_chunks",
    "with_self",
]
