"""Everything one running service holds, built from its config (no global state).

``Runtime.start(config)`` opens the parts in order and never fails because of memory (F1):

- the service state (keys, response chains, the extraction queue, webhook deliveries,
  sessions by default): in PostgreSQL when the memory store is PostgreSQL (schema
  ``<prefix>_service``), shared by every replica; else a SQLite file in ``server.data_dir``;
  unusable, PostgreSQL falls back to that file and the file to memory, logged;
- the long-term store and the embedder; unusable, memory is off for the run, logged as
  ``ERROR: memory store unavailable, memory disabled``, and chat is still served;
- the retriever, the extraction worker (a background thread) and the webhook sender.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from chatmem.caches import MiB
from chatmem.embeddings.base import Embedder
from chatmem.embeddings.local import LocalEmbedder
from chatmem.embeddings.openai import OpenAIEmbedder
from chatmem.errors import ChatmemError
from chatmem.extraction.base import Extractor
from chatmem.extraction.llm import LLMExtractor
from chatmem.extraction.offline import OfflineExtractor
from chatmem.foreground import FOREGROUND
from chatmem.formats import render_messages
from chatmem.llm.base import ModelRole
from chatmem.llm.client import ModelRegistry
from chatmem.long_term import LongTermMemory
from chatmem.messages import Message, SessionKey, now_ms
from chatmem.records import Filter
from chatmem.retrieval import Retriever, UsageRecorder
from chatmem.server.auth import KeyStore
from chatmem.server.background import AfterAnswer
from chatmem.server.config import ServiceConfig
from chatmem.server.maintenance import Maintenance, start_maintenance
from chatmem.server.metrics import Metrics
from chatmem.server.response_store import ResponseStore
from chatmem.server.webhooks import WebhookSender
from chatmem.sessions import open_session_store
from chatmem.sessions.base import SessionStore
from chatmem.sessions.memory import InMemorySessionStore
from chatmem.short_term import OverflowPolicy, ShortTermMemory
from chatmem.threads import lower_priority
from chatmem.worker import (
    ExtractionScheduler,
    InMemoryOutbox,
    Outbox,
    SQLiteOutbox,
    Triggers,
    Worker,
)

if TYPE_CHECKING:
    from chatmem.server.pg_state import PostgresState

logger = logging.getLogger("chatmem.server")

SERVICE_DB = "service.db"
#: With state shared by replicas, how long a key's lookup is trusted before it is asked
#: again (a key revoked on another replica stops working here within this).
KEY_CACHE_S = 5.0
#: Tries to reach a configured session store at start before keeping sessions in memory.
SESSION_STORE_TRIES = 3


def default_data_dir() -> Path:
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "chatmem"


@dataclass
class Runtime:
    """The parts of a running service. ``long_term`` is None when memory is off;
    ``memory_error`` says why when it was meant to be on."""

    config: ServiceConfig
    data_dir: Path
    keys: KeyStore
    short_term: ShortTermMemory
    outbox: Outbox
    scheduler: ExtractionScheduler
    metrics: Metrics
    models: ModelRegistry
    webhooks: WebhookSender | None
    responses: ResponseStore
    long_term: LongTermMemory | None = None
    retriever: Retriever | None = None
    usage: UsageRecorder | None = None
    worker: Worker | None = None
    memory_error: str | None = None
    database_error: str | None = None
    #: Why sessions are kept in this process's memory (None: in their configured store).
    sessions_error: str | None = None
    #: The PostgreSQL state every replica shares (with a PostgreSQL memory store), or None
    #: for the data dir's SQLite file.
    shared_state: PostgresState | None = None
    #: The lifecycle jobs' scheduler (config ``maintenance``); None when memory is off.
    maintenance: Maintenance | None = None
    _closed: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stopping: threading.Event = field(default_factory=threading.Event, repr=False)
    _sweeper: threading.Thread | None = field(default=None, repr=False)
    #: Loads the heaviest users' caches after start (``start_warming``).
    _warmer: threading.Thread | None = field(default=None, repr=False)
    #: The (tenant, user) pairs it warmed, once it is done.
    warmed: list[tuple[str, str]] = field(default_factory=list, repr=False)
    #: The turns being stored after their answers; a stop drains them before closing.
    after_answer: AfterAnswer = field(default_factory=AfterAnswer, repr=False)
    _session_locks: tuple[threading.Lock, ...] = field(
        default_factory=lambda: tuple(threading.Lock() for _ in range(64)), repr=False
    )

    @classmethod
    def start(cls, config: ServiceConfig, *, embedder: Embedder | None = None) -> Runtime:
        """Open everything ``config`` names; ``embedder`` replaces the configured one (tests
        share one loaded model)."""
        data_dir = Path(config.server.data_dir) if config.server.data_dir else default_data_dir()
        shared, database, database_error = _service_state(config, data_dir)
        keys = _keys(config, database, shared)
        sessions, sessions_error = _sessions(config, database, shared)
        outbox: Outbox = (
            shared.outbox()
            if shared is not None
            else SQLiteOutbox(database)
            if database
            else InMemoryOutbox()
        )
        models = config.models()
        metrics = Metrics()
        runtime = cls(
            config=config,
            data_dir=data_dir,
            keys=keys,
            short_term=ShortTermMemory(
                store=sessions,
                policy=OverflowPolicy(
                    strategy="summarize", max_turns=config.memory.sessions.max_turns
                ),
                summarizer=models.get(ModelRole.SUMMARIZATION),
                state_every=None,
                log_cache_bytes=round(config.memory.sessions.log_cache_mib * MiB),
            ),
            outbox=outbox,
            # What is pending is read from the session log (queue_pending), so the
            # scheduler keeps counts only, not a second copy of every quiet session's turns.
            scheduler=ExtractionScheduler(
                Triggers(every_turns=config.memory.extraction_batch_size, topic_change=None),
                keep_messages=False,
            ),
            metrics=metrics,
            models=models,
            webhooks=WebhookSender.from_config(
                config.webhooks.session_end,
                metrics,
                database,
                table=shared.deliveries if shared is not None else None,
            ),
            responses=ResponseStore(
                database,
                limit=config.server.max_responses,
                memory_bytes=round(config.server.responses_memory_mib * MiB),
                table=shared.responses() if shared is not None else None,
            ),
            database_error=database_error,
            sessions_error=sessions_error,
            shared_state=shared,
        )
        if config.memory.enabled:
            runtime._open_memory(embedder or _embedder(config))
        metrics.queue_depth = runtime.queue_depth
        runtime.start_sweeper()
        runtime.maintenance = start_maintenance(runtime, database)
        return runtime

    def _open_memory(self, embedder: Embedder) -> None:
        memory = self.config.memory
        try:
            long_term = LongTermMemory.open(
                memory.store_uri() or f"sqlite:///{(self.data_dir / 'chatmem.db').resolve()}",
                embedder=embedder,
            )
        except ChatmemError as exc:
            self.memory_error = str(exc)
            logger.error("memory store unavailable, memory disabled: %s", exc)
            return
        warm = getattr(long_term.embedder, "warm", None)
        if callable(warm):
            warm()  # load the model now, not inside the first request's search budget
        self.long_term = long_term
        self.usage = UsageRecorder(long_term)
        self.retriever = Retriever(
            long_term,
            rewriter=self.models.get(ModelRole.MEMORY_REWRITE),
            k=memory.default_retrieval_limit,
            threshold=memory.default_similarity_threshold,
            budget_tokens=memory.memory_tokens,
            search_budget_ms=memory.search_budget_ms,
            usage=self.usage,
        )
        if memory.auto_store:
            self.worker = Worker(self.outbox, long_term, _extractor(self.models))
            self.worker.start()
        logger.info("memory on: %s", long_term.store)
        self.start_warming(long_term)

    def start_warming(self, long_term: LongTermMemory) -> None:
        """Load the heaviest users' vectors and fields into the store's caches in a
        background thread (the stores that can: SQLite's ``warm_heaviest``), so their first
        searches do not read vectors scattered through the file. It gives way to searches
        (``chatmem.foreground``) and stops at ``close``."""
        warm = getattr(long_term.store, "warm_heaviest", None)
        if not callable(warm):
            return

        def run() -> None:
            lower_priority()

            def stop() -> bool:
                FOREGROUND.pause()
                return self._stopping.is_set()

            try:
                self.warmed = warm(stop=stop)
            except ChatmemError as exc:  # boundary: warming is an optimisation
                logger.warning("warming the heaviest users' caches failed: %s", exc)

        self._warmer = threading.Thread(target=run, name="chatmem-warm", daemon=True)
        self._warmer.start()

    @property
    def memory_on(self) -> bool:
        return self.long_term is not None

    def queue_depth(self) -> int:
        counts = self.outbox.counts()
        return sum(n for state, n in counts.items() if state.value in {"pending", "leased"})

    def observe(
        self,
        key: SessionKey,
        messages: list[Message],
        *,
        ended: bool = False,
        extract: bool = True,
    ) -> None:
        """Queue a session's messages for extraction when a trigger fires (SPEC L3, F5).

        The session log, already stored, is what gets queued: everything past the session's
        ``extracted_upto`` mark, which then moves on. So a turn that waits for a trigger
        survives a crash (``recover`` queues it at the next start), and ending a session
        queues whatever is left. ``extract=False``: these messages (the last ones appended)
        are passed over, and what waited before them is queued now. Extraction is best
        effort: a queue that cannot be written is logged, never raised, since the session
        itself is already stored."""
        if not (self.memory_on and self.config.memory.auto_store):
            return
        try:
            if not extract:
                self.queue_pending(key, skip_last=len(messages))
                return
            reason = self.scheduler.check(key, messages, session_end=ended)
            if reason is not None or (ended and self.scheduler.triggers.session_end):
                self.scheduler.take(key)
                self.queue_pending(key)
        except ChatmemError as exc:  # boundary: extraction is best effort (F3, F4)
            logger.warning("Memory: queueing extraction of %s failed: %s", key.session_id, exc)

    def queue_pending(self, key: SessionKey, *, skip_last: int = 0) -> int:
        """Queue the session's messages past its extraction mark (but the last
        ``skip_last``) as one batch, and move the mark to the log's end. Returns how many
        messages were queued. Enqueueing is idempotent, so a crash between the two steps
        queues the same batch again, which the outbox keeps once.

        Replicas share the log and the outbox but not this lock: two of them may read the
        same mark and different ends of the log. A batch is named by the message it starts
        at, so the outbox keeps the first range; the loser moves the mark only to that
        range's end, and what lies past it waits for the session's next batch."""
        store = self.short_term.store
        with self._session_lock(key):
            upto = store.length(key)
            mark = store.state(key).extracted_upto
            end = max(mark, upto - skip_last)
            pending = store.read(key, mark, end) if end > mark else []
            if pending:
                kept = self.outbox.get(self.outbox.enqueue(key, pending))
                if kept is not None and kept.messages[-1].id != pending[-1].id:
                    upto = mark + len(kept.messages)  # another replica's range won
                if self.worker is not None:
                    self.worker.notify()
            if upto > mark:
                store.mark_extracted(key, upto)
        return len(pending)

    def recover(self, limit: int = 100_000) -> int:
        """Queue what every live session left unqueued (a crash, or a stop past its grace
        period): at start, and at a graceful stop. Returns the messages queued."""
        if not (self.memory_on and self.config.memory.auto_store):
            return 0
        queued = 0
        for key in self.short_term.store.unextracted(limit):
            try:
                queued += self.queue_pending(key)
            except ChatmemError as exc:  # boundary: one session must not stop the rest
                logger.warning("Memory: queueing %s failed: %s", key.session_id, exc)
        if queued:
            logger.info("Memory: queued %d messages left unextracted", queued)
        return queued

    def _session_lock(self, key: SessionKey) -> threading.Lock:
        return self._session_locks[hash(key) % len(self._session_locks)]

    def end_session(self, key: SessionKey) -> Message | None:
        """End a session: queue what is left for extraction (first, so a crash cannot leave
        an ended session unqueued), keep its episodic summary and send the
        ``session.ended`` webhook (queued; never waits on the receiver)."""
        self.observe(key, [], ended=True)
        episode = self.short_term.end(key)
        if self.webhooks is not None:
            self.webhooks.send(
                {
                    "event": "session.ended",
                    "tenant_id": key.tenant_id,
                    "user_id": key.user_id,
                    "session_id": key.session_id,
                    "summary": episode.content if episode is not None else None,
                    "messages": render_messages(self.short_term.history(key), "rich"),
                }
            )
        return episode

    def end_idle_sessions(self) -> list[SessionKey]:
        """End the sessions quiet for ``memory.sessions.idle_minutes``."""
        idle_ms = int(self.config.memory.sessions.idle_minutes * 60_000)
        ended = []
        for key in self.short_term.store.idle(now_ms() - idle_ms):
            try:
                self.end_session(key)
            except ChatmemError as exc:  # boundary: one bad session must not stop the sweep
                logger.warning("ending idle session %s failed: %s", key.session_id, exc)
                continue
            ended.append(key)
        if ended:
            logger.info("ended %d idle sessions", len(ended))
        return ended

    def start_sweeper(self, every_s: float | None = None) -> None:
        """End idle sessions from a background thread until ``close``."""
        idle_s = self.config.memory.sessions.idle_minutes * 60
        period = every_s if every_s is not None else min(60.0, max(1.0, idle_s / 4))

        def sweep() -> None:
            try:
                self.recover()  # what the last run left unqueued (a crash)
            except ChatmemError as exc:  # boundary: the store may be down for a while
                logger.warning("queueing unextracted sessions failed: %s", exc)
            while not self._stopping.wait(period):
                try:
                    self.end_idle_sessions()
                except ChatmemError as exc:  # boundary: the store may be down for a while
                    logger.warning("idle session sweep failed: %s", exc)

        self._sweeper = threading.Thread(target=sweep, name="chatmem-sessions", daemon=True)
        self._sweeper.start()

    def forget_user(
        self,
        tenant_id: str,
        user_id: str,
        project_id: str | None = None,
        roles: frozenset[str] | None = None,
    ) -> int:
        """Forget a user: long-term memories, and (for the whole user) sessions, response
        chains and queued extraction, so nothing comes back from a batch still waiting.
        With ``roles`` (a caller holding them), only the memories they open go, as a delete
        by id would answer 404 for the rest (SPEC L7). Returns the memories deleted."""
        deleted = 0
        if self.long_term is not None:
            scope = Filter.checked(
                {
                    "tenant_id": tenant_id,
                    "user_id": user_id,
                    "project_id": project_id,
                    "reader_roles": roles,
                }
            )
            deleted = self.long_term.delete_all(scope, reason="user forgotten")
        if project_id is None:
            self.short_term.store.delete_user(tenant_id, user_id)
            self.responses.delete_user(tenant_id, user_id)
            self.outbox.discard_user(tenant_id, user_id)
            self.scheduler.forget_user(tenant_id, user_id)
        return deleted

    def close(self) -> None:
        """Stop in dependency order: the sweeper; queue what sessions left unextracted
        (so nothing waits in memory); the webhook sender and the worker after the work
        they are in; then the stores, each of which waits for the calls inside it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stopping.set()
        if self._sweeper is not None:
            self._sweeper.join(10)
        if self._warmer is not None:
            self._warmer.join()  # a user at most: it reads the store closed below
        if self.maintenance is not None:
            self.maintenance.stop()  # before the stores it reads and its leases' database
        try:
            self.recover()
        except ChatmemError as exc:  # boundary: the next start queues it instead
            logger.warning("queueing unextracted sessions at stop failed: %s", exc)
        if self.webhooks is not None:
            self.webhooks.close()
        if self.worker is not None:
            self.worker.stop()
        if self.retriever is not None:
            self.retriever.close()
        if self.usage is not None:
            self.usage.close()
        if self.long_term is not None:
            self.long_term.close()
        self.models.close()
        self.outbox.close()
        self.responses.close()
        self.short_term.store.close()
        self.keys.close()
        if self.shared_state is not None:
            self.shared_state.close()


