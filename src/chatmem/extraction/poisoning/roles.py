"""Checks on who is speaking and who the model is: forged system or tool markup, probes
of the system prompt, and orders to become someone else or to enter a "mode"."""

from __future__ import annotations

import re

from chatmem.extraction.poisoning.vocabulary import MINE, SENTENCE

_PERSONA = re.compile(
    r"(?<!where\s)(?<!what\s)(?<!how\s)(?<!that\s)(?<!who\s)\byou(?:\s+are|'re)\s+(?:now|"
    r"no\s+longer|from\s+now\s+on|henceforth)\s+(?!here\b|there\b|home\b|back\b|done\b|"
    r"ready\b|right\b|correct\b|online\b|talking\b)\w+|\byou(?:'re|\s+are)\s+not\s+an?\s+"
    r"(?:ai|assistant|language\s+model|bot)\b|\byou\s+have\s+become\b|"
    r"(?:^|[.!?:,;]\s*|\b(?:please|now|and|just|btw|also|so|ok|okay|then)\s+)(?:act\s+as|pretend\s+(?:to\s+be|you\s+are|"
    r"you're)|role-?play\s+as|play\s+the\s+role\s+of|simulate\s+being|stop\s+being\s+an?\s+"
    r"(?:ai|assistant))\b|\bdo\s+anything\s+now\b|"
    r"\btu\s+es\s+(?:maintenant|désormais|dorénavant)\b|\bvous\s+êtes\s+maintenant\b|"
    r"\bagis\s+comme\b|\bfais\s+semblant\b|\bdu\s+bist\s+(?:jetzt|nun|ab\s+jetzt|ab\s+sofort)"
    r"\b|\bverhalte\s+dich\s+wie\b|\bspiel\s+die\s+rolle\b|\b(?:ahora|ya)\s+(?:eres|estás)\b|"
    r"\bya\s+no\s+eres\b|\bactúa\s+como\b|\bfinge\s+ser\b|\b(?:ora|adesso)\s+sei\b|"
    r"\bnon\s+sei\s+più\b|\bcomportati\s+come\b|\bfingi\s+di\s+essere\b|\bagora\s+(?:você|tu)"
    r"\s+(?:é|está|és|estás)\b|\bagora\s+(?:és|estás)\b|\baja\s+como\b|\bage\s+como\b|"
    r"\bfinja\s+ser\b|\bje\s+bent\s+(?:nu|vanaf\s+nu|voortaan)\b|\bdoe\s+alsof\b|"
    r"\bjesteś\s+teraz\b|\budawaj\b"
)
_MODE = re.compile(
    r"\b(?:god|developer|dev|dan|jailbreak|jailbroken|unrestricted|unfiltered|uncensored|"
    r"debug|sudo|maintenance|evil|chaos)[\s-]?mode\b|\bjailbr(?:eak|oken)\b|"
    r"mode\s+(?:développeur|dieu|sans\s+(?:restriction|limite|filtre)s?)|"
    r"entwickler-?modus|gott-?modus|god-?modus|jailbreak-?modus|"
    r"modo\s+(?:desarrollador|dios|sin\s+(?:restricciones|filtros)|desenvolvedor|deus)|"
    r"modalità\s+(?:sviluppatore|dio)|ontwikkelaars-?modus|godmodus|tryb\s+(?:dewelopera|boga)"
)
_DEVICE_CONTEXT = re.compile(rf"\b(?:{MINE})\s+\w+|\bin\s+(?:minecraft|the\s+game|a\s+game)")
_ADDRESSEE = re.compile(
    r"\b(?:you|your|assistant|chatbot|bot|(?<!['’])ai|model|llm|granted|given|allowed|authori[sz]ed|"
    r"developers|tu|du|dein\w*|você|jij)\b"
)

SYSTEM_PROMPT = re.compile(
    r"\b(?:your|the|hidden|initial|original|secret|internal|new|updated|real)\s+system\s+"
    r"(?:prompt|message|instructions?)\b|\bsystem\s+prompt\s*:|\b(?:hidden|initial|original|"
    r"secret|internal|pre)[\s-]?(?:prompt|rules|instructions)\b|\b(?:reveal|show|print|"
    r"output|repeat|leak|display|dump|give\s+me|tell\s+me|paste)\s+(?:me\s+)?(?:your|the)\s+"
    r"(?:\w+\s+)?(?:prompt|instructions|rules|configuration|guidelines)\b|"
    r"\binternal\s+configuration\b|\bcontents\s+of\s+your\s+memory\b|"
    r"prompt\s+(?:du\s+)?système|system-?prompt|systemanweisung|prompt\s+del\s+sistema|"
    r"prompt\s+di\s+sistema|prompt\s+do\s+sistema|systeemprompt|prompt\s+systemowy"
)

_ROLE_WORDS = (
    r"system|sys|system\s+message|admin|administrator|developer|dev|tool|tools|function|"
    r"assistant|instructions?|memory|internal|automated|security|observation|server|root|"
    r"sudo|moderator|operator|openai|anthropic|notice|système|sistema|systeem|systemnachricht"
)
MARKUP = re.compile(
    r"<\|[a-z_ ]+\|>|\[/?inst\]|<</?sys>>|"
    rf"[\[<{{]\s*/?\s*(?:{_ROLE_WORDS})(?:[\s_-]\w+){{0,6}}\s*[\]>}}]|"
    rf"[\[<{{]\s*/?\s*\w+[\s_-](?:{_ROLE_WORDS})(?:[\s_-]\w+){{0,5}}\s*[\]>}}]|"
    r"(?:^|[\n.!?(]\s*)\s*(?:system|assistant|tool|tools|function|developer|admin|"
    r"observation|action|function\s+call(?:\s+result)?|tool\s+(?:response|output|result)s?"
    r"(?:\s*\([^)]{0,20}\))?|system\s+(?:message|note|prompt)|note\s+(?:to|for)\s+(?:the\s+)?"
    r"(?:ai|assistant|model|bot|llm|memory(?:\s+system)?)|(?:important\s+)?for\s+the\s+"
    r"(?:ai|assistant|model|bot|llm)(?:\s+\w+){0,3}|p\.?s\.?\s+for\s+the\s+(?:ai|assistant|"
    r"model)(?:\s+\w+){0,3}|hey\s+(?:model|ai|assistant|bot)|système|sistema|systeem)\s*[:,]|"
    r"^\s*#{2,}\s*(?:system|instruction|response\s+from|tool|assistant)|```\s*system|"
    r"\"role\"\s*:\s*\"(?:system|developer|tool)\"|<!--|"
    r"\b\w+\.(?:write|save|store|update|set|add|insert|create)\s*\(|\bset_\w+\s*\(|"
    r"\b(?:user|account|billing|role|tier|quota|subscription|privileges?|permissions?|access|"
    r"is_admin|plan)[\w.]*\"?\s*[=:]\s*['\"]?\s*(?:admin|root|owner|superuser|enterprise|"
    r"unlimited|none|waived|free|lifetime|true|verified|exempt|staff)\b"
)


def persona(text: str) -> bool:
    """Whether ``text`` tells the model to be someone else, or to switch to a mode."""
    if _PERSONA.search(text):
        return True
    for sentence in SENTENCE.split(text):
        if _MODE.search(sentence) and not _own_device(sentence):
            return True
    return False


def _own_device(sentence: str) -> bool:
    """A mode the user set on their own thing ("I enabled developer mode on my Pixel")."""
    return _DEVICE_CONTEXT.search(sentence) is not None and _ADDRESSEE.search(sentence) is None


__all__ = ["MARKUP", "SYSTEM_PROMPT", "persona"]
