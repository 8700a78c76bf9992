"""The public surface changes only on purpose, and every public name is documented."""

from __future__ import annotations

import inspect

import typer.main

import chatmem
from chatmem.cli import app

EXPECTED = {
    "AccessControl",
    "AsyncClient",
    "AuthenticationError",
    "Client",
    "AsyncRetriever",
    "Decision",
    "DecisionRules",
    "Query",
    "RerankWeights",
    "Retrieval",
    "RetrievedMemory",
    "Retriever",
    "UsageRecorder",
    "Extraction",
    "consolidate",
    "reflect",
    "enforce_quota",
    "sweep_decay",
    "ExtractionScheduler",
    "InMemoryOutbox",
    "Outbox",
    "SQLiteOutbox",
    "Triggers",
    "Worker",
    "WriteConfig",
    "WritePolicy",
    "WriteReport",
    "LLMExtractor",
    "OfflineExtractor",
    "ModelConfig",
    "ModelRegistry",
    "OpenAIChatModel",
    "LLMError",
    "LLMResponseError",
    "LLMUnavailableError",
    "FactExtractionBlock",
    "MemoryBlock",
    "StaticBlock",
    "VectorBlock",
    "Extractor",
    "Fact",
    "ChatModel",
    "ModelRole",
    "Memory",
    "Message",
    "MessageMetadata",
    "MessageSource",
    "Role",
    "SessionKey",
    "InMemorySessionStore",
    "SessionStore",
    "SQLiteSessionStore",
    "open_session_store",
    "OverflowPolicy",
    "ShortTermMemory",
    "TokenCounter",
    "AsyncLongTermMemory",
    "ChatmemError",
    "ConfigError",
    "ConflictError",
    "Content",
    "DimensionError",
    "EmbedderMismatchError",
    "Embedder",
    "EmbeddingError",
    "Filter",
    "HistoryEntry",
    "HistoryEvent",
    "ImportFormatError",
    "LocalEmbedder",
    "LongTermMemory",
    "MemoryMetadata",
    "MemoryRecord",
    "MemoryStore",
    "MemoryType",
    "NotFoundError",
    "OpenAIEmbedder",
    "Page",
    "RankingConfig",
    "Relation",
    "RelationType",
    "Scope",
    "SearchResult",
    "Source",
    "StoreError",
    "StoreUnavailableError",
    "TimeInfo",
    "ValidationError",
    "__version__",
    "open_store",
}


def test_exported_names_are_pinned() -> None:
    assert set(chatmem.__all__) == EXPECTED
    for name in chatmem.__all__:
        assert hasattr(chatmem, name), name


def test_every_public_class_and_function_has_a_docstring() -> None:
    undocumented = []
    for name in chatmem.__all__:
        value = getattr(chatmem, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            if not inspect.getdoc(value) or inspect.getdoc(value) == inspect.getdoc(object):
                undocumented.append(name)
            for member, attribute in vars(value).items():
                is_public_method = inspect.isfunction(attribute) and not member.startswith("_")
                if is_public_method and not inspect.getdoc(attribute):
                    undocumented.append(f"{name}.{member}")
    assert undocumented == []


def test_every_cli_command_has_help() -> None:
    group = typer.main.get_command(app)
    commands = group.commands  # type: ignore[attr-defined]
    assert {
        "add",
        "search",
        "list",
        "get",
        "history",
        "forget",
        "export",
        "import",
        "stats",
        "demo",
    } <= set(commands)
    for name, command in commands.items():
        assert command.help, f"chatmem {name} has no help"
