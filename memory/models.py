"""Memories: entries with immutable revisions, their evidence, sharing, indexes, traces and ledgers.

Invariants held by the database itself (django-pgtrigger):
- revisions, evidence, ledger operations, rejections, trace items and retrieval events refuse UPDATE
  and DELETE; the one sanctioned deletion path disables those triggers for its own transaction;
- a sharing grant may only be revoked (``revoked_at`` set once), never edited;
- the revision full-text sidecar follows every insert and body change and cascades on delete.

A revision's ``audience_*`` columns are its *source audience*: computed once, at write time, from all
of its evidence, most restrictive wins (``history.audience.most_restrictive``).
"""

from __future__ import annotations

import pgtrigger
from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import F, Func, Q
from django.db.models.functions import Cast
from django.utils import timezone
from pgvector.django import HnswIndex, VectorField

from accounts.models import Actor, RuntimeAgent
from config.triggers import must_hold
from history.audience import AudienceColumns, audience_shape_constraint
from history.models import (
    Conversation,
    Message,
    Session,
    Turn,
    agent_terms,
    enqueue_index_work,
    protect_rows,
    sidecar_triggers,
)


def choices_constraint(name: str, field: str, choices: type[models.TextChoices]) -> models.CheckConstraint:
    return models.CheckConstraint(condition=Q(**{f"{field}__in": choices.values}), name=name)


def short_id(revision_id: int) -> str:
    return f"m:{revision_id:08x}"


def parse_short_id(text: str) -> int | None:
    """The revision id of ``m:0000002a`` (with or without brackets), or None if it is not one."""
    cleaned = text.strip().strip("[]")
    if not cleaned.startswith("m:"):
        return None
    try:
        return int(cleaned[2:], 16)
    except ValueError:
        return None


class EntryStatus(models.TextChoices):
    LIVE = "live", "Live"
    FORGOTTEN = "forgotten", "Forgotten"


class BeliefType(models.TextChoices):
    PREFERENCE = "preference", "Preference"
    USER_MODEL_ATTR = "user_model_attr", "About the person (identity, ownership, routine)"
    RELATIONSHIP = "relationship", "Relationship"
    PROJECT_FACT = "project_fact", "Project fact"
    DECISION = "decision", "Decision"
    INSTRUCTION = "instruction", "Standing instruction"
    SKILL = "skill", "Skill or lesson"
    RESOURCE = "resource", "Resource (endpoint, service, location)"
    STATUS = "status", "Current status or deadline"
    EVENT = "event", "Event"


class Portability(models.TextChoices):
    PORTABLE = "portable", "Portable: carries everywhere at full weight"
    CONTEXTUAL = "contextual", "Contextual: carries, attributed to its project"
    LOCAL = "local", "Local: elsewhere only when its subject is named"


class Authority(models.TextChoices):
    USER_STATED = "user_stated", "User-stated"
    AFFIRMED = "affirmed", "Affirmed"
    INFERRED = "inferred", "Inferred"


class Lifecycle(models.TextChoices):
    ACTIVE = "active", "Active"
    PROVISIONAL = "provisional", "Provisional"
    SUPERSEDED = "superseded", "Superseded"
    EXPIRED = "expired", "Expired"


class Operation(models.TextChoices):
    REMEMBER = "remember", "remember"
    AMEND = "amend", "amend"
    FORGET = "forget", "forget"
    REQUEST_SHARING = "request_memory_sharing", "request_memory_sharing"


class RevisionOrigin(models.TextChoices):
    """Which write path created a revision."""

    REMEMBER = "remember", "remember (agent)"
    AMEND = "amend", "amend (agent)"
    OPERATOR_EDIT = "operator_edit", "Operator edit"
    USER_CORRECTION = "user_correction", "End-user correction"
    IMPORT = "import", "Import"


