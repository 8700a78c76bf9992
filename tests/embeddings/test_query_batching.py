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
    # One call for the eight: a batch of more than two is never split.
    assert embedder.query_calls == calls + 1
    assert embedder.queries_embedded >= len(QUESTIONS)
    for question in QUESTIONS:
        # Dynamic int8 scales each call's activations together: a batch moves a vector a
        # little, never its meaning.
        assert float(results[question] @ alone[question]) > 0.99


def test_a_lone_query_is_embedded_at_once_and_cached() -> None:
    embedder = LocalEmbedder().warm()
    first = embedder.embed_query("Where do I live?")
    again = embedder.embed_query("Where do I live?")
    assert embedder.query_calls == 1 and np.array_equal(first, again)


def test_a_query_and_its_twin_run_on_two_sessions_at_once() -> None:
    """Two queries of one search (the query and its name-free twin) are split over two
    sessions, so each gets the vector it gets alone; with one session they share a call.
    (Eight waiting together make one call: the test above.)"""
    pair = ["What did Caroline research?", "What did research?"]
    alone = LocalEmbedder(query_sessions=1).warm()
    expected = [alone.embed_query(text) for text in pair]
    split = LocalEmbedder(query_sessions=2).warm()
    vectors = split.embed_queries(pair)
    assert split.query_calls == 2 and split.queries_embedded == 2
    assert all(np.array_equal(v, e) for v, e in zip(vectors, expected, strict=True))
    one = LocalEmbedder(query_sessions=1).warm()
    together = one.embed_queries(pair)
    assert one.query_calls == 1 and one.queries_embedded == 2
    assert all(float(v @ e) > 0.98 for v, e in zip(together, expected, strict=True))


def test_the_second_session_is_made_only_for_a_pair() -> None:
    """A lone query never loads the second copy of the model; the first pair does."""
    embedder = LocalEmbedder(query_sessions=2)
    embedder.embed_query("Where do I live?")
    assert len(embedder._made) == 1
    embedder.embed_queries(["Where does Ana live?", "Where does live?"])
    assert len(embedder._made) == 2
