"""chatmem as LangGraph's long-term store: ``ChatmemStore``, a ``BaseStore`` over
``LongTermMemory`` (``pip install 'chatmem[langgraph]'``).

    store = ChatmemStore(long_term, namespace=("memories", "{user}"))
    graph = builder.compile(store=store)

**Namespaces.** A template says which labels of a LangGraph namespace name chatmem's
tenant, user and project. Each label of the template is ``"{tenant}"``, ``"{user}"``,
``"{project}"`` or a literal that the namespace must repeat; ``"{user}"`` is required. A
namespace has at least the template's labels; those after them are free (``("memories",
"alice", "recipes")`` under ``("memories", "{user}")`` is user ``alice``). Without
``"{tenant}"`` every item is the store's ``tenant_id``; without ``"{project}"`` no item has
a project. The default template is ``("{user}",)``.

**Items.** An item is one memory. Its id is derived from the tenant, the namespace and the
key (``memory_id``), so a put of the same key replaces the memory as a new version (the old
one stays in its history) and a get is a read by id. The value is kept whole in
``content.structured``; the memory's text, which chatmem indexes and searches, comes from
the value's ``text_fields`` (see ``value_text``), or from ``PutOp.index`` when a put names
fields. ``index=False`` stores the item unindexed: found by a get or a search without a
query, never by a query. The namespace and key are kept in ``user_metadata`` under keys
starting ``langgraph.``.

**Search.** With a query: chatmem's hybrid search (vector and BM25, fused) of the user the
prefix names; the prefix must reach the ``"{user}"`` label. ``SearchItem.score`` is the fused
score. Without a query: the items under the prefix, oldest first, score None. ``filter``
matches the value's top-level fields as LangGraph's stores do: equality, or the operators
``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt`` and ``$lte`` (``matches``).

**Access control.** ``roles`` are the reader's roles: every read (get, search, list, and
the look-up a put or delete makes first) passes them as ``Filter.reader_roles``, so a memory
restricted to other roles is not there for this store. ``allowed_roles`` restricts the
memories this store writes.

Ops in a batch run in order. TTLs are not supported (``supports_ttl`` is False).
"""

from __future__ import annotations

import asyncio
import json
import operator
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chatmem import text as textlib
from chatmem.errors import ConfigError, ConflictError, NotFoundError, ValidationError
from chatmem.long_term import LongTermMemory
from chatmem.records import (
    MAX_TEXT_CHARS,
    Filter,
    MemoryRecord,
    MemoryType,
    utcnow,
)
from chatmem.stores.base import Change

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
    from langgraph.store.base.embed import get_text_at_path
except ImportError as exc:  # pragma: no cover - the dev extra installs it
    raise ConfigError(
        "chatmem.integrations.langgraph needs LangGraph: pip install 'chatmem[langgraph]'"
    ) from exc

__all__ = [
    "DEFAULT_TEMPLATE",
    "PROJECT",
    "TENANT",
    "USER",
    "ChatmemStore",
    "NamespaceTemplate",
    "matches",
    "memory_id",
    "value_text",
]

TENANT, USER, PROJECT = "{tenant}", "{user}", "{project}"
PLACEHOLDERS = (TENANT, USER, PROJECT)
DEFAULT_TEMPLATE = (USER,)
#: ``user_metadata`` keys of a store item: that it is one, its key, whether a query finds
#: it, and each label of its namespace (``langgraph.ns.0``, ``langgraph.ns.1`` …), one key
#: per label so that a prefix is an equality filter every backend applies in its query.
ITEM_KEY, KEY_KEY, INDEXED_KEY, LABEL_KEY = (
    "langgraph.item",
    "langgraph.key",
    "langgraph.indexed",
    "langgraph.ns.{}",
)
#: Memories read per page when a search without a query or a namespace listing walks them.
PAGE_SIZE = 500
#: A filtered query search asks for this many times the items it still needs.
WIDEN = 4
WILDCARD = "*"
_ID_SPACE = uuid.UUID("6f0c55a4-2a57-4c53-9a53-8a7c0f3e8d21")