#: An entry's current revision, if any, is one of its own revisions, of the same agent.
CURRENT_REVISION_IS_OWN = (
    "NEW.current_revision_id IS NULL OR EXISTS (SELECT 1 FROM memory_memoryrevision r"
    " WHERE r.id = NEW.current_revision_id AND r.entry_id = NEW.id AND r.agent_id = NEW.agent_id)"
)


class MemoryEntry(models.Model):
    """The mutable handle of a memory: which revision is current, whether it is live, how useful it has
    been. Its content lives only in immutable revisions."""

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="memory_entries")
    status = models.CharField(max_length=16, choices=EntryStatus.choices, default=EntryStatus.LIVE)
    current_revision = models.OneToOneField(
        "MemoryRevision", on_delete=models.PROTECT, null=True, blank=True, related_name="current_of"
    )
    flagged_for_review = models.BooleanField(default=False)
    utility = models.FloatField(default=0.0, help_text="Usefulness when recalled; never touches confidence.")
    last_used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    forgotten_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "memory entries"
        constraints = [
            choices_constraint("entry_status_valid", "status", EntryStatus),
            models.CheckConstraint(
                condition=Q(status=EntryStatus.LIVE, forgotten_at__isnull=True)
                | Q(status=EntryStatus.FORGOTTEN, forgotten_at__isnull=False),
                name="entry_forgotten_at_matches_status",
            ),
        ]
        indexes = [models.Index(fields=["agent", "status"], name="entry_agent_status")]
        triggers = [
            must_hold(
                "current_revision_is_own",
                CURRENT_REVISION_IS_OWN,
                "an entry''s current revision is one of its own",
                operation=pgtrigger.Insert,
            ),
            # Checked again only when an update changes what the rule reads (revisions are immutable):
            # every delivered reply moves the utility of the entries it was shown, some 40 rows.
            must_hold(
                "current_revision_stays_own",
                CURRENT_REVISION_IS_OWN,
                "an entry''s current revision is one of its own",
                operation=pgtrigger.Update,
                condition=pgtrigger.AnyChange("id", "agent", "current_revision"),
            ),
        ]

    def __str__(self) -> str:
        return f"m:{self.pk} ({self.status})"


