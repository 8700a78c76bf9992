"""A real ``chatmem serve`` process for benchmarks: started on a data directory with the
offline scripted upstream, waited for, killed or stopped, and read back from its database.

The service database (sessions, the extraction queue) is ``service.db`` in the data
directory, the memory store ``chatmem.db`` beside it (the defaults of ``chatmem serve``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import httpx

from chatmem.messages import Message, Role, SessionKey
from chatmem.records import Filter, MemoryRecord
from chatmem.sessions.sqlite import SQLiteSessionStore
from chatmem.stores import SQLiteStore
from chatmem.worker import BatchState, SQLiteOutbox

TENANT = "default"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Served:
    """``chatmem serve --scripted-upstream`` on ``data_dir``, its output appended to
    ``data_dir/serve.log``. Start it again after a kill with :meth:`start`."""

    data_dir: Path
    admin_key: str
    port: int = field(default_factory=free_port)
    batch_size: int = 5
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_key}"}

    @property
    def service_db(self) -> Path:
        return self.data_dir / "service.db"

    @property
    def memory_db(self) -> Path:
        return self.data_dir / "chatmem.db"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "serve.log"

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHATMEM")}
        env.update(
            CHATMEM__SERVER__DATA_DIR=str(self.data_dir),
            CHATMEM__MEMORY__EXTRACTION_BATCH_SIZE=str(self.batch_size),
            CHATMEM__AUTH__ADMIN_KEY=self.admin_key,  # /readyz details, the queue's depth
            PYTHONFAULTHANDLER="1",
        )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._log is None:
            self._log = self.log_path.open("ab")
        command = [sys.executable, "-m", "chatmem.cli", "serve", "--port", str(self.port),
                   "--scripted-upstream"]  # fmt: skip
        self.process = subprocess.Popen(
            command, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Until ``/readyz`` answers 200 to the admin (memory on, upstream answering)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"chatmem serve exited; see {self.log_path}")
            try:
                if httpx.get(f"{self.base}/readyz", headers=self.admin, timeout=2).is_success:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"chatmem serve not ready in {timeout_s} s")
            time.sleep(0.05)

    def kill(self) -> None:
        """``kill -9``: no grace, no flush."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def stop(self, timeout_s: float = 90.0) -> int:
        """SIGTERM, the graceful stop; returns the exit status."""
        if self.process is None:
            return 0
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout_s)

    def queue_depth(self) -> int:
        """Batches pending or leased: the admin's ``/readyz`` field, else the outbox."""
        try:
            ready = httpx.get(f"{self.base}/readyz", headers=self.admin, timeout=5).json()
        except (httpx.HTTPError, ValueError):
            ready = {}
        depth = ready.get("extraction_queue") if isinstance(ready, dict) else None
        if isinstance(depth, int):
            return depth
        counts = outbox_counts(self.service_db)
        return counts[BatchState.PENDING] + counts[BatchState.LEASED]

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


# -- reading the data back ---------------------------------------------------------------


def session_messages(path: Path, users: list[str]) -> dict[SessionKey, list[Message]]:
    """Every session's messages, read from the service database itself."""
    store = SQLiteSessionStore(path)
    try:
        found: dict[SessionKey, list[Message]] = {}
        for user in users:
            for info in store.sessions(TENANT, user):
                key = SessionKey(TENANT, user, info.session_id)
                found[key] = store.read(key)
        return found
    finally:
        store.close()


def unqueued_messages(path: Path, users: list[str]) -> int:
    """Messages past their session's extraction mark: stored, not yet queued (they wait
    for a trigger; after a crash, ``recover`` at the next start queues them)."""
    store = SQLiteSessionStore(path)
    try:
        return sum(
            info.length - store.state(SessionKey(TENANT, user, info.session_id)).extracted_upto
            for user in users
            for info in store.sessions(TENANT, user)
        )
    finally:
        store.close()


def extracted_ids(path: Path) -> tuple[set[str], int]:
    """The ids of the messages in DONE extraction batches, and how many batches are DEAD."""
    outbox = SQLiteOutbox(path)
    try:
        batches = outbox.batches(BatchState.DONE, limit=1_000_000)
        done = {m.id for batch in batches for m in batch.messages}
        return done, outbox.counts()[BatchState.DEAD]
    finally:
        outbox.close()


def outbox_counts(path: Path) -> dict[BatchState, int]:
    outbox = SQLiteOutbox(path)
    try:
        return outbox.counts()
    finally:
        outbox.close()


def stored_memories(path: Path, user: str, ids: list[str]) -> dict[str, MemoryRecord]:
    """The memories of ``ids`` (one user's) that the store holds, by id."""
    store = SQLiteStore(path)
    try:
        found: dict[str, MemoryRecord] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            for record in store.get(chunk, Filter(tenant_id=TENANT, user_id=user)):
                found[record.id] = record
        return found
    finally:
        store.close()


def conversation_ids(messages: list[Message]) -> set[str]:
    """The ids of a session's user and assistant messages: what extraction must see."""
    return {m.id for m in messages if m.role in (Role.USER, Role.ASSISTANT)}
