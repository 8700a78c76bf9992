"""Export and import of memories as JSON lines (``chatmem.export/1``): one record and its
vector a line, read back exactly, checked line by line and stored in one atomic write.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import IO, Any, Literal

import numpy as np

from chatmem import strict_json
from chatmem import text as textlib
from chatmem.embeddings import Embedder
from chatmem.errors import ImportFormatError, ValidationError
from chatmem.records import (
    MAX_TEXT_CHARS,
    EmbeddingInfo,
    Entry,
    Filter,
    MemoryRecord,
    Vector,
    new_id,
    roles_open,
)
from chatmem.stores import MemoryStore
from chatmem.stores.base import Change

EXPORT_FORMAT = "chatmem.export/1"
#: What ``import_jsonl`` does with a memory whose id is already stored.
OnConflict = Literal["fail", "skip", "replace"]
#: How far from 1 an imported vector's length may be and still be kept as it is.
UNIT_TOLERANCE = 1e-3

#: A line read: its record, and its vector (None when the export had none).
_Line = tuple[MemoryRecord, Vector | None]


def export_jsonl(store: MemoryStore, scope: Filter, out: IO[str], page_size: int) -> int:
    """Write every memory of ``store`` that ``scope`` matches to ``out``; returns the count."""
    written = 0
    cursor: str | None = None
    while True:
        page = store.list(scope, page_size, cursor)
        vectors = store.vectors([r.id for r in page.records], scope)
        for record in page.records:
            vector = vectors.get(record.id)
            line = {
                "format": EXPORT_FORMAT,
                "record": record.model_dump(mode="json"),
                "vector": vector.tolist() if vector is not None else None,
            }
            out.write(json.dumps(line, separators=(",", ":")) + "\n")
            written += 1
        if page.next_cursor is None:
            return written
        cursor = page.next_cursor


def import_jsonl(
    store: MemoryStore,
    embedder: Embedder,
    embedding: EmbeddingInfo,
    lines: Iterable[str],
    on_conflict: OnConflict,
    roles: Collection[str] | None,
) -> int:
    """Store the memories of ``lines`` in ``store`` (see ``LongTermMemory.import_jsonl``),
    embedding those exported without a vector; returns how many were stored or replaced."""
    read = [e for e in (_parse_line(t, n) for n, t in enumerate(lines, 1)) if e]
    if roles is not None:
        _refuse_foreign_roles(read, roles)
    ready, sent = _homed(store, _entries(read, embedder, embedding), roles)
    stored = _stored_versions(store, ready, roles)
    if on_conflict == "fail" and stored:
        first = next(iter(stored))
        raise ValidationError(f"memory {sent.get(first, first)!r} already exists", field="id")
    _put_as_new(store, [e for e in ready if e.record.id not in stored])
    if on_conflict == "replace" and stored:
        store.update([_replacing(e, stored[e.record.id]) for e in ready if e.record.id in stored])
        return len(ready)
    return len(ready) - len(stored)


def _refuse_foreign_roles(read: Sequence[_Line], roles: Collection[str]) -> None:
    """An importer holding ``roles`` writes no record that names a role outside them."""
    for number, (record, _) in enumerate(read, 1):
        lacking = sorted(set(record.access_control.allowed_roles) - set(roles))
        if lacking:
            raise ImportFormatError(
                f"names roles the importer does not hold: {', '.join(lacking)}",
                line=number,
                field="record.access_control.allowed_roles",
            )


def _entries(read: Sequence[_Line], embedder: Embedder, embedding: EmbeddingInfo) -> list[Entry]:
    """The lines as entries of ``embedding``: a line without a vector embedded here, and
    one whose vector has another dimension refused."""
    missing = [i for i, (_, v) in enumerate(read) if v is None]
    vectors = [v for _, v in read]
    if missing:
        fresh = embedder.embed([textlib.embedding_text(read[i][0]) for i in missing])
        for i, vector in zip(missing, fresh, strict=True):
            vectors[i] = vector
    ready = [
        Entry(r.model_copy(update={"embedding": embedding}), np.asarray(v, dtype=np.float32))
        for (r, _), v in zip(read, vectors, strict=True)
    ]
    for number, entry in enumerate(ready, 1):
        if entry.vector.shape != (embedding.dimension,):
            raise ImportFormatError(
                f"vector has {entry.vector.shape[0]} dimensions, the store has "
                f"{embedding.dimension}",
                line=number,
                field="vector",
            )
    return ready


def home_id(record: MemoryRecord) -> str:
    """The id a memory is imported under when someone else holds its own: derived from its
    tenant, user and id, so importing the same line again meets the same memory (and is
    answered as a line with an unused id is: skipped, refused or replaced), never a copy."""
    parts = "\x1f".join((record.tenant_id, record.user_id, record.id))
    return hashlib.blake2b(parts.encode(), digest_size=16).hexdigest()


def _homed(
    store: MemoryStore, entries: list[Entry], roles: Collection[str] | None
) -> tuple[list[Entry], dict[str, str]]:
    """``entries`` with each id held in their tenant by anyone but their user as a reader
    with ``roles`` sees it (another user's memory, or one hidden from those roles) replaced
    by its ``home_id``; and the ids sent, by the id each is stored under."""
    readers = frozenset(roles) if roles is not None else None
    renamed: dict[str, str] = {}
    for tenant_id, group in _by_tenant(entries).items():
        ids = [e.record.id for e in group]
        held = {r.id: r for r in store.get(ids, Filter(tenant_id=tenant_id))}
        for entry in group:
            other = held.get(entry.record.id)
            if other is not None and not (
                other.user_id == entry.record.user_id
                and roles_open(readers, other.access_control.allowed_roles)
            ):
                renamed[entry.record.id] = home_id(entry.record)
    return _renamed(entries, renamed), {home: sent for sent, home in renamed.items()}


def _by_tenant(entries: Sequence[Entry]) -> dict[str, list[Entry]]:
    groups: dict[str, list[Entry]] = {}
    for entry in entries:
        groups.setdefault(entry.record.tenant_id, []).append(entry)
    return groups


def _put_as_new(store: MemoryStore, entries: list[Entry]) -> None:
    """Store ``entries`` (none of whose ids their own user holds) atomically, each id
    that another tenant holds replaced: by its ``home_id``, or a new id when that is
    taken too."""
    renamed: dict[str, str] = {}
    while True:  # each refusal names one more id to rename; ids are unique in a store
        try:
            store.put(_renamed(entries, renamed))
            return
        except ValidationError as exc:
            taken = _held_elsewhere(exc, entries, renamed)
            if taken is None:
                raise
            entry, home = taken
            renamed[entry.record.id] = home if home is not None else new_id()


def _stored_versions(
    store: MemoryStore, entries: Sequence[Entry], roles: Collection[str] | None = None
) -> dict[str, int]:
    """The stored version of each entry's id that the entry's user already holds, in a
    memory a reader holding ``roles`` may see (None: any)."""
    readers = frozenset(roles) if roles is not None else None
    owners: dict[tuple[str, str], list[str]] = {}
    for entry in entries:
        owners.setdefault((entry.record.tenant_id, entry.record.user_id), []).append(
            entry.record.id
        )
    return {
        record.id: record.metadata.version
        for (tenant_id, user_id), ids in owners.items()
        for record in store.get(
            ids, Filter(tenant_id=tenant_id, user_id=user_id, reader_roles=readers)
        )
    }


def _replacing(entry: Entry, stored_version: int) -> Change:
    """The change that puts an imported record in place of the stored version."""
    record = entry.record
    version = max(record.metadata.version, stored_version + 1)
    metadata = record.metadata.model_copy(update={"version": version})
    return Change(
        record.model_copy(update={"metadata": metadata}), entry.vector, stored_version, "import"
    )


def _held_elsewhere(
    exc: ValidationError, entries: Sequence[Entry], renamed: Mapping[str, str]
) -> tuple[Entry, str | None] | None:
    """The entry whose id (or whose ``home_id``, once renamed to it) a store's put refused
    as taken (every store says ``memory '<id>' already exists``), with the id to try next
    (None: a new one); None for another refusal."""
    if exc.field != "id":
        return None
    for entry in entries:
        current = renamed.get(entry.record.id, entry.record.id)
        if exc.message == f"memory {current!r} already exists":
            home = home_id(entry.record)
            return entry, (home if current != home else None)
    return None


def _renamed(entries: list[Entry], renamed: Mapping[str, str]) -> list[Entry]:
    """``entries`` with the ids in ``renamed`` replaced, in their records and their links."""
    if not renamed:
        return entries
    moved = []
    for record, vector in entries:
        links = [
            link.model_copy(update={"target_id": renamed.get(link.target_id, link.target_id)})
            for link in record.relations
        ]
        update = {"id": renamed.get(record.id, record.id), "relations": links}
        moved.append(Entry(record.model_copy(update=update), vector))
    return moved


def _parse_line(text: str, number: int) -> _Line | None:
    if not text.strip():
        return None
    try:
        line = strict_json.loads(text)  # no NaN, 64-bit integers, no lone surrogates
    except ValidationError as exc:
        raise ImportFormatError(exc.message, line=number, field=exc.field) from None
    if not isinstance(line, dict) or line.get("format") != EXPORT_FORMAT:
        raise ImportFormatError(f"not a {EXPORT_FORMAT} line", line=number, field="format")
    _refuse_long_text(line.get("record"), number)
    try:
        record = MemoryRecord.checked(line.get("record"), "record")
    except ValidationError as exc:
        raise ImportFormatError(exc.message, line=number, field=exc.field) from None
    vector = line.get("vector")
    return record, None if vector is None else _unit_vector(vector, number)


def _unit_vector(vector: Any, number: int) -> Vector:
    """An imported vector as the stores keep every vector: finite, of length 1. Its
    direction is what it means; a length other than 1 would skew every cosine it is in."""
    if not isinstance(vector, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in vector
    ):
        raise ImportFormatError("must be a list of numbers", line=number, field="vector")
    try:
        values = np.asarray(vector, dtype=np.float64)
    except OverflowError:  # an integer past a float's range
        values = np.array([np.inf])
    if not np.isfinite(values).all():
        raise ImportFormatError("holds NaN or infinite values", line=number, field="vector")
    largest = float(np.abs(values).max(initial=0.0))
    if largest == 0.0:
        raise ImportFormatError("is all zeros: it has no direction", line=number, field="vector")
    if largest <= 1.0 and abs(float(np.linalg.norm(values)) - 1.0) <= UNIT_TOLERANCE:
        return values.astype(np.float32)  # already of length 1: kept exactly as exported
    scaled = values / largest  # first, so that squaring 1e300 cannot overflow
    return (scaled / np.linalg.norm(scaled)).astype(np.float32)


def _refuse_long_text(record: Any, number: int) -> None:
    """An import restores records as they were (ids, versions, history), so a text too long
    for one memory is refused by name rather than split into new records."""
    content = record.get("content") if isinstance(record, dict) else None
    raw = content.get("raw") if isinstance(content, dict) else None
    if isinstance(raw, str) and len(raw) > MAX_TEXT_CHARS:
        raise ImportFormatError(
            f"has {len(raw)} characters; a memory holds at most {MAX_TEXT_CHARS}, and an "
            "import does not split one (LongTermMemory.add stores a longer text as parts)",
            line=number,
            field="record.content.raw",
        )
