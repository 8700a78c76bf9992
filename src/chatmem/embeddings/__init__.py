"""Embedders: the local offline MiniLM (default) and an OpenAI-compatible client."""

from chatmem.embeddings.base import Embedder, embed_queries, embed_query
from chatmem.embeddings.local import LocalEmbedder
from chatmem.embeddings.openai import OpenAIEmbedder

__all__ = ["Embedder", "LocalEmbedder", "OpenAIEmbedder", "embed_queries", "embed_query"]
