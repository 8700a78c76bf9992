"""Short-term memory: sessions, overflow, working state, hand-over (SPEC S1–S6).

A session's log only grows. What the model sees is the *window*: the running summary and the
working state, then the messages from ``window_start`` on. Overflow moves ``window_start``:

- ``trim`` drops the oldest turns from the window;
- ``summarize`` folds them into the running summary (an LLM when one is given, else an
  extractive summary that says so in its metadata);
- ``flush`` hands them to long-term memory (a ``FlushTarget``), then trims.

The window is only ever cut at the start of a user turn, so a tool call is never parted from
its result, and the newest user message is never cut.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from chatmem import checks
from chatmem.caches import LRUCache, MiB, size_of
from chatmem.errors import ConflictError, ValidationError
from chatmem.llm.base import ChatModel
from chatmem.messages import Message, Role, SessionKey, now_ms
from chatmem.sessions.base import SessionState, SessionStore
from chatmem.sessions.memory import InMemorySessionStore
from chatmem.short_term.condense import summarize, update_state
from chatmem.tokens import TokenCounter, default_counter

log = logging.getLogger("chatmem.short_term")

Strategy = Literal["trim", "summarize", "flush"]
#: Sessions whose logs are kept in memory between calls, at most...
LOG_CACHE_SESSIONS = 256
#: ...and the memory those logs may take (bytes).
LOG_CACHE_BYTES = 32 * MiB
#: The memory the per-message token counts may take (bytes).
TOKEN_CACHE_BYTES = 4 * MiB
#: Receives the messages that leave the window (flush) or the session (end).
FlushTarget = Callable[[SessionKey, list[Message]], None]


@dataclass(frozen=True)
class OverflowPolicy:
    """When the window is too long and what to do then.

    The window overflows past ``max_turns`` user turns or ``max_tokens`` tokens; it is then
    cut back to ``keep_turns`` turns (half of ``max_turns`` by default), so the costly step
    (a summary) runs once every few turns rather than every turn.
    """

    strategy: Strategy = "trim"
    max_turns: int = 10
    max_tokens: int | None = None
    keep_turns: int | None = None
    #: Longest running summary, in tokens.
    summary_tokens: int = 400

    def __post_init__(self) -> None:
        if self.strategy not in ("trim", "summarize", "flush"):
            raise ValidationError(
                f"unknown overflow strategy {self.strategy!r} (trim, summarize, flush)",
                field="strategy",
            )
        max_turns = checks.whole(self.max_turns, "max_turns", low=1)
        if self.keep_turns is not None:
            between = "must be between 1 and max_turns"
            checks.whole(self.keep_turns, "keep_turns", low=1, high=max_turns, message=between)
        if self.max_tokens is not None:
            checks.whole(self.max_tokens, "max_tokens", low=1)
        checks.whole(self.summary_tokens, "summary_tokens")

    @property
    def kept_turns(self) -> int:
        return self.keep_turns or max(1, self.max_turns // 2)


class Window(NamedTuple):
    """What of a session goes to the model: summary, working state, recent messages."""

    summary: Message | None
    working_state: dict[str, object] | None
    messages: list[Message]
    start: int


class _Log(NamedTuple):
    """A session's log as cached: its messages, and the bytes they hold (kept as the log
    grows, so sizing a long log costs only its new tail)."""

    messages: list[Message]
    message_bytes: int

    def size(self) -> int:
        return self.message_bytes + sys.getsizeof(self.messages)


@dataclass
class ShortTermMemory:
    """Sessions over one ``SessionStore``, with overflow and working state applied on append.

    ``summarizer`` is the LLM for summaries and the working state (None: extractive);
    ``flush`` receives what leaves the window under the ``flush`` strategy and what a session
    hands over when it ends. ``state_every`` is how many user turns pass between updates of
    the working state (None turns it off). ``log_cache_bytes`` bounds the memory of the
    session logs kept between calls (a session past it is read from the store each time).
    """

    store: SessionStore = field(default_factory=InMemorySessionStore)
    policy: OverflowPolicy = field(default_factory=OverflowPolicy)
    counter: TokenCounter = field(default_factory=default_counter)
    summarizer: ChatModel | None = None
    flush: FlushTarget | None = None
    state_every: int | None = 10
    log_cache_bytes: int = LOG_CACHE_BYTES
    _token_cache: LRUCache[str, int] = field(
        default_factory=lambda: LRUCache(TOKEN_CACHE_BYTES), repr=False
    )
    #: Per session: its log and the bytes its messages hold.
    _logs: LRUCache[SessionKey, _Log] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.state_every is not None:
            checks.whole(self.state_every, "state_every")
        checks.whole(self.log_cache_bytes, "log_cache_bytes", low=0)
        self._logs = LRUCache(
            self.log_cache_bytes,
            max_entries=LOG_CACHE_SESSIONS,
            size=lambda key, log: size_of(key) + log.size(),
        )

    def tokens(self, message: Message) -> int:
        """Tokens of a message's content, counted once per message id."""
        cached = self._token_cache.get(message.id)
        if cached is None:
            cached = self.counter.count(message.content)
            self._token_cache.put(message.id, cached)
        return cached

    def append(self, key: SessionKey, messages: Sequence[Message]) -> int:
        """Append messages (all or none), then apply overflow and the working state."""
        length = self.store.append(key, messages)
        self._settle(key)
        return length

    def window(self, key: SessionKey) -> Window:
        """What of the session goes to the model now."""
        state = self.store.state(key)
        messages = self._log(key)[state.window_start :]
        return Window(state.summary, state.working_state, messages, state.window_start)

    def history(self, key: SessionKey) -> list[Message]:
        """Every message of the session, the overflowed ones included (S5)."""
        return list(self._log(key))

    def clear(self, key: SessionKey) -> None:
        """Forget the session: its log and its state."""
        self.store.delete(key)
        self._logs.pop(key)

    def _log(self, key: SessionKey) -> list[Message]:
        """The session's log, read once and then only its new tail.

        Logs only grow, so a cached prefix stays right unless the session was deleted and
        written again; its last message's id tells.
        """
        length = self.store.length(key)
        log = self._logs.get(key) or _Log([], 0)
        cached = log.messages
        if cached and (
            len(cached) > length
            or self.store.read(key, len(cached) - 1, len(cached))[0].id != cached[-1].id
        ):
            log = _Log([], 0)
        if len(log.messages) < length:
            tail = self.store.read(key, len(log.messages), length)
            log = _Log(log.messages + tail, log.message_bytes + sum(map(size_of, tail)))
            self._logs.put(key, log)
        return log.messages

    def end(self, key: SessionKey) -> Message | None:
        """End a session: hand what was not yet handed over to ``flush``, and keep an
        episodic summary of the whole session in its state, for the next session to start
        with. Returns that summary (None for an empty session)."""
        for _ in range(3):
            state = self.store.state(key)
            log_messages = self.store.read(key)
            if not log_messages:
                return None
            if self.flush is not None and state.flushed_upto < len(log_messages):
                self.flush(key, log_messages[state.flushed_upto :])
            episode = summarize(
                None,
                log_messages,
                counter=self.counter,
                max_tokens=self.policy.summary_tokens,
                model=self.summarizer,
            )
            ended = state.model_copy(
                update={
                    "flushed_upto": len(log_messages),
                    "ended_at": now_ms(),
                    "episode": episode,
                }
            )
            try:
                self.store.save_state(key, ended)
            except ConflictError:
                continue
            log.info("session %s ended: %d messages handed over", key.session_id, len(log_messages))
            return episode
        raise ConflictError(f"session {key.session_id!r} kept changing while it was being ended")

    def end_idle(self, idle_ms: int, *, now: int | None = None) -> list[SessionKey]:
        """End every session with no message for ``idle_ms``; returns the ones ended."""
        before = (now if now is not None else now_ms()) - idle_ms
        ended = []
        for key in self.store.idle(before):
            self.end(key)
            ended.append(key)
        return ended

    def handover(self, tenant_id: str, user_id: str) -> Message | None:
        """The episodic summary of the user's most recently ended session, if any."""
        for info in self.store.sessions(tenant_id, user_id):
            if info.ended_at is None:
                continue
            state = self.store.state(SessionKey(tenant_id, user_id, info.session_id))
            if state.episode is not None:
                return state.episode
        return None

    # -- overflow and working state ---------------------------------------------------------

    def _settle(self, key: SessionKey) -> None:
        for _ in range(3):
            state = self.store.state(key)
            session_log = self._log(key)
            updated = self._overflowed(key, state, session_log[state.window_start :])
            updated = self._with_working_state(updated, session_log)
            if updated == state:
                return
            try:
                self.store.save_state(key, updated)
                return
            except ConflictError:
                continue  # another writer settled first: look again
        log.warning("session %s: state kept changing; overflow left for the next append", key)

    def _overflowed(
        self, key: SessionKey, state: SessionState, window: list[Message]
    ) -> SessionState:
        cut = overflow_cut(window, self.policy, self.tokens)
        if cut == 0:
            return state
        leaving = window[:cut]
        new_start = state.window_start + cut
        update: dict[str, object] = {"window_start": new_start}
        if self.policy.strategy == "summarize":
            update["summary"] = summarize(
                state.summary,
                leaving,
                counter=self.counter,
                max_tokens=self.policy.summary_tokens,
                model=self.summarizer,
            )
        elif self.policy.strategy == "flush" and self.flush is not None:
            unflushed = leaving[max(0, state.flushed_upto - state.window_start) :]
            if unflushed:
                self.flush(key, unflushed)
            update["flushed_upto"] = max(state.flushed_upto, new_start)
        log.info(
            "session %s: %s %d messages out of the window",
            key.session_id,
            self.policy.strategy,
            cut,
        )
        return state.model_copy(update=update)

    def _with_working_state(self, state: SessionState, session_log: list[Message]) -> SessionState:
        if not self.state_every:
            return state
        length = len(session_log)
        fresh = session_log[state.working_state_at :]
        if sum(m.role is Role.USER for m in fresh) < self.state_every:
            return state
        working = update_state(state.working_state, fresh, model=self.summarizer)
        return state.model_copy(update={"working_state": working, "working_state_at": length})


def overflow_cut(
    window: Sequence[Message], policy: OverflowPolicy, tokens: Callable[[Message], int]
) -> int:
    """How many messages at the start of ``window`` must leave it (0 when none).

    ``tokens`` gives a message's size. Cuts fall only at the start of a user turn and never
    past the newest user message.
    """
    starts = [i for i, message in enumerate(window) if message.role is Role.USER]
    if not starts:
        return 0
    too_many = len(starts) > policy.max_turns
    too_long = policy.max_tokens is not None and sum(map(tokens, window)) > policy.max_tokens
    if not (too_many or too_long):
        return 0
    kept = min(policy.kept_turns, len(starts))
    cut_index = len(starts) - kept
    if policy.max_tokens is not None:
        target = policy.max_tokens // 2
        last = len(starts) - 1
        while cut_index < last and sum(map(tokens, window[starts[cut_index] :])) > target:
            cut_index += 1
    return starts[cut_index]


__all__ = ["FlushTarget", "OverflowPolicy", "ShortTermMemory", "Strategy", "Window", "overflow_cut"]
