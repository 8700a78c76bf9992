"""One suite, run unchanged over the embedded library and the service: ``scenario`` makes
the same calls on ``LongTermMemory``, ``AsyncLongTermMemory``, ``Client`` and
``AsyncClient``, each on an empty store, and what they give (ids and times aside) must be
what the library gives: the records, the scores, the history, the pages, the errors."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chatmem import (
    AsyncClient,
    AsyncLongTermMemory,
    ChatmemError,
    Client,
    Filter,
    HistoryEntry,
    ImportFormatError,
    LocalEmbedder,
    LongTermMemory,
    MemoryRecord,
    MemoryType,
    NotFoundError,
    SearchResult,
    ValidationError,
)
from chatmem.stores import SQLiteStore
from tests.client.conftest import Blocking, serving

CHAT = [
    {"role": "user", "content": "My cat is called Miso and she is three."},
    {"role": "assistant", "content": "Miso sounds lovely."},
    {"role": "user", "content": "She sleeps on my keyboard every morning."},
]


def _shape(record: MemoryRecord) -> dict[str, Any]:
    return record.model_dump(mode="json", exclude={"id", "time"})


def _results(found: list[SearchResult]) -> list[Any]:
    return [
        (_shape(r.record), round(r.score, 6), r.vector_score is None, r.keyword_score is None)
        for r in found
    ]


def _history(entries: list[HistoryEntry]) -> list[Any]:
    return [
        (
            e.version,
            e.event,
            e.old and _shape(e.old),
            e.new and _shape(e.new),
            e.reason,
        )
        for e in entries
    ]


def _error(call: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        call()
    except ImportFormatError as exc:
        return ("ImportFormatError", exc.line, exc.field)
    except ValidationError as exc:
        return ("ValidationError", exc.field)
    except NotFoundError as exc:
        named = exc.memory_id if exc.memory_id == "missing-id" else "<an id of the run>"
        return ("NotFoundError", named, exc.what)
    except ChatmemError as exc:
        return (type(exc).__name__,)
    return ("no error",)


def scenario(memory: Any) -> list[Any]:
    """The shared suite: the calls, and what each gave."""
    said: list[Any] = []
    [home] = memory.add(
        "I live in Lisbon and work as a nurse.",
        user_id="ana",
        tags=["home"],
        importance=0.8,
        metadata={"origin": "intake"},
    )
    chat = memory.add(CHAT, user_id="ana", project_id="pets", session_id="s1")
    memory.add("Ben prefers tea over coffee.", user_id="ben", type=MemoryType.PREFERENCE)
    said.append([_shape(r) for r in [home, *chat]])

    said.append(_results(memory.search("where does ana live", user_id="ana", k=3)))
    pets = Filter(project_id="pets", types=frozenset({MemoryType.EPISODIC}))
    said.append(_results(memory.search("keyboard", user_id="ana", filter=pets, threshold=0.1)))
    said.append(_results(memory.search("tea or coffee", user_id="ben")))
    said.append(_shape(memory.get(home.id, user_id="ana")))

    said.append(
        _shape(memory.update(home.id, "I live in Porto now.", user_id="ana", reason="moved"))
    )
    memory.update(home.id, tags=["home", "city"], confidence=0.9, metadata={"verified": True})
    said.append(_history(memory.history(home.id, user_id="ana")))

    first = memory.list(Filter(user_id="ana"), limit=3)
    rest = memory.list(Filter(user_id="ana"), limit=3, cursor=first.next_cursor)
    said.append([[_shape(r) for r in page.records] for page in (first, rest)])
    said.append(rest.next_cursor)
    said.append([memory.count(Filter(user_id=user)) for user in ("ana", "ben", "cy")])
    said.append(memory.count(Filter(user_id="ana", project_id="pets")))

    memory.delete(chat[1].id, user_id="ana")
    said.append(_error(lambda: memory.get(chat[1].id, user_id="ana")))
    said.append([e.event for e in memory.history(chat[1].id)])  # the reason is the service's
    said.append(_error(lambda: memory.delete(chat[1].id)))

    out = io.StringIO()
    said.append(memory.export_jsonl(Filter(user_id="ana"), out))
    said.append(memory.delete_all(Filter(user_id="ana")))
    said.append(memory.count(Filter(user_id="ana")))
    said.append(memory.import_jsonl(io.StringIO(out.getvalue())))
    said.append([_shape(r) for r in memory.list(Filter(user_id="ana")).records])
    said.append(_error(lambda: memory.import_jsonl(io.StringIO(out.getvalue()))))

    said.append(_error(lambda: memory.search("  ", user_id="ana")))
    said.append(_error(lambda: memory.search("x", user_id="ana", k=0)))
    said.append(_error(lambda: memory.add([{"role": "robot", "content": "hi"}], user_id="ana")))
    said.append(_error(lambda: memory.add([], user_id="ana")))
    said.append(_error(lambda: memory.get("missing-id")))
    said.append(_error(lambda: memory.update("missing-id", "text")))
    said.append(_error(lambda: memory.history("missing-id")))
    said.append(_error(lambda: memory.import_jsonl(['{"format": "chatmem.export/1"}'])))
    return said


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory, embedder: LocalEmbedder) -> list[Any]:
    """What the embedded library gives."""
    path = tmp_path_factory.mktemp("library") / "chatmem.db"
    with LongTermMemory(SQLiteStore(path), embedder) as memory:
        return scenario(memory)


@pytest.fixture(params=["async library", "client", "async client"])
def memory(
    request: pytest.FixtureRequest, tmp_path: Path, embedder: LocalEmbedder
) -> Iterator[Any]:
    """Each other face of long-term memory, on an empty store."""
    with asyncio.Runner() as runner:
        if request.param == "async library":
            library = AsyncLongTermMemory(LongTermMemory(SQLiteStore(tmp_path / "a.db"), embedder))
            yield Blocking(library, runner)
            runner.run(library.close())
            return
        with serving(tmp_path / "service", embedder) as service:
            if request.param == "client":
                with Client(service.url) as client:
                    yield client
            else:
                client = AsyncClient(service.url)
                yield Blocking(client, runner)
                runner.run(client.close())


def test_the_same_calls_give_the_same_results(memory: Any, expected: list[Any]) -> None:
    got = scenario(memory)
    for step, (ours, theirs) in enumerate(zip(got, expected, strict=True)):
        assert ours == theirs, f"step {step}"
