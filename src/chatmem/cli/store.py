"""Which store and which memories a command means: the store chosen by ``--store`` (or
``$CHATMEM_STORE``, or the default file), the scope of ``--tenant`` and ``--user``, and
memory ids, shown short as git shows commits and accepted by a unique prefix.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from chatmem.cli.options import given
from chatmem.embeddings import Embedder, LocalEmbedder
from chatmem.errors import ConfigError, NotFoundError, ValidationError
from chatmem.long_term import LongTermMemory
from chatmem.records import Filter, MemoryRecord
from chatmem.stores import ENV_VAR as STORE_ENV
from chatmem.stores import check_store_uri, default_store_uri

#: The shortest id prefix tables show (longer where two ids of one table share it).
SHORT_ID = 8
#: The shortest id prefix a command accepts.
MIN_PREFIX = 4


def chosen_store() -> str | None:
    """The store the user named: --store, else $CHATMEM_STORE; None: the default file."""
    return given.store or os.environ.get(STORE_ENV) or None


@contextmanager
def open_memory(
    *, create: bool = False, wrap_embedder: Callable[[Embedder], Embedder] | None = None
) -> Iterator[LongTermMemory]:
    """The long-term memory of the chosen store. Only ``create`` (add, import) may make a
    store, and only in a folder that exists (or the default one): a read of a store that is
    not there says so, rather than answering from a new, empty file. ``wrap_embedder``
    wraps the local embedder (import counts what it embeds)."""
    uri = chosen_store() or default_store_uri()
    where = check_store_uri(uri)
    if where is not None and not create and not where.exists():
        raise ConfigError(f"no store at {where}; add a memory first or check --store")
    if where is not None and create and chosen_store() and not where.parent.is_dir():
        raise ConfigError(f"no folder {where.parent} for the store {uri}; check --store")
    embedder = None if wrap_embedder is None else wrap_embedder(LocalEmbedder())
    with LongTermMemory.open(uri, embedder=embedder) as memory:
        yield memory


@contextmanager
def one_memory(given_id: str, user: str | None) -> Iterator[tuple[LongTermMemory, str]]:
    """The chosen store's memory and the id ``given_id`` names in it (see ``resolve_id``)."""
    with open_memory() as memory:
        yield memory, resolve_id(memory, given_id, user)


def scope(user: str | None = None, **narrow: Any) -> Filter:
    """The filter of ``--tenant``, ``user`` and ``narrow``."""
    return Filter.checked({"tenant_id": given.tenant, "user_id": user, **narrow}, "filter")


def shown(uri: str) -> str:
    """``uri`` with its password, if any, hidden."""
    parts = urlsplit(uri)
    if not parts.password:
        return uri
    user = parts.netloc.rpartition("@")[0].split(":", 1)[0]
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def short_ids(ids: Iterable[str], shortest: int = SHORT_ID) -> dict[str, str]:
    """Each id's shortest prefix of at least ``shortest`` characters that no other of
    ``ids`` starts with (as git abbreviates commits)."""
    ordered = sorted(set(ids))
    short = {}
    for i, memory_id in enumerate(ordered):
        neighbours = ordered[max(i - 1, 0) : i] + ordered[i + 1 : i + 2]
        shared = max((len(os.path.commonprefix([memory_id, n])) for n in neighbours), default=0)
        short[memory_id] = memory_id[: max(shortest, shared + 1)]
    return short


def resolve_id(memory: LongTermMemory, given_id: str, user: str | None) -> str:
    """The id ``given_id`` names: itself if a memory has it, else the one memory whose id
    starts with it. None does: ``given_id`` as it is (the command reports it not found, or
    finds a deleted memory's history); more than one: a ValidationError."""
    if len(given_id) < MIN_PREFIX:
        return given_id
    where = scope(user)
    try:
        return memory.get(given_id, tenant_id=where.tenant_id, user_id=user).id
    except NotFoundError:
        pass
    matches = [r.id for r in every_record(memory, where) if r.id.startswith(given_id)]
    if len(matches) > 1:
        listed = ", ".join(sorted(short_ids(matches, len(given_id) + 1).values())[:5])
        raise ValidationError(
            f"{given_id!r} is ambiguous: {len(matches)} memories start with it ({listed}…)"
        )
    return matches[0] if matches else given_id


def every_record(memory: LongTermMemory, where: Filter) -> Iterator[MemoryRecord]:
    """Every memory ``where`` matches, a page at a time."""
    cursor: str | None = None
    while True:
        page = memory.list(where, limit=500, cursor=cursor)
        yield from page.records
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


__all__ = [
    "MIN_PREFIX",
    "SHORT_ID",
    "chosen_store",
    "every_record",
    "one_memory",
    "open_memory",
    "resolve_id",
    "scope",
    "short_ids",
    "shown",
]
