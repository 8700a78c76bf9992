"""What the service answers about sessions and keys; memories come back as the library's own
records (``MemoryRecord``, ``SearchResult``, ``Page``, ``HistoryEntry``).

Times are milliseconds since the epoch, as the service sends them. Fields the service adds
later are ignored, so an older client keeps working against a newer service.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class SessionInfo(_Answer):
    """One of a user's sessions, as ``client.sessions.list`` gives it."""

    session_id: str
    #: Messages in the session.
    length: int
    #: Milliseconds since the epoch of the last append.
    updated_at: int
    #: Milliseconds since the epoch; None while the session runs.
    ended_at: int | None


class SessionView(_Answer):
    """A session's whole history and what of it the model sees now."""

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
    ended_at: int | None


class EndedSession(_Answer):
    """A session just ended: its length and episodic summary."""

    session_id: str
    length: int
    summary: str | None


class ApiKey(_Answer):
    """A key as the admin lists it: its id, never the key itself."""

    key_id: str
    tenant_id: str
    roles: list[str]
    name: str | None
    #: Milliseconds since the epoch (0 for a key of the service's config file).
    created_at: int
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
    created_at: int


class TenantInfo(_Answer):
    """A tenant known from its keys."""

    tenant_id: str
    #: Keys that still work.
    keys: int
    revoked_keys: int


__all__ = ["ApiKey", "EndedSession", "NewApiKey", "SessionInfo", "SessionView", "TenantInfo"]
