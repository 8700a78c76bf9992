"""The words more than one check of the guard reads, in each of its languages.

The user's own things (:data:`MINE`) and the listener's (:data:`YOUR`), other people
(:data:`OTHERS`), links (:data:`LINK`), and :func:`said_by_subject`, which says whether an
order's verb has a subject of its own ("my boss said to ignore …") and so is no order.
"""

from __future__ import annotations

import re

# The user's own things, in each language: an order about these is the user's business.
MINE = (
    r"my|mine|our|mes|mon|ma|nos|notre|mein\w*|unser\w*|mis|mi|nuestr\w+|mie|miei|mia|mio|"
    r"minhas?|meus?|nossa|nosso|mijn|onze|moje|mój|moja|moich|mojego"
)
YOUR = (
    r"your|yours|you|ton|ta|tes|tu|vos|votre|dein\w*|dich|dir|euer|eure|ihre|tus|tuyas?|su|"
    r"sus|tuo|tua|tuoi|tue|teu|tua|seu|sua|seus|suas|jouw|je|uw|twoj\w*|swoj\w*"
)
# Who may be the subject of a verb: then "forget", "ignore" … are no order to the model.
_SUBJECT_WORDS = frozenset(
    ("i", "i'm", "i've", "i'd", "i'll", "we", "we've", "he", "she", "they", "it", "who")
    + ("people", "je", "j'", "ich", "wir", "er", "yo", "io", "eu", "ik", "wij", "ja", "my")
)
OTHERS = (
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
LINK = (
    r"https?://|\bwww\.|\b[\w-]+\.(?:example|com|net|org|io|ly|ru|cn|xyz|biz|info|co|me|app)"
    r"\b|[\w.+-]+@[\w-]+\.\w+|\bwebhook|\bpastebin"
)
# How a text is cut into sentences for the checks that read one sentence at a time.
SENTENCE = re.compile(r"[.!?;](?=\s|$)|\n")


def said_by_subject(text: str, start: int) -> bool:
    """Whether a subject other than the listener comes just before ``start`` in its clause
    ("I always forget my previous passwords", "my boss said to ignore …")."""
    clause = re.split(r"[.!?;:,()\n]|\band\b|\bbut\b", text[:start])[-1]
    words = re.findall(r"[\w']+", clause)[-3:]
    return any(word in _SUBJECT_WORDS for word in words)


__all__ = ["LINK", "MINE", "OTHERS", "SENTENCE", "YOUR", "said_by_subject"]
