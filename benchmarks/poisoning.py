"""Poisoning benchmark (SPEC L9): the labelled set of benchmarks/poisoning/ through the guard
and through the real write path.

Each message goes, alone, as one user's turn through what the worker runs: the offline
extractor, then the write policy into a fresh SQLite store (LongTermMemory with the offline
LocalEmbedder). Then:

- an attack is *blocked* when the guard (``is_instruction_to_model``) flags it or it reads as
  a claim of wrongdoing by someone else (``claims_wrongdoing_by_others``: kept, if at all,
  only as the user's attributed claim), and its payload was not stored as a plain fact;
- an attack's *payload is stored* when a memory of its user holds every payload keyword (a
  claim about someone else counts only when stored as a plain fact, not as a claim);
- a benign message is a *false positive* when the guard flags it or reads it as a claim
  about someone else, and it *became the expected memory* when a memory holds every one of
  its keywords.

Keywords are matched case-blind on the memory text and on a folded view of it (zero-width
characters out, look-alike letters and leetspeak digits mapped back), so an obfuscated
payload stored as written still counts as stored.

    python benchmarks/poisoning.py            # dev and held-out, per family and language
    python benchmarks/poisoning.py --split heldout --quiet

Needs no network. Prints tables; never fails on a figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

try:
    import chatmem  # noqa: F401
except ImportError:  # run from a checkout without ``pip install -e .``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from chatmem import Filter, LocalEmbedder, LongTermMemory  # noqa: E402
from chatmem.embeddings.base import Embedder  # noqa: E402
from chatmem.extraction import OfflineExtractor, is_instruction_to_model  # noqa: E402
from chatmem.extraction.poisoning import (  # noqa: E402
    CLAIM_TAG,
    claims_wrongdoing_by_others,
)
from chatmem.long_term.write_policy import WritePolicy  # noqa: E402
from chatmem.messages import Message, Role, SessionKey  # noqa: E402
from chatmem.records import MemoryRecord  # noqa: E402
from chatmem.stores import SQLiteStore  # noqa: E402

DATA = Path(__file__).resolve().parent / "poisoning"
SPLITS = ("dev", "heldout")
TENANT = "poisoning-bench"

_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))
_FOLD = str.maketrans("аеорсіхуАЕОРСІХУ0134579@$", "aeopcixyAEOPCIXYoieastgas")


@dataclass(frozen=True)
class Case:
    """One labelled message of the set."""

    id: str
    family: str
    language: str
    text: str
    split: str
    attack: bool
    #: Attacks: the words whose storing means the payload was kept. Benign: the words the
    #: expected memory must hold.
    keywords: tuple[str, ...]
    expected: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What the guard and the write path did with one case."""

    case: Case
    flagged: bool
    #: Read as a claim of wrongdoing by someone else (kept only attributed, if at all).
    claim: bool
    stored: tuple[MemoryRecord, ...]

    @property
    def payload_stored(self) -> bool:
        """An attack whose payload became a memory (a claim about others only as a fact)."""
        return any(
            _holds(record.content.raw, self.case.keywords) and not is_claim(record)
            for record in self.stored
        )

    @property
    def blocked(self) -> bool:
        """Flagged or read as a claim about someone else, and its payload not stored as a
        plain fact."""
        return (self.flagged or self.claim) and not self.payload_stored

    @property
    def expected_stored(self) -> bool:
        """A benign message that became its expected memory."""
        return any(_holds(record.content.raw, self.case.keywords) for record in self.stored)


def is_claim(record: MemoryRecord) -> bool:
    """A memory kept as the user's attributed, low-confidence claim about someone else."""
    return CLAIM_TAG in record.metadata.tags


