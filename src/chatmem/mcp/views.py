"""What the MCP tools and resources return: a memory as a model needs it
(``MemoryView``), recall's results with the reasons for each score, the context block,
the answers of the writes, a page of the list and a memory's history.

Plain pydantic models; their JSON schemas are the tools' output schemas.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from chatmem.records import HistoryEntry, MemoryRecord, MemoryType


class MemoryView(BaseModel):
    """One memory as a model needs it (the full record is the memory resource)."""

    id: str
    text: str
    type: MemoryType
    user_id: str
    project_id: str | None = None
    session_id: str | None = None
    tags: list[str] = Field(default_factory=list)
    importance: float
    confidence: float
    version: int
    created_at: datetime
    updated_at: datetime
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    allowed_roles: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, record: MemoryRecord) -> MemoryView:
        return cls(
            id=record.id,
            text=record.content.raw,
            type=record.type,
            user_id=record.user_id,
            project_id=record.project_id,
            session_id=record.session_id,
            tags=record.metadata.tags,
            importance=record.metadata.importance,
            confidence=record.metadata.confidence,
            version=record.metadata.version,
            created_at=record.time.created_at,
            updated_at=record.time.updated_at,
            valid_from=record.time.valid_from,
            valid_to=record.time.valid_to,
            allowed_roles=record.access_control.allowed_roles,
        )


class Reasons(BaseModel):
    """Why a memory was recalled: the parts of its score."""

    cosine: float | None = Field(description="Similarity of meaning to the query, -1 to 1.")
    bm25: float | None = Field(description="Keyword match (BM25); null when no query word matched.")
    fused: float = Field(
        description="The hybrid score: 0.6 x cosine + 0.4 x relative BM25, the BM25 part"
        " scaled down for a memory far in meaning from the query (chatmem.ranking)."
    )
    relevance: float = Field(description="fused relative to the best match; the threshold's scale.")
    recency: float = Field(description="0.5 ** (age / 30 days).")
    importance: float
    why: str = Field(description="The reasons in words.")


class Recalled(BaseModel):
    memory: MemoryView
    score: float = Field(description="0.7 relevance + 0.15 recency + 0.15 importance.")
    reasons: Reasons


class RecallResult(BaseModel):
    user_id: str
    results: list[Recalled]


class ContextBlock(BaseModel):
    context: str = Field(description="The block to put in your prompt; empty when none fits.")
    tokens: int = Field(description="Tokens the block costs as a system message.")
    memory_ids: list[str] = Field(description="The memories in the block, in its order.")
    left_out: int = Field(description="Memories found that did not fit the budget.")


class Remembered(BaseModel):
    memories: list[MemoryView]


class Forgotten(BaseModel):
    deleted: int


class MemoryList(BaseModel):
    memories: list[MemoryView]
    next_cursor: str | None = Field(description="Pass it as cursor for the next page; null: done.")


class Change(BaseModel):
    version: int
    event: str
    at: datetime
    reason: str | None = None
    text_before: str | None = None
    text_after: str | None = None


class History(BaseModel):
    memory_id: str
    changes: list[Change]

    @classmethod
    def of(cls, memory_id: str, entries: list[HistoryEntry]) -> History:
        changes = [
            Change(
                version=e.version,
                event=e.event.value,
                at=e.at,
                reason=e.reason,
                text_before=e.old.content.raw if e.old is not None else None,
                text_after=e.new.content.raw if e.new is not None else None,
            )
            for e in entries
        ]
        return cls(memory_id=memory_id, changes=changes)


__all__ = [
    "Change",
    "ContextBlock",
    "Forgotten",
    "History",
    "MemoryList",
    "MemoryView",
    "Reasons",
    "RecallResult",
    "Recalled",
    "Remembered",
]
