"""Entries with immutable revisions: the entry (the mutable handle), its revisions, their full-text
sidecar, their evidence, and the ids of deleted revisions.

Revisions and evidence refuse UPDATE and DELETE in the database (the one sanctioned deletion path
disables those triggers for its own transaction); the revision full-text sidecar follows every insert
and body change and cascades on delete. A revision's ``audience_*`` columns are its *source
audience*: computed once, at write time, from all of its evidence, most restrictive wins
(``history.audience.most_restrictive``).
"""

from __future__ import annotations

import pgtrigger
from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from accounts.models import Actor, RuntimeAgent
from config.triggers import must_hold
from history.audience import AudienceColumns, audience_shape_constraint
from history.models import Conversation, Message, Turn, agent_terms, enqueue_index_work, protect_rows, sidecar_triggers
from memory.models.base import choices_constraint, short_id


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


#: Beliefs about a person: each names its subject, resolved among the turn's participants. Only the
#: other types (project facts, decisions, instructions, ...) may be subject-less.
PERSON_BELIEF_TYPES = frozenset({BeliefType.PREFERENCE, BeliefType.USER_MODEL_ATTR, BeliefType.RELATIONSHIP})


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
        return f"{self.display_id} ({self.status})"

    @property
    def display_id(self) -> str:
        """How people name this memory: its current revision's short id (``m:0000002b``; an earlier
        revision's id still finds the entry). Only an entry with no current revision is named by its
        entry id."""
        if self.current_revision_id is None:
            return f"entry {self.pk}"
        return short_id(self.current_revision_id)


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
        help_text="The first of its source actors (the inbound message's author by default).",
    )
    #: Every connector-authenticated person whose words the revision rests on: the authors of its source
    #: messages (or the person whose correction wrote it), first-named first; never a model argument.
    #: Sharing needs each one's consent, and each one may correct it (docs/grants.md, docs/corrections.md).
    source_actor_ids = ArrayField(
        models.BigIntegerField(),
        blank=True,
        default=list,
        help_text="Every person whose words it rests on (authors of its source messages); never a model argument.",
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
            # ``source_actor`` is the first source actor, and there is one exactly when there are any.
            models.CheckConstraint(
                condition=Q(source_actor__isnull=True, source_actor_ids=[])
                | Q(source_actor__isnull=False, source_actor_ids__0=F("source_actor")),
                name="revision_source_actor_is_first",
            ),
        ]
        indexes = [
            models.Index(fields=["agent", "subject"], name="revision_agent_subject"),
            GinIndex(fields=["source_actor_ids"], name="revision_source_actors"),
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
        # The body isolated (FSI … PDI): a right-to-left override in it reverses nothing after it.
        return f"{self.short_id} (r{self.number} of entry {self.entry_id}): \u2068{self.body[:60]}\u2069"


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
