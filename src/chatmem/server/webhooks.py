"""Signed webhooks: when a session ends, its short-term memory is POSTed to a configured
URL (seed 003), off the request path.

The body is JSON: ``{"event": "session.ended", "id", "created_at", "tenant_id", "user_id",
"session_id", "summary", "messages": [...rich shape...]}``. The signature header is
``X-Chatmem-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`` with the
configured secret, so a receiver can check both who sent it and that it is fresh
(:func:`verify` does both). A delivery is retried with exponential backoff on a network
error, a 429 or a 5xx, up to ``max_attempts``; a 4xx other than 429 is final. Deliveries run
in one background thread with a bounded queue: a full queue drops the event, logged, and
never blocks a chat.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import queue
import threading
import time
from typing import Any

import httpx

from chatmem.records import new_id
from chatmem.server.config import WebhookTarget
from chatmem.server.metrics import Metrics

logger = logging.getLogger("chatmem.server.webhooks")

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


class WebhookSender:
    """Delivers events to one target from a background thread."""

    def __init__(self, target: WebhookTarget, secret: str, metrics: Metrics) -> None:
        self.target = target
        self._secret = secret
        self._metrics = metrics
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(_QUEUE_SIZE)
        self._client = httpx.Client(timeout=target.timeout_s)
        self._stopping = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name="chatmem-webhooks", daemon=True)
        self._thread.start()

    @classmethod
    def from_config(cls, target: WebhookTarget | None, metrics: Metrics) -> WebhookSender | None:
        if target is None:
            return None
        secret = target.secret or (os.environ.get(target.secret_env) if target.secret_env else "")
        if not secret:
            logger.warning("webhook %s has no secret: its deliveries are unsigned", target.url)
        return cls(target, secret or "", metrics)

    def send(self, event: dict[str, Any]) -> bool:
        """Queue an event (never blocks); False when the queue is full and it was dropped."""
        payload = {"id": "evt_" + new_id(), "created_at": int(time.time()), **event}
        try:
            self._queue.put_nowait(payload)
        except queue.Full:
            logger.error("webhook queue full, event %s dropped", payload["id"])
            self._metrics.webhooks.labels("dropped").inc()
            return False
        self._idle.clear()
        return True

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every queued event was delivered or given up (for tests and shutdown)."""
        return self._idle.wait(timeout)

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            self._deliver(event)
            if self._queue.empty():
                self._idle.set()

    def _deliver(self, event: dict[str, Any]) -> None:
        body = json.dumps(event, separators=(",", ":")).encode()
        for attempt in range(1, self.target.max_attempts + 1):
            headers = {"Content-Type": "application/json", "User-Agent": "chatmem-webhooks"}
            if self._secret:
                headers[SIGNATURE_HEADER] = sign(self._secret, body, int(time.time()))
            try:
                response = self._client.post(self.target.url, content=body, headers=headers)
                status: int | None = response.status_code
            except httpx.HTTPError as exc:
                status = None
                logger.warning("webhook %s: %s (attempt %d)", event["id"], exc, attempt)
            if status is not None and status < 300:
                self._metrics.webhooks.labels("delivered").inc()
                logger.info("webhook %s delivered (attempt %d)", event["id"], attempt)
                return
            if status is not None and 400 <= status < 500 and status != 429:
                break
            if attempt < self.target.max_attempts:
                self._metrics.webhooks.labels("retried").inc()
                if self._stopping.wait(self.target.backoff_s * 2 ** (attempt - 1)):
                    break
        self._metrics.webhooks.labels("failed").inc()
        logger.error("webhook %s to %s failed, given up", event["id"], self.target.url)

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued (within ``timeout``), then stop."""
        self._idle.wait(timeout)
        self._stopping.set()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        self._thread.join(timeout)
        self._client.close()


__all__ = ["SIGNATURE_HEADER", "WebhookSender", "sign", "verify"]