def _service_database(data_dir: Path) -> tuple[Path | None, str | None]:
    path = data_dir / SERVICE_DB
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        with open(path, "ab"):
            pass
    except OSError as exc:
        logger.error("service database %s unavailable, keeping state in memory: %s", path, exc)
        return None, str(exc)
    return path, None


#: Query options of a store URI that are chatmem's, not libpq's.
_STORE_OPTIONS = frozenset({"prefix", "cache", "cache_ttl", "cache_prefix"})


def service_location(store_uri: str | None) -> tuple[str, str] | None:
    """Where the service state goes for a memory store URI: (conninfo, schema) for a
    PostgreSQL store (the schema is ``<prefix>_service``, ``chatmem_service`` by default),
    else None (the state stays in the data dir's SQLite file)."""
    if not store_uri or "://" not in store_uri:
        return None
    parts = urlsplit(store_uri)
    if parts.scheme not in {"postgresql", "postgres"}:
        return None
    options = parse_qsl(parts.query, keep_blank_values=True)
    prefix = dict(options).get("prefix")
    schema = f"{prefix}_service" if prefix else "chatmem_service"
    libpq = urlencode([(name, value) for name, value in options if name not in _STORE_OPTIONS])
    return urlunsplit(parts._replace(query=libpq)), schema


