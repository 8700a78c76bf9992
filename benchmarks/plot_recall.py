"""Bar charts of LoCoMo recall by category, from the JSON of ``locomo_retrieval.py --json``
(issue 18): recall@10, and recall within the injection's token budget when the run
measured it, each system a bar, one panel per half of the conversations.

    python benchmarks/plot_recall.py docs/results/locomo-tokens-2026-11-27.json \\
        --out docs/images

writes ``locomo-recall-by-category.png`` and ``locomo-tokens-by-category.png`` there.
Needs matplotlib (benchmarks/requirements.txt); it draws with the Agg backend, no display.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CATEGORIES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop"}
#: The issue's targets, drawn as a dashed line: recall@10 >= 0.80, within 1,000 tokens >= 0.75.
TARGETS = {"recall@10": 0.80, "recall@1000tok": 0.75}


def panels(data: dict[str, Any], key: str) -> dict[str, dict[str, list[float | None]]]:
    """For each half (all conversations when the run had none), each system's ``key`` by
    category, in ``CATEGORIES`` order; systems that lack it are left out."""
    halves = list(data["meta"].get("halves") or {}) or [None]
    out: dict[str, dict[str, list[float | None]]] = {}
    for half in halves:
        rows: dict[str, list[float | None]] = {}
        for name, system in data["systems"].items():
            part = system if half is None else system.get("by_half", {}).get(half, {})
            by_category = part.get(f"{key}_by_category")
            if by_category is not None:
                rows[name] = [by_category.get(c) for c in CATEGORIES]
        out["all conversations" if half is None else f"conversations {half}"] = rows
    return out


def half_label(label: str, halves: Sequence[str]) -> str:
    """The first half is the tuning half, the others held out (docs/benchmarks.md)."""
    if len(halves) < 2:
        return label
    return f"{label} ({'tuning' if label == halves[0] else 'held out'})"


def plot(data: dict[str, Any], key: str, title: str, path: Path) -> None:
    """One PNG: a panel per half, a group of bars per category, a bar per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = panels(data, key)
    names = list(found)
    figure, axes = plt.subplots(1, len(found), figsize=(5.2 * len(found), 3.8), sharey=True)
    axes = [axes] if len(found) == 1 else list(axes)
    for ax, (label, rows) in zip(axes, found.items(), strict=True):
        width = 0.8 / max(len(rows), 1)
        for i, (name, values) in enumerate(rows.items()):
            xs = [c + (i - (len(rows) - 1) / 2) * width for c in range(len(CATEGORIES))]
            heights = [v or 0.0 for v in values]
            bars = ax.bar(xs, heights, width, label=name)
            ax.bar_label(bars, labels=[f"{h:.2f}" for h in heights], fontsize=6, padding=1)
        if key in TARGETS:
            ax.axhline(TARGETS[key], color="grey", linestyle="--", linewidth=0.8)
        ax.set_xticks(range(len(CATEGORIES)), list(CATEGORIES.values()))
        ax.set_ylim(0, 1.08)
        ax.set_title(half_label(label, names), fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("recall")
    axes[-1].legend(fontsize=8, loc="upper left")
    target = f"; dashed: the issue's overall target, {TARGETS[key]:.2f}" if key in TARGETS else ""
    figure.suptitle(f"LoCoMo, categories 1-4: {title}{target}", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, help="JSON of locomo_retrieval.py --json")
    p.add_argument("--out", type=Path, default=Path("docs/images"), help="folder of the PNGs")
    args = p.parse_args(argv)
    data = json.loads(args.results.read_text())
    plot(data, "recall@10", "evidence recall@10", args.out / "locomo-recall-by-category.png")
    budget = data["meta"].get("budget_tokens")
    if budget:
        title = f"evidence recall within a {budget:,}-token injection"
        plot(data, f"recall@{budget}tok", title, args.out / "locomo-tokens-by-category.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
