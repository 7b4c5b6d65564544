"""The tombstone of each erasure (a person's data on request, or a retention sweep): never deleted, and
final once complete.
"""

from __future__ import annotations

import pgtrigger
from django.db import models
from django.db.models import Q

from memory.models.base import choices_constraint


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
