"""How the guard sees through obfuscation: each way a text may hide the words it says.

:func:`views` gives the text lowered and folded (zero-width characters out, look-alike
letters made Latin), then read as leetspeak, with spelled-out letters joined, with base64 or
hex runs decoded, as rot13, and reversed, wherever the text gives reason to.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
import unicodedata
from collections.abc import Iterator

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


__all__ = ["views"]
