"""A session's earlier turns as the context of its new messages (``LongTermMemory.add``
with a ``session_id``): found in the store (or by the ids of the session's latest turns,
kept from the last call), and told of the messages that follow them.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from chatmem.caches import LRUCache, MiB
from chatmem.long_term.inputs import InputMessage, context_text
from chatmem.long_term.message_records import PART_KEY, PART_OF_KEY
from chatmem.records import LATEST, Context, Filter, MemoryRecord, shifted, utcnow
from chatmem.stores import MemoryStore
from chatmem.stores.base import Change

log = logging.getLogger("chatmem.long_term")

_MS = timedelta(milliseconds=1)

#: How far back from a session's new message ``add`` looks for the session's earlier turns,
#: widening in these steps until it finds one: the same moment (a whole session sent with
#: one time), then a minute, an hour, a day, a week. A turn further from its session's
#: previous turn gets no context from it. Each step is one read of the session's memories
#: in that span (SQLite: by the session index, ``memories_by_session``); one read of a single
#: memory of the widest span first tells a session that has none (a new one) at once.
SESSION_LOOKBACK = (
    timedelta(0),
    timedelta(minutes=1),
    timedelta(hours=1),
    timedelta(days=1),
    timedelta(days=7),
)
#: Memories read per page while looking for a session's earlier turns.
LOOKUP_PAGE = 64
#: Bytes of the ids of each session's latest turns that ``add`` keeps, so that the next
#: message of a session finds them by id rather than by reading the session's span.
SESSION_TAILS_BYTES = 4 * MiB
#: The history reason of a turn whose ``after`` context ``add`` filled in.
NEXT_TURN_REASON = "context: the next turn was added"

#: A stored turn: its memories (one, or the parts of a long message), oldest part first.
Turn = list[MemoryRecord]
_TailKey = tuple[str, str, str, tuple[str, ...]]
_Tail = tuple[tuple[str, ...], ...]


class SessionTails:
    """Finds each session's latest stored turns in ``store``, and keeps their ids.

    ``window`` is how many turns on each side a message's context holds.
    """

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        # (tenant, user, session, roles) -> the ids of the session's latest turns, oldest
        # first, each turn the ids of its memories; checked against the store on every use.
        self._tails: LRUCache[_TailKey, _Tail] = LRUCache(SESSION_TAILS_BYTES, size=_tail_size)

    def earlier(
        self,
        owner: Mapping[str, Any],
        heard: Sequence[InputMessage],
        access: Mapping[str, Any] | None,
        window: int,
    ) -> list[Turn]:
        """The session's latest stored turns said at or before the call's first message,
        oldest first, at most ``window`` of them. Only chat turns with the call's
        ``allowed_roles`` count: a turn some readers may not see is no context for one
        they may."""
        if not heard or heard[0].role is None or window < 1:
            return []
        roles = sorted((access or {}).get("allowed_roles", []))
        scope = Filter(
            tenant_id=owner["tenant_id"], user_id=owner["user_id"], session_id=owner["session_id"]
        )
        moment = Filter(created_before=heard[0].timestamp or utcnow()).created_before
        assert moment is not None
        # Turns of the very same moment count; at the calendar's last moment nothing is
        # later, so no bound is that bound.
        until = None if moment >= LATEST else moment + _MS
        remembered = self._remembered(_tail_key(owner, access), scope, moment, roles)
        if remembered is not None:
            return remembered

        def back(span: timedelta) -> Filter:
            return scope.model_copy(
                update={"created_after": shifted(moment, -span), "created_before": until}
            )

        # A session's first message (the first add of every new session) finds nothing in
        # any span: one read of a single memory says so, where the widening took five.
        probe = self.store.list(back(max(SESSION_LOOKBACK)), 1)
        if not probe.records and probe.next_cursor is None:  # a page may come back empty
            return []
        for span in SESSION_LOOKBACK:
            turns = self._latest(back(span), roles, window)
            if turns:
                return turns
        return []

    def _latest(self, scope: Filter, roles: Sequence[str], window: int) -> list[Turn]:
        """The last ``window`` chat turns of ``scope`` with ``roles``, oldest first.

        Turns said at the same moment keep the store's order, except that one without an
        ``after`` context comes last: it is the one no turn has followed yet (a store that
        orders ties by id, as Milvus does, would otherwise pick any of them)."""
        turns: dict[str, Turn] = {}  # a message's memories, by message
        cursor: str | None = None
        while True:
            page = self.store.list(scope, LOOKUP_PAGE, cursor)
            for record in page.records:
                if record.context is None or sorted(record.access_control.allowed_roles) != roles:
                    continue
                message = str(record.user_metadata.get(PART_OF_KEY, record.id))
                turns.setdefault(message, []).append(record)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        ordered = sorted(turns.values(), key=_turn_order)
        return [sorted(turn, key=_part_number) for turn in ordered[-window:]]

    def _remembered(
        self, key: _TailKey, scope: Filter, moment: datetime, roles: Sequence[str]
    ) -> list[Turn] | None:
        """The session's latest turns as this object last stored them, read by id; None when
        they are unknown or may no longer be the latest (one is gone, the last was said
        after ``moment``, or it has an ``after`` context: another writer added a turn), when
        one no longer has the call's ``roles`` (its readers changed since), or the last is
        further back than ``SESSION_LOOKBACK`` reaches."""
        tail = self._tails.get(key)
        if tail is None:
            return None
        found = {r.id: r for r in self.store.get([i for turn in tail for i in turn], scope)}
        turns = [[found[i] for i in turn if i in found] for turn in tail]
        if any(len(t) != len(ids) for t, ids in zip(turns, tail, strict=True)):
            return None
        if any(
            r.context is None or sorted(r.access_control.allowed_roles) != roles
            for turn in turns
            for r in turn
        ):
            return None
        said = turns[-1][0].time.created_at
        too_old = said < shifted(moment, -SESSION_LOOKBACK[-1])
        if too_old or said > moment or not _turn_order(turns[-1])[1]:
            return None
        return turns

    def remember(
        self,
        owner: Mapping[str, Any],
        access: Mapping[str, Any] | None,
        earlier: Sequence[Sequence[MemoryRecord]],
        stored: Sequence[MemoryRecord],
        window: int,
    ) -> None:
        """Keep the ids of the session's latest turns after a call that stored ``stored``
        (see ``_tails``)."""
        key = _tail_key(owner, access)
        said = [r for r in stored if r.context is not None]
        if not said or (earlier and said[0].time.created_at < earlier[-1][0].time.created_at):
            self._tails.pop(key)  # said before what is stored: the store knows the order
            return
        turns: dict[str, list[str]] = {}
        for record in said:
            message = str(record.user_metadata.get(PART_OF_KEY, record.id))
            turns.setdefault(message, []).append(record.id)
        known = [tuple(r.id for r in turn) for turn in earlier]
        latest = [*known, *(tuple(ids) for ids in turns.values())]
        self._tails.put(key, tuple(latest[-window:]))

    def told(
        self, turn: Sequence[MemoryRecord], heard: Sequence[InputMessage], window: int
    ) -> list[Change]:
        """The changes that give the stored turn before the call's messages those messages
        as its ``after`` context, where it has none: new versions, re-indexed, written with
        the messages (``MemoryStore.put_with``)."""
        after = "\n".join(m.spoken() for m in heard[:window])
        return [
            Change(_with_after(record, after), None, record.metadata.version, NEXT_TURN_REASON)
            for record in turn
            if record.context is not None and record.context.after is None
        ]


def not_told(turn: Sequence[MemoryRecord]) -> None:
    """A concurrent writer changed or deleted the turn ``told`` would have changed: the new
    messages are stored and keep their own context; only the earlier turn's index misses
    them."""
    log.info(
        "the previous turn of session %s kept its context: it changed or went meanwhile",
        turn[0].session_id,
    )


def turn_spoken(turn: Sequence[MemoryRecord]) -> str:
    """A stored turn (its memories: one, or the parts of a long message) as the context of
    the turns after it, as ``InputMessage.spoken(before=True)`` gives it: ``"<speaker>:
    <text>"``, its end kept."""
    said = "\n".join(record.content.raw for record in turn)
    context = turn[0].context
    return context_text(context.speaker if context else None, said, before=True)


