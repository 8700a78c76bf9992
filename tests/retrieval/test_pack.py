"""Packing the injected memories within a token budget (SPEC R4): the lines kept are those
the line-by-line rule keeps, and the common case (all fit) counts the message once."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from chatmem.retrieval.injection import Packed, _content, pack
from chatmem.tokens import TokenCounter, default_counter, message_tokens

COUNTER = default_counter()


class _Counting:
    """The default counter, counting its calls."""

    def __init__(self, inner: TokenCounter) -> None:
        self.inner, self.name, self.calls = inner, inner.name, 0

    def count(self, text: str) -> int:
        self.calls += 1
        return self.inner.count(text)

    def truncate(self, text: str, limit: int) -> str:
        return self.inner.truncate(text, limit)


def _line_by_line(lines: Sequence[str], budget: int) -> Packed:
    """The rule itself: each line in order, kept when the message with it still fits."""
    kept: list[int] = []
    content = ""
    for index, line in enumerate(lines):
        candidate = _content([*(lines[i] for i in kept), line], None, "User's relevant context")
        if message_tokens(COUNTER, {"role": "system", "content": candidate}) <= budget:
            kept.append(index)
            content = candidate
    return Packed(content, kept)


words = st.sampled_from(["Lisbon", "nurse", "tea", "🙂", "  ", "$2,400", "May", "x" * 40, "\n"])
memory_lines = st.lists(st.lists(words, min_size=1, max_size=12).map(" ".join), max_size=8)


@settings(max_examples=200, deadline=None)
@given(
    lines=memory_lines.map(lambda ls: [f"- [2024-05-08] {t}" for t in ls]),
    budget=st.integers(0, 120),
)
def test_packing_keeps_what_the_line_by_line_rule_keeps(lines: list[str], budget: int) -> None:
    assert pack(lines, counter=COUNTER, budget_tokens=budget) == _line_by_line(lines, budget)


def test_lines_that_all_fit_are_counted_once() -> None:
    counting = _Counting(COUNTER)
    lines = [f"- [2024-05-08] memory number {n}" for n in range(5)]
    packed = pack(lines, counter=counting, budget_tokens=500)
    assert packed.kept == [0, 1, 2, 3, 4]
    assert counting.calls == 2  # the role and the content of one message
