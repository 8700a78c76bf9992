"""The checks of the numbers and flags a caller hands the library, written once.

A value of the wrong kind is refused with a ``ValidationError`` naming the field as the
caller wrote it, never a ``TypeError`` from a comparison further in: a bool is not a number
(``True`` is not a count of 1), a whole number is any ``numbers.Integral`` or a finite
number with nothing after the point (``64e6`` bytes, ``4096.0`` tokens), a number any
``numbers.Real`` or ``Decimal`` (numpy's too: each is handed back as Python's ``int`` or
``float``), and NaN is in no range, nor is a number too big for a float. ``message`` is
what a value out of its range is told, where a check said it in words of its own ("must be
at least 1 second"); the default says the bounds.

Only ``chatmem.errors`` is imported, so every layer may use these.
"""

from __future__ import annotations

import math
import numbers
from decimal import Decimal

from chatmem.errors import ValidationError


def whole(
    value: object,
    field: str,
    *,
    low: int | None = None,
    high: int | None = None,
    message: str | None = None,
) -> int:
    """``value`` as an ``int`` when it is a whole number from ``low`` to ``high`` (either
    bound left out: none); else a ``ValidationError`` naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real | Decimal):
        raise ValidationError("must be a whole number", field=field)
    if isinstance(value, numbers.Integral):
        count = int(value)
    elif math.isfinite(value) and float(value).is_integer():  # 64e6, 4096.0
        count = int(float(value))
    else:
        raise ValidationError("must be a whole number", field=field)
    if (low is not None and count < low) or (high is not None and count > high):
        raise ValidationError(message or _range(low, high), field=field)
    return count


def number(
    value: object,
    field: str,
    *,
    low: float | None = None,
    high: float | None = None,
    positive: bool = False,
    message: str | None = None,
) -> float:
    """``value`` as a ``float`` when it is a number from ``low`` to ``high``, and above 0
    when ``positive``; else a ``ValidationError`` naming ``field``. With any bound, NaN is
    refused as out of range; with none, any number is taken."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real | Decimal):
        raise ValidationError("must be a number", field=field)
    try:
        real = float(value)
    except OverflowError:  # an int past 1.8e308: no setting's range reaches it
        raise ValidationError(
            message or _range(low, high, positive=positive, finite=True), field=field
        ) from None
    if low is None and high is None and not positive:
        return real
    inside = (
        not math.isnan(real)
        and (low is None or real >= low)
        and (high is None or real <= high)
        and (not positive or real > 0)
    )
    if not inside:
        raise ValidationError(message or _range(low, high, positive=positive), field=field)
    return real


def optional_number(value: object, field: str) -> float | None:
    """``value`` as a ``float`` when it is a number (``number``), None when it is None: a
    setting whose range is checked further on (a record's, the service's)."""
    return None if value is None else number(value, field)


def flag(value: object, field: str) -> bool:
    """``value`` when it is ``True`` or ``False`` (not 1, not ``"no"``); else a
    ``ValidationError`` naming ``field``."""
    if not isinstance(value, bool):
        raise ValidationError("must be true or false", field=field)
    return value


def _range(
    low: float | None, high: float | None, *, positive: bool = False, finite: bool = False
) -> str:
    """What a value out of its bounds is told, in the words the library's checks use
    (``finite``: where there are none, that it must fit in a float)."""
    if finite and low is None and high is None and not positive:
        return "must be a finite number"
    if positive:
        return "must be positive" if high is None else f"must be in (0, {_shown(high)}]"
    if low is not None and high is not None:
        return f"must be between {_shown(low)} and {_shown(high)}"
    if low is not None:
        return f"must be at least {_shown(low)}"
    assert high is not None  # only a value with a bound is ever out of range
    return f"must be at most {_shown(high)}"


def _shown(bound: float) -> str:
    """A bound as a message writes it: 0, not 0.0."""
    return str(int(bound)) if float(bound).is_integer() else str(bound)


__all__ = ["flag", "number", "optional_number", "whole"]
