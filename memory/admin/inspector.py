"""The entry inspector: everything an entry's page shows below the entry, each list in one query."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Prefetch

from memory.models import (
    MemoryEntry,
    MemoryEvidence,
    MemoryOperation,
    MemoryRevision,
    RecallTraceItem,
    Rejection,
    SharingConsent,
    SharingGrant,
    SharingRequest,
)

#: How many ledger operations and trace appearances an entry's page lists (newest first).
RECENT_OPERATIONS = 50
RECENT_TRACES = 20


# --------------------------------------------------------------------------------------------------
# entries: the inspector page, amend, forget, the review-flag queue
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EntryInspection:
    """Everything the entry page shows below the entry, each list loaded in one query."""

    revisions: list[MemoryRevision]
    grants: list[SharingGrant]
    requests: list[SharingRequest]
    operations: list[MemoryOperation]
    appearances: list[RecallTraceItem]
    #: Typed corrections and bystanders' reports (filed for review) of any revision, newest first.
    rejections: list[Rejection]


def entry_inspection(entry: MemoryEntry) -> EntryInspection:
    """The revision history (newest first, each with its evidence and source messages), grants and
    sharing requests of any revision, the latest ledger operations and the latest trace appearances."""
    evidence = MemoryEvidence.objects.select_related("message__actor", "operator", "actor").order_by("pk")
    revisions = list(
        MemoryRevision.objects.filter(entry=entry)
        .select_related("subject", "source_actor", "created_by_user", "restricted_to_conversation")
        .prefetch_related(Prefetch("evidence", queryset=evidence))
        .order_by("-number")
    )
    grants = list(
        SharingGrant.objects.filter(revision__entry=entry)
        .select_related("revision", "conversation", "granted_by_actor", "granted_by_user")
        .order_by("-pk")
    )
    requests = list(
        SharingRequest.objects.filter(revision__entry=entry)
        .select_related("revision", "conversation", "decided_by_user")
        .prefetch_related(Prefetch("consents", queryset=SharingConsent.objects.select_related("actor").order_by("pk")))
        .order_by("-pk")
    )
    operations = list(
        MemoryOperation.objects.filter(entry=entry).select_related("revision").order_by("-pk")[:RECENT_OPERATIONS]
    )
    appearances = list(
        RecallTraceItem.objects.filter(entry=entry)
        .select_related("trace", "revision")
        .order_by("-trace_id")[:RECENT_TRACES]
    )
    rejections = list(
        Rejection.objects.filter(revision__entry=entry)
        .select_related("revision", "resulting_revision", "user")
        .order_by("-pk")[:RECENT_OPERATIONS]
    )
    return EntryInspection(revisions, grants, requests, operations, appearances, rejections)
