"""The SQLite store's keyword postings in memory (issue 14): for a user alone in a keyword
shard they give FTS5's own ``bm25()`` scores, before and after every kind of write made by
another store on the same file; in a shared shard a user's scores no longer move with what
other users store. Each search here is answered twice, by a store that reads FTS5 and by
one that reads the postings, and the two are compared."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from chatmem.records import Context, EmbeddingInfo, Entry, Filter, MemoryRecord, MemoryType
from chatmem.stores import Change, SQLiteStore
from chatmem.stores.base import SearchQuery
from chatmem.stores.sqlite import keyword_cache, search
from chatmem.stores.sqlite.schema import user_key, user_token
from tests.stores.helpers import BM25_TEXTS, keyword_score_past_the_cut, record, unit_vector

DIM = 4
EMBEDDING = EmbeddingInfo(model="test", dimension=DIM)
#: Words by how common they are: the first few land in most rows, as a speaker's name does.
COMMON = ["anna", "like", "really", "great", "today"]
WORDS = [
    *COMMON,
    "hiking",
    "hiked",
    "hikes",
    "café",
    "Zürich",
    "naïve",
    "don't",
    "Anna's",
    "2023",
    "piano",
    "pianos",
    "marathon",
    "garden",
    "gardening",
    "sister",
    "wedding",
    "Porto",
    "allergic",
    "hazelnut",
    "e-mail",
    "ROBOTS",
    "robotic",
    "x²",
]
SPACES = [" ", " ", " ", "\u00a0", "\u2003", "\n", "\t", ", ", ". ", " (", ") "]
QUESTIONS = [
    "What does Anna like about hiking?",
    "anna anna",
    "Where is the café in Zürich?",
    "hikes hiked hiking",
    "wedding sister Porto",
    "Is she allergic to hazelnut?",
    "robots robotic pianos",
    "today great really",
    "naïve x² 2023",
    "nothing matches here",
]
NEVER = 10**9  # keyword_cache_rows: this store always reads FTS5


def _text(rng: random.Random, words: int) -> str:
    chosen = [rng.choice(WORDS) if rng.random() < 0.6 else rng.choice(COMMON) for _ in range(words)]
    if not chosen:
        return ""
    out = chosen[0]
    for word in chosen[1:]:
        out += rng.choice(SPACES) + word
    return out


def _record(rng: random.Random, user: str) -> MemoryRecord:
    fields: dict[str, object] = {"type": rng.choice([MemoryType.SEMANTIC, MemoryType.EPISODIC])}
    if rng.random() < 0.7:
        fields["context"] = Context(
            speaker=rng.choice(["Anna", "Ben", None]),
            before=_text(rng, rng.randint(0, 12)) or None,
            after=_text(rng, rng.randint(0, 12)) or None,
        )
    return record("t", user, _text(rng, rng.randint(1, 30)), **fields)


def _vector(rng: random.Random) -> object:
    return unit_vector(DIM, *(rng.uniform(0.1, 1.0) for _ in range(DIM)))


class Pair:
    """A writer, a reader on FTS5 alone and a reader on the postings, on one file."""

    def __init__(self, path: Path, rng: random.Random) -> None:
        self.rng = rng
        self.writer = SQLiteStore(path, keyword_cache_rows=NEVER)
        self.writer.bind_embedding(EMBEDDING)
        self.fts = SQLiteStore(path, keyword_cache_rows=NEVER)
        self.cached = SQLiteStore(path, keyword_cache_rows=0)
        self.records: dict[str, MemoryRecord] = {}

    def add(self, user: str, count: int) -> None:
        entries = [Entry(_record(self.rng, user), _vector(self.rng)) for _ in range(count)]
        self.writer.put(entries)  # type: ignore[arg-type]
        self.records.update((e.record.id, e.record) for e in entries)

    def edit(self, user: str) -> None:
        mine = sorted(i for i, r in self.records.items() if r.user_id == user)
        old = self.records[self.rng.choice(mine)]
        new = old.model_copy(
            update={
                "content": old.content.model_copy(update={"raw": _text(self.rng, 9)}),
                "context": Context(after=_text(self.rng, 6)),
                "metadata": old.metadata.model_copy(update={"version": old.metadata.version + 1}),
            }
        )
        self.writer.update([Change(new, None, old.metadata.version)])
        self.records[new.id] = new

    def delete(self, user: str) -> None:
        mine = sorted(i for i, r in self.records.items() if r.user_id == user)
        gone = self.rng.choice(mine)
        self.writer.delete(Filter(tenant_id="t", user_id=user, ids=(gone,), expired=None))
        del self.records[gone]

    def scores(
        self, store: SQLiteStore, user: str, text: str, **narrow: object
    ) -> dict[str, float]:
        query = SearchQuery(Filter(tenant_id="t", user_id=user, **narrow), text=text)  # type: ignore[arg-type]
        return {c.id: c.keyword_score for c in store.search(query) if c.keyword_score is not None}

    def warm(self, user: str) -> None:
        """The postings reader builds the user's postings (in its background thread)."""
        self.scores(self.cached, user, "anna")
        self.cached._keyword_cache.wait()
        assert _held(self.cached, user)

    def close(self) -> None:
        for store in (self.writer, self.fts, self.cached):
            store.close()


