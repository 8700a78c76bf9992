"""``LongTermMemory``, the facade of long-term memory (SPEC L2): add, search, get, update,
forget, history, export and import over one store and one embedder, every call scoped to a
tenant and, for searches and per-user calls, a user.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial
from typing import IO, Any, Literal

import pydantic

from chatmem import checks, ranking
from chatmem import text as textlib
from chatmem.embeddings import Embedder, LocalEmbedder, embed_queries
from chatmem.errors import NotFoundError
from chatmem.long_term import inputs, jsonl
from chatmem.long_term.choosing import Reader, Shortlisted, chosen, read_times, remembering
from chatmem.long_term.inputs import MessageLike, heard_messages, message_items
from chatmem.long_term.jsonl import OnConflict
from chatmem.long_term.late import KeepsStates, LateRerank
from chatmem.long_term.latest import latest_word
from chatmem.long_term.message_records import AddOptions, call_records, expiring
from chatmem.long_term.session_tails import SessionTails, not_told, turn_spoken
from chatmem.long_term.speakers import Speakers, favoured, name_free_vector
from chatmem.records import (
    Content,
    EmbeddingInfo,
    Entry,
    Filter,
    HistoryEntry,
    MemoryMetadata,
    MemoryRecord,
    MemoryType,
    Page,
    SearchResult,
    Vector,
    utcnow,
    validation_error,
)
from chatmem.stores import MemoryStore, open_store
from chatmem.stores.base import Change, Head, SearchQuery, Usage
from chatmem.threads import Prefetched

#: How many messages before and after a message give it its context.
DEFAULT_CONTEXT_WINDOW = 1
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
        self._late = LateRerank(embedder, store) if isinstance(embedder, KeepsStates) else None
        self.ranking = ranking_config
        self.context_window = checks.whole(context_window, "context_window", low=0)
        self._embedding = EmbeddingInfo(model=embedder.model, dimension=embedder.dimension)
        store.bind_embedding(self._embedding)
        self._embedder_threads: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._tails = SessionTails(store)
        self._speakers = Speakers()

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

        A chat message with no text (an assistant's tool call, an image) is skipped, never
        refused, and its tool calls are kept; what is refused is in ``long_term.inputs``. A
        text longer than ``MAX_TEXT_CHARS`` is stored as several memories, its parts, with
        ``PART_KEY``, ``PARTS_KEY`` and ``PART_OF_KEY`` in their metadata
        (``long_term.message_records``).
        """
        items = message_items(messages)
        owner = _owner(tenant_id, user_id, agent_id, project_id, session_id)
        access = {"allowed_roles": sorted(set(allowed_roles))} if allowed_roles else None
        heard = heard_messages(items)
        extras = {"importance": checks.optional_number(importance, "importance"), "tags": tags}
        options = AddOptions(owner, metadata, type, extras, access)
        window = self.context_window
        earlier = self._tails.earlier(owner, heard, access, window) if session_id else []
        records = call_records(heard, options, [turn_spoken(t) for t in earlier], window)
        told = self._tails.told(earlier[-1], heard, window) if earlier and records else []
        stored = self._stored([expiring(r, expires_at) for r in records], told)
        if session_id and stored:
            self._tails.remember(owner, access, earlier, stored, window)
        return stored

    def add_records(self, records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
        """Store fully formed records (embedded here) in one atomic write."""
        return self._stored(records, [])

    def _stored(
        self, records: Sequence[MemoryRecord], told: Sequence[Change]
    ) -> list[MemoryRecord]:
        """``add_records``, with the word-piece states of the records and ``told`` (the
        previous turn's new version, ``SessionTails.told``) in the same write."""
        if not records:
            return []
        vectors = self.embedder.embed([textlib.embedding_text(r) for r in records])
        stamped = [r.model_copy(update={"embedding": self._embedding}) for r in records]
        states = self._late.blobs(stamped) if self._late is not None and self.reranks_late else None
        entries = [Entry(r, v) for r, v in zip(stamped, vectors, strict=True)]
        if not self.store.put_with(entries, states=states, then=told):
            not_told([c.record for c in told])
        self._speakers.saw(stamped)
        return stamped

    def keep_word_states(self, records: Sequence[MemoryRecord]) -> None:
        """Keep in the store the word-piece states the late rerank reads of ``records``,
        just written with a new vector, in the background (when it reranks): for a writer
        that writes through ``store`` itself (the write policy, consolidation)."""
        if self._late is not None and self.ranking.late_weight > 0:
            self._late.stored(records)

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
            "importance": checks.optional_number(importance, "importance"),
            "confidence": checks.optional_number(confidence, "confidence"),
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
        if vector is not None:
            self.keep_word_states([new])
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
        late: bool = True,
        light: bool = False,
    ) -> list[SearchResult]:
        """Hybrid search of one user's memories: the best ``k`` with a score of at least
        ``threshold`` (the fused score of ``chatmem.ranking`` with the moves below in it, as
        reported); a memory whose speaker said the same words in one ranked above it only
        where too few others pass (``RankingConfig.repeats_last``). What someone the query
        names said ranks higher (``speaker_bonus``), and the query's vector leaves out the
        names of the speakers it names (``name_free_share``, ``chatmem.long_term.speakers``).
        A question about time favours what says when (``time_bonus``); for any other
        query, what ends by asking a question comes after what tells (``question_penalty``);
        one about the present ("now") orders the k found latest first (``present_bonus``)
        and puts the latest word on the first above it, at its score (``latest_word``).
        Among the first 50, what matches the query's word pieces one by one better than the
        others gains (``late_weight``, ``chatmem.long_term.late``), unless ``late`` is false.
        ``light`` is a search under load (the retriever's, while others wait for a search
        thread): no late rerank or latest word, and one model run for the query, without the
        speakers it names (``name_free_share`` as 1) where the full search embeds it twice.

        Facts that were superseded (``valid_to`` in the past) are left out unless
        ``include_superseded`` is set or the filter asks for a moment (``valid_at``, or
        ``known_at``: as of then): what is true now comes first, and what was true before
        stays answerable (SPEC X3).
        """
        scope = self._search_scope(user_id, tenant_id, filter)
        k = inputs.check_search(query, k, threshold, include_superseded, late, light)
        records: dict[str, MemoryRecord] = {}
        read = remembering(
            lambda ids: {r.id: r for r in self.store.get(ids, scope)}, records, Head.of
        )

        # The head that favouring and the late rerank read is read once, and whole when the
        # results will hold it all (k of at least ``SPEAKER_READ``): 50 memories of 1-3K
        # characters cost 0.9 ms to read as heads, then again as records.
        peek = read
        if k < ranking.SPEAKER_READ:
            peek = remembering(partial(self.store.heads, scope=scope), {}, lambda head: head)
        found = self._ranked(query, scope, k, threshold, include_superseded, peek, late=late,
                             light=light, ahead=records)  # fmt: skip
        ranked, current_only = found
        chosen = self._chosen(ranked, scope, k, current_only, read)
        return [
            SearchResult(
                record=records[s.id],
                score=s.score,
                vector_score=s.vector_score,
                keyword_score=s.keyword_score,
            )
            for s, _ in chosen
        ]

    def settle(self) -> None:
        """Until the background work of what was added so far is done: the word-piece
        states of the memories written beside them (after a bulk load of long memories
        that is seconds of writes a benchmark would otherwise time its searches against)."""
        if self._late is not None:
            self._late.wait()

    @property
    def reranks_late(self) -> bool:
        """Whether a search here runs the late rerank (an embedder that keeps word-piece
        states and a ``late_weight`` above 0): what ``late=False`` would leave out."""
        return self._late is not None and self.ranking.late_weight > 0

    @property
    def lightens(self) -> bool:
        """Whether ``light=True`` leaves anything out here: the late rerank, or the second
        embedding of a query that names a speaker (``name_free_share`` between 0 and 1)."""
        return self.reranks_late or 0 < self.ranking.name_free_share < 1

    def shortlist(
        self,
        query: str,
        *,
        user_id: str,
        tenant_id: str = "default",
        k: int = 5,
        threshold: float | None = None,
        filter: Filter | None = None,
        include_superseded: bool = False,
        late: bool = True,
        light: bool = False,
    ) -> list[Shortlisted]:
        """What ``search`` finds, in its order, with each memory's ``Head`` (speaker, text,
        importance, times) in place of its record: for a caller that reranks many and
        shows few (``chatmem.retrieval.search`` reads 4 x k) and reads whole only the
        records it keeps (``records``); ``late`` and ``light`` as for ``search``. No record
        is parsed: through the proxy under 16 clients, parsing the records reranked was the
        largest single cost of the interpreter lock (docs/benchmarks.md, "A rerank that
        reads what it ranks by")."""
        scope = self._search_scope(user_id, tenant_id, filter)
        k = inputs.check_search(query, k, threshold, include_superseded, late, light)
        read = remembering(partial(self.store.heads, scope=scope), {}, lambda head: head)
        ranked, current_only = self._ranked(
            query, scope, k, threshold, include_superseded, read, late=late, light=light
        )
        chosen = self._chosen(ranked, scope, k, current_only, read)
        return [Shortlisted(*s, head) for s, head in chosen]

    def records(
        self,
        ids: Sequence[str],
        *,
        user_id: str,
        tenant_id: str = "default",
        filter: Filter | None = None,
    ) -> dict[str, MemoryRecord]:
        """The records of ``ids`` that are still there and within ``filter`` (as
        ``search`` scopes it), by id: those a ``shortlist`` kept."""
        scope = self._search_scope(user_id, tenant_id, filter)
        return {r.id: r for r in self.store.get(ids, scope)}

    def _search_scope(self, user_id: str, tenant_id: str, filter: Filter | None) -> Filter:
        base = filter.model_dump(exclude_none=True) if filter else {}
        return Filter.checked({**base, "tenant_id": tenant_id, "user_id": user_id}, "filter")

    def _ranked(
        self,
        query: str,
        scope: Filter,
        k: int,
        threshold: float | None,
        include_superseded: bool,
        read: Reader,
        *,
        late: bool,
        light: bool = False,
        ahead: dict[str, MemoryRecord] | None = None,
    ) -> tuple[list[ranking.Scored], bool]:
        """The store's candidates for ``query`` within ``scope`` (a user's), fused and
        favoured (``read`` gives the heads favouring reads), best first, the late rerank's
        moves in them when ``late`` and not ``light``; and whether only current facts count
        (see ``search``); into ``ahead`` the store may read the keyword half's best k
        records as it waits for the vector, where k is at least ``SPEAKER_READ`` (the
        search reads its head whole then) and not ``light``."""
        tenant_id, user_id = scope.tenant_id, scope.require_user()
        # Who the query names: capitalised words, and known speakers' names in any case.
        speakers = self._speakers.named(tenant_id, user_id, query)
        names = ranking.named(query) | frozenset(speakers)
        share = 1.0 if light else self.ranking.name_free_share
        # Embedded where the store asks, in a thread of its own while it waits on I/O.
        vector = partial(name_free_vector, self._embed_queries, query, speakers, share)
        embedding = Prefetched(vector, self._embedding_pool)
        candidates = self.store.search(
            SearchQuery(
                filter=scope,
                text=query,
                candidates=max(self.ranking.candidates, 2 * k),
                embed=embedding,
                prefetch=embedding.start,
                ready=embedding.ready,
                read_ahead=0 if light or ahead is None or k < ranking.SPEAKER_READ else k,
                ahead=ahead,
            )
        )
        current_only = not include_superseded and scope.valid_at is None and scope.known_at is None
        fused = ranking.fuse(candidates, self.ranking)
        ranked = favoured(fused, query, names, scope, k, read, self.ranking, self._speakers)
        if late and not light and self._late is not None:
            ranked = self._late.reranked(ranked, query, scope, read, self.ranking.late_weight)
        # The threshold holds for the scores with the bonuses and the late rerank's moves in
        # them, and before the present's reorder, which changes the order of what passed.
        ranked = ranking.select(ranked, len(ranked), threshold)
        if self.ranking.present_bonus > 0 and ranking.asks_now(query):
            ranked = ranking.latest_first(ranked, k, self.ranking.present_bonus, read_times(read))
            if self.ranking.latest_word and not light:
                ranked = latest_word(self.store, ranked, scope, k, read, embedding)
        return ranked, current_only

    def _chosen(
        self,
        ranked: list[ranking.Scored],
        scope: Filter,
        k: int,
        current_only: bool,
        read: Reader,
    ) -> list[tuple[ranking.Scored, Head]]:
        """``choosing.chosen``, the speakers of every memory read learned on the way."""
        picked, seen = chosen(
            ranked,
            k,
            current_only=current_only,
            repeats_last=self.ranking.repeats_last,
            read=read,
        )
        self._speakers.heard(scope.tenant_id, scope.require_user(), seen.values())
        return picked

    def _embed_queries(self, texts: Sequence[str]) -> list[Vector]:
        return embed_queries(self.embedder, texts)

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
        return jsonl.export_jsonl(self.store, scope, out, page_size)

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
        memory is stored as a new one under an id derived from it (``jsonl.home_id``), and
        links to it within the import follow it. Which ids others hold is not the importer's
        to learn, so such a line is answered exactly as a line with an unused id, the second
        time too: importing it again meets the memory the first import made.

        With ``roles`` (an importer holding them, SPEC L7), a memory hidden from those roles
        counts as held by someone else, and a record that names a role outside them is an
        ImportFormatError: an import never reads, replaces or writes what its importer may
        not read."""
        return jsonl.import_jsonl(
            self.store, self.embedder, self._embedding, lines, on_conflict, roles
        )

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
        if self._late is not None:
            self._late.close()
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


def _owner(
    tenant_id: str,
    user_id: str,
    agent_id: str | None,
    project_id: str | None,
    session_id: str | None,
) -> dict[str, Any]:
    """The ids the memories of an ``add`` call belong to, checked first: a bad id is named
    as itself, not as a field of every message."""
    owner = {
        "tenant_id": tenant_id,
        "user_id": user_id,
        "agent_id": agent_id,
        "project_id": project_id,
        "session_id": session_id,
    }
    Filter.checked(owner)
    return owner


def _ttl(expires_at: datetime | Literal["never"] | None) -> dict[str, datetime | None]:
    """The ``time`` fields an update's ``expires_at`` changes."""
    if expires_at is None:
        return {}
    return {"expires_at": None if expires_at == "never" else expires_at}
