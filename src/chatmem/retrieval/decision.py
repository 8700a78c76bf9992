"""The decision (SPEC R1): whether a request is worth a search of long-term memory at all.

Greetings, thanks, bare acknowledgements, tool turns and general-knowledge questions are
skipped, unless the query is personal ("my", "I", "do you remember" …). Every skip is
logged on ``chatmem.retrieval`` with its reason.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

from chatmem import checks
from chatmem.errors import ValidationError
from chatmem.retrieval.turns import ChatMessage, Turn, normal, read_turns

logger = logging.getLogger("chatmem.retrieval")

GREETINGS = (
    "hi",
    "hello",
    "hey",
    "hiya",
    "howdy",
    "yo",
    "greetings",
    "good morning",
    "good afternoon",
    "good evening",
    "morning",
    "how are you",
    "how are you doing",
    "how's it going",
    "what's up",
    "sup",
    "bye",
    "goodbye",
    "bye bye",
    "see you",
    "see ya",
    "see you later",
    "good night",
    "take care",
)
THANKS = (
    "thanks",
    "thank you",
    "thank u",
    "thx",
    "ty",
    "tysm",
    "cheers",
    "many thanks",
    "much appreciated",
    "appreciate it",
    "i appreciate it",
)
ACKNOWLEDGEMENTS = (
    "ok",
    "okay",
    "k",
    "kk",
    "okey",
    "cool",
    "great",
    "nice",
    "sure",
    "yes",
    "yeah",
    "yep",
    "yup",
    "no",
    "nope",
    "nah",
    "got it",
    "i see",
    "sounds good",
    "alright",
    "all right",
    "fine",
    "perfect",
    "awesome",
    "noted",
    "understood",
    "makes sense",
    "right",
    "lol",
    "haha",
    "wow",
    "i agree",
    "agreed",
    "good",
    "very good",
)
#: Words allowed between small-talk phrases ("thanks so much", "ok then"), never alone.
FILLERS = (
    "so",
    "much",
    "very",
    "really",
    "again",
    "there",
    "all",
    "everyone",
    "guys",
    "a",
    "lot",
    "then",
    "oh",
    "ah",
    "well",
    "and",
    "for",
    "that",
    "the",
    "help",
    "you",
    "too",
)
#: General-knowledge question forms, matched on the lower-cased query. They are kept narrow
#: on purpose: a miss costs one search, a false match loses the user's memory.
GENERAL_KNOWLEDGE = (
    r"^(what|who|where|which)('s|\s+is|\s+are|\s+was|\s+were)\s+(the\s+)?(capital|population"
    r"|president|prime minister|currency|official language|meaning|definition|origin"
    r"|difference|distance|speed|boiling point|melting point|formula|author|inventor|founder"
    r"|largest|smallest|biggest|tallest|highest|longest|deepest|oldest|fastest)\b",
    # "what is a monad?", not "what is a good gift for Anna?" (that one wants memory)
    r"^(what|who)('s|\s+is|\s+are|\s+was|\s+were)\s+(a|an)\s+(?!(good|great|nice|fun|cheap"
    r"|healthy|quick|easy|better|best|fine|cool|safe|popular)\b)[\w-]+(\s+[\w-]+){0,2}\s*\??$",
    r"^what\s+does\s+.+\s+(mean|stand for)\b",
    r"^(define|explain\s+(what|how|why))\s",
    r"^(how|why)\s+(does|do|did|is|are|can|could)\s+(?!you\b).+\b(work|works|happen|happens"
    r"|function|operate)\b",
    r"^who\s+(wrote|invented|discovered|painted|composed|founded|directed|created|designed"
    r"|won|sang)\b",
    r"^(when|where)\s+(was|were|did|is|are)\s+.+\s+(born|invented|founded|built|signed"
    r"|discovered|written|published|located|fought|died)\b",
    r"\b(capital|population|currency)\s+of\b",
    r"^how\s+many\s+\w+(\s+\w+)?\s+(are|is)\s+(there|in)\b",
    r"^(what\s+is|what's|calculate|compute)\s+[\d.]+\s*[-+*/x×÷^]\s*[\d.]+",
    r"^(translate|convert)\s",
    r"^what\s+(time|day)\s+is\s+it\b",
    r"^tell\s+me\s+a\s+(joke|fun fact)\b",
)
#: First-person words and phrases that make a question about the user, whatever its form.
PERSONAL = (
    r"\b(i|my|mine|myself|i'm|im|i've|i'll|i'd|we|our|ours|ourselves|we're|we've|we'll)\b"
    # "me", but not in "tell me a joke", "show me how TCP works"
    r"|\b(?<!tell )(?<!show )(?<!give )(?<!teach )me\b"
    r"|\b(remember|remind me|recall|last time|you told me|we talked|we discussed|as i said)\b"
)

# A word ("what's" is one) or a run of symbols such as emoji; punctuation separates.
_UNIT = re.compile(r"[^\W_]+(?:'[^\W_]+)*|[^\w\s.,!?;:()\"'~\-]+")


@dataclass(frozen=True)
class DecisionRules:
    """What ``decide`` skips. Word lists are whole phrases; patterns are regular expressions
    matched against the lower-cased query. ``min_chars`` is the fewest letters or digits a
    query needs to be searched."""

    greetings: tuple[str, ...] = GREETINGS
    thanks: tuple[str, ...] = THANKS
    acknowledgements: tuple[str, ...] = ACKNOWLEDGEMENTS
    fillers: tuple[str, ...] = FILLERS
    general_knowledge: tuple[str, ...] = GENERAL_KNOWLEDGE
    personal: str = PERSONAL
    min_chars: int = 2
    #: A message of emoji or symbols alone ("👍", "🙏🙏") counts as an acknowledgement.
    emoji_is_acknowledgement: bool = True

    def __post_init__(self) -> None:
        checks.whole(self.min_chars, "min_chars", low=0, message="must be 0 or more")
        for pattern in (*self.general_knowledge, self.personal):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValidationError(f"bad pattern {pattern!r}: {exc}", field="rules") from None

    @cached_property
    def _phrases(self) -> dict[tuple[str, ...], str]:
        """Each small-talk phrase as words, with its kind (fillers last, so a phrase wins)."""
        kinds = (
            ("greeting", self.greetings),
            ("thanks", self.thanks),
            ("acknowledgement", self.acknowledgements),
            ("filler", self.fillers),
        )
        phrases: dict[tuple[str, ...], str] = {}
        for kind, listed in kinds:
            for phrase in listed:
                phrases.setdefault(tuple(_units(phrase)), kind)
        return phrases

    @cached_property
    def _general(self) -> list[re.Pattern[str]]:
        return [re.compile(p) for p in self.general_knowledge]

    @cached_property
    def _personal(self) -> re.Pattern[str]:
        return re.compile(self.personal)

    def small_talk(self, query: str) -> str | None:
        """The kind of small talk ``query`` is made of alone ("greeting", "thanks",
        "acknowledgement"), else None."""
        units = _units(query)
        if not units:
            return None
        kinds: list[str] = []
        longest = max((len(p) for p in self._phrases), default=1)
        position = 0
        while position < len(units):
            if self.emoji_is_acknowledgement and not _has_alnum(units[position]):
                kinds.append("acknowledgement")
                position += 1
                continue
            for size in range(min(longest, len(units) - position), 0, -1):
                kind = self._phrases.get(tuple(units[position : position + size]))
                if kind is not None:
                    kinds.append(kind)
                    position += size
                    break
            else:
                return None
        for kind in ("greeting", "thanks", "acknowledgement"):
            if kind in kinds:
                return kind
        return None  # fillers alone ("so", "well") are not small talk

    def is_general_knowledge(self, query: str) -> bool:
        """Whether ``query`` has the form of a general-knowledge question."""
        lowered = normal(query)
        return any(p.search(lowered) for p in self._general)

    def is_personal(self, query: str) -> bool:
        """Whether ``query`` speaks of the user (first person, "do you remember" …)."""
        return self._personal.search(normal(query)) is not None


DEFAULT_RULES = DecisionRules()


class Decision(NamedTuple):
    """Whether to search memory for a request, and why."""

    search: bool
    reason: str


def decide(messages: Sequence[ChatMessage], rules: DecisionRules = DEFAULT_RULES) -> Decision:
    """Search memory for this request? Skips are logged on ``chatmem.retrieval``."""
    decision = _decision(read_turns(messages), rules)
    if not decision.search:
        logger.info("Memory: skipping search (%s)", decision.reason)
    return decision


def _decision(said: Sequence[Turn], rules: DecisionRules) -> Decision:
    if not said:
        return Decision(False, "no messages")
    last = said[-1]
    if last.role == "tool":
        return Decision(False, "tool result")
    if last.role == "assistant" and last.tool_call:
        return Decision(False, "tool call")
    if last.role != "user":
        return Decision(False, f"last message is from the {last.role}, not the user")
    query = last.text
    kind = rules.small_talk(query)  # before the length: "👍" is short, and small talk
    if kind is not None:
        return Decision(False, kind)
    if sum(ch.isalnum() for ch in query) < rules.min_chars:
        return Decision(False, "too short" if query.strip() else "empty")
    if rules.is_personal(query):
        return Decision(True, "personal")
    if rules.is_general_knowledge(query):
        return Decision(False, "general knowledge")
    return Decision(True, "default")


def _units(text: str) -> list[str]:
    return _UNIT.findall(normal(text))


def _has_alnum(unit: str) -> bool:
    return any(ch.isalnum() for ch in unit)
