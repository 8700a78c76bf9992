"""The check for claims of authority or privileges on the service ("my account is exempt
from billing", "the developers granted me god mode").

A privilege held somewhere else ("admin rights on the team's Jira board") is part of the
user's life and passes.
"""

from __future__ import annotations

import re

from chatmem.extraction.poisoning.vocabulary import MINE

# The service itself, where a privilege would count.
_HERE = (
    r"(?:this|the|your|its)\s+(?:system|assistant|chat\s*bot|chat|bot|service|platform|app|"
    r"api|workspace|deployment|ai|model|server|servers|memory(?:\s+store)?|tools?|product|"
    r"site|account)\b|\bhere\b|\bover\s+you\b|\bin\s+this\s+\w+|"
    r"ce\s+(?:système|service|chatbot|assistant)|dieses?\s+(?:systems?|dienstes?|assistenten)|"
    r"diesem\s+(?:system|dienst)|est[ea]\s+(?:sistema|servicio|asistente|plataforma)|"
    r"questo\s+(?:sistema|servizio|assistente)|dest[ea]\s+(?:sistema|serviço|plataforma)|"
    r"dit\s+(?:systeem|platform)|deze\s+(?:dienst|assistent)|tego\s+systemu"
)
_AUTHORITY = (
    r"(?:the|your|its|this\s+\w+'s)\s+(?:devs|developers|creators|makers|admins|administrators"
    r"|moderators|operators|owners|engineers|staff|management|support(?:\s+team)?|"
    r"billing\s+team|security\s+team|dev\s+team|trust\s+and\s+safety\s+team)|\bmanagement\b|"
    r"\bopenai\b|\banthropic\b|\bdeepmind\b|company\s+that\s+(?:built|made|created)\s+you|"
    r"les\s+(?:développeurs|administrateurs|créateurs)|die\s+(?:entwickler|administratoren|"
    r"admins)|los\s+(?:desarrolladores|administradores|creadores)|gli\s+(?:sviluppatori|"
    r"amministratori)|os\s+(?:desenvolvedores|administradores|criadores)|de\s+(?:ontwikkelaars"
    r"|beheerders)|administratorzy|programiści|twórcy"
)

