"""Strict JSON (``chatmem.strict_json``): what every body and import line must be, and the
field each refusal names."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatmem import strict_json
from chatmem.errors import ValidationError


def refused(text: str | bytes) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        strict_json.loads(text)
    return caught.value


def nested(depth: int, inner: str = "1") -> str:
    """``depth`` levels: arrays inside objects inside arrays…, ``inner`` at the bottom."""
    opened = "".join('{"a":' if level % 2 else "[" for level in range(depth))
    closed = "".join("}" if level % 2 else "]" for level in reversed(range(depth)))
    return opened + inner + closed


def test_plain_json_reads_as_json_does() -> None:
    text = (
        '{"a": [1, -2, 3.5, 1e-400, true, false, null, "caf\\u00e9 \\ud83d\\ude00"],'
        ' "b": {"c": ""}, "d": 9223372036854775807, "e": -9223372036854775808, "f": 1e308}'
    )
    assert strict_json.loads(text) == json.loads(text)
    assert strict_json.loads(text.encode()) == json.loads(text)
    assert strict_json.loads(b'"\xf0\x9f\x98\x80"') == "\U0001f600"


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_literals_are_refused_naming_the_field(literal: str) -> None:
    error = refused(f'{{"model": "m", "temperature": {literal}}}')
    assert error.field == "temperature"
    assert error.message == f"{literal} is not JSON: numbers must be finite"
    assert refused(f'{{"messages": [{{"x": [0, {literal}]}}]}}').field == "messages[0].x[1]"


@pytest.mark.parametrize("literal", ["1e400", "-1e400", "1" * 400 + ".0", "2E+999"])
def test_numbers_that_overflow_to_infinity_are_refused(literal: str) -> None:
    error = refused(f'{{"vector": [0.5, {literal}]}}')
    assert error.field == "vector[1]"
    assert error.message.endswith("is out of range for a number")


def test_a_number_that_underflows_is_zero() -> None:
    assert strict_json.loads('{"x": 1e-400}') == {"x": 0.0}


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**70, 99999999999999999999, -(10**30)])
def test_integers_past_64_bits_are_refused(value: int) -> None:
    error = refused(json.dumps({"record": {"metadata": {"version": value}}}))
    assert error.field == "record.metadata.version"
    assert error.message == f"{value} is out of range: integers must fit in 64 bits"


def test_the_64_bit_bounds_are_accepted() -> None:
    assert strict_json.loads(f"[{2**63 - 1}, {-(2**63)}]") == [2**63 - 1, -(2**63)]


def test_a_huge_integer_is_refused_quickly_and_shown_cut() -> None:
    # Past Python's own limit (4,300 digits), int() of it would raise ValueError.
    digits = "7" * 100_000
    error = refused(f'{{"n": {digits}}}')
    assert error.field == "n"
    assert error.message.startswith("77777777777777777777…(100000 digits)")
    assert len(error.message) < 120


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "\\uDC00", "x\\udc00\\ud800y"])
def test_a_lone_surrogate_is_refused_in_a_value(escape: str) -> None:
    error = refused(f'{{"messages": [{{"content": "{escape}"}}]}}')
    assert error.field == "messages[0].content"
    assert "lone UTF-16 surrogate" in error.message


def test_a_lone_surrogate_is_refused_in_a_key_named_as_written() -> None:
    error = refused('{"metadata": {"a\\ud800b": 1}}')
    assert error.field == "metadata.a\\ud800b"
    error.field.encode("utf-8")  # the name itself is valid text


def test_a_surrogate_pair_is_one_character_and_accepted() -> None:
    assert strict_json.loads('"\\ud83d\\ude00"') == "\U0001f600"


def test_a_lone_surrogate_in_text_given_as_str_is_refused() -> None:
    # Text read with errors="surrogateescape" (or built in Python) holds the character
    # itself, not its escape.
    error = refused('{"content": "\udce9"}')
    assert error.field == "content"


def test_text_that_is_not_utf8_or_not_json_is_refused_without_a_field() -> None:
    not_utf8 = refused(b'{"a": "\xff"}')
    assert not_utf8.field is None
    assert not_utf8.message.startswith("not UTF-8 text")
    for text in ("{not json", "", '{"a": 1} trailing', "[1,]", "'single'"):
        error = refused(text)
        assert error.field is None
        assert error.message.startswith("not JSON")


def test_nesting_up_to_the_limit_is_accepted() -> None:
    assert strict_json.loads(nested(strict_json.MAX_DEPTH)) == json.loads(
        nested(strict_json.MAX_DEPTH)
    )


@pytest.mark.parametrize("depth", [strict_json.MAX_DEPTH + 1, 500, 3_000, 200_000])
def test_nesting_past_the_limit_is_refused_naming_where(depth: int) -> None:
    error = refused(nested(depth))
    assert error.message == f"nests deeper than {strict_json.MAX_DEPTH} levels"
    # The container that opens level 65 sits at level 64: 64 steps from the top.
    assert error.field is not None
    assert error.field.startswith("[0].a[0].a")
    assert error.field.count("[0]") + error.field.count(".a") == strict_json.MAX_DEPTH


def test_deep_nesting_inside_strings_and_keys_does_not_count() -> None:
    text = '{"k[{": "' + "[" * 5_000 + '", "v": [' + nested(10) + "]}"
    assert strict_json.loads(text)["k[{"] == "[" * 5_000


def test_the_path_of_a_too_deep_value_follows_keys_and_indexes() -> None:
    deep = "[" * 100 + "]" * 100
    error = refused(f'{{"records": [0, {{"x\\"y": {deep}}}]}}')
    assert error.field is not None
    assert error.field.startswith('records[1].x"y')


def test_check_walks_a_python_value() -> None:
    strict_json.check({"a": [1.5, "ok", None, {"b": 2**63 - 1}]})
    with pytest.raises(ValidationError) as caught:
        strict_json.check({"a": [1.0, math.nan]})
    assert caught.value.field == "a[1]"
    with pytest.raises(ValidationError) as caught:
        strict_json.check({"a": {"b": "\ud800"}})
    assert caught.value.field == "a.b"


def test_the_first_problem_in_the_text_is_the_one_named() -> None:
    assert refused('{"a": 1, "b": NaN, "c": "\\ud800", "d": 1e999}').field == "b"
    assert refused('[["\\ud800"], NaN]').field == "[0][0]"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=strict_json.INT64_MIN, max_value=strict_json.INT64_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_every_strict_json_value_reads_back_unchanged(value: object) -> None:
    text = json.dumps(value)
    assert strict_json.loads(text) == json.loads(text)
    assert strict_json.loads(json.dumps(value, ensure_ascii=False).encode()) == json.loads(text)


@given(json_values, st.sampled_from(["NaN", "-Infinity", "1e400", "18446744073709551616"]))
def test_a_bad_number_anywhere_is_refused(value: object, bad: str) -> None:
    text = json.dumps({"ok": value, "bad": [value, "__BAD__"]}).replace('"__BAD__"', bad)
    assert refused(text).field == "bad[1]"


def test_check_refuses_a_parsed_integer_past_64_bits_naming_it() -> None:
    """Another reader (the MCP SDK's) parses big integers; ``check`` still refuses them,
    even one too long for Python to write out."""
    strict_json.check({"limit": 2**63 - 1, "ok": True})
    for huge in (2**63, -(2**63) - 1, 10**5000):
        with pytest.raises(ValidationError, match="64 bits") as raised:
            strict_json.check({"args": [1, {"limit": huge}]})
        assert raised.value.field == "args[1].limit"
