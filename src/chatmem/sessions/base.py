"""The one session store interface (SPEC S1, S3).

A session is an append-only log of messages plus a small state record beside it. Overflow
never deletes from the log: trimming or summarizing moves ``window_start`` forward and keeps
the running summary in the state, so the whole history stays readable (S5) while the model
sees only the window. Backends: in-process, Redis, SQLite; one conformance suite runs on all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from pydantic import Field

from chatmem.errors import ConflictError
from chatmem.messages import Message, SessionKey
from chatmem.records import _Model

_MARK_RETRIES = 20


class SessionState(_Model):
    """What sits beside a session's log. ``revision`` guards against lost updates."""

    #: Index in the log of the first message still in the short-term window.
    window_start: int = Field(default=0, ge=0)
    #: The running summary of everything before ``window_start`` (a system message), if any.
    summary: Message | None = None
    #: The structured state of the conversation (S6): topic, figures, decisions, questions.
    working_state: dict[str, Any] | None = None
    #: Log length when the working state was last brought up to date.
    working_state_at: int = Field(default=0, ge=0)
    #: Log length up to which messages were handed to long-term memory (flush or end).
    flushed_upto: int = Field(default=0, ge=0)
    #: Log length up to which messages were queued for extraction (or passed over when a
    #: turn asked not to be stored). What lies past it is extracted after a crash too.
    extracted_upto: int = Field(default=0, ge=0)
    #: The episodic summary of the whole session, made when it ended (S5 hand-over).
    episode: Message | None = None
    #: When the session was ended (ms), None while it runs. An append reopens it.
    ended_at: int | None = None
    revision: int = Field(default=0, ge=0)


class SessionInfo(NamedTuple):
    session_id: str
    length: int
    #: Milliseconds since the epoch of the last append.
    updated_at: int
    ended_at: int | None


class SessionStore(ABC):
    """Durable or in-process storage of sessions. All methods are thread-safe.

    Every method takes a full ``SessionKey``; nothing reads across tenants or users.
    """

    @abstractmethod
    def append(self, key: SessionKey, messages: Sequence[Message]) -> int:
        """Append atomically (all or none) and return the new log length.

        Raises ValidationError when a turn id goes backwards, against the stored last turn
        or within the batch; the session is then left as it was. Reopens an ended session.
        """

    @abstractmethod
    def read(self, key: SessionKey, start: int = 0, stop: int | None = None) -> list[Message]:
        """Messages ``start`` to ``stop`` (exclusive; None for the end), oldest first.
        Negative indexes count from the end, as in a Python slice."""

    @abstractmethod
    def length(self, key: SessionKey) -> int:
        """Number of messages in the log (0 for a session never written)."""

    @abstractmethod
    def state(self, key: SessionKey) -> SessionState:
        """The session's state (a fresh one for a session never written)."""

    @abstractmethod
    def save_state(self, key: SessionKey, state: SessionState) -> SessionState:
        """Store ``state`` if the stored revision still equals ``state.revision``; return it
        with the revision bumped. Raises ConflictError when another writer got there first."""

    @abstractmethod
    def sessions(self, tenant_id: str, user_id: str) -> list[SessionInfo]:
        """One user's sessions, most recently updated first."""

    @abstractmethod
    def idle(self, before_ms: int, limit: int = 100) -> list[SessionKey]:
        """Sessions not ended whose last append is older than ``before_ms`` (oldest first)."""

    @abstractmethod
    def delete(self, key: SessionKey) -> bool:
        """Forget a session, log and state; True when it existed."""

    @abstractmethod
    def delete_user(self, tenant_id: str, user_id: str) -> int:
        """Forget all of one user's sessions; returns how many there were."""

    @abstractmethod
    def get_text(self, tenant_id: str, name: str) -> str | None:
        """A named text kept for a tenant (a static block's content), or None."""

    @abstractmethod
    def put_text(self, tenant_id: str, name: str, text: str) -> None:
        """Create or replace a named text; readers see it on their next read."""

    @abstractmethod
    def delete_text(self, tenant_id: str, name: str) -> bool:
        """Forget a named text; True when it existed."""

    def unextracted(self, limit: int = 10_000) -> list[SessionKey]:
        """Live sessions whose log runs past ``extracted_upto`` (the turns a crash left
        unqueued), at most ``limit``. Backends with an index answer this faster."""
        now = int(datetime.now(UTC).timestamp() * 1000) + 1
        return [
            key
            for key in self.idle(now, limit)
            if self.length(key) > self.state(key).extracted_upto
        ]

    def mark_extracted(self, key: SessionKey, upto: int) -> None:
        """Move ``extracted_upto`` forward to ``upto`` (never back), retrying when another
        writer changes the state at the same time. A session shorter than ``upto`` was
        cleared or forgotten meanwhile: its mark is not written, so a forgotten session is
        never brought back as an empty one."""
        for _ in range(_MARK_RETRIES):
            state = self.state(key)
            if state.extracted_upto >= upto or self.length(key) < upto:
                return
            try:
                self.save_state(key, state.model_copy(update={"extracted_upto": upto}))
                return
            except ConflictError:
                continue
        raise ConflictError(f"session {key.session_id!r}: the extraction mark kept changing")

    def close(self) -> None:  # noqa: B027 - stores without resources need nothing here
        """Release connections."""


__all__ = ["SessionInfo", "SessionState", "SessionStore"]
