"""Memories: entries with immutable revisions, their evidence, sharing, indexes, traces and ledgers.

Invariants held by the database itself (django-pgtrigger):
- revisions, evidence, ledger operations, rejections, trace items, retrieval events and management
  read events refuse UPDATE and DELETE; the one sanctioned deletion path disables those triggers for
  its own transaction;
- a sharing grant may only be revoked (``revoked_at`` set once), never edited;
- the revision full-text sidecar follows every insert and body change and cascades on delete.

A revision's ``audience_*`` columns are its *source audience*: computed once, at write time, from all
of its evidence, most restrictive wins (``history.audience.most_restrictive``).

One module per aggregate, every model importable from here:

- ``base``: the choices constraint and the short id a model cites;
- ``entries``: entries, revisions, their full-text sidecar, evidence and deleted revisions;
- ``sharing``: sharing requests and grants;
- ``embeddings``: embedding generations, revision and message vectors, the index outbox;
- ``traces``: recall traces and items, retrieval events, the ledger of operations;
- ``feedback``: revision conflicts, rejections (typed corrections) and recall misses;
- ``erasure``: erasure events;
- ``management``: the audit of the management API's reads.
"""

from memory.models.base import MemoryName, choices_constraint, parse_memory_name, parse_short_id, short_id
from memory.models.embeddings import (
    INDEXED_DIMS,
    EmbeddingGeneration,
    EmbeddingState,
    IndexOutbox,
    MessageEmbedding,
    OutboxTarget,
    RevisionEmbedding,
    cosine_hnsw,
    typed_vector,
    vector_dims_match,
)
from memory.models.entries import (
    CURRENT_REVISION_IS_OWN,
    PERSON_BELIEF_TYPES,
    Authority,
    BeliefType,
    DeletedRevision,
    EntryStatus,
    EvidenceKind,
    Lifecycle,
    MemoryEntry,
    MemoryEvidence,
    MemoryRevision,
    Portability,
    RevisionOrigin,
    RevisionSearchDocument,
)
from memory.models.erasure import ErasureEvent, ErasureKind, ErasureState
from memory.models.feedback import CorrectionRelation, RecallMiss, Rejection, RejectionKind, RevisionConflict
from memory.models.management import ManagementEndpoint, ManagementReadEvent
from memory.models.sharing import (
    GRANT_FROZEN_COLUMNS,
    ConsentRole,
    ConsentState,
    SharingConsent,
    SharingGrant,
    SharingRequest,
    SharingState,
)
from memory.models.traces import MemoryOperation, Operation, RecallMoment, RecallTrace, RecallTraceItem, RetrievalEvent

__all__ = [
    "CURRENT_REVISION_IS_OWN",
    "GRANT_FROZEN_COLUMNS",
    "INDEXED_DIMS",
    "PERSON_BELIEF_TYPES",
    "Authority",
    "BeliefType",
    "ConsentRole",
    "ConsentState",
    "CorrectionRelation",
    "DeletedRevision",
    "EmbeddingGeneration",
    "EmbeddingState",
    "EntryStatus",
    "ErasureEvent",
    "ErasureKind",
    "ErasureState",
    "EvidenceKind",
    "IndexOutbox",
    "Lifecycle",
    "ManagementEndpoint",
    "ManagementReadEvent",
    "MemoryEntry",
    "MemoryEvidence",
    "MemoryName",
    "MemoryOperation",
    "MemoryRevision",
    "MessageEmbedding",
    "Operation",
    "OutboxTarget",
    "Portability",
    "RecallMiss",
    "RecallMoment",
    "RecallTrace",
    "RecallTraceItem",
    "Rejection",
    "RejectionKind",
    "RetrievalEvent",
    "RevisionConflict",
    "RevisionEmbedding",
    "RevisionOrigin",
    "RevisionSearchDocument",
    "SharingConsent",
    "SharingGrant",
    "SharingRequest",
    "SharingState",
    "choices_constraint",
    "cosine_hnsw",
    "parse_memory_name",
    "parse_short_id",
    "short_id",
    "typed_vector",
    "vector_dims_match",
]
