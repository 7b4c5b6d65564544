"""Sharing: a request to release one revision to one conversation, and the grant its source's
confirmation creates, which may only be revoked (``revoked_at`` set once), never edited or deleted.
"""

from __future__ import annotations

import pgtrigger
from django.conf import settings
from django.db import models
from django.db.models import Q

from accounts.models import Actor, RuntimeAgent
from history.audience import AudienceColumns, audience_shape_constraint
from history.models import Conversation, Turn
from memory.models.base import choices_constraint
from memory.models.entries import MemoryRevision


class SharingState(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    DENIED = "denied", "Denied"


class ConsentRole(models.TextChoices):
    SOURCE = "source", "Said it"
    SUBJECT = "subject", "It is about them"


class ConsentState(models.TextChoices):
    PENDING = "pending", "Pending"
    GIVEN = "given", "Given"
    DENIED = "denied", "Denied"


class SharingRequest(AudienceColumns):
    """A proposal to release one revision to one audience (``audience_*``), made from a turn.

    Decided by the consent of every person it needs (:class:`SharingConsent`: each source actor, and
    the subject when the subject is someone else) or by an operator's review; ``confirmer`` is the
    first of them."""

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


class SharingConsent(models.Model):
    """One person's answer to a sharing request: each source actor of the revision, and its subject
    when the subject is someone else, must give theirs before a grant exists. A decided consent never
    changes (the database refuses), and one denial denies the request.
    """

    agent = models.ForeignKey(RuntimeAgent, on_delete=models.PROTECT, related_name="+")
    request = models.ForeignKey(SharingRequest, on_delete=models.CASCADE, related_name="consents")
    actor = models.ForeignKey(Actor, on_delete=models.PROTECT, related_name="+")
    role = models.CharField(max_length=16, choices=ConsentRole.choices)
    state = models.CharField(max_length=16, choices=ConsentState.choices, default=ConsentState.PENDING)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["request", "actor"], name="consent_one_per_person"),
            choices_constraint("consent_role_valid", "role", ConsentRole),
            choices_constraint("consent_state_valid", "state", ConsentState),
            models.CheckConstraint(
                condition=Q(state=ConsentState.PENDING, decided_at__isnull=True) | ~Q(state=ConsentState.PENDING),
                name="consent_pending_is_undecided",
            ),
        ]
        triggers = [
            pgtrigger.Protect(
                name="decided_once",
                operation=pgtrigger.Update,
                condition=pgtrigger.Condition(
                    "OLD.state <> 'pending' OR (OLD.id, OLD.agent_id, OLD.request_id, OLD.actor_id, OLD.role)"
                    " IS DISTINCT FROM (NEW.id, NEW.agent_id, NEW.request_id, NEW.actor_id, NEW.role)"
                ),
            ),
        ]

    def __str__(self) -> str:
        return f"consent of actor {self.actor_id} to request {self.request_id}: {self.state}"


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
