"""The options of the ``chatmem`` command: the global ones every command reads
(``--store``, ``--tenant``, ``--debug``), the options several commands share, and the
checks and parsers of their values (UTF-8 text, ``--expires``, ``--metadata``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any

import typer

from chatmem.errors import ValidationError
from chatmem.records import utc_ms, utcnow

#: Set (to anything) to see the traceback of an error instead of its one line.
DEBUG_ENV = "CHATMEM_DEBUG"

_SURROGATE = re.compile("[\ud800-\udfff]")
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smhd])", re.ASCII)
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


@dataclass
class GlobalOptions:
    """What the options before the command said (``chatmem --tenant t add …``)."""

    store: str | None = None
    tenant: str = "default"
    debug: bool = False


#: The global options of this run, set by the app's callback before any command runs.
given = GlobalOptions()


def utf8(param: typer.CallbackParam, value: Any) -> Any:
    """Refuse text that was not UTF-8: the shell hands such bytes over as lone surrogates."""
    for item in value if isinstance(value, list | tuple) else [value]:
        if isinstance(item, str) and _SURROGATE.search(item):
            raw = item.encode("utf-8", "surrogateescape")
            name = param.opts[0] if param.param_type_name == "option" else str(param.name).upper()
            raise ValidationError(f"not UTF-8 text: {raw!r}", field=name)
    return value


UserOption = Annotated[
    str, typer.Option("--user", "-u", help="The user the memories belong to.", callback=utf8)
]
OwnerOption = Annotated[
    str | None, typer.Option("--user", "-u", help="Only this user.", callback=utf8)
]
CheckedOwnerOption = Annotated[
    str | None, typer.Option("--user", "-u", help="Owner (checked).", callback=utf8)
]
SessionOption = Annotated[str | None, typer.Option(help="Only this session.", callback=utf8)]
ProjectOption = Annotated[str | None, typer.Option(help="Only this project.", callback=utf8)]
IdArgument = Annotated[
    str, typer.Argument(help="Memory id, or a unique prefix of it.", callback=utf8)
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def expiry(value: str) -> datetime:
    """``--expires``: an ISO 8601 time (UTC unless it names a zone), or a duration from now
    (``90s``, ``30m``, ``12h``, ``7d``)."""
    text = value.strip()
    if matched := _DURATION.fullmatch(text):
        amount, unit = matched.groups()
        try:
            return utcnow() + timedelta(**{_UNITS[unit]: float(amount)})
        except OverflowError:  # past the year 9999
            raise ValidationError("is too far in the future", field="--expires") from None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(
            "is neither an ISO 8601 time nor a duration (90s, 30m, 12h, 7d)", field="--expires"
        ) from None
    try:
        return utc_ms(moment)
    except ValueError as exc:  # 9999-12-31T23:59:59-14:00: no year 10000 in UTC
        raise ValidationError(str(exc), field="--expires") from None


def metadata_of(raw: str | None) -> dict[str, Any]:
    """``--metadata``: a JSON object (none: empty)."""
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"not JSON: {exc.msg}", field="--metadata") from None
    if not isinstance(value, dict):
        raise ValidationError("must be a JSON object", field="--metadata")
    return value


__all__ = [
    "DEBUG_ENV",
    "CheckedOwnerOption",
    "GlobalOptions",
    "IdArgument",
    "JsonFlag",
    "OwnerOption",
    "ProjectOption",
    "SessionOption",
    "UserOption",
    "expiry",
    "given",
    "metadata_of",
    "utf8",
]
