"""Conversations, their append-only transcript, and the sessions and turns an agent runs in them.

Messages are immutable in PostgreSQL: UPDATE and DELETE are refused by triggers, except on the one
sanctioned path (deletion on request, ``memory.retention.conversation_delete``) that disables them for its own
transaction. The full-text sidecar is maintained by triggers too, so no write path can forget it.
"""

from __future__ import annotations

import pgtrigger
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import F, Func, Q

from accounts.models import Actor, Connector, RuntimeAgent
from config.triggers import must_hold
from history.audience import AudienceColumns, audience_shape_constraint

#: Sidecar documents are ``engram_search_document(body)`` and queries ``engram_search_query(text)``:
#: SQL functions in config/database/sql/search.sql, so every reader matches text the same way.


def protect_rows(name: str) -> pgtrigger.Protect:
    """An append-only guard: the database itself refuses UPDATE and DELETE on the table."""
    return pgtrigger.Protect(name=name, operation=pgtrigger.Update | pgtrigger.Delete)


def sidecar_triggers(sidecar_table: str, key_column: str) -> list[pgtrigger.Trigger]:
    """Triggers that keep a ``(key, agent_id, tsv)`` search sidecar equal to the row's ``body``.

    The UPDATE trigger fires only when the body or the owning agent really changed, so no-op updates
    cost nothing. Deletion needs no trigger: the sidecar's foreign key cascades.
    """
    upsert = f"""
        INSERT INTO {sidecar_table} ({key_column}, agent_id, tsv)
        VALUES (NEW.id, NEW.agent_id, engram_search_document(NEW.body))
        ON CONFLICT ({key_column}) DO UPDATE SET agent_id = EXCLUDED.agent_id, tsv = EXCLUDED.tsv;
        RETURN NULL;
    """
    return [
        pgtrigger.Trigger(name="search_doc_insert", when=pgtrigger.After, operation=pgtrigger.Insert, func=upsert),
        pgtrigger.Trigger(
            name="search_doc_update",
            when=pgtrigger.After,
            operation=pgtrigger.UpdateOf("body", "agent_id"),
            condition=pgtrigger.Condition(
                "OLD.body IS DISTINCT FROM NEW.body OR OLD.agent_id IS DISTINCT FROM NEW.agent_id"
            ),
            func=upsert,
        ),
    ]


def enqueue_index_work(target: str) -> pgtrigger.Trigger:
    """Queue derived-index work (embeddings) in the same transaction as the immutable text, whoever
    wrote it. The queue table is ``memory.IndexOutbox``; a worker drains it."""
    return pgtrigger.Trigger(
        name="enqueue_index_work",
        when=pgtrigger.After,
        operation=pgtrigger.Insert,
        func="INSERT INTO memory_indexoutbox (target, target_id, created_at, attempts, last_error) "
        f"VALUES ('{target}', NEW.id, now(), 0, ''); RETURN NULL;",
    )


def lineage_fold_trigger() -> pgtrigger.Trigger:
    """Fold a reply's lineage into the reply as it is inserted (``engram_lineage_fold``, lineage.sql).

    The lineage rule of spec 003 is a recursive walk over a reply's provenance with hard caps. Every
    input of that walk except the destination is immutable: messages never change, so a reply's
    ancestors, their audiences, evidence and agents are fixed once the reply exists. The walk is
    therefore run once, here, and what it found is stored with the reply: the distinct audiences of
    its ancestors (``unknown`` for a missing, foreign or unauthenticated ancestor, or when the caps
    overflow), their conversations and the revisions they used. Since every earlier reply carries its
    own fold, a new reply's fold is its sources' columns joined with their folds; only the distinct
    ancestors are counted for the caps, through the replies among them (a source reply whose fold is
    ``unknown`` makes this one ``unknown``). The parts that can still change are
    checked at every read by ``engram_reply_lineage_allows`` (disclosure.sql):
    the destination, whether those conversations still exist (deletion on request), and the revisions
    with their live grants.

    Revisions never change either, so the distinct audiences of every revision the reply and its
    ancestors used are folded too (a missing or foreign revision folds to ``unknown``), and, like the
    rest of the fold, from the sources' own (``engram_lineage_revision_audiences``, lineage.sql): the
    reply's own revisions are read, its ancestors' audiences come with its source replies. A read that
    finds every one of them admitting the destination, and none of those revisions deleted since
    (``memory.DeletedRevision``), needs no grant and no per-revision check;
    any other read judges each revision with its live grants, as before. A read therefore costs one
    check per distinct audience and conversation, plus one per revision only where an audience falls
    short, instead of a walk.
    """
    return pgtrigger.Trigger(
        name="fold_lineage",
        when=pgtrigger.Before,
        operation=pgtrigger.Insert,
        # Bulk loaders (COPY) name only the columns they know: inbound lines get the empty fold here.
        func="IF NEW.direction = 'outbound' THEN"
        " SELECT f.audiences, f.conversation_ids, f.revision_ids"
        " INTO NEW.lineage_audiences, NEW.lineage_conversation_ids, NEW.lineage_revision_ids"
        " FROM engram_lineage_fold(NEW.agent_id, NEW.history_message_ids, NEW.memory_revision_ids) f;"
        " NEW.lineage_revision_audiences := engram_lineage_revision_audiences("
        "NEW.agent_id, NEW.history_message_ids, NEW.lineage_revision_ids, NEW.memory_revision_ids);"
        " ELSE NEW.lineage_audiences := '[]'; NEW.lineage_conversation_ids := '{}'; NEW.lineage_revision_ids := '{}';"
        " NEW.lineage_revision_audiences := '[]';"
        " END IF; RETURN NEW;",
    )


