"""Work a service does after it has answered: storing each answered turn.

A turn is stored off the request path, once its answer is on the way, so the client never
waits for it. The tasks belong to the runtime that started them, never to the module, so
two services in one process share nothing. They run per session in order (a session's turns
are stored in the order they were answered), and a stop drains them before any store
closes: an answered turn is stored, or counted in the log, never silently dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from chatmem.messages import SessionKey

logger = logging.getLogger("chatmem.server")


class AfterAnswer:
    """The turn stores a service has started and not finished."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        #: Per session, the store that runs last: the next one of that session waits for it.
        self._last: dict[SessionKey, asyncio.Task[None]] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    def run(
        self, key: SessionKey, first: Callable[[], None], then: Callable[[], None]
    ) -> asyncio.Future[None]:
        """Run ``first`` and then ``then`` in a worker thread, after the work of ``key``
        started before; the future returned is done when ``first`` is (its exception, if
        any, is ``first``'s). The request awaits that future (the turn is in its session
        before the client has the whole answer) and leaves ``then`` behind it."""
        loop = asyncio.get_running_loop()
        previous = self._last.get(key)
        first_done: asyncio.Future[None] = loop.create_future()

        async def in_order() -> None:
            try:
                if previous is not None:
                    await asyncio.wait([previous])
                await asyncio.to_thread(first)
            except BaseException as exc:  # boundary: handed to the request awaiting it
                if not first_done.done():
                    first_done.set_exception(exc)
                raise
            first_done.set_result(None)
            await asyncio.to_thread(then)

        task = loop.create_task(in_order())
        self._last[key] = task
        self._tasks.add(task)

        def ended(done: asyncio.Task[None]) -> None:
            self._tasks.discard(done)
            if self._last.get(key) is done:
                del self._last[key]

        task.add_done_callback(ended)
        return first_done

    async def drain(self, grace_s: float) -> int:
        """Wait up to ``grace_s`` for every store started so far; returns how many are left
        (logged as an error: their turns may be missing from their sessions)."""
        waiting = set(self._tasks)
        if not waiting:
            return 0
        logger.info("stopping: storing %d answered turns first", len(waiting))
        _, left = await asyncio.wait(waiting, timeout=grace_s)
        if left:
            logger.error(
                "stopping: %d answered turns were not stored within the %.1f s grace period",
                len(left), grace_s,
            )  # fmt: skip
        return len(left)


__all__ = ["AfterAnswer"]
