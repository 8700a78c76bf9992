"""Records are read from JSON in one pass (issue 14: pydantic called the models' own
``__init__`` on every validation, so JSON was turned into Python objects first and
validated from those, and every stored record read paid for it), each field is still
validated exactly once, and every way in still raises chatmem's ValidationError naming the
field."""

from __future__ import annotations

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
