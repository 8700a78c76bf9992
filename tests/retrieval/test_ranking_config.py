"""A ranking setting that is not what it must be is refused with a ``ValidationError``
naming it (``ranking.<setting>``), never a ``TypeError`` from a comparison deep in the
checks, and never taken: a bool is not a share or a count, a string is not a number."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from chatmem import RankingConfig, ValidationError

FRACTIONS = [
    "keyword_cosine",
    "speaker_bonus",
    "name_free_share",
    "time_bonus",
    "question_penalty",
    "late_weight",
    "present_bonus",
]


@pytest.mark.parametrize("name", FRACTIONS)
@pytest.mark.parametrize("value", ["0.1", None, True, float("nan"), -0.01, 1.5, [0.1]])
def test_a_share_or_bonus_that_is_not_a_number_from_0_to_1_is_refused(
    name: str, value: Any
) -> None:
    with pytest.raises(ValidationError) as raised:
        RankingConfig(**{name: value})
    assert raised.value.field == f"ranking.{name}"


@pytest.mark.parametrize("name", FRACTIONS)
@pytest.mark.parametrize("value", [0, 0.0, 1, 0.35])
def test_every_number_from_0_to_1_is_taken(name: str, value: float) -> None:
    settings: dict[str, Any] = {name: value}
    assert getattr(RankingConfig(**settings), name) == value


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"vector_weight": "0.6", "keyword_weight": 0.4}, "ranking.vector_weight"),
        ({"vector_weight": 1.2, "keyword_weight": -0.2}, "ranking.vector_weight"),
        ({"vector_weight": 0.5, "keyword_weight": 0.4}, "ranking"),  # they must sum to 1
        ({"candidates": 2.5}, "ranking.candidates"),
        ({"candidates": "50"}, "ranking.candidates"),
        ({"candidates": True}, "ranking.candidates"),
        ({"candidates": 0}, "ranking.candidates"),
        ({"keyword_floor_hits": -1}, "ranking.keyword_floor_hits"),
        ({"keyword_floor_hits": 8.5}, "ranking.keyword_floor_hits"),
        ({"keyword_floor": "0.001"}, "ranking.keyword_floor"),
        ({"keyword_floor": float("nan")}, "ranking.keyword_floor"),
        ({"keyword_floor": -1e-3}, "ranking.keyword_floor"),
        ({"repeats_last": "no"}, "ranking.repeats_last"),
        ({"repeats_last": 1}, "ranking.repeats_last"),
        ({"latest_word": "yes"}, "ranking.latest_word"),
        ({"latest_word": 0}, "ranking.latest_word"),
    ],
)
def test_the_other_settings_are_refused_naming_them(settings: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        RankingConfig(**settings)
    assert raised.value.field == field


def test_numpy_numbers_are_numbers() -> None:
    config = RankingConfig(candidates=np.int64(20), present_bonus=np.float32(0.25))
    assert config.candidates == 20 and config.present_bonus == pytest.approx(0.25)


def test_the_defaults_and_a_keyword_floor_above_1_are_taken() -> None:
    assert RankingConfig() == RankingConfig(keyword_floor=1e-3)
    assert RankingConfig(keyword_floor=2, candidates=1, keyword_floor_hits=0).keyword_floor == 2


def test_a_count_written_with_a_point_is_kept_as_a_whole_number() -> None:
    """50.0 from a config file is 50, an ``int``: it reaches SQL's LIMIT and slices."""
    config = RankingConfig(candidates=50.0, keyword_floor_hits=8.0)  # type: ignore[arg-type]
    assert (config.candidates, config.keyword_floor_hits) == (50, 8)
    assert type(config.candidates) is int and type(config.keyword_floor_hits) is int
