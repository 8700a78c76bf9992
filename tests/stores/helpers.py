"""Record and vector builders shared by the store tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from chatmem.records import MemoryRecord, Vector


def unit_vector(dimension: int, *weights: float) -> Vector:
    """A unit vector of ``dimension`` whose first components are ``weights``."""
    vector = np.zeros(dimension, dtype=np.float32)
    vector[: len(weights)] = weights
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def record(tenant: str, user: str, text: str, **fields: Any) -> MemoryRecord:
    return MemoryRecord.model_validate(
        {"tenant_id": tenant, "user_id": user, "content": {"raw": text}, **fields}
    )
