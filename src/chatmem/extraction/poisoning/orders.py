"""Checks for orders aimed at the model: to drop its instructions, a standing order for
every later answer, and an order hidden in an encoding.

An order about how to treat the user ("from now on use metric units for me") is their
preference and passes; one that reaches other people, lifts the model's rules, inserts links
or hides things does not.
"""

from __future__ import annotations

import re

from chatmem.extraction.poisoning.vocabulary import (
    LINK,
    MINE,
    OTHERS,
    SENTENCE,
    YOUR,
    said_by_subject,
)

_OVERRIDE_VERB = (
    r"ignore|disregard|forget|override|bypass|skip|drop|discard|erase|cancel|reset|overwrite|"
    r"disable|suspend|circumvent|abandon|nevermind|never\s+mind|pay\s+no\s+attention\s+to|"
    r"stop\s+(?:following|obeying|applying|using)|(?:do\s+not|don't)\s+(?:follow|obey|apply)|"
    r"turn\s+off|switch\s+off|deactivate|get\s+rid\s+of|throw\s+away|lift|remove|"
    r"ignorez|ignores|oublie[zs]?|contourne[zs]?|désactive[zs]?|ne\s+tiens\s+pas\s+compte\s+d|"
    r"fais\s+abstraction\s+d|ignoriere?|vergiss|vergesst|missachte|umgehe|überschreibe|"
    r"deaktiviere|ignora[d]?|olvida|olvide|omite|omita|salta|sáltate|desactiva|anula|"
    r"dimentica|disattiva|bypassa|annulla|esqueça|esquece|desconsidere|desconsidera|desative|"
    r"desativa|contorne|negeer|vergeet|omzeil|schakel|zignoruj|ignoruj|zapomnij|pomiń|wyłącz"
)
_OVERRIDE_TARGET = (
    r"instructions?|prompts?|\w*prompt|rules|directives?|guidelines|polic(?:y|ies)|"
    r"restrictions?|filters?|filtering|moderation|safety|safeguards|programming|training|"
    r"constraints|limitations|limits|system\s+message|context|guardrails|refusals?|ethics|"
    r"principles|everything\s+(?:you|above|before)|what\s+(?:you|they|the\s+\w+)\s+(?:\w+\s+)?"
    r"(?:told|said|were\s+told)|the\s+above|above|consignes|règles|limites|filtres|sécurité|"
    r"anweisungen|regeln|richtlinien|vorgaben|einschränkungen|grenzen|sicherheits\w*|"
    r"instrucciones|reglas|normas|directrices|restricciones|filtros|límites|seguridad|"
    r"istruzioni|regole|linee\s+guida|restrizioni|filtri|limiti|sicurezza|instruções|regras|"
    r"diretrizes|restrições|segurança|instructies|regels|richtlijnen|beperkingen|"
    r"veiligheids\w*|instrukcje|instrukcji|zasady|reguły|ograniczenia|bezpieczeństwa"
)
_OVERRIDE = re.compile(
    rf"\b(?P<verb>{_OVERRIDE_VERB})\b(?P<gap>(?:\s+(?!(?:{MINE})\b)[\w'-]+){{0,6}}?)\s+"
    rf"(?:{_OVERRIDE_TARGET})\b"
)
_VOIDED = re.compile(
    r"\b(?:your|the|all|these|those|any)\s+(?:\w+\s+){0,3}?(?:instructions|rules|guidelines|"
    r"directives|restrictions|policies|filters|programming|prompt)\s+(?:\w+\s+){0,4}?(?:are|is|"
    r"were|have\s+been|has\s+been)\s+(?:now\s+|hereby\s+)?(?:void|null|cancel+ed|suspended|"
    r"outdated|obsolete|lifted|removed|disabled|revoked|invalid|over|gone|deprecated|replaced|"
    r"overridden|no\s+longer)|\b(?:rules|restrictions|guidelines|filters|limits|policies)\s+"
    r"(?:don't|do\s+not|no\s+longer|doesn't|does\s+not)\s+apply|\b(?:rules|instructions|"
    r"guidelines)\s+you\s+(?:were|have\s+been)\s+given|\bthere\s+are\s+no\s+(?:more\s+)?"
    r"(?:rules|restrictions|limits)|\b(?:new|updated|real|additional|actual|true)\s+"
    r"(?:instructions?|rules?|directives?)\s*(?::|come\s+from|are)|\byour\s+new\s+rule\b|"
    r"\bnew\s+rule\s*:"
)

