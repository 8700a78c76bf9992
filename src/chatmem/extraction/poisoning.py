"""The poisoning guard (SPEC L9): text aimed at the model is never a fact about the user.

A user may tell the assistant how to treat *them* ("remind me of my meds at 8pm", "from now
on use metric units for me"): that is a preference, and it is kept. What is not kept is an
order or a claim aimed at the model or at other people: telling it to drop its instructions,
to become someone else, to send data out, to act on other users; claiming authority or
privileges on the service ("my account is exempt from billing", "the developers granted me
god mode"); and forged system or tool markup. :func:`is_instruction_to_model` says which, in
English, French, German, Spanish, Italian, Portuguese, Dutch and Polish, and sees through
zero-width characters, look-alike letters, leetspeak, spaced-out letters and base64, hex,
rot13 or reversed text.

A claim of wrongdoing by someone else ("my neighbour Tom is a thief") is about the user's
life only as the user's word: :func:`as_claim` keeps such a fact attributed to the user
("User claims their neighbour Tom is a thief"), with low confidence and the ``claim`` tag,
never as a plain fact about Tom.

Both extractors and the write policy call these: the offline extractor skips flagged
messages, the LLM one withholds them from the model, and the write policy drops any fact
that reads like one and attributes claims.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import replace

from chatmem.extraction.base import Fact
from chatmem.records import MemoryType

#: The tag of a memory kept as the user's claim about someone else.
CLAIM_TAG = "claim"
#: The confidence of such a claim: the write policy's default floor, so it is kept, and
#: below anything the user says of themselves.
CLAIM_CONFIDENCE = 0.4

# -- seeing through obfuscation ---------------------------------------------------------------

_INVISIBLE = dict.fromkeys(
    map(ord, "\u200b\u200c\u200d\u200e\u200f\u2060\u2061\u2062\u2063\u2064\ufeff\u00ad\u034f"),
    None,
)
# Cyrillic and Greek letters that look like Latin ones (lower case: the text is lowered first).
_LOOKALIKES = str.maketrans("аеорсхуіјѕԁɡһкмтвнοαεικνρτυχ", "aeopcxyijsdghkmtbhoaeiknptux")
_LEET = str.maketrans("013457@$|", "oieastasi")
_LEET_WORD = re.compile(r"[a-z][0-9@$|]|[0-9@$|][a-z]")
# Letters spelled out one by one: "i g n o r e", "i.g.n.o.r.e", "i-g-n-o-r-e".
_DOTTED = re.compile(r"\b(?:\w[.\-_*·]){2,}\w\b")
_DOTTED_GAP = re.compile(r"[.\-_*·]")
_SPACED = re.compile(r"\b(?:\w ){2,}\w\b")
_BASE64 = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")
_HEX = re.compile(r"\b(?:[0-9a-fA-F]{2}){8,}\b")
_ROT13_HINT = re.compile(r"\brot-?\s?13\b|\bcaesar\b")
_REVERSED_HINT = re.compile(
    r"backwards?|revers|invers|rückwärts|à l'envers|al revés|al contrario|ao contrário|"
    r"achterstevoren|od tyłu"
)


def views(text: str) -> list[str]:
    """``text`` as the checks read it: lowered and folded, then each way it may hide words
    (leetspeak, spelled-out letters, decoded base64 or hex, rot13, reversed)."""
    base = _fold(text)
    found = [base]
    if _LEET_WORD.search(base):
        found.append(base.translate(_LEET))
    spelled = _DOTTED.sub(lambda m: _DOTTED_GAP.sub("", m.group()), base)
    spelled = _SPACED.sub(lambda m: m.group().replace(" ", ""), spelled)
    if spelled != base:
        found.append(spelled)
    found.extend(_fold(decoded) for decoded in _decoded(text))
    if _ROT13_HINT.search(base):
        found.append(codecs.decode(base, "rot13"))
    if _REVERSED_HINT.search(base):
        found.append(base[::-1])
    return found


def _fold(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_INVISIBLE).lower()
    return text.translate(_LOOKALIKES).replace("’", "'").replace("‘", "'")


def _decoded(text: str) -> Iterator[str]:
    """Readable text hidden in base64 or hex runs of ``text``."""
    for match in _BASE64.finditer(text):
        run = match.group()
        try:
            raw = base64.b64decode(run + "=" * (-len(run) % 4), validate=True)
        except (binascii.Error, ValueError):
            continue
        yield from _readable(raw)
    for match in _HEX.finditer(text):
        yield from _readable(bytes.fromhex(match.group()))


def _readable(raw: bytes) -> Iterator[str]:
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return
    printable = sum(ch.isprintable() or ch.isspace() for ch in decoded)
    if " " in decoded and printable >= 0.95 * len(decoded):
        yield decoded


# -- vocabulary -------------------------------------------------------------------------------


def _any(*words: str) -> str:
    return "(?:" + "|".join(words) + ")"


# The user's own things, in each language: an order about these is the user's business.
_MINE = (
    r"my|mine|our|mes|mon|ma|nos|notre|mein\w*|unser\w*|mis|mi|nuestr\w+|mie|miei|mia|mio|"
    r"minhas?|meus?|nossa|nosso|mijn|onze|moje|mój|moja|moich|mojego"
)
_YOUR = (
    r"your|yours|you|ton|ta|tes|tu|vos|votre|dein\w*|dich|dir|euer|eure|ihre|tus|tuyas?|su|"
    r"sus|tuo|tua|tuoi|tue|teu|tua|seu|sua|seus|suas|jouw|je|uw|twoj\w*|swoj\w*"
)
# Who may be the subject of a verb: then "forget", "ignore" … are no order to the model.
_SUBJECT_WORDS = frozenset(
    ("i", "i'm", "i've", "i'd", "i'll", "we", "we've", "he", "she", "they", "it", "who")
    + ("people", "je", "j'", "ich", "wir", "er", "yo", "io", "eu", "ik", "wij", "ja", "my")
)
_OTHERS = (
    r"(?:every|all|any|other|each|the\s+other|the\s+previous|the\s+last|the\s+next)\s+"
    r"(?:\w+\s+){0,2}?(?:users?|customers?|people|persons?|clients?|members?|visitors?|"
    r"accounts?|admins?|patients?)(?:'s?)?|every\s*(?:one|body)(?:\s+else)?(?:'s)?|"
    r"any\s*(?:one|body)(?:'s)?|some\s*(?:one|body)|the\s+user\b|this\s+user|"
    r"an?\s+(?:user|customer|client|visitor|member|patient|buyer|caller)\b|"
    r"users\b|other\s+people'?s?|the\s+admin'?s|everyone|everybody|"
    r"tous\s+les|toutes\s+les|tout\s+le\s+monde|n'importe\s+qui|quelqu'un|utilisateurs|"
    r"allen|alle\s+\w+|jede[mnrs]?|nutzer\w*|benutzer\w*|kunden|"
    r"tod[oa]s\s+l[oa]s|tod[oa]s\s+[oa]s|cualquiera|usuarios|usuários|utilizadores|alguien|"
    r"alguém|clientes|tutti|tutte|chiunque|utenti|qualcuno|clienti|"
    r"iedereen|gebruikers|klanten|wszystki\w+|użytkowni\w+|ktokolwiek"
)
_LINK = (
    r"https?://|\bwww\.|\b[\w-]+\.(?:example|com|net|org|io|ly|ru|cn|xyz|biz|info|co|me|app)"
    r"\b|[\w.+-]+@[\w-]+\.\w+|\bwebhook|\bpastebin"
)
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

# -- the checks --------------------------------------------------------------------------------

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
    rf"\b(?P<verb>{_OVERRIDE_VERB})\b(?P<gap>(?:\s+(?!(?:{_MINE})\b)[\w'-]+){{0,6}}?)\s+"
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
    rf"\b(?:{_OTHERS})|{_LINK}|\b(?:restrictions?|filter(?:s|ing)?|moderation|safety|"
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
_SENTENCE = re.compile(r"[.!?;](?=\s|$)|\n")

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
_DEVICE_CONTEXT = re.compile(rf"\b(?:{_MINE})\s+\w+|\bin\s+(?:minecraft|the\s+game|a\s+game)")
_ADDRESSEE = re.compile(
    r"\b(?:you|your|assistant|chatbot|bot|(?<!['’])ai|model|llm|granted|given|allowed|authori[sz]ed|"
    r"developers|tu|du|dein\w*|você|jij)\b"
)

_SYSTEM_PROMPT = re.compile(
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
_MARKUP = re.compile(
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

_TRANSFER = (
    r"forward|send|e-?mail|mail|upload|post|copy|leak|share|relay|mirror|bcc|cc|export|dump|"
    r"log|record|save|collect|harvest|transmit|message|text|append|render|include|give\s+me|"
    r"tell\s+me|report|transfère|transférer|envoie|envoyer|transmets|partage|"
    r"copie|redirige|fais\s+suivre|leite|weiterleiten|schick|schicke|sende|übermittle|"
    r"kopiere|teile|reenvía|reenviar|envía|enviar|manda|comparte|inoltra|invia|condividi|"
    r"encaminhe|encaminha|envie|envia|mande|compartilhe|partilhe|stuur|verstuur|deel|"
    r"kopieer|przekazuj|przekaż|wyślij|wysyłaj|udostępnij"
)
_EXFIL_TRANSFER = re.compile(rf"\b(?:{_TRANSFER})\b")
_EXFIL_DATA_OF_OTHERS = re.compile(
    rf"\b(?:{_OTHERS})|\b(?:list|names)\s+of\s+(?:all\s+)?(?:users|customers|people)|"
    r"\b(?:when|whenever|if|every\s+time)\s+(?:anyone|someone|somebody|a\s+user|users|people|"
    r"[a-z]+)\s+(?:talks|mentions|shares|logs|asks|tells|says|types|gives)|"
    r"\bconversations?\b|\btranscripts\b|\bchat\s+(?:history|logs)\b|\bsession\s+token\b|"
    r"\b(?:passwords?|api\s+keys?|reset\s+codes|credit\s+card|social\s+security|"
    r"private\s+messages|memory\s+database|stored\s+memories)\b|"
    r"\bconversation\s+of\s+the\b|historique|nachrichten|mensajes|messaggi|mensagens|"
    r"berichten|wiadomości"
)
_EXFIL_DIRECT = re.compile(
    r"!\[[^\]]*\]\(\s*https?://|\b(?:secretly|quietly|silently|covertly)\s+(?:\w+\s+)?"
    r"(?:record|save|collect|log|store|bcc|cc|send|forward|copy)\b|\bmy\s+(?:webhook|server|"
    r"inbox|dropbox|google\s+drive)\b"
)
_EXFIL_DESTINATION = re.compile(
    rf"{_LINK}|\bmy\s+(?:inbox|number|server|webhook|dropbox|drive|email)\b|\+?\d[\d\s]{{6,}}"
)

_DECODE_ORDER = re.compile(
    r"\b(?:decode|decrypt|translate|read)\b[^.!?]{0,30}\b(?:and|then)\s+(?:follow|do|obey|"
    r"execute|run|apply|act\s+on)\b|\b(?:base64|rot-?13|hex)\b[^.!?]{0,30}\b(?:follow|obey|"
    r"execute)\b"
)


def _override(text: str) -> bool:
    for match in _OVERRIDE.finditer(text):
        gap = match.group("gap")
        addressed = re.search(rf"\b(?:{_YOUR})\b", gap) is not None
        if addressed or not _said_by_subject(text, match.start()):
            return True
    return _VOIDED.search(text) is not None


def _said_by_subject(text: str, start: int) -> bool:
    """Whether a subject other than the listener comes just before ``start`` in its clause
    ("I always forget my previous passwords", "my boss said to ignore …")."""
    clause = re.split(r"[.!?;:,()\n]|\band\b|\bbut\b", text[:start])[-1]
    words = re.findall(r"[\w']+", clause)[-3:]
    return any(word in _SUBJECT_WORDS for word in words)


def _standing_order(text: str) -> bool:
    for sentence in _SENTENCE.split(text):
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


_LINK_RE = re.compile(_LINK)


def _persona(text: str) -> bool:
    if _PERSONA.search(text):
        return True
    for sentence in _SENTENCE.split(text):
        if _MODE.search(sentence) and not _own_device(sentence):
            return True
    return False


def _own_device(sentence: str) -> bool:
    """A mode the user set on their own thing ("I enabled developer mode on my Pixel")."""
    return _DEVICE_CONTEXT.search(sentence) is not None and _ADDRESSEE.search(sentence) is None


def _privilege(text: str) -> bool:
    return any(not _held_elsewhere(text, m.end()) for m in _PRIVILEGE.finditer(text))


# "admin rights on the team's Jira board", "security clearance for my job": a privilege held
# somewhere else than on this service is part of the user's life.
_ELSEWHERE = re.compile(
    rf"\s*(?:\w+\s+){{0,2}}?(?:on|at|in|for|to|of)\s+(?:(?:{_MINE})\b|the\s+\w+'s|an?\s|"
    r"\w+'s\b|etsy|ebay|jira|github|discord|whatsapp|work\b|the\s+(?:office|ministry|"
    r"company|hospital|school|building|team|club|forum|group))"
)
_HERE_RE = re.compile(_HERE)


def _held_elsewhere(text: str, end: int) -> bool:
    after = text[end : end + 60]
    if _ELSEWHERE.match(after) is None:
        return False
    return _HERE_RE.search(after) is None


def _exfiltration(text: str) -> bool:
    if _EXFIL_DIRECT.search(text):
        return True
    for sentence in _SENTENCE.split(text):
        for match in _EXFIL_TRANSFER.finditer(sentence):
            if _said_by_subject(sentence, match.start()):
                continue
            rest = sentence[match.start() :]
            if _EXFIL_DATA_OF_OTHERS.search(sentence) or _EXFIL_DESTINATION.search(rest):
                return not _own_data_to_self(sentence, rest)
    return False


def _own_data_to_self(sentence: str, rest: str) -> bool:
    """ "send me a summary of my week": the user's own data, to the user."""
    return (
        re.match(rf"\w+(?:\s+\w+)?\s+(?:me|(?:{_MINE})\b)", rest) is not None
        and _EXFIL_DESTINATION.search(rest) is None
        and re.search(rf"\b(?:{_OTHERS})", sentence) is None
    )


