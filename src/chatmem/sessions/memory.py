"""Sessions in the process's memory: the fastest backend, gone when the process ends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from chatmem.errors import ConflictError
from chatmem.messages import Message, SessionKey, check_turn_order, last_turn_id, now_ms
from chatmem.sessions.base import SessionInfo, SessionState, SessionStore
from chatmem.stores.gate import ClosingLock


@dataclass
class _Session:
    log: list[Message] = field(default_factory=list)
    state: SessionState = field(default_factory=SessionState)
    updated_at: int = 0


class InMemorySessionStore(SessionStore):
    """A dict of sessions under one lock. Messages are immutable once appended."""

    def __init__(self) -> None:
        self._lock = ClosingLock("in-memory session store")
        self._sessions: dict[SessionKey, _Session] = {}
        self._texts: dict[tuple[str, str], str] = {}

    def close(self) -> None:
        """Later calls raise StoreError, as on every backend; the sessions are dropped."""
        self._lock.close()
        self._sessions.clear()

    def append(self, key: SessionKey, messages: Sequence[Message]) -> int:
        batch = list(messages)
        with self._lock:
            session = self._sessions.get(key) or _Session()
            check_turn_order(last_turn_id(session.log), batch)
            session.log.extend(batch)
            session.updated_at = now_ms()
            if session.state.ended_at is not None:
                session.state = _bumped(session.state.model_copy(update={"ended_at": None}))
            self._sessions[key] = session
            return len(session.log)

    def read(self, key: SessionKey, start: int = 0, stop: int | None = None) -> list[Message]:
        with self._lock:
            session = self._sessions.get(key)
            return list(session.log[start:stop]) if session else []

    def length(self, key: SessionKey) -> int:
        with self._lock:
            session = self._sessions.get(key)
            return len(session.log) if session else 0

    def state(self, key: SessionKey) -> SessionState:
        with self._lock:
            session = self._sessions.get(key)
            return session.state if session else SessionState()

    def save_state(self, key: SessionKey, state: SessionState) -> SessionState:
        with self._lock:
            session = self._sessions.get(key) or _Session(updated_at=now_ms())
            if session.state.revision != state.revision:
                raise ConflictError(
                    f"session {key.session_id!r} state changed (revision "
                    f"{session.state.revision}, not {state.revision})"
                )
            session.state = _bumped(state)
            self._sessions[key] = session
            return session.state

    def sessions(self, tenant_id: str, user_id: str) -> list[SessionInfo]:
        with self._lock:
            found = [
                SessionInfo(key.session_id, len(s.log), s.updated_at, s.state.ended_at)
                for key, s in self._sessions.items()
                if key.tenant_id == tenant_id and key.user_id == user_id
            ]
        return sorted(found, key=lambda info: (-info.updated_at, info.session_id))

    def idle(self, before_ms: int, limit: int = 100) -> list[SessionKey]:
        with self._lock:
            found = [
                (s.updated_at, key)
                for key, s in self._sessions.items()
                if s.state.ended_at is None and s.log and s.updated_at < before_ms
            ]
        return [key for _, key in sorted(found)[:limit]]

    def delete(self, key: SessionKey) -> bool:
        with self._lock:
            return self._sessions.pop(key, None) is not None

    def delete_user(self, tenant_id: str, user_id: str) -> int:
        with self._lock:
            doomed = [k for k in self._sessions if (k.tenant_id, k.user_id) == (tenant_id, user_id)]
            for key in doomed:
                del self._sessions[key]
            return len(doomed)

    def get_text(self, tenant_id: str, name: str) -> str | None:
        with self._lock:
            return self._texts.get((tenant_id, name))

    def put_text(self, tenant_id: str, name: str, text: str) -> None:
        with self._lock:
            self._texts[(tenant_id, name)] = text

    def delete_text(self, tenant_id: str, name: str) -> bool:
        with self._lock:
            return self._texts.pop((tenant_id, name), None) is not None


def _bumped(state: SessionState) -> SessionState:
    return state.model_copy(update={"revision": state.revision + 1})


__all__ = ["InMemorySessionStore"]
