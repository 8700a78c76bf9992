"""A chat turn is embedded without the day it was said; the day stays in the keyword index
(``chatmem.text.embedding_text``, docs/benchmarks.md "The day out of the vector", issue 18).
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from chatmem import LongTermMemory
from chatmem.records import Filter
from chatmem.text import embedding_text, index_fields

SAID = "I went to the LGBTQ support group yesterday and it was so powerful."


def _said_on(memory: LongTermMemory, user: str, day: datetime) -> str:
    message = {"role": "user", "name": "Caroline", "content": SAID, "timestamp": day}
    (added,) = memory.add([message], user_id=user, session_id="s1")
    return added.id


def test_the_same_words_said_on_two_days_get_one_vector_and_keep_their_day_in_the_index(
    memory: LongTermMemory,
) -> None:
    may = _said_on(memory, "u1", datetime(2023, 5, 8, 13, 56, tzinfo=UTC))
    june = _said_on(memory, "u2", datetime(2024, 6, 20, 9, 0, tzinfo=UTC))
    first = memory.store.get([may], Filter(user_id="u1"))[0]
    second = memory.store.get([june], Filter(user_id="u2"))[0]
    assert embedding_text(first) == embedding_text(second) == f"Caroline: {SAID}"
    vectors = memory.store.vectors([may], Filter(user_id="u1"))[may]
    again = memory.store.vectors([june], Filter(user_id="u2"))[june]
    assert np.array_equal(vectors, again)
    assert np.allclose(vectors, memory.embedder.embed([f"Caroline: {SAID}"])[0], atol=1e-6)
    # The day is the keyword half's: indexed in words, and a search by it finds the turn.
    assert index_fields(first).when == "8 May 2023"
    assert index_fields(second).when == "20 June 2024"
    hits = memory.search("June 2024", user_id="u2", k=3)
    assert [h.record.id for h in hits][:1] == [june]
    assert hits[0].keyword_score is not None
