"""Decay (SPEC L5) and quotas (SPEC L8), with a controlled clock."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatmem import Filter, LongTermMemory, MemoryRecord
from chatmem.errors import ValidationError
from chatmem.long_term.decay import (
    HalfLives,
    enforce_quota,
    is_pinned,
    score_of,
    sweep_decay,
)
from chatmem.ranking import DEFAULT_HALF_LIFE_S, decay_score
from chatmem.records import HistoryEvent

DAY = 86_400.0
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


# -- the formula -----------------------------------------------------------------------------


def test_a_fresh_memory_scores_one() -> None:
    assert decay_score(0, None, 0, 0.5) == 1.0


def test_age_halves_the_score_every_stretched_half_life() -> None:
    assert decay_score(DEFAULT_HALF_LIFE_S, None, 0, 0.0) == pytest.approx(0.5)
    # Importance 1 stretches the half-life threefold.
    assert decay_score(3 * DEFAULT_HALF_LIFE_S, None, 0, 1.0) == pytest.approx(0.5)
    assert decay_score(10 * DAY, None, 0, 0.0, half_life_s=10 * DAY) == pytest.approx(0.5)


def test_importance_slows_decay() -> None:
    age = 120 * DAY
    assert (
        decay_score(age, None, 0, 0.9)
        > decay_score(age, None, 0, 0.5)
        > decay_score(age, None, 0, 0.1)
    )


def test_a_recent_access_refreshes_an_old_memory() -> None:
    old = 400 * DAY
    assert decay_score(old, None, 0, 0.5) < 0.2
    assert decay_score(old, 1 * DAY, 0, 0.5) > 0.9
    assert decay_score(old, 14 * DAY, 0, 0.5) == pytest.approx(0.5)


def test_many_accesses_boost_the_score_logarithmically() -> None:
    base = decay_score(100 * DAY, None, 0, 0.5)
    boosted = decay_score(100 * DAY, None, 10, 0.5)
    assert boosted == pytest.approx(min(1.0, base * (1 + 0.25 * math.log(11))))
    assert decay_score(0, None, 1000, 0.5) == 1.0


def test_unimportant_unused_memories_fall_under_the_threshold_in_months() -> None:
    assert decay_score(90 * DAY, None, 0, 0.3) > 0.2
    assert decay_score(120 * DAY, None, 0, 0.3) < 0.2


def test_half_lives_must_be_positive() -> None:
    with pytest.raises(ValidationError):
        decay_score(1, None, 0, 0.5, half_life_s=0)


@given(
    age=st.floats(0, 1e9),
    since=st.none() | st.floats(0, 1e9),
    count=st.integers(0, 10_000),
    importance=st.floats(0, 1),
)
def test_the_score_stays_in_the_unit_interval_and_falls_with_age(
    age: float, since: float | None, count: int, importance: float
) -> None:
    score = decay_score(age, since, count, importance)
    assert 0.0 <= score <= 1.0
    assert decay_score(age + DAY, since, count, importance) <= score


# -- the sweep -------------------------------------------------------------------------------


def remember(
    memory: LongTermMemory,
    text: str,
    *,
    days_old: float,
    importance: float = 0.5,
    user: str = "anna",
    tenant: str = "default",
    **fields: object,
) -> MemoryRecord:
    created = NOW - timedelta(days=days_old)
    record = MemoryRecord.model_validate(
        {
            "tenant_id": tenant,
            "user_id": user,
            "content": {"raw": text},
            "metadata": {"importance": importance, **fields.pop("metadata", {})},  # type: ignore[dict-item]
            "time": {"created_at": created, "updated_at": created, **fields.pop("time", {})},  # type: ignore[dict-item]
            **fields,
        }
    )
    return memory.add_records([record])[0]


def ids(memory: LongTermMemory, **scope: object) -> set[str]:
    return {r.id for r in memory.list(Filter(**scope), limit=1000).records}  # type: ignore[arg-type]


def test_the_sweep_deletes_what_decayed_and_says_why(memory: LongTermMemory) -> None:
    fresh = remember(memory, "User likes tea", days_old=1)
    stale = remember(memory, "User once mentioned rain", days_old=200, importance=0.3)
    used = remember(
        memory,
        "User's wifi password hint is a cat name",
        days_old=200,
        importance=0.3,
        time={"last_accessed": NOW - timedelta(days=2)},
        access_count=4,
    )
    report = sweep_decay(memory, user_id="anna", now=NOW)
    assert (report.scanned, report.deleted) == (3, 1)
    assert ids(memory, user_id="anna") == {fresh.id, used.id}
    last = memory.history(stale.id, user_id="anna")[-1]
    assert last.event is HistoryEvent.DELETE
    expected = math.floor(score_of(stale, NOW) * 100) / 100
    assert last.reason == f"decay: score {expected:.2f} under the threshold 0.2"


def test_the_sweep_stores_scores_that_moved(memory: LongTermMemory) -> None:
    month_old = remember(memory, "User likes tea", days_old=30)
    today = remember(memory, "User likes coffee", days_old=0)
    report = sweep_decay(memory, user_id="anna", now=NOW)
    assert report.rescored == 1
    rescored = memory.get(month_old.id, user_id="anna")
    assert rescored.time.decay_score == pytest.approx(score_of(month_old, NOW))
    assert rescored.metadata.version == 1  # a usage-only write: no version, no history
    assert [h.event for h in memory.history(month_old.id, user_id="anna")] == [HistoryEvent.ADD]
    assert memory.get(today.id, user_id="anna").time.decay_score == today.time.decay_score
    # Run again at the same moment: nothing moved, nothing is written.
    assert sweep_decay(memory, user_id="anna", now=NOW).rescored == 0


def test_the_threshold_and_half_lives_are_configurable(memory: LongTermMemory) -> None:
    remember(memory, "User likes tea", days_old=10)
    assert sweep_decay(memory, user_id="anna", now=NOW).deleted == 0
    short = HalfLives(age_s=DAY, access_s=DAY)
    assert sweep_decay(memory, user_id="anna", now=NOW, half_lives=short).deleted == 1
    remember(memory, "User likes coffee", days_old=10)
    assert sweep_decay(memory, user_id="anna", now=NOW, threshold=0.9).deleted == 1
    with pytest.raises(ValidationError):
        sweep_decay(memory, now=NOW, threshold=1.5)


def test_pinned_memories_never_decay(memory: LongTermMemory) -> None:
    by_flag = remember(
        memory, "User's daughter is Mia", days_old=900, user_metadata={"pinned": True}
    )
    by_tag = remember(memory, "User is diabetic", days_old=900, metadata={"tags": ["pinned"]})
    not_really = remember(memory, "User said hi", days_old=900, user_metadata={"pinned": "yes"})
    assert is_pinned(by_flag) and is_pinned(by_tag) and not is_pinned(not_really)
    report = sweep_decay(memory, user_id="anna", now=NOW)
    assert (report.pinned, report.deleted) == (2, 1)
    assert ids(memory, user_id="anna") == {by_flag.id, by_tag.id}
    assert memory.get(by_flag.id, user_id="anna").metadata.version == 1


def test_the_sweep_pages_through_a_whole_tenant_and_no_other(memory: LongTermMemory) -> None:
    for index in range(7):
        remember(memory, f"User fact {index}", days_old=300, user=f"user{index % 3}")
    kept = remember(memory, "User fact of acme", days_old=300, tenant="acme")
    report = sweep_decay(memory, now=NOW, page_size=2)
    assert (report.scanned, report.deleted) == (7, 7)
    assert ids(memory, tenant_id="acme") == {kept.id}


# -- the quota -------------------------------------------------------------------------------


def test_the_quota_deletes_the_lowest_scores_first(memory: LongTermMemory) -> None:
    oldest = remember(memory, "User fact a", days_old=100)
    unimportant = remember(memory, "User fact b", days_old=10, importance=0.0)
    pinned = remember(memory, "User fact c", days_old=500, user_metadata={"pinned": True})
    keep = [remember(memory, f"User fact d{i}", days_old=1) for i in range(2)]
    other = remember(memory, "User fact of ben", days_old=500, user="ben")
    gone = enforce_quota(memory, user_id="anna", limit=3, now=NOW)
    assert gone == [oldest.id, unimportant.id]
    assert ids(memory, user_id="anna") == {pinned.id, *(r.id for r in keep)}
    assert other.id in ids(memory, user_id="ben")
    reason = memory.history(oldest.id, user_id="anna")[-1].reason or ""
    assert reason.startswith("quota: over 3 memories; decay score")


def test_the_quota_does_nothing_under_the_limit_and_spares_pins(memory: LongTermMemory) -> None:
    pins = [
        remember(memory, f"User pinned {i}", days_old=1, user_metadata={"pinned": True})
        for i in range(3)
    ]
    assert enforce_quota(memory, user_id="anna", limit=5, now=NOW) == []
    assert enforce_quota(memory, user_id="anna", limit=1, now=NOW) == []
    assert ids(memory, user_id="anna") == {p.id for p in pins}
    with pytest.raises(ValidationError):
        enforce_quota(memory, user_id="anna", limit=-1)