def _service_state(
    config: ServiceConfig, data_dir: Path
) -> tuple[PostgresState | None, Path | None, str | None]:
    """Where keys, response chains, the outbox, webhooks and sessions live: PostgreSQL
    beside a PostgreSQL memory store (so replicas share them), else the data dir's SQLite
    file, else memory. Returns (shared state, SQLite file, why the file is unusable)."""
    location = service_location(config.memory.store_uri())
    if location is not None:
        try:
            from chatmem.server.pg_state import PostgresState

            return PostgresState(location[0], schema=location[1]), None, None
        except (ChatmemError, ImportError) as exc:
            logger.error(
                "PostgreSQL service state unavailable, keeping it in %s: %s", data_dir, exc
            )
    return None, *_service_database(data_dir)


def _keys(
    config: ServiceConfig, database: Path | None, shared: PostgresState | None = None
) -> KeyStore:
    auth = config.auth
    admin = auth.admin_key or (os.environ.get(auth.admin_key_env) if auth.admin_key_env else None)
    if shared is not None:
        # Other replicas revoke keys too: a cached answer is asked again after a while.
        keys = KeyStore(None, admin_key=admin, table=shared.keys(), cache_s=KEY_CACHE_S)
    else:
        keys = KeyStore(database, admin_key=admin)
    for entry in auth.keys:
        key = entry.key or os.environ.get(entry.key_env or "")
        if not key:
            logger.error("auth.keys: %s is not set; that key is skipped", entry.key_env)
            continue
        keys.add_fixed(key, entry.tenant, entry.roles, entry.name)
    return keys


