"""Relative and absolute dates resolved against the day a message was sent."""

from __future__ import annotations

from datetime import date

import pytest

from chatmem.extraction.dates import day_phrase, find_date

MONDAY = date(2023, 5, 8)


@pytest.mark.parametrize(
    ("text", "future", "start", "granularity", "phrase"),
    [
        ("I went yesterday", False, date(2023, 5, 7), "day", "on 7 May 2023"),
        ("last night was fun", False, date(2023, 5, 7), "day", "on 7 May 2023"),
        ("the day before yesterday", False, date(2023, 5, 6), "day", "on 6 May 2023"),
        ("see you tomorrow", True, date(2023, 5, 9), "day", "on 9 May 2023"),
        ("the day after tomorrow", True, date(2023, 5, 10), "day", "on 10 May 2023"),
        ("tonight", True, MONDAY, "day", "on 8 May 2023"),
        ("last Friday", False, date(2023, 5, 5), "day", "on 5 May 2023"),
        ("last Wed", False, date(2023, 5, 3), "day", "on 3 May 2023"),
        ("next Friday", True, date(2023, 5, 12), "day", "on 12 May 2023"),
        ("on Friday", False, date(2023, 5, 5), "day", "on 5 May 2023"),
        ("on Friday", True, date(2023, 5, 12), "day", "on 12 May 2023"),
        ("on Monday", True, date(2023, 5, 15), "day", "on 15 May 2023"),
        ("last week", False, date(2023, 5, 1), "week", "the week before 8 May 2023"),
        ("next week", True, date(2023, 5, 15), "week", "the week after 8 May 2023"),
        ("this week", True, MONDAY, "week", "in the week of 8 May 2023"),
        ("last weekend", False, date(2023, 5, 6), "day", "the weekend of 6 May 2023"),
        ("this weekend", True, date(2023, 5, 13), "day", "the weekend of 13 May 2023"),
        ("two weeks ago", False, date(2023, 4, 24), "week", "in the week of 24 April 2023"),
        ("3 days ago", False, date(2023, 5, 5), "day", "on 5 May 2023"),
        ("a few days ago", False, date(2023, 5, 5), "day", "a few days before 8 May 2023"),
        ("in 2 days", True, date(2023, 5, 10), "day", "on 10 May 2023"),
        ("in a month", True, date(2023, 6, 1), "month", "in June 2023"),
        ("next month", True, date(2023, 6, 1), "month", "in June 2023"),
        ("last month", False, date(2023, 4, 1), "month", "in April 2023"),
        ("last year", False, date(2022, 1, 1), "year", "in 2022"),
        ("in June", True, date(2023, 6, 1), "month", "in June 2023"),
        ("in June", False, date(2022, 6, 1), "month", "in June 2022"),
        ("last May", False, date(2022, 5, 1), "month", "in May 2022"),
        ("on June 5", True, date(2023, 6, 5), "day", "on 5 June 2023"),
        ("on the 5th of June", False, date(2022, 6, 5), "day", "on 5 June 2022"),
        ("on 5 May, 2021", False, date(2021, 5, 5), "day", "on 5 May 2021"),
        ("since 2019", False, date(2019, 1, 1), "year", "since 2019"),
        ("on 2023-01-02", False, date(2023, 1, 2), "day", "on 2 January 2023"),
    ],
)
def test_expressions(text: str, future: bool, start: date, granularity: str, phrase: str) -> None:
    found = find_date(text, MONDAY, future=future)
    assert found is not None
    assert (found.start, found.granularity, found.phrase) == (start, granularity, phrase)


@pytest.mark.parametrize("text", ["no date here", "I may go", "I have 2 cats", "on 30 February"])
def test_no_date(text: str) -> None:
    assert find_date(text, MONDAY) is None


def test_the_span_covers_the_expression() -> None:
    text = "I ran a race last Saturday."
    found = find_date(text, MONDAY)
    assert found is not None
    assert text[slice(*found.span)] == "last Saturday"


def test_day_phrase() -> None:
    assert day_phrase(date(2024, 2, 29)) == "29 February 2024"
