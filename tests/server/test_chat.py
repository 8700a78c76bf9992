"""The chat proxy over HTTP, through the official openai SDK where a client would use it."""

from __future__ import annotations

import openai
from fastapi.testclient import TestClient

from chatmem.testing import ScriptedOpenAIServer
from tests.server.conftest import drain


def sdk(client: TestClient, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{client.base_url}/v1", api_key=key, http_client=client)


def test_a_fact_told_in_one_session_is_injected_in_the_next(
    service: TestClient, upstream: ScriptedOpenAIServer
) -> None:
    chat = sdk(service)
    told = chat.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "My budget for the Hawaii trip is $10,000."}],
        extra_body={"memory_context": {"user_id": "alice", "session_id": "march-15"}},
    )
    assert told.choices[0].message.content == "seen: My budget for the Hawaii trip is $10,000."
    drain(service)
    asked = chat.chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": "What's my budget for the trip?"}],
        extra_body={"memory_context": {"user_id": "alice", "session_id": "march-20"}},
    )
    assert asked.headers["x-chatmem-memory"] == "injected"
    sent = upstream.chat_requests[-1]["messages"]
    assert sent[0]["role"] == "system"
    assert "User's relevant context" in sent[0]["content"]
    assert "$10,000" in sent[0]["content"]
    assert sent[1] == {"role": "user", "content": "What's my budget for the trip?"}