def _held(store: SQLiteStore, user: str) -> bool:
    return user_key("t", user) in store._keyword_cache._users


def _assert_same(fts: dict[str, float], cached: dict[str, float]) -> None:
    """The same rows and scores; rows past the page may differ only among equal scores."""
    for rowid in set(fts) & set(cached):
        assert cached[rowid] == pytest.approx(fts[rowid], rel=1e-9, abs=1e-12)
    if set(fts) != set(cached):
        edge = min(fts.values())
        for rowid in set(fts) ^ set(cached):
            score = fts.get(rowid, cached.get(rowid))
            assert score == pytest.approx(edge, rel=1e-9), (rowid, score, edge)


def _users_in_shards(count: int, same: bool) -> list[str]:
    """``count`` user ids whose keyword rows share one shard (``same``) or lie in
    different ones."""
    found: list[str] = []
    shards: set[str] = set()
    n = 0
    while len(found) < count:
        user = f"user-{n}"
        n += 1
        shard = user_token("t", user)[1]
        if (same and (not shards or shard in shards)) or (not same and shard not in shards):
            found.append(user)
            shards.add(shard)
    return found


@pytest.fixture
def pair(tmp_path: Path) -> Pair:
    made = Pair(tmp_path / "m.db", random.Random(14))
    yield made  # type: ignore[misc]
    made.close()


def test_a_user_alone_in_a_shard_gets_fts5s_scores(pair: Pair) -> None:
    (user,) = _users_in_shards(1, same=False)
    pair.add(user, 400)
    pair.warm(user)
    for question in QUESTIONS:
        for narrow in ({}, {"types": frozenset({MemoryType.EPISODIC})}):
            fts = pair.scores(pair.fts, user, question, **narrow)
            cached = pair.scores(pair.cached, user, question, **narrow)
            _assert_same(fts, cached)
            if question != "nothing matches here":
                assert cached, question


def test_the_postings_follow_writes_made_by_another_store(pair: Pair) -> None:
    (user,) = _users_in_shards(1, same=False)
    pair.add(user, 200)
    pair.warm(user)
    steps = [lambda: pair.add(user, 3), lambda: pair.edit(user), lambda: pair.delete(user)]
    for step in range(30):
        pair.rng.choice(steps)()
        question = QUESTIONS[step % len(QUESTIONS)]
        _assert_same(
            pair.scores(pair.fts, user, question), pair.scores(pair.cached, user, question)
        )
    assert _held(pair.cached, user)


def test_folding_the_changes_into_the_arrays_keeps_every_score(pair: Pair) -> None:
    (user,) = _users_in_shards(1, same=False)
    pair.add(user, 120)
    pair.warm(user)
    for _ in range(10):
        pair.add(user, 2)
        pair.edit(user)
        pair.delete(user)
    before = {q: pair.scores(pair.cached, user, q) for q in QUESTIONS}
    key = user_key("t", user)
    words = pair.cached._keyword_cache._users.get(key)
    assert words is not None
    assert len(words.patch.rows) and words.stale.any()  # changes are pending in the patch
    pair.cached._keyword_cache.keep(key, keyword_cache._compacted(words))
    assert {q: pair.scores(pair.cached, user, q) for q in QUESTIONS} == before


