"""The MCP tools: remember, recall, get_context, forget, list, history and update.

Each tool acts for one user of the caller's tenant and reads through ``Reader.filter``, so
a memory restricted to roles the caller lacks is never found, followed, listed or shown
(SPEC L7). The descriptions are written for the model that picks the tools.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any, Literal, NamedTuple

from mcp.server.mcpserver import Context
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from chatmem import retrieval
from chatmem.errors import ValidationError
from chatmem.long_term import Shortlisted
from chatmem.mcp.boundary import MemoryServer
from chatmem.mcp.caller import Caller, CallerOf
from chatmem.mcp.views import (
    ContextBlock,
    Forgotten,
    History,
    MemoryList,
    MemoryView,
    Reasons,
    Recalled,
    RecallResult,
    Remembered,
)
from chatmem.records import MAX_TEXT_CHARS, MemoryRecord, MemoryType, utcnow
from chatmem.retrieval.hybrid_search import reranked
from chatmem.tokens import message_tokens

#: Most memories one recall, get_context or list call returns.
MAX_K = 50
MAX_LIST = 100

Id = Annotated[str, Field(min_length=1, max_length=256)]
UserId = Annotated[
    Id | None,
    Field(description="The user whose memory this is. Leave it out to use the configured user."),
]
ProjectId = Annotated[Id | None, Field(description="Only this project's memories.")]
SessionId = Annotated[Id | None, Field(description="Only this conversation's memories.")]
Cursor = Annotated[str, Field(min_length=1, max_length=1024)]
Count = Annotated[int, Field(ge=1, le=MAX_K)]
Budget = Annotated[int, Field(ge=0, le=100_000)]
Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
Query = Annotated[
    str,
    Field(
        min_length=1,
        max_length=4000,
        description="What to look for, in the user's words or yours ('where does the user live').",
    ),
]
Unit = Annotated[float, Field(ge=0.0, le=1.0)]
Tag = Annotated[str, Field(min_length=1, max_length=64)]
Tags = Annotated[
    list[Tag] | None, Field(max_length=64, description="Short labels to file it under.")
]
Importance = Annotated[
    Unit | None,
    Field(description="How much it matters, 0 to 1 (default 0.5); important memories rank higher."),
]


# -- the work, one plain function a tool --------------------------------------------------------


def remember(
    caller: Caller,
    text: Annotated[Text, Field(description="The fact to keep, self-contained.")],
    *,
    user_id: UserId = None,
    type: Annotated[
        MemoryType | None, Field(description="The kind of memory (default semantic).")
    ] = None,
    importance: Importance = None,
    tags: Tags = None,
    project_id: ProjectId = None,
    session_id: SessionId = None,
    allowed_roles: Annotated[
        list[Id] | None,
        Field(max_length=64, description="Only callers holding one of these roles see it."),
    ] = None,
) -> Remembered:
    caller.reader.check_grant(allowed_roles)
    try:
        added = caller.memory.add(
            text,
            user_id=caller.user(user_id),
            tenant_id=caller.reader.tenant_id,
            type=type,
            importance=importance,
            tags=tags,
            project_id=project_id,
            session_id=session_id,
            allowed_roles=allowed_roles or None,
        )
    except ValidationError as exc:
        # The text is "messages[0].content" to LongTermMemory.add; name the argument.
        if (exc.field or "").startswith(("messages[0]", "content")):
            raise ValidationError(exc.message.removeprefix("Value error, "), field="text") from None
        raise
    return Remembered(memories=[MemoryView.of(r) for r in added])


def recall(
    caller: Caller,
    query: Query,
    *,
    user_id: UserId = None,
    k: Annotated[Count | None, Field(description="Most results (5).")] = None,
    threshold: Annotated[
        Unit | None, Field(description="Least relevance, 0 to 1 (0.6); 0 returns the best k.")
    ] = None,
    types: Annotated[
        list[MemoryType] | None, Field(min_length=1, description="Only these kinds.")
    ] = None,
    project_id: ProjectId = None,
    session_id: SessionId = None,
    include_superseded: Annotated[
        bool, Field(description="Also facts that are no longer true.")
    ] = False,
) -> RecallResult:
    """``retrieval.search``'s steps (the shortlist, then the rerank from its heads, repeats
    last), keeping the store's cosine and BM25 of each memory for its reasons."""
    user = caller.user(user_id)
    k = caller.k if k is None else k
    threshold = caller.threshold if threshold is None else threshold
    scope = caller.reader.filter(
        types=frozenset(types) if types else None, project_id=project_id, session_id=session_id
    )
    found = caller.memory.shortlist(
        query,
        user_id=user,
        tenant_id=caller.reader.tenant_id,
        k=k * retrieval.CANDIDATE_FACTOR,
        threshold=threshold * retrieval.RELEVANCE_REFERENCE,
        filter=scope,
        include_superseded=True,
    )
    kept = reranked(
        caller.memory,
        found,
        user_id=user,
        tenant_id=caller.reader.tenant_id,
        filter=scope,
        k=k,
        threshold=threshold,
        now=utcnow(),
        include_superseded=include_superseded,
    )
    return RecallResult(user_id=user, results=[_recalled(m, listed) for m, listed in kept])


