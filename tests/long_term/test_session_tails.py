"""The ids of each session's latest turns that ``add`` keeps (``SessionTails``) are counted in
bytes as ``caches.size_of`` counts them, by a function that does not walk the objects
generically on every add."""

from __future__ import annotations

from pathlib import Path

from chatmem import LocalEmbedder, LongTermMemory
from chatmem.caches import ENTRY_OVERHEAD, size_of
from chatmem.long_term.session_tails import _tail_size
from chatmem.stores import SQLiteStore


def test_a_tails_size_is_what_size_of_counts() -> None:
    tails = [
        (("default", "ana", "s1", ()), (("a" * 32,),)),
        (("t", "ben", "s2", ("ops", "hr")), (("a" * 32,), ("b" * 32, "c" * 32, "d" * 32))),
        (("t", "José", "s3", ("ops",)), (("é" * 40,), ("f" * 32,))),
    ]
    for key, tail in tails:
        assert _tail_size(key, tail) == size_of(key) + size_of(tail)


def test_the_kept_tails_bytes_after_live_adds(tmp_path: Path, embedder: LocalEmbedder) -> None:
    with LongTermMemory(SQLiteStore(tmp_path / "m.db"), embedder) as memory:
        for n, who in enumerate(["user", "assistant", "user"]):
            said = {"role": who, "content": f"turn {n} about the garden"}
            memory.add([said], user_id="ana", session_id="s1", allowed_roles=["ops"])
        kept = memory._tails._tails
        (key,) = tuple(kept.keys())
        tail = kept.get(key)
        assert tail is not None and len(tail) == 1
        assert kept.bytes == size_of(key) + size_of(tail) + ENTRY_OVERHEAD
