"""chatmem against each baseline of the same run: one definition of every comparison, so
the console tables of ``locomo_retrieval.py`` and the Markdown of ``to_markdown.py`` say the
same thing in the same direction.

Each figure reads "higher is better for chatmem": recall as a difference and a ratio
(chatmem / baseline), times as "x faster" (baseline / chatmem), throughput as "x faster"
(chatmem / baseline).
"""

from __future__ import annotations

from typing import Any

#: (column, key, how): "diff" = ours - theirs; "more" = ours / theirs; "less" = theirs / ours.
COMPARISONS: list[tuple[str, str, str]] = [
    ("R@10 difference", "recall@10", "diff"),
    ("R@10 ratio", "recall@10", "more"),
    ("search p50 (x faster)", "search_p50_ms", "less"),
    ("10k p50 (x faster)", "search_p50_ms_10k", "less"),
    ("10k p95 (x faster)", "search_p95_ms_10k", "less"),
    ("add p50 (x faster)", "add_p50_ms", "less"),
    ("ingest (x faster)", "ingest_per_s", "more"),
]


def compare(ours: dict[str, Any], theirs: dict[str, Any], how: str, key: str) -> float | None:
    """One comparison of two systems' results; None where either lacks the figure."""
    a, b = ours.get(key), theirs.get(key)
    if a is None or b is None:
        return None
    if how == "diff":
        return float(a - b)
    numerator, denominator = (a, b) if how == "more" else (b, a)
    return None if denominator == 0 else float(numerator / denominator)


def against(ours: dict[str, Any], theirs: dict[str, Any]) -> list[float | None]:
    """Every comparison of :data:`COMPARISONS`, in its order."""
    return [compare(ours, theirs, how, key) for _, key, how in COMPARISONS]


def columns(systems: dict[str, dict[str, Any]]) -> list[str]:
    """The comparisons that at least one system of the run has the figures for."""
    return [
        column for column, key, _ in COMPARISONS if sum(key in s for s in systems.values()) >= 2
    ]


def rows(systems: dict[str, dict[str, Any]], ours: str) -> tuple[list[str], list[list[Any]]]:
    """The header and one row a baseline: every system whose name does not start with
    ``chatmem`` (the variants of one run are not baselines of each other)."""
    keep = columns(systems)
    table: list[list[Any]] = []
    for name, theirs in systems.items():
        if name.startswith("chatmem"):
            continue
        values = dict(
            zip([c for c, _, _ in COMPARISONS], against(systems[ours], theirs), strict=True)
        )
        table.append([name] + [values[column] for column in keep])
    return ["baseline", *keep], table
