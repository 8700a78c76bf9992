"""Queries that arrive together are embedded in one call of the model (issue 14)."""

from __future__ import annotations

import threading
import time

import numpy as np

from chatmem import LocalEmbedder

QUESTIONS = [f"What did I pay for the bike I bought in city number {n}?" for n in range(8)]


def test_queries_waiting_beside_a_running_batch_go_in_one_call() -> None:
    embedder = LocalEmbedder().warm()
    alone = {q: LocalEmbedder().warm().embed_query(q) for q in QUESTIONS}
    with embedder._turn:  # a batch is running: whoever comes now waits beside it
        embedder._running = True
    results: dict[str, np.ndarray] = {}
    threads = [
        threading.Thread(target=lambda q=q: results.__setitem__(q, embedder.embed_query(q)))
        for q in QUESTIONS
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while len(embedder._waiting) < len(QUESTIONS):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    calls = embedder.query_calls
    with embedder._turn:  # the running batch ends
        embedder._running = False
        embedder._turn.notify_all()
    for thread in threads:
        thread.join(30)
    assert embedder.query_calls == calls + 1 and embedder.queries_embedded >= len(QUESTIONS)
    for question in QUESTIONS:
        # Dynamic int8 scales each call's activations together: a batch moves a vector a
        # little, never its meaning.
        assert float(results[question] @ alone[question]) > 0.99


def test_a_lone_query_is_embedded_at_once_and_cached() -> None:
    embedder = LocalEmbedder().warm()
    first = embedder.embed_query("Where do I live?")
    again = embedder.embed_query("Where do I live?")
    assert embedder.query_calls == 1 and np.array_equal(first, again)