@dataclass(frozen=True)
class NamespaceTemplate:
    """Which labels of a namespace name the tenant, the user and the project (see the
    module docstring)."""

    labels: tuple[str, ...] = DEFAULT_TEMPLATE

    def __post_init__(self) -> None:
        if USER not in self.labels:
            raise ValidationError(f"a template needs the {USER} label", field="namespace")
        for label in self.labels:
            if not isinstance(label, str) or not label or "." in label:
                raise ValidationError(
                    f"label {label!r} must be a non-empty string without '.'", field="namespace"
                )
        for placeholder in PLACEHOLDERS:
            if self.labels.count(placeholder) > 1:
                raise ValidationError(f"{placeholder} appears twice", field="namespace")

    def fields(self, labels: Sequence[str]) -> dict[str, str] | None:
        """The placeholders ``labels`` (a namespace or a prefix, ``*`` a wildcard) give,
        or None when a label differs from the template's literal there."""
        found: dict[str, str] = {}
        for want, have in zip(self.labels, labels, strict=False):
            if have == WILDCARD:
                continue
            if want in PLACEHOLDERS:
                found[want] = have
            elif have != want:
                return None
        return found

    def place(self, namespace: tuple[str, ...]) -> dict[str, str]:
        """The placeholders of a whole item namespace; InvalidNamespaceError if it does not
        fit the template."""
        found = self.fields(namespace) if len(namespace) >= len(self.labels) else None
        if found is None or len(found) < sum(label in PLACEHOLDERS for label in self.labels):
            raise InvalidNamespaceError(
                f"namespace {namespace!r} does not fit the template {self.labels!r}"
            )
        return found


def memory_id(tenant_id: str, namespace: tuple[str, ...], key: str) -> str:
    """The id of the memory that holds item ``key`` of ``namespace`` in ``tenant_id``."""
    name = json.dumps([tenant_id, list(namespace), key], ensure_ascii=False)
    return uuid.uuid5(_ID_SPACE, name).hex


def value_text(value: Mapping[str, Any], fields: Sequence[str]) -> str:
    """The text chatmem indexes for ``value``: the texts at ``fields``, one per line.

    ``"$"`` is every scalar in the value, in order: a string as it is, a number or a
    boolean as ``key: value``. Other fields are LangGraph's paths (``"a.b"``, ``"a[*].b"``,
    ``"{a,b}"``). A value with no text there is indexed as its JSON. Texts longer than a
    memory holds are clipped (the value itself is kept whole).
    """
    texts = [t for field in fields for t in _texts_at(value, field)]
    text = "\n".join(t for t in texts if t.strip())
    if not text:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return textlib.clip(text, MAX_TEXT_CHARS)


def _texts_at(value: Mapping[str, Any], field: str) -> list[str]:
    if field == "$":
        return list(_scalars(value, ""))
    return get_text_at_path(dict(value), field)


def _scalars(node: Any, name: str) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, bool | int | float):
        yield f"{name}: {json.dumps(node)}" if name else json.dumps(node)
    elif isinstance(node, Mapping):
        for key, child in node.items():
            yield from _scalars(child, str(key))
    elif isinstance(node, list | tuple):
        for child in node:
            yield from _scalars(child, name)


_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": operator.eq,
    "$ne": operator.ne,
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}


def matches(value: Mapping[str, Any], conditions: Mapping[str, Any] | None) -> bool:
    """Whether ``value`` meets a ``SearchOp.filter``: each top-level field equal to the
    condition's value (a nested mapping compared field by field), or meeting its
    operators. An order operator compares numbers with numbers and strings with strings;
    anything else does not match."""
    return all(_meets(value.get(field), want) for field, want in (conditions or {}).items())


def _meets(have: Any, want: Any) -> bool:
    if isinstance(want, Mapping):
        if any(str(k).startswith("$") for k in want):
            return all(_operate(have, name, arg) for name, arg in want.items())
        return isinstance(have, Mapping) and all(_meets(have.get(k), v) for k, v in want.items())
    return bool(have == want)


def _operate(have: Any, name: str, arg: Any) -> bool:
    compare = _OPERATORS.get(name)
    if compare is None:
        raise ValidationError(f"unknown operator {name!r}", field="filter")
    if name in ("$eq", "$ne"):
        return compare(have, arg)
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (have, arg))
    strings = isinstance(have, str) and isinstance(arg, str)
    return (numbers or strings) and compare(have, arg)


