"""A typed Python client for the chatmem service (``/v1/memory``, ``/v1/sessions``,
``/v1/admin``) with the methods and return types of ``LongTermMemory``.

``Client`` and ``AsyncClient`` are the two faces; ``calls`` builds each request and reads
its answer, ``transport`` sends with retries and translates errors, ``models`` holds the
answers about sessions and keys.
"""

from chatmem.client.aio import AsyncAdmin, AsyncClient, AsyncSessions
from chatmem.client.models import (
    ApiKey,
    EndedSession,
    NewApiKey,
    SessionInfo,
    SessionView,
    TenantInfo,
)
from chatmem.client.sync import Admin, Client, Sessions
from chatmem.client.transport import DEFAULT_BASE_URL, RetryPolicy

__all__ = [
    "DEFAULT_BASE_URL",
    "Admin",
    "ApiKey",
    "AsyncAdmin",
    "AsyncClient",
    "AsyncSessions",
    "Client",
    "EndedSession",
    "NewApiKey",
    "RetryPolicy",
    "SessionInfo",
    "SessionView",
    "Sessions",
    "TenantInfo",
]
