"""Long-term memory over one store and one embedder: add, search, update, forget, history,
export and import (SPEC L2). ``AsyncLongTermMemory`` runs the same code in worker threads.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import json
import logging
import threading
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import IO, Any, Concatenate, Literal, ParamSpec, TypeVar

import numpy as np
import pydantic

from chatmem import ranking, strict_json
from chatmem import text as textlib
from chatmem.caches import LRUCache, MiB
from chatmem.embeddings import Embedder, LocalEmbedder, embed_query
from chatmem.errors import ConflictError, ImportFormatError, NotFoundError, ValidationError
from chatmem.records import (
    MAX_TEXT_CHARS,
    Content,
    Context,
    EmbeddingInfo,
    Entry,
    Filter,
    HistoryEntry,
    MemoryMetadata,
    MemoryRecord,
    MemoryType,
    Page,
    SearchResult,
    Source,
    TimeInfo,
    Vector,
    new_id,
    utcnow,
    validation_error,
)
from chatmem.stores import MemoryStore, open_store
from chatmem.stores.base import Change, SearchQuery, Usage

P = ParamSpec("P")
R = TypeVar("R")

log = logging.getLogger("chatmem.long_term")

#: Message roles accepted by ``add``.
ROLES = frozenset({"user", "assistant", "system", "tool"})
#: How many messages before and after a message give it its context.
DEFAULT_CONTEXT_WINDOW = 1
#: How far back from a session's new message ``add`` looks for the session's earlier turns,
#: widening in these steps until it finds one: the same moment (a whole session sent with
#: one time), then a minute, an hour, a day, a week. A turn further from its session's
#: previous turn gets no context from it. Each step is one read of the user's memories in
#: that span, by the (tenant, user, created_at) index.
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
EXPORT_FORMAT = "chatmem.export/1"
#: A neighbouring message is cut to this many characters when it serves as context.
MAX_CONTEXT_CHARS = 2_000

MessageLike = str | Mapping[str, Any]
#: Content part types whose ``text`` is a message's text (chat completions and responses).
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
#: Metadata of the memories a text too long for one is stored as: the part's number (from
#: 1), how many parts there are, and what they are parts of (the message id, else a new id
#: they share). ``Filter(metadata={PART_OF_KEY: id})`` finds them all.
PART_KEY, PARTS_KEY, PART_OF_KEY = "part", "parts", "part_of"
#: What ``import_jsonl`` does with a memory whose id is already stored.
OnConflict = Literal["fail", "skip", "replace"]
#: How far from 1 an imported vector's length may be and still be kept as it is.
UNIT_TOLERANCE = 1e-3


#: Threads that embed search queries while stores read (searches of several threads at once).
EMBEDDING_THREADS = 4


class LongTermMemory:
    """The long-term memory of many tenants and users in one store.

    Every operation is scoped to a tenant (``"default"`` unless given) and, for searches
    and per-user operations, to a user: nothing crosses either boundary.
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        *,
        ranking_config: ranking.RankingConfig = ranking.DEFAULT_RANKING,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.ranking = ranking_config
        self.context_window = context_window
        self._embedding = EmbeddingInfo(model=embedder.model, dimension=embedder.dimension)
        store.bind_embedding(self._embedding)
        self._embedder_threads: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        # (tenant, user, session, roles) -> the ids of the session's latest turns, oldest
        # first, each turn the ids of its memories; checked against the store on every use.
        self._tails: LRUCache[_TailKey, _Tail] = LRUCache(SESSION_TAILS_BYTES)

    @classmethod
    def open(
        cls, uri: str | None = None, *, embedder: Embedder | None = None, **options: Any
    ) -> LongTermMemory:
        """Open the store at ``uri`` (see ``chatmem.stores``) with the local embedder."""
        store = open_store(uri)
        try:
            return cls(store, embedder or LocalEmbedder(), **options)
        except BaseException:  # boundary: close what we opened, then re-raise
            store.close()
            raise

    # -- writes ------------------------------------------------------------------------------

    def add(
        self,
        messages: MessageLike | Sequence[MessageLike],
        *,
        user_id: str,
        tenant_id: str = "default",
        agent_id: str | None = None,
        project_id: str | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        type: MemoryType | None = None,
        importance: float | None = None,
        tags: Sequence[str] | None = None,
        allowed_roles: Sequence[str] | None = None,
        expires_at: datetime | None = None,
    ) -> list[MemoryRecord]:
        """Store a text, or each message of a chat, as raw memories; returns the records.
        ``allowed_roles`` restricts who may read them (L7), from the first moment they exist.
        ``expires_at`` is their TTL (``TimeInfo.expires_at``): no read returns them after it.

        A plain text becomes a semantic memory; chat messages become episodic memories, one
        per message, each indexed with its speaker, the day it was said and its neighbouring
        messages as context. The call's memories are one atomic write.

        With a ``session_id``, the session's turns already stored (the latest ones said at or
        before the first new message, with the same ``allowed_roles``) are the first
        messages' earlier context, so a chat added one message at a time is indexed as one
        added whole. The stored turn just before then gets the new messages as its ``after``
        context, if it has none yet: a new version in a second write (its text, vector and
        times unchanged; history reason ``NEXT_TURN_REASON``), skipped if a concurrent
        writer changed or deleted it first.

        A chat message with no text (``content`` null, empty or blank, or content parts none
        of which is text: an assistant's tool call, an image) is skipped, never refused. Tool
        calls are kept: in the context of the messages around them (``[called name(args)]``)
        and, with a tool result's ``tool_call_id``, in ``content.structured`` of a message
        that has text. A chat in which no message has text stores nothing and returns
        ``[]``; a blank plain text, a message without ``content`` (unless it calls tools) or
        with content of another type is a ValidationError.

        A text longer than ``MAX_TEXT_CHARS`` (a pasted document) is stored as several
        memories of at most ``text.PART_CHARS`` characters, cut between paragraphs or
        sentences (``text.memory_texts``), with the message's provenance and context and
        ``PART_KEY``, ``PARTS_KEY`` and ``PART_OF_KEY`` in their metadata.
        """
        items = [messages] if isinstance(messages, str | Mapping) else list(messages)
        if not items:
            raise ValidationError("nothing to add", field="messages")
        base = {
            "tenant_id": tenant_id,
            "user_id": user_id,
            "agent_id": agent_id,
            "project_id": project_id,
            "session_id": session_id,
        }
        Filter.checked(base)  # names a bad id as itself, not as a field of every message
        extras = {"importance": importance, "tags": tags}
        access = {"allowed_roles": sorted(set(allowed_roles))} if allowed_roles else None
        said = [_message(item, f"messages[{i}]") for i, item in enumerate(items)]
        # Turns that say nothing are left out, also as their neighbours' context.
        heard = [m for m in said if m.role is None or m.speaks()]
        earlier = self._session_tail(base, heard, access) if session_id else []
        spoken = [_turn_spoken(turn) for turn in earlier]
        records = [
            record
            for index, message in enumerate(heard)
            if message.role is None or message.content.strip()
            for record in self._records_from(
                heard, index, base, metadata, type, extras, access, spoken
            )
        ]
        stored = self.add_records([_expiring(r, expires_at) for r in records])
        if earlier and stored:
            self._tell_previous(earlier[-1], heard)
        if session_id and stored:
            self._remember_tail(base, access, earlier, stored)
        return stored

    def add_records(self, records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
        """Store fully formed records (embedded here) in one atomic write."""
        if not records:
            return []
        vectors = self.embedder.embed([textlib.embedding_text(r) for r in records])
        stamped = [r.model_copy(update={"embedding": self._embedding}) for r in records]
        self.store.put([Entry(r, v) for r, v in zip(stamped, vectors, strict=True)])
        return stamped

    def _records_from(
        self,
        said: Sequence[_Message],
        index: int,
        base: Mapping[str, Any],
        metadata: Mapping[str, Any] | None,
        memory_type: MemoryType | None,
        extras: Mapping[str, Any],
        access_control: Mapping[str, Any] | None = None,
        earlier: Sequence[str] = (),
    ) -> builtins.list[MemoryRecord]:
        """The memory ``said[index]`` is stored as, or its parts when it is too long;
        ``earlier`` is what was said before ``said[0]`` (oldest first), as context."""
        message = said[index]
        user_metadata = {**(metadata or {}), **message.metadata}
        if message.role is not None:
            user_metadata.setdefault("role", message.role)
        if message.name is not None:
            user_metadata.setdefault("name", message.name)
        meta: dict[str, Any] = {"source": message.source}
        meta.update({k: v for k, v in extras.items() if v is not None})
        created = message.timestamp or utcnow()
        fields = {
            **base,
            "type": memory_type
            or (MemoryType.SEMANTIC if message.role is None else MemoryType.EPISODIC),
            "metadata": meta,
            "time": {"created_at": created, "updated_at": created},
            "provenance": [message.id] if message.id else [],
            "context": self._context(said, index, earlier),
        }
        if access_control:
            fields["access_control"] = access_control
        texts = textlib.memory_texts(message.content)
        if len(texts) == 1:
            metas = [user_metadata]
        else:
            whole = {PARTS_KEY: len(texts), PART_OF_KEY: message.id or new_id()}
            metas = [{**user_metadata, PART_KEY: n, **whole} for n in range(1, len(texts) + 1)]
        structured = message.structured()
        return [
            MemoryRecord.checked(
                {**fields, "content": {"raw": text, "structured": structured}, "user_metadata": m},
                message.field,
            )
            for text, m in zip(texts, metas, strict=True)
        ]

    def _context(
        self, said: Sequence[_Message], index: int, earlier: Sequence[str] = ()
    ) -> dict[str, Any] | None:
        """A chat message's speaker and neighbours (``earlier``, then the call's messages
        before it; the call's messages after it); None for plain text."""
        message = said[index]
        if message.role is None:
            return None
        before = [*earlier, *(m.spoken() for m in said[:index])][-self.context_window :]
        later = said[index + 1 : index + 1 + self.context_window]
        return {
            "speaker": message.name or message.role,
            "before": "\n".join(before) or None,
            "after": "\n".join(m.spoken() for m in later) or None,
        }

    def _session_tail(
        self,
        base: Mapping[str, Any],
        heard: Sequence[_Message],
        access: Mapping[str, Any] | None,
    ) -> builtins.list[builtins.list[MemoryRecord]]:
        """The session's latest stored turns said at or before the call's first message,
        oldest first, at most ``context_window`` of them, each as its memories (a long
        message is several parts). Only chat turns with the call's ``allowed_roles`` count:
        a turn some readers may not see is no context for one they may."""
        if not heard or heard[0].role is None or self.context_window < 1:
            return []
        roles = sorted((access or {}).get("allowed_roles", []))
        scope = Filter(
            tenant_id=base["tenant_id"], user_id=base["user_id"], session_id=base["session_id"]
        )
        moment = Filter(created_before=heard[0].timestamp or utcnow()).created_before
        assert moment is not None
        until = moment + timedelta(milliseconds=1)  # turns of the very same moment count
        remembered = self._remembered_tail(_tail_key(base, access), scope, until, roles)
        if remembered is not None:
            return remembered
        for span in SESSION_LOOKBACK:
            window = scope.model_copy(
                update={"created_after": moment - span, "created_before": until}
            )
            turns = self._latest_turns(window, roles)
            if turns:
                return turns
        return []

    def _latest_turns(
        self, scope: Filter, roles: Sequence[str]
    ) -> builtins.list[builtins.list[MemoryRecord]]:
        """The last ``context_window`` chat turns of ``scope`` with ``roles``, oldest first.

        Turns said at the same moment keep the store's order, except that one without an
        ``after`` context comes last: it is the one no turn has followed yet (a store that
        orders ties by id, as Milvus does, would otherwise pick any of them)."""
        turns: dict[str, builtins.list[MemoryRecord]] = {}  # a message's memories, by message
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
        return [sorted(turn, key=_part_number) for turn in ordered[-self.context_window :]]

    def _remembered_tail(
        self, key: _TailKey, scope: Filter, until: datetime, roles: Sequence[str]
    ) -> builtins.list[builtins.list[MemoryRecord]] | None:
        """The session's latest turns as this object last stored them, read by id; None when
        they are unknown or may no longer be the latest (one is gone, the last was said
        after ``until``, or it has an ``after`` context: another writer added a turn), when
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
        too_old = said < until - timedelta(milliseconds=1) - SESSION_LOOKBACK[-1]
        if too_old or said >= until or not _turn_order(turns[-1])[1]:
            return None
        return turns

    def _remember_tail(
        self,
        base: Mapping[str, Any],
        access: Mapping[str, Any] | None,
        earlier: Sequence[Sequence[MemoryRecord]],
        stored: Sequence[MemoryRecord],
    ) -> None:
        """Keep the ids of the session's latest turns after this call (see ``_tails``)."""
        key = _tail_key(base, access)
        said = [r for r in stored if r.context is not None]
        if not said or (earlier and said[0].time.created_at < earlier[-1][0].time.created_at):
            self._tails.pop(key)  # said before what is stored: the store knows the order
            return
        turns: dict[str, builtins.list[str]] = {}
        for record in said:
            message = str(record.user_metadata.get(PART_OF_KEY, record.id))
            turns.setdefault(message, []).append(record.id)
        known = [tuple(r.id for r in turn) for turn in earlier]
        latest = [*known, *(tuple(ids) for ids in turns.values())]
        self._tails.put(key, tuple(latest[-self.context_window :]))

    def _tell_previous(self, turn: Sequence[MemoryRecord], heard: Sequence[_Message]) -> None:
        """Give the stored turn before the call's messages those messages as its ``after``
        context, unless it has one: a new version, re-indexed, in a write of its own."""
        after = "\n".join(m.spoken() for m in heard[: self.context_window])
        changes = [
            Change(_with_after(record, after), None, record.metadata.version, NEXT_TURN_REASON)
            for record in turn
            if record.context is not None and record.context.after is None
        ]
        if not changes:
            return
        try:
            self.store.update(changes)
        except (ConflictError, NotFoundError) as exc:
            # A concurrent writer changed or deleted the turn: the new messages are stored
            # and keep their own context; only the earlier turn's index misses them.
            log.info(
                "the previous turn of session %s kept its context: %s", turn[0].session_id, exc
            )

    def update(
        self,
        memory_id: str,
        text: str | None = None,
        *,
        tenant_id: str = "default",
        user_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        importance: float | None = None,
        confidence: float | None = None,
        tags: Sequence[str] | None = None,
        reason: str | None = None,
        structured: Mapping[str, Any] | None = None,
        allowed_roles: Sequence[str] | None = None,
        expires_at: datetime | Literal["never"] | None = None,
    ) -> MemoryRecord:
        """Change a memory's text and/or fields; its version goes up and history keeps the
        old one. ``metadata`` keys are merged into the free-form metadata; ``structured``
        replaces ``content.structured``; ``allowed_roles`` replaces who may read it (SPEC L7;
        an empty list opens it to every reader of the user); ``expires_at`` sets its TTL
        (``"never"`` removes it). An expired memory is not found."""
        old = self.get(memory_id, tenant_id=tenant_id, user_id=user_id)
        meta_changes = {
            "importance": importance,
            "confidence": confidence,
            "tags": list(tags) if tags is not None else None,
        }
        try:
            meta = MemoryMetadata.model_validate(
                {
                    **old.metadata.model_dump(),
                    **{k: v for k, v in meta_changes.items() if v is not None},
                    "version": old.metadata.version + 1,
                }
            )
            content = old.content if text is None else Content(raw=text)
            if structured is not None:
                content = content.model_copy(update={"structured": dict(structured)})
            access = old.access_control.model_dump()
            if allowed_roles is not None:
                access["allowed_roles"] = sorted(set(allowed_roles))
        except pydantic.ValidationError as exc:
            raise validation_error(exc) from None
        new = MemoryRecord.checked(
            {
                **old.model_dump(),
                "access_control": access,
                "content": content.model_dump(),
                "metadata": meta.model_dump(),
                "time": {**old.time.model_dump(), "updated_at": utcnow(), **_ttl(expires_at)},
                "user_metadata": {**old.user_metadata, **(metadata or {})},
            }
        )
        vector = None
        if text is not None and text != old.content.raw:
            vector = self.embedder.embed([textlib.embedding_text(new)])[0]
        self.store.update([Change(new, vector, old.metadata.version, reason)])
        return new

    def delete(
        self,
        memory_id: str,
        *,
        tenant_id: str = "default",
        user_id: str | None = None,
        reason: str | None = None,
    ) -> None:
        """Forget one memory (its history stays). Raises NotFoundError if it is not there."""
        scope = self._scope(tenant_id, user_id).model_copy(update={"ids": (memory_id,)})
        if not self.store.delete(scope, reason):
            raise NotFoundError(memory_id)

    def delete_all(self, scope: Filter, *, reason: str | None = None) -> int:
        """Forget every memory ``scope`` matches (a user, project, session, tenant …),
        expired ones included unless ``scope.expired`` is True (only those)."""
        if scope.expired is False:
            scope = scope.model_copy(update={"expired": None})
        return len(self.store.delete(scope, reason))

    # -- reads -------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        user_id: str,
        tenant_id: str = "default",
        k: int = 5,
        threshold: float | None = None,
        filter: Filter | None = None,
        include_superseded: bool = False,
    ) -> list[SearchResult]:
        """Hybrid search of one user's memories: the best ``k`` with a fused score of at
        least ``threshold`` (see ``chatmem.ranking`` for the score).

        Facts that were superseded (``valid_to`` in the past) are left out unless
        ``include_superseded`` is set or the filter asks for a moment (``valid_at``): what is
        true now comes first, and what was true before stays answerable (SPEC X3).
        """
        if not query or not query.strip():
            raise ValidationError("query is empty", field="query")
        if k < 1:
            raise ValidationError("must be at least 1", field="k")
        base = filter.model_dump(exclude_none=True) if filter else {}
        scope = Filter.checked({**base, "tenant_id": tenant_id, "user_id": user_id}, "filter")
        # The embedding runs in a thread of its own while the store starts on the words.
        embedding = self._embedding_pool().submit(embed_query, self.embedder, query)
        candidates = self.store.search(
            SearchQuery(
                filter=scope,
                text=query,
                candidates=max(self.ranking.candidates, 2 * k),
                embed=embedding.result,
            )
        )
        current_only = not include_superseded and scope.valid_at is None
        # Superseded facts are rare; asking for twice as many leaves room to drop them.
        best = ranking.select(
            ranking.fuse(candidates, self.ranking), 2 * k if current_only else k, threshold
        )
        records = {r.id: r for r in self.store.get([s.id for s in best], scope)}
        now = utcnow()
        results = [
            SearchResult(
                record=records[s.id],
                score=s.score,
                vector_score=s.vector_score,
                keyword_score=s.keyword_score,
            )
            for s in best
            if s.id in records and not (current_only and _superseded(records[s.id], now))
        ]
        return results[:k]

    def get(
        self,
        memory_id: str,
        *,
        tenant_id: str = "default",
        user_id: str | None = None,
        roles: Collection[str] | None = None,
    ) -> MemoryRecord:
        """One memory by id (raises NotFoundError if it is not visible in that scope, or
        to a reader holding ``roles``: see ``Filter.reader_roles``)."""
        found = self.store.get([memory_id], self._scope(tenant_id, user_id, roles))
        if not found:
            raise NotFoundError(memory_id)
        return found[0]

    def list(self, scope: Filter, *, limit: int = 100, cursor: str | None = None) -> Page:
        """Memories matching ``scope``, oldest first, a page at a time."""
        return self.store.list(scope, limit, cursor)

    def count(self, scope: Filter) -> int:
        """How many memories match ``scope``."""
        return self.store.count(scope)

    def history(
        self,
        memory_id: str,
        *,
        tenant_id: str = "default",
        user_id: str | None = None,
        roles: Collection[str] | None = None,
    ) -> builtins.list[HistoryEntry]:
        """Every version of a memory, oldest first, its deletion included. A memory whose
        latest version a reader holding ``roles`` may not see is not found for that reader,
        nor is one any version of which named roles the reader lacks."""
        scope = self._scope(tenant_id, user_id, roles)
        entries = self.store.history(memory_id, scope)
        versions = [r for e in entries for r in (e.old, e.new) if r is not None]
        if not entries or not all(scope.may_read(r) for r in versions):
            raise NotFoundError(memory_id)
        return entries

    def record_access(
        self, uses: Sequence[Usage], *, user_id: str, tenant_id: str = "default"
    ) -> builtins.list[str]:
        """Write uses of a user's memories (access counts, last access, decay scores)
        without a new version or a history row; returns the ids written, skipping
        memories that are gone or not that user's."""
        return self.store.touch(uses, Filter(tenant_id=tenant_id, user_id=user_id))

    # -- export and import ---------------------------------------------------------------------

    def export_jsonl(self, scope: Filter, out: IO[str], *, page_size: int = 500) -> int:
        """Write every memory ``scope`` matches as JSON lines (record and vector); returns
        the count. ``import_jsonl`` reads them back exactly."""
        written = 0
        cursor: str | None = None
        while True:
            page = self.store.list(scope, page_size, cursor)
            vectors = self.store.vectors([r.id for r in page.records], scope)
            for record in page.records:
                vector = vectors.get(record.id)
                line = {
                    "format": EXPORT_FORMAT,
                    "record": record.model_dump(mode="json"),
                    "vector": vector.tolist() if vector is not None else None,
                }
                out.write(json.dumps(line, separators=(",", ":")) + "\n")
                written += 1
            if page.next_cursor is None:
                return written
            cursor = page.next_cursor

    def import_jsonl(
        self,
        lines: Iterable[str],
        *,
        on_conflict: OnConflict = "fail",
        roles: Collection[str] | None = None,
    ) -> int:
        """Read lines written by ``export_jsonl`` and store them atomically: a malformed
        line raises ImportFormatError and nothing of the file is stored.

        ``on_conflict`` is for a memory whose user already holds its id: ``fail`` (nothing
        is stored), ``skip`` it, or ``replace`` the stored one (a new version; history keeps
        the old, and the replacements are a second write). Returns how many memories were
        stored or replaced.

        An id held by anyone else (another user, or another tenant) is no conflict: the
        memory is stored as a new one under a new id, and links to it within the import
        follow it. Which ids others hold is not the importer's to learn, so such a line is
        answered exactly as a line with an unused id.

        With ``roles`` (an importer holding them, SPEC L7), a memory hidden from those roles
        counts as held by someone else, and a record that names a role outside them is an
        ImportFormatError: an import never reads, replaces or writes what its importer may
        not read."""
        entries = [e for e in (_parse_line(t, n) for n, t in enumerate(lines, 1)) if e]
        if roles is not None:
            for number, (record, _) in enumerate(entries, 1):
                lacking = sorted(set(record.access_control.allowed_roles) - set(roles))
                if lacking:
                    raise ImportFormatError(
                        f"names roles the importer does not hold: {', '.join(lacking)}",
                        line=number,
                        field="record.access_control.allowed_roles",
                    )

        missing = [i for i, (_, v) in enumerate(entries) if v is None]
        if missing:
            fresh = self.embedder.embed([textlib.embedding_text(entries[i][0]) for i in missing])
            for i, vector in zip(missing, fresh, strict=True):
                entries[i] = (entries[i][0], vector)
        ready = [
            Entry(
                r.model_copy(update={"embedding": self._embedding}), np.asarray(v, dtype=np.float32)
            )
            for r, v in entries
        ]
        for number, entry in enumerate(ready, 1):
            if entry.vector.shape != (self._embedding.dimension,):
                raise ImportFormatError(
                    f"vector has {entry.vector.shape[0]} dimensions, the store has "
                    f"{self._embedding.dimension}",
                    line=number,
                    field="vector",
                )
        stored = self._stored_versions(ready, roles)
        if on_conflict == "fail" and stored:
            raise ValidationError(f"memory {next(iter(stored))!r} already exists", field="id")
        self._put_as_new([e for e in ready if e.record.id not in stored])
        if on_conflict == "replace" and stored:
            self.store.update(
                [_replacing(e, stored[e.record.id]) for e in ready if e.record.id in stored]
            )
            return len(ready)
        return len(ready) - len(stored)

    def _put_as_new(self, entries: builtins.list[Entry]) -> None:
        """Store ``entries`` (none of whose ids their own user holds) atomically, each id
        that someone else holds replaced by a new one."""
        renamed: dict[str, str] = {}
        while True:  # each refusal names one more id to rename; ids are unique in a store
            try:
                self.store.put(_renamed(entries, renamed))
                return
            except ValidationError as exc:
                taken = _held_elsewhere(exc, entries, renamed)
                if taken is None:
                    raise
                renamed[taken] = new_id()

    def _stored_versions(
        self, entries: Sequence[Entry], roles: Collection[str] | None = None
    ) -> dict[str, int]:
        """The stored version of each entry's id that the entry's user already holds, in a
        memory a reader holding ``roles`` may see (None: any)."""
        readers = frozenset(roles) if roles is not None else None
        owners: dict[tuple[str, str], builtins.list[str]] = {}
        for entry in entries:
            owners.setdefault((entry.record.tenant_id, entry.record.user_id), []).append(
                entry.record.id
            )
        return {
            record.id: record.metadata.version
            for (tenant_id, user_id), ids in owners.items()
            for record in self.store.get(
                ids, Filter(tenant_id=tenant_id, user_id=user_id, reader_roles=readers)
            )
        }

    def _embedding_pool(self) -> ThreadPoolExecutor:
        if self._embedder_threads is None:
            with self._pool_lock:
                if self._embedder_threads is None:
                    self._embedder_threads = ThreadPoolExecutor(
                        EMBEDDING_THREADS, thread_name_prefix="chatmem-embed"
                    )
        return self._embedder_threads

    def close(self) -> None:
        """Close the store (and the query-embedding threads)."""
        if self._embedder_threads is not None:
            self._embedder_threads.shutdown(wait=True)
        self.store.close()

    def __enter__(self) -> LongTermMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _scope(tenant_id: str, user_id: str | None, roles: Collection[str] | None = None) -> Filter:
        readers = frozenset(roles) if roles is not None else None
        fields = {"tenant_id": tenant_id, "user_id": user_id, "reader_roles": readers}
        return Filter.checked(fields, "filter")