class Conversation(AudienceColumns):
    """A thread an agent takes part in. Its audience may change (a channel made private); each message
    keeps the audience it was posted under."""

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="conversations")
    connector = models.ForeignKey(Connector, on_delete=models.PROTECT, related_name="conversations")
    external_thread_id = models.CharField(max_length=200)
    title = models.CharField(max_length=200, blank=True, default="")
    project = models.CharField(
        max_length=200, blank=True, default="", help_text="The project or workspace memories learned here belong to."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["connector", "external_thread_id"], name="conversation_unique_thread"),
            audience_shape_constraint("conversation", destination_only=True),
        ]

    def __str__(self) -> str:
        return self.title or f"{self.connector.namespace}/{self.external_thread_id}"


class MessageDirection(models.TextChoices):
    INBOUND = "inbound", "Inbound (a person wrote it)"
    OUTBOUND = "outbound", "Outbound (the agent replied)"


class Message(AudienceColumns):
    """One transcript line, immutable. ``audience_*`` is the conversation's audience when it was posted.

    ``agent`` duplicates ``conversation.agent`` so that every index can lead with the perspective.
    Outbound replies carry their provenance: the history messages and memory revisions they were
    built from. The ``lineage_*`` columns are that provenance walked to its roots, folded by the
    database when the reply is inserted (``fold_lineage``); see :func:`lineage_fold_trigger`.
    """

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="messages")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    # Indexed by ``message_actor_conversation`` (actor first), which also answers "did this person
    # speak in these conversations" with one index probe per conversation.
    actor = models.ForeignKey(
        Actor, on_delete=models.PROTECT, null=True, blank=True, related_name="messages", db_index=False
    )
    direction = models.CharField(max_length=10, choices=MessageDirection.choices)
    # NULL (not "") when the connector gave no id, so the uniqueness below ignores it.
    external_id = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    body = models.TextField()
    created_at = models.DateTimeField(help_text="When the message was written, as the connector reported it.")
    ingested_at = models.DateTimeField(auto_now_add=True)
    history_message_ids = ArrayField(models.BigIntegerField(), blank=True, default=list)
    memory_revision_ids = ArrayField(models.BigIntegerField(), blank=True, default=list)
    cited_revision_ids = ArrayField(models.BigIntegerField(), blank=True, default=list)
    # Written only by the ``fold_lineage`` trigger (whatever a client sends is replaced).
    lineage_audiences = models.JSONField(
        default=list,
        blank=True,
        editable=False,
        help_text="Distinct [kind, namespace, readers] of every message this reply was built from, transitively;"
        ' ["unknown", "", []] when a source was missing, foreign, unauthenticated or past the caps.',
    )
    lineage_conversation_ids = ArrayField(
        models.BigIntegerField(),
        blank=True,
        default=list,
        editable=False,
        help_text="Conversations those messages belong to: deleting one withholds this reply everywhere.",
    )
    lineage_revision_ids = ArrayField(
        models.BigIntegerField(),
        blank=True,
        default=list,
        editable=False,
        help_text="Memory revisions those messages were built from, checked (with live grants) at every read.",
    )
    lineage_revision_audiences = models.JSONField(
        default=list,
        blank=True,
        editable=False,
        help_text="Distinct [kind, namespace, readers] of the revisions this reply and its sources were built from"
        ' (lineage and its own); ["unknown", "", []] for a revision that was missing or not this agent\'s.',
    )

    class Meta:
        constraints = [
            audience_shape_constraint("message", destination_only=True),
            models.UniqueConstraint(
                fields=["conversation", "external_id"],
                condition=Q(external_id__isnull=False),
                name="message_unique_external_id",
            ),
            models.CheckConstraint(
                condition=Q(direction=MessageDirection.OUTBOUND) | Q(actor__isnull=False),
                name="message_inbound_has_actor",
            ),
            models.CheckConstraint(
                condition=Q(direction=MessageDirection.OUTBOUND)
                | Q(history_message_ids__len=0, memory_revision_ids__len=0, cited_revision_ids__len=0),
                name="message_only_replies_carry_provenance",
            ),
            models.CheckConstraint(
                condition=Q(direction=MessageDirection.OUTBOUND)
                | Q(
                    lineage_audiences=[],
                    lineage_conversation_ids__len=0,
                    lineage_revision_ids__len=0,
                    lineage_revision_audiences=[],
                ),
                name="message_only_replies_carry_lineage",
            ),
        ]
        indexes = [
            models.Index(fields=["conversation", "created_at", "id"], name="message_conversation_time"),
            models.Index(fields=["agent", "created_at"], name="message_agent_time"),
            models.Index(fields=["actor", "conversation"], name="message_actor_conversation"),
            # The replies among a lineage's ancestors, found without reading the inbound ones (the fold).
            models.Index(fields=["id"], condition=Q(direction=MessageDirection.OUTBOUND), name="message_replies"),
        ]
        triggers = [
            protect_rows("append_only"),
            must_hold(
                "agent_is_conversations",
                "NEW.agent_id = (SELECT agent_id FROM history_conversation WHERE id = NEW.conversation_id)",
                "a message belongs to the agent of its conversation",
                operation=pgtrigger.Insert,
            ),
            lineage_fold_trigger(),
            *sidecar_triggers("history_messagesearchdocument", "message_id"),
            enqueue_index_work("message"),
        ]

    def __str__(self) -> str:
        # The body isolated (FSI … PDI): a right-to-left override in it reverses nothing after it.
        return f"{self.direction} #{self.pk}: \u2068{self.body[:60]}\u2069"


