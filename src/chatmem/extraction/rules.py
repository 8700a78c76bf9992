"""The patterns of the offline extractor, and how each match becomes a draft fact.

Each :class:`Rule` is a compiled pattern over one sentence and a builder that writes the
match in the third person with its context ("User loves hiking in the Alps"), picks a type
and a subject, and resolves dates for events and plans. :func:`drafts` runs them all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import date
from functools import cached_property
from typing import Any, NamedTuple

from chatmem.extraction.dates import ResolvedDate, day_phrase, find_date
from chatmem.records import MemoryType

_FLAGS = re.IGNORECASE


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


def _words_of(words: str) -> tuple[str, ...]:
    """Phrases separated by spaces, with ``_`` for the spaces inside a phrase."""
    return tuple(word.replace("_", " ") for word in words.split())


def _alternation(phrases: tuple[str, ...]) -> str:
    """A regex matching any of ``phrases`` (longest first, any whitespace inside)."""
    ordered = sorted(phrases, key=len, reverse=True)
    return "|".join(re.escape(phrase).replace(r"\ ", r"\s+") for phrase in ordered)


# --- Vocabulary -----------------------------------------------------------------------------

_ADVERBS = (
    r"(?:(?:really|truly|absolutely|just|also|totally|so|still|actually|definitely|kinda|"
    r"kind\s+of|sort\s+of|honestly|especially|always|usually|generally|genuinely|deeply|"
    r"pretty\s+much|now|recently|finally|currently|seriously|literally)\s+)*"
)
_IM = r"\bi(?:'m|\s+am|m)\s+"
# An object runs to the end of its clause: punctuation, or a conjunction opening a new one.
_BOUNDARY = (
    r"(?=\s*(?:$|,(?!\d)|\.(?!\w)|:(?!\d)|[;!?()\[\]\"]|\s[-–—]+\s|"
    r"\s(?:but|because|cause|cuz|since|so\s+(?!much)|although|though|while|which|who|"
    r"whenever|unless|lol|haha\w*|and\s+(?:i|i'm|i've|im|my|we|it|that|this|they|he|she|"
    r"you|then|also)\b)))"
)
# Dots inside words stay ("$10.50", "St.Louis"); sentence ends were split off already.
_OBJECT = rf"(?P<obj>(?:[^.!?;]|\.(?=\w)){{2,100}}?){_BOUNDARY}"
_NAME = r"(?P<name>(?-i:[A-Z][a-zA-Z'-]+)(?:\s+(?-i:[A-Z][a-zA-Z'-]+))?)"
_LOOSE_NAME = r"(?P<name>(?!not\b|a\b|an\b|the\b)[A-Za-z][A-Za-z'-]+)"

_RELATIONS = (
    r"wife|husband|partner|spouse|boyfriend|girlfriend|fianc[ée]e?|son|daughter|kids?|"
    r"children|child|baby|mom|mother|mum|mommy|dad|father|daddy|parents|brother|sister|"
    r"siblings?|grandma|grandmother|grandpa|grandfather|grandparents|grandson|granddaughter|"
    r"aunt|uncle|cousin|niece|nephew|friends?|bff|boss|manager|co-?workers?|colleagues?|"
    r"roommate|flatmate|neighbou?r|teacher|mentor|therapist|doctor|coach|dog|cat|pets?|"
    r"puppy|kitten|bird|horse|hamster|rabbit|bunny|turtle|twins|family|in-laws|"
    r"mother-in-law|father-in-law|stepmom|stepdad|stepson|stepdaughter"
)
_RELATION = (
    r"(?P<rel>(?:(?:older|younger|little|big|baby|twin|eldest|oldest|youngest|best|"
    r"step|half|ex|late|new|old|childhood|close)[\s-]+)?(?:" + _RELATIONS + r"))"
)
_FAMILY_WORDS = _word_set(
    "wife husband partner spouse boyfriend girlfriend son daughter kid kids children child "
    "baby twins brother sister siblings sibling parents mother father mom dad grandchildren "
    "family"
)
_PET_WORDS = _word_set("dog cat pet pets puppy kitten bird horse hamster rabbit bunny turtle fish")

_JOBS = (
    r"teacher|engineer|developer|programmer|nurse|doctor|physician|surgeon|dentist|lawyer|"
    r"attorney|accountant|architect|designer|artist|painter|writer|author|journalist|editor|"
    r"chef|cook|baker|waiter|waitress|bartender|barista|pilot|driver|mechanic|electrician|"
    r"plumber|carpenter|farmer|firefighter|police\s+officer|officer|soldier|scientist|"
    r"researcher|professor|lecturer|student|consultant|analyst|manager|director|ceo|cto|"
    r"founder|entrepreneur|salesperson|marketer|musician|singer|actor|actress|photographer|"
    r"therapist|counsel(?:l)?or|psychologist|pharmacist|vet|veterinarian|librarian|"
    r"cashier|clerk|secretary|receptionist|technician|administrator|admin|freelancer|"
    r"streamer|gamer|coach|trainer|instructor|tutor|social\s+worker|paramedic|midwife|"
    r"scientist|biologist|chemist|physicist|economist|mathematician|statistician|"
    r"data\s+scientist|dancer|comedian|filmmaker|director|producer|illustrator|animator|"
    r"youtuber|blogger|influencer|intern|apprentice|volunteer|activist|nanny|housekeeper"
)
_PREFERENCE_VERBS = {
    "love": "loves",
    "like": "likes",
    "enjoy": "enjoys",
    "adore": "adores",
    "prefer": "prefers",
    "hate": "hates",
    "dislike": "dislikes",
    "detest": "detests",
    "despise": "despises",
    "loathe": "loathes",
    "can't stand": "can't stand",
    "cannot stand": "cannot stand",
}
_NEGATIVE_VERBS = frozenset({"hate", "dislike", "detest", "despise", "loathe"})
_EVENT_VERBS = _words_of(
    "went visited started began finished completed bought got ran attended graduated adopted "
    "joined met won lost took made painted wrote read watched saw traveled travelled "
    "celebrated received signed_up volunteered quit retired launched published released "
    "learned learnt tried cooked baked built created hosted organised organized participated "
    "competed performed gave donated married broke_up passed failed spent booked planted "
    "hiked climbed camped flew drove found discovered decided opened sold designed recorded "
    "played taught helped picked_up registered enrolled applied had did experienced returned "
    "came_back"
)
_PERFECT_VERBS = _words_of(
    "been_to visited started finished completed bought adopted joined met won lost taken made "
    "painted written read watched seen traveled travelled learned learnt tried built created "
    "signed_up volunteered quit retired launched published decided always_wanted wanted "
    "gotten had never_been_to been"
)
_HABIT_VERBS = _words_of(
    "play practice practise go run swim cook bake paint draw write read watch collect "
    "volunteer teach coach ride knit sing dance speak drink eat support follow meditate hike "
    "climb garden surf ski skate fish train lift mentor attend work_out take_care_of care_for use"
)
_ONGOING_SKIP = _word_set(
    "going gonna planning thinking hoping trying looking feeling doing getting saying asking "
    "wondering kidding glad sorry happy sure talking telling curious excited willing able "
    "wishing guessing assuming starting sending sharing attaching studying living"
)
_TRIVIAL_HEADS = _word_set(
    "question questions idea ideas feeling feelings thought thoughts doubt doubts suggestion "
    "suggestions request requests minute moment second look chance clue point favor favour "
    "sense hunch guess concern concerns quick lot bit way time feeling day"
)
_GENERIC_SKIP = _word_set(
    "point question guess bad pleasure turn concern bet apologies apology thoughts thought "
    "answer reply response opinion advice suggestion understanding impression hope hopes "
    "god goodness gosh heart head mind life day week name age"
)
_PRONOUN_OBJECTS = _word_set(
    "it that this them you him her those these everything anything something nothing "
    "one ones stuff yours u ya here there they he she we what which who"
)
# Words that make a clause about the listener, not the user.
_SECOND_PERSON = _word_set("you your yours yourself u ur ya")
# An object opening with one of these leans on words outside the sentence ("I got her in 2022").
_DANGLING_START = _word_set(
    "it them her him you here there they he she we its and or but will would can could should "
    "is was are were has have had am"
)
# Words that say nothing on their own ("my pups are doing great", "I've been real busy").
_VAGUE_WORDS = _word_set(
    "doing going fine good great okay ok well alright busy real pretty nice cool awesome "
    "amazing bad tired now then lately recently today again"
)
# "something I'd like to have with Toby": the thing was named before the verb.
_CLAUSE_GAP = re.compile(
    r"^(?:have|get|make|do|eat|buy|see|take|try|find|read|watch|keep|bring|share|show)\s+"
    r"(?:with|at|in|on|for|from|to|about|during)\b",
    _FLAGS,
)
_FUNCTION_WORDS = _word_set(
    "to a an the of in on at for with and or but so it that this them here there up out "
    "about too very really just more much all some one"
)

# --- Rewriting ------------------------------------------------------------------------------

_THIRD_PERSON = {
    "i": "they",
    "i'm": "they're",
    "im": "they're",
    "i've": "they've",
    "i'll": "they'll",
    "i'd": "they'd",
    "me": "them",
    "my": "their",
    "mine": "theirs",
    "myself": "themselves",
    "we": "they",
    "we're": "they're",
    "we've": "they've",
    "us": "them",
    "our": "their",
    "ours": "theirs",
}
_PERSON_WORD = re.compile(r"\b(?:" + "|".join(map(re.escape, _THIRD_PERSON)) + r")\b", _FLAGS)
_TRAILING_FILLER = re.compile(
    r"(?:[\s,]+(?:so\s+much|a\s+lot|very\s+much|too|as\s+well|lol|haha\w*|though|actually|"
    r"really|right\s+now|anymore|btw|tbh|honestly|either|haha|lmao|originally|and|or|but|so|"
    r":\)|:D))+\s*$",
    _FLAGS,
)
_EDGE_JUNK = re.compile(r"^[\s\"'“”‘’(]+|[\s\"'“”‘’),:\-–—]+$")
_WORD = re.compile(r"[a-z0-9']+")
_DETERMINER = re.compile(r"^(?:an?|the|one|two|three|four|five|some|several|many|\d+)\s+", _FLAGS)


@dataclass(frozen=True)
class Draft:
    """A fact before dates and provenance: what a rule saw."""

    text: str
    type: MemoryType
    subject: str
    tags: tuple[str, ...]
    confidence: float = 0.6
    importance: float = 0.5
    structured: dict[str, Any] = field(default_factory=dict)
    #: The resolved date the text should mention (an event or a plan), if any.
    when: ResolvedDate | None = None


class Sentence:
    """One sentence of a user message, with the day it was said (for relative dates)."""

    def __init__(self, text: str, anchor: date) -> None:
        self.text = text
        self.anchor = anchor

    @cached_property
    def words(self) -> frozenset[str]:
        """The sentence's lowercased words, for a rule's needles."""
        return frozenset(_WORD.findall(self.text.lower()))

    @cached_property
    def past_date(self) -> ResolvedDate | None:
        return find_date(self.text, self.anchor, future=False)

    @cached_property
    def future_date(self) -> ResolvedDate | None:
        return find_date(self.text, self.anchor, future=True)

    def obj(self, match: re.Match[str], group: str = "obj", *, future: bool | None = None) -> str:
        """A matched object, cleaned and in the third person, with a date inside it resolved.

        ``future`` (True or False) resolves a date expression that lies inside the object.
        """
        start, end = match.span(group)
        raw = self.text[start:end]
        when = self._date(future)
        if when is not None and start <= when.span[0] and when.span[1] <= end:
            if not (raw[: when.span[0] - start] + raw[when.span[1] - start :]).strip():
                return ""  # only a date: the thing was in a clause before ("a photo I took …")
            raw = raw[: when.span[0] - start] + when.phrase + raw[when.span[1] - start :]
        return _clean(raw)

    def event(self, draft: Draft, *, future: bool) -> Draft:
        """``draft`` with the sentence's date: valid_from, and said in the text if it is not."""
        when = self._date(future)
        if when is None:
            return draft
        text = draft.text if when.phrase in draft.text else f"{draft.text} {when.phrase}"
        structured = {**draft.structured, "date": when.start.isoformat()}
        return replace(draft, text=text, structured=structured, when=when)

    def _date(self, future: bool | None) -> ResolvedDate | None:
        if future is None:
            return None
        return self.future_date if future else self.past_date


