"""Who may read what was built on restricted memories (SPEC L7).

An answer made with a memory that names ``allowed_roles`` says that memory's text to
whoever reads it, so it is as restricted as the memory. What an answer was built on is
recorded with it as an ACL: the ``allowed_roles`` of each restricted memory injected for it
(``Prepared.memory_acl``), joined with the ACL of the chain it continues. The stored
response keeps it (``StoredResponse.acl``) and so does the session's assistant message
(``metadata.memory_acl``). A reader sees it when its roles open every entry, by the rule
memories are read by (``chatmem.records.roles_open``): one role of each entry, and the
admin (roles None) always. No key holds the role ``admin``, so ``ADMIN_ONLY`` guards what
only the admin may read: a stored ACL that cannot be read, or one never recorded.

Every path that returns a stored response or a session's messages asks here: a response a
reader may not see is answered as one that does not exist (404); a session message is shown
in its place with its content withheld (``content`` "", ``metadata.withheld``
"restricted"), and so is a summary made from such messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from chatmem.messages import MEMORY_ACL, Message, MessageMetadata
from chatmem.records import roles_open
from chatmem.server.auth import ADMIN
from chatmem.sessions import SessionState
from chatmem.short_term import Window

#: ``metadata.withheld`` of a message shown without its content.
WITHHELD = "restricted"

#: Each entry: the roles of one restricted memory; a reader must hold one role of each.
Acl = list[list[str]]
Roles = frozenset[str] | None
#: What only the admin reads (no key can be given the role ``admin``).
ADMIN_ONLY: Acl = [[ADMIN]]


def acl_of(entries: Iterable[Iterable[str]]) -> Acl:
    """The smallest ACL that asks what ``entries`` ask: unrestricted entries and repeats
    dropped, and any entry that holds another (opening the smaller opens it too)."""
    sets = {frozenset(entry) for entry in entries if entry}
    kept = [s for s in sets if not any(other < s for other in sets)]
    return sorted(sorted(s) for s in kept)


def join(*acls: Acl) -> Acl:
    """What a reader must hold to see something built on each of ``acls``."""
    return acl_of(entry for acl in acls for entry in acl)


def may_see(roles: Roles, acl: Acl) -> bool:
    """Whether a reader with ``roles`` may see what ``acl`` guards."""
    return all(roles_open(roles, entry) for entry in acl)


def read_acl(value: Any) -> Acl:
    """The ACL stored as ``value`` (a list of lists of role names; None: no ACL), and
    ``ADMIN_ONLY`` for anything else: what cannot be read is not opened."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(
        isinstance(entry, list) and all(isinstance(role, str) for role in entry) for entry in value
    ):
        return ADMIN_ONLY
    return acl_of(value)


def message_acl(message: Message) -> Acl:
    """The ACL a session message carries (``[]``: none)."""
    return read_acl((message.metadata.model_extra or {}).get(MEMORY_ACL))


def with_acl(metadata: MessageMetadata, acl: Acl) -> MessageMetadata:
    """``metadata`` carrying ``acl`` (unchanged when ``acl`` restricts nothing)."""
    if not acl:
        return metadata
    return MessageMetadata.model_validate(
        {**metadata.model_dump(exclude_defaults=True), MEMORY_ACL: acl}
    )


def withheld(message: Message) -> Message:
    """``message`` without what it says: no content, tool calls or parts, and
    ``metadata.withheld``; its place, role, id and time are kept."""
    metadata = MessageMetadata.model_validate({"withheld": WITHHELD})
    return message.model_copy(
        update={"content": "", "tool_calls": None, "parts": None, "metadata": metadata}
    )


def visible_message(roles: Roles, message: Message) -> Message:
    """``message`` as a reader with ``roles`` sees it."""
    return message if may_see(roles, message_acl(message)) else withheld(message)


def visible_messages(roles: Roles, messages: Sequence[Message]) -> list[Message]:
    """``messages`` as a reader with ``roles`` sees them, each in its place."""
    return [visible_message(roles, message) for message in messages]


def may_see_all(roles: Roles, messages: Iterable[Message]) -> bool:
    """Whether a reader with ``roles`` may see every one of ``messages``: what is made from
    them (a summary, a working state) may say any of them."""
    return all(may_see(roles, message_acl(message)) for message in messages)


def visible_summary(
    roles: Roles, summary: Message | None, covers: Sequence[Message]
) -> Message | None:
    """A summary of the messages ``covers``, withheld unless the reader sees them all."""
    if summary is None or may_see_all(roles, covers):
        return summary
    return withheld(summary)


class SessionShown(NamedTuple):
    """A session as one reader sees it: its messages, running summary, episodic summary
    and working state, each withheld where it says what the reader may not read."""

    messages: list[Message]
    summary: Message | None
    episode: Message | None
    working_state: dict[str, Any] | None


def visible_session(
    roles: Roles, history: Sequence[Message], window: Window, state: SessionState
) -> SessionShown:
    """The session whose log is ``history`` as a reader with ``roles`` sees it. The running
    summary stands for the messages before the window, the working state for those it was
    brought up to date with, the episode for all of them; a withheld working state is
    ``{"withheld": "restricted"}``."""
    working = window.working_state
    if working is not None and not may_see_all(roles, history[: state.working_state_at]):
        working = {"withheld": WITHHELD}
    return SessionShown(
        visible_messages(roles, history),
        visible_summary(roles, window.summary, history[: window.start]),
        visible_summary(roles, state.episode, history),
        working,
    )


__all__ = [
    "ADMIN_ONLY",
    "MEMORY_ACL",
    "WITHHELD",
    "Acl",
    "Roles",
    "SessionShown",
    "acl_of",
    "join",
    "may_see",
    "may_see_all",
    "message_acl",
    "read_acl",
    "visible_message",
    "visible_messages",
    "visible_session",
    "visible_summary",
    "with_acl",
    "withheld",
]
