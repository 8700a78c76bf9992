"""``/v1/memory`` as calls: the methods of ``LongTermMemory`` (add, search, get, update,
delete, delete_all, history, list, count) and the export and import routes.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from chatmem import checks
from chatmem.client.calls.call import (
    EXPORT_PATH,
    IMPORT_PATH,
    MAX_PAGE,
    MEMORY,
    Call,
    Safety,
    narrowing,
    nothing,
    present,
    segment,
    tenant_named,
)
from chatmem.errors import ValidationError
from chatmem.long_term import MessageLike, OnConflict
from chatmem.records import Filter, HistoryEntry, MemoryRecord, MemoryType, Page, SearchResult

#: The fields of a ``Filter`` that the service's list, count and export filter by.
LIST_FIELDS = frozenset(
    {"user_id", "project_id", "session_id", "agent_id", "types", "created_after", "created_before"}
)


def _list_params(scope: Filter) -> dict[str, Any]:
    """``scope`` as the list, count and export routes take it (a field they cannot filter
    by is refused by name)."""
    narrowing(scope, LIST_FIELDS)
    return present(
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
        body = present(
            {
                "user_id": user_id,
                "agent_id": agent_id,
                "project_id": project_id,
                "session_id": session_id,
                "metadata": dict(metadata) if metadata is not None else None,
                "type": type,
                "importance": checks.optional_number(importance, "importance"),
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
            "k": checks.whole(k, "k"),
            "include_superseded": include_superseded,
        }
        if threshold is not None:
            body["threshold"] = checks.number(threshold, "threshold")
        if filter is not None:
            if filter.user_id not in (None, user_id):
                raise ValidationError("differs from user_id", field="filter.user_id")
            narrowing(filter, frozenset({"user_id", "project_id", "types"}))
            body.update(
                present(
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
            tenant_id=tenant_named(tenant_id, filter),
        )

    @staticmethod
    def get(
        memory_id: str, *, tenant_id: str | None = None, user_id: str | None = None
    ) -> Call[MemoryRecord]:
        """One memory by id; NotFoundError when it is absent or hidden from the key."""
        return Call(
            "GET",
            f"{MEMORY}/{segment(memory_id)}",
            MemoryRecord.model_validate,
            Safety.READ,
            params=present({"user_id": user_id}),
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
        body = present(
            {
                "user_id": user_id,
                "content": text,
                "metadata": dict(metadata) if metadata is not None else None,
                "importance": checks.optional_number(importance, "importance"),
                "confidence": checks.optional_number(confidence, "confidence"),
                "tags": builtins.list(tags) if tags is not None else None,
                "reason": reason,
            }
        )
        return Call(
            "PATCH",
            f"{MEMORY}/{segment(memory_id)}",
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
            f"{MEMORY}/{segment(memory_id)}",
            nothing,
            Safety.IDEMPOTENT,
            params=present({"user_id": user_id, "reason": reason}),
            tenant_id=tenant_id,
            subject=("memory", memory_id),
        )

    @staticmethod
    def delete_all(scope: Filter, *, reason: str | None = None) -> Call[int]:
        """Forget a user's memories (``scope.user_id`` is required), or one project's of
        them; returns how many. Without ``project_id`` the service also forgets the
        user's sessions and queued extraction, so nothing comes back later."""
        scope.require_user()
        narrowing(scope, frozenset({"user_id", "project_id"}))
        return Call(
            "DELETE",
            MEMORY,
            _deleted,
            Safety.IDEMPOTENT,
            params=present({"user_id": scope.user_id, "project_id": scope.project_id}),
            tenant_id=tenant_named(None, scope),
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
            f"{MEMORY}/{segment(memory_id)}/history",
            entries,
            Safety.READ,
            params=present({"user_id": user_id}),
            tenant_id=tenant_id,
            subject=("memory", memory_id),
        )

    @staticmethod
    def list(scope: Filter, *, limit: int = 100, cursor: str | None = None) -> Call[Page]:
        """Memories matching ``scope`` (by ``LIST_FIELDS``), oldest first, a page at a
        time: follow ``next_cursor`` until it is None."""
        limit = checks.whole(
            limit, "limit", low=1, high=MAX_PAGE, message=f"must be 1 to {MAX_PAGE}"
        )
        params = {**_list_params(scope), **present({"limit": limit, "cursor": cursor})}
        return Call(
            "GET", MEMORY, _page, Safety.READ, params=params, tenant_id=tenant_named(None, scope)
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
            tenant_id=tenant_named(None, scope),
        )

    @staticmethod
    def export(scope: Filter) -> Call[None]:
        """The export of one user's memories (``scope.user_id``, narrowed by the other
        ``LIST_FIELDS``); read as lines, not JSON."""
        scope.require_user()
        params = _list_params(scope)
        return Call(
            "GET",
            EXPORT_PATH,
            nothing,
            Safety.READ,
            params=params,
            tenant_id=tenant_named(None, scope),
        )

    @staticmethod
    def import_(tenant_id: str | None, on_conflict: OnConflict = "fail") -> Call[int]:
        """An import of JSON lines (the body is sent as a stream by the caller)."""

        def imported(data: Any) -> int:
            return int(data["imported"])

        params = {"on_conflict": on_conflict}
        return Call("POST", IMPORT_PATH, imported, Safety.WRITE, params=params, tenant_id=tenant_id)


__all__ = ["LIST_FIELDS", "MemoryCalls"]