class _Message:
    """One message of an ``add`` call; ``content`` is "" when it has no text."""

    __slots__ = (
        "role",
        "content",
        "name",
        "id",
        "timestamp",
        "metadata",
        "source",
        "field",
        "tool_calls",
        "tool_call_id",
    )

    def __init__(
        self,
        role: str | None,
        content: str,
        name: str | None,
        id: str | None,
        timestamp: datetime | None,
        metadata: dict[str, Any],
        *,
        field: str,
        tool_calls: builtins.list[dict[str, str]] | None = None,
        tool_call_id: str | None = None,
    ) -> None:
        self.role = role
        self.content = content
        self.name = name
        self.id = id
        self.timestamp = timestamp
        self.metadata = metadata
        self.source = (
            Source.EXPLICIT_USER_INPUT if role in (None, "user") else Source.SYSTEM_GENERATED
        )
        self.field = field
        self.tool_calls = tool_calls or []
        self.tool_call_id = tool_call_id

    def speaks(self) -> bool:
        """Whether the message says anything: a text, or a tool call."""
        return bool(self.content.strip() or self.tool_calls)

    def spoken(self) -> str:
        """``"<speaker>: <text> [called <tool>(<arguments>)]"``, cut to ``MAX_CONTEXT_CHARS``
        (it is context, not content)."""
        calls = (f"[called {call['name']}({call['arguments']})]" for call in self.tool_calls)
        said = " ".join(filter(None, [self.content.strip(), *calls]))
        speaker = self.name or self.role
        text = f"{speaker}: {said}" if speaker else said
        return text[:MAX_CONTEXT_CHARS]

    def structured(self) -> dict[str, Any] | None:
        """The tool calls the message makes, or the call it answers, if any."""
        kept: dict[str, Any] = {}
        if self.tool_calls:
            kept["tool_calls"] = self.tool_calls
        if self.tool_call_id:
            kept["tool_call_id"] = self.tool_call_id
        return kept or None