class MemoryRevision(AudienceColumns):
    """One immutable statement of a memory. Amending writes revision N+1; nothing is overwritten.

    ``subject`` is a structured reference (null: not resolved yet), never a label inside ``body``.
    ``valid_from``/``valid_to`` say when the belief held; ``recorded_at`` when it became known.
    """

    entry = models.ForeignKey(MemoryEntry, on_delete=models.PROTECT, related_name="revisions")
    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="+")
    number = models.PositiveIntegerField()
    body = models.TextField()
    subject = models.ForeignKey(Actor, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    source_actor = models.ForeignKey(
        Actor,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The connector-authenticated person who supplied it; never a model argument.",
    )
    belief_type = models.CharField(max_length=32, choices=BeliefType.choices)
    portability = models.CharField(max_length=16, choices=Portability.choices, default=Portability.PORTABLE)
    origin_scope = models.CharField(max_length=200, blank=True, default="", help_text="Project it was learned in.")
    confidence = models.FloatField(default=0.8)
    authority = models.CharField(max_length=16, choices=Authority.choices, default=Authority.USER_STATED)
    salience = models.FloatField(default=0.5)
    always_on = models.BooleanField(default=False)
    lifecycle = models.CharField(max_length=16, choices=Lifecycle.choices, default=Lifecycle.ACTIVE)
    valid_from = models.DateTimeField(default=timezone.now)
    valid_to = models.DateTimeField(null=True, blank=True)
    recorded_at = models.DateTimeField(default=timezone.now)
    supersedes = models.ForeignKey(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="superseded_by"
    )
    restricted_to_conversation = models.ForeignKey(
        Conversation,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="An explicit restriction: eligible in this conversation only.",
    )
    created_by = models.CharField(max_length=32, choices=RevisionOrigin.choices)
    turn = models.ForeignKey(Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["entry", "number"], name="revision_unique_number"),
            audience_shape_constraint("revision"),
            choices_constraint("revision_belief_type_valid", "belief_type", BeliefType),
            choices_constraint("revision_portability_valid", "portability", Portability),
            choices_constraint("revision_authority_valid", "authority", Authority),
            choices_constraint("revision_lifecycle_valid", "lifecycle", Lifecycle),
            choices_constraint("revision_created_by_valid", "created_by", RevisionOrigin),
            models.CheckConstraint(condition=Q(confidence__gte=0, confidence__lte=1), name="revision_confidence_01"),
            models.CheckConstraint(condition=Q(salience__gte=0, salience__lte=1), name="revision_salience_01"),
            models.CheckConstraint(
                condition=Q(valid_to__isnull=True) | Q(valid_to__gt=F("valid_from")), name="revision_valid_interval"
            ),
            models.CheckConstraint(condition=~Q(body=""), name="revision_body_not_empty"),
        ]
        indexes = [
            models.Index(fields=["agent", "subject"], name="revision_agent_subject"),
            models.Index(fields=["agent", "always_on"], name="revision_agent_always_on", condition=Q(always_on=True)),
            models.Index(fields=["agent", "id"], name="revision_agent_position"),
            # Recall counts the rows it withholds for unknown provenance on every call: without this the
            # count reads every revision of the agent.
            models.Index(fields=["agent"], name="revision_unknown_audience", condition=Q(audience_kind="unknown")),
        ]
        triggers = [
            protect_rows("append_only"),
            must_hold(
                "agent_is_entrys",
                "NEW.agent_id = (SELECT agent_id FROM memory_memoryentry WHERE id = NEW.entry_id)",
                "a revision belongs to the agent of its entry",
                operation=pgtrigger.Insert,
            ),
            *sidecar_triggers("memory_revisionsearchdocument", "revision_id"),
            enqueue_index_work("revision"),
            pgtrigger.Trigger(
                name="record_deletion",
                when=pgtrigger.After,
                operation=pgtrigger.Delete,
                func="INSERT INTO memory_deletedrevision (revision_id, agent_id, deleted_at)"
                " VALUES (OLD.id, OLD.agent_id, now()) ON CONFLICT DO NOTHING; RETURN NULL;",
            ),
        ]

    @property
    def short_id(self) -> str:
        """The id a model cites: it names this exact revision, and through it the entry."""
        return short_id(self.pk)

    def __str__(self) -> str:
        return f"m:{self.entry_id} r{self.number}: {self.body[:60]}"


class RevisionSearchDocument(models.Model):
    """Full-text sidecar of ``MemoryRevision.body``, written only by the revision triggers."""

    revision = models.OneToOneField(
        MemoryRevision,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        primary_key=True,
        related_name="search_document",
    )
    agent_id = models.BigIntegerField()
    tsv = SearchVectorField()

    class Meta:
        indexes = [
            GinIndex(agent_terms(), name="revision_search_agent_terms"),
            models.Index(fields=["agent_id"], name="revision_search_agent"),
        ]


class EvidenceKind(models.TextChoices):
    SOURCE_MESSAGE = "source_message", "Message the memory was stated in"
    INHERITED_MESSAGE = "inherited_message", "History the turn had loaded or searched"
    INHERITED_REVISION = "inherited_revision", "Memory the turn had recalled, or the amended revision"
    OPERATOR = "operator", "Operator statement"
    CORRECTION = "correction", "Correction on the turn page, by the person named"


class DeletedRevision(models.Model):
    """The id of a memory revision that no longer exists: the revision's ``record_deletion`` trigger
    writes it in the transaction that deletes the revision (only ``conversation_delete`` does).

    A reply stores, when it is delivered, the distinct audiences of every revision it was built from
    (``Message.lineage_revision_audiences``). Revisions never change, so that fold stays true for as
    long as none of them is deleted; a read trusts it only after finding none of the reply's revisions
    here (for most agents this table holds nothing), and otherwise judges each revision again.
    """

    # A plain id, not a foreign key: the revision it names is gone.
    revision_id = models.BigIntegerField(primary_key=True)
    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="+")
    deleted_at = models.DateTimeField()

    class Meta:
        triggers = [protect_rows("append_only")]

    def __str__(self) -> str:
        return f"deleted revision {self.revision_id}"


