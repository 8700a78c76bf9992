"""Dates said in chat ("yesterday", "next week", "last Friday", "on June 5") as calendar dates.

A fact kept for months must not say "yesterday": :func:`find_date` resolves the first date
expression of a text against the day the message was sent, and gives a phrase to put in its
place ("on 7 May 2023", "the week before 8 May 2023"). Pure functions; no locale, English only.
"""

from __future__ import annotations

import calendar
import re
from datetime import date, timedelta
from typing import Literal, NamedTuple

Granularity = Literal["day", "week", "month", "year"]

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = tuple(name.lower() for name in calendar.month_name[1:])
_MONTH_ABBREVIATIONS = {name[:3]: index for index, name in enumerate(_MONTHS, start=1)}
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "a couple of": 2, "a couple": 2, "couple of": 2, "a few": 3, "few": 3,
}  # fmt: skip

_WEEKDAY = "|".join(_WEEKDAYS)
_WEEKDAY_ABBREVIATION = r"mon|tues?|wed|thu(?:rs?)?|fri|sat|sun"  # only after last/next/this
_WEEKDAY_PREFIXES = {name[:3]: index for index, name in enumerate(_WEEKDAYS)}
_MONTH = "|".join([*_MONTHS, *(m for m in _MONTH_ABBREVIATIONS if m != "may")]) + r"|sept"
_COUNT = r"\d{1,3}|" + "|".join(sorted(_NUMBERS, key=len, reverse=True))
_UNIT = r"day|week|month|year"
_ORDINAL = r"(?:st|nd|rd|th)?"

_EXPRESSIONS = "|".join(
    rf"(?P<{name}>{pattern})"
    for name, pattern in (
        ("iso", r"\b\d{4}-\d{2}-\d{2}\b"),
        ("before_yesterday", r"\bthe\s+day\s+before\s+yesterday\b"),
        ("after_tomorrow", r"\bthe\s+day\s+after\s+tomorrow\b"),
        ("yesterday", r"\byesterday\b|\blast\s+night\b"),
        ("today", r"\btoday\b|\btonight\b|\bthis\s+(?:morning|afternoon|evening)\b"),
        ("tomorrow", r"\btomorrow\b"),
        ("ago", rf"\b(?P<ago_n>{_COUNT})\s+(?P<ago_unit>{_UNIT})s?\s+ago\b"),
        ("within", rf"\bin\s+(?P<in_n>{_COUNT})\s+(?P<in_unit>{_UNIT})s?\b"),
        (
            "day_month",
            rf"\b(?:on\s+)?(?:the\s+)?(?P<dm_day>\d{{1,2}}){_ORDINAL}\s+"
            rf"(?:of\s+)?(?P<dm_month>{_MONTH})\b(?:,?\s+(?P<dm_year>\d{{4}}))?",
        ),
        (
            "month_day",
            rf"\b(?:on\s+)?(?P<md_month>{_MONTH})\.?\s+(?P<md_day>\d{{1,2}})"
            rf"{_ORDINAL}\b(?:,?\s+(?P<md_year>\d{{4}}))?",
        ),
        (
            "relative",
            rf"\b(?P<rel>last|this|next|coming|past)\s+"
            rf"(?P<rel_unit>weekend|week|month|year|{_WEEKDAY}|{_WEEKDAY_ABBREVIATION}|"
            rf"{_MONTH})\b",
        ),
        ("on_weekday", rf"\b(?:on\s+)?(?P<weekday>{_WEEKDAY})\b"),
        ("in_month", rf"\bin\s+(?P<month>{_MONTH})\b(?:\s+(?P<month_year>\d{{4}}))?"),
        ("in_year", r"\b(?:in|back\s+in|since)\s+(?P<year>(?:19|20)\d{2})\b"),
    )
)
# Matched against the lowercased text (case-blind matching is slow in ``re``); the case-blind
# twin serves the rare text whose length changes when lowercased.
_EXPRESSION = re.compile(_EXPRESSIONS)
_EXPRESSION_ANY_CASE = re.compile(_EXPRESSIONS, re.IGNORECASE)


class ResolvedDate(NamedTuple):
    """A date expression found in a text, resolved against the message's day."""

    start: date
    granularity: Granularity
    #: What to write instead of the expression ("on 7 May 2023", "in June 2023").
    phrase: str
    #: Where the expression was in the text, as (start, end) offsets.
    span: tuple[int, int]


def day_phrase(day: date) -> str:
    """ "7 May 2023": unambiguous in any locale, and how LoCoMo's answers write dates."""
    return f"{day.day} {calendar.month_name[day.month]} {day.year}"


def find_date(text: str, anchor: date, *, future: bool = False) -> ResolvedDate | None:
    """The first date expression in ``text`` resolved against ``anchor`` (the message's day).

    ``future`` says which way a bare weekday or month points: a plan ("on Friday") looks
    ahead, an event looks back. An expression whose day the calendar cannot hold ("tomorrow"
    said on 9999-12-31) resolves to nothing.
    """
    lowered = text.lower()
    if len(lowered) == len(text):
        matches = _EXPRESSION.finditer(lowered)
    else:
        matches = _EXPRESSION_ANY_CASE.finditer(text)
    for match in matches:
        try:
            resolved = _resolve(match, anchor, future)
        except (OverflowError, ValueError):  # a day before 1 AD or after 9999: none at all
            continue
        if resolved is not None:
            start, granularity, phrase = resolved
            return ResolvedDate(start, granularity, phrase, match.span())
    return None


