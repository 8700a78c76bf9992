"""Render the JSON of ``locomo_retrieval.py --json`` as the Markdown tables of
docs/benchmarks.md, so the published figures are exactly the measured ones.

    python benchmarks/to_markdown.py bench-results/locomo.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import compare

CATEGORIES = {
    "1": "multi-hop",
    "2": "temporal",
    "3": "open-domain",
    "4": "single-hop",
    "5": "adversarial",
}


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = [_row(header), _row(["---"] * len(header))]
    lines += [_row(r) for r in rows]
    return "\n".join(lines)


def budget_of(systems: dict[str, dict[str, Any]]) -> int | None:
    """The token budget recall was measured within (``--budget-tokens``), if any."""
    return next((s["budget_tokens"] for s in systems.values() if s.get("budget_tokens")), None)


def recall_table(systems: dict[str, dict[str, Any]]) -> str:
    budget = budget_of(systems)
    within = [f"recall@{budget}tok"] if budget else []
    header = ["system", "R@5", "R@10", "R@20"] + [f"R@{budget}tok" for _ in within]
    header += [f"R@10 {c} {name}" for c, name in CATEGORIES.items()]
    rows = []
    for name, s in systems.items():
        by_category = s["recall@10_by_category"]
        rows.append(
            [name, f"{s['recall@5']:.3f}", f"**{s['recall@10']:.3f}**", f"{s['recall@20']:.3f}"]
            + [_num(s.get(key), 3) for key in within]
            + [f"{by_category[c]:.3f}" for c in CATEGORIES]
        )
    return _table(header, rows)


def _num(value: float | None, digits: int) -> str:
    """``value`` with ``digits`` decimals; "-" where a run did not measure it."""
    return "-" if value is None else f"{value:.{digits}f}"


def half_table(systems: dict[str, dict[str, Any]], half: str, k: str = "10") -> str:
    """recall and all@ at ``k`` (10, or a token budget such as "1000tok") of one half of the
    conversations, overall (categories 1-4) and by category, each system a row (``--halves``
    of locomo_retrieval.py); within a budget, with the mean memories and tokens injected and
    the share of questions where the budget, not k, cut the results."""
    main = [c for c in CATEGORIES if c != "5"]
    recall, every = f"recall@{k}", f"all@{k}"
    header = ["system", f"R@{k}", every]
    header += [f"R@{k} {CATEGORIES[c]}" for c in main] + [f"{every} {CATEGORIES[c]}" for c in main]
    cost = ["injected_memories", "injected_tokens", "budget_cut"] if k != "10" else []
    header += ["memories", "tokens", "budget cut"][: len(cost)]
    rows = []
    for name, s in systems.items():
        h = s.get("by_half", {}).get(half)
        if h is None or recall not in h:
            continue
        rows.append(
            [name, f"**{h[recall]:.3f}**", f"{h[every]:.3f}"]
            + [f"{h[f'{recall}_by_category'][c]:.3f}" for c in main]
            + [f"{h[f'{every}_by_category'][c]:.3f}" for c in main]
            + [_num(h[key], 1 if key != "budget_cut" else 2) for key in cost]
        )
    return _table(header, rows)


def speed_table(systems: dict[str, dict[str, Any]]) -> str:
    header = [
        "system",
        "add p50 ms",
        "ingest turns/s",
        "search p50 ms",
        "search p95 ms",
        "10k p50 ms",
        "10k p95 ms",
    ]
    rows = [
        [
            name,
            _num(s["add_p50_ms"], 2),
            _num(s["ingest_per_s"], 0),
            _num(s["search_p50_ms"], 2),
            _num(s["search_p95_ms"], 2),
            _num(s["search_p50_ms_10k"], 2),
            _num(s["search_p95_ms_10k"], 2),
        ]
        for name, s in systems.items()
    ]
    return _table(header, rows)


def ratio_table(systems: dict[str, dict[str, Any]]) -> str:
    header, rows = compare.rows(systems, "chatmem")
    cells = [
        [row[0]]
        + [_signed(column, value) for column, value in zip(header[1:], row[1:], strict=True)]
        for row in rows
    ]
    return _table(["chatmem vs", *header[1:]], cells)


def _signed(column: str, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:+.3f}" if "difference" in column else f"{value:.2f}"


def main() -> None:
    data = json.loads(Path(sys.argv[1]).read_text())
    systems = data["systems"]
    budget = budget_of(systems)
    for half in data.get("meta", {}).get("halves", {}):
        print(f"### Conversations {half}: recall@10 and all@10, categories 1-4\n")
        print(half_table(systems, half) + "\n")
        if budget:
            print(f"### Conversations {half}: within a {budget:,}-token injection\n")
            print(half_table(systems, half, f"{budget}tok") + "\n")
    print("### Recall of evidence turns (categories 1-4 together; by category at k=10)\n")
    print(recall_table(systems))
    print("\n### Speed\n")
    print(speed_table(systems))
    if "chatmem" in systems:  # the ratios need the timings of a run with one chatmem row
        print("\n### chatmem against each baseline, same run\n")
        print(ratio_table(systems))
        alone = systems["chatmem"].get("info", {}).get("embedder_alone_per_s")
        if alone:
            share = systems["chatmem"]["ingest_per_s"] / alone
            print(
                f"\nchatmem ingest: {systems['chatmem']['ingest_per_s']:.0f} turns/s; the "
                f"embedder alone on the same texts and calls: {alone:.0f} texts/s "
                f"({share:.0%})."
            )
    meta = data.get("meta", {})
    print(f"\nRun {meta.get('date')} on {meta.get('machine')}: `{meta.get('command')}`")


if __name__ == "__main__":
    main()