class MemoryEvidence(AudienceColumns):
    """One source of a revision and the audience it contributes (``audience_*``), immutable."""

    revision = models.ForeignKey(MemoryRevision, on_delete=models.CASCADE, related_name="evidence")
    kind = models.CharField(max_length=32, choices=EvidenceKind.choices)
    message = models.ForeignKey(Message, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    parent_revision = models.ForeignKey(
        MemoryRevision, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    operator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    actor = models.ForeignKey(
        Actor,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="Who made a correction (the subject or the source, through their login); an operator's "
        "correction names the operator instead.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "memory evidence"
        constraints = [
            audience_shape_constraint("evidence"),
            choices_constraint("evidence_kind_valid", "kind", EvidenceKind),
            models.CheckConstraint(
                condition=Q(
                    kind__in=[EvidenceKind.SOURCE_MESSAGE, EvidenceKind.INHERITED_MESSAGE],
                    message__isnull=False,
                    parent_revision__isnull=True,
                )
                | Q(kind=EvidenceKind.INHERITED_REVISION, message__isnull=True, parent_revision__isnull=False)
                | Q(kind=EvidenceKind.OPERATOR, message__isnull=True, parent_revision__isnull=True)
                | (
                    Q(kind=EvidenceKind.CORRECTION, message__isnull=True, parent_revision__isnull=True)
                    & (Q(actor__isnull=False) | Q(operator__isnull=False))
                ),
                name="evidence_reference_matches_kind",
            ),
        ]
        triggers = [protect_rows("append_only")]


class RevisionConflict(models.Model):
    """Two revisions that contradict each other with no supersession: retrieval returns both, marked."""

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="+")
    revision_a = models.ForeignKey(MemoryRevision, on_delete=models.CASCADE, related_name="+")
    revision_b = models.ForeignKey(MemoryRevision, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(revision_a__lt=F("revision_b")), name="conflict_ordered_pair"),
            models.UniqueConstraint(fields=["revision_a", "revision_b"], name="conflict_unique_pair"),
        ]


class SharingState(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    DENIED = "denied", "Denied"


class SharingRequest(AudienceColumns):
    """A proposal to release one revision to one audience (``audience_*``), made from a turn.

    Only the authenticated source actor's confirmation or an operator's review decides it."""

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="+")
    revision = models.ForeignKey(MemoryRevision, on_delete=models.PROTECT, related_name="sharing_requests")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="+")
    turn = models.ForeignKey(Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    confirmer = models.ForeignKey(
        Actor, on_delete=models.PROTECT, related_name="+", help_text="The source actor whose consent is needed."
    )
    state = models.CharField(max_length=16, choices=SharingState.choices, default=SharingState.PENDING)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            audience_shape_constraint("sharing_request", destination_only=True),
            choices_constraint("sharing_state_valid", "state", SharingState),
        ]


#: Every column of a grant but ``revoked_at``: none of them may ever change.
GRANT_FROZEN_COLUMNS = ", ".join(
    f"%{column}"
    for column in (
        "id",
        "agent_id",
        "revision_id",
        "request_id",
        "conversation_id",
        "granted_by_actor_id",
        "granted_by_user_id",
        "audience_kind",
        "audience_namespace",
        "audience_readers",
        "created_at",
    )
)