def _resolve(
    match: re.Match[str], anchor: date, future: bool
) -> tuple[date, Granularity, str] | None:
    kind = match.lastgroup
    groups = match.groupdict()
    if kind in _FIXED_OFFSETS:
        day = anchor + timedelta(days=_FIXED_OFFSETS[kind])
        return day, "day", f"on {day_phrase(day)}"
    if kind == "iso":
        return _iso(match.group())
    if kind in ("ago", "within"):
        prefix = "ago" if kind == "ago" else "in"
        count, unit = _count(groups[f"{prefix}_n"]), groups[f"{prefix}_unit"]
        start, granularity, phrase = _shifted(anchor, -count if kind == "ago" else count, unit)
        if "few" in groups[f"{prefix}_n"].lower():  # vague: say so rather than invent a day
            relation = "before" if kind == "ago" else "after"
            phrase = f"a few {unit.lower()}s {relation} {day_phrase(anchor)}"
        return start, granularity, phrase
    if kind in ("day_month", "month_day"):
        prefix = "dm" if kind == "day_month" else "md"
        return _calendar_day(
            anchor, groups[f"{prefix}_day"], groups[f"{prefix}_month"], groups[f"{prefix}_year"],
            future,
        )  # fmt: skip
    if kind == "relative":
        return _relative(anchor, groups["rel"].lower(), groups["rel_unit"].lower())
    if kind == "on_weekday":
        day = _weekday(anchor, _WEEKDAYS.index(groups["weekday"].lower()), future)
        return day, "day", f"on {day_phrase(day)}"
    if kind == "in_month":
        return _month(anchor, groups["month"], groups["month_year"], future)
    if kind == "in_year":  # already absolute: the words stay as they were
        return date(int(groups["year"]), 1, 1), "year", match.group()
    return None


_FIXED_OFFSETS = {
    "before_yesterday": -2,
    "yesterday": -1,
    "today": 0,
    "tomorrow": 1,
    "after_tomorrow": 2,
}


def _count(word: str) -> int:
    word = " ".join(word.lower().split())
    return int(word) if word.isdigit() else _NUMBERS[word]


def _iso(text: str) -> tuple[date, Granularity, str] | None:
    try:
        day = date.fromisoformat(text)
    except ValueError:
        return None
    return day, "day", f"on {day_phrase(day)}"


def _shifted(anchor: date, count: int, unit: str) -> tuple[date, Granularity, str]:
    unit = unit.lower()
    if unit == "day":
        day = anchor + timedelta(days=count)
        return day, "day", f"on {day_phrase(day)}"
    if unit == "week":
        day = anchor + timedelta(weeks=count)
        return day, "week", f"in the week of {day_phrase(_monday(day))}"
    if unit == "month":
        day = _add_months(anchor, count)
        return day.replace(day=1), "month", f"in {calendar.month_name[day.month]} {day.year}"
    year = anchor.year + count
    return date(year, 1, 1), "year", f"in {year}"


def _relative(anchor: date, which: str, unit: str) -> tuple[date, Granularity, str] | None:
    step = {"last": -1, "past": -1, "this": 0, "next": 1, "coming": 1}[which]
    if unit == "week":
        monday = _monday(anchor) + timedelta(weeks=step)
        if step == 0:
            return monday, "week", f"in the week of {day_phrase(monday)}"
        relation = "before" if step < 0 else "after"
        return monday, "week", f"the week {relation} {day_phrase(anchor)}"
    if unit in ("month", "year"):
        return _shifted(anchor, step, unit)
    if unit == "weekend":
        if step == 0 and anchor.weekday() >= 5:  # said during the weekend itself
            saturday = anchor - timedelta(days=anchor.weekday() - 5)
        else:
            saturday = _weekday(anchor, 5, future=step >= 0)
        return saturday, "day", f"the weekend of {day_phrase(saturday)}"
    if unit[:3] in _WEEKDAY_PREFIXES:
        day = _weekday(anchor, _WEEKDAY_PREFIXES[unit[:3]], future=step >= 0)
        return day, "day", f"on {day_phrase(day)}"
    month = _month_number(unit)
    year = anchor.year
    if step < 0 and month >= anchor.month:
        year -= 1
    elif step > 0 and month <= anchor.month:
        year += 1
    return date(year, month, 1), "month", f"in {calendar.month_name[month]} {year}"


def _calendar_day(
    anchor: date, day_text: str, month_text: str, year_text: str | None, future: bool
) -> tuple[date, Granularity, str] | None:
    month = _month_number(month_text)
    year = int(year_text) if year_text else anchor.year
    try:
        day = date(year, month, int(day_text))
        if not year_text and future and day < anchor:
            day = day.replace(year=year + 1)
        elif not year_text and not future and day > anchor:
            day = day.replace(year=year - 1)
    except ValueError:  # 30 February, or 29 February in the wrong year
        return None
    return day, "day", f"on {day_phrase(day)}"


def _month(
    anchor: date, month_text: str, year_text: str | None, future: bool
) -> tuple[date, Granularity, str]:
    month = _month_number(month_text)
    year = int(year_text) if year_text else anchor.year
    if not year_text:
        if future and month < anchor.month:
            year += 1
        elif not future and month > anchor.month:
            year -= 1
    return date(year, month, 1), "month", f"in {calendar.month_name[month]} {year}"


def _month_number(text: str) -> int:
    return _MONTH_ABBREVIATIONS[text.lower().rstrip(".")[:3]]


def _weekday(anchor: date, weekday: int, future: bool) -> date:
    """The nearest such weekday after ``anchor`` (future) or before it; never ``anchor``."""
    if future:
        return anchor + timedelta(days=(weekday - anchor.weekday() - 1) % 7 + 1)
    return anchor - timedelta(days=(anchor.weekday() - weekday - 1) % 7 + 1)


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    last = calendar.monthrange(year, month + 1)[1]
    return date(year, month + 1, min(day.day, last))


__all__ = ["Granularity", "ResolvedDate", "day_phrase", "find_date"]
