"""``AsyncLongTermMemory``: the methods of ``LongTermMemory``, awaited, each run in a
worker thread.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from chatmem.long_term.facade import LongTermMemory

P = ParamSpec("P")
R = TypeVar("R")


def _threaded(
    method: Callable[Concatenate[LongTermMemory, P], R],
) -> Callable[Concatenate[AsyncLongTermMemory, P], Coroutine[Any, Any, R]]:
    async def run(self: AsyncLongTermMemory, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, self.sync, *args, **kwargs)

    functools.update_wrapper(run, method)  # keeps the docstring and signature
    return run


class AsyncLongTermMemory:
    """The async face of ``LongTermMemory``: the same methods, awaited, run in threads."""

    def __init__(self, memory: LongTermMemory) -> None:
        self.sync = memory

    @classmethod
    async def open(cls, uri: str | None = None, **options: Any) -> AsyncLongTermMemory:
        return cls(await asyncio.to_thread(LongTermMemory.open, uri, **options))

    add = _threaded(LongTermMemory.add)
    add_records = _threaded(LongTermMemory.add_records)
    update = _threaded(LongTermMemory.update)
    delete = _threaded(LongTermMemory.delete)
    delete_all = _threaded(LongTermMemory.delete_all)
    search = _threaded(LongTermMemory.search)
    shortlist = _threaded(LongTermMemory.shortlist)
    records = _threaded(LongTermMemory.records)
    get = _threaded(LongTermMemory.get)
    list = _threaded(LongTermMemory.list)
    count = _threaded(LongTermMemory.count)
    history = _threaded(LongTermMemory.history)
    record_access = _threaded(LongTermMemory.record_access)
    export_jsonl = _threaded(LongTermMemory.export_jsonl)
    import_jsonl = _threaded(LongTermMemory.import_jsonl)
    close = _threaded(LongTermMemory.close)

    async def __aenter__(self) -> AsyncLongTermMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
