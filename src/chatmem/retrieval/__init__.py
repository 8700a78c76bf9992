"""The retrieval pipeline (SPEC R1-R5, L6, F2): what long-term memory adds to one request.

A request's messages go through small named steps, each a plain function in a module of
its own:

1. ``decide`` (R1, ``decision``): search at all? Greetings, thanks, bare acknowledgements,
   tool turns and general-knowledge questions are skipped, unless the query is personal
   ("my", "I", "do you remember" …). Every skip is logged on ``chatmem.retrieval`` with its
   reason.
2. ``build_query`` (R2, ``query``): a vague query ("How much?") gets the key terms of the
   recent user turns prepended; with a ``memory_rewrite`` model, the model rewrites it
   instead; with HyDE, the model's hypothetical answer is what gets searched.
3. ``search`` (R3, ``hybrid_search``): hybrid search of the user's current memories, then a
   rerank (``reranking``, which also explains the score and the threshold).
4. ``expand`` (L6, ``expansion``): typed links followed one hop from the hits, within the
   same user.
5. ``inject`` (R4, ``injection``): one system message, "User's relevant context", after the
   application's own leading system messages, cut item by item to a token budget.
6. ``UsageRecorder`` (R5, ``usage``): last_accessed and access_count written in batches, off
   the request path.

``Retriever`` (``retriever``) runs them in order for one request. Search and expansion run
in a worker thread of the search pool (``search_pool``) with a time budget (default 50 ms):
past it, or when the embedder or the store fails, the request goes on without memory and
``Retrieval.degraded`` says why (F2). ``turns`` reads the chat messages for every step.
"""

from __future__ import annotations

from chatmem.retrieval.decision import (
    ACKNOWLEDGEMENTS,
    DEFAULT_RULES,
    FILLERS,
    GENERAL_KNOWLEDGE,
    GREETINGS,
    PERSONAL,
    THANKS,
    Decision,
    DecisionRules,
    decide,
)
from chatmem.retrieval.expansion import LINK_TYPES, MAX_LINKED, expand
from chatmem.retrieval.hybrid_search import CANDIDATE_FACTOR, search
from chatmem.retrieval.injection import (
    DEFAULT_HEADER,
    HEADER_FIELD,
    MEMORIES_FIELD,
    Packed,
    inject,
    insert_system,
    pack,
    render_memory,
)
from chatmem.retrieval.query import (
    ANAPHORS,
    GENERIC_WORDS,
    HYDE_PROMPT,
    MAX_CONTEXT_TERMS,
    MAX_REWRITE_CHARS,
    MAX_SHOWN_CHARS,
    REWRITE_PROMPT,
    SHORT_QUERY_WORDS,
    VAGUE_PATTERNS,
    Query,
    QueryMethod,
    build_query,
    context_terms,
    is_self_contained,
)
from chatmem.retrieval.reranking import (
    DEFAULT_WEIGHTS,
    RELEVANCE_REFERENCE,
    RerankWeights,
    RetrievedMemory,
    mark_updated,
    recency_score,
    relevance_scores,
    rerank,
    superseded_at,
)
from chatmem.retrieval.retriever import STEPS, AsyncRetriever, Retrieval, Retriever
from chatmem.retrieval.search_pool import QUEUE_DEPTH, default_search_workers
from chatmem.retrieval.turns import ChatMessage
from chatmem.retrieval.usage import UsageRecorder

__all__ = [
    "ACKNOWLEDGEMENTS",
    "ANAPHORS",
    "CANDIDATE_FACTOR",
    "DEFAULT_HEADER",
    "DEFAULT_RULES",
    "DEFAULT_WEIGHTS",
    "FILLERS",
    "GENERAL_KNOWLEDGE",
    "GENERIC_WORDS",
    "GREETINGS",
    "HEADER_FIELD",
    "HYDE_PROMPT",
    "LINK_TYPES",
    "MAX_CONTEXT_TERMS",
    "MAX_LINKED",
    "MAX_REWRITE_CHARS",
    "MAX_SHOWN_CHARS",
    "MEMORIES_FIELD",
    "PERSONAL",
    "QUEUE_DEPTH",
    "RELEVANCE_REFERENCE",
    "REWRITE_PROMPT",
    "SHORT_QUERY_WORDS",
    "STEPS",
    "THANKS",
    "VAGUE_PATTERNS",
    "AsyncRetriever",
    "ChatMessage",
    "Decision",
    "DecisionRules",
    "Packed",
    "Query",
    "QueryMethod",
    "RerankWeights",
    "Retrieval",
    "RetrievedMemory",
    "Retriever",
    "UsageRecorder",
    "build_query",
    "context_terms",
    "decide",
    "default_search_workers",
    "expand",
    "inject",
    "insert_system",
    "is_self_contained",
    "mark_updated",
    "pack",
    "recency_score",
    "relevance_scores",
    "render_memory",
    "rerank",
    "search",
    "superseded_at",
]