_TailKey = tuple[str, str, str, tuple[str, ...]]
_Tail = tuple[tuple[str, ...], ...]


def _tail_key(base: Mapping[str, Any], access: Mapping[str, Any] | None) -> _TailKey:
    roles = tuple(sorted((access or {}).get("allowed_roles", [])))
    return base["tenant_id"], base["user_id"], base["session_id"], roles


def _turn_spoken(turn: Sequence[MemoryRecord]) -> str:
    """A stored turn (its memories: one, or the parts of a long message) as a neighbour's
    context, as ``_Message.spoken`` gives it: ``"<speaker>: <text>"``, cut."""
    said = "\n".join(record.content.raw for record in turn)
    context = turn[0].context
    speaker = context.speaker if context else None
    text = f"{speaker}: {said}" if speaker else said
    return text[:MAX_CONTEXT_CHARS]


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


def _ttl(expires_at: datetime | Literal["never"] | None) -> dict[str, datetime | None]:
    """The ``time`` fields an update's ``expires_at`` changes."""
    if expires_at is None:
        return {}
    return {"expires_at": None if expires_at == "never" else expires_at}


def _expiring(record: MemoryRecord, expires_at: datetime | None) -> MemoryRecord:
    """``record`` with the TTL ``expires_at`` (UTC, whole milliseconds), if one is given."""
    if expires_at is None:
        return record
    try:
        time_info = TimeInfo.model_validate({**record.time.model_dump(), "expires_at": expires_at})
    except pydantic.ValidationError as exc:
        raise validation_error(exc, "time") from None
    return record.model_copy(update={"time": time_info})


