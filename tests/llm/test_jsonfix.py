"""Lenient JSON parsing and the one repair round-trip."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatmem.errors import LLMResponseError
from chatmem.llm.jsonfix import REPAIR_PROMPT, complete_json, parse_lenient, shape
from chatmem.testing import ScriptedChatModel

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
CONTAINERS = st.lists(JSON_VALUES, max_size=4) | st.dictionaries(
    st.text(max_size=8), JSON_VALUES, max_size=4
)


@given(JSON_VALUES, st.booleans())
def test_valid_json_comes_back_unchanged(value: Any, indent: bool) -> None:
    text = json.dumps(value, indent=2 if indent else None)
    assert parse_lenient(text) == value


@given(CONTAINERS, st.sampled_from(["prose", "fence", "think"]))
def test_valid_json_wrapped_in_prose_or_fences_comes_back_unchanged(
    value: Any, wrapping: str
) -> None:
    text = json.dumps(value, ensure_ascii=False)
    wrapped = {
        "prose": f"Here is the answer:\n{text}\nHope that helps",
        "fence": f"Sure.\n```json\n{text}\n```",
        "think": f"<think>maybe {{not this}}</think>\n{text}",
    }[wrapping]
    assert parse_lenient(wrapped) == value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param('```json\n[{"a": 1}]\n```', [{"a": 1}], id="code fence"),
        pytest.param('```\n{"a": 1}\n```', {"a": 1}, id="bare fence"),
        pytest.param('The facts are: [{"a": 1}]. Done!', [{"a": 1}], id="prose around"),
        pytest.param('Note [this]: {"a": 1}', {"a": 1}, id="brackets in prose first"),
        pytest.param('[{"a": 1,}, {"b": [1, 2,],},]', [{"a": 1}, {"b": [1, 2]}], id="trailing"),
        pytest.param("{'text': 'hi', 'n': 2}", {"text": "hi", "n": 2}, id="single quotes"),
        pytest.param(
            "{'text': 'User's dog is Max'}", {"text": "User's dog is Max"}, id="apostrophe"
        ),
        pytest.param("{'q': 'say \"hi\"'}", {"q": 'say "hi"'}, id="double inside single"),
        pytest.param(
            '{"ok": True, "no": False, "none": None}',
            {"ok": True, "no": False, "none": None},
            id="python literals",
        ),
        pytest.param('{"s": "True stays text"}', {"s": "True stays text"}, id="literal in text"),
        pytest.param('{text: "x", tags: ["a"]}', {"text": "x", "tags": ["a"]}, id="bare keys"),
        pytest.param('{"a": 1}\n{"a": 2}', [{"a": 1}, {"a": 2}], id="json lines"),
        pytest.param('{"a": 1}, {"a": 2}', [{"a": 1}, {"a": 2}], id="objects with commas"),
        pytest.param('{"t": "two\nlines"}', {"t": "two\nlines"}, id="raw newline in string"),
        pytest.param("<think>[wrong]</think>[1]", [1], id="think block"),
    ],
)
def test_repairs(text: str, expected: Any) -> None:
    assert parse_lenient(text) == expected


@pytest.mark.parametrize("text", ["", "Sorry, I can't help with that.", "[1, 2", "{'a': }"])
def test_what_cannot_be_repaired_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_lenient(text)


@pytest.mark.parametrize(
    ("value", "expect", "expected"),
    [
        ([1], "array", [1]),
        ({"facts": [1, 2]}, "array", [1, 2]),
        ({"memories": []}, "array", []),
        ({"whatever": [3]}, "array", [3]),
        ({"text": "x", "tags": ["a"]}, "array", [{"text": "x", "tags": ["a"]}]),
        ({}, "array", []),
        ({"a": 1}, "object", {"a": 1}),
        ([{"a": 1}], "object", {"a": 1}),
    ],
)
def test_shape(value: Any, expect: Any, expected: Any) -> None:
    assert shape(value, expect) == expected


@pytest.mark.parametrize(("value", "expect"), [("text", "array"), (3, "array"), ([1, 2], "object")])
def test_shape_refuses_what_does_not_fit(value: Any, expect: Any) -> None:
    with pytest.raises(ValueError):
        shape(value, expect)


ASK = [{"role": "user", "content": "facts please"}]


def test_complete_json_reads_a_good_answer_in_one_call() -> None:
    model = ScriptedChatModel(['{"facts": [{"text": "a"}]}'])
    assert complete_json(model, ASK) == [{"text": "a"}]
    assert len(model.calls) == 1
    assert model.calls[0].json


def test_complete_json_repairs_once() -> None:
    model = ScriptedChatModel(["here you go: [oops", '[{"text": "a"}]'])
    assert complete_json(model, ASK) == [{"text": "a"}]
    repair = model.calls[1].messages
    assert repair[:-2] == ASK
    assert repair[-2] == {"role": "assistant", "content": "here you go: [oops"}
    assert "JSON array" in repair[-1]["content"]
    assert model.calls[1].json


def test_complete_json_gives_up_after_one_repair_with_the_raw_answer() -> None:
    model = ScriptedChatModel(["nope", "still " + "nope " * 1000])
    with pytest.raises(LLMResponseError, match="after one repair") as caught:
        complete_json(model, ASK, expect="object")
    assert len(model.calls) == 2
    assert caught.value.raw is not None
    assert caught.value.raw.startswith("still nope")
    assert len(caught.value.raw) <= LLMResponseError.RAW_LIMIT + 1


def test_a_wrong_shape_also_gets_the_repair() -> None:
    model = ScriptedChatModel(['"just a string"', '{"facts": []}'])
    assert complete_json(model, ASK) == []


def test_the_repair_prompt_can_be_replaced() -> None:
    model = ScriptedChatModel(["bad", "[]"])
    complete_json(model, ASK, repair_prompt="fix it ({shape})")
    assert model.calls[1].messages[-1]["content"] == "fix it (JSON array)"
    assert "{error}" in REPAIR_PROMPT