_PRIVILEGE = re.compile(
    # An entitlement on the service: billing waived, limits lifted, free for ever.
    r"\b(?:account|subscription|user|compte|konto|cuenta|conta|abonnement)\b[^.!?]{0,40}?"
    r"(?:exempt\w*|exonér\w*|befreit|exent\w*|esent\w*|isent\w*|vrijgesteld|zwolnion\w*)|"
    r"\bexempt\s+from\s+(?:\w+\s+)?(?:billing|fees?|payments?|charges?|paying|rate\s+limits?|"
    r"usage\s+limits?|limits|quotas?|restrictions|the\s+rules|rules|moderation|filters?|"
    r"checks|verification|polic\w+|safety|terms)\b|"
    r"\b(?:don't|do\s+not|never|doesn't|does\s+not|won't|no\s+longer)\s+(?:have|need|has)\s+"
    r"to\s+pay\b|\bnever\s+(?:has|have)\s+to\s+pay\b|\b(?:free|gratis)\s+(?:forever|for\s+"
    r"life)|\blifetime\s+free\b|\bat\s+no\s+cost\b|\bfees?\s+(?:are\s+)?waived|\bwaived\s+"
    r"(?:all\s+)?(?:my|the\s+user's|his|her|their)\s+fees|\bnever\s+expire|"
    r"\b(?:unlimited|illimit\w+|unbegrenzt\w*|ilimitad\w*|onbeperkt\w*|nieograniczon\w*)\s+"
    r"(?:credits?|crédits?|créditos|crediti|tokens?|usage|nutzung|requests|withdrawals|"
    r"access|quota)|\b(?:credits?|crédits?|créditos|crediti|tokens?)\s+(?:\w+\s+)?(?:unlimited"
    r"|illimit\w+|ilimitad\w*)|\b(?:credit\s+limit|quota|limit)\s+is\s+unlimited|"
    r"\bno\s+(?:usage\s+|rate\s+)?limits\s+apply|\b(?:usage|rate)\s+limits\b|"
    # Access and roles on the service.
    r"\b(?:full|total|complete|unrestricted|unlimited|elevated|special|master)\s+"
    r"(?:access|privileges|rights|permissions|clearance)\b|"
    r"\ba[cç]+[eè]s+o?\s+(?:complet[oa]?|total|illimit\w+|ilimitad\w*)|\bvolle[rn]?\s+zugriff\w*|"
    r"\bvolledige\s+toegang|\bpełny\s+dostęp|"
    r"\b(?:admin|administrator|root|superuser|super-user|sudo|owner|moderator|operator|"
    r"developer|staff|god|override)\s+(?:privileges|rights|access|status|permissions|"
    r"clearance|role|mode|powers)\b|\bsuperuser\b|\bwhitelisted\b|\bclearance\s+(?:is\s+)?"
    r"level\b|\bmy\s+clearance\b|\bmaster\s+key\b|\b(?:marked|is)\s+(?:as\s+)?(?:a\s+)?vip\b|"
    r"\bvip\s+(?:status|account|tier|user)\b|"
    r"\b(?:i\s+am|i'm|im)\s+the\s+(?:system\s+)?(?:operator|administrator|admin|owner)\b|"
    r"\b(?:verified|trusted|privileged|internal)\s+(?:staff|moderator|developer|admin\w*|"
    r"tester|user|account|member\s+of\s+staff)\b|"
    r"\b(?:authori[sz]ed|permitted|allowed|cleared|entitled|able|required)\s+to\s+"
    r"(?:\w+\s+){0,3}?(?:access|see|read|view|bypass|skip|turn\s+off|disable|override|"
    r"delete|give\s+me|make)\b[^.!?]{0,40}?(?:all|any|other|every|users?|hidden|system|"
    r"without|restrictions|filters|safety|records|data)\b|\bwithout\s+(?:any\s+)?"
    r"(?:approval|verification|checks)\b|\bskip\s+(?:all\s+)?(?:the\s+)?(?:verification|"
    r"checks|security)|"
    # Who they claim to be.
    r"\b(?:i\s+am|i'm|im|user\s+is|the\s+user\s+is|this\s+user\s+is)\s+(?:one\s+of\s+)?"
    r"(?:your|the\s+\w+'s|its)\s+(?:developers?|creators?|owners?|admins?|administrators?|"
    r"operators?|makers?|engineers?)\b|\b(?:admin|administrator|owner|operator|developer|"
    r"creator|ceo|maker)s?\s+(?:of|for|on)\s+(?:this|the|your)\s+(?:system|assistant|"
    r"chatbot|bot|service|platform|workspace|deployment|ai|model|app|chat)\b|"
    r"\b(?:work|working)\s+(?:at|for)\s+(?:openai|anthropic)\b|\b(?:from|on|of|at)\s+"
    r"(?:openai|anthropic)|\b(?:red|dev|developer|security|safety)\s+team\b[^.!?]{0,60}"
    r"(?:restrictions|rules|filters|safety|apply|access)|\bstaff\s+engineer\s+on\s+this|"
    r"\byour\s+(?:creator|developer|owner|maker|boss|master)\b|\breport\s+to\s+me\b|"
    r"\bdo\s+what\s+i\s+say\b|\bobey\s+(?:me|only\s+me)\b|\bmy\s+word\s+overrides\b|"
    r"\b(?:treat|consider)\s+(?:my|this\s+user's)\s+(?:\w+\s+)?(?:requests|messages|"
    r"commands)\s+as\s+(?:system|admin)|\b(?:rules|restrictions|safety\s+rules|filters)\s+"
    r"(?:are\s+)?(?:turned\s+off|disabled|off)\s+for\s+(?:me|my)|\bdon't\s+apply\s+to\s+me|"
    r"\binternal\s+tester\b|"
    r"\b(?:administra\w*|amministra\w*|admin|beheerder|propriétaire|besitzer|dueño|proprietario|dono|"
    r"eigenaar|développeur|entwickler|desarrollador|sviluppatore|desenvolvedor|ontwikkelaar|"
    r"opérateur)\s+(?:de\s+ce|de\s+cet|de\s+cette|dieses|von\s+diesem|de\s+este|de\s+esta|"
    r"di\s+questo|di\s+questa|deste|desta|do\s+sistema|van\s+dit|van\s+deze|tego)\b|"
    r"\bentwickler\s+bei\s+(?:openai|anthropic)|"
    # Granted by the service's people.
    rf"(?:{_AUTHORITY})[^.!?]{{0,50}}?(?:gave|given|granted|grants|awarded|made|upgraded|"
    r"promoted|authori[sz]ed|whitelisted|confirmed|said|told|approved|waived|accordé|donné|"
    r"gegeben|gewährt|dieron|otorgado|concedido|concesso|dato|deram|concederam|gegeven|"
    r"verleend|zdecydowali|przyznali)|"
    r"\b(?:granted|given|awarded|upgraded|promoted|whitelisted|authori[sz]ed|elevated)\b"
    rf"[^.!?]{{0,60}}?\bby\s+(?:{_AUTHORITY})|\bper\s+(?:{_AUTHORITY})"
)


def privilege(text: str) -> bool:
    """Whether ``text`` claims authority or a privilege on this service."""
    return any(not _held_elsewhere(text, m.end()) for m in _PRIVILEGE.finditer(text))


# "admin rights on the team's Jira board", "security clearance for my job": a privilege held
# somewhere else than on this service is part of the user's life.
_ELSEWHERE = re.compile(
    rf"\s*(?:\w+\s+){{0,2}}?(?:on|at|in|for|to|of)\s+(?:(?:{MINE})\b|the\s+\w+'s|an?\s|"
    r"\w+'s\b|etsy|ebay|jira|github|discord|whatsapp|work\b|the\s+(?:office|ministry|"
    r"company|hospital|school|building|team|club|forum|group))"
)
_HERE_RE = re.compile(_HERE)


def _held_elsewhere(text: str, end: int) -> bool:
    after = text[end : end + 60]
    if _ELSEWHERE.match(after) is None:
        return False
    return _HERE_RE.search(after) is None


__all__ = ["privilege"]
