"""Language models by role, over OpenAI-compatible endpoints."""

from chatmem.llm.base import ChatModel, ModelRole
from chatmem.llm.client import JsonMode, ModelConfig, ModelRegistry, OpenAIChatModel
from chatmem.llm.jsonfix import REPAIR_PROMPT, complete_json, parse_lenient

__all__ = [
    "REPAIR_PROMPT",
    "ChatModel",
    "JsonMode",
    "ModelConfig",
    "ModelRegistry",
    "ModelRole",
    "OpenAIChatModel",
    "complete_json",
    "parse_lenient",
]
