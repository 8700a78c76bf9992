"""Signed webhooks: when a session ends, its short-term memory is POSTed to a configured
URL (seed 003), off the request path.

The body is JSON: ``{"event": "session.ended", "id", "created_at", "tenant_id", "user_id",
"session_id", "summary", "messages": [...rich shape...]}``. The signature header is
``X-Chatmem-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`` with the
configured secret, so a receiver can check both who sent it and that it is fresh
(:func:`verify` does both). A delivery is retried with exponential backoff on a network
error, a 429 or a 5xx, up to ``max_attempts``; a 4xx other than 429 is final. Deliveries run
in a background thread and never block a chat.

With the service database (SQLite, or PostgreSQL beside a PostgreSQL memory store), pending
deliveries are rows of its ``webhook_deliveries`` table: an event survives a restart (the
next start delivers it, with its id, so a receiver can deduplicate), and the processes of
``chatmem serve --workers N`` (or every replica, on PostgreSQL) share the queue, each row
leased by one sender at a time. An event given up on stays in the table as ``failed`` with
its last error. Without a database (the service runs on memory only) the queue is in memory,
bounded, and a full queue drops the event, logged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import httpx
from pydantic import TypeAdapter

from chatmem.errors import StoreError
from chatmem.records import new_id, utcnow
from chatmem.server.config import WebhookTarget
from chatmem.server.metrics import Metrics
from chatmem.stores.sqlite import SQLiteFile

logger = logging.getLogger("chatmem.server.webhooks")
#: An event's ``created_at``: ISO 8601 UTC, as every time the service sends.
_TIME = TypeAdapter(datetime)

SIGNATURE_HEADER = "X-Chatmem-Signature"
#: A signature older than this is refused by :func:`verify`.
TOLERANCE_S = 300
_QUEUE_SIZE = 1000


def sign(secret: str, body: bytes, timestamp: int) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(secret: str, body: bytes, header: str, *, now: float | None = None) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` within ``TOLERANCE_S`` of now."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > TOLERANCE_S:
        return False
    return hmac.compare_digest(sign(secret, body, timestamp), header)


_MIGRATIONS = (
    """
    CREATE TABLE webhook_deliveries (
        id TEXT PRIMARY KEY,
        url TEXT NOT NULL,
        body TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_at INTEGER NOT NULL,
        leased_until INTEGER,
        state TEXT NOT NULL DEFAULT 'pending',
        error TEXT
    );
    CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_at);
    """,
)
#: How long a claimed delivery stays with its sender beyond the request's own timeout.
_LEASE_MS = 30_000


class DeliveryClaim(NamedTuple):
    event_id: str
    body: bytes
    attempts: int


class Deliveries(Protocol):
    """Where pending deliveries wait: memory, the service's SQLite file, or PostgreSQL
    shared by every replica (:mod:`chatmem.server.pg_state`)."""

    def add(self, event_id: str, body: bytes, now: float) -> bool: ...

    def claim(self, now: float, lease_s: float) -> DeliveryClaim | None: ...

    def retry(self, claim: DeliveryClaim, at: float) -> None: ...

    def end(self, claim: DeliveryClaim, error: str | None) -> None: ...

    def next_due(self) -> float | None: ...

    def pending(self) -> int: ...


class _MemoryDeliveries:
    """Pending deliveries in memory (no service database), at most ``_QUEUE_SIZE``."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[bytes, int, float]] = {}  # id -> body, attempts, next_at
        self._leased: set[str] = set()
        self._lock = threading.Lock()

    def add(self, event_id: str, body: bytes, now: float) -> bool:
        with self._lock:
            if len(self._rows) >= _QUEUE_SIZE:
                return False
            self._rows[event_id] = (body, 0, now)
            return True

    def claim(self, now: float, lease_s: float) -> DeliveryClaim | None:
        with self._lock:
            due = [(at, i) for i, (_, _, at) in self._rows.items() if i not in self._leased]
            due = [(at, i) for at, i in due if at <= now]
            if not due:
                return None
            event_id = min(due)[1]
            self._leased.add(event_id)
            body, attempts, _ = self._rows[event_id]
            return DeliveryClaim(event_id, body, attempts)

    def retry(self, claim: DeliveryClaim, at: float) -> None:
        with self._lock:
            self._rows[claim.event_id] = (claim.body, claim.attempts + 1, at)
            self._leased.discard(claim.event_id)

    def end(self, claim: DeliveryClaim, error: str | None) -> None:
        with self._lock:
            self._rows.pop(claim.event_id, None)
            self._leased.discard(claim.event_id)

    def next_due(self) -> float | None:
        with self._lock:
            return min((at for _, _, at in self._rows.values()), default=None)

    def pending(self) -> int:
        with self._lock:
            return len(self._rows)