Builder = Callable[[re.Match[str], Sentence], Draft | None]


class Rule(NamedTuple):
    """A pattern and the builder that turns its matches into drafts."""

    family: str
    pattern: re.Pattern[str]
    build: Builder
    #: Words one of which must be in a sentence for the pattern to be tried on it.
    needles: frozenset[str]


# --- Builders -------------------------------------------------------------------------------


def _name(match: re.Match[str], _: Sentence) -> Draft | None:
    name = " ".join(part[:1].upper() + part[1:] for part in match.group("name").split())
    if name.lower() in _PRONOUN_OBJECTS or name.lower() in _NOT_NAMES:
        return None
    return Draft(
        f"User's name is {name}",
        MemoryType.PROFILE,
        "name",
        ("identity", "name"),
        confidence=0.7,
        importance=0.9,
        structured={"name": name},
    )


_NOT_NAMES = _word_set(
    "sorry fine good okay ok here back home glad happy sure just so also from not really "
    "very tired busy excited done new ready monday tuesday wednesday thursday friday saturday "
    "sunday christmas easter thanksgiving halloween english spanish french german"
)


def _age(match: re.Match[str], sentence: Sentence) -> Draft | None:
    age = int(match.group("age"))
    if not 1 <= age <= 120:
        return None
    as_of = day_phrase(sentence.anchor)
    return Draft(
        f"User is {age} years old (as of {as_of})",
        MemoryType.PROFILE,
        "age",
        ("identity", "age"),
        confidence=0.7,
        importance=0.7,
        structured={"age": age, "as_of": sentence.anchor.isoformat()},
    )


