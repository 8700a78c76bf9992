"""Helpers for chatmem's background threads."""

from __future__ import annotations

import contextlib
import os
import threading


def lower_priority() -> None:
    """Let the calling thread yield the CPU to searches: nice 10, where the system lets a
    thread set its own (Linux); elsewhere nothing."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
