"""The object an agent holds: ``Memory``, one session's short-term memory and the blocks of
long-term memory, packed into the model's context within a token budget.

- :mod:`~chatmem.memory.facade`: ``Memory`` (add, get, get_llm, clear, end_session,
  snapshot and load) and ``Extraction`` (turns buffered, batches queued by a trigger).
- :mod:`~chatmem.memory.blocks`: the blocks: static text, extracted facts, vector search.
- :mod:`~chatmem.memory.context`: packing blocks and turns within ``token_limit``.
"""

from __future__ import annotations

from chatmem.memory.facade import MIN_TOKEN_LIMIT, SNAPSHOT_FORMAT, Extraction, Memory

__all__ = ["MIN_TOKEN_LIMIT", "SNAPSHOT_FORMAT", "Extraction", "Memory"]
