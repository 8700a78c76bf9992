"""The memory commands: add, search, list, get, history, forget and stats, and the tables
and JSON they print.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.table import Table

from chatmem import retrieval as retrieval_
from chatmem.cli.console import count, err, out, print_json, printable
from chatmem.cli.options import (
    CheckedOwnerOption,
    IdArgument,
    JsonFlag,
    OwnerOption,
    ProjectOption,
    SessionOption,
    UserOption,
    expiry,
    given,
    metadata_of,
    utf8,
)
from chatmem.cli.store import (
    chosen_store,
    one_memory,
    open_memory,
    scope,
    short_ids,
    shown,
)
from chatmem.errors import ValidationError
from chatmem.records import MemoryRecord, MemoryType
from chatmem.stores import default_store_uri

# -- tables and JSON ---------------------------------------------------------------------------


def record_json(record: MemoryRecord) -> dict[str, Any]:
    """A memory as ``--json`` prints it."""
    return {
        "id": record.id,
        "content": record.text,
        "metadata": record.user_metadata,
        "type": record.type.value,
        "user_id": record.user_id,
        "session_id": record.session_id,
        "created_at": record.time.created_at.isoformat(),
        "version": record.metadata.version,
    }


def hit_json(hit: retrieval_.RetrievedMemory) -> dict[str, Any]:
    """A search hit as ``--json`` prints it: the memory and its scores."""
    return {
        **record_json(hit.record),
        "score": round(hit.score, 6),
        "relevance": round(hit.relevance, 6),
    }


def memory_table(
    title: str,
    records: Sequence[MemoryRecord],
    hits: Sequence[retrieval_.RetrievedMemory] = (),
) -> Table:
    """``records`` as a table (with the scores of ``hits``, when given), ids shortened."""
    table = Table(title=title, show_lines=False)
    if hits:
        table.add_column("score", justify="right")
        table.add_column("relevance", justify="right")
    for name in ("id", "type", "created", "content"):
        table.add_column(name, overflow="fold")
    short = short_ids(r.id for r in records)
    for i, record in enumerate(records):
        cells = [
            short[record.id],
            record.type.value,
            record.time.created_at.strftime("%Y-%m-%d %H:%M"),
            record.text,
        ]
        if hits:
            cells[:0] = [f"{hits[i].score:.3f}", f"{hits[i].relevance:.3f}"]
        table.add_row(*cells)
    return table


# -- commands ----------------------------------------------------------------------------------


def add(
    text: Annotated[str, typer.Argument(help="The text to remember.", callback=utf8)],
    user: UserOption,
    session: Annotated[str | None, typer.Option(help="Session id.", callback=utf8)] = None,
    project: Annotated[str | None, typer.Option(help="Project id.", callback=utf8)] = None,
    metadata: Annotated[
        str | None, typer.Option(help="Free-form metadata, a JSON object.", callback=utf8)
    ] = None,
    memory_type: Annotated[MemoryType, typer.Option("--type", help="Memory type.")] = (
        MemoryType.SEMANTIC
    ),
    expires: Annotated[
        str | None,
        typer.Option(
            help="Forget it at this time (ISO 8601, UTC unless a zone is given) or after"
            " this long (90s, 30m, 12h, 7d).",
            callback=utf8,
        ),
    ] = None,
) -> None:
    """Store TEXT as a memory of USER; prints the new memory's id (one per part: a text
    longer than a memory holds is stored in parts)."""
    expires_at = expiry(expires) if expires is not None else None
    with open_memory(create=True) as memory:
        records = memory.add(
            text,
            user_id=user,
            tenant_id=given.tenant,
            session_id=session,
            project_id=project,
            metadata=metadata_of(metadata),
            type=memory_type,
            expires_at=expires_at,
        )
    for record in records:
        out.print(record.id)


def search(
    query: Annotated[str, typer.Argument(help="What to look for.", callback=utf8)],
    user: UserOption,
    k: Annotated[int, typer.Option("--k", "-k", help="How many results.")] = 5,
    session: SessionOption = None,
    project: ProjectOption = None,
    types: Annotated[
        list[MemoryType] | None, typer.Option("--type", help="Only this type (repeatable).")
    ] = None,
    threshold: Annotated[
        float | None,
        typer.Option(
            help="Minimum relevance, 0..1 (default: memory.default_similarity_threshold, 0.6)."
        ),
    ] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="Every hit, whatever its relevance.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Hybrid search of USER's memories, ranked as the chat proxy ranks them."""
    if show_all and threshold is not None:
        raise ValidationError("give --threshold or --all, not both", field="--all")
    cutoff = 0.0 if show_all else _default_threshold() if threshold is None else threshold
    with open_memory() as memory:
        hits = retrieval_.search(
            memory,
            query,
            user_id=user,
            tenant_id=given.tenant,
            k=k,
            threshold=cutoff,
            types=types or None,
            project_id=project,
            session_id=session,
        )
    if as_json:
        print_json([hit_json(hit) for hit in hits])
        return
    title = f"{count(len(hits), 'result', 'results')} for {query!r}"
    out.print(memory_table(title, [hit.record for hit in hits], hits) if hits else title)
    if not hits and not show_all:
        err.print(f"none reached a relevance of {cutoff:g}; --all shows every hit")


