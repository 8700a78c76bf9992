"""The query vector leaves out the names of the speakers a question names
(``RankingConfig.name_free_share``, ``chatmem.long_term.speakers``, issue 18)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from chatmem import LongTermMemory, RankingConfig, ValidationError
from chatmem.embeddings import LocalEmbedder
from chatmem.long_term.speakers import Speakers, name_free_vector, without
from chatmem.ranking import named
from chatmem.records import Context, Filter, MemoryRecord, Vector
from chatmem.stores.sqlite import SQLiteStore


@pytest.mark.parametrize(
    ("query", "words", "rest"),
    [
        ("What kind of art does Caroline make?", ["Caroline"], "What kind of art does make?"),
        ("Caroline's paintings, what are they of?", ["Caroline"], "paintings, what are they of?"),
        ("Did Melanie’s kids like Carolines?", ["Melanie"], "Did kids like Carolines?"),
        (
            "Which city have both Jean and John visited?",
            ["Jean", "John"],
            "Which city have both and visited?",
        ),
        ("Caroline?", ["Caroline"], ""),
    ],
)
def test_without_takes_out_whole_words_and_their_possessive(
    query: str, words: list[str], rest: str
) -> None:
    assert without(query, words) == rest


def _record(tenant: str, user: str, speaker: str | None) -> MemoryRecord:
    context = Context(speaker=speaker) if speaker else None
    return MemoryRecord(tenant_id=tenant, user_id=user, content={"raw": "hi"}, context=context)


def test_speakers_are_learned_per_tenant_and_user_and_only_their_names_are_taken_out() -> None:
    speakers = Speakers()
    speakers.saw([_record("t1", "u", "Caroline Lee"), _record("t1", "u", None)])
    speakers.saw([_record("t2", "u", "Melanie"), _record("t2", "u", "Will")])
    asked = "Did Caroline and Melanie visit London?"
    assert named(asked) == {"Caroline", "Melanie", "London"}
    assert speakers.named("t1", "u", asked) == ["Caroline"]
    assert speakers.named("t2", "u", asked) == ["Melanie"]
    assert speakers.named("t1", "other", asked) == []
    assert speakers.named("t1", "u", "What does Lee like?") == ["Lee"]
    # Case aside, as a chat types it; a stop word only as a name past the first word.
    assert speakers.named("t2", "u", "what did melanie's kids like?") == ["melanie"]
    assert speakers.named("t2", "u", "what will melanie do?") == ["melanie"]
    assert speakers.named("t2", "u", "What did Will say to Melanie?") == ["Will", "Melanie"]
    assert speakers.named("t2", "u", "Will it rain?") == []


def test_the_vector_mixes_the_query_with_it_without_the_speakers(embedder: LocalEmbedder) -> None:
    query = "What kind of art does Caroline make?"
    embed = embedder.embed_queries
    # The two texts in one call of the model, as a search embeds them.
    asked, rest = LocalEmbedder().embed_queries([query, "What kind of art does make?"])
    mixed = name_free_vector(embed, query, ["Caroline"], 0.7)
    expected = 0.3 * asked + 0.7 * rest
    assert np.allclose(mixed, expected / np.linalg.norm(expected), atol=1e-6)
    assert float(np.linalg.norm(mixed)) == pytest.approx(1.0, abs=1e-5)
    alone = embedder.embed_query(query)
    assert np.array_equal(name_free_vector(embed, query, [], 0.7), alone)
    assert np.array_equal(name_free_vector(embed, query, ["Caroline"], 0), alone)
    only = name_free_vector(embed, "Caroline?", ["Caroline"], 0.7)
    assert np.array_equal(only, embedder.embed_query("Caroline?"))


def test_a_share_of_1_embeds_only_the_query_without_the_names() -> None:
    """At ``name_free_share`` 1 the query as asked weighs nothing: it is not embedded, so a
    named query costs one embedding, as an unnamed one does."""
    asked: list[list[str]] = []

    def embed(texts: Sequence[str]) -> list[Vector]:
        asked.append(list(texts))
        return [np.full(4, float(n + 1), dtype=np.float32) / 2 for n in range(len(texts))]

    vector = name_free_vector(embed, "What does Caroline paint?", ["Caroline"], 1.0)
    assert asked == [["What does paint?"]]
    assert np.array_equal(vector, np.full(4, 0.5, dtype=np.float32))


def test_queries_embedded_together_are_cached_together() -> None:
    """The fast model scales activations per call: the pair's vectors differ a little from
    each text's alone, and the same pair always gets the same vectors."""
    fresh = LocalEmbedder()
    both = fresh.embed_queries(["where is the cat?", "where is?"])
    assert both.shape == (2, 384)
    calls = fresh.query_calls
    assert np.array_equal(fresh.embed_queries(["where is the cat?", "where is?"]), both)
    assert fresh.query_calls == calls  # from the cache
    alone = fresh.embed_query("where is the cat?")
    assert fresh.query_calls == calls + 1
    assert float(alone @ both[0]) > 0.98
    assert np.array_equal(fresh.embed_queries(["where is the cat?"])[0], alone)
    assert fresh.embed_queries([]).shape == (0, 384)


