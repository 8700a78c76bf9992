"""Fact extraction: prompts and parsing for an LLM, and an offline extractor."""

from chatmem.extraction.base import Extractor, Fact
from chatmem.extraction.dates import ResolvedDate, find_date
from chatmem.extraction.llm import LLMExtractor, facts_from_json, format_messages
from chatmem.extraction.offline import OfflineExtractor
from chatmem.extraction.poisoning import is_instruction_to_model
from chatmem.extraction.prompts import EXTRACTION_PROMPT

__all__ = [
    "EXTRACTION_PROMPT",
    "Extractor",
    "Fact",
    "LLMExtractor",
    "OfflineExtractor",
    "ResolvedDate",
    "facts_from_json",
    "find_date",
    "format_messages",
    "is_instruction_to_model",
]
