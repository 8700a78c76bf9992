"""The analysis of text for a vector database's BM25 keyword half.

Milvus Lite's analyzer has no stemmer and Qdrant has no analyzer at all, so both stores
analyse text here, as SQLite's FTS5 porter tokenizer would: ``chatmem.text``'s words, stop
words dropped, Porter stems (from snowballstemmer, which the ``milvus`` and ``qdrant`` extras
install).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chatmem import text as textlib
from chatmem.errors import ConfigError

STEMMER = "porter"


@dataclass(frozen=True)
class KeywordAnalyzer:
    """The analysis of one store; ``store`` and ``extra`` name it and the pip extra that
    installs its stemmer in the error raised when the stemmer is missing."""

    store: str
    extra: str

    def load_stemmer(self) -> Any:
        """The snowballstemmer module; a ConfigError naming the extra when it is missing."""
        try:
            return importlib.import_module("snowballstemmer")
        except ImportError as exc:
            raise ConfigError(
                f"the {self.store} store needs snowballstemmer: pip install 'chatmem[{self.extra}]'"
            ) from exc

    def stems(self, words: Sequence[str]) -> list[str]:
        """The Porter stem of each word, in order."""
        # A stemmer object keeps state between words: one per call keeps this thread-safe.
        stems: list[str] = self.load_stemmer().stemmer(STEMMER).stemWords(list(words))
        return stems

    def document_stems(self, text: str) -> list[str]:
        """The stems of a stored text's content words (stop words dropped), in order."""
        return self.stems([w for w in textlib.words(text) if w not in textlib.STOP_WORDS])

    def query_stems(self, text: str) -> list[str]:
        """The stems of a query's content terms, in order."""
        return self.stems(textlib.query_terms(text))