def test_a_share_outside_0_1_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError) as refused:
        RankingConfig(name_free_share=1.5)
    assert refused.value.field == "ranking.name_free_share"


class Recording(LocalEmbedder):
    """The real local embedder, remembering the queries it was asked to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        self.queries += texts
        return super().embed_queries(texts)


@pytest.fixture
def recording() -> Iterator[Recording]:
    yield Recording()


def test_search_embeds_the_query_without_the_speakers_it_learned_from_the_adds(
    tmp_path: Path, recording: Recording
) -> None:
    with LongTermMemory(SQLiteStore(tmp_path / "c.db"), recording) as memory:
        start = datetime(2024, 5, 1, 9, tzinfo=UTC)
        for n, (speaker, text) in enumerate(
            [("Caroline", "I paint landscapes by the lake."), ("Melanie", "I went to London.")]
        ):
            message = {"role": "user", "name": speaker, "content": text}
            memory.add(
                [message | {"timestamp": start + timedelta(minutes=n)}], user_id="u", session_id="s"
            )
        memory.search("Did Caroline go to London?", user_id="u", k=2)
        assert recording.queries == ["Did Caroline go to London?", "Did go to London?"]
        recording.queries.clear()
        hits = memory.search("what does caroline paint?", user_id="u", k=1)
        assert recording.queries == ["what does caroline paint?", "what does paint?"]
        assert hits[0].record.context and hits[0].record.context.speaker == "Caroline"
        recording.queries.clear()
        # Another user of the same store: their speakers are not known, the query stays.
        memory.search("Did Caroline go to London?", user_id="someone-else", k=2)
        assert recording.queries == ["Did Caroline go to London?"]
    # Off: the query as asked.
    off = RankingConfig(name_free_share=0.0)
    recording.queries.clear()
    with LongTermMemory(SQLiteStore(tmp_path / "c.db"), recording, ranking_config=off) as memory:
        memory.search("Did Caroline go to London?", user_id="u", k=2)
    assert recording.queries == ["Did Caroline go to London?"]


def test_a_process_that_did_not_add_the_memories_learns_the_speakers_from_its_reads(
    tmp_path: Path, embedder: LocalEmbedder, recording: Recording
) -> None:
    with LongTermMemory(SQLiteStore(tmp_path / "c.db"), embedder) as writer:
        message = {"role": "user", "name": "Caroline", "content": "I paint by the lake."}
        writer.add([message], user_id="u", session_id="s")
    with LongTermMemory(SQLiteStore(tmp_path / "c.db"), recording) as reader:
        reader.search("What does Caroline paint?", user_id="u", k=1)
        reader.search("What does Caroline paint?", user_id="u", k=1)
    assert recording.queries == [
        "What does Caroline paint?",  # first search: speakers not known yet
        "What does Caroline paint?",
        "What does paint?",
    ]


def test_an_endpoint_embedder_gets_the_query_and_its_name_free_copy_in_one_request(
    tmp_path: Path,
) -> None:
    from chatmem import OpenAIEmbedder
    from chatmem.testing import ScriptedOpenAIServer

    with ScriptedOpenAIServer(dimension=8) as server:
        embedder = OpenAIEmbedder("scripted-embedder", 8, base_url=server.base_url)
        with LongTermMemory(SQLiteStore(tmp_path / "e.db"), embedder) as memory:
            message = {"role": "user", "name": "Caroline", "content": "I paint by the lake."}
            memory.add([message], user_id="u", session_id="s")
            server.requests.clear()
            memory.search("What does Caroline paint?", user_id="u", k=1)
        embedder.close()
    inputs = [r["input"] for r in server.requests if "input" in r]
    assert inputs == [["What does Caroline paint?", "What does paint?"]]


def test_a_restricted_memorys_speaker_never_changes_how_a_query_is_embedded(
    tmp_path: Path, recording: Recording
) -> None:
    """The speakers book is shared by every reader of a user: a speaker known only from
    memories some readers may not see must not shape anyone's query."""
    with LongTermMemory(SQLiteStore(tmp_path / "r.db"), recording) as memory:
        said = {"role": "user", "name": "Osei", "content": "The biopsy came back benign."}
        memory.add([said], user_id="u", session_id="s", allowed_roles=["clinician"])
        open_turn = {"role": "user", "name": "Ana", "content": "I walked the dog."}
        memory.add([open_turn], user_id="u", session_id="t")
        # A clinician's search reads the restricted turn; nobody learns its speaker.
        memory.search(
            "What did Osei say?", user_id="u", k=2, filter=Filter(reader_roles=["clinician"])
        )
        memory.search("What did Osei say?", user_id="u", k=2)
        memory.search("What did Ana do?", user_id="u", k=2)
    assert recording.queries == [
        "What did Osei say?",
        "What did Osei say?",
        "What did Ana do?",
        "What did do?",
    ]
