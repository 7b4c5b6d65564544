"""What recall and turns leave behind: recall traces and their items, the operator's retrieval events
and the ledger of committed operations; items, events and operations refuse UPDATE and DELETE.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models

from accounts.models import RuntimeAgent
from history.audience import AudienceColumns, audience_shape_constraint
from history.models import Session, Turn, protect_rows
from memory.models.base import choices_constraint
from memory.models.entries import MemoryEntry, MemoryRevision


class Operation(models.TextChoices):
    REMEMBER = "remember", "remember"
    AMEND = "amend", "amend"
    FORGET = "forget", "forget"
    REQUEST_SHARING = "request_memory_sharing", "request_memory_sharing"


class RecallMoment(models.TextChoices):
    SNAPSHOT = "snapshot", "Session snapshot"
    IN_TURN = "in_turn", "In-turn recall"
    TOOL = "tool", "recall tool"
    CHILD = "child", "Child run"
    PREVIEW = "preview", "Operator preview"


class RecallTrace(AudienceColumns):
    """What one recall considered and returned, recorded in the render pass (never reconstructed).

    ``audience_*`` is the ceiling the recall ran under. ``rendered_sha256`` covers exactly the bytes
    returned. The operator-only fields (query text and hints, arms, candidate and dropped ids) are
    nulled by the retention task; the user-safe fields live as long as the session.
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
    query_hints = models.JSONField(
        null=True,
        blank=True,
        help_text="The recall's own subjects (actor ids, ranked higher) and type hints (the only belief types "
        "returned), as {subject_ids, type_hints}.",
    )
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
