"""Search with explanations (issue 13, item 3): a query run as the chat proxy would run it,
with every step shown.

The steps are ``chatmem.retrieval``'s own functions (``decide``, ``build_query``,
``relevance_scores``, ``rerank``, ``expand``, ``render_memory``, ``pack``,
``insert_system``) with the service's retriever settings, so what the page says would be
injected is what a chat request would get. One difference: the candidates are read with no
threshold, so the hits that fall under it are shown too, each with why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from chatmem import retrieval
from chatmem.errors import ValidationError
from chatmem.records import MAX_TEXT_CHARS, SearchResult, utcnow
from chatmem.retrieval import Decision, Query, RetrievedMemory, Retriever
from chatmem.server.auth import Reader
from chatmem.server.ui.browse import long_term
from chatmem.server.ui.login import ViewerDep, runtime_of
from chatmem.server.ui.render import page


@dataclass
class SearchForm:
    q: str = ""
    k: str = ""
    threshold: str = ""
    budget: str = ""
    force: str = ""
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hit:
    """One candidate with every part of its score, and what became of it."""

    result: SearchResult
    relevance: float
    recency: float
    importance: float
    final: float
    superseded: bool
    passed: bool
    kept: bool
    injected: bool


@dataclass
class Explanation:
    decision: Decision
    query: Query | None = None
    hits: list[Hit] = field(default_factory=list)
    linked: list[RetrievedMemory] = field(default_factory=list)
    injected_lines: list[str] = field(default_factory=list)
    system_message: str | None = None
    injected_ids: set[str] = field(default_factory=set)
    messages: list[dict[str, object]] = field(default_factory=list)
    k: int = 5
    threshold: float = 0.6
    budget: int = 1000


def search_form(params: Mapping[str, str], retriever: Retriever) -> SearchForm:
    """The form's fields, each bad one named in ``errors``."""
    form = SearchForm()
    for name in ("q", "k", "threshold", "budget", "force"):
        setattr(form, name, params.get(name, "").strip())
    if len(form.q) > MAX_TEXT_CHARS:
        form.errors["q"] = f"at most {MAX_TEXT_CHARS} characters"
    _number(form, "k", int, 1, 100)
    _number(form, "threshold", float, 0.0, 1.0)
    _number(form, "budget", int, 0, 100_000)
    return form


def _number(form: SearchForm, name: str, kind: type, low: float, high: float) -> None:
    text = getattr(form, name)
    if not text:
        return
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not low <= value <= high or value != value:
        shown = "a whole number" if kind is int else "a number"
        form.errors[name] = f"{shown} from {low:g} to {high:g}"


def explain(retriever: Retriever, reader: Reader, user_id: str, form: SearchForm) -> Explanation:
    """Every step of retrieval for ``form.q`` as ``user_id`` asking in a chat."""
    k = int(form.k) if form.k else retriever.k
    threshold = float(form.threshold) if form.threshold else retriever.threshold
    budget = int(form.budget) if form.budget else retriever.budget_tokens
    messages = [{"role": "user", "content": form.q}]
    decision = retrieval.decide(messages, retriever.rules)
    out = Explanation(decision, k=k, threshold=threshold, budget=budget)
    if not decision.search and not form.force:
        return out
    out.query = retrieval.build_query(
        messages,
        rewriter=retriever.rewriter,
        hyde=retriever.hyde,
        context_turns=retriever.context_turns,
    )
    now = utcnow()
    found = retriever.long_term.search(
        out.query.text,
        user_id=user_id,
        tenant_id=reader.tenant_id,
        k=k * retrieval.CANDIDATE_FACTOR,
        threshold=0.0,
        filter=reader.filter(),
        include_superseded=True,
    )
    current = [r for r in found if retrieval.superseded_at(r.record, now) is None]
    kept = retrieval.rerank(
        current,
        k=k,
        threshold=threshold,
        weights=retriever.weights,
        now=now,
        repeats=retriever.long_term.ranking.repeats_last,  # as the proxy keeps them
    )
    if kept and retriever.hops > 0:
        out.linked = retrieval.expand(
            retriever.long_term,
            kept,
            user_id=user_id,
            tenant_id=reader.tenant_id,
            hops=retriever.hops,
            types=retriever.link_types,
            now=now,
            roles=reader.roles,
        )
    _inject(out, retriever, messages, [*kept, *out.linked])
    out.hits = _hits(found, current, kept, out, retriever, now)
    return out


def _inject(
    out: Explanation,
    retriever: Retriever,
    messages: list[dict[str, str]],
    chosen: list[RetrievedMemory],
) -> None:
    lines = [retrieval.render_memory(m) for m in chosen]
    packed = retrieval.pack(
        lines,
        counter=retriever.counter,
        budget_tokens=out.budget,
        template=retriever.template,
        header=retriever.header,
    )
    injected = [chosen[i] for i in packed.kept]
    out.injected_lines = [lines[i] for i in packed.kept]
    out.injected_ids = {m.record.id for m in injected}
    if packed.kept:
        out.system_message = packed.content
        out.messages = retrieval.insert_system(messages, packed.content)


def _hits(
    found: list[SearchResult],
    current: list[SearchResult],
    kept: list[RetrievedMemory],
    out: Explanation,
    retriever: Retriever,
    now: datetime,
) -> list[Hit]:
    """Every candidate, scored as ``rerank`` scores it (relevance relative to the best
    current candidate, as the proxy, which never sees superseded ones, measures it)."""
    scale = max([r.score for r in current] + [retrieval.RELEVANCE_REFERENCE])
    weights = retriever.weights
    kept_ids = {m.record.id for m in kept}
    hits = []
    for result in found:
        rel = min(max(result.score / scale, 0.0), 1.0)
        recency = retrieval.recency_score(result.record, now, weights.half_life_days)
        importance = result.record.metadata.importance
        final = weights.relevance * rel + weights.recency * recency
        final += weights.importance * importance
        hits.append(
            Hit(
                result,
                rel,
                recency,
                importance,
                final,
                retrieval.superseded_at(result.record, now) is not None,
                rel >= out.threshold,
                result.record.id in kept_ids,
                result.record.id in out.injected_ids,
            )
        )
    return hits


router = APIRouter(prefix="/ui", include_in_schema=False)


@router.get("/users/{user_id}/search", response_class=HTMLResponse)
def search_page(request: Request, viewer: ViewerDep, user_id: str) -> HTMLResponse:
    """The search form and, for a query, its explanation (the results alone for htmx)."""
    runtime = runtime_of(request)
    long_term(runtime)
    retriever = runtime.retriever
    assert retriever is not None  # memory on means a retriever
    form = search_form(request.query_params, retriever)
    explained = None
    if form.q and not form.errors:
        try:
            explained = explain(retriever, viewer.reader, user_id, form)
        except ValidationError as exc:
            form.errors[exc.field if exc.field in ("k", "threshold") else "q"] = exc.message
    elif "q" in request.query_params and not form.q:
        form.errors["q"] = "type a question, as the user would ask it"
    return page(
        request,
        "search.html",
        viewer,
        status=400 if form.errors else 200,
        fragment="_search_results.html",
        user_id=user_id,
        form=form,
        explained=explained,
        retriever=retriever,
    )


__all__ = ["Explanation", "Hit", "explain", "router", "search_form"]
