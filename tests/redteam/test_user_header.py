"""The user named in the X-Chatmem-User header, in UTF-8."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from chatmem.server.deps import header_text
from chatmem.server.errors import ApiError
from tests.server.conftest import ServiceFactory, settle


def test_a_utf8_user_header_names_the_same_user_as_the_body(
    make_service: ServiceFactory,
) -> None:
    client = make_service()
    answered = client.post(
        "/v1/chat/completions",
        headers={
            "X-Chatmem-User": "José".encode(),  # type: ignore[dict-item]
            "X-Chatmem-Session": "s1",
        },
        json={"model": "m", "messages": [{"role": "user", "content": "My cat is called Misu"}]},
    )
    assert answered.status_code == 200, answered.text
    settle()
    listed = client.get("/v1/sessions", params={"user_id": "José"})
    assert [s["session_id"] for s in listed.json()["sessions"]] == ["s1"]


def test_a_header_id_that_is_not_utf8_is_refused_naming_it() -> None:
    """Bytes that are not UTF-8 (an HTTP client can send any): a 400 naming the header.
    (httpx re-encodes a bytes header, so the request is built from its raw bytes here.)"""
    raw = Request({"type": "http", "headers": [(b"x-chatmem-user", b"Jos\xe9")]})
    with pytest.raises(ApiError) as raised:
        header_text(raw, "X-Chatmem-User")
    assert raised.value.status == 400 and raised.value.param == "X-Chatmem-User"
    fine = Request({"type": "http", "headers": [(b"x-chatmem-user", "José".encode())]})
    assert header_text(fine, "X-Chatmem-User") == "José"
    assert header_text(fine, "X-Chatmem-Session") is None