def _pattern(compiled: re.Pattern[str]) -> Callable[[str], bool]:
    return lambda text: compiled.search(text) is not None


#: (reason, check), in the order they are tried; each check reads one view of the text.
_CHECKS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("forges system or tool markup", _pattern(_MARKUP)),
    ("refers to the system prompt", _pattern(_SYSTEM_PROMPT)),
    ("asks the model to ignore its instructions", _override),
    ("tries to change who the model is", _persona),
    ("claims authority or privileges on the service", _privilege),
    ("asks to send data out", _exfiltration),
    ("gives the model a standing order", _standing_order),
    ("hides an instruction in an encoding", _pattern(_DECODE_ORDER)),
)


def is_instruction_to_model(text: str) -> str | None:
    """Why ``text`` reads as an instruction or a claim aimed at the model rather than a
    statement about the user, or None when it does not."""
    for view in views(text):
        for reason, check in _CHECKS:
            if check(view):
                return reason
    return None


# -- claims about other people -----------------------------------------------------------------

_WRONGDOING_NOUN = (
    r"thie(?:f|ves)|liars?|frauds?|fraudsters?|criminals?|crooks?|scammers?|con\s+artists?|"
    r"cheats?|tax\s+cheats?|drug\s+dealers?|dealers?|murderers?|killers?|rapists?|"
    r"p(?:a)?edophiles?|predators?|abusers?|terrorists?|terrorist\s+sympathi[sz]ers?|"
    r"racists?|bigots?|shoplifters?|embezzlers?|alcoholics?|junkies?|addicts?|stalkers?|"
    r"psychopaths?|sociopaths?|traitors?|spies|spy|illegal(?:\s+\w+)?|corrupt(?:\s+\w+)?|"
    r"violent(?:\s+\w+)?|dangerous|guilty|voleur|voleuse|escroc|menteur|dieb|diebin|"
    r"betrüger\w*|lügner\w*|verbrecher|ladr[oó]n\w*|ladr[aã]o|ladra|ladro|estafador\w*|"
    r"golpista|truffatore|dief|oplichter|leugenaar|złodziej\w*|oszust\w*"
)
_WRONGDOING_VERB = (
    r"steals?|stole|is\s+stealing|has\s+stolen|cheats?|cheated|is\s+cheating|lies|lied|"
    r"takes?\s+bribes|took\s+bribes|embezzle[sd]?|faked|fakes|forged|poisoned|beats|beat\s+"
    r"(?:his|her|their)|abuses|abused|sells\s+(?:stolen|drugs)|deals\s+drugs|plagiari[sz]ed|"
    r"leaks|leaked|scams|scammed|cooks\s+the\s+books|was\s+arrested|has\s+been\s+arrested|"
    r"is\s+having\s+an\s+affair|has\s+a\s+criminal\s+record|was\s+convicted|murdered|killed|"
    r"assaulted|molested|harass(?:es|ed)|is\s+under\s+investigation|launders"
)
_ACCUSATION = re.compile(
    r"^(?P<who>.{2,80}?)\s+(?:(?:is|was|are|were|has\s+been|have\s+been|ist|war|est|était|es"
    r"|fue|è|era|é|foi|jest|był|była)\s+(?:also\s+|really\s+|actually\s+|secretly\s+|"
    r"basically\s+)?(?:an?\s+|the\s+|being\s+|ein\s+|eine\s+|un\s+|une\s+|uno\s+|una\s+|"
    r"um\s+|uma\s+|een\s+)?(?:\w+\s+)?"
    rf"(?:{_WRONGDOING_NOUN})\b|(?:{_WRONGDOING_VERB})\b)",
    re.IGNORECASE,
)
_SELF = re.compile(r"^(?:the\s+)?(?:user|i|je|ich|yo|io|eu|ik|ja)$", re.IGNORECASE)
_USERS = re.compile(r"^(?:the\s+)?user's\s+", re.IGNORECASE)