def _superseded(record: MemoryRecord, now: datetime) -> bool:
    return record.time.valid_to is not None and record.time.valid_to <= now


def _message(item: MessageLike, field: str) -> _Message:
    if isinstance(item, str):
        return _Message(None, item, None, None, None, {}, field=field)
    role = item.get("role")
    if not isinstance(role, str) or role not in ROLES:  # a list or dict cannot be looked up
        raise ValidationError(
            f"role must be one of {sorted(ROLES)}, got {role!r}", field=f"{field}.role"
        )
    calls = _tool_calls(item)
    if "content" not in item and not calls:
        raise ValidationError(
            "is required (null when the message has no text)", field=f"{field}.content"
        )
    content = _text_of(item.get("content"), f"{field}.content")
    metadata = item.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise ValidationError("must be an object", field=f"{field}.metadata")
    name = item.get("name")
    message_id = item.get("id") or item.get("turn_id")
    answers = item.get("tool_call_id")
    return _Message(
        role,
        content,
        str(name) if name is not None else None,
        str(message_id) if message_id is not None else None,
        _timestamp(item.get("timestamp"), f"{field}.timestamp"),
        dict(metadata),
        field=field,
        tool_calls=calls,
        tool_call_id=str(answers) if answers is not None else None,
    )


def _text_of(content: Any, field: str) -> str:
    """A message's text: a string, or the text parts of an OpenAI content list joined; ""
    for null content or a list without text (an image, audio)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            p.get("text")
            for p in content
            if isinstance(p, Mapping)
            and isinstance(p.get("type"), str)
            and p.get("type") in TEXT_PART_TYPES
        ]
        return "\n".join(t for t in texts if isinstance(t, str) and t)
    raise ValidationError("must be a text, null or a list of content parts", field=field)


def _tool_calls(item: Mapping[str, Any]) -> builtins.list[dict[str, str]]:
    """The tool calls a message makes (OpenAI ``tool_calls``, or a legacy
    ``function_call``) as id, name and arguments; a call without a function name is left
    out, and long arguments are clipped."""
    raw = item.get("tool_calls")
    calls = list(raw) if isinstance(raw, list) else []
    if isinstance(item.get("function_call"), Mapping):
        calls.append({"function": item["function_call"]})
    kept = []
    for call in calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            continue
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, default=str)
        entry = {"name": function["name"], "arguments": textlib.clip(arguments)}
        if isinstance(call.get("id"), str):
            entry = {"id": call["id"], **entry}
        if entry["name"]:
            kept.append(entry)
    return kept


def _timestamp(value: Any, field: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value / 1000, tz=UTC)
        except (OverflowError, OSError, ValueError):  # past the years datetime holds
            raise ValidationError("is out of range for a time", field=field) from None
    if isinstance(value, str):
        try:
            return _timestamp(datetime.fromisoformat(value), field)
        except ValueError:
            pass
    raise ValidationError("must be milliseconds since the epoch or an ISO 8601 time", field=field)


def _replacing(entry: Entry, stored_version: int) -> Change:
    """The change that puts an imported record in place of the stored version."""
    record = entry.record
    version = max(record.metadata.version, stored_version + 1)
    metadata = record.metadata.model_copy(update={"version": version})
    return Change(
        record.model_copy(update={"metadata": metadata}), entry.vector, stored_version, "import"
    )


def _held_elsewhere(
    exc: ValidationError, entries: Sequence[Entry], renamed: Mapping[str, str]
) -> str | None:
    """The id of ``entries`` that a store's put refused as taken (every store says
    ``memory '<id>' already exists``), or None for another refusal."""
    if exc.field != "id":
        return None
    for entry in entries:
        if entry.record.id not in renamed and exc.message == (
            f"memory {entry.record.id!r} already exists"
        ):
            return entry.record.id
    return None


def _renamed(entries: builtins.list[Entry], renamed: Mapping[str, str]) -> builtins.list[Entry]:
    """``entries`` with the ids in ``renamed`` replaced, in their records and their links."""
    if not renamed:
        return entries
    moved = []
    for record, vector in entries:
        links = [
            link.model_copy(update={"target_id": renamed.get(link.target_id, link.target_id)})
            for link in record.relations
        ]
        update = {"id": renamed.get(record.id, record.id), "relations": links}
        moved.append(Entry(record.model_copy(update=update), vector))
    return moved


def _parse_line(text: str, number: int) -> tuple[MemoryRecord, Any] | None:
    if not text.strip():
        return None
    try:
        line = strict_json.loads(text)  # no NaN, 64-bit integers, no lone surrogates
    except ValidationError as exc:
        raise ImportFormatError(exc.message, line=number, field=exc.field) from None
    if not isinstance(line, dict) or line.get("format") != EXPORT_FORMAT:
        raise ImportFormatError(f"not a {EXPORT_FORMAT} line", line=number, field="format")
    _refuse_long_text(line.get("record"), number)
    try:
        record = MemoryRecord.checked(line.get("record"), "record")
    except ValidationError as exc:
        raise ImportFormatError(exc.message, line=number, field=exc.field) from None
    vector = line.get("vector")
    return record, None if vector is None else _unit_vector(vector, number)


def _unit_vector(vector: Any, number: int) -> Vector:
    """An imported vector as the stores keep every vector: finite, of length 1. Its
    direction is what it means; a length other than 1 would skew every cosine it is in."""
    if not isinstance(vector, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in vector
    ):
        raise ImportFormatError("must be a list of numbers", line=number, field="vector")
    try:
        values = np.asarray(vector, dtype=np.float64)
    except OverflowError:  # an integer past a float's range
        values = np.array([np.inf])
    if not np.isfinite(values).all():
        raise ImportFormatError("holds NaN or infinite values", line=number, field="vector")
    largest = float(np.abs(values).max(initial=0.0))
    if largest == 0.0:
        raise ImportFormatError("is all zeros: it has no direction", line=number, field="vector")
    if largest <= 1.0 and abs(float(np.linalg.norm(values)) - 1.0) <= UNIT_TOLERANCE:
        return values.astype(np.float32)  # already of length 1: kept exactly as exported
    scaled = values / largest  # first, so that squaring 1e300 cannot overflow
    return (scaled / np.linalg.norm(scaled)).astype(np.float32)


def _refuse_long_text(record: Any, number: int) -> None:
    """An import restores records as they were (ids, versions, history), so a text too long
    for one memory is refused by name rather than split into new records."""
    content = record.get("content") if isinstance(record, dict) else None
    raw = content.get("raw") if isinstance(content, dict) else None
    if isinstance(raw, str) and len(raw) > MAX_TEXT_CHARS:
        raise ImportFormatError(
            f"has {len(raw)} characters; a memory holds at most {MAX_TEXT_CHARS}, and an "
            "import does not split one (LongTermMemory.add stores a longer text as parts)",
            line=number,
            field="record.content.raw",
        )


def _threaded(
    method: Callable[Concatenate[LongTermMemory, P], R],
) -> Callable[Concatenate[AsyncLongTermMemory, P], Coroutine[Any, Any, R]]:
    async def run(self: AsyncLongTermMemory, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, self.sync, *args, **kwargs)

    functools.update_wrapper(run, method)  # keeps the docstring and signature
    return run


class AsyncLongTermMemory:
    """The async face of ``LongTermMemory``: the same methods, awaited, run in threads."""

    def __init__(self, memory: LongTermMemory) -> None:
        self.sync = memory

    @classmethod
    async def open(cls, uri: str | None = None, **options: Any) -> AsyncLongTermMemory:
        return cls(await asyncio.to_thread(LongTermMemory.open, uri, **options))

    add = _threaded(LongTermMemory.add)
    add_records = _threaded(LongTermMemory.add_records)
    update = _threaded(LongTermMemory.update)
    delete = _threaded(LongTermMemory.delete)
    delete_all = _threaded(LongTermMemory.delete_all)
    search = _threaded(LongTermMemory.search)
    get = _threaded(LongTermMemory.get)
    list = _threaded(LongTermMemory.list)
    count = _threaded(LongTermMemory.count)
    history = _threaded(LongTermMemory.history)
    record_access = _threaded(LongTermMemory.record_access)
    export_jsonl = _threaded(LongTermMemory.export_jsonl)
    import_jsonl = _threaded(LongTermMemory.import_jsonl)
    close = _threaded(LongTermMemory.close)

    async def __aenter__(self) -> AsyncLongTermMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