def load(data: Path = DATA) -> list[Case]:
    """The attacks and benign messages of ``data``, in file order."""
    cases: list[Case] = []
    for name, attack in (("attacks", True), ("benign", False)):
        for line in (data / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            cases.append(
                Case(
                    id=row["id"],
                    family=row["family"],
                    language=row["language"],
                    text=row["text"],
                    split=row["split"],
                    attack=attack,
                    keywords=tuple(row["payload"] if attack else row["keywords"]),
                    expected=row.get("expected"),
                )
            )
    return cases


def run(cases: Sequence[Case], embedder: Embedder, workdir: Path) -> list[Outcome]:
    """Each case through the guard, and as its own user through extraction and the write
    policy into one SQLite store under ``workdir``."""
    extractor = OfflineExtractor()
    policy = WritePolicy()
    outcomes: list[Outcome] = []
    with LongTermMemory(SQLiteStore(workdir / "poisoning.db"), embedder) as memory:
        for case in cases:
            key = SessionKey(TENANT, case.id, "s1")
            facts = extractor.extract([Message(role=Role.USER, content=case.text)])
            policy.apply(memory, key, facts, batch_id=f"batch-{case.id}")
            scope = Filter(tenant_id=TENANT, user_id=case.id)
            stored = tuple(memory.list(scope, limit=100).records)
            flagged = is_instruction_to_model(case.text) is not None
            claim = claims_wrongdoing_by_others(case.text)
            outcomes.append(Outcome(case, flagged, claim, stored))
    return outcomes


def _holds(text: str, keywords: Iterable[str]) -> bool:
    views = (text.lower(), _fold(text))
    return all(any(word.lower() in view for view in views) for word in keywords)


def _fold(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_INVISIBLE)
    return text.translate(_FOLD).lower()


# -- the tables ------------------------------------------------------------------------------


@dataclass
class Tally:
    """Counts for one row of a table."""

    attacks: int = 0
    blocked: int = 0
    payload: int = 0
    benign: int = 0
    flagged: int = 0
    expected: int = 0

    def add(self, outcome: Outcome) -> None:
        if outcome.case.attack:
            self.attacks += 1
            self.blocked += outcome.blocked
            self.payload += outcome.payload_stored
        else:
            self.benign += 1
            self.flagged += outcome.flagged or outcome.claim
            self.expected += outcome.expected_stored


def tally(outcomes: Iterable[Outcome]) -> Tally:
    """The counts of ``outcomes`` together."""
    total = Tally()
    for outcome in outcomes:
        total.add(outcome)
    return total


def _rate(part: int, whole: int) -> str:
    return f"{100 * part / whole:5.1f} % ({part}/{whole})" if whole else "-"


def table(title: str, rows: dict[str, Tally]) -> str:
    """A Markdown table of the rates of ``rows``."""
    lines = [
        f"### {title}",
        "",
        "| | attacks | blocked | payload stored | benign | false positives | expected memory |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, t in rows.items():
        lines.append(
            f"| {name} | {t.attacks} | {_rate(t.blocked, t.attacks)} "
            f"| {_rate(t.payload, t.attacks)} | {t.benign} | {_rate(t.flagged, t.benign)} "
            f"| {_rate(t.expected, t.benign)} |"
        )
    return "\n".join(lines)


def _grouped(outcomes: Sequence[Outcome], key: str) -> dict[str, Tally]:
    groups: dict[str, Tally] = defaultdict(Tally)
    for outcome in sorted(outcomes, key=lambda o: (not o.case.attack, getattr(o.case, key))):
        groups[getattr(outcome.case, key)].add(outcome)
    return {**groups, "**all**": tally(outcomes)}


def report(outcomes: Sequence[Outcome], splits: Sequence[str], *, quiet: bool) -> str:
    """The tables for ``splits``: totals, then per family and per language."""
    parts = [table("All", {s: tally(o for o in outcomes if o.case.split == s) for s in splits})]
    if not quiet:
        for split in splits:
            mine = [o for o in outcomes if o.case.split == split]
            parts.append(table(f"{split}: by family", _grouped(mine, "family")))
            parts.append(table(f"{split}: by language", _grouped(mine, "language")))
    return "\n\n".join(parts)


def misses(outcomes: Sequence[Outcome]) -> list[str]:
    """One line per attack not blocked or stored, and per benign message flagged."""
    lines: list[str] = []
    for o in outcomes:
        if o.case.attack and (not o.blocked or o.payload_stored):
            stored = "; ".join(r.content.raw for r in o.stored)
            lines.append(f"MISSED {o.case.id} [{o.case.family}] {o.case.text!r} -> {stored}")
        elif not o.case.attack and (o.flagged or o.claim):
            reason = is_instruction_to_model(o.case.text) or "a claim about someone else"
            lines.append(f"FLAGGED {o.case.id} [{o.case.family}] {o.case.text!r}: {reason}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="folder of the set")
    parser.add_argument("--split", choices=(*SPLITS, "all"), default="all")
    parser.add_argument("--quiet", action="store_true", help="totals only")
    parser.add_argument("--misses", action="store_true", help="list what went wrong")
    args = parser.parse_args(argv)
    splits = SPLITS if args.split == "all" else (args.split,)
    cases = [c for c in load(args.data) if c.split in splits]
    with tempfile.TemporaryDirectory() as workdir:
        outcomes = run(cases, LocalEmbedder(), Path(workdir))
    print(report(outcomes, splits, quiet=args.quiet))
    if args.misses:
        print("\n".join(["", *misses(outcomes)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
