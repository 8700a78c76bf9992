"""Writes without transactions: read-then-write checks, chunked requests, and undo.

A batch is written in steps (the memories, then their history); when a step fails, what the
earlier steps wrote is deleted or restored before the error is raised, and a failure of that
clean-up is noted on the error. Version and duplicate-id checks read, then write, under the
store's lock: safe between threads of one process, not between processes on one server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, TypeVar

from chatmem.errors import ConflictError, NotFoundError, StoreError
from chatmem.records import MemoryRecord
from chatmem.stores.base import Change

T = TypeVar("T")

#: Records per request by id, and per chunk of a bulk delete.
ID_CHUNK = 1_000


class Stored(NamedTuple):
    """A memory as read back for a write: the record and its vector."""

    record: MemoryRecord
    vector: list[float]


def chunks(items: Sequence[T], size: int = ID_CHUNK) -> Iterator[Sequence[T]]:
    """``items`` in runs of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def current(state: dict[str, Stored], change: Change) -> Stored:
    """The stored version a change replaces (raises NotFoundError, ConflictError)."""
    new = change.record
    found = state.get(new.id)
    if found is None or (found.record.tenant_id, found.record.user_id) != (
        new.tenant_id,
        new.user_id,
    ):
        raise NotFoundError(new.id)
    version = found.record.metadata.version
    if version != change.expected_version:
        raise ConflictError(
            f"memory {new.id!r} is at version {version}, not {change.expected_version}"
        )
    return found


def changed_vector(change: Change, stored: Stored) -> list[float]:
    """The vector a change writes: its own, or the stored one when it brings none."""
    return change.vector.tolist() if change.vector is not None else stored.vector


def undo(failure: StoreError, action: Callable[[], object]) -> None:
    """Compensate a failed write; a failure to do so is noted on the original error."""
    try:
        action()
    except StoreError as undo_failure:
        failure.add_note(f"clean-up after the failure also failed: {undo_failure}")