class _SQLiteDeliveries:
    """Pending deliveries as rows of the service database, leased to one sender at a time."""

    def __init__(self, path: Path, url: str) -> None:
        self._file = SQLiteFile(path)
        self._file.migrate(_MIGRATIONS, table="webhook_migrations")
        self._url = url

    def add(self, event_id: str, body: bytes, now: float) -> bool:
        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO webhook_deliveries (id, url, body, next_at) VALUES (?, ?, ?, ?)",
                (event_id, self._url, body.decode(), int(now * 1000)),
            )

        self._file.write(work)
        return True

    def claim(self, now: float, lease_s: float) -> DeliveryClaim | None:
        moment = int(now * 1000)

        def work(conn: sqlite3.Connection) -> DeliveryClaim | None:
            row = conn.execute(
                "SELECT id, body, attempts FROM webhook_deliveries WHERE state = 'pending'"
                " AND url = ? AND next_at <= ? AND (leased_until IS NULL OR leased_until < ?)"
                " ORDER BY next_at LIMIT 1",
                (self._url, moment, moment),
            ).fetchone()
            if row is None:
                return None
            conn.execute(
                "UPDATE webhook_deliveries SET leased_until = ? WHERE id = ?",
                (moment + int(lease_s * 1000) + _LEASE_MS, row[0]),
            )
            return DeliveryClaim(str(row[0]), str(row[1]).encode(), int(row[2]))

        return self._file.write(work)

    def retry(self, claim: DeliveryClaim, at: float) -> None:
        self._file.write(
            lambda conn: conn.execute(
                "UPDATE webhook_deliveries SET attempts = ?, next_at = ?, leased_until = NULL"
                " WHERE id = ?",
                (claim.attempts + 1, int(at * 1000), claim.event_id),
            )
        )

    def end(self, claim: DeliveryClaim, error: str | None) -> None:
        if error is None:
            self._file.write(
                lambda conn: conn.execute(
                    "DELETE FROM webhook_deliveries WHERE id = ?", (claim.event_id,)
                )
            )
            return
        self._file.write(
            lambda conn: conn.execute(
                "UPDATE webhook_deliveries SET state = 'failed', attempts = ?, error = ?,"
                " leased_until = NULL WHERE id = ?",
                (claim.attempts + 1, error, claim.event_id),
            )
        )

    def next_due(self) -> float | None:
        with self._file.read() as conn:
            row = conn.execute(
                "SELECT MIN(next_at) FROM webhook_deliveries WHERE state = 'pending' AND url = ?",
                (self._url,),
            ).fetchone()
        return None if row[0] is None else row[0] / 1000

    def pending(self) -> int:
        with self._file.read() as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'pending' AND url = ?",
                (self._url,),
            ).fetchone()
        return int(row[0])

    def close(self) -> None:
        self._file.close()


