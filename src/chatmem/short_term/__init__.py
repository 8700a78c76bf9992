"""Short-term memory: each session's messages per tenant, user and session, kept within a
token budget.

- :mod:`~chatmem.short_term.memory`: ``ShortTermMemory``: append, the window the model
  sees, overflow (trim, summarize, flush), working state, ending and handing a session over.
- :mod:`~chatmem.short_term.condense`: running summaries and working state, by a model or
  extractively.

The session logs themselves are kept by a ``SessionStore`` (:mod:`chatmem.sessions`).
"""

from __future__ import annotations

from chatmem.short_term.memory import (
    LOG_CACHE_SESSIONS,
    FlushTarget,
    OverflowPolicy,
    ShortTermMemory,
    Strategy,
    Window,
    overflow_cut,
)

__all__ = [
    "LOG_CACHE_SESSIONS",
    "FlushTarget",
    "OverflowPolicy",
    "ShortTermMemory",
    "Strategy",
    "Window",
    "overflow_cut",
]
