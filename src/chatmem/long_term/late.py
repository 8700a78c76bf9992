"""A late-interaction rerank of a search's first memories (issue 18): each of the query's
word pieces finds its best match among a memory's (``embeddings.tokens``), and the mean of
those matches moves the memory up or down among the first ``LATE_DEPTH``.

It needs an embedder that keeps word-piece states (``LocalEmbedder.token_states``); with any
other it does nothing. The states of what is added are kept in the store beside their
memories, written in the background (``MemoryStore.put_word_states``), so that a new
process, a CLI's or a restarted service's, ranks as the one that embedded them did. A
memory whose states are neither held nor kept (added before the store kept them, or by a
store that keeps none) keeps its place this time, and its states are computed in the
background, then kept: a search never waits for a memory to be embedded again.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, runtime_checkable

from chatmem import ranking
from chatmem.embeddings.tokens import States, TokenStates, late_scores
from chatmem.errors import ChatmemError
from chatmem.long_term.choosing import Reader
from chatmem.records import Filter, MemoryRecord
from chatmem.stores.base import MemoryStore
from chatmem.text import said_text
from chatmem.threads import lower_priority

#: How many of a ranking's first memories the rerank reorders.
LATE_DEPTH = ranking.SPEAKER_READ

logger = logging.getLogger("chatmem.late")

#: Memories by user (tenant and user id), each with what was embedded for it.
_Owner = tuple[str, str]


@runtime_checkable
class KeepsStates(Protocol):
    """An embedder that keeps the word-piece states of what it embedded."""

    token_states: TokenStates

    def states_of(self, texts: Sequence[str]) -> list[States | None]: ...


class LateRerank:
    """Reorders a ranking's first ``LATE_DEPTH`` by their fused score and their word-piece
    match with the query; keeps the states of what is added in ``store``."""

    def __init__(self, embedder: KeepsStates, store: MemoryStore) -> None:
        self._embedder = embedder
        self._store = store
        self._filling: set[str] = set()
        self._unwritten: defaultdict[_Owner, dict[str, bytes]] = defaultdict(dict)
        self._lock = threading.Lock()
        self._worker: ThreadPoolExecutor | None = None
        self._closed = threading.Event()

    def stored(self, records: Sequence[MemoryRecord]) -> None:
        """Keep the states of ``records``, just embedded, beside them (in the background)."""
        blobs = self.blobs(records)
        kept: defaultdict[_Owner, dict[str, bytes]] = defaultdict(dict)
        for record in records:
            if record.id in blobs:
                kept[record.tenant_id, record.user_id][record.id] = blobs[record.id]
        self._keep(kept)

    def blobs(self, records: Sequence[MemoryRecord]) -> dict[str, bytes]:
        """The states of ``records``, just embedded, as the store keeps them, by id: for a
        writer that stores them with the records (``MemoryStore.put_with``)."""
        held = self._embedder.token_states
        found = {}
        for record in records:
            text = _said(record)
            states = held.get(text)
            if states is not None:  # a summary's memory: its states come with a search
                found[record.id] = states.to_bytes(text)
        return found

    def reranked(
        self,
        ranked: list[ranking.Scored],
        query: str,
        scope: Filter,
        read: Reader,
        weight: float,
    ) -> list[ranking.Scored]:
        """``ranked`` with its first ``LATE_DEPTH`` reordered by their scores plus ``weight``
        times how much more than their mean each matches the query's word pieces (the
        score reported too, within [0, 1]); ``read`` gives their heads (speaker and text)
        within ``scope``, where the states the store keeps are read too."""
        held = self._embedder.token_states
        asked = held.get(query)
        if weight <= 0 or asked is None or len(ranked) < 2:
            return ranked
        head = ranked[:LATE_DEPTH]
        heads = read([s.id for s in head])
        texts = {i: said_text(h.speaker, h.text) for i, h in heads.items()}  # summaries aside
        held_states = {i: held.get(t) for i, t in texts.items()}
        missing = [i for i, found in held_states.items() if found is None]
        if missing:
            held_states.update(self._read(missing, texts, scope, asked.rows.shape[1]))
        self._fill(scope, {i: texts[i] for i, found in held_states.items() if found is None})
        have = [s.id for s in head if held_states.get(s.id) is not None]
        if len(have) < 2:
            return ranked
        matches = late_scores(asked, [h for h in (held_states[i] for i in have) if h])
        # What each memory matches more than the head's mean is added to its score (less:
        # taken off); one without states counts as the mean: it keeps its score.
        mean = float(matches.mean())
        extra = {i: weight * (float(m) - mean) for i, m in zip(have, matches, strict=True)}
        return ranking.favour(head, extra) + ranked[len(head) :]

    def _read(
        self, ids: list[str], texts: dict[str, str], scope: Filter, dimension: int
    ) -> dict[str, States]:
        """The states the store keeps for ``ids``, those of the text each has now (held
        from now on)."""
        try:
            kept = self._store.word_states(ids, scope)
        except ChatmemError as exc:  # boundary: states are derived, a search does without
            logger.warning("word-piece states not read for user %r: %s", scope.user_id, exc)
            return {}
        found = {}
        for memory_id, blob in kept.items():
            states = States.from_bytes(blob, texts[memory_id], dimension)
            if states is not None:
                self._embedder.token_states.put(texts[memory_id], states)
                found[memory_id] = states
        return found

    def _fill(self, scope: Filter, texts: dict[str, str]) -> None:
        """Compute the states of ``texts`` (by memory id) in the background, once each at a
        time, and keep them in the store."""
        with self._lock:
            todo = {i: t for i, t in texts.items() if i not in self._filling}
            self._filling.update(todo)
        if todo and not self._later(lambda: self._compute(scope, todo)):
            with self._lock:
                self._filling.difference_update(todo)

    def _compute(self, scope: Filter, texts: dict[str, str]) -> None:
        """One text a model call, until done or closed: ``close`` waits for one at most."""
        owner = (scope.tenant_id, scope.require_user())
        try:
            for memory_id, text in texts.items():
                if self._closed.is_set():
                    return
                (states,) = self._embedder.states_of([text])
                if states is not None:
                    self._keep({owner: {memory_id: states.to_bytes(text)}})
        finally:
            with self._lock:
                self._filling.difference_update(texts)

    def _keep(self, blobs: dict[_Owner, dict[str, bytes]]) -> None:
        """Write ``blobs`` in the background; those of calls made meanwhile go with them."""
        if not blobs:
            return
        with self._lock:
            first = not self._unwritten
            for owner, states in blobs.items():
                self._unwritten[owner].update(states)
        if first:
            self._later(self._write)

    def _write(self) -> None:
        with self._lock:
            unwritten, self._unwritten = self._unwritten, defaultdict(dict)
        for (tenant_id, user_id), states in unwritten.items():
            scope = Filter(tenant_id=tenant_id, user_id=user_id)
            try:
                self._store.put_word_states(states, scope)
            except ChatmemError as exc:  # boundary: states are derived, a search does without
                logger.warning("word-piece states not kept for user %r: %s", user_id, exc)

    def _later(self, task: Callable[[], None]) -> bool:
        """Run ``task`` in the background thread; False when closed."""
        with self._lock:  # ``close`` sets ``_closed`` under it: no worker starts after
            if self._closed.is_set():
                return False
            if self._worker is None:
                self._worker = ThreadPoolExecutor(
                    1, thread_name_prefix="chatmem-late", initializer=lower_priority
                )
            worker = self._worker
        try:
            worker.submit(task)
        except RuntimeError:  # shutting down
            return False
        return True

    def wait(self) -> None:
        """Until the states computed and written so far, and those their work started, are
        kept (a benchmark that times searches at rest after a bulk load; tests)."""
        while True:
            with self._lock:
                worker = self._worker
            if worker is None:
                return
            try:
                worker.submit(lambda: None).result()  # one thread: after all before it
            except RuntimeError:  # closed meanwhile: close writes what is left
                return
            with self._lock:
                if not (self._filling or self._unwritten):
                    return

    def close(self) -> None:
        """Stop computing states (the text being embedded finishes, the rest are dropped)
        and write those not yet kept."""
        with self._lock:
            self._closed.set()
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.shutdown(wait=True, cancel_futures=True)
        self._write()


def _said(record: MemoryRecord) -> str:
    """The text the rerank finds ``record``'s states by (``said_text``)."""
    speaker = record.context.speaker if record.context else None
    return said_text(speaker, record.content.raw)
