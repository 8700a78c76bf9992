"""Who speaks in each user's memories, and a query vector that leaves their names out
(issue 18, docs/benchmarks.md "Who said it").

A question that names a speaker ("What kind of art does Caroline make?") asks what that
person said. Who said a memory is ranked apart (``ranking.favour_named``), and the name is in
the keyword text of every memory they said; in the query's vector the name pulls toward every
memory that mentions them, whatever its topic ("Caroline, you're so kind!"). So the query
vector is mixed: ``RankingConfig.name_free_share`` of it from the query with the speakers'
names taken out, the rest from the query as asked. A name that is no speaker's ("London")
stays in.

``Speakers`` learns the speakers of each user from the memories this process adds and reads:
a hint for the query vector, never a filter, so a speaker it has not seen yet (another
process added them) only means the first searches embed the query as asked.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from chatmem import ranking
from chatmem.caches import LRUCache, MiB
from chatmem.long_term.choosing import Reader
from chatmem.ranking import NAME_WORD, RankingConfig, name_words
from chatmem.records import Filter, MemoryRecord, Vector
from chatmem.stores.base import Head
from chatmem.text import STOP_WORDS

#: Bytes of speakers' names kept, for all users together.
SPEAKERS_BYTES = 1 * MiB

_User = tuple[str, str]


def _size(key: _User, names: frozenset[str]) -> int:
    return sum(sys.getsizeof(s) for s in key) + sum(sys.getsizeof(n) for n in names) + 64


class Speakers:
    """The names of the speakers of each (tenant, user)'s memories seen by this process."""

    def __init__(self) -> None:
        self._names: LRUCache[_User, frozenset[str]] = LRUCache(SPEAKERS_BYTES, size=_size)
        self._lock = threading.Lock()

    def saw(self, records: Iterable[MemoryRecord]) -> None:
        """Remember the speakers of ``records``, each under its own tenant and user (a user
        whose records name no speaker is remembered too, with none)."""
        users: dict[_User, list[Head]] = {}
        for r in records:
            users.setdefault((r.tenant_id, r.user_id), []).append(Head.of(r))
        for (tenant_id, user_id), heads in users.items():
            self.heard(tenant_id, user_id, heads)

    def heard(self, tenant_id: str, user_id: str, heads: Iterable[Head]) -> None:
        """Remember the speakers of the user's memories of ``heads`` (none: nothing is
        learned). A restricted memory's speaker is not learned: the book is shared by every
        reader of the user, and what a reader may not see must not change how their query is
        embedded or ranked."""
        names: set[str] | None = None
        for head in heads:
            names = set() if names is None else names
            if head.speaker and not head.restricted:
                names.add(head.speaker)
        if names is None:
            return
        key = (tenant_id, user_id)
        with self._lock:
            known = self._names.get(key)
            if known is None or not names <= known:
                self._names.put(key, (known or frozenset()) | names)

    def knows(self, tenant_id: str, user_id: str) -> bool:
        """Whether any memory of the user was seen (and still remembered)."""
        return (tenant_id, user_id) in self._names

    def named(self, tenant_id: str, user_id: str, query: str) -> list[str]:
        """The words of ``query`` that are a word of a known speaker's name, case aside
        ("caroline" names "Caroline"), as the query writes them; a stop word ("will", "may")
        only when capitalised past the first word."""
        known = self._names.get((tenant_id, user_id))
        if not known:
            return []
        # Each speaker's words are remembered (``ranking.speaker_words``), not the user's
        # whole set: a set remembered whole for each speaker added would outgrow the
        # book's own budget.
        words = frozenset().union(*map(ranking.speaker_words, known))
        found: list[str] = []
        for n, word in enumerate(name_words(query)):
            if word.lower() not in words or word in found:
                continue
            if word.lower() in STOP_WORDS and (n == 0 or not word[0].isupper()):
                continue
            found.append(word)
        return found


def without(query: str, words: Iterable[str]) -> str:
    """``query`` with each of ``words`` (and its possessive 's) taken out; blank when only
    they were there."""
    for word in words:
        query = re.sub(rf"(?<![^\W_]){re.escape(word)}(?:['’]s)?(?![^\W_])", " ", query)
    rest = re.sub(r"\s+", " ", query).strip()
    return rest if NAME_WORD.search(rest) else ""


def name_free_vector(
    embed: Callable[[Sequence[str]], Sequence[Vector]],
    query: str,
    speakers: list[str],
    share: float,
) -> Vector:
    """The query's vector: ``share`` of it from ``query`` without ``speakers``' names, the
    rest from ``query`` as asked (L2-normalised), only the first when ``share`` is 1; the
    query as asked when there is nothing to take out, or nothing left without it. ``embed``
    embeds queries, the two in one call where it can (``embeddings.embed_queries``)."""
    rest = without(query, speakers) if speakers and share > 0 else ""
    if not rest:
        return embed([query])[0]
    if share >= 1.0:
        return embed([rest])[0]  # one text to embed: the query as asked would weigh 0
    asked, other = embed([query, rest])
    mixed = (1.0 - share) * asked + share * other
    norm = float(np.linalg.norm(mixed))
    return (mixed / norm).astype(np.float32) if norm > 0 else asked


def favoured(
    ranked: list[ranking.Scored],
    query: str,
    names: frozenset[str],
    scope: Filter,
    k: int,
    read: Reader,
    config: RankingConfig,
    speakers: Speakers,
) -> list[ranking.Scored]:
    """``ranked`` with its first ``SPEAKER_READ`` (k where k is more) reordered
    (``ranking.favour``): ``speaker_bonus`` to what someone the query names said
    (``names``), ``time_bonus`` to what says when for a query that asks about time
    (``ranking.asks_when``), for any other ``question_penalty`` off what ends by asking
    (``ranking.ends_asking``); their speakers and texts read to tell (``read``: their
    heads). None are read when no setting applies, unless ``speakers`` knows nothing of the
    user yet: then the first search reads them to learn the user's speakers, so that a name
    written in lower case ("caroline") counts from the start."""
    tenant, user = scope.tenant_id, scope.require_user()
    first = config.speaker_bonus > 0 and not speakers.knows(tenant, user)
    named = config.speaker_bonus > 0 and bool(names)
    about_time = ranking.asks_when(query)
    when = config.time_bonus > 0 and about_time
    asking = config.question_penalty > 0 and not about_time
    if not ranked or not (named or when or first or asking):
        return ranked
    head = ranked[: max(k, ranking.SPEAKER_READ)]
    heads = read([s.id for s in head])
    if first:
        speakers.heard(tenant, user, heads.values())
        names |= frozenset(speakers.named(tenant, user, query))
    said = {i: (h.speaker, h.text) for i, h in heads.items()}
    extra = ranking.bonuses(said, names, about_time, config)
    return ranking.favour(head, extra) + ranked[len(head) :]