class EvidenceMethod(models.TextChoices):
    CONNECTOR_SIGNED = "connector_signed", "Connector-signed event"
    CONNECTOR_API = "connector_api", "Fetched by the connector with its own credentials"
    AGENT_REPLY = "agent_reply", "The agent's own delivered reply"
    OPERATOR_IMPORT = "operator_import", "Imported by an operator"


class MessageSourceEvidence(models.Model):
    """How the connector authenticated a message. A message without a row here has unknown provenance
    and is eligible for no audience at all."""

    message = models.OneToOneField(Message, on_delete=models.CASCADE, primary_key=True, related_name="evidence")
    method = models.CharField(max_length=32, choices=EvidenceMethod.choices)
    detail = models.JSONField(default=dict, blank=True)
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "message source evidence"
        constraints = [
            models.CheckConstraint(condition=Q(method__in=EvidenceMethod.values), name="evidence_method_valid")
        ]
        triggers = [protect_rows("append_only")]


def agent_terms() -> Func:
    """A sidecar's terms qualified by its agent (``engram_agent_lexemes``), for the GIN index.

    A plain GIN index on ``tsv`` holds one posting list per term across every agent, so a common
    word costs a scan of every agent's matches before the agent filter narrows it. Qualified terms
    give each agent its own posting lists: a search reads only its own agent's matches. Queries match
    them with ``agent_terms_match``.
    """
    return Func(F("agent_id"), F("tsv"), function="engram_agent_lexemes", output_field=SearchVectorField())


def agent_terms_match(agent: str, query_text: str) -> str:
    """SQL: sidecar ``d`` (of agent ``agent``) matches the OR'd terms of ``query_text``, through the
    agent-qualified index. Both arguments are SQL expressions (parameters)."""
    return (
        f"d.agent_id = {agent} AND engram_agent_lexemes(d.agent_id, d.tsv)"
        f" @@ engram_agent_search_query({agent}, {query_text})"
    )