def _sessions(
    config: ServiceConfig, database: Path | None, shared: PostgresState | None = None
) -> tuple[SessionStore, str | None]:
    """The session store, and why it is process memory when it was meant to be durable."""
    uri = config.memory.sessions.store
    if uri is None and shared is not None:
        return shared.sessions(), None
    if uri is None:
        if database is None:
            return InMemorySessionStore(), "no service database"
        return open_session_store(str(database)), None
    error = ""
    for attempt in range(SESSION_STORE_TRIES):
        try:
            return open_session_store(uri), None
        except ChatmemError as exc:
            error = str(exc)
            if attempt + 1 < SESSION_STORE_TRIES:
                time.sleep(0.5 * 2**attempt)  # a store restarting, or a replica's peers busy
    logger.error(
        "session store %s unavailable, keeping sessions in memory (lost at stop, not shared"
        " with other replicas; answers say X-Chatmem-Turn: memory-only): %s", uri, error,
    )  # fmt: skip
    return InMemorySessionStore(), error


def _embedder(config: ServiceConfig) -> Embedder:
    embedding = config.memory.embedding
    if embedding.base_url is None:
        return LocalEmbedder(
            query_model=embedding.query_model, document_model=embedding.document_model
        )
    key = os.environ.get(embedding.api_key_env) if embedding.api_key_env else None
    return OpenAIEmbedder(
        embedding.model, embedding.dimension, base_url=embedding.base_url, api_key=key
    )


def _extractor(models: ModelRegistry) -> Extractor:
    model = models.get(ModelRole.MEMORY_EXTRACTION)
    return OfflineExtractor() if model is None else LLMExtractor(model)


__all__ = ["Runtime", "default_data_dir", "service_location"]
