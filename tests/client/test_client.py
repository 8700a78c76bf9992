"""``Client`` and ``AsyncClient`` against a real service: every method, the error mapping,
pages across many cursors, export and import streamed both ways, and keys with tenants and
roles. Each test runs on both faces (``face``: the async one driven through ``Blocking``)."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chatmem import (
    AsyncClient,
    AuthenticationError,
    Client,
    ConflictError,
    Filter,
    HistoryEntry,
    HistoryEvent,
    ImportFormatError,
    MemoryRecord,
    MemoryType,
    NotFoundError,
    Page,
    SearchResult,
    ValidationError,
)
from chatmem.client import EndedSession, NewApiKey, SessionInfo, SessionView
from chatmem.long_term import EXPORT_FORMAT
from tests.client.conftest import ADMIN_KEY, Blocking, Served


class Connect:
    """``connect(**options)``: a client of the module's service, of one ``face`` (sync, or
    async driven through ``Blocking``); closed when the test ends."""

    def __init__(self, face: str, url: str, runner: asyncio.Runner) -> None:
        self.face = face
        self.url = url
        self.runner = runner
        self.opened: list[Any] = []

    def __call__(self, **options: Any) -> Any:
        if self.face == "sync":
            client: Any = Client(self.url, **options)
        else:
            client = Blocking(AsyncClient(self.url, **options), self.runner)
        self.opened.append(client)
        return client

    def user(self, name: str) -> str:
        """An id of this test and face (the module shares one service)."""
        return f"{name}-{self.face}"


@pytest.fixture(params=["sync", "async"])
def connect(
    request: pytest.FixtureRequest, served: Served, runner: asyncio.Runner
) -> Iterator[Connect]:
    connector = Connect(request.param, served.url, runner)
    yield connector
    for client in connector.opened:
        client.close()


# -- memories ----------------------------------------------------------------------------------


def test_every_memory_method(connect: Connect) -> None:
    client = connect()
    user = connect.user("ana")
    [text] = client.add(
        "I live in Lisbon and work as a nurse.",
        user_id=user,
        metadata={"origin": "intake"},
        tags=["home"],
        importance=0.8,
    )
    assert isinstance(text, MemoryRecord) and text.type is MemoryType.SEMANTIC
    assert text.user_metadata == {"origin": "intake"} and text.metadata.tags == ["home"]
    chat = client.add(
        [
            {"role": "user", "content": "My cat is called Miso."},
            {"role": "assistant", "content": "Miso is a lovely name."},
        ],
        user_id=user,
        project_id="pets",
        session_id="s1",
    )
    assert [r.type for r in chat] == [MemoryType.EPISODIC] * 2
    assert chat[0].context is not None and chat[0].context.after is not None

    assert client.get(text.id, user_id=user) == text
    found = client.search("where does the user live", user_id=user, k=2)
    assert all(isinstance(r, SearchResult) for r in found)
    assert found[0].record.id == text.id and 0 < found[0].score <= 1
    pets = client.search("cat", user_id=user, filter=Filter(project_id="pets"))
    assert {r.record.id for r in pets} <= {r.id for r in chat}

    changed = client.update(text.id, "I live in Porto and work as a nurse.", user_id=user)
    assert changed.text.startswith("I live in Porto") and changed.metadata.version == 2
    tagged = client.update(text.id, tags=["home", "city"], confidence=0.9, reason="said so")
    assert tagged.metadata.version == 3 and tagged.metadata.confidence == 0.9
    history = client.history(text.id, user_id=user)
    assert all(isinstance(e, HistoryEntry) for e in history)
    assert [e.event for e in history] == [HistoryEvent.ADD] + [HistoryEvent.UPDATE] * 2
    assert history[-1].reason == "said so" and history[1].old is not None

    page = client.list(Filter(user_id=user), limit=2)
    assert isinstance(page, Page) and len(page.records) == 2 and page.next_cursor is not None
    assert client.count(Filter(user_id=user)) == 3
    assert client.count(Filter(user_id=user, project_id="pets")) == 2
    assert client.count(Filter(user_id=user, types=frozenset({MemoryType.SEMANTIC}))) == 1

    assert client.delete(chat[1].id, user_id=user) is None
    with pytest.raises(NotFoundError) as missing:
        client.get(chat[1].id, user_id=user)
    assert missing.value.memory_id == chat[1].id and missing.value.what == "memory"
    assert client.history(chat[1].id)[-1].event is HistoryEvent.DELETE
    with pytest.raises(NotFoundError):
        client.delete(chat[1].id)
    assert client.delete_all(Filter(user_id=user, project_id="pets")) == 1
    assert client.delete_all(Filter(user_id=user)) == 1
    assert client.count(Filter(user_id=user)) == 0


def test_pages_follow_the_cursors_across_many_pages(connect: Connect) -> None:
    client = connect()
    user = connect.user("many")
    count = 1_234
    assert client.import_jsonl(_export_lines(user, count)) == count

    pages = list(client.pages(Filter(user_id=user), limit=50))
    assert len(pages) == 25 and all(p.next_cursor for p in pages[:-1])
    assert pages[-1].next_cursor is None
    texts = [r.text for p in pages for r in p.records]
    assert texts == [f"note {n}" for n in range(count)]  # oldest first, none twice
    assert [r.text for r in client.list_all(Filter(user_id=user), page_size=500)] == texts
    assert client.count(Filter(user_id=user)) == count
    assert client.delete_all(Filter(user_id=user)) == count


def _export_lines(user: str, count: int) -> Iterator[str]:
    """``count`` export lines for ``user``, each with its own unit vector, made one at a
    time (the import streams them)."""
    rng = np.random.default_rng(7)
    for n in range(count):
        vector = rng.standard_normal(384)
        record = {
            "user_id": user,
            "content": {"raw": f"note {n}"},
            "time": {"created_at": f"2024-01-01T00:00:{n // 1000:02d}.{n % 1000:03d}Z"},
        }
        yield json.dumps(
            {
                "format": EXPORT_FORMAT,
                "record": record,
                "vector": (vector / np.linalg.norm(vector)).tolist(),
            }
        )


def test_export_then_import_round_trips_through_a_file(connect: Connect, tmp_path: Path) -> None:
    client = connect()
    user = connect.user("mover")
    added = client.add(
        [{"role": "user", "content": f"Fact {n}: I collect stamps from {n} countries."} for n in
         range(5)],
        user_id=user,
    )  # fmt: skip
    client.update(added[0].id, "Fact 0: I collect coins now.")
    before = list(client.list_all(Filter(user_id=user)))

    path = tmp_path / "export.jsonl"
    with path.open("w") as out:
        assert client.export_jsonl(Filter(user_id=user), out) == 5
    assert len(list(client.export_lines(Filter(user_id=user)))) == 5
    assert client.delete_all(Filter(user_id=user)) == 5

    with path.open() as lines:  # the file is read a line at a time, not loaded
        assert client.import_jsonl(lines) == 5
    after = list(client.list_all(Filter(user_id=user)))
    assert [(r.id, r.text, r.metadata.version) for r in after] == [
        (r.id, r.text, r.metadata.version) for r in before
    ]
    assert client.search("coins", user_id=user, k=1)[0].record.id == added[0].id
    # Every id is its user's already: all or nothing.
    with path.open() as lines, pytest.raises(ValidationError) as taken:
        client.import_jsonl(lines)
    assert taken.value.field == "id"
    client.delete_all(Filter(user_id=user))


# -- errors ------------------------------------------------------------------------------------


def test_errors_map_to_the_exception_tree(connect: Connect) -> None:
    client = connect()
    user = connect.user("errs")
    with pytest.raises(ValidationError) as empty:
        client.search("", user_id=user)
    assert empty.value.field == "query" and not str(empty.value).startswith("query: query")
    with pytest.raises(ValidationError) as bad_k:
        client.search("x", user_id=user, k=0)
    assert bad_k.value.field == "k"
    with pytest.raises(ValidationError) as bad_role:
        client.add([{"role": "robot", "content": "beep"}], user_id=user)
    assert bad_role.value.field == "messages[0].role"
    with pytest.raises(ValidationError) as bad_key:
        client.add("hello", user_id=user, metadata={"no spaces": 1})
    assert bad_key.value.field == "metadata"
    [record] = client.add("something", user_id=user)
    with pytest.raises(ValidationError) as nothing:
        client.update(record.id)
    assert "nothing to update" in str(nothing.value)

    # Refused here, before a request: what the service cannot do is named, never ignored.
    with pytest.raises(ValidationError) as unfiltered:
        client.list(Filter(user_id=user, valid_at=datetime.now(UTC)))
    assert unfiltered.value.field == "filter.valid_at"
    with pytest.raises(ValidationError) as whose:
        client.delete_all(Filter())
    assert whose.value.field == "filter.user_id"

    with pytest.raises(NotFoundError) as missing:
        client.get("no-such-id")
    assert missing.value.memory_id == "no-such-id"
    with pytest.raises(NotFoundError) as no_session:
        client.sessions.read("no-such-session", user_id=user)
    assert no_session.value.what == "session"

    line = json.dumps({"format": EXPORT_FORMAT, "record": {"user_id": user, "content": {}}})
    good = next(_export_lines(user, 1))
    with pytest.raises(ImportFormatError) as malformed:
        client.import_jsonl([good, line])
    assert malformed.value.line == 2 and malformed.value.field == "record.content.raw"
    with pytest.raises(ImportFormatError) as not_json:
        client.import_jsonl([good, good, '{"format": NaN}'])
    assert not_json.value.line == 3
    assert client.count(Filter(user_id=user)) == 1  # nothing of a refused import stored


def test_a_bad_or_revoked_key_is_an_authentication_error(connect: Connect) -> None:
    with pytest.raises(AuthenticationError) as unknown:
        connect(api_key="cm-not-a-key").get("anything")
    assert unknown.value.status_code == 401
    admin = connect(api_key=ADMIN_KEY)
    made = admin.admin.create_key("revoked-tenant")
    holder = connect(api_key=made.key)
    assert holder.count(Filter(user_id="u")) == 0
    with pytest.raises(AuthenticationError) as not_admin:
        holder.admin.keys()
    assert not_admin.value.status_code == 403
    assert admin.admin.revoke_key(made.key_id).revoked
    with pytest.raises(AuthenticationError) as revoked:
        holder.count(Filter(user_id="u"))
    assert revoked.value.status_code == 401
    with pytest.raises(NotFoundError) as gone:
        admin.admin.revoke_key("key_nope")
    assert gone.value.what == "API key"


def test_a_concurrent_update_is_a_conflict(served: Served) -> None:
    with Client(served.url) as client:
        [record] = client.add("Version zero of a busy memory.", user_id="racer")

        def rewrite(n: int) -> str:
            try:
                client.update(record.id, f"Version {n} of a busy memory, rewritten.")
            except ConflictError as exc:
                return f"conflict: {exc}"
            return "ok"

        outcomes: list[str] = []
        with ThreadPoolExecutor(8) as pool:
            for round_ in range(30):  # the race is the service's; a few rounds show it
                outcomes += pool.map(rewrite, range(round_ * 8, round_ * 8 + 8))
                if any(o.startswith("conflict") for o in outcomes):
                    break
        assert any(o.startswith("conflict: memory") for o in outcomes), outcomes
        assert "ok" in outcomes
        version = client.get(record.id).metadata.version
        assert version == 1 + outcomes.count("ok")  # a conflict changed nothing


# -- sessions ----------------------------------------------------------------------------------


def test_every_session_method(connect: Connect) -> None:
    client = connect()
    user = connect.user("talker")
    sessions = client.sessions
    said = [
        {"role": "user", "content": "Hi, I'm planning a trip to Japan."},
        {"role": "assistant", "content": "Lovely! When are you going?"},
    ]
    assert sessions.append("trip", said, user_id=user) == 2
    assert sessions.append("trip", [{"role": "user", "content": "In April."}], user_id=user) == 3
    view = sessions.read("trip", user_id=user, format="openai")
    assert isinstance(view, SessionView)
    assert [m["content"] for m in view.messages][-1] == "In April." and view.ended_at is None
    [info] = sessions.list(user_id=user)
    assert isinstance(info, SessionInfo) and (info.session_id, info.length) == ("trip", 3)

    assert sessions.set_system("trip", "Answer in French.", user_id=user) is None
    assert sessions.get_system("trip", user_id=user) == "Answer in French."
    assert sessions.delete_system("trip", user_id=user) is None
    with pytest.raises(NotFoundError) as unset:
        sessions.get_system("trip", user_id=user)
    assert unset.value.what == "system memory of session"

    ended = sessions.end("trip", user_id=user)
    assert isinstance(ended, EndedSession) and ended.length == 3
    assert sessions.read("trip", user_id=user).ended_at is not None
    assert sessions.delete("trip", user_id=user) is None
    with pytest.raises(NotFoundError):
        sessions.read("trip", user_id=user)
    with pytest.raises(ValidationError) as bad:
        sessions.append("trip", [], user_id=user)
    assert bad.value.field == "messages"


# -- keys, tenants and roles -------------------------------------------------------------------


def test_keys_give_tenants_and_roles(connect: Connect) -> None:
    admin = connect(api_key=ADMIN_KEY)
    tenant = "acme-" + connect.user("t")
    hr_key = admin.admin.create_key(tenant, roles=["hr"], name="people team")
    plain_key = admin.admin.create_key(tenant)
    other_key = admin.admin.create_key("elsewhere-" + tenant)
    assert isinstance(hr_key, NewApiKey) and hr_key.roles == ["hr"]

    hr, plain, other = (connect(api_key=k.key) for k in (hr_key, plain_key, other_key))
    [secret] = hr.add("Salary review for Bo is on Friday.", user_id="bo", allowed_roles=["hr"])
    [open_] = plain.add("Bo likes green tea.", user_id="bo")
    assert secret.tenant_id == tenant and secret.access_control.allowed_roles == ["hr"]

    assert hr.get(secret.id).id == secret.id
    with pytest.raises(NotFoundError):  # a key without the role does not see it at all
        plain.get(secret.id)
    with pytest.raises(NotFoundError):
        plain.history(secret.id)
    assert [r.id for r in plain.list_all(Filter(user_id="bo"))] == [open_.id]
    assert {r.record.id for r in plain.search("salary review", user_id="bo")} == {open_.id}
    assert {r.record.id for r in hr.search("salary review", user_id="bo")} >= {secret.id}
    with pytest.raises(NotFoundError):  # nor may it change or forget it
        plain.update(secret.id, "Changed.")
    with pytest.raises(NotFoundError):
        plain.delete(secret.id)
    assert len(list(plain.export_lines(Filter(user_id="bo")))) == 1

    with pytest.raises(NotFoundError):  # another tenant's key: as if it did not exist
        other.get(open_.id)
    assert other.count(Filter(user_id="bo")) == 0
    assert other.count(Filter(tenant_id=tenant, user_id="bo")) == 0  # a key's tenant is fixed

    # The admin names a tenant (per client or per call) and reads all of it.
    assert connect(api_key=ADMIN_KEY, tenant_id=tenant).get(secret.id).id == secret.id
    assert admin.count(Filter(tenant_id=tenant, user_id="bo")) == 2
    assert admin.get(open_.id, tenant_id=tenant).text == "Bo likes green tea."

    keys = admin.admin.keys(tenant_id=tenant)
    assert {k.key_id for k in keys} == {hr_key.key_id, plain_key.key_id}
    assert all(k.source == "api" and not k.revoked for k in keys)
    tenants = {t.tenant_id: t for t in admin.admin.tenants()}
    assert tenants[tenant].keys == 2 and tenants[tenant].revoked_keys == 0


def test_an_async_export_streams_into_another_services_import(
    served: Served, fresh: Served
) -> None:
    async def scenario() -> list[str]:
        async with AsyncClient(served.url) as source, AsyncClient(fresh.url) as sink:
            await source.import_jsonl(_export_lines("mover-async", 300))
            # Lines flow from one service's answer into the other's request as they come.
            moved = await sink.import_jsonl(source.export_lines(Filter(user_id="mover-async")))
            assert moved == 300
            texts = [r.text async for r in sink.list_all(Filter(user_id="mover-async"))]
            pages = [p async for p in sink.pages(Filter(user_id="mover-async"), limit=100)]
            assert len(pages) == 3
            out = io.StringIO()
            assert await sink.export_jsonl(Filter(user_id="mover-async"), out) == 300
            assert await sink.count(Filter(user_id="mover-async")) == 300
            admin = AsyncClient(fresh.url, api_key=ADMIN_KEY, tenant_id="b")
            async with admin:
                with pytest.raises(ImportFormatError) as elsewhere:
                    await admin.import_jsonl(io.StringIO(out.getvalue()))
            assert (elsewhere.value.line, elsewhere.value.field) == (1, "record.tenant_id")
            return texts

    assert asyncio.run(scenario()) == [f"note {n}" for n in range(300)]


def test_import_chatmem_pulls_in_no_server() -> None:
    code = (
        "import sys, chatmem\n"
        "assert chatmem.Client and chatmem.AsyncClient\n"
        "heavy = ('fastapi', 'starlette', 'uvicorn', 'chatmem.server')\n"
        "print(sorted(m for m in sys.modules if m in heavy or m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_filters_conflicts_and_reasons_reach_the_service(connect: Connect) -> None:
    client = connect()
    user = connect.user("narrow")
    client.add("Trip fact.", user_id=user, session_id="s1")
    client.add("Work fact.", user_id=user, agent_id="bot", type=MemoryType.PROCEDURAL)
    by_agent = Filter(user_id=user, agent_id="bot")
    assert [r.text for r in client.list(by_agent).records] == ["Work fact."]
    assert client.count(Filter(user_id=user, session_id="s1")) == 1
    assert client.count(Filter(user_id=user, created_after=datetime(2999, 1, 1, tzinfo=UTC))) == 0
    lines = list(client.export_lines(by_agent))
    assert len(lines) == 1
    assert client.import_jsonl(lines, on_conflict="skip") == 0
    assert (
        client.import_jsonl([lines[0].replace("Work fact.", "New fact.")], on_conflict="replace")
        == 1
    )
    [work] = client.list(by_agent).records
    assert work.text == "New fact." and work.metadata.version == 2
    client.delete(work.id, reason="no longer true")
    assert client.history(work.id)[-1].reason == "no longer true"