class ChatmemStore(BaseStore):
    """A LangGraph ``BaseStore`` backed by chatmem's long-term memory (see the module
    docstring for the namespace template, items, search and access control)."""

    supports_ttl = False

    def __init__(
        self,
        long_term: LongTermMemory,
        *,
        namespace: Sequence[str] = DEFAULT_TEMPLATE,
        tenant_id: str = "default",
        text_fields: Sequence[str] = ("$",),
        memory_type: MemoryType = MemoryType.SEMANTIC,
        roles: Collection[str] | None = None,
        allowed_roles: Collection[str] | None = None,
    ) -> None:
        if not text_fields:
            raise ValidationError("name at least one field", field="text_fields")
        self.long_term = long_term
        self.template = NamespaceTemplate(tuple(namespace))
        self.tenant_id = Filter(tenant_id=tenant_id).tenant_id
        self.text_fields = tuple(text_fields)
        self.memory_type = memory_type
        self.roles = frozenset(roles) if roles is not None else None
        self.allowed_roles = sorted(set(allowed_roles or ()))

    # -- the batch primitive -------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order; one result per op."""
        return [self._run(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` in a worker thread (chatmem's stores block)."""
        return await asyncio.to_thread(self.batch, list(ops))

    def _run(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, PutOp):
            self._put(op)
            return None
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        raise ValidationError(f"unknown store operation {type(op).__name__}", field="ops")

    # -- get and put ---------------------------------------------------------------------------

    def _get(self, op: GetOp) -> Item | None:
        record = self._stored(self._item_scope(op.namespace, op.key))
        return _item(record) if record is not None else None

    def _put(self, op: PutOp) -> None:
        scope = self._item_scope(op.namespace, op.key)
        if op.value is None:
            self.long_term.delete_all(scope, reason="langgraph delete")
            return
        value = _json_object(op.value)
        fields = self.text_fields if op.index is None or op.index is False else op.index
        text = value_text(value, fields)
        metadata = self._metadata(op.namespace, op.key, indexed=op.index is not False)
        old = self._stored(scope)
        while True:
            try:
                self._write(scope, old, value, text, metadata)
                return
            except (ConflictError, NotFoundError, ValidationError):
                # Another put or delete of the key may have written between the read and
                # the write: then write over what it left, and the last put wins, as in
                # LangGraph's stores. Each retry follows someone else's write; a failure
                # with nothing written meanwhile is a real error.
                now = self._stored(scope)
                if _version(now) == _version(old):
                    raise
                old = now

    def _write(
        self,
        scope: Filter,
        old: MemoryRecord | None,
        value: dict[str, Any],
        text: str,
        metadata: dict[str, Any],
    ) -> None:
        if old is None:
            self.long_term.add_records([self._record(scope, value, text, metadata)])
        else:
            self._replace(old, value, text, metadata)

    def _stored(self, scope: Filter) -> MemoryRecord | None:
        """The item ``scope`` (an ``_item_scope``) holds, if this reader may see it."""
        assert scope.ids is not None
        try:
            return self.long_term.get(
                scope.ids[0], tenant_id=scope.tenant_id, user_id=scope.user_id, roles=self.roles
            )
        except NotFoundError:
            return None

    def _item_scope(self, namespace: tuple[str, ...], key: str) -> Filter:
        """The filter that holds exactly the item ``key`` of ``namespace`` for this reader."""
        fields = self.template.place(tuple(namespace))
        tenant = fields.get(TENANT, self.tenant_id)
        return Filter.checked(
            {
                "tenant_id": tenant,
                "user_id": fields[USER],
                "project_id": fields.get(PROJECT),
                "ids": (memory_id(tenant, tuple(namespace), key),),
                "reader_roles": self.roles,
            },
            "namespace",
        )

    def _metadata(self, namespace: tuple[str, ...], key: str, *, indexed: bool) -> dict[str, Any]:
        labels = {LABEL_KEY.format(i): label for i, label in enumerate(namespace)}
        return {ITEM_KEY: True, KEY_KEY: key, INDEXED_KEY: indexed, **labels}

    def _record(
        self, scope: Filter, value: dict[str, Any], text: str, metadata: dict[str, Any]
    ) -> MemoryRecord:
        assert scope.ids is not None
        return MemoryRecord.checked(
            {
                "id": scope.ids[0],
                "tenant_id": scope.tenant_id,
                "user_id": scope.user_id,
                "project_id": scope.project_id,
                "type": self.memory_type,
                "content": {"raw": text, "structured": value},
                "access_control": {"allowed_roles": self.allowed_roles},
                "user_metadata": metadata,
            }
        )

    def _replace(
        self, old: MemoryRecord, value: dict[str, Any], text: str, metadata: dict[str, Any]
    ) -> None:
        """Write the new value as the memory's next version (history keeps the old)."""
        new = MemoryRecord.checked(
            {
                **old.model_dump(),
                "content": {"raw": text, "structured": value},
                "metadata": {**old.metadata.model_dump(), "version": old.metadata.version + 1},
                "time": {**old.time.model_dump(), "updated_at": utcnow()},
                "user_metadata": metadata,
            }
        )
        vector = None
        if text != old.content.raw:
            vector = self.long_term.embedder.embed([textlib.embedding_text(new)])[0]
        self.long_term.store.update([Change(new, vector, old.metadata.version, "langgraph put")])
        if vector is not None:
            self.long_term.keep_word_states([new])

    # -- search --------------------------------------------------------------------------------

    def _search(self, op: SearchOp) -> list[SearchItem]:
        want = op.offset + op.limit
        scope = self._prefix_scope(op.namespace_prefix)
        if scope is None or op.limit < 1:
            return []
        if op.query:
            found = self._ranked(op.query, scope, op.filter, want)
        else:
            found = [(r, None) for r in self._walk(scope, op.filter, want)]
        return [_search_item(record, score) for record, score in found[op.offset : want]]

    def _ranked(
        self, query: str, scope: Filter, conditions: dict[str, Any] | None, want: int
    ) -> list[tuple[MemoryRecord, float | None]]:
        """The best ``want`` indexed items for ``query`` that meet ``conditions``; the
        search widens until it has them or has read every candidate."""
        if scope.user_id is None:
            raise InvalidNamespaceError(
                f"a query needs a prefix that names the user: {self.template.labels!r}"
            )
        metadata = {**(scope.metadata or {}), INDEXED_KEY: True}
        narrowed = scope.model_copy(update={"metadata": metadata})
        k = want
        while True:
            results = self.long_term.search(
                query, user_id=scope.user_id, tenant_id=scope.tenant_id, k=k, filter=narrowed
            )
            hits: list[tuple[MemoryRecord, float | None]] = [
                (r.record, r.score) for r in results if matches(_value(r.record), conditions)
            ]
            if len(hits) >= want or len(results) < k:
                return hits[:want]
            k *= WIDEN

    def _walk(
        self, scope: Filter, conditions: dict[str, Any] | None, want: int | None = None
    ) -> Iterator[MemoryRecord]:
        """The items in ``scope`` that meet ``conditions``, oldest first (at most ``want``)."""
        cursor: str | None = None
        seen = 0
        while True:
            page = self.long_term.list(scope, limit=PAGE_SIZE, cursor=cursor)
            for record in page.records:
                if matches(_value(record), conditions):
                    yield record
                    seen += 1
                    if want is not None and seen >= want:
                        return
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def _prefix_scope(self, prefix: Sequence[str]) -> Filter | None:
        """The filter of every item under ``prefix`` (``*`` labels match any), or None when
        no item can be there."""
        fields = self.template.fields(prefix)
        if fields is None:
            return None
        if TENANT in self.template.labels and TENANT not in fields:
            raise InvalidNamespaceError(
                f"the prefix must name the tenant: {self.template.labels!r}"
            )
        labels = {LABEL_KEY.format(i): v for i, v in enumerate(prefix) if v != WILDCARD}
        return Filter.checked(
            {
                "tenant_id": fields.get(TENANT, self.tenant_id),
                "user_id": fields.get(USER),
                "project_id": fields.get(PROJECT),
                "metadata": {ITEM_KEY: True, **labels},
                "reader_roles": self.roles,
            },
            "namespace_prefix",
        )

    # -- namespaces ----------------------------------------------------------------------------

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        prefixes = [c.path for c in conditions if c.match_type == "prefix"]
        scope = self._prefix_scope(prefixes[0] if prefixes else ())
        if scope is None:
            return []
        found = {
            namespace[: op.max_depth] if op.max_depth is not None else namespace
            for namespace in (_namespace(r) for r in self._walk(scope, None))
            if all(_fits(c, namespace) for c in conditions)
        }
        return sorted(found)[op.offset : op.offset + op.limit]


def _version(record: MemoryRecord | None) -> int:
    return record.metadata.version if record is not None else 0


def _fits(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = condition.path
    if len(namespace) < len(path):
        return False
    side = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    if not path:
        return True
    return all(want in (WILDCARD, have) for want, have in zip(path, side, strict=True))


def _json_object(value: Mapping[str, Any]) -> dict[str, Any]:
    """``value`` as plain JSON (tuples become lists); a ValidationError if it is not JSON."""
    try:
        plain = json.loads(json.dumps(dict(value), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"is not JSON: {exc}", field="value") from exc
    assert isinstance(plain, dict)
    return plain


def _value(record: MemoryRecord) -> dict[str, Any]:
    return dict(record.content.structured or {})


def _namespace(record: MemoryRecord) -> tuple[str, ...]:
    labels: list[str] = []
    while (label := record.user_metadata.get(LABEL_KEY.format(len(labels)))) is not None:
        labels.append(str(label))
    return tuple(labels)


def _item(record: MemoryRecord) -> Item:
    """The LangGraph item that ``record`` holds."""
    return Item(
        namespace=_namespace(record),
        key=str(record.user_metadata[KEY_KEY]),
        value=_value(record),
        created_at=record.time.created_at,
        updated_at=record.time.updated_at,
    )


def _search_item(record: MemoryRecord, score: float | None) -> SearchItem:
    """``_item`` with its search score (None for a search without a query)."""
    item = _item(record)
    return SearchItem(item.namespace, item.key, item.value, item.created_at, item.updated_at, score)
