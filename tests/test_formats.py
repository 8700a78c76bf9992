"""Message formats in and out: OpenAI, Vercel AI SDK, the rich voice-agent shape."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from chatmem.errors import ValidationError
from chatmem.formats import parse_message, parse_messages, render_message, render_messages
from chatmem.messages import Message, MessageSource, Role

# The seed's example, timestamps in seconds as the seed writes them.
SEED = [
    {"role": "assistant", "content": "How can I help you today?", "turn_id": 1,
     "timestamp": 1678901234, "metadata": {"source": "greeting"}},
    {"role": "user", "content": "Can you tell me a joke?", "turn_id": 2,
     "timestamp": 1678901235, "metadata": {"source": "asr", "user": "user123"}},
    {"role": "assistant", "content": "Why did the scarecrow ", "turn_id": 2,
     "timestamp": 1678901236, "metadata": {"interrupted": True,
     "interrupt_timestamp": 1678905225000,
     "original": "Why did the scarecrow win an award? Because he was outstanding in his field!",
     "source": "llm"}},
]  # fmt: skip


def test_the_seed_shape_reads_in_with_millisecond_times() -> None:
    messages = parse_messages(SEED, "rich")
    assert [m.turn_id for m in messages] == [1, 2, 2]
    assert messages[0].timestamp == 1678901234000
    assert messages[1].metadata.source is MessageSource.ASR
    assert messages[1].metadata.user == "user123"
    assert messages[2].metadata.interrupted


def test_standard_export_is_role_and_content_only() -> None:
    out = render_messages(parse_messages(SEED, "rich"))
    assert out[2] == {"role": "assistant", "content": "Why did the scarecrow "}
    assert all(set(m) == {"role", "content"} for m in out)


def test_custom_export_keeps_every_field_and_hides_defaults() -> None:
    out = render_messages(parse_messages(SEED, "rich"), mode="custom")
    assert out[1]["metadata"] == {"source": "asr", "user": "user123"}
    assert out[1]["turn_id"] == 2 and out[1]["timestamp"] == 1678901235000
    assert "interrupted" not in out[1]["metadata"]
    assert out[2]["metadata"]["interrupted"] is True


def test_an_interrupted_reply_can_be_exported_with_its_original_text() -> None:
    interrupted = parse_messages(SEED, "rich")[2]
    assert render_message(interrupted, interrupted="original")["content"].endswith("his field!")
    assert render_message(interrupted)["content"] == "Why did the scarecrow "


def test_vercel_ui_messages_read_and_write() -> None:
    ui = {
        "id": "m1",
        "role": "user",
        "parts": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,AAAA"},
        ],
        "metadata": {"createdAt": "2024-05-08T13:56:00.000Z"},
    }
    message = parse_message(ui, "vercel")
    assert message.content == "What is in this picture?"
    assert message.timestamp == 1715176560000
    assert message.parts == ui["parts"]
    assert render_message(message, "vercel") == {
        "id": "m1",
        "role": "user",
        "parts": ui["parts"],
        "metadata": {"createdAt": "2024-05-08T13:56:00.000+00:00"},
    }


def test_legacy_vercel_messages_with_content_and_created_at_read_in() -> None:
    message = parse_message(
        {"id": "1", "role": "assistant", "content": "Hello!", "createdAt": 1715176560000},
        "vercel",
    )
    assert (message.role, message.content, message.timestamp) == (
        Role.ASSISTANT,
        "Hello!",
        1715176560000,
    )


def test_openai_content_parts_and_tool_calls_round_trip() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
        ],
    }
    result = {"role": "tool", "content": "sunny", "tool_call_id": "c1"}
    multimodal = {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        ],
    }
    messages = parse_messages([call, result, multimodal])
    out = render_messages(messages)
    assert out[0] == {**call, "content": ""}
    assert out[1] == result
    assert out[2] == multimodal
    assert messages[2].content == "look"


@pytest.mark.parametrize(
    ("data", "format", "field"),
    [
        ({"role": "robot", "content": "x"}, "openai", "messages[0].role"),
        ({"role": "user"}, "openai", "messages[0].content"),
        ({"role": "user", "content": None}, "openai", "messages[0].content"),
        ({"role": "tool", "content": "x"}, "openai", "messages[0]"),
        ({"role": "user", "content": "x", "turn_id": -1}, "rich", "messages[0].turn_id"),
        ({"role": "tool", "parts": []}, "vercel", "messages[0].role"),
        ({"role": "user"}, "vercel", "messages[0].content"),
        ({"role": "user", "content": "x", "createdAt": "yesterday"}, "vercel",
         "messages[0].createdAt"),
        ("just text", "openai", "messages[0]"),
        ({"role": "user", "content": "x", "metadata": {"source": "radio"}}, "rich",
         "messages[0].metadata.source"),
    ],
)  # fmt: skip
def test_bad_messages_name_the_field(data: Any, format: Any, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_messages([data], format)
    assert caught.value.field is not None and caught.value.field.startswith(field)


texts = st.text(max_size=40)
rich_messages = st.builds(
    Message,
    role=st.sampled_from([Role.USER, Role.ASSISTANT, Role.SYSTEM]),
    content=texts,
    turn_id=st.none() | st.integers(min_value=0, max_value=10**6),
    timestamp=st.integers(min_value=10**11, max_value=4 * 10**12),
    metadata=st.fixed_dictionaries(
        {},
        optional={
            "source": st.sampled_from(list(MessageSource)),
            "interrupted": st.booleans(),
            "original": texts,
            "user": texts,
            "note": st.integers() | texts,
        },
    ),
)


@settings(max_examples=80, deadline=None)
@given(message=rich_messages, format=st.sampled_from(["rich", "vercel"]))
# Float rounding once lost this millisecond on the way through an ISO date.
@example(message=Message(role=Role.USER, content="", timestamp=2_165_344_989_193), format="vercel")
def test_custom_and_vercel_exports_round_trip_exactly(message: Message, format: Any) -> None:
    wire = json.loads(json.dumps(render_message(message, format, mode="custom")))
    assert parse_message(wire, format) == message
