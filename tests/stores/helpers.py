"""Record and vector builders shared by the store tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from chatmem.records import MemoryRecord, Vector
from chatmem.stores.vector_cache import Row


def unit_vector(dimension: int, *weights: float) -> Vector:
    """A unit vector of ``dimension`` whose first components are ``weights``."""
    vector = np.zeros(dimension, dtype=np.float32)
    vector[: len(weights)] = weights
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def record(tenant: str, user: str, text: str, **fields: Any) -> MemoryRecord:
    return MemoryRecord.model_validate(
        {"tenant_id": tenant, "user_id": user, "content": {"raw": text}, **fields}
    )


class Snapshot:
    """A user's rows as one snapshot holds them (``vector_cache.UserRows``), none edited."""

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows

    def after(self, rowid: int) -> list[Row]:
        return [row for row in self.rows if row[0] > rowid]

    def still_there(self, rowids: np.ndarray, changed: int) -> np.ndarray:
        return np.isin(rowids, [row[0] for row in self.rows])

    def edited_since(self, edited: int) -> list[Row]:
        return []
