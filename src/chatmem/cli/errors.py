"""How an error reads on the command line: one line in the words the user typed (the
option they gave, not an internal field path). ``chatmem.cli.commands.main`` is the one
boundary that prints it.
"""

from __future__ import annotations

import re

from chatmem.errors import ImportFormatError, ValidationError

#: The options that set a record's or a filter's fields.
_OPTION_OF = {
    "content": "TEXT",
    "user_id": "--user",
    "tenant_id": "--tenant",
    "session_id": "--session",
    "project_id": "--project",
    "metadata": "--metadata",
    "user_metadata": "--metadata",
    "type": "--type",
    "k": "--k",
    "threshold": "--threshold",
    "cursor": "--cursor",
    "limit": "--limit",
}


def described(exc: BaseException) -> str:
    """An error as the user should read it: the field they sent, not an internal path."""
    if isinstance(exc, ImportFormatError):
        message = exc.message.removeprefix(f"line {exc.line}: ")
        return f"line {exc.line}: {exc.field}: {message}" if exc.field else str(exc)
    if isinstance(exc, ValidationError):
        message = exc.message.removeprefix("Value error, ")
        return f"{public_field(exc.field)}: {message}" if exc.field else message
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    if isinstance(exc, UnicodeError):
        return f"not UTF-8 text: {exc}"
    return str(exc)


def public_field(field: str) -> str:
    """The option the user gave for an internal field: ``messages[0].content.raw`` is the
    TEXT of ``add``, ``filter.user_id`` is ``--user``."""
    inner = re.sub(r"^(messages\[\d+\]|filter)\.", "", field).removesuffix(".raw")
    return _OPTION_OF.get(inner, field)


__all__ = ["described", "public_field"]
