"""Records are read from JSON in one pass (issue 14: pydantic called the models' own
``__init__`` on every validation, so JSON was turned into Python objects first and
validated from those, and every stored record read paid for it), each field is still
validated exactly once, and every way in still raises chatmem's ValidationError naming the
field."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest
from pydantic import field_validator

from chatmem.errors import ValidationError
from chatmem.records import Filter, MemoryRecord, _Checked


class Counted(_Checked):
    calls: ClassVar[list[str]] = []
    name: str

    @field_validator("name")
    @classmethod
    def _seen(cls, value: str) -> str:
        cls.calls.append(value)
        if value == "bad":
            raise ValueError("is bad")
        return value


@pytest.mark.parametrize(
    "validate",
    [
        lambda: Counted.model_validate_json('{"name": "a"}'),
        lambda: Counted.model_validate({"name": "a"}),
        lambda: Counted.checked({"name": "a"}),
        lambda: Counted(name="a"),
    ],
)
def test_each_field_is_validated_once(validate: Any) -> None:
    Counted.calls.clear()
    assert validate().name == "a"
    assert Counted.calls == ["a"]


def test_a_stored_record_is_read_in_one_pass() -> None:
    record = MemoryRecord(user_id="u", content={"raw": "Ana lives in Porto"})
    again = MemoryRecord.model_validate_json(record.model_dump_json())
    assert again == record
    assert MemoryRecord.__pydantic_custom_init__ is False


@pytest.mark.parametrize(
    ("validate", "field"),
    [
        (lambda: MemoryRecord.model_validate({"user_id": ""}), "user_id"),
        (
            lambda: MemoryRecord.model_validate_json('{"user_id": "u", "content": {"raw": " "}}'),
            "content.raw",
        ),
        (
            lambda: MemoryRecord(user_id="u", content={"raw": "x"}, time={"valid_from": "x"}),
            "time.valid_from",
        ),
        (lambda: Filter.model_validate({"bogus": 1}), "bogus"),
        (lambda: Filter.checked({"user_id": ""}, "filter"), "filter.user_id"),
        (lambda: Counted.model_validate_json('{"name": "bad"}'), "name"),
    ],
)
def test_errors_are_chatmems_and_name_the_field(validate: Any, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        validate()
    assert caught.value.field == field


def _full_record() -> MemoryRecord:
    return MemoryRecord(
        user_id="u",
        tenant_id="t",
        session_id="s",
        content={"raw": "Ana moved to Porto", "summary": "moved"},
        metadata={"importance": 0.7, "tags": ["city"]},
        time={
            "created_at": "2026-03-01T10:00:00.123456+02:00",
            "valid_from": "2026-03-01T08:00:00Z",
            "valid_to": "2027-01-01T00:00:00Z",
            "expires_at": "2030-01-01T00:00:00Z",
        },
        relations=[{"type": "updates", "target_id": "m0"}],
        access_control={"allowed_roles": ["hr"]},
        user_metadata={"dia_id": "D1:2", "nested": {"a": [1, 2]}},
        context={"speaker": "Ana", "before": "Bo: where now?", "after": "Bo: nice"},
    )


def test_a_record_read_back_from_a_store_equals_the_one_written() -> None:
    written = _full_record()
    read = MemoryRecord.stored(written.model_dump_json())
    assert read == written
    assert read.time.created_at == written.time.created_at
    assert read.time.created_at.microsecond == 123000  # made ms-exact when written
    assert read.time.created_at.utcoffset() == written.time.created_at.utcoffset()
    assert read.model_dump_json() == written.model_dump_json()


def test_a_stored_record_skips_the_checks_made_when_it_was_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a store wrote was validated then: reading it back runs none of the checks
    written in Python again (they were half of a record's parse, issue 14), while JSON from
    anywhere else still runs all of them."""
    import chatmem.records as records

    body = _full_record().model_dump_json()
    calls: list[object] = []
    real = records._to_utc_ms
    monkeypatch.setattr(records, "_to_utc_ms", lambda value: calls.append(value) or real(value))
    MemoryRecord.stored(body)
    assert calls == []
    MemoryRecord.model_validate_json(body)
    assert len(calls) == 6  # every time field of the record, checked again


def test_a_stored_body_still_has_its_types_and_bounds_checked() -> None:
    body = _full_record().model_dump(mode="json")
    for broken, field in [
        ({**body, "user_id": 5}, "user_id"),
        ({**body, "access_count": -1}, "access_count"),
        ({**body, "metadata": {**body["metadata"], "importance": 2}}, "metadata.importance"),
        ({**body, "surprise": 1}, "surprise"),
    ]:
        with pytest.raises(ValidationError) as caught:
            MemoryRecord.stored(json.dumps(broken))
        assert caught.value.field == field


def test_json_from_outside_a_store_is_checked_in_full() -> None:
    blank = _full_record().model_dump(mode="json")
    blank["content"]["raw"] = "   "
    with pytest.raises(ValidationError):
        MemoryRecord.model_validate_json(json.dumps(blank))
