"""Sharing one revision with one wider audience: requested by the agent, decided only by people.

``request_memory_sharing`` (the agent's verb) records a pending request from a private conversation.
A grant is created only by the authenticated source actor's own confirmation (an end user logged in
as that actor) or by an operator's review in the admin; nothing an agent sends can create one.
A grant admits the revision only in the conversation the request named (and there only while that
conversation's audience stays within the audience consented to), never wherever that audience class
could reach (docs/grants.md); revoking it takes effect on the very next read, because eligibility
reads live grants in SQL.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from accounts.models import OperatorScope, UserActor
from config.errors import Conflict, NotFound, Unprocessable
from history.audience import AudienceKind
from history.models import Conversation, Turn
from memory.models import MemoryOperation, MemoryRevision, Operation, SharingGrant, SharingRequest, SharingState


@transaction.atomic
def sharing_request_create(
    *, turn: Turn, revision: MemoryRevision, target: Conversation, round_number: int | None = None
) -> SharingRequest:
    """Propose releasing ``revision`` into ``target`` (that one conversation, as its audience stands
    now). The caller has checked that the turn may see the revision; the source actor is the only
    person who can consent."""
    if turn.audience_kind not in (AudienceKind.MEMBERS, AudienceKind.EXTERNAL):
        raise Unprocessable("sharing is requested from a private conversation", code="not_private")
    if target.agent_id != turn.agent_id:
        raise NotFound("conversation not found", code="conversation_not_found")
    if revision.source_actor_id is None:
        raise Unprocessable("the memory has no authenticated source actor to ask", code="no_source_actor")
    if revision.audience_kind in (AudienceKind.UNKNOWN, AudienceKind.NOBODY):
        # Unknown or mixed provenance: no single person can consent for all of its sources.
        raise Unprocessable("this memory's sources cannot be vouched for by one person", code="unshareable")
    request = SharingRequest.objects.create(
        agent_id=turn.agent_id,
        revision=revision,
        conversation=target,
        turn=turn,
        confirmer_id=revision.source_actor_id,
        audience_kind=target.audience_kind,
        audience_namespace=target.audience_namespace,
        audience_readers=list(target.audience_readers),
    )
    MemoryOperation.objects.create(
        agent_id=turn.agent_id,
        turn=turn,
        round=round_number,
        kind=Operation.REQUEST_SHARING,
        entry_id=revision.entry_id,
        revision=revision,
        revision_number=revision.number,
    )
    return request


def _pending(request_id: int) -> SharingRequest:
    request = SharingRequest.objects.select_for_update().filter(pk=request_id).first()
    if request is None:
        raise NotFound("sharing request not found", code="not_found")
    if request.state != SharingState.PENDING:
        raise Conflict(f"the request is already {request.state}", code="already_decided")
    return request


def _grant(request: SharingRequest, **grantor: object) -> SharingGrant:
    return SharingGrant.objects.create(
        agent_id=request.agent_id,
        revision_id=request.revision_id,
        request=request,
        # The consent was for this conversation: the grant admits the revision there and nowhere else.
        conversation_id=request.conversation_id,
        audience_kind=request.audience_kind,
        audience_namespace=request.audience_namespace,
        audience_readers=list(request.audience_readers),
        **grantor,
    )


def requests_for_user(user: AbstractBaseUser) -> list[SharingRequest]:
    actor_ids = UserActor.objects.filter(user_id=user.pk).values_list("actor_id", flat=True)
    return list(
        SharingRequest.objects.filter(confirmer_id__in=actor_ids)
        .select_related("revision", "conversation")
        .order_by("-created_at")
    )


@transaction.atomic
def sharing_request_decide_as_source(*, request_id: int, user: AbstractBaseUser, approve: bool) -> SharingGrant | None:
    """The source actor, logged in, answers a request about their own statement."""
    request = _pending(request_id)
    if not UserActor.objects.filter(user_id=user.pk, actor_id=request.confirmer_id).exists():
        raise NotFound("sharing request not found", code="not_found")  # not yours looks like missing
    request.state = SharingState.APPROVED if approve else SharingState.DENIED
    request.decided_at = timezone.now()
    request.decided_by_user_id = user.pk
    request.save(update_fields=["state", "decided_at", "decided_by_user"])
    return _grant(request, granted_by_actor_id=request.confirmer_id) if approve else None


@transaction.atomic
def sharing_request_review(*, request_id: int, operator: AbstractBaseUser, approve: bool) -> SharingGrant | None:
    """An operator of the agent's tenant decides a request in the admin."""
    request = _pending(request_id)
    if not _operates(operator, request.agent.tenant_id):
        raise NotFound("sharing request not found", code="not_found")
    request.state = SharingState.APPROVED if approve else SharingState.DENIED
    request.decided_at = timezone.now()
    request.decided_by_user_id = operator.pk
    request.save(update_fields=["state", "decided_at", "decided_by_user"])
    return _grant(request, granted_by_user_id=operator.pk) if approve else None


@transaction.atomic
def grant_revoke(*, grant_id: int, user: AbstractBaseUser) -> SharingGrant:
    """Revoke a grant: the consenting person or an operator of the tenant may. Idempotent."""
    grant = SharingGrant.objects.select_for_update().select_related("agent").filter(pk=grant_id).first()
    if grant is None:
        raise NotFound("grant not found", code="not_found")
    mine = (
        grant.granted_by_actor_id is not None
        and UserActor.objects.filter(user_id=user.pk, actor_id=grant.granted_by_actor_id).exists()
    )
    if not (mine or _operates(user, grant.agent.tenant_id)):
        raise NotFound("grant not found", code="not_found")
    if grant.revoked_at is None:
        grant.revoked_at = timezone.now()
        grant.save(update_fields=["revoked_at"])
    return grant


def _operates(user: AbstractBaseUser, tenant_id: int) -> bool:
    if not getattr(user, "is_staff", False):
        return False
    return (
        bool(getattr(user, "is_superuser", False))
        or OperatorScope.objects.filter(user_id=user.pk, tenant_id=tenant_id).exists()
    )
