"""The details of a fact: figures, names and dates, normalised so that wording does not matter."""

from __future__ import annotations

import pytest

from chatmem.long_term.details import Details, agree, details_of


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("User visited the museum CHT29X", Details(figures=frozenset({"cht29x"}))),
        ("User's ref is A-113 and 29X", Details(figures=frozenset({"a113", "29x"}))),
        ("User's budget is $10,000", Details(figures=frozenset({"10000"}))),
        ("User's budget is 10000 dollars", Details(figures=frozenset({"10000"}))),
        ("User's budget is 10k USD", Details(figures=frozenset({"10000"}))),
        ("User paid €1,250.50 on Monday",
         Details(figures=frozenset({"1250.5"}), dates=frozenset({"monday"}))),
        ("User has two dogs", Details(figures=frozenset({"2"}))),
        ("User ran 10.5 km on a 5-day trip", Details(figures=frozenset({"10.5", "5"}))),
        ("User's dog is named Pixel", Details(names=frozenset({"pixel"}))),
        ("Pixel is User's dog", Details(names=frozenset({"pixel"}))),
        ("The trip with Anna's sister", Details(names=frozenset({"anna"}))),
        ("User met Inés in São Paulo", Details(names=frozenset({"inés", "são", "paulo"}))),
        ("User is 34 (as of 8 May 2023)",
         Details(figures=frozenset({"34"}), dates=frozenset({"2023-05-08"}))),
        ("User flies on May 8, 2023", Details(dates=frozenset({"2023-05-08"}))),
        ("User flies on 2023-05-08", Details(dates=frozenset({"2023-05-08"}))),
        ("User flies in March", Details(dates=frozenset({"????-03"}))),
        ("User may march on", Details()),
    ],
)  # fmt: skip
def test_details_of(text: str, expected: Details) -> None:
    assert details_of(text) == expected


def test_agree_keeps_every_kind_the_old_text_states() -> None:
    old = details_of("User visited the museum CHT77X with Anna")
    assert agree(details_of("User went to the CHT77X museum with Anna"), old)
    assert agree(details_of("User went to the CHT77X museum with Anna on 3 May 2024"), old)
    assert not agree(details_of("User visited the museum CHT29X with Anna"), old)
    assert not agree(details_of("User visited the museum with Anna"), old)
    assert not agree(details_of("User visited the museum CHT77X with Maria"), old)
    assert agree(details_of("User visited a museum CHT77X"), details_of("User visited a museum"))
