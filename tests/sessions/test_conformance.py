"""The SessionStore contract (SPEC S1, S2, S3, S5), run on every backend."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from chatmem.errors import ConflictError, StoreError, ValidationError
from chatmem.messages import Message, SessionKey, now_ms
from chatmem.sessions import SessionState, SessionStore
from tests.sessions.helpers import (
    append_under_contention,
    check_contended_log,
    drop_redis_prefix,
    message,
    open_backend,
    random_key,
)

# -- the log ----------------------------------------------------------------------------------


def test_a_session_never_written_is_empty(store: SessionStore, key: SessionKey) -> None:
    assert store.read(key) == []
    assert store.read(key, -3) == []
    assert store.length(key) == 0


def test_batches_keep_their_order_and_return_the_new_length(
    store: SessionStore, key: SessionKey
) -> None:
    first = [message("hello", 1), message("hi there", 1, role="assistant")]
    second = [message("how are you?", 2)]
    assert store.append(key, first) == 2
    assert store.append(key, second) == 3
    assert store.read(key) == first + second
    assert store.length(key) == 3


def test_an_empty_batch_stores_nothing(store: SessionStore, key: SessionKey) -> None:
    store.append(key, [message("one", 1)])
    assert store.append(key, []) == 1
    assert store.length(key) == 1


def test_a_batch_whose_later_message_goes_back_stores_nothing(
    store: SessionStore, key: SessionKey
) -> None:
    store.append(key, [message("a", 4)])
    bad = [message("b", 5), message("c", 6), message("d", 3)]
    with pytest.raises(ValidationError) as caught:
        store.append(key, bad)
    assert caught.value.field == "messages[2].turn_id"
    assert [m.content for m in store.read(key)] == ["a"]
    # The refused batch did not move the stored last turn either.
    assert store.append(key, [message("e", 4)]) == 2


def test_a_turn_before_the_stored_last_turn_is_refused(
    store: SessionStore, key: SessionKey
) -> None:
    store.append(key, [message("a", 3), message("no turn")])
    with pytest.raises(ValidationError) as caught:
        store.append(key, [message("late", None), message("b", 2)])
    assert caught.value.field == "messages[1].turn_id"
    assert store.length(key) == 2


def test_a_reply_shares_its_user_message_turn(store: SessionStore, key: SessionKey) -> None:
    store.append(key, [message("Can you tell me a joke?", 2)])
    store.append(key, [message("Why did the scarecrow ", 2, role="assistant")])
    store.append(key, [message("tell me a story", 3), message("Once upon a time", 3, "assistant")])
    assert [m.turn_id for m in store.read(key)] == [2, 2, 3, 3]


SLICES = [
    (0, None),
    (2, None),
    (-3, None),
    (-100, None),
    (0, 4),
    (3, 7),
    (2, -2),
    (-4, -1),
    (0, 0),
    (5, 3),
    (-2, 3),
    (7, None),
    (100, None),
    (0, -100),
    (1, 100),
    (-1, None),
]


@pytest.mark.parametrize(("start", "stop"), SLICES)
def test_read_slices_like_a_list(
    store: SessionStore, key: SessionKey, start: int, stop: int | None
) -> None:
    log = [message(f"m{i}", i) for i in range(7)]
    store.append(key, log)
    assert store.read(key, start, stop) == log[start:stop]


# -- rich messages (S2) -----------------------------------------------------------------------


def _seed_conversation() -> list[Message]:
    """The voice-agent conversation of seed 003, with every field a message can carry."""
    rows = [
        ("assistant", "How can I help you today?", 1, 1678901234000, {"source": "greeting"}),
        ("user", "Can you tell me a joke?", 2, 1678901235000, {"source": "asr", "user": "u123"}),
        (
            "assistant",
            "Why did the scarecrow ",
            2,
            1678901236000,
            {
                "source": "llm",
                "interrupted": True,
                "interrupt_timestamp": 1678905225000,
                "original": "Why did the scarecrow win an award? Because he was outstanding in"
                " his field!",
            },
        ),
        ("user", "You know what? Tell me a story instead.", 3, 1678905235000, {"source": "asr"}),
        ("assistant", "Are you still there?", 4, 1678905236000, {"source": "command"}),
        ("assistant", "", 4, 1678905237000, {"source": "llm_failure"}),
        ("assistant", "…", 5, 1678905238000, {"source": "silence"}),
        ("user", "typed", 5, 1678905239000, {"source": "message"}),
    ]
    return [
        Message.model_validate(
            {"role": role, "content": text, "turn_id": turn, "timestamp": ts, "metadata": meta}
        )
        for role, text, turn, ts, meta in rows
    ]


def _tool_round() -> list[Message]:
    return [
        Message.model_validate(
            {
                "role": "system",
                "content": 'Du bist hilfreich. 你好 👋 "quotes" \\ back\nslash\ttab \u0000',
                "name": "policy",
            }
        ),
        Message.model_validate(
            {
                "role": "assistant",
                "content": "",
                "turn_id": 6,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "function": {"name": "weather", "arguments": '{"city": "Zürich"}'},
                    },
                    {"id": "call_2", "type": "function", "function": {"name": "noop"}},
                ],
                "metadata": {
                    "source": "llm",
                    "trace": {"spans": [1, 2.5, None, True], "deep": {"é": "ü"}},
                    "tags": [],
                    "score": 0.1,
                    "big": 2**62,
                },
            }
        ),
        Message.model_validate(
            {
                "role": "tool",
                "content": '{"temp": 21.5}',
                "tool_call_id": "call_1",
                "turn_id": 6,
                "parts": [
                    {"type": "image", "url": "https://example.com/a.png", "size": [640, 480]},
                    {"type": "file", "name": "ß.pdf", "meta": {}},
                ],
            }
        ),
    ]


def test_every_message_field_round_trips_exactly(store: SessionStore, key: SessionKey) -> None:
    sent = _seed_conversation() + _tool_round()
    store.append(key, sent)
    got = store.read(key)
    assert got == sent
    assert [m.model_dump_json() for m in got] == [m.model_dump_json() for m in sent]
    assert got[2].metadata.original is not None and got[2].metadata.interrupted
    assert got[9].metadata.model_extra == sent[9].metadata.model_extra


def test_the_state_round_trips_with_its_summary_and_working_state(
    store: SessionStore, key: SessionKey
) -> None:
    store.append(key, [message("a", 1)] * 3)
    state = SessionState(
        window_start=2,
        summary=message("They talked about Hawaii 🌺", role="system"),
        working_state={"topic": "trip", "figures": {"budget": 10000.5}, "open": [], "x": None},
        working_state_at=3,
        flushed_upto=1,
    )
    saved = store.save_state(key, state)
    assert saved == state.model_copy(update={"revision": 1})
    assert store.state(key) == saved


# -- state ------------------------------------------------------------------------------------


def test_state_defaults_and_compare_and_set(store: SessionStore, key: SessionKey) -> None:
    assert store.state(key) == SessionState()
    first = store.save_state(key, SessionState(window_start=1))
    assert first.revision == 1 and store.state(key) == first
    second = store.save_state(key, first.model_copy(update={"window_start": 2}))
    assert second.revision == 2
    with pytest.raises(ConflictError):
        store.save_state(key, first.model_copy(update={"window_start": 9}))
    with pytest.raises(ConflictError):
        store.save_state(random_key(key.tenant_id), SessionState(revision=3))
    assert store.state(key) == second


def test_an_append_reopens_an_ended_session(store: SessionStore, key: SessionKey) -> None:
    store.append(key, [message("a", 1)])
    assert store.state(key).revision == 0  # an append to an open session keeps the revision
    ended = store.save_state(key, store.state(key).model_copy(update={"ended_at": 1234}))
    assert store.state(key).ended_at == 1234
    assert store.sessions(key.tenant_id, key.user_id)[0].ended_at == 1234
    store.append(key, [message("b", 2)])
    reopened = store.state(key)
    assert reopened.ended_at is None
    assert reopened.revision == ended.revision + 1
    assert store.sessions(key.tenant_id, key.user_id)[0].ended_at is None
    with pytest.raises(ConflictError):
        store.save_state(key, ended)


# -- listing ----------------------------------------------------------------------------------


def _tick() -> None:
    """Let the millisecond clock move, so updated_at orders the appends."""
    time.sleep(0.003)


def test_sessions_newest_first_with_length_and_end(store: SessionStore, tenant: str) -> None:
    keys = [SessionKey(tenant, "alice", name) for name in ("s1", "s2", "s3")]
    for index, key in enumerate(keys):
        store.append(key, [message(f"m{i}") for i in range(index + 1)])
        _tick()
    store.append(keys[0], [message("again")])
    store.save_state(keys[1], SessionState(ended_at=99))
    infos = store.sessions(tenant, "alice")
    assert [(i.session_id, i.length, i.ended_at) for i in infos] == [
        ("s1", 2, None),
        ("s3", 3, None),
        ("s2", 2, 99),
    ]
    assert infos[0].updated_at >= infos[1].updated_at > infos[2].updated_at
    assert store.sessions(tenant, "nobody") == []


def test_a_state_alone_makes_an_empty_session(store: SessionStore, key: SessionKey) -> None:
    store.save_state(key, SessionState(window_start=0))
    (info,) = store.sessions(key.tenant_id, key.user_id)
    assert (info.session_id, info.length, info.ended_at) == (key.session_id, 0, None)


def test_nothing_crosses_tenants_or_users(store: SessionStore, tenant: str) -> None:
    other_tenant = tenant + "-other"
    places = [
        SessionKey(tenant, "alice", "same"),
        SessionKey(tenant, "bob", "same"),
        SessionKey(other_tenant, "alice", "same"),
    ]
    for index, key in enumerate(places):
        store.append(key, [message(f"{key.tenant_id}/{key.user_id}", index)] * (index + 1))
        store.save_state(key, SessionState(window_start=index))
    for index, key in enumerate(places):
        assert store.length(key) == index + 1
        assert {m.content for m in store.read(key)} == {f"{key.tenant_id}/{key.user_id}"}
        assert store.state(key).window_start == index
        (info,) = store.sessions(key.tenant_id, key.user_id)
        assert info.length == index + 1
    assert store.delete(places[0])
    assert [store.length(key) for key in places] == [0, 2, 3]
    assert store.delete_user(tenant, "bob") == 1
    assert [store.length(key) for key in places] == [0, 0, 3]
    assert store.sessions(other_tenant, "alice")[0].length == 3


def test_idle_lists_open_sessions_with_messages_oldest_first(
    store: SessionStore, tenant: str
) -> None:
    old, older_but_ended, newer, empty = (
        SessionKey(tenant, "alice", name) for name in ("old", "ended", "newer", "empty")
    )
    store.append(old, [message("a")])
    store.append(older_but_ended, [message("a")])
    store.save_state(older_but_ended, SessionState(ended_at=1))
    _tick()
    store.append(SessionKey(tenant, "bob", "newer"), [message("b")])
    _tick()
    store.save_state(empty, SessionState())
    cutoff = now_ms()
    _tick()
    store.append(newer, [message("c")])

    def mine(keys: list[SessionKey]) -> list[SessionKey]:
        return [k for k in keys if k.tenant_id == tenant]

    found = mine(store.idle(cutoff, limit=100_000))
    assert found == [old, SessionKey(tenant, "bob", "newer")]
    assert mine(store.idle(now_ms() + 1, limit=100_000))[-1] == newer
    assert len(store.idle(now_ms() + 1, limit=1)) == 1
    store.append(older_but_ended, [message("reopened")])
    assert older_but_ended in store.idle(now_ms() + 1, limit=100_000)
    store.delete(old)
    assert old not in store.idle(now_ms() + 1, limit=100_000)


# -- deletes and texts ------------------------------------------------------------------------


def test_delete_forgets_log_and_state(store: SessionStore, key: SessionKey) -> None:
    store.append(key, [message("a", 1)])
    store.save_state(key, SessionState(window_start=1))
    assert store.delete(key) is True
    assert store.read(key) == [] and store.length(key) == 0
    assert store.state(key) == SessionState()
    assert store.sessions(key.tenant_id, key.user_id) == []
    assert store.delete(key) is False
    store.append(key, [message("fresh start", 0)])  # turn 0 after turn 1: the past is gone
    assert store.length(key) == 1


def test_delete_user_counts_every_session_of_that_user_only(
    store: SessionStore, tenant: str
) -> None:
    for name in ("a", "b"):
        store.append(SessionKey(tenant, "alice", name), [message("x")])
    store.save_state(SessionKey(tenant, "alice", "state-only"), SessionState())
    store.append(SessionKey(tenant, "alicia", "a"), [message("y")])
    assert store.delete_user(tenant, "alice") == 3
    assert store.sessions(tenant, "alice") == []
    assert store.length(SessionKey(tenant, "alice", "a")) == 0
    assert [i.session_id for i in store.sessions(tenant, "alicia")] == ["a"]
    assert store.delete_user(tenant, "alice") == 0


def test_texts_are_kept_per_tenant(store: SessionStore, tenant: str) -> None:
    assert store.get_text(tenant, "persona") is None
    store.put_text(tenant, "persona", "You are terse. ✂️")
    store.put_text(tenant + "-other", "persona", "You are chatty.")
    assert store.get_text(tenant, "persona") == "You are terse. ✂️"
    store.put_text(tenant, "persona", "")
    assert store.get_text(tenant, "persona") == ""
    assert store.get_text(tenant + "-other", "persona") == "You are chatty."


def test_a_deleted_text_is_gone_for_its_tenant_only(store: SessionStore, tenant: str) -> None:
    store.put_text(tenant, "facts:ana", "[1]")
    store.put_text(tenant + "-other", "facts:ana", "[2]")
    assert store.delete_text(tenant, "facts:ana") is True
    assert store.get_text(tenant, "facts:ana") is None
    assert store.delete_text(tenant, "facts:ana") is False
    assert store.get_text(tenant + "-other", "facts:ana") == "[2]"


# -- concurrency ------------------------------------------------------------------------------


def test_threads_appending_to_one_session_never_break_turn_order(
    store: SessionStore, key: SessionKey
) -> None:
    writers = [f"w{i}" for i in range(4)]
    errors: list[BaseException] = []

    def work(writer: str) -> None:
        try:
            append_under_contention(store, key, writer, 20)
        except BaseException as exc:  # boundary: collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    check_contended_log(store, key, writers, 20)


# -- closing (issue 20) ------------------------------------------------------------------------


def test_a_closed_session_store_refuses_every_call_with_store_error(
    backend: str, tmp_path: Path
) -> None:
    prefix = f"chatmem-test-{uuid.uuid4().hex[:12]}"
    opened = open_backend(backend, tmp_path, prefix)
    key = random_key()
    try:
        opened.append(key, [message("before close", 1)])
        opened.close()
        calls = {
            "append": lambda: opened.append(key, [message("after close", 2)]),
            "read": lambda: opened.read(key),
            "length": lambda: opened.length(key),
            "state": lambda: opened.state(key),
            "sessions": lambda: opened.sessions(key.tenant_id, key.user_id),
            "idle": lambda: opened.idle(now_ms()),
            "delete": lambda: opened.delete(key),
        }
        for call in calls.values():
            with pytest.raises(StoreError):
                call()
        opened.close()  # closing twice is harmless
    finally:
        if backend == "redis":
            drop_redis_prefix(prefix)


def test_the_extraction_mark_moves_forward_only(store: SessionStore, key: SessionKey) -> None:
    store.append(key, [message("one", 1), message("two", 2), message("three", 3)])
    assert store.state(key).extracted_upto == 0
    store.mark_extracted(key, 2)
    store.mark_extracted(key, 1)  # never back
    assert store.state(key).extracted_upto == 2
    assert key in store.unextracted()
    store.mark_extracted(key, 3)
    assert store.state(key).extracted_upto == 3
    assert key not in store.unextracted()


def test_marking_a_forgotten_session_does_not_bring_it_back(
    store: SessionStore, key: SessionKey
) -> None:
    """Extraction marks a session after its turn is answered; the user may be forgotten in
    between. The mark must not create an empty session that lists again."""
    store.append(key, [message("one", 1), message("two", 2)])
    store.delete_user(key.tenant_id, key.user_id)
    store.mark_extracted(key, 2)
    assert store.sessions(key.tenant_id, key.user_id) == []