def _tail_key(owner: Mapping[str, Any], access: Mapping[str, Any] | None) -> _TailKey:
    roles = tuple(sorted((access or {}).get("allowed_roles", [])))
    return owner["tenant_id"], owner["user_id"], owner["session_id"], roles


def _tail_size(key: _TailKey, tail: _Tail) -> int:
    """A kept tail's bytes, counted as ``caches.size_of`` counts them (every tuple and
    string), without walking the objects generically on every add."""
    strings = [*key[:3], *key[3], *(i for turn in tail for i in turn)]
    tuples = [key, key[3], tail, *tail]
    return sum(map(sys.getsizeof, strings)) + sum(map(sys.getsizeof, tuples))


def _turn_order(turn: Sequence[MemoryRecord]) -> tuple[datetime, bool]:
    """Turns said at one moment: those not yet followed (no ``after``) last."""
    context = turn[-1].context
    return turn[0].time.created_at, context is None or context.after is None


def _part_number(record: MemoryRecord) -> int:
    number = record.user_metadata.get(PART_KEY)
    return number if isinstance(number, int) else 0


def _with_after(record: MemoryRecord, after: str) -> MemoryRecord:
    """``record``'s next version, its ``after`` context set to ``after``."""
    context = record.context or Context()
    metadata = record.metadata.model_copy(update={"version": record.metadata.version + 1})
    return record.model_copy(
        update={"context": context.model_copy(update={"after": after}), "metadata": metadata}
    )
