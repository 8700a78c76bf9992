"""The details of a fact: the figures, names and dates that make it this fact and no other.

Two wordings of one fact say the same details; two facts that read alike but name another
museum code, amount, person or day do not ("User visited the museum CHT29X" is not "… CHT77X",
though their cosine is 0.95). The write policy (SPEC L4) merges a restatement only when its
details agree (:func:`agree`).

:func:`details_of` reads them from plain text, normalised so that wording does not matter:

- **figures**: numbers and codes, one kind (a code and a number are both identifiers).
  Currency signs, thousands separators, units and ordinal endings go ("$10,000", "10000",
  "10k" and "10,000 dollars" are all ``10000``); number words up to twenty count too.
  A code is a word mixing letters and digits (``cht29x``, ``a-113``).
- **names**: capitalised words, lower-cased and without a possessive ("Anna's" → ``anna``),
  except function words that open a sentence and ``User``.
- **dates**: ISO and slashed dates, a month with a day or a year, a capitalised month alone,
  and weekdays ("8 May 2023", "May 8, 2023" and "2023-05-08" are all ``2023-05-08``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation


def _word_list(words: str) -> list[str]:
    return words.split()


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ORDINAL = r"(?:st|nd|rd|th)?"

_ISO_DATE = re.compile(r"(?<![\w-])(\d{4})-(\d{1,2})-(\d{1,2})(?![\w-])")
_SLASHED_DATE = re.compile(r"(?<![\w/])(\d{1,2})/(\d{1,2})(?:/(\d{2,4}))?(?![\w/])")
# "8 May 2023", "8th of May", "May 8, 2023", "May 2023", "May".
_MONTH_DATE = re.compile(
    rf"(?<![\w-])(?:(?P<day>\d{{1,2}}){_ORDINAL}\s+(?:of\s+)?)?(?P<month>{_MONTH})\.?"
    rf"(?:\s+(?P<day2>\d{{1,2}}){_ORDINAL}(?!\d))?(?:,?\s+(?P<year>\d{{4}}))?(?![\w-])",
    re.IGNORECASE,
)
_WEEKDAY = re.compile(rf"\b(?P<weekday>{'|'.join(_WEEKDAYS)})s?\b", re.IGNORECASE)

# A number with what may stick to it: a currency sign, separators, a unit or an ending.
_NUMBER = re.compile(
    r"(?<![\w.,-])[$€£¥]?\s?(?P<number>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
    r"(?P<suffix>[A-Za-z%]*)(?P<scale>\s+(?:thousand|million|billion))?(?![\w])"
)
_WORD = re.compile(r"[^\W_](?:[\w'-]*[^\W_])?")
_SCALES = {
    "k": 1_000,
    "thousand": 1_000,
    "m": 1_000_000,
    "mn": 1_000_000,
    "million": 1_000_000,
    "bn": 1_000_000_000,
    "billion": 1_000_000_000,
}
# Endings that leave a number a number: ordinals, decades, units, times of day.
_UNITS = _word_set(
    "st nd rd th s pm am h hr hrs min mins sec secs km kms mi kg kgs g lb lbs oz cm mm ml l "
    "gb mb tb kb yo yr yrs % usd eur gbp"
)
_NUMBER_WORDS = {
    word: value
    for value, word in enumerate(
        _word_list(
            "zero one two three four five six seven eight nine ten eleven twelve thirteen "
            "fourteen fifteen sixteen seventeen eighteen nineteen twenty"
        )
    )
}
# Capitalised words that name nobody: who the facts are about, sentence openers, titles,
# currency codes.
_NOT_NAMES = _word_set(
    "user i i'm i've i'd i'll a an the this that these those it its he she they we you his "
    "her their our my your there here in on at to for of from with by and but or so if when "
    "while after before since as what which who where why how also then now just mr mrs ms dr "
    "prof st usd eur gbp jpy chf cad aud"
)


@dataclass(frozen=True)
class Details:
    """What a text says precisely, by kind (see the module docstring)."""

    figures: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()
    dates: frozenset[str] = frozenset()

    def kinds(self) -> tuple[frozenset[str], ...]:
        """The details of each kind, in a fixed order."""
        return self.figures, self.names, self.dates


def details_of(text: str) -> Details:
    """The figures, names and dates that ``text`` states, normalised."""
    text = text.replace("’", "'")
    dates, text = _dates(text)
    figures, text = _numbers(text)
    names: set[str] = set()
    for match in _WORD.finditer(text):
        word = match.group()
        lower = word.lower()
        if any(c.isdigit() for c in word):
            figures.add(lower.replace("-", ""))
        elif lower in _NUMBER_WORDS:
            figures.add(str(_NUMBER_WORDS[lower]))
        elif word[0].isupper():
            name = lower.removesuffix("'s").rstrip("'")
            if name not in _NOT_NAMES:
                names.add(name)
    return Details(frozenset(figures), frozenset(names), frozenset(dates))


def agree(new: Details, old: Details) -> bool:
    """Whether a text with the details ``new`` can restate one with ``old``: every kind of
    detail ``old`` states, ``new`` states alike. ``new`` may add a kind ``old`` lacks (a
    refinement), but never drops or changes one, so merging loses nothing."""
    return all(
        not theirs or ours == theirs for ours, theirs in zip(new.kinds(), old.kinds(), strict=True)
    )


def _dates(text: str) -> tuple[set[str], str]:
    """The dates of ``text``, and the text with them blanked out."""
    found: set[str] = set()

    def iso(match: re.Match[str]) -> str:
        year, month, day = match.groups()
        found.add(f"{year}-{int(month):02d}-{int(day):02d}")
        return " "

    def slashed(match: re.Match[str]) -> str:
        found.add("/".join(str(int(part)) for part in match.groups() if part))
        return " "

    def month_date(match: re.Match[str]) -> str:
        said = match.group("month")
        day = match.group("day") or match.group("day2")
        year = match.group("year")
        if not (day or year or said[0].isupper()):
            return match.group()  # "may", "march" as verbs
        month = _MONTHS[said.lower()]
        said_day = f"-{int(day):02d}" if day else ""
        found.add(f"{year or '????'}-{month:02d}{said_day}")
        return " "

    def weekday(match: re.Match[str]) -> str:
        found.add(match.group("weekday").lower())
        return " "

    text = _ISO_DATE.sub(iso, text)
    text = _SLASHED_DATE.sub(slashed, text)
    text = _MONTH_DATE.sub(month_date, text)
    text = _WEEKDAY.sub(weekday, text)
    return found, text


def _numbers(text: str) -> tuple[set[str], str]:
    """The numbers of ``text`` as plain decimals, and the text with them blanked out. A
    number with an ending that is no unit ("29X") is left for the codes."""
    found: set[str] = set()

    def number(match: re.Match[str]) -> str:
        suffix = match.group("suffix").lower()
        scale_word = (match.group("scale") or "").strip().lower()
        if suffix and suffix not in _UNITS and suffix not in _SCALES:
            return match.group()
        try:
            value = Decimal(match.group("number").replace(",", ""))
        except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
            return match.group()
        value *= _SCALES.get(suffix, 1) * _SCALES.get(scale_word, 1)
        found.add(format(value.normalize(), "f"))
        return " "

    return found, _NUMBER.sub(number, text)


__all__ = ["Details", "agree", "details_of"]