def _default_threshold() -> float:
    """The service's ``memory.default_similarity_threshold`` (with CHATMEM__ overrides)."""
    from chatmem.server.config import load_config

    return load_config().memory.default_similarity_threshold


def list_memories(
    user: OwnerOption = None,
    limit: Annotated[int, typer.Option(help="Page size.")] = 50,
    cursor: Annotated[
        str | None, typer.Option(help="Cursor printed by the last page.", callback=utf8)
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List memories oldest first, a page at a time."""
    with open_memory() as memory:
        page = memory.list(scope(user), limit=limit, cursor=cursor)
    if as_json:
        print_json(
            {
                "memories": [record_json(r) for r in page.records],
                "next_cursor": page.next_cursor,
            }
        )
        return
    title = count(len(page.records))
    out.print(memory_table(title, page.records) if page.records else title)
    if page.next_cursor:
        out.print(f"next page: --cursor {page.next_cursor}")


def get(memory_id: IdArgument, user: CheckedOwnerOption = None) -> None:
    """Print one memory, every field, as JSON."""
    with one_memory(memory_id, user) as (memory, found):
        record = memory.get(found, tenant_id=given.tenant, user_id=user)
    print_json(record.model_dump(mode="json"))


def history(memory_id: IdArgument, user: CheckedOwnerOption = None) -> None:
    """Every version of a memory, oldest first."""
    with one_memory(memory_id, user) as (memory, found):
        entries = memory.history(found, tenant_id=given.tenant, user_id=user)
    table = Table(title=f"history of {found}")
    for name in ("version", "event", "at", "content", "reason"):
        table.add_column(name, overflow="fold")
    for entry in entries:
        version = entry.new or entry.old
        table.add_row(
            str(entry.version),
            entry.event.value,
            entry.at.isoformat(),
            version.text if version else "",
            entry.reason or "",
        )
    out.print(table)


def forget(
    user: UserOption,
    memory_id: Annotated[
        str | None,
        typer.Option("--id", help="Only this memory (or a unique prefix).", callback=utf8),
    ] = None,
    session: SessionOption = None,
    project: ProjectOption = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Do not ask before deleting more than one.")
    ] = False,
) -> None:
    """Delete one memory (--id) or every memory of USER (narrowed by session/project);
    asks first on a terminal, and needs --yes elsewhere."""
    if memory_id:
        with one_memory(memory_id, user) as (memory, found):
            memory.delete(found, tenant_id=given.tenant, user_id=user, reason="cli forget")
        out.print(f"forgot {count(1)}")
        return
    with open_memory() as memory:
        where = scope(user, session_id=session, project_id=project)
        matched = memory.count(where)
        if matched and not yes and not _confirm(f"forget {count(matched)} of {user!r}"):
            out.print("nothing forgotten")
            return
        removed = memory.delete_all(where, reason="cli forget")
    out.print(f"forgot {count(removed)}")


def _confirm(action: str) -> bool:
    """Ask before ``action`` on a terminal; elsewhere there is no one to ask, so refuse."""
    if not sys.stdin.isatty():
        raise ValidationError(f"{action} needs --yes when stdin is not a terminal")
    return typer.confirm(f"{printable(action)}?", default=False, err=True)


def stats(user: OwnerOption = None) -> None:
    """What the store holds."""
    uri = chosen_store() or default_store_uri()
    with open_memory() as memory:
        held = memory.count(scope(user))
        embedding = memory.store.embedding
    table = Table(show_header=False)
    table.add_row("store", shown(uri))
    table.add_row("tenant", given.tenant)
    if user:
        table.add_row("user", user)
    table.add_row("memories", str(held))
    if embedding:
        table.add_row("embedding", f"{embedding.model} ({embedding.dimension} dimensions)")
    out.print(table)


__all__ = [
    "add",
    "forget",
    "get",
    "hit_json",
    "history",
    "list_memories",
    "memory_table",
    "record_json",
    "search",
    "stats",
]
