"""A late-interaction rerank of a search's first memories (issue 18): each of the query's
word pieces finds its best match among a memory's (``embeddings.tokens``), and the mean of
those matches moves the memory up or down among the first ``LATE_DEPTH``.

It needs an embedder that keeps word-piece states (``LocalEmbedder.token_states``); with any
other it does nothing. A memory whose states are not held (embedded by another process, or
pushed out of the budget) keeps its place this time, and its states are computed in the
background for the next search: a search never waits for a memory to be embedded again.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, runtime_checkable

from chatmem import ranking
from chatmem.embeddings.tokens import States, TokenStates, late_scores
from chatmem.long_term.choosing import Reader
from chatmem.text import said_text
from chatmem.threads import lower_priority

#: How many of a ranking's first memories the rerank reorders.
LATE_DEPTH = ranking.SPEAKER_READ


@runtime_checkable
class KeepsStates(Protocol):
    """An embedder that keeps the word-piece states of what it embedded."""

    token_states: TokenStates

    def states_of(self, texts: Sequence[str]) -> list[States | None]: ...


class LateRerank:
    """Reorders a ranking's first ``LATE_DEPTH`` by their fused score and their word-piece
    match with the query."""

    def __init__(self, embedder: KeepsStates) -> None:
        self._embedder = embedder
        self._filling: set[str] = set()
        self._lock = threading.Lock()
        self._filler: ThreadPoolExecutor | None = None
        self._closed = threading.Event()

    def reranked(
        self, ranked: list[ranking.Scored], query: str, read: Reader, weight: float
    ) -> list[ranking.Scored]:
        """``ranked`` with its first ``LATE_DEPTH`` reordered by their scores plus ``weight``
        times how much more than their mean each matches the query's word pieces (the
        score reported too, within [0, 1]); ``read`` gives their heads (speaker and text)."""
        held = self._embedder.token_states
        asked = held.get(query)
        if weight <= 0 or asked is None or len(ranked) < 2:
            return ranked
        head = ranked[:LATE_DEPTH]
        heads = read([s.id for s in head])
        texts = {i: said_text(h.speaker, h.text) for i, h in heads.items()}  # summaries aside
        held_states = {i: held.get(t) for i, t in texts.items()}
        self._fill([texts[i] for i, found in held_states.items() if found is None])
        have = [s.id for s in head if held_states.get(s.id) is not None]
        if len(have) < 2:
            return ranked
        matches = late_scores(asked, [h for h in (held_states[i] for i in have) if h])
        # What each memory matches more than the head's mean is added to its score (less:
        # taken off); one without states counts as the mean: it keeps its score.
        mean = float(matches.mean())
        extra = {i: weight * (float(m) - mean) for i, m in zip(have, matches, strict=True)}
        return ranking.favour(head, extra) + ranked[len(head) :]

    def _fill(self, texts: list[str]) -> None:
        """Compute ``texts``' states in the background, once each at a time."""
        if self._closed.is_set():
            return
        with self._lock:
            todo = [t for t in texts if t not in self._filling]
            if not todo:
                return
            self._filling.update(todo)
            if self._filler is None:
                self._filler = ThreadPoolExecutor(
                    1, thread_name_prefix="chatmem-late-fill", initializer=lower_priority
                )
            filler = self._filler
        try:
            filler.submit(self._compute, todo)
        except RuntimeError:  # shutting down
            with self._lock:
                self._filling.difference_update(todo)

    def _compute(self, texts: list[str]) -> None:
        """One text a model call, until done or closed: ``close`` waits for one at most."""
        try:
            for text in texts:
                if self._closed.is_set():
                    return
                self._embedder.states_of([text])
        finally:
            with self._lock:
                self._filling.difference_update(texts)

    def close(self) -> None:
        """Stop computing states: the text being embedded finishes, the rest are dropped."""
        self._closed.set()
        with self._lock:
            filler, self._filler = self._filler, None
        if filler is not None:
            filler.shutdown(wait=True, cancel_futures=True)