class WebhookSender:
    """Delivers events to one target from a background thread; with ``database``, the
    queue is durable (see the module docstring)."""

    def __init__(
        self,
        target: WebhookTarget,
        secret: str,
        metrics: Metrics,
        database: Path | None = None,
        *,
        table: Callable[[str], Deliveries] | None = None,
    ) -> None:
        self.target = target
        self._secret = secret
        self._metrics = metrics
        self._deliveries: Deliveries = _MemoryDeliveries()
        if table is not None:
            try:
                self._deliveries = table(target.url)
            except StoreError as exc:
                logger.error("webhook queue kept in memory (database unavailable): %s", exc)
        elif database is not None:
            try:
                self._deliveries = _SQLiteDeliveries(database, target.url)
            except StoreError as exc:
                logger.error("webhook queue kept in memory (%s unavailable): %s", database, exc)
        self._client = httpx.Client(timeout=target.timeout_s)
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chatmem-webhooks", daemon=True)
        self._thread.start()

    @classmethod
    def from_config(
        cls,
        target: WebhookTarget | None,
        metrics: Metrics,
        database: Path | None = None,
        *,
        table: Callable[[str], Deliveries] | None = None,
    ) -> WebhookSender | None:
        """The sender of ``target``; its queue in ``table`` (made for the target's URL),
        else the SQLite file ``database``, else memory."""
        if target is None:
            return None
        secret = target.secret or (os.environ.get(target.secret_env) if target.secret_env else "")
        if not secret:
            logger.warning("webhook %s has no secret: its deliveries are unsigned", target.url)
        return cls(target, secret or "", metrics, database, table=table)

    @property
    def durable(self) -> bool:
        return not isinstance(self._deliveries, _MemoryDeliveries)

    def send(self, event: dict[str, Any]) -> bool:
        """Queue an event (never waits on the receiver); False when it was dropped."""
        created_at = _TIME.dump_python(utcnow(), mode="json")
        payload = {"id": "evt_" + new_id(), "created_at": created_at, **event}
        body = json.dumps(payload, separators=(",", ":")).encode()
        try:
            queued = self._deliveries.add(payload["id"], body, time.time())
        except StoreError as exc:
            logger.error("webhook event %s not queued: %s", payload["id"], exc)
            queued = False
        if not queued:
            logger.error("webhook queue full or unavailable, event %s dropped", payload["id"])
            self._metrics.webhooks.labels("dropped").inc()
            return False
        self._wake.set()
        return True

    def pending(self) -> int:
        """Deliveries not yet made nor given up on (of every process, when durable)."""
        return self._deliveries.pending()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every queued event was delivered or given up (for tests and shutdown)."""
        deadline = time.monotonic() + timeout
        while self.pending():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                claim = self._deliveries.claim(time.time(), self.target.timeout_s)
                if claim is not None:
                    self._attempt(claim)
                    continue
                due = self._deliveries.next_due()
            except StoreError as exc:  # boundary: the database is back on a later round
                logger.warning("webhook queue unreadable: %s", exc)
                due = None
            # Other processes may queue too: look again within a second.
            wait = 1.0 if due is None else min(1.0, max(0.0, due - time.time()))
            self._wake.wait(wait)
            self._wake.clear()

    def _attempt(self, claim: DeliveryClaim) -> None:
        attempt = claim.attempts + 1
        headers = {"Content-Type": "application/json", "User-Agent": "chatmem-webhooks"}
        if self._secret:
            headers[SIGNATURE_HEADER] = sign(self._secret, claim.body, int(time.time()))
        error: str
        try:
            response = self._client.post(self.target.url, content=claim.body, headers=headers)
            status: int | None = response.status_code
            error = f"HTTP {status}"
        except httpx.HTTPError as exc:
            status, error = None, f"{type(exc).__name__}: {exc}"
            logger.warning("webhook %s: %s (attempt %d)", claim.event_id, exc, attempt)
        if status is not None and status < 300:
            self._deliveries.end(claim, None)
            self._metrics.webhooks.labels("delivered").inc()
            logger.info("webhook %s delivered (attempt %d)", claim.event_id, attempt)
            return
        final = status is not None and 400 <= status < 500 and status != 429
        if final or attempt >= self.target.max_attempts:
            self._deliveries.end(claim, error)
            self._metrics.webhooks.labels("failed").inc()
            logger.error("webhook %s to %s failed, given up: %s", claim.event_id,
                         self.target.url, error)  # fmt: skip
            return
        self._metrics.webhooks.labels("retried").inc()
        self._deliveries.retry(claim, time.time() + self.target.backoff_s * 2 ** (attempt - 1))

    def next_attempt_at(self) -> float | None:
        """When the earliest pending delivery is due (Unix seconds), or None."""
        return self._deliveries.next_due()

    def close(self, timeout: float = 5.0) -> None:
        """Stop after the deliveries due now (within ``timeout``). Durable: retries due
        later are left to the next start. In memory: those due within ``timeout`` are
        waited for, and the rest are lost (logged)."""
        deadline = time.monotonic() + timeout
        while self.pending() and time.monotonic() < deadline:
            due = self._deliveries.next_due()
            wait = 0.0 if self.durable else deadline - time.monotonic()
            if due is not None and due > time.time() + wait:
                break
            time.sleep(0.01)
        if self.pending() and not self.durable:
            logger.error("webhooks: %d undelivered events lost at shutdown", self.pending())
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout)
        self._client.close()
        close = getattr(self._deliveries, "close", None)
        if callable(close):
            close()


__all__ = [
    "SIGNATURE_HEADER",
    "Deliveries",
    "DeliveryClaim",
    "WebhookSender",
    "sign",
    "verify",
]
