"""The patterns of the offline extractor, and how each match becomes a draft fact.

Each :class:`Rule` is a compiled pattern over one sentence and a builder that writes the
match in the third person with its context ("User loves hiking in the Alps"), picks a type
and a subject, and resolves dates for events and plans. :func:`drafts` runs them all.

The rules come in families, a module each: ``identity`` (name, age, job, studies),
``location`` (home, origin, birth), ``preferences`` (likes, favourites, diet, allergies,
requests), ``plans`` (plans and goals), ``events`` (events, experiences, activities,
habits), ``possessions``, ``people`` and ``facts`` ("my X is Y"). They share ``base`` (the
sentence, the draft and the rule), ``vocabulary`` (regex pieces and word lists) and
``wording`` (how an object is cleaned and when it is skipped); ``matcher`` puts them in order
and runs them.
"""

from chatmem.extraction.rules.base import Draft, Rule, Sentence
from chatmem.extraction.rules.matcher import RULES, drafts

__all__ = ["RULES", "Draft", "Rule", "Sentence", "drafts"]
