"""What the read path learns: conflicts between revisions, end users' typed corrections (rejections,
append-only) and the subjects recall keeps missing.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from accounts.models import Actor, RuntimeAgent
from history.models import protect_rows
from memory.models.base import choices_constraint
from memory.models.entries import MemoryRevision
from memory.models.traces import RecallTraceItem


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
        verbose_name_plural = "recall misses"
        constraints = [models.UniqueConstraint(fields=["agent", "subject"], name="recall_miss_unique_subject")]
