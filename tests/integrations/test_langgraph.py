"""ChatmemStore against the real langgraph package: the store's own operations, the same
operations compared with LangGraph's InMemoryStore, a compiled StateGraph that remembers
across threads, LangMem's tools when langmem is installed, and the docs page's example.

langgraph ships no store conformance tests (its checkpoint-conformance package covers
checkpointers only), so this suite is the store's conformance test.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import types
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore, InvalidNamespaceError
from langgraph.store.memory import InMemoryStore

from chatmem import Filter, LongTermMemory, ValidationError
from chatmem.integrations.langgraph import (
    ChatmemStore,
    NamespaceTemplate,
    matches,
    memory_id,
    value_text,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "langgraph.md"


@pytest.fixture
def store(memory: LongTermMemory) -> ChatmemStore:
    return ChatmemStore(memory, namespace=("memories", "{user}"))


# -- items ------------------------------------------------------------------------------------


def test_put_get_replace_delete(store: ChatmemStore, memory: LongTermMemory) -> None:
    ns = ("memories", "alice")
    store.put(ns, "diet", {"content": "Alice is vegetarian", "since": 2019})
    first = store.get(ns, "diet")
    assert first is not None
    assert (first.namespace, first.key) == (ns, "diet")
    assert first.value == {"content": "Alice is vegetarian", "since": 2019}

    store.put(ns, "diet", {"content": "Alice is vegan", "since": 2023})
    second = store.get(ns, "diet")
    assert second is not None and second.value["content"] == "Alice is vegan"
    assert second.created_at == first.created_at and second.updated_at >= first.updated_at

    # One memory, its earlier value in chatmem's history; its text is what chatmem indexes.
    record = memory.get(memory_id("default", ns, "diet"), user_id="alice")
    assert record.content.raw == "Alice is vegan\nsince: 2023"
    assert record.content.structured == {"content": "Alice is vegan", "since": 2023}
    assert [h.version for h in memory.history(record.id, user_id="alice")] == [1, 2]

    store.delete(ns, "diet")
    assert store.get(ns, "diet") is None
    store.delete(ns, "diet")  # deleting what is gone is no error, as in LangGraph's stores
    store.put(ns, "diet", {"content": "Alice eats fish again"})
    again = store.get(ns, "diet")
    assert again is not None and again.value == {"content": "Alice eats fish again"}


def test_keys_are_per_namespace_and_user(store: ChatmemStore) -> None:
    store.put(("memories", "alice"), "k", {"v": "alice's"})
    store.put(("memories", "alice", "work"), "k", {"v": "alice's work"})
    store.put(("memories", "bob"), "k", {"v": "bob's"})
    got = {ns: store.get(ns, "k") for ns in [("memories", "alice"), ("memories", "bob")]}
    assert {ns: item.value["v"] for ns, item in got.items() if item} == {
        ("memories", "alice"): "alice's",
        ("memories", "bob"): "bob's",
    }
    work = store.get(("memories", "alice", "work"), "k")
    assert work is not None and work.value == {"v": "alice's work"}


def test_template_maps_tenant_user_and_project(memory: LongTermMemory) -> None:
    store = ChatmemStore(memory, namespace=("{tenant}", "{user}", "{project}"))
    store.put(("acme", "alice", "apollo", "notes"), "n1", {"text": "launch is in May"})
    store.put(("globex", "alice", "apollo"), "n1", {"text": "another tenant's alice"})
    (record,) = memory.list(Filter(tenant_id="acme")).records
    assert (record.tenant_id, record.user_id, record.project_id) == ("acme", "alice", "apollo")
    assert record.user_metadata["langgraph.key"] == "n1"
    acme = store.search(("acme", "alice"), query="when is the launch")
    assert [(i.namespace, i.value) for i in acme] == [
        (("acme", "alice", "apollo", "notes"), {"text": "launch is in May"})
    ]
    with pytest.raises(InvalidNamespaceError):
        store.put(("acme",), "k", {"text": "no user"})
    with pytest.raises(InvalidNamespaceError):
        store.list_namespaces()  # cannot walk every tenant: the prefix must name one


def test_tenant_comes_from_the_store_when_the_template_has_none(memory: LongTermMemory) -> None:
    acme = ChatmemStore(memory, tenant_id="acme")
    globex = ChatmemStore(memory, tenant_id="globex")
    acme.put(("alice",), "k", {"text": "acme's"})
    assert globex.get(("alice",), "k") is None
    assert globex.search(("alice",), query="acme") == []
    assert globex.list_namespaces() == [] and acme.list_namespaces() == [("alice",)]


def test_namespace_errors(store: ChatmemStore) -> None:
    with pytest.raises(InvalidNamespaceError):
        store.put(("notes", "alice"), "k", {"text": "literal label differs"})
    with pytest.raises(InvalidNamespaceError):
        store.get(("memories",), "k")  # no user label
    with pytest.raises(InvalidNamespaceError):
        store.search(("memories",), query="needs the user")
    assert store.search(("notes",)) == []  # no item can be under another literal
    with pytest.raises(InvalidNamespaceError):
        store.put(("memories", "a.b"), "k", {"text": "LangGraph refuses dots"})
    with pytest.raises(ValidationError):
        store.put(("memories", "alice"), "k", {"text": object()})
    with pytest.raises(ValidationError):
        store.put(("memories", "alice"), "k", {"x": float("nan")})


@pytest.mark.parametrize(
    "labels", [(), ("memories",), ("{user}", "{user}"), ("{user}", ""), ("{user}", "a.b")]
)
def test_bad_templates(labels: tuple[str, ...]) -> None:
    with pytest.raises(ValidationError):
        NamespaceTemplate(labels)


def test_ttl_is_refused(store: ChatmemStore) -> None:
    with pytest.raises(NotImplementedError):
        store.put(("memories", "alice"), "k", {"text": "x"}, ttl=5)


# -- search -----------------------------------------------------------------------------------


def test_query_search_ranks_with_chatmem_hybrid_search(store: ChatmemStore) -> None:
    ns = ("memories", "alice")
    store.put(ns, "1", {"content": "Alice keeps bees on her roof", "kind": "hobby"})
    store.put(ns, "2", {"content": "Alice works as a tax accountant", "kind": "work"})
    store.put(ns, "3", {"content": "Alice's sister lives in Lisbon", "kind": "family"})
    store.put(("memories", "bob"), "1", {"content": "Bob keeps bees too", "kind": "hobby"})

    question = "which insects does she keep?"
    found = store.search(("memories", "alice"), query=question)
    assert [i.key for i in found][:1] == ["1"]
    assert all(i.namespace == ns for i in found)  # never another user's
    assert all(i.score is not None and 0.0 <= i.score <= 1.0 for i in found)
    assert [i.score for i in found] == sorted((i.score or 0.0 for i in found), reverse=True)

    work = store.search(ns, query="bees", filter={"kind": "work"})
    assert [i.key for i in work] == ["2"]  # the filter applies before the limit
    assert [i.key for i in store.search(ns, query=question, limit=1, offset=1)] == [found[1].key]


def test_index_false_and_index_fields(store: ChatmemStore, memory: LongTermMemory) -> None:
    ns = ("memories", "alice")
    store.put(ns, "secret", {"content": "the vault code is 4711"}, index=False)
    store.put(ns, "title", {"title": "Gardening notes", "body": "tomatoes"}, index=["title"])
    assert [i.key for i in store.search(ns, query="vault code")] != ["secret"]
    assert "secret" not in {i.key for i in store.search(ns, query="vault code 4711")}
    assert {i.key for i in store.search(ns)} == {"secret", "title"}  # found without a query
    title = memory.get(memory_id("default", ns, "title"), user_id="alice")
    assert title.content.raw == "Gardening notes"


def test_filter_only_search_pages_oldest_first(store: ChatmemStore) -> None:
    ns = ("memories", "alice")
    for n in range(7):
        store.put(ns, f"k{n}", {"n": n, "even": n % 2 == 0, "tags": {"colour": "red"}})
    assert [i.key for i in store.search(ns, limit=3)] == ["k0", "k1", "k2"]
    assert [i.key for i in store.search(ns, limit=3, offset=5)] == ["k5", "k6"]
    evens = store.search(ns, filter={"even": True, "n": {"$gte": 2, "$lt": 6}})
    assert [i.key for i in evens] == ["k2", "k4"] and all(i.score is None for i in evens)
    assert len(store.search(ns, filter={"tags": {"colour": "red"}})) == 7
    assert store.search(ns, filter={"n": {"$gt": "3"}}) == []  # no number/string order
    with pytest.raises(ValidationError):
        store.search(ns, filter={"n": {"$in": [1]}})


def test_value_text_and_matches() -> None:
    value = {"content": "likes tea", "age": 61, "tags": ["a", "b"], "nested": {"ok": True}}
    assert value_text(value, ["$"]) == "likes tea\nage: 61\na\nb\nok: true"
    assert value_text(value, ["content", "tags[*]"]) == "likes tea\na\nb"
    assert value_text({"n": None}, ["missing"]) == '{"n": null}'
    assert matches(value, {"age": {"$gt": 60, "$ne": 62}, "nested": {"ok": True}})
    assert not matches(value, {"tags": ["a"]}) and not matches(value, {"missing": 1})


# -- namespaces -------------------------------------------------------------------------------


def test_list_namespaces(store: ChatmemStore) -> None:
    for ns in [
        ("memories", "alice"),
        ("memories", "alice", "recipes", "v1"),
        ("memories", "alice", "work", "v1"),
        ("memories", "bob", "recipes"),
    ]:
        store.put(ns, "k", {"text": "x"})
    assert store.list_namespaces(prefix=("memories", "alice"), max_depth=3) == [
        ("memories", "alice"),
        ("memories", "alice", "recipes"),
        ("memories", "alice", "work"),
    ]
    assert store.list_namespaces(suffix=("v1",)) == [
        ("memories", "alice", "recipes", "v1"),
        ("memories", "alice", "work", "v1"),
    ]
    assert store.list_namespaces(prefix=("memories", "*", "recipes")) == [
        ("memories", "alice", "recipes", "v1"),
        ("memories", "bob", "recipes"),
    ]
    assert store.list_namespaces(limit=2, offset=1) == [
        ("memories", "alice", "recipes", "v1"),
        ("memories", "alice", "work", "v1"),
    ]


def test_matches_langgraphs_in_memory_store(memory: LongTermMemory) -> None:
    """The same puts, then the same reads without a query, answer as InMemoryStore does."""
    ours, theirs = ChatmemStore(memory, namespace=("{user}",)), InMemoryStore()
    puts = [
        (("alice",), "a", {"n": 1, "kind": "x", "meta": {"lang": "en"}}),
        (("alice", "docs"), "b", {"n": 2, "kind": "y"}),
        (("alice", "docs", "v2"), "c", {"n": 3, "kind": "x", "meta": {"lang": "de"}}),
        (("bob", "docs"), "a", {"n": 4, "kind": "x"}),
        (("alice",), "a", {"n": 5, "kind": "y"}),
    ]
    for ns, key, value in puts:
        ours.put(ns, key, value)
        theirs.put(ns, key, value)

    def snapshot(s: BaseStore) -> list[Any]:
        return [
            s.list_namespaces(),
            s.list_namespaces(prefix=("alice",), max_depth=2),
            s.list_namespaces(suffix=("docs",)),
            s.list_namespaces(prefix=("*", "docs")),
            [(i.namespace, i.key, i.value) for i in [s.get(ns, k) for ns, k, _ in puts] if i],
            sorted((i.namespace, i.key) for i in s.search(("alice",), filter={"kind": "x"})),
            sorted((i.namespace, i.key) for i in s.search((), filter={"n": {"$gte": 3}})),
            sorted((i.namespace, i.key) for i in s.search(("alice", "docs"))),
            s.search(("alice",), filter={"meta": {"lang": "de"}})[0].value,
        ]

    assert snapshot(ours) == snapshot(theirs)


# -- access control ---------------------------------------------------------------------------


def test_roles_reach_every_read(memory: LongTermMemory) -> None:
    hr = ChatmemStore(memory, roles={"hr"}, allowed_roles={"hr"})
    eng = ChatmemStore(memory, roles={"eng"})
    trusted = ChatmemStore(memory)  # roles=None: the library's own caller reads everything
    hr.put(("alice",), "salary", {"content": "Alice earns 90k"})
    eng.put(("alice",), "editor", {"content": "Alice uses vim"})

    assert eng.get(("alice",), "salary") is None
    assert [i.key for i in eng.search(("alice",), query="how much does Alice earn")] == ["editor"]
    assert [i.key for i in eng.search(("alice",))] == ["editor"]
    assert hr.get(("alice",), "salary") is not None
    assert {i.key for i in trusted.search(("alice",))} == {"salary", "editor"}

    eng.delete(("alice",), "salary")  # a reader cannot delete what it cannot see
    assert trusted.get(("alice",), "salary") is not None
    record = memory.get(memory_id("default", ("alice",), "salary"), user_id="alice")
    assert record.access_control.allowed_roles == ["hr"]
    with pytest.raises(ValidationError):  # nor write over it
        eng.put(("alice",), "salary", {"content": "Alice earns 1M"})
    assert memory.get(record.id).content.structured == {"content": "Alice earns 90k"}


# -- async ------------------------------------------------------------------------------------


def test_async_face(store: ChatmemStore) -> None:
    ns = ("memories", "alice")

    async def scenario() -> list[Any]:
        await asyncio.gather(
            *(store.aput(ns, f"k{n}", {"content": f"fact number {n}"}) for n in range(5))
        )
        got = await store.aget(ns, "k3")
        found = await store.asearch(ns, query="fact number 3", limit=1)
        await store.adelete(ns, "k3")
        gone = await store.aget(ns, "k3")
        spaces = await store.alist_namespaces()
        return [got and got.value, [i.key for i in found], gone, spaces]

    assert asyncio.run(scenario()) == [
        {"content": "fact number 3"},
        ["k3"],
        None,
        [("memories", "alice")],
    ]


def test_concurrent_puts_of_one_key_last_one_wins(
    store: ChatmemStore, memory: LongTermMemory
) -> None:
    ns = ("memories", "alice")

    async def scenario() -> None:
        await asyncio.gather(*(store.aput(ns, "k", {"n": n}) for n in range(8)))

    asyncio.run(scenario())
    item = store.get(ns, "k")
    assert item is not None and item.value["n"] in range(8)
    versions = memory.history(memory_id("default", ns, "k"), user_id="alice")
    assert [h.version for h in versions] == list(range(1, 9))  # no put was lost


# -- a real graph -----------------------------------------------------------------------------


class Turn(TypedDict, total=False):
    said: str
    recalled: list[str]


@dataclass
class Who:
    user_id: str


def _remember_and_recall(state: Turn, runtime: Runtime[Who]) -> Turn:
    assert runtime.store is not None
    ns = ("memories", runtime.context.user_id)
    said = state["said"]
    if said.startswith("remember: "):
        fact = said.removeprefix("remember: ")
        runtime.store.put(ns, uuid.uuid4().hex, {"content": fact})
        return {"recalled": []}
    return {"recalled": [i.value["content"] for i in runtime.store.search(ns, query=said)]}


async def _aremember_and_recall(state: Turn, runtime: Runtime[Who]) -> Turn:
    assert runtime.store is not None
    ns = ("memories", runtime.context.user_id)
    said = state["said"]
    if said.startswith("remember: "):
        await runtime.store.aput(ns, uuid.uuid4().hex, {"content": said.removeprefix("remember: ")})
        return {"recalled": []}
    found = await runtime.store.asearch(ns, query=said)
    return {"recalled": [i.value["content"] for i in found]}


def _graph(node: Any, store: ChatmemStore) -> Any:
    builder = StateGraph(Turn, context_schema=Who)
    builder.add_node("memory", node)
    builder.add_edge(START, "memory")
    builder.add_edge("memory", END)
    return builder.compile(checkpointer=InMemorySaver(), store=store)


def test_a_graph_remembers_across_threads(store: ChatmemStore) -> None:
    graph = _graph(_remember_and_recall, store)

    def turn(thread: str, user: str, said: str) -> list[str]:
        config = {"configurable": {"thread_id": thread}}
        out = graph.invoke({"said": said}, config, context=Who(user))
        return list(out["recalled"])

    assert turn("t1", "alice", "remember: I keep bees on my roof") == []
    assert turn("t1", "alice", "remember: my sister lives in Lisbon") == []
    assert turn("t2", "alice", "what insects do I keep?")[0] == "I keep bees on my roof"
    assert turn("t3", "bob", "what insects do I keep?") == []  # another user's memory
    # The threads kept their own state; only the store crossed them.
    state = graph.get_state({"configurable": {"thread_id": "t2"}})
    assert state.values["said"] == "what insects do I keep?"


def test_an_async_graph_remembers_across_threads(store: ChatmemStore) -> None:
    graph = _graph(_aremember_and_recall, store)

    async def turn(thread: str, said: str) -> list[str]:
        config = {"configurable": {"thread_id": thread}}
        out = await graph.ainvoke({"said": said}, config, context=Who("alice"))
        return list(out["recalled"])

    async def scenario() -> list[str]:
        await turn("t1", "remember: my cat is called Miso")
        return await turn("t2", "what is my cat's name?")

    assert asyncio.run(scenario())[0] == "my cat is called Miso"


# -- LangMem ----------------------------------------------------------------------------------


def test_langmem_tools_on_the_store(store: ChatmemStore) -> None:
    tools = pytest.importorskip("langmem")
    ns = ("memories", "{langgraph_user_id}")
    manage = tools.create_manage_memory_tool(namespace=ns, store=store)
    search = tools.create_search_memory_tool(namespace=ns, store=store)
    config = {"configurable": {"langgraph_user_id": "alice"}}

    said = manage.invoke({"content": "Alice prefers window seats", "action": "create"}, config)
    key = re.search(r"[0-9a-f-]{36}", said)
    assert key is not None
    update = {"content": "Alice prefers aisle seats", "action": "update", "id": key[0]}
    manage.invoke(update, config)
    found = search.invoke({"query": "which seat does Alice like?"}, config)
    assert "aisle" in found and "window" not in found
    item = store.get(("memories", "alice"), key[0])
    assert item is not None and item.value == {"content": "Alice prefers aisle seats"}

    async def asearch() -> str:
        return str(await search.ainvoke({"query": "seat"}, config))

    assert "aisle" in asyncio.run(asearch())
    manage.invoke({"action": "delete", "id": key[0]}, config)
    assert store.get(("memories", "alice"), key[0]) is None


# -- docs and imports -------------------------------------------------------------------------


def test_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (block,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    monkeypatch.chdir(tmp_path)
    # A module of its own: dataclasses look their module up in sys.modules.
    module = types.ModuleType("langgraph_docs_example")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(block, str(DOC), "exec"), module.__dict__)


def test_import_chatmem_pulls_in_no_framework() -> None:
    code = (
        "import sys, chatmem, chatmem.integrations\n"
        "heavy = ('langgraph', 'langchain_core', 'langmem', 'llama_index')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