class SharingGrant(AudienceColumns):
    """Permission to disclose one revision in the one conversation it was approved for. Revocable only.

    The grant admits the revision in ``conversation`` (the request's target) and nowhere else, and
    there only while the conversation's audience stays within ``audience_*``, the audience the person
    consented to (a room since widened is not what they agreed to). It is never read as "wherever this
    audience class may go": a grant into a public channel does not open the revision to every public,
    workspace or direct conversation (docs/grants.md). A grant without a conversation admits nothing.
    """

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="+")
    revision = models.ForeignKey(MemoryRevision, on_delete=models.PROTECT, related_name="grants")
    request = models.OneToOneField(
        SharingRequest, on_delete=models.PROTECT, null=True, blank=True, related_name="grant"
    )
    conversation = models.ForeignKey(
        Conversation,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The one conversation this grant admits the revision in (its request's target).",
    )
    granted_by_actor = models.ForeignKey(Actor, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    granted_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            audience_shape_constraint("sharing_grant", destination_only=True),
            models.CheckConstraint(
                condition=Q(granted_by_actor__isnull=False, granted_by_user__isnull=True)
                | Q(granted_by_actor__isnull=True, granted_by_user__isnull=False),
                name="grant_has_one_grantor",
            ),
        ]
        indexes = [models.Index(fields=["revision"], condition=Q(revoked_at__isnull=True), name="grant_live")]
        triggers = [
            pgtrigger.Protect(name="no_delete", operation=pgtrigger.Delete),
            pgtrigger.Protect(
                name="revoke_only",
                operation=pgtrigger.Update,
                condition=pgtrigger.Condition(
                    "OLD.revoked_at IS NOT NULL OR NEW.revoked_at IS NULL OR "
                    f"({GRANT_FROZEN_COLUMNS.replace('%', 'OLD.')}) IS DISTINCT FROM "
                    f"({GRANT_FROZEN_COLUMNS.replace('%', 'NEW.')})"
                ),
            ),
        ]


class EmbeddingState(models.TextChoices):
    BUILDING = "building", "Building"
    COMPLETE = "complete", "Complete"
    RETIRED = "retired", "Retired"


class EmbeddingGeneration(models.Model):
    """One model's index over all texts. Retrieval uses the newest complete generation only."""

    model_name = models.CharField(max_length=200)
    dims = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=EmbeddingState.choices, default=EmbeddingState.BUILDING)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [choices_constraint("generation_state_valid", "state", EmbeddingState)]


#: The dimensions the semantic indexes are built for: the default model's (MiniLM, 384). A generation
#: of another size is stored and searched exactly, but no index serves its large agents.
INDEXED_DIMS = 384


def typed_vector(dims: int) -> Cast:
    """The stored vector as pgvector's ``vector(dims)``: the expression the HNSW indexes are built on
    and every search orders by (the column has no fixed size, since generations differ, and an HNSW
    index needs one)."""
    return Cast("vector", output_field=VectorField(dimensions=dims))


def vector_dims_match() -> Q:
    """A row's ``dims`` is its vector's length (pgvector's ``vector_dims``)."""
    return Q(dims=Func("vector", function="vector_dims", output_field=models.IntegerField()))


def cosine_hnsw(name: str) -> HnswIndex:
    """The cosine HNSW index of one embedding table, over the rows of ``INDEXED_DIMS`` dimensions."""
    return HnswIndex(
        OpClass(typed_vector(INDEXED_DIMS), name="vector_cosine_ops"),
        name=name,
        condition=Q(dims=INDEXED_DIMS),
        m=16,
        ef_construction=64,
    )


class RevisionEmbedding(models.Model):
    """A derived, disposable vector of one immutable revision's text.

    The embedding tables exist only on a server with pgvector (``memory/0003``): read and write them
    only where :func:`memory.embeddings.index.vectors_stored` says so. Their keys cascade in the
    database (declared there, ``DO_NOTHING`` here), so deleting a revision, message or generation
    never makes Django's collector read a table that may not exist.
    """

    revision = models.ForeignKey(
        MemoryRevision, on_delete=models.DO_NOTHING, db_constraint=False, related_name="embeddings"
    )
    agent_id = models.BigIntegerField()
    generation = models.ForeignKey(
        EmbeddingGeneration, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    model_name = models.CharField(max_length=200)
    dims = models.PositiveIntegerField()
    vector = VectorField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["revision", "generation"], name="revision_embedding_unique"),
            models.CheckConstraint(condition=vector_dims_match(), name="revision_embedding_dims"),
        ]
        indexes = [
            models.Index(fields=["generation", "agent_id"], name="revision_embedding_agent"),
            cosine_hnsw("revision_embedding_hnsw_384"),
        ]


