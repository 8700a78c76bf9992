"""Property: on every backend, any sequence of appends and reads behaves like a Python list
that refuses turn ids going backwards."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from chatmem.errors import ValidationError
from chatmem.messages import Message, check_turn_order, last_turn_id
from chatmem.sessions import SessionStore
from tests.sessions.helpers import message, random_key

turns = st.one_of(st.none(), st.integers(min_value=0, max_value=6))
indexes = st.one_of(st.none(), st.integers(min_value=-9, max_value=9))
appends = st.tuples(st.just("append"), st.lists(turns, max_size=4))
reads = st.tuples(st.just("read"), st.tuples(st.integers(min_value=-9, max_value=9), indexes))
operations = st.lists(st.one_of(appends, reads), min_size=1, max_size=12)


def _expected_append(model: list[Message], batch: list[Message]) -> bool:
    """Whether the list model takes ``batch`` (and takes it, when it does)."""
    try:
        check_turn_order(last_turn_id(model), batch)
    except ValidationError:
        return False
    model.extend(batch)
    return True


@settings(max_examples=60, deadline=None)
@given(script=operations)
def test_appends_and_reads_match_a_list(store: SessionStore, script: list[Any]) -> None:
    key = random_key()  # a fresh session per example: the store lives for the whole module
    model: list[Message] = []
    for step, (operation, argument) in enumerate(script):
        if operation == "append":
            batch = [message(f"{step}.{i}", turn) for i, turn in enumerate(argument)]
            if _expected_append(model, batch):
                assert store.append(key, batch) == len(model)
            else:
                try:
                    store.append(key, batch)
                except ValidationError:
                    pass
                else:
                    raise AssertionError("the store took a batch whose turns go back")
        else:
            start, stop = argument
            assert store.read(key, start, stop) == model[start:stop]
        assert store.length(key) == len(model)
    assert store.read(key) == model