def _job(match: re.Match[str], sentence: Sentence) -> Draft | None:
    job = sentence.obj(match, "job")
    article = "an" if job[:1].lower() in "aeiou" else "a"
    return Draft(
        f"User is {article} {job}",
        MemoryType.PROFILE,
        "job",
        ("identity", "job"),
        confidence=0.65,
        importance=0.8,
        structured={"job": job},
    )


def _works(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match)
    if _skippable(what):
        return None
    preposition = match.group("prep").lower()
    subject = "job" if preposition == "as" else "employer"
    return Draft(
        f"User works {preposition} {what}",
        MemoryType.PROFILE,
        subject,
        ("identity", "job"),
        confidence=0.65,
        importance=0.8,
        structured={subject: what},
    )


def _studies(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match)
    if _skippable(what):
        return None
    return Draft(
        f"User studies {what}",
        MemoryType.PROFILE,
        "studies",
        ("identity", "education"),
        confidence=0.6,
        importance=0.7,
        structured={"studies": what},
    )


_HOME_VERBS = {
    "live": ("lives", "home"),
    "living": ("lives", "home"),
    "reside": ("lives", "home"),
    "moved": ("moved", "home"),
    "relocated": ("moved", "home"),
    "grew up": ("grew up", "childhood home"),
    "from": ("is from", "origin"),
    "come from": ("comes from", "origin"),
    "came from": ("comes from", "origin"),
}


def _home(match: re.Match[str], sentence: Sentence) -> Draft | None:
    verb = " ".join(match.group("verb").lower().split())
    moved = verb in ("moved", "relocated")
    place = sentence.obj(match, future=False if moved else None)
    if _skippable(place) or (verb.endswith("from") and not place[:1].isupper()):
        return None
    said, subject = _HOME_VERBS[verb]
    preposition = match.group("prep").lower() if match.group("prep") else ""
    text = " ".join(filter(None, ("User", said, preposition, place)))
    draft = Draft(
        text,
        MemoryType.PROFILE,
        subject,
        ("identity", "location"),
        confidence=0.65,
        importance=0.8,
        structured={"place": place},
    )
    return sentence.event(draft, future=False) if moved else draft


def _born(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match)
    when = find_date(what, sentence.anchor) or find_date(f"in {what}", sentence.anchor)
    if when is not None:
        return Draft(
            f"User was born {match.group('prep').lower()} {what}",
            MemoryType.PROFILE,
            "birth date",
            ("identity", "birthday"),
            confidence=0.7,
            importance=0.7,
            structured={"born": when.start.isoformat()},
        )
    if not what[:1].isupper():
        return None
    return Draft(
        f"User was born in {what}",
        MemoryType.PROFILE,
        "birthplace",
        ("identity", "location"),
        confidence=0.65,
        importance=0.7,
        structured={"place": what},
    )