class MessageEmbedding(models.Model):
    """A derived, disposable vector of one immutable message's text (stored as :class:`RevisionEmbedding`)."""

    message = models.ForeignKey(Message, on_delete=models.DO_NOTHING, db_constraint=False, related_name="embeddings")
    agent_id = models.BigIntegerField()
    generation = models.ForeignKey(
        EmbeddingGeneration, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    model_name = models.CharField(max_length=200)
    dims = models.PositiveIntegerField()
    vector = VectorField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["message", "generation"], name="message_embedding_unique"),
            models.CheckConstraint(condition=vector_dims_match(), name="message_embedding_dims"),
        ]
        indexes = [
            models.Index(fields=["generation", "agent_id"], name="message_embedding_agent"),
            cosine_hnsw("message_embedding_hnsw_384"),
        ]


class OutboxTarget(models.TextChoices):
    REVISION = "revision", "Memory revision"
    MESSAGE = "message", "Message"


class IndexOutbox(models.Model):
    """Pending derived-index work, written in the same transaction as the text it derives from."""

    target = models.CharField(max_length=16, choices=OutboxTarget.choices)
    target_id = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    processed_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        constraints = [choices_constraint("outbox_target_valid", "target", OutboxTarget)]
        indexes = [models.Index(fields=["id"], condition=Q(processed_at__isnull=True), name="outbox_pending")]


class RecallMoment(models.TextChoices):
    SNAPSHOT = "snapshot", "Session snapshot"
    IN_TURN = "in_turn", "In-turn recall"
    TOOL = "tool", "recall tool"
    CHILD = "child", "Child run"
    PREVIEW = "preview", "Operator preview"


class RecallTrace(AudienceColumns):
    """What one recall considered and returned, recorded in the render pass (never reconstructed).

    ``audience_*`` is the ceiling the recall ran under. ``rendered_sha256`` covers exactly the bytes
    returned. The operator-only fields (query text, arms, candidate and dropped ids) are nulled by
    the retention task; the user-safe fields live as long as the session.
    """

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="+")
    # Indexed with ``moment`` (``trace_session_moment``): a turn reads its session's snapshot trace among
    # all of the session's traces, two a turn, so the lookup must not grow with the session.
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, null=True, blank=True, related_name="traces", db_index=False
    )
    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, null=True, blank=True, related_name="traces")
    moment = models.CharField(max_length=16, choices=RecallMoment.choices)
    profile = models.CharField(max_length=16)
    policy_version = models.CharField(max_length=64)
    as_of = models.DateTimeField()
    historical = models.BooleanField(default=False, help_text="Rendered with an explicit as_of / known_at.")
    rendered_text = models.TextField()
    rendered_sha256 = models.CharField(max_length=64)
    corrections = models.JSONField(default=list, blank=True, help_text="Correction lines rendered after the items.")
    token_estimate = models.PositiveIntegerField(default=0)
    considered_count = models.PositiveIntegerField(default=0)
    returned_count = models.PositiveIntegerField(default=0)
    blocked_count = models.PositiveIntegerField(default=0)
    withheld_unknown_count = models.PositiveIntegerField(default=0)
    degradation = models.CharField(max_length=64, blank=True, default="")
    query_text = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL once retention clears it
    arms = models.JSONField(null=True, blank=True)
    candidate_ids = models.JSONField(null=True, blank=True)
    dropped_ids = models.JSONField(null=True, blank=True)
    operator_fields_cleared_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            audience_shape_constraint("recall_trace", destination_only=True),
            choices_constraint("trace_moment_valid", "moment", RecallMoment),
        ]
        indexes = [
            models.Index(fields=["agent", "created_at"], name="trace_agent_time"),
            models.Index(fields=["session", "moment"], name="trace_session_moment"),
        ]


