"""``/v1/sessions`` as calls: short-term memory over the service (append, read, list,
end, delete, and a session's system memory).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from chatmem.client.calls.call import SESSIONS, Call, Safety, nothing, segment
from chatmem.client.models import EndedSession, SessionInfo, SessionView

R = TypeVar("R")

SessionFormat = Literal["openai", "vercel", "rich"]
#: What a 404 of a session's system memory says was not found.
_SYSTEM = "system memory of session"


def _on_session(
    method: str,
    session_id: str,
    route: str,
    read: Callable[[Any], R],
    safety: Safety,
    *,
    tenant_id: str | None,
    params: dict[str, Any] | None = None,
    json: Any = None,
    what: str | None = "session",
) -> Call[R]:
    """A call on ``route`` under one session's path; a 404 says ``what`` was not found
    (None: the route)."""
    return Call(
        method,
        f"{SESSIONS}/{segment(session_id)}{route}",
        read,
        safety,
        params=params or {},
        json=json,
        tenant_id=tenant_id,
        subject=(what, session_id) if what is not None else None,
    )


class SessionCalls:
    """``/v1/sessions``: short-term memory over the service."""

    @staticmethod
    def append(
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        user_id: str,
        format: SessionFormat = "openai",
        tenant_id: str | None = None,
    ) -> Call[int]:
        """Append messages (all or none) in ``format`` (openai, vercel or rich); returns
        the session's length. Extraction is queued. Never retried once sent."""
        body = {"user_id": user_id, "messages": [dict(m) for m in messages], "format": format}

        def length(data: Any) -> int:
            return int(data["length"])

        return _on_session(
            "POST", session_id, "/messages", length, Safety.WRITE,
            json=body, tenant_id=tenant_id, what=None,
        )  # fmt: skip

    @staticmethod
    def read(
        session_id: str,
        *,
        user_id: str,
        format: SessionFormat = "rich",
        tenant_id: str | None = None,
    ) -> Call[SessionView]:
        """The whole history, oldest first, with the running summary and window start."""
        params = {"user_id": user_id, "format": format}
        return _on_session(
            "GET", session_id, "", SessionView.model_validate, Safety.READ,
            params=params, tenant_id=tenant_id,
        )  # fmt: skip

    @staticmethod
    def list(*, user_id: str, tenant_id: str | None = None) -> Call[builtins.list[SessionInfo]]:
        """A user's sessions, most recently updated first."""

        def sessions(data: Any) -> builtins.list[SessionInfo]:
            return [SessionInfo.model_validate(item) for item in data["sessions"]]

        return Call(
            "GET", SESSIONS, sessions, Safety.READ, params={"user_id": user_id}, tenant_id=tenant_id
        )

    @staticmethod
    def end(session_id: str, *, user_id: str, tenant_id: str | None = None) -> Call[EndedSession]:
        """End a session: its episodic summary is kept for the next one, its extraction
        queued and the ``session.ended`` webhook sent."""
        return _on_session(
            "POST", session_id, "/end", EndedSession.model_validate, Safety.WRITE,
            json={"user_id": user_id}, tenant_id=tenant_id,
        )  # fmt: skip

    @staticmethod
    def delete(session_id: str, *, user_id: str, tenant_id: str | None = None) -> Call[None]:
        """Forget a session: its messages, its state and its system memory."""
        return _on_session(
            "DELETE", session_id, "", nothing, Safety.IDEMPOTENT,
            params={"user_id": user_id}, tenant_id=tenant_id,
        )  # fmt: skip

    @staticmethod
    def set_system(
        session_id: str, content: str, *, user_id: str, tenant_id: str | None = None
    ) -> Call[None]:
        """Set the system memory the chat proxy puts in front of the session's next
        request."""
        return _on_session(
            "PUT", session_id, "/system", nothing, Safety.READ,
            json={"user_id": user_id, "content": content}, tenant_id=tenant_id, what=None,
        )  # fmt: skip

    @staticmethod
    def get_system(session_id: str, *, user_id: str, tenant_id: str | None = None) -> Call[str]:
        """The session's system memory; NotFoundError when none is set."""

        def content(data: Any) -> str:
            return str(data["content"])

        return _on_session(
            "GET", session_id, "/system", content, Safety.READ,
            params={"user_id": user_id}, tenant_id=tenant_id, what=_SYSTEM,
        )  # fmt: skip

    @staticmethod
    def delete_system(session_id: str, *, user_id: str, tenant_id: str | None = None) -> Call[None]:
        """Stop injecting the session's system memory; NotFoundError when none is set."""
        return _on_session(
            "DELETE", session_id, "/system", nothing, Safety.IDEMPOTENT,
            params={"user_id": user_id}, tenant_id=tenant_id, what=_SYSTEM,
        )  # fmt: skip


__all__ = ["SessionCalls", "SessionFormat"]