def claims_wrongdoing_by_others(text: str) -> bool:
    """Whether ``text`` accuses someone other than the user ("User's neighbour Tom is a
    thief"), as opposed to a fact about the user or their things ("User's bike was
    stolen")."""
    match = _ACCUSATION.match(text.strip())
    if match is None:
        return False
    who = match.group("who").strip(" ,")
    return _SELF.match(who) is None and not who.lower().startswith(("user says", "user claims"))


def as_claim(fact: Fact) -> Fact:
    """``fact`` kept as the user's attributed, low-confidence claim when it accuses someone
    else; unchanged otherwise (and when it is one already)."""
    if CLAIM_TAG in fact.tags or not claims_wrongdoing_by_others(fact.text):
        return fact
    said = _USERS.sub("their ", fact.text.strip(), count=1).rstrip(".")
    subject = f"claim: {fact.subject}" if fact.subject else None
    return replace(
        fact,
        text=f"User claims {said[:1].lower() + said[1:] if said.startswith('The ') else said}"
        " (unverified)",
        type=MemoryType.SEMANTIC,
        confidence=min(fact.confidence, CLAIM_CONFIDENCE),
        tags=(*fact.tags, CLAIM_TAG),
        structured={**fact.structured, "claim_by": "user"},
        subject=subject,
    )


__all__ = [
    "CLAIM_CONFIDENCE",
    "CLAIM_TAG",
    "as_claim",
    "claims_wrongdoing_by_others",
    "is_instruction_to_model",
    "views",
]