class RecallTraceItem(models.Model):
    """One item a recall rendered, with its scores, its reason and the labels it was shown with, immutable."""

    trace = models.ForeignKey(RecallTrace, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    entry = models.ForeignKey(MemoryEntry, on_delete=models.PROTECT, related_name="+")
    revision = models.ForeignKey(MemoryRevision, on_delete=models.PROTECT, related_name="+")
    band = models.CharField(max_length=8)
    score = models.FloatField()
    components = models.JSONField(default=dict)
    reason = models.CharField(max_length=300)
    carried = models.BooleanField(default=False)
    blocked_reason = models.CharField(max_length=64, blank=True, default="", help_text="Empty unless withheld.")
    conflicts = ArrayField(models.BigIntegerField(), blank=True, default=list)
    # The labels exactly as rendered: a later rename must not change what the trace says was shown.
    subject_label = models.CharField(max_length=300, blank=True, default="")
    source_label = models.CharField(max_length=300, blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["trace", "position"], name="trace_item_unique_position")]
        triggers = [protect_rows("append_only")]


class RetrievalEvent(models.Model):
    """Operator audit of one recall: a keyed digest of the query (never its text), what was selected."""

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="+")
    trace = models.ForeignKey(RecallTrace, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    query_digest = models.CharField(max_length=64, blank=True, default="")
    destination_audience = models.JSONField(default=dict)
    selected_revision_ids = ArrayField(models.BigIntegerField(), blank=True, default=list)
    score_components = models.JSONField(default=dict, blank=True)
    cost_tokens = models.PositiveIntegerField(default=0)
    degradation = models.CharField(max_length=64, blank=True, default="")
    withheld_unknown_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        triggers = [protect_rows("append_only")]


class MemoryOperation(models.Model):
    """The committed ledger: one row per durable write, built from the store's return value."""

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="+")
    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, null=True, blank=True, related_name="operations")
    round = models.PositiveSmallIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=32, choices=Operation.choices)
    entry = models.ForeignKey(MemoryEntry, on_delete=models.PROTECT, related_name="operations")
    revision = models.ForeignKey(MemoryRevision, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    revision_number = models.PositiveIntegerField(null=True, blank=True)
    previous_revision = models.ForeignKey(
        MemoryRevision, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    subject_changed = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [choices_constraint("operation_kind_valid", "kind", Operation)]
        triggers = [protect_rows("append_only")]


class RejectionKind(models.TextChoices):
    NOT_TRUE = "not_true", "Not true"
    CHANGED = "changed", "Was true, has changed"
    NOT_HERE = "not_here", "True elsewhere, not here"
    WRONG = "wrong", "Something's wrong"


class CorrectionRelation(models.TextChoices):
    """Who the person correcting a belief is to it, which decides what their correction may do
    (``docs/corrections.md``): the first three apply typed corrections, anyone else files a report."""

    SUBJECT = "subject", "The person it is about"
    SOURCE = "source", "The person who said it"
    OPERATOR = "operator", "An operator of the tenant"
    BYSTANDER = "bystander", "Someone else who was shown it"


class Rejection(models.Model):
    """An end user's typed correction of a recalled belief; replayed by every later re-derivation.

    ``kind`` is what was applied; ``requested_kind`` what the person asked for, which differs only
    when a bystander's correction was filed for review instead (``kind`` "wrong").
    """

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    trace_item = models.ForeignKey(RecallTraceItem, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    revision = models.ForeignKey(MemoryRevision, on_delete=models.PROTECT, related_name="rejections")
    kind = models.CharField(max_length=16, choices=RejectionKind.choices)
    correction = models.TextField(blank=True, default="")
    origin_scope = models.CharField(max_length=200, blank=True, default="")
    fingerprint = models.CharField(max_length=64, help_text="Normalised statement digest, to refuse re-imports.")
    resulting_revision = models.ForeignKey(
        MemoryRevision, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    #: Empty on rejections recorded before the authority rule existed.
    relation = models.CharField(max_length=16, choices=CorrectionRelation.choices, blank=True, default="")
    requested_kind = models.CharField(max_length=16, choices=RejectionKind.choices, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            choices_constraint("rejection_kind_valid", "kind", RejectionKind),
            models.CheckConstraint(
                condition=Q(relation__in=["", *CorrectionRelation.values]), name="rejection_relation_valid"
            ),
            models.CheckConstraint(
                condition=Q(requested_kind__in=["", *RejectionKind.values]), name="rejection_requested_kind_valid"
            ),
            # Only a correction filed for review differs from what was applied, and it changes no revision.
            models.CheckConstraint(
                condition=Q(requested_kind="")
                | Q(requested_kind=F("kind"))
                | Q(kind=RejectionKind.WRONG, relation=CorrectionRelation.BYSTANDER, resulting_revision__isnull=True),
                name="rejection_review_changes_nothing",
            ),
        ]
        indexes = [models.Index(fields=["agent", "fingerprint"], name="rejection_fingerprint")]
        triggers = [protect_rows("append_only")]


class RecallMiss(models.Model):
    """A formation signal: task recalls about ``subject`` that returned nothing, counted per agent.

    One row per (agent, subject), upserted by the trace write; the formation loop reads subjects
    that keep missing as re-derivation hints ("the read path tells the write path what it should
    have remembered").
    """

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.CASCADE, related_name="+")
    subject = models.ForeignKey(Actor, on_delete=models.CASCADE, related_name="+")
    count = models.PositiveIntegerField(default=0)
    last_missed_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "subject"], name="recall_miss_unique_subject")]