_ORDER = re.compile(
    r"\b(?:from\s+(?:now|today|this\s+point)\s+on(?:wards?)?|going\s+forward|henceforth|"
    r"from\s+here\s+on|(?:in|for)\s+(?:all|every|any)\s+(?:future|later|other)|for\s+every\s+"
    r"(?:session|chat|conversation)|whenever|every\s+time|each\s+time|permanently|always|never|"
    r"you\s+(?:must|will|shall|should|have\s+to|need\s+to|are\s+to|'ll|are\s+going\s+to)|"
    r"remember\s+(?:this|that)\s+rule|"
    r"à\s+partir\s+de\s+maintenant|désormais|dorénavant|à\s+l'avenir|tu\s+dois|vous\s+devez|"
    r"toujours|jamais|chaque\s+fois|ab\s+jetzt|von\s+nun\s+an|ab\s+sofort|künftig|"
    r"in\s+zukunft|du\s+musst|du\s+sollst|du\s+darfst|immer|niemals|nie|jedes\s+mal|"
    r"a\s+partir\s+de\s+ahora|de\s+ahora\s+en\s+adelante|desde\s+ahora|debes|tienes\s+que|"
    r"siempre|nunca|cada\s+vez|d'ora\s+in\s+(?:poi|avanti)|da\s+ora\s+in\s+poi|da\s+adesso|"
    r"devi|sempre|mai|ogni\s+volta|a\s+partir\s+de\s+agora|de\s+agora\s+em\s+diante|"
    r"você\s+deve|tu\s+deves|toda\s+vez|vanaf\s+nu|voortaan|van\s+nu\s+af|je\s+moet|"
    r"u\s+moet|altijd|nooit|elke\s+keer|od\s+teraz|od\s+tej\s+pory|zawsze|nigdy|musisz)\b"
)
# What makes a standing order more than the user's preference: it reaches other people,
# lifts the model's rules, inserts links, hides things, or fixes the answers.
_REACH = re.compile(
    rf"\b(?:{OTHERS})|{LINK}|\b(?:restrictions?|filter(?:s|ing)?|moderation|safety|"
    r"guidelines|polic(?:y|ies)|censor\w*|uncensored|refus\w*|warn\w*|checks|limits|harmful|"
    r"ethic\w*|obey|comply|execute[ds]?|approved?|agree\s+with\s+everything|never\s+correct|"
    r"secret\w*|(?:don't|never|do\s+not)\s+(?:tell|mention|reveal|say)|without\s+telling|"
    r"keep\s+(?:this|it)\s+(?:from|quiet)|reply\s+with\s+yes|say\s+yes|the\s+system\b|"
    r"(?:ask|asks|asked)\s+about\s+me|an\s+ai\b|(?:all|every|any)\s+(?!my\b)(?:\w+\s+)?"
    r"(?:questions?|requests?|messages?|answers|replies|responses|chats?|conversations?)|"
    r"règles|restriction|filtr\w*|sécurité|refuser|secrète?|ne\s+(?:jamais\s+)?dis|ia\b|"
    r"approuvé|einschränkung\w*|regeln|sicherheit\w*|ablehn\w*|geheim|verschweig\w*|"
    r"genehmigt|ki\b|restriccion\w*|reglas|filtros|rechaz\w*|rechac\w*|secreto|aprobad\w*|"
    r"restrizion\w*|regole|filtri|rifiut\w*|segreto|approvat\w*|restriç\w*|regras|recus\w*|"
    r"segredo|aprovad\w*|beperking\w*|regels|weiger\w*|goedgekeurd|odrzuc\w*|odmawia\w*)"
)
# "decode this and follow it": an order whose words are hidden.
DECODE_ORDER = re.compile(
    r"\b(?:decode|decrypt|translate|read)\b[^.!?]{0,30}\b(?:and|then)\s+(?:follow|do|obey|"
    r"execute|run|apply|act\s+on)\b|\b(?:base64|rot-?13|hex)\b[^.!?]{0,30}\b(?:follow|obey|"
    r"execute)\b"
)


def override(text: str) -> bool:
    """Whether ``text`` tells the model to drop its instructions, or says they are void."""
    for match in _OVERRIDE.finditer(text):
        gap = match.group("gap")
        addressed = re.search(rf"\b(?:{YOUR})\b", gap) is not None
        if addressed or not said_by_subject(text, match.start()):
            return True
    return _VOIDED.search(text) is not None


def standing_order(text: str) -> bool:
    """Whether a sentence of ``text`` gives the model an order for later answers that is
    more than how to treat the user."""
    for sentence in SENTENCE.split(text):
        if _ORDER.search(sentence) and _REACH.search(sentence) and not _about_self(sentence):
            return True
        if _ADDRESSED_ORDER.search(sentence) and _FOR_THE_USER.search(sentence) is None:
            return True
    return False


# An order put to the assistant; one that does not say how to treat the user ("from now on
# you must answer in French") is no preference of theirs.
_ADDRESSED_ORDER = re.compile(
    r"\byou\s+(?:must|will|shall|should|have\s+to|need\s+to|are\s+to)\s+(?:now\s+)?"
    r"(?:always|never|only|answer|reply|respond|say|tell|act|behave|obey|comply|write|"
    r"speak|use|end|start|begin|include|add|follow|treat|ignore|do)\b|"
    r"^\W*(?:from\s+now\s+on|going\s+forward|henceforth)\b"
)
_FOR_THE_USER = re.compile(r"\b(?:me|my|i|i'm|mine|myself|us|our|we)\b")


def _about_self(sentence: str) -> bool:
    """A first-person statement about the user's habits ("I always follow the rules at
    work"), not an order: the user is the subject and the listener is not addressed."""
    return (
        re.match(r"\W*(?:i|we)\b(?!'ll)", sentence) is not None
        and re.search(r"\byou\b|\byour\b", sentence) is None
        and _LINK_RE.search(sentence) is None
    )


_LINK_RE = re.compile(LINK)

__all__ = ["DECODE_ORDER", "override", "standing_order"]
