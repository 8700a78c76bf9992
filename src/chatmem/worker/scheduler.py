"""The extraction scheduler: it buffers each session's new messages and decides, by the
triggers of :mod:`chatmem.worker.triggers`, when they are queued for extraction (SPEC L3).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from chatmem.embeddings.base import Embedder
from chatmem.messages import Message, Role, SessionKey
from chatmem.records import Vector
from chatmem.worker.triggers import Triggers, cosine_distance, is_explicit, trigger_reason

logger = logging.getLogger("chatmem.worker")


@dataclass
class _SessionState:
    turns: int = 0
    last_vector: Vector | None = None
    buffer: list[Message] = field(default_factory=list)
    buffered: int = 0


class ExtractionScheduler:
    """Decides when a session's new messages are queued for extraction (SPEC L3).

    ``observe(key, messages)`` buffers a turn's messages and says whether to enqueue now;
    ``take(key)`` hands the buffered messages over (and empties the buffer)::

        if scheduler.observe(key, turn):
            outbox.enqueue(key, scheduler.take(key))

    The topic-change trigger embeds each user message of ``min_topic_words`` words or more
    (one embedding per turn); the other triggers are string and counter checks. State is
    kept for the ``max_sessions`` most recent sessions. Thread-safe.

    With ``keep_messages=False`` only the counts are kept and ``take`` hands over nothing:
    for a caller that reads what is pending from a durable log instead (the service), so
    a quiet session's turns are not held in memory twice.
    """

    def __init__(
        self,
        triggers: Triggers | None = None,
        *,
        embedder: Embedder | None = None,
        max_sessions: int = 10_000,
        keep_messages: bool = True,
    ) -> None:
        self.triggers = triggers or Triggers()
        self.keep_messages = keep_messages
        self.embedder = embedder
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[SessionKey, _SessionState] = OrderedDict()
        self._lock = threading.Lock()

    def observe(
        self, key: SessionKey, messages: Sequence[Message], *, session_end: bool = False
    ) -> bool:
        """Buffer ``messages``; True when the buffer should be enqueued now."""
        return self.check(key, messages, session_end=session_end) is not None

    def check(
        self, key: SessionKey, messages: Sequence[Message], *, session_end: bool = False
    ) -> str | None:
        """Like :meth:`observe`, returning why (``"explicit"``, ``"topic change"``…)."""
        said = [m for m in messages if m.role is Role.USER and m.content.strip()]
        vectors = self._topic_vectors(said)
        with self._lock:
            state = self._state(key)
            if self.keep_messages:
                state.buffer.extend(messages)
            state.buffered += len(messages)
            state.turns += len(said)
            distance = None
            for vector in vectors:
                if state.last_vector is not None:
                    distance = cosine_distance(state.last_vector, vector)
                state.last_vector = vector
            reason = trigger_reason(
                self.triggers,
                turns=state.turns,
                buffered=state.buffered,
                explicit=any(is_explicit(m.content) for m in said),
                distance=distance,
                session_end=session_end,
            )
            if reason is not None:
                state.turns = 0
            if session_end:
                state.last_vector = None
        if reason is not None:
            logger.debug("extraction triggered for %s: %s", key, reason)
        return reason

    def take(self, key: SessionKey) -> list[Message]:
        """The buffered messages of ``key``, removed from the buffer."""
        with self._lock:
            state = self._sessions.get(key)
            if state is None:
                return []
            taken, state.buffer, state.buffered = state.buffer, [], 0
            return taken

    def forget(self, key: SessionKey) -> None:
        """Drop what is kept of a session."""
        with self._lock:
            self._sessions.pop(key, None)

    def forget_user(self, tenant_id: str, user_id: str) -> None:
        """Drop what is kept of every session of one user (buffered messages included)."""
        with self._lock:
            for key in [k for k in self._sessions if k[:2] == (tenant_id, user_id)]:
                del self._sessions[key]

    def _state(self, key: SessionKey) -> _SessionState:
        state = self._sessions.get(key)
        if state is None:
            state = self._sessions[key] = _SessionState()
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(key)
        return state

    def _topic_vectors(self, said: Sequence[Message]) -> list[Vector]:
        if self.embedder is None or self.triggers.topic_change is None:
            return []
        long_enough = [
            m.content for m in said if len(m.content.split()) >= self.triggers.min_topic_words
        ]
        return list(self.embedder.embed(long_enough)) if long_enough else []


__all__ = ["ExtractionScheduler"]