class ErasureKind(models.TextChoices):
    PERSON = "person", "A person's data, on request"
    RETENTION = "retention", "Past the tenant's retention period"


class ErasureState(models.TextChoices):
    RUNNING = "running", "Running (resumable)"
    COMPLETE = "complete", "Complete"


class ErasureEvent(models.Model):
    """The tombstone of one erasure: who asked, what kind, and how many rows of each kind went.

    It never holds content. While the erasure runs, ``pending`` holds the ids still to delete (the
    plan, fixed before the first deletion, so that a crashed run resumes with everything it had found
    even after the rows that led to them are gone); completion empties it. A completed event can
    never change again, and no event is ever deleted (database triggers).
    """

    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=16, choices=ErasureKind.choices)
    # A plain id: the event outlives whatever it names.
    actor_id = models.BigIntegerField(null=True, blank=True, help_text="The erased person (person erasures).")
    requested_by = models.CharField(max_length=200, help_text="Who asked: an operator's username or a command.")
    state = models.CharField(max_length=16, choices=ErasureState.choices, default=ErasureState.RUNNING)
    counts = models.JSONField(default=dict, blank=True, help_text="Rows deleted or redacted, by kind.")
    pending = models.JSONField(default=dict, blank=True, help_text="Ids still to delete while running.")
    started_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            choices_constraint("erasure_kind_valid", "kind", ErasureKind),
            choices_constraint("erasure_state_valid", "state", ErasureState),
            models.CheckConstraint(
                condition=Q(state=ErasureState.RUNNING, completed_at__isnull=True)
                | Q(state=ErasureState.COMPLETE, completed_at__isnull=False, pending={}),
                name="erasure_completed_at_matches_state",
            ),
            models.UniqueConstraint(
                fields=["tenant", "kind", "actor_id"],
                condition=Q(state=ErasureState.RUNNING),
                nulls_distinct=False,
                name="erasure_one_running_per_target",
            ),
        ]
        triggers = [
            pgtrigger.Protect(name="no_delete", operation=pgtrigger.Delete),
            pgtrigger.Protect(
                name="complete_is_final",
                operation=pgtrigger.Update,
                condition=pgtrigger.Condition("OLD.state = 'complete'"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} erasure #{self.pk} ({self.state})"