def test_a_users_scores_do_not_move_with_other_users_in_the_shard(pair: Pair) -> None:
    me, other = _users_in_shards(2, same=True)
    pair.add(me, 150)
    pair.warm(me)
    question = "wedding sister Porto hiking"
    cached_before = pair.scores(pair.cached, me, question)
    fts_before = pair.scores(pair.fts, me, question)
    pair.add(other, 300)
    assert pair.scores(pair.cached, me, question) == cached_before
    fts_after = pair.scores(pair.fts, me, question)
    # FTS5 counts the whole shard: the other user's rows moved this user's scores there.
    assert fts_after.keys() & fts_before.keys()
    assert any(fts_after[i] != fts_before[i] for i in fts_after.keys() & fts_before.keys())


def test_small_users_and_phrase_words_are_left_to_fts5(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db", keyword_cache_rows=50)
    store.bind_embedding(EMBEDDING)
    rng = random.Random(3)
    store.put([Entry(_record(rng, "small"), _vector(rng)) for _ in range(49)])  # type: ignore[arg-type]
    query = SearchQuery(Filter(tenant_id="t", user_id="small"), text="anna hiking")
    store.search(query)
    store._keyword_cache.wait()
    assert not _held(store, "small")
    store.put([Entry(_record(rng, "small"), _vector(rng)) for _ in range(2)])  # type: ignore[arg-type]
    store.search(query)
    store._keyword_cache.wait()
    assert _held(store, "small")  # 51 rows now: counted again, and built
    assert store._keyword_cache.terms("don't hike") is None  # "don't" is FTS5's phrase "don t"
    assert store._keyword_cache.terms("Hiking in Zürich") == ["hike", "zurich"]
    store.close()


def test_closing_while_postings_are_built_waits_for_the_builder(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db", keyword_cache_rows=0)
    store.bind_embedding(EMBEDDING)
    rng = random.Random(5)
    store.put([Entry(_record(rng, "u"), _vector(rng)) for _ in range(300)])  # type: ignore[arg-type]
    searching = threading.Thread(
        target=store.search, args=(SearchQuery(Filter(tenant_id="t", user_id="u"), text="anna"),)
    )
    searching.start()
    searching.join()
    store.close()  # returns with the builder stopped; nothing reads the closed file
    assert not len(store._keyword_cache._users)


def test_the_tokenizer_keeps_what_it_is_asked_when_its_cache_starts_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past CHUNKS_KEPT the chunk cache starts again; the chunks asked for that it knew
    must still be in the mapping it returns (the postings of a row read every one)."""
    monkeypatch.setattr(keyword_cache, "CHUNKS_KEPT", 3)
    tokenizer = keyword_cache.Tokenizer()
    tokenizer.learn(["hiking", "Zürich"])
    known = tokenizer.learn(["hiking", "Zürich", "don't", "café"])
    assert known["hiking"] == ("hike",) and known["Zürich"] == ("zurich",)
    assert known["don't"] == ("don", "t") and known["café"] == ("cafe",)


@pytest.mark.parametrize("reader", ["fts", "cached"])
def test_a_vector_find_keeps_a_strong_keyword_score_past_the_keyword_best(
    pair: Pair, reader: str
) -> None:
    ready = (lambda: pair.warm("u")) if reader == "cached" else None
    keyword_score_past_the_cut(pair.writer.put, getattr(pair, reader), BM25_TEXTS, ready)


def test_fts5_gives_all_the_candidates_asked_for_past_its_cap_on_matches(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FTS5's matches are read a page at a time; past ``MATCHES_KEPT`` the reading stops only
    once the ``candidates`` best are in hand."""
    monkeypatch.setattr(search, "MATCHES_PAGE", 2)
    monkeypatch.setattr(search, "MATCHES_KEPT", 3)
    made = [record("t", "u", "garden " * (i + 1) + "note") for i in range(8)]
    pair.writer.put([Entry(r, unit_vector(DIM, 1.0)) for r in made])
    scope = Filter(tenant_id="t", user_id="u")
    found = pair.fts.search(SearchQuery(scope, text="garden", candidates=5))
    assert len(found) == 5