def _recalled(memory: retrieval.RetrievedMemory, found: Shortlisted) -> Recalled:
    record = memory.record
    why = []
    if found.keyword_score is not None:
        why.append(f"shares words with the query, BM25 {found.keyword_score:.2f}")
    if found.vector_score is not None:
        why.append(f"close in meaning, cosine {found.vector_score:.2f}")
    if not memory.current:
        why.append("no longer true: superseded")
    reasons = Reasons(
        cosine=found.vector_score,
        bm25=found.keyword_score,
        fused=found.score,
        relevance=memory.relevance,
        recency=memory.recency,
        importance=record.metadata.importance,
        why="; ".join(why) or "ranked by the hybrid score",
    )
    return Recalled(memory=MemoryView.of(record), score=memory.score, reasons=reasons)


def get_context(
    caller: Caller,
    query: Query,
    *,
    user_id: UserId = None,
    max_tokens: Annotated[
        Budget | None, Field(description="Token budget of the block (1000).")
    ] = None,
    k: Annotated[Count | None, Field(description="Most memories (5).")] = None,
    project_id: ProjectId = None,
) -> ContextBlock:
    """Search, follow links, pack (``retrieval``'s steps 3-5): the block the chat proxy
    would inject for ``query``, within ``max_tokens``."""
    user = caller.user(user_id)
    roles, tenant = caller.reader.roles, caller.reader.tenant_id
    hits = retrieval.search(
        caller.memory,
        query,
        user_id=user,
        tenant_id=tenant,
        k=caller.k if k is None else k,
        threshold=caller.threshold,
        project_id=project_id,
        roles=roles,
    )
    linked = retrieval.expand(caller.memory, hits, user_id=user, tenant_id=tenant, roles=roles)
    shown = [*hits, *linked]
    budget = caller.budget_tokens if max_tokens is None else max_tokens
    packed = retrieval.pack(
        [retrieval.render_memory(m) for m in shown], counter=caller.counter, budget_tokens=budget
    )
    cost = 0
    if packed.kept:
        cost = message_tokens(caller.counter, {"role": "system", "content": packed.content})
    return ContextBlock(
        context=packed.content,
        tokens=cost,
        memory_ids=[shown[i].record.id for i in packed.kept],
        left_out=len(shown) - len(packed.kept),
    )


ForgetScope = Literal["user", "session", "project"]


def forget(
    caller: Caller,
    *,
    memory_id: Annotated[Id | None, Field(description="The memory to delete.")] = None,
    scope: Annotated[
        ForgetScope | None, Field(description="Delete a whole user, session or project.")
    ] = None,
    user_id: UserId = None,
    session_id: Annotated[Id | None, Field(description="For scope session.")] = None,
    project_id: Annotated[Id | None, Field(description="For scope project.")] = None,
) -> Forgotten:
    user = caller.user(user_id)
    if (memory_id is None) == (scope is None):
        raise ValidationError("give exactly one of memory_id and scope", field="memory_id")
    if memory_id is not None:
        _visible(caller, memory_id, user)
        caller.memory.delete(
            memory_id, tenant_id=caller.reader.tenant_id, user_id=user, reason="forgotten (MCP)"
        )
        return Forgotten(deleted=1)
    narrow: dict[str, Any] = {"user_id": user}
    if scope == "session":
        narrow["session_id"] = _needed(session_id, "session_id", scope)
    elif scope == "project":
        narrow["project_id"] = _needed(project_id, "project_id", scope)
    deleted = caller.memory.delete_all(caller.reader.filter(**narrow), reason="forgotten (MCP)")
    return Forgotten(deleted=deleted)


