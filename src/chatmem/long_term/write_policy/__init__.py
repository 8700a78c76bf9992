"""The write policy (SPEC L4): what each extracted fact does to a user's memories.

Every fact of a batch, in order, is

1. **screened**: dropped when its importance is under ``min_importance`` (0.3), its confidence
   under ``min_confidence`` (0.4), or when it reads as an instruction to the model (SPEC L9).
   A fact accusing someone else ("User's neighbour Tom is a thief") is first rewritten as the
   user's attributed claim, at confidence 0.4 with the ``claim`` tag
   (:func:`chatmem.extraction.poisoning.as_claim`).
   A fact that another fact of the batch, of another type, restates (:func:`duplicates`) is
   dropped too: the more specific type is kept ("User's dog is named Pixel", a profile, over
   "User's dog's name is Pixel");
2. **compared** with the user's *current* memories of the same type (``valid_to`` unset or in
   the future): the nearest by vector, and those with the same ``subject``; and with the
   nearest of the other fact types;
3. **decided** (:func:`decide`, pure). A restatement must keep the old memory's *details*
   (numbers, codes, names, dates: :mod:`chatmem.long_term.details`), so "visited the museum CHT29X"
   never replaces "… CHT77X", however close their vectors:

   - same subject, same value (their shared structured values agree) and the details
     agree → ``UPDATE`` that memory;
   - same subject, another value or other details → ``SUPERSEDE``: a new memory becomes
     current with an ``updates`` relation to the old one, which gets ``valid_to`` and stays
     stored, so ``Filter(valid_at=<before>)`` still answers "what was my budget before?"
     (SPEC X3);
   - cosine above ``update_similarity`` (0.9) and the details agree → ``UPDATE`` (version + 1,
     the store keeps the old version in the history);
   - a memory of another type says the same (the same details, and cosine above
     ``update_similarity`` or the same words) → ``SKIP``, or ``UPDATE`` it to the fact's
     type when that is the more specific (:func:`restated_across_types`);
   - otherwise → ``CREATE``.

   With a ``model``, one call per batch decides every fact that has candidates
   (:data:`DECISION_PROMPT`); an answer that names no valid action or target falls back to
   the rules, and so does the whole batch when the call fails.
4. **applied**, idempotently per batch: a created memory's id is derived from (batch id, fact
   index), and every memory the batch writes carries ``user_metadata["write_batch"]`` and
   ``["write_facts"]``. A batch run again after a crash (between the writes and the queue's
   ``complete``) skips the facts it already applied and finishes any half-done supersede, so
   it creates and updates nothing twice even when the memories live in another database than
   the queue.

One log line per batch (logger ``chatmem.write_policy``):
``Memory: stored N, updated M, superseded S, skipped K``.

- ``decision``: the thresholds (``WriteConfig``) and the pure rule decision (steps 1 and 3);
- ``candidates``: what a fact is compared with (step 2);
- ``model_advice``: the batched decision of a model;
- ``memories``: the records a decision writes (created, updated, closed);
- ``policy``: ``WritePolicy``, which runs the steps over a batch (step 4) and reports it.
"""

from __future__ import annotations

from chatmem.long_term.write_policy.decision import (
    Action,
    Decision,
    Existing,
    WriteConfig,
    decide,
    duplicates,
    keeps_details,
    restated_across_types,
    says_the_same,
    screen,
    subject_key,
    values_differ,
)
from chatmem.long_term.write_policy.memories import (
    BATCH_KEY,
    FACTS_KEY,
    SUBJECT_KEY,
    close_time,
    closed_record,
    created_record,
    is_current,
    memory_id,
    updated_record,
)
from chatmem.long_term.write_policy.model_advice import (
    DECISION_PROMPT,
    Question,
    decision_request,
    parse_decisions,
)
from chatmem.long_term.write_policy.policy import WritePolicy, WriteReport

__all__ = [
    "BATCH_KEY",
    "DECISION_PROMPT",
    "FACTS_KEY",
    "SUBJECT_KEY",
    "Action",
    "Decision",
    "Existing",
    "Question",
    "WriteConfig",
    "WritePolicy",
    "WriteReport",
    "close_time",
    "closed_record",
    "created_record",
    "decide",
    "decision_request",
    "duplicates",
    "is_current",
    "keeps_details",
    "memory_id",
    "parse_decisions",
    "restated_across_types",
    "says_the_same",
    "screen",
    "subject_key",
    "updated_record",
    "values_differ",
]
