"""Operator admin for memories: entries with their revision history, evidence, sharing, indexes,
traces and the committed ledger, and the review queues (flagged entries, unresolved conflicts,
pending sharing requests).

Revisions, evidence, ledger rows, traces and audit events are immutable, so their pages are read-only.
An entry is never edited in place: "Amend this memory" writes revision N+1 through ``revision_amend``
with the operator as provenance; forgetting, clearing a review flag, resolving a conflict, deciding a
sharing request and revoking a grant each go through their service, like every other write.

Each module registers its pages when imported: ``entries`` (with the ``inspector`` and the ``amend``
form), ``revisions``, ``conflicts``, ``sharing``, ``indexes``, ``traces`` (with the ledger),
``feedback``, ``people`` (data rights) and ``management`` (the audit of the management API's reads);
``memory.previews`` adds the recall preview to history's conversation and turn pages.
"""

from memory.admin import (  # noqa: F401
    conflicts,
    entries,
    feedback,
    indexes,
    management,
    people,
    revisions,
    sharing,
    traces,
)
from memory.previews import ConversationPreviewAdmin, TurnPreviewAdmin  # noqa: F401 (registers them)