def _needed(value: str | None, name: str, scope: str) -> str:
    if value is None:
        raise ValidationError(f"is required to forget a {scope}", field=name)
    return value


def list_memories(
    caller: Caller,
    *,
    user_id: UserId = None,
    type: Annotated[MemoryType | None, Field(description="Only this kind.")] = None,
    project_id: ProjectId = None,
    session_id: SessionId = None,
    limit: Annotated[int, Field(ge=1, le=MAX_LIST, description="Page size.")] = 20,
    cursor: Annotated[Cursor | None, Field(description="next_cursor of the last page.")] = None,
) -> MemoryList:
    scope = caller.reader.filter(
        user_id=caller.user(user_id),
        types=frozenset({type}) if type else None,
        project_id=project_id,
        session_id=session_id,
    )
    page = caller.memory.list(scope, limit=limit, cursor=cursor)
    return MemoryList(
        memories=[MemoryView.of(r) for r in page.records], next_cursor=page.next_cursor
    )


def history(caller: Caller, memory_id: Id, *, user_id: UserId = None) -> History:
    entries = caller.memory.history(
        memory_id,
        tenant_id=caller.reader.tenant_id,
        user_id=caller.user(user_id),
        roles=caller.reader.roles,
    )
    return History.of(memory_id, entries)


def update(
    caller: Caller,
    memory_id: Id,
    *,
    text: Annotated[Text | None, Field(description="The corrected text.")] = None,
    importance: Importance = None,
    tags: Tags = None,
    reason: Annotated[
        Annotated[str, Field(max_length=1000)] | None,
        Field(description="Why it changed (kept in history)."),
    ] = None,
    user_id: UserId = None,
) -> MemoryView:
    if text is None and importance is None and tags is None:
        raise ValidationError("nothing to update: give text, importance or tags", field="text")
    user = caller.user(user_id)
    _visible(caller, memory_id, user)
    record = caller.memory.update(
        memory_id,
        text,
        tenant_id=caller.reader.tenant_id,
        user_id=user,
        importance=importance,
        tags=tags,
        reason=reason or "updated (MCP)",
    )
    return MemoryView.of(record)


def _visible(caller: Caller, memory_id: str, user: str) -> MemoryRecord:
    """The record, or NotFoundError when it is absent or hidden from the caller: writes
    touch only what the caller may read."""
    reader = caller.reader
    return caller.memory.get(
        memory_id, tenant_id=reader.tenant_id, user_id=user, roles=reader.roles
    )


# -- registration --------------------------------------------------------------------------------

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DELETES = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

REMEMBER = """\
Store one memory for the user, to be recalled in later conversations.

Call it when the user tells you something worth keeping: a preference ("I'm vegetarian"), a
fact about them or their work, a decision, a correction. Write one self-contained fact per
call, in the third person, with the date if it matters ("User moved to Berlin in May 2024").
Do not store small talk, secrets the user did not ask you to keep, or what you can look up.

Returns the stored memory (a text over 32,000 characters is stored as several parts) with its
id, which update, history and forget take. allowed_roles restricts who may read it: only
callers holding one of those roles will see it."""

RECALL = """\
Search the user's long-term memory and return the best matches with their scores and the
reasons for them.

Call it before answering anything that may depend on what the user said in earlier
conversations: their preferences, facts about them, their projects, past decisions. The search
is hybrid (meaning and keywords): cosine is the similarity of meaning, bm25 the keyword match,
fused their combination, and score the final rank (relevance, recency and importance).

Returns at most k memories (default 5, at most 50) whose relevance is at least threshold
(default 0.6), best first; none when nothing is relevant. Facts that were superseded are left
out unless include_superseded is true. Use get_context instead for a ready-to-use text block."""

