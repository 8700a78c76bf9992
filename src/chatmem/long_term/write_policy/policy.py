"""``WritePolicy``, which applies the write policy to a batch of facts: screens them, asks
the model (if any) once, decides each fact, writes it, and reports the batch in one log
line. A batch run again writes nothing twice (see ``chatmem.long_term.write_policy``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from chatmem.errors import LLMError
from chatmem.extraction.base import Fact
from chatmem.extraction.poisoning import as_claim
from chatmem.llm.base import ChatModel
from chatmem.llm.jsonfix import complete_json
from chatmem.long_term.facade import LongTermMemory
from chatmem.long_term.write_policy.candidates import Candidates, CandidateSearch, all_records
from chatmem.long_term.write_policy.decision import (
    Action,
    Decision,
    WriteConfig,
    decide,
    duplicates,
    restated_across_types,
    screen,
)
from chatmem.long_term.write_policy.memories import (
    BATCH_KEY,
    FACTS_KEY,
    close_time,
    closed_record,
    created_record,
    is_current,
    updated_record,
)
from chatmem.long_term.write_policy.model_advice import (
    DECISION_PROMPT,
    Question,
    decision_request,
    parse_decisions,
)
from chatmem.messages import SessionKey
from chatmem.records import (
    EmbeddingInfo,
    Entry,
    Filter,
    MemoryRecord,
    RelationType,
    Vector,
    new_id,
    utcnow,
)
from chatmem.stores.base import Change

logger = logging.getLogger("chatmem.write_policy")


@dataclass(frozen=True)
class WriteReport:
    """What one batch did. ``skipped_reasons`` counts the skipped facts by reason."""

    stored: int = 0
    updated: int = 0
    superseded: int = 0
    skipped: int = 0
    skipped_reasons: dict[str, int] = field(default_factory=dict)
    #: Ids of the memories created or updated, in order.
    memory_ids: tuple[str, ...] = ()

    def line(self) -> str:
        """The batch's log line (the seed's success criterion)."""
        return (
            f"Memory: stored {self.stored}, updated {self.updated}, "
            f"superseded {self.superseded}, skipped {self.skipped}"
        )


class WritePolicy:
    """Applies the write policy to a batch of facts (see the module docstring).

    ``model`` makes one batched decision call per batch; without it the rules decide.
    """

    def __init__(
        self,
        config: WriteConfig | None = None,
        *,
        model: ChatModel | None = None,
        prompt: str = DECISION_PROMPT,
    ) -> None:
        self.config = config or WriteConfig()
        self.model = model
        self.prompt = prompt

    def apply(
        self,
        long_term: LongTermMemory,
        key: SessionKey,
        facts: Sequence[Fact],
        *,
        batch_id: str | None = None,
        now: datetime | None = None,
        project_id: str | None = None,
    ) -> WriteReport:
        """Store ``facts`` for ``key``'s user and log one line. Give the queue's
        ``batch_id`` to make a second run of the same batch write nothing new. With
        ``project_id``, the facts are that project's: compared with its memories only, and
        stored in it."""
        batch = _Batch(self, long_term, key, batch_id or new_id(), now or utcnow(), project_id)
        report = batch.run(facts)
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(report.skipped_reasons.items()))
        logger.info(
            "%s (batch %s, user %s%s)",
            report.line(),
            batch.batch_id,
            key.user_id,
            f"; skipped: {reasons}" if reasons else "",
            extra={
                "batch_id": batch.batch_id,
                "tenant_id": key.tenant_id,
                "user_id": key.user_id,
                "stored": report.stored,
                "updated": report.updated,
                "superseded": report.superseded,
                "skipped": report.skipped,
            },
        )
        return report

    def ask_model(self, questions: Sequence[Question]) -> dict[int, Decision]:
        """The model's decisions for ``questions`` (one call); none when there is no model,
        no question, or the call fails (the rules decide then; a warning is logged)."""
        if self.model is None or not questions:
            return {}
        try:
            value = complete_json(
                self.model, decision_request(questions, self.prompt), expect="array"
            )
        except LLMError as exc:
            logger.warning("write decision by the model failed, the rules decide: %s", exc)
            return {}
        return parse_decisions(value, questions)


class _Batch:
    """One run of the policy over one batch: its scope, clock, counters and store calls."""

    def __init__(
        self,
        policy: WritePolicy,
        long_term: LongTermMemory,
        key: SessionKey,
        batch_id: str,
        now: datetime,
        project_id: str | None = None,
    ) -> None:
        self.policy = policy
        self.config = policy.config
        self.long_term = long_term
        self.store = long_term.store
        self.embedder = long_term.embedder
        self.key = key
        self.batch_id = batch_id
        self.now = now
        self.project_id = project_id
        self.scope = Filter(tenant_id=key.tenant_id, user_id=key.user_id, project_id=project_id)
        self.info = EmbeddingInfo(model=self.embedder.model, dimension=self.embedder.dimension)
        self.search = CandidateSearch(self.store, self.scope, now, self.config)
        self.counts: Counter[Action] = Counter()
        self.skipped: Counter[str] = Counter()
        self.touched: list[str] = []

    def run(self, facts: Sequence[Fact]) -> WriteReport:
        # A claim of wrongdoing by someone else is kept as the user's word (SPEC L9).
        facts = [as_claim(fact) for fact in facts]
        applied = self._applied_facts()
        todo: list[int] = []
        for index, fact in enumerate(facts):
            reason = "already applied" if index in applied else screen(fact, self.config)
            if reason is None:
                todo.append(index)
            else:
                self.skipped[reason] += 1
        vectors = self._embed([facts[i] for i in todo])
        dropped = duplicates([facts[i] for i in todo], vectors, self.config)
        if dropped:
            self.skipped["duplicate in batch"] += len(dropped)
            todo = [i for n, i in enumerate(todo) if n not in dropped]
            vectors = [v for n, v in enumerate(vectors) if n not in dropped]
        advice = self._advice(facts, todo, vectors)
        for index, vector in zip(todo, vectors, strict=True):
            self._write(index, facts[index], vector, advice.get(index))
        return WriteReport(
            stored=self.counts[Action.CREATE],
            updated=self.counts[Action.UPDATE],
            superseded=self.counts[Action.SUPERSEDE],
            skipped=sum(self.skipped.values()),
            skipped_reasons=dict(self.skipped),
            memory_ids=tuple(self.touched),
        )

    def _embed(self, facts: Sequence[Fact]) -> list[Vector]:
        if not facts:
            return []
        return list(self.embedder.embed([fact.text for fact in facts]))

    # -- idempotency ---------------------------------------------------------------------

    def _applied_facts(self) -> set[int]:
        """Indexes of facts an earlier run of this batch wrote; finishes any supersede that
        run left half done (new memory stored, old one not yet closed)."""
        scope = self.scope.model_copy(update={"metadata": {BATCH_KEY: self.batch_id}})
        written = all_records(self.store, scope)
        applied: set[int] = set()
        for record in written:
            marker = record.user_metadata.get(FACTS_KEY)
            applied.update(i for i in marker or [] if isinstance(i, int))
            targets = [r.target_id for r in record.relations if r.type is RelationType.UPDATES]
            self._close(targets, by=record)
        return applied

    # -- decisions -----------------------------------------------------------------------

    def _advice(
        self, facts: Sequence[Fact], todo: Sequence[int], vectors: Sequence[Vector]
    ) -> dict[int, Decision]:
        """The model's decisions, asked once for every fact that has candidates."""
        if self.policy.model is None:
            return {}
        questions = []
        for index, vector in zip(todo, vectors, strict=True):
            found = self.search.find(facts[index], vector)
            related = [
                e for e in found.nearest if (e.similarity or 0.0) >= self.config.related_similarity
            ]
            shown = {e.record.id: e for e in [*found.same, *related]}
            if shown:
                questions.append(Question(index, facts[index], tuple(shown.values())))
        return self.policy.ask_model(questions)

    def _decision(self, fact: Fact, found: Candidates, advice: Decision | None) -> Decision:
        """The model's advice when it still fits what is stored now, else the rules'.

        Advice is dropped when a target stopped being current, or when a memory this batch
        wrote is among the candidates (the model was asked before it existed). The model
        sees memories of the fact's type only: a ``CREATE`` it advises still yields to a
        memory of another type that says the same.
        """
        live = {e.record.id: e.record for e in [*found.nearest, *found.same]}
        ours = any(r.user_metadata.get(BATCH_KEY) == self.batch_id for r in live.values())
        if advice is not None and not ours and all(t in live for t in advice.targets):
            if advice.action is Action.CREATE:
                return restated_across_types(fact, found.elsewhere, self.config) or advice
            return advice
        return decide(fact, found.nearest, found.same, self.config, found.elsewhere)

    # -- writes --------------------------------------------------------------------------

    def _write(self, index: int, fact: Fact, vector: Vector, advice: Decision | None) -> None:
        found = self.search.find(fact, vector)
        decision = self._decision(fact, found, advice)
        live = {e.record.id: e.record for e in [*found.nearest, *found.same, *found.elsewhere]}
        if decision.action is Action.SKIP:
            self.skipped["already known"] += 1
            return
        if decision.action is Action.UPDATE:
            old = live[decision.targets[0]]
            new = updated_record(old, fact, index, self.batch_id, self.now)
            reason = f"write policy: {decision.reason} (batch {self.batch_id})"
            self.store.update([Change(new, vector, old.metadata.version, reason)])
            self.long_term.keep_word_states([new])
            self.touched.append(new.id)
        else:
            supersedes = decision.targets if decision.action is Action.SUPERSEDE else ()
            record = created_record(
                fact, self.key, index, self.batch_id, self.now, supersedes, self.project_id
            )
            self.store.put([Entry(record.model_copy(update={"embedding": self.info}), vector)])
            self.long_term.keep_word_states([record])
            self.touched.append(record.id)
            self._close(list(supersedes), by=record)
        self.counts[decision.action] += 1

    def _close(self, ids: Sequence[str], by: MemoryRecord | None = None) -> None:
        """End the validity of the still-current memories among ``ids`` (superseded)."""
        if not ids:
            return
        olds = [r for r in self.store.get(list(ids), self.scope) if is_current(r, self.now)]
        if not olds:
            return
        new_from = self.now
        if by is not None and by.time.valid_from is not None:
            new_from = by.time.valid_from
        reason = f"write policy: superseded{f' by {by.id}' if by else ''} (batch {self.batch_id})"
        self.store.update(
            [
                Change(
                    closed_record(old, close_time(old, new_from), self.now),
                    None,
                    old.metadata.version,
                    reason,
                )
                for old in olds
            ]
        )