def _preference(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match)
    if _skippable(what):
        return None
    verb = " ".join(match.group("verb").lower().split())
    negated = bool(match.groupdict().get("neg"))
    if negated:
        said, sentiment = f"does not {verb}", "negative"
    else:
        said = _PREFERENCE_VERBS[verb]
        sentiment = "negative" if verb in _NEGATIVE_VERBS or "stand" in verb else "positive"
    return Draft(
        f"User {said} {what}",
        MemoryType.PREFERENCE,
        what.lower()[:80],
        ("preference", "likes" if sentiment == "positive" else "dislikes"),
        confidence=0.65,
        importance=0.6,
        structured={"object": what, "sentiment": sentiment},
    )


def _favourite(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = _clean(match.group("what") or "thing")
    value = _uncapitalised(sentence.obj(match), match)
    if _skippable(value) or _skippable(what):
        return None
    return Draft(
        f"User's favourite {what} is {value}",
        MemoryType.PREFERENCE,
        f"favourite {what.lower()}",
        ("preference", "favourite"),
        confidence=0.7,
        importance=0.7,
        structured={"category": what, "favourite": value},
    )


def _fan(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match)
    if _skippable(what):
        return None
    phrase = " ".join(match.group("phrase").lower().split())
    negative = phrase.startswith("not")
    return Draft(
        f"User is {phrase} {what}",
        MemoryType.PREFERENCE,
        what.lower()[:80],
        ("preference", "dislikes" if negative else "likes"),
        confidence=0.6,
        importance=0.6,
        structured={"object": what, "sentiment": "negative" if negative else "positive"},
    )


def _diet(match: re.Match[str], _: Sentence) -> Draft | None:
    diet = " ".join(match.group("diet").lower().split())
    return Draft(
        f"User is {diet}",
        MemoryType.PREFERENCE,
        "diet",
        ("preference", "diet"),
        confidence=0.7,
        importance=0.8,
        structured={"diet": diet},
    )


def _allergy(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match)
    if _skippable(what):
        return None
    return Draft(
        f"User is allergic to {what}",
        MemoryType.PROFILE,
        f"allergy to {what.lower()}",
        ("health", "allergy"),
        confidence=0.7,
        importance=0.9,
        structured={"allergen": what},
    )


def _wish(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match, future=True)
    if _skippable(what):
        return None
    verb = " ".join(match.group("verb").lower().split())
    said = {"want": "wants", "hope": "hopes", "aim": "aims", "dream": "dreams"}.get(verb)
    said = said or f"would {verb}"  # "I'd love to …"
    draft = Draft(
        f"User {said} to {what}",
        MemoryType.SEMANTIC,
        f"goal: {what.lower()[:60]}",
        ("goal",),
        confidence=0.5,
        importance=0.5,
        structured={"goal": what},
    )
    return sentence.event(draft, future=True)


def _request(match: re.Match[str], sentence: Sentence) -> Draft | None:
    """How the user asks the assistant to treat them ("always use metric units for me",
    "remind me to take my meds at 8pm"): a preference of theirs (SPEC L9 keeps these)."""
    what = _REQUEST_CUT.split(sentence.obj(match))[0]
    what = _YOUR_WORD.sub("its", what).strip(" ,")
    words = _WORD.findall(what.lower())
    if not words or len(words) > 18 or not _SECOND_PERSON.isdisjoint(words):
        return None
    verb = match.group("verb").lower()
    if verb == "remind":
        text = f"User wants to be reminded {_REMINDED.sub('', what)}"
    else:
        never = "never " if match.group("neg") else ""
        text = f"User wants the assistant to {never}{verb} {what}"
    return Draft(
        text,
        MemoryType.PROCEDURAL,
        f"request: {verb} {words[0]}",
        ("request",),
        confidence=0.6,
        importance=0.6,
        structured={"request": f"{verb} {what}"},
    )


# The request stops where a clause about something else begins ("… when you talk to me").
_REQUEST_CUT = re.compile(r"\s+(?:when|whenever|while|as|because|since|if)\b|,\s+", _FLAGS)
_YOUR_WORD = re.compile(r"\byour\b", _FLAGS)
_REMINDED = re.compile(r"^them\s+", _FLAGS)
_REQUEST_VERBS = (
    "remind use give show answer reply write talk speak respond address keep explain "
    "translate check recommend suggest spell assume cite"
)


def _plan(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match, future=True)
    if _skippable(what) or _TRIVIAL_PLAN.match(what):
        return None
    who = _who(match)
    verb = " ".join(match.group("verb").lower().split())
    phrase = _PLAN_PHRASES.get(verb, "plans to")
    if who != "User":
        phrase = _PLURAL_PLAN_PHRASES.get(phrase, phrase)
    draft = Draft(
        f"{who} {phrase} {what}",
        MemoryType.EPISODIC,
        f"plan: {what.lower()[:60]}",
        ("plan",),
        confidence=0.5 if verb.startswith(("thinking", "hoping")) else 0.6,
        importance=0.6,
        structured={"plan": what},
    )
    return sentence.event(draft, future=True)


_PLAN_PHRASES = {
    "going to": "is going to",
    "gonna": "is going to",
    "planning to": "is planning to",
    "planning on": "is planning on",
    "planning": "is planning",
    "about to": "is about to",
    "preparing to": "is preparing to",
    "thinking about": "is thinking about",
    "thinking of": "is thinking of",
    "hoping to": "is hoping to",
    "scheduled to": "is scheduled to",
    "looking forward to": "is looking forward to",
    "plan": "plans to",
    "intend": "intends to",
    "decided": "decided to",
}
_PLURAL_PLAN_PHRASES = {
    **{phrase: "are" + phrase[2:] for phrase in _PLAN_PHRASES.values() if phrase[:3] == "is "},
    "plans to": "plan to",
    "intends to": "intend to",
}
_TRIVIAL_PLAN = re.compile(
    r"^(?:to\s+)?(?:try|be\s+honest|say|ask|tell|go\s+now|do\s+it|do\s+that|check|think|"
    r"let|keep\s+(?:it|that)|see|figure|need|have\s+to|get\s+going)\b",
    _FLAGS,
)


def _scheduled(match: re.Match[str], sentence: Sentence) -> Draft | None:
    """ "I'll be in Paris next week", "I have to finish the report by Friday": plans only
    when the sentence says when."""
    if sentence.future_date is None:
        return None
    what = sentence.obj(match, future=True)
    if _skippable(what) or _TRIVIAL_PLAN.match(what):
        return None
    aux = " ".join(match.group("aux").lower().replace("'ll", "will").split())
    plural = _who(match) != "User"
    said = {
        "have to": "have to" if plural else "has to",
        "need to": "need to" if plural else "needs to",
    }.get(aux, aux)
    draft = Draft(
        f"{_who(match)} {said} {what}",
        MemoryType.EPISODIC,
        f"plan: {what.lower()[:60]}",
        ("plan",),
        confidence=0.6,
        importance=0.6,
        structured={"plan": what},
    )
    return sentence.event(draft, future=True)


def _event(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match, future=False)
    verb = " ".join(match.group("verb").lower().split())
    if _skippable(what) or _TRIVIAL_EVENT.match(what) or _relative_clause(verb, what):
        return None
    who = _who(match)
    draft = Draft(
        f"{who} {verb} {what}",
        MemoryType.EPISODIC,
        f"{verb} {what.lower()[:60]}",
        ("event",),
        confidence=0.6,
        importance=0.5,
        structured={"event": f"{verb} {what}"},
    )
    return sentence.event(draft, future=False)


_TRANSITIVE = _word_set(
    "took taken made got gotten bought found saw seen watched read wrote written painted built "
    "created received gave designed recorded sold had"
)
_PREPOSITION = re.compile(r"^(?:at|in|on|for|from|with|during|when|while|last|yesterday)\b")


def _relative_clause(verb: str, what: str) -> bool:
    """ "the photo I took at the park": a transitive verb whose object came before it."""
    return verb in _TRANSITIVE and _PREPOSITION.match(what.lower()) is not None


_TRIVIAL_EVENT = re.compile(
    r"^(?:to\s+(?:say|admit|go|be|do|know|think)|it|that|this|them|a\s+(?:question|look|"
    r"feeling|chance|lot)|no\s+idea|back\s+to\s+you|what\s+you)\b",
    _FLAGS,
)


def _experience(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match, future=False)
    verb = " ".join(match.group("verb").lower().split())
    if _skippable(what) or _relative_clause(verb, what) or (verb == "been" and " " not in what):
        return None  # "I've been busy" says too little to keep
    who = _who(match)
    auxiliary = "have" if who != "User" else "has"
    return Draft(
        f"{who} {auxiliary} {verb} {what}",
        MemoryType.EPISODIC if verb != "been" else MemoryType.SEMANTIC,
        f"{verb} {what.lower()[:60]}",
        ("experience",),
        confidence=0.55,
        importance=0.5,
        structured={"experience": f"{verb} {what}"},
    )


def _ongoing(match: re.Match[str], sentence: Sentence) -> Draft | None:
    verb = match.group("verb").lower()
    if verb in _ONGOING_SKIP:
        return None
    what = sentence.obj(match, future=False)
    if _skippable(what):
        return None
    who = _who(match)
    draft = Draft(
        f"{who} {'are' if who != 'User' else 'is'} {verb} {what}",
        MemoryType.EPISODIC,
        f"{verb} {what.lower()[:60]}",
        ("activity",),
        confidence=0.55,
        importance=0.5,
        structured={"activity": f"{verb} {what}"},
    )
    return sentence.event(draft, future=False)


def _habit(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match)
    if _skippable(what):
        return None
    verb = " ".join(match.group("verb").lower().split())
    return Draft(
        f"User {_third_person(verb)} {what}",
        MemoryType.SEMANTIC,
        f"{verb} {what.lower()[:60]}",
        ("habit",),
        confidence=0.55,
        importance=0.5,
        structured={"activity": f"{verb} {what}"},
    )


def _possession(match: re.Match[str], sentence: Sentence) -> Draft | None:
    what = sentence.obj(match, future=True)
    head = _head_noun(what)
    if _skippable(what) or head in _TRIVIAL_HEADS:
        return None
    if sentence.future_date is not None:  # "I have a dentist appointment tomorrow"
        draft = Draft(
            f"User has {what}",
            MemoryType.EPISODIC,
            f"appointment: {what.lower()[:60]}",
            ("plan",),
            confidence=0.6,
            importance=0.6,
            structured={"plan": what},
        )
        return sentence.event(draft, future=True)
    family = head in _FAMILY_WORDS
    pet = head in _PET_WORDS
    return Draft(
        f"User {'owns' if (match.group('verb') or '').lower() == 'own' else 'has'} {what}",
        MemoryType.PROFILE if family else MemoryType.SEMANTIC,
        "family" if family else ("pet" if pet else f"has {head}"),
        ("family",) if family else (("pet",) if pet else ("possession",)),
        confidence=0.6,
        importance=0.7 if family or pet else 0.5,
        structured={"item": what},
    )


def _relation_name(match: re.Match[str], _: Sentence) -> Draft | None:
    return _named(match.group("rel"), match.group("name"))


def _named(relation: str, name: str) -> Draft | None:
    """The one fact a relation's name makes, whichever rule read it ("my dog's name is
    Pixel", "my dog is called Pixel", "my dog Pixel"), so that they write it alike."""
    relation = " ".join(relation.lower().split())
    name = name[:1].upper() + name[1:]
    if name.lower() in _NOT_NAMES or name.lower() in _PRONOUN_OBJECTS:
        return None
    return Draft(
        f"User's {relation} is named {name}",
        MemoryType.PROFILE,
        f"{relation} name",
        ("relationship", _relation_tag(relation)),
        confidence=0.65,
        importance=0.8,
        structured={"relation": relation, "name": name},
    )


def _relation_fact(match: re.Match[str], sentence: Sentence) -> Draft | None:
    relation = " ".join(match.group("rel").lower().split())
    verb = match.group("verb").lower()
    future = verb == "will" or match.group("obj").lower().startswith("going to")
    what = sentence.obj(match, future=future)
    if _skippable(what):
        return None
    called = _CALLED.fullmatch(what)
    if verb == "is" and called is not None:  # "my sister is called Ines": a name, said once
        return _named(relation, called.group("name"))
    name = match.group("name")
    who = f"User's {relation} {name}" if name else f"User's {relation}"
    first_word = what.split()[0].lower()
    return Draft(
        f"{who} {verb} {what}",
        MemoryType.SEMANTIC,
        f"{relation} {verb} {first_word}",
        ("relationship", _relation_tag(relation)),
        confidence=0.55,
        importance=0.6,
        structured={"relation": relation, "fact": f"{verb} {what}"},
    )


def _my_thing(match: re.Match[str], sentence: Sentence) -> Draft | None:
    thing = _clean(match.group("thing"))
    words = _WORD.findall(thing.lower())
    head = words[0] if words else ""
    if (
        not words
        or head in _GENERIC_SKIP
        or head.startswith(("fav", "name"))
        or _RELATION_RE.fullmatch(thing)
        or not _CLAUSE_WORDS.isdisjoint(words)
    ):
        return None
    value = _uncapitalised(sentence.obj(match), match)
    if _skippable(value):
        return None
    named = _RELATION_NAME.fullmatch(thing)
    if named is not None and _NAME_VALUE.fullmatch(value):
        # "my dog's name is Pixel": the people rule's fact, written alike so it is said once.
        return _named(named.group("rel"), value)
    verb = match.group("verb").lower()
    profile = head in ("birthday", "email", "phone", "address", "number", "pronouns")
    return Draft(
        f"User's {thing} {verb} {value}",
        MemoryType.PROFILE if profile else MemoryType.SEMANTIC,
        thing.lower(),
        (head,) if profile else ("fact",),
        confidence=0.55,
        importance=0.7 if profile else 0.5,
        structured={thing: value},
    )


_RELATION_RE = re.compile(_RELATION, _FLAGS)
# A relation's name said as a thing ("dog's name") or as what they are ("called Ines").
_RELATION_NAME = re.compile(rf"{_RELATION}'s\s+name", _FLAGS)
_NAME_VALUE = re.compile(r"[^\W\d_][\w'-]*(?:\s+[A-Z][\w'-]*)?")
_CALLED = re.compile(rf"(?i:called|named)\s+(?P<name>{_NAME_VALUE.pattern})")
# In "my X is Y", an X holding these is a clause, not a thing ("my recipe and it was …").
_CLAUSE_WORDS = _word_set("and or but it that which who he she they we i you")


def _relation_tag(relation: str) -> str:
    head = relation.split()[-1].split("-")[-1]
    if head in _PET_WORDS:
        return "pet"
    return "family" if head in _FAMILY_WORDS else "people"


def _who(match: re.Match[str]) -> str:
    who = (match.groupdict().get("who") or "i").lower()
    return "User" if who.startswith("i") else "User and others"


# --- The rules, in the order they are tried -----------------------------------------------


def _rule(family: str, pattern: str, build: Builder, *needles: str) -> Rule:
    return Rule(family, re.compile(pattern, _FLAGS), build, frozenset(needles))


def _first_words(phrases: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(phrase.split()[0] for phrase in phrases)


_FAVOURITE = ("favourite", "favorite", "fav", "fave")


_WHO = r"(?P<who>i|we)"
_WHO_BE = r"(?P<who>i(?:'m|\s+am|m)|we(?:'re|\s+are))\s+"

# fmt: off
#: The patterns, in the order they are tried. The needles after each builder are words one of
#: which must be in the sentence (lowercased) for the pattern to be worth running at all.
RULES: tuple[Rule, ...] = (
    _rule("identity", rf"\bmy\s+name(?:'s|\s+is)\s+{_LOOSE_NAME}", _name, "name"),
    _rule("identity", rf"\b(?:call\s+me|i(?:'m|\s+am)\s+(?:called|named))\s+{_NAME}", _name,
          "call", "called", "named"),
    _rule("identity", rf"^\W*(?:hi|hello|hey)(?:\s+there|\s+all)?[,!.]?\s+(?:i'm|i\s+am|im|"
          rf"this\s+is)\s+{_NAME}\b", _name, "hi", "hello", "hey"),
    _rule("identity", rf"{_IM}(?P<age>\d{{1,3}})\s*(?:years?\s+old|y/?o|yrs?\s+old)\b", _age,
          "old", "yo", "y", "yrs", "yr"),
    _rule("identity", r"\bi\s+(?:just\s+)?turned\s+(?P<age>\d{1,3})\b", _age, "turned"),
    _rule("identity", rf"{_IM}(?:an?\s+)(?P<job>(?:[\w-]+\s+){{0,2}}(?:{_JOBS}))\b", _job,
          "a", "an"),
    _rule("identity", rf"\bi\s+(?:currently\s+|now\s+)?work\s+(?P<prep>as|at|for)\s+{_OBJECT}",
          _works, "work"),
    _rule("identity", rf"(?:{_IM}(?:currently\s+)?studying|\bi\s+(?:currently\s+)?study|"
          rf"{_IM}(?:an?\s+)?(?:\w+\s+)?student\s+(?:of|in))\s+{_OBJECT}", _studies,
          "study", "studying", "student"),
    _rule("location", rf"(?:\bi\s+|{_IM})(?:currently\s+|still\s+|now\s+)?(?P<verb>live|"
          rf"reside|living)\s+(?P<prep>in|near|at|on|outside|by)\s+{_OBJECT}", _home,
          "live", "living", "reside"),
    _rule("location", rf"\bi\s+(?:just\s+|recently\s+|finally\s+)?(?P<verb>moved|relocated)"
          rf"\s+(?P<prep>to|into)\s+{_OBJECT}", _home, "moved", "relocated"),
    _rule("location", rf"\bi\s+(?P<verb>grew\s+up)\s+(?P<prep>in|near|on)\s+{_OBJECT}", _home,
          "grew"),
    _rule("location", rf"(?:{_IM}|\bi\s+)(?:originally\s+)?(?P<verb>from|come\s+from|came\s+"
          rf"from)(?P<prep>)\s+{_OBJECT}", _home, "from"),
    _rule("identity", rf"\bi\s+was\s+born\s+(?P<prep>in|on)\s+{_OBJECT}", _born, "born"),
    _rule("preference", rf"\bmy\s+(?:all[- ]time\s+|absolute\s+)?(?:favou?rite|fav|fave)\s+"
          rf"(?P<what>[\w\s'-]{{2,40}}?)\s+(?:is|are|was|has\s+to\s+be|would\s+be)\s+"
          rf"{_OBJECT}", _favourite, *_FAVOURITE),
    _rule("preference", rf"^\W*(?P<obj>[^,.!?;]{{2,60}}?)\s+(?:is|are)\s+(?:definitely\s+|"
          rf"probably\s+|still\s+)?my\s+(?:all[- ]time\s+)?(?:favou?rite|fav|fave)\b\s*"
          rf"(?P<what>[\w\s-]{{0,30}}?){_BOUNDARY}", _favourite, *_FAVOURITE),
    _rule("preference", rf"\bi\s+{_ADVERBS}(?P<verb>love|like|enjoy|adore|prefer|hate|"
          rf"dislike|detest|despise|loathe|can't\s+stand|cannot\s+stand)\s+{_OBJECT}",
          _preference, "love", "like", "enjoy", "adore", "prefer", "hate", "dislike", "detest",
          "despise", "loathe", "stand"),
    _rule("preference", rf"\bi\s+(?P<neg>do\s+not|don't|dont|never|didn't)\s+(?:really\s+|"
          rf"much\s+)?(?P<verb>like|love|enjoy)\s+{_OBJECT}", _preference, "like", "love",
          "enjoy"),
    _rule("preference", rf"{_IM}(?P<phrase>(?:not\s+)?(?:a\s+)?(?:(?:big|huge|great|massive)"
          rf"\s+)?fan\s+of|(?:really\s+|very\s+|so\s+)?(?:into|interested\s+in|passionate\s+"
          rf"about|obsessed\s+with|keen\s+on|crazy\s+about))\s+{_OBJECT}", _fan, "fan",
          "into", "interested", "passionate", "obsessed", "keen", "crazy"),
    _rule("preference", rf"{_IM}(?:an?\s+|strictly\s+)?(?P<diet>vegetarian|vegan|pescatarian|"
          rf"gluten[- ]free|lactose[- ]intolerant|teetotal|sober)\b", _diet, "vegetarian",
          "vegan", "pescatarian", "gluten", "lactose", "teetotal", "sober"),
    _rule("profile", rf"(?:{_IM}|\band\s+(?:also\s+|am\s+)?)(?:(?:very|severely|really|"
          rf"deathly)\s+)?allergic\s+to\s+{_OBJECT}", _allergy, "allergic"),
    _rule("request", r"^\W*(?:(?:from\s+now\s+on|going\s+forward|from\s+today\s+on)[,\s]+)?"
          r"(?:please[,\s]+)?(?:(?:you\s+(?:must|should|have\s+to|need\s+to|will)|i\s+want\s+"
          r"you\s+to|i'd\s+like\s+you\s+to)\s+)?(?:please\s+)?(?:always\s+|(?P<neg>never\s+|"
          r"(?:don't|do\s+not)\s+(?:ever\s+)?))?(?:please\s+)?(?P<verb>"
          + "|".join(_REQUEST_VERBS.split()) + rf")\s+{_OBJECT}", _request,
          *_REQUEST_VERBS.split()),
    _rule("plan", rf"\b{_WHO_BE}{_ADVERBS}(?P<verb>going\s+to|gonna|planning(?:\s+to|\s+on)?|"
          rf"about\s+to|preparing\s+to|thinking\s+(?:about|of)|hoping\s+to|scheduled\s+to|"
          rf"looking\s+forward\s+to)\s+{_OBJECT}", _plan, "going", "gonna", "planning",
          "about", "preparing", "thinking", "hoping", "scheduled", "forward"),
    _rule("plan", rf"\b{_WHO}\s+{_ADVERBS}(?P<verb>plan|intend|decided)\s+to\s+{_OBJECT}", _plan,
          "plan", "intend", "decided"),
    _rule("plan", rf"\b(?P<who>i|we)(?P<aux>'ll\s+be|\s+will\s+be|\s+have\s+to|\s+need\s+to|"
          rf"\s+must)\s+{_OBJECT}", _scheduled, "i'll", "we'll", "will", "have", "need",
          "must"),
    _rule("goal", rf"\bi\s+{_ADVERBS}(?P<verb>want|hope|aim|dream)\s+to\s+{_OBJECT}", _wish,
          "want", "hope", "aim", "dream"),
    _rule("goal", rf"\bi(?:'d|\s+would)\s+(?:really\s+)?(?P<verb>love|like)\s+to\s+{_OBJECT}",
          _wish, "i'd", "would"),
    _rule("event", rf"\b{_WHO}\s+(?:just\s+|recently\s+|finally\s+|also\s+|actually\s+|"
          rf"even\s+|once\s+)*(?P<verb>{_alternation(_EVENT_VERBS)})\s+{_OBJECT}", _event,
          *_first_words(_EVENT_VERBS)),
    _rule("event", rf"\b(?P<who>i|we)(?:'ve|\s+have)\s+(?:just\s+|recently\s+|finally\s+|"
          rf"already\s+|also\s+|always\s+)*(?P<verb>{_alternation(_PERFECT_VERBS)})\s+"
          rf"{_OBJECT}", _experience, "i've", "we've", "have"),
    _rule("event", rf"\b{_WHO_BE}(?:currently\s+|still\s+|now\s+|also\s+|really\s+)*"
          rf"(?P<verb>[a-z]{{3,}}ing)\s+{_OBJECT}", _ongoing, "i'm", "im", "am", "we're",
          "are"),
    _rule("habit", rf"\bi\s+(?:usually\s+|often\s+|always\s+|also\s+|regularly\s+|"
          rf"sometimes\s+)*(?P<verb>{_alternation(_HABIT_VERBS)})\s+{_OBJECT}", _habit,
          *_first_words(_HABIT_VERBS)),
    _rule("possession", r"\bi(?:\s+(?:also\s+|still\s+|now\s+)?(?P<verb>have|own|have\s+got)|"
          r"'ve\s+(?:also\s+)?got)\s+(?P<obj>(?:an?|one|two|three|four|five|\d+|some|several|many|"
          r"(?:kids|children|pets|cats|dogs|siblings|twins|grandchildren)\b)[^.!?;]{0,100}?)"
          + _BOUNDARY, _possession, "have", "own", "got"),
    _rule("people", rf"\bmy\s+{_RELATION}(?:'s\s+name\s+is|\s+is\s+(?:called|named)|,?\s+)"
          rf"\s*(?P<name>(?-i:[A-Z][a-z]+))\b", _relation_name, "my"),
    _rule("people", rf"\bmy\s+{_RELATION}(?:\s+(?P<name>(?-i:[A-Z][a-z]+)))?\s+(?P<verb>is|was|"
          rf"has|had|loves|likes|works|lives|got|went|started|plays|wants|will|studies|"
          rf"teaches|hates|enjoys|just\s+\w+)\s+{_OBJECT}", _relation_fact, "my"),
    _rule("fact", rf"^\W*(?P<obj>[^,.!?;]{{2,60}}?)\s+(?P<verb>is|are)\s+my\s+(?P<thing>[a-z]"
          rf"[\w' -]{{1,40}}?){_BOUNDARY}", _my_thing, "my"),
    _rule("fact", rf"\bmy\s+(?P<thing>[a-z][\w' -]{{1,40}}?)\s+(?P<verb>is|are|was|were)\s+"
          rf"{_OBJECT}", _my_thing, "my"),
)
# fmt: on


def drafts(sentence: Sentence) -> Iterator[Draft]:
    """What the rules whose needles are among the sentence's words read from it, in order."""
    words = sentence.words
    for rule in RULES:
        if rule.needles.isdisjoint(words):
            continue
        for match in rule.pattern.finditer(sentence.text):
            draft = rule.build(match, sentence)
            if draft is not None and draft.text:
                yield draft


def _clean(raw: str) -> str:
    """An object as a fact says it: fillers and stray punctuation off, in the third person."""
    text = _TRAILING_FILLER.sub("", " ".join(raw.split()))
    text = _EDGE_JUNK.sub("", text)
    return _PERSON_WORD.sub(_person_word, text)


def _person_word(match: re.Match[str]) -> str:
    return _THIRD_PERSON[match.group().lower()]


def _skippable(text: str) -> bool:
    """Not one clean fact about the user: empty, too long, only pronouns and function words,
    leaning on a pronoun from elsewhere, or about the listener."""
    words = _WORD.findall(text.lower())
    return (
        not words
        or len(words) > 18
        or all(w in _FUNCTION_WORDS or w in _PRONOUN_OBJECTS or w in _VAGUE_WORDS for w in words)
        or words[0] in _DANGLING_START
        or _CLAUSE_GAP.match(text) is not None
        or (len(words) <= 2 and words[0] in _PRONOUN_OBJECTS)
        or not _SECOND_PERSON.isdisjoint(words)
    )


def _uncapitalised(text: str, match: re.Match[str]) -> str:
    """An object that opened the sentence loses the capital the sentence gave it
    ("Playing games is my hobby"), unless it looks like a name."""
    if match.start("obj") > 2 or not text[:1].isupper():
        return text
    first = text.split()[0]
    if first.endswith("ing") or first.lower() in ("the", "a", "an", "my", "our", "their"):
        return text[:1].lower() + text[1:]
    return text


def _head_noun(phrase: str) -> str:
    words = _DETERMINER.sub("", phrase.lower()).split()
    for index, word in enumerate(words):
        if word in _AFTER_HEAD:
            return words[index - 1] if index else word
    return words[-1] if words else ""


_AFTER_HEAD = _word_set(
    "named called who that with from in at for of there here now too again already lately "
    "recently to"
)


def _third_person(verb: str) -> str:
    first, _, rest = verb.partition(" ")
    if first == "have":
        said = "has"
    elif first == "go":
        said = "goes"
    elif first.endswith(("s", "sh", "ch", "x", "z", "o")):
        said = first + "es"
    elif first.endswith("y") and first[-2:-1] not in "aeiou":
        said = first[:-1] + "ies"
    else:
        said = first + "s"
    return f"{said} {rest}".strip()


__all__ = ["RULES", "Draft", "Rule", "Sentence", "drafts"]