GET_CONTEXT = """\
Return the user's memories relevant to a query as one text block that fits in max_tokens,
ready to put in your prompt ("User's relevant context:" and one dated line a memory).

Call it at the start of a task, or when a question may depend on the user's history, to load
what memory knows in one step. The block holds the same memories recall finds (and the ones
they link to, such as the earlier value of an updated fact), most relevant first, cut to the
token budget (default 1000). memory_ids lists what is in it; left_out counts what did not fit.
An empty context means nothing relevant is stored."""

FORGET = """\
Delete memories: one by memory_id, or all of the user's (scope "user"), one conversation's
(scope "session", with session_id) or one project's (scope "project", with project_id).

Call it only when the user asks you to forget something. It cannot be undone (the history of
each memory is kept). Give exactly one of memory_id and scope. Memories restricted to roles
you do not hold are neither deleted nor counted. Returns how many memories were deleted."""

LIST = """\
List the user's memories, oldest first, a page at a time.

Call it to review or audit what is stored (recall is better for finding something specific).
Returns at most limit memories (default 20, at most 100) and next_cursor: pass it back as
cursor for the next page; null means there are no more. A page can hold fewer than limit
memories when some are restricted to roles you do not hold."""

HISTORY = """\
Show every version of one memory, oldest first: when it was added, each update with the text
before and after and the reason, and its deletion.

Call it when the user asks how or when a memory changed, or where a fact came from."""

UPDATE = """\
Change a stored memory: its text, importance or tags. The version goes up and history keeps
the old text.

Call it when the user corrects something you remembered ("actually I moved to Paris"); prefer
it over remembering a contradicting fact. Get memory_id from recall or list. Returns the
updated memory."""


class ToolSpec(NamedTuple):
    """One tool: its name, the plain function that does its work (whose parameters after
    the caller, with their annotations, are the tool's arguments and schema), the text the
    model reads and its hints."""

    name: str
    work: Callable[..., BaseModel]
    description: str
    annotations: ToolAnnotations


#: The tools, in the order a client lists them.
TOOLS = (
    ToolSpec("remember", remember, REMEMBER, WRITES),
    ToolSpec("recall", recall, RECALL, READ_ONLY),
    ToolSpec("get_context", get_context, GET_CONTEXT, READ_ONLY),
    ToolSpec("forget", forget, FORGET, DELETES),
    ToolSpec("list", list_memories, LIST, READ_ONLY),
    ToolSpec("history", history, HISTORY, READ_ONLY),
    ToolSpec("update", update, UPDATE, WRITES),
)


def as_tool(spec: ToolSpec, caller_of: CallerOf) -> Callable[..., BaseModel]:
    """``spec.work`` as the SDK calls a tool: a ``ctx`` in place of the caller (whom
    ``caller_of`` finds from it), then the work's own parameters, which make the schema."""

    def tool(ctx: Context[Any, Any], **arguments: Any) -> BaseModel:
        return spec.work(caller_of(ctx), **arguments)

    signature = inspect.signature(spec.work, eval_str=True)
    keyword = inspect.Parameter.POSITIONAL_OR_KEYWORD
    context = inspect.Parameter("ctx", keyword, annotation=Context[Any, Any])
    rest = [p.replace(kind=keyword) for p in list(signature.parameters.values())[1:]]
    tool.__signature__ = signature.replace(parameters=[context, *rest])  # type: ignore[attr-defined]
    tool.__annotations__ = {p.name: p.annotation for p in [context, *rest]}
    tool.__annotations__["return"] = signature.return_annotation
    tool.__name__ = tool.__qualname__ = f"{spec.name}_tool"  # names the schema's models
    return tool


def register(server: MemoryServer, caller_of: CallerOf) -> None:
    """Add the tools to ``server``, each acting for ``caller_of(ctx)``."""
    for spec in TOOLS:
        add = server.tool(
            name=spec.name, description=spec.description, annotations=spec.annotations
        )
        add(as_tool(spec, caller_of))


__all__ = [
    "TOOLS",
    "ContextBlock",
    "Forgotten",
    "History",
    "MemoryList",
    "MemoryView",
    "Reasons",
    "RecallResult",
    "Recalled",
    "Remembered",
    "ToolSpec",
    "as_tool",
    "forget",
    "get_context",
    "history",
    "list_memories",
    "recall",
    "register",
    "remember",
    "update",
]
