"""What the service answers about sessions and keys, defined once: the service sends these
models and the client reads them. Memories come back as the library's own records
(``MemoryRecord``, ``SearchResult``, ``Page``, ``HistoryEntry``).

Every time is a ``datetime`` in UTC, sent as an ISO 8601 string
(``"2026-11-24T10:15:30.123000Z"``), as the memory API sends its records' times. A time given
as an integer is read as milliseconds since the epoch: the service builds these models from
its stores' millisecond times, and a client reads a service older than that change. Fields
the service adds later are ignored, so an older client keeps working against a newer
service.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

from chatmem.records import from_ms


def _from_ms(value: Any) -> Any:
    """An integer time as milliseconds since the epoch; anything else as pydantic reads it."""
    if isinstance(value, int) and not isinstance(value, bool):
        return from_ms(value)
    return value


#: A time on the wire: an ISO 8601 UTC string (an integer is read as epoch milliseconds).
WireTime = Annotated[datetime, BeforeValidator(_from_ms)]


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class SessionInfo(_Answer):
    """One of a user's sessions, as ``GET /v1/sessions`` lists it and
    ``client.sessions.list`` gives it."""

    session_id: str
    #: Messages in the session.
    length: int
    #: When the session was last appended to.
    updated_at: WireTime
    #: None while the session runs.
    ended_at: WireTime | None


class SessionView(_Answer):
    """A session's whole history (S5) and what of it the model sees now."""

    session_id: str
    #: Every message, oldest first, in the format asked for.
    messages: list[dict[str, Any]]
    #: The running summary of the messages before ``window_start``, if any.
    summary: dict[str, Any] | None
    #: Index in ``messages`` of the first message still in the window.
    window_start: int
    working_state: dict[str, Any] | None
    #: The episodic summary made when the session ended.
    episode: dict[str, Any] | None
    #: None while the session runs.
    ended_at: WireTime | None


class EndedSession(_Answer):
    """A session just ended: its length and episodic summary."""

    session_id: str
    length: int
    #: The episodic summary of the whole session.
    summary: str | None


class ApiKey(_Answer):
    """A key as the admin lists it: its id, never the key itself."""

    key_id: str
    tenant_id: str
    roles: list[str]
    name: str | None
    #: The epoch (1970-01-01T00:00:00Z) for a key of the service's config file.
    created_at: WireTime
    revoked: bool
    #: "config" (from the service's config file) or "api" (made by ``create_key``).
    source: str


class NewApiKey(_Answer):
    """A key just made; ``key`` is shown here and never again."""

    key: str
    key_id: str
    tenant_id: str
    roles: list[str]
    name: str | None
    created_at: WireTime


class TenantInfo(_Answer):
    """A tenant known from its keys."""

    tenant_id: str
    #: Keys that still work.
    keys: int
    revoked_keys: int


__all__ = [
    "ApiKey",
    "EndedSession",
    "NewApiKey",
    "SessionInfo",
    "SessionView",
    "TenantInfo",
    "WireTime",
]