class MessageSearchDocument(models.Model):
    """Full-text sidecar of ``Message.body``, written only by the message triggers.

    ``agent_id`` is a derived copy used to narrow the scan; queries re-derive the perspective from the
    message and never let the sidecar vouch for a row. The foreign key cascades in the database.
    """

    message = models.OneToOneField(
        Message, on_delete=models.DO_NOTHING, db_constraint=False, primary_key=True, related_name="search_document"
    )
    agent_id = models.BigIntegerField()
    tsv = SearchVectorField()

    class Meta:
        indexes = [
            GinIndex(agent_terms(), name="message_search_agent_terms"),
            models.Index(fields=["agent_id"], name="message_search_agent"),
        ]


class SessionKind(models.TextChoices):
    INTERACTIVE = "interactive", "Interactive"
    ASYNC = "async", "Async / long-running"
    CHILD = "child", "Child run"


class Session(models.Model):
    """A run of turns sharing one frozen memory snapshot (byte-stable for the session's life)."""

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="sessions")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="sessions")
    parent = models.ForeignKey("self", on_delete=models.CASCADE, null=True, blank=True, related_name="children")
    kind = models.CharField(max_length=16, choices=SessionKind.choices, default=SessionKind.INTERACTIVE)
    snapshot_text = models.TextField(blank=True, default="")
    snapshot_sha256 = models.CharField(max_length=64, blank=True, default="")
    watermark = models.BigIntegerField(
        default=0, help_text="The memory store's head position when the snapshot was taken."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=SessionKind.values), name="session_kind_valid"),
            models.CheckConstraint(
                condition=Q(kind=SessionKind.CHILD) | Q(parent__isnull=True), name="session_only_children_have_parent"
            ),
        ]


class TurnState(models.TextChoices):
    OPEN = "open", "Open"
    DELIVERED = "delivered", "Reply delivered"
    WITHHELD = "withheld", "Reply withheld by the pre-delivery recheck"
    FAILED = "failed", "Failed (claim guard or error)"


class Turn(AudienceColumns):
    """The agent answering one inbound message. ``audience_*`` is the destination audience, fixed at
    the start of the turn and rechecked before the reply is delivered."""

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="turns")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="turns")
    inbound_message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="+")
    requester = models.ForeignKey(Actor, on_delete=models.PROTECT, related_name="turns")
    state = models.CharField(max_length=16, choices=TurnState.choices, default=TurnState.OPEN)
    rounds_used = models.PositiveSmallIntegerField(default=0)
    loaded_message_ids = ArrayField(
        models.BigIntegerField(), blank=True, default=list, help_text="The history window the runtime loaded."
    )
    evidence_message_ids = ArrayField(
        models.BigIntegerField(), blank=True, default=list, help_text="Every history message the turn has seen."
    )
    failure_code = models.CharField(max_length=64, blank=True, default="")
    reply = models.ForeignKey(Message, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            audience_shape_constraint("turn", destination_only=True),
            models.CheckConstraint(condition=Q(state__in=TurnState.values), name="turn_state_valid"),
            models.CheckConstraint(condition=Q(rounds_used__lte=3), name="turn_at_most_three_rounds"),
        ]


class ConversationSearchEvent(models.Model):
    """Audit row written by every history search, including empty ones. Never holds the query text."""

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="+")
    turn = models.ForeignKey(Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="search_events")
    query_digest = models.CharField(max_length=64, blank=True, default="")
    filters = models.JSONField(default=dict, blank=True)
    destination_audience = models.JSONField(default=dict)
    selected = models.JSONField(default=list, blank=True)
    exclusion_counts = models.JSONField(default=dict, blank=True)
    #: Results (hits and neighbours) the safety scan withheld: returned as ``[BLOCKED]`` with their ids,
    #: their text never shown. Ids only, like the rest of the row.
    blocked_count = models.PositiveIntegerField(default=0)
    blocked_message_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)
    #: Every message the search put in front of the agent, hits and their neighbours (blocked ones
    #: included), in the order it returned them: what the turn page lists, never re-queried. Ids only.
    returned_message_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)
    degradation = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        triggers = [protect_rows("append_only")]
