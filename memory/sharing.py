"""Sharing one revision with one wider audience: requested by the agent, decided only by people.

``request_memory_sharing`` (the agent's verb) records a pending request from a private conversation.
A grant is created only when every person the request asks has confirmed (each source actor of the
revision, the connector-authenticated authors of the words it rests on, and its subject when that is
someone else; each an end user logged in as that actor), or by an operator's review in the admin;
nothing an agent sends can create one, and one refusal denies the request.
A grant admits the revision only in the conversation the request named (and there only while that
conversation's audience stays within the audience consented to), never wherever that audience class
could reach (docs/grants.md); revoking it takes effect on the very next read, because eligibility
reads live grants in SQL.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Prefetch
from django.utils import timezone

from accounts.models import OperatorScope, UserActor
from config.errors import Conflict, NotFound, Unprocessable
from history.audience import AudienceKind
from history.models import Conversation, Turn
from memory.models import (
    ConsentRole,
    ConsentState,
    MemoryOperation,
    MemoryRevision,
    Operation,
    SharingConsent,
    SharingGrant,
    SharingRequest,
    SharingState,
)


@transaction.atomic
def sharing_request_create(
    *, turn: Turn, revision: MemoryRevision, target: Conversation, round_number: int | None = None
) -> SharingRequest:
    """Propose releasing ``revision`` into ``target`` (that one conversation, as its audience stands
    now). The caller has checked that the turn may see the revision. The request asks everyone whose
    consent it needs (:func:`consenters`): it is granted once all of them have given theirs."""
    if turn.audience_kind not in (AudienceKind.MEMBERS, AudienceKind.EXTERNAL):
        raise Unprocessable("sharing is requested from a private conversation", code="not_private")
    if target.agent_id != turn.agent_id:
        raise NotFound("conversation not found", code="conversation_not_found")
    if not revision.source_actor_ids:
        raise Unprocessable("the memory has no authenticated source actor to ask", code="no_source_actor")
    if revision.audience_kind in (AudienceKind.UNKNOWN, AudienceKind.NOBODY):
        # Unknown or mixed provenance: nobody can consent for all of its sources.
        raise Unprocessable("this memory's sources cannot be vouched for by the people asked", code="unshareable")
    people = consenters(revision)
    request = SharingRequest.objects.create(
        agent_id=turn.agent_id,
        revision=revision,
        conversation=target,
        turn=turn,
        confirmer_id=people[0][0],
        audience_kind=target.audience_kind,
        audience_namespace=target.audience_namespace,
        audience_readers=list(target.audience_readers),
    )
    SharingConsent.objects.bulk_create(
        SharingConsent(agent_id=turn.agent_id, request=request, actor_id=actor_id, role=role)
        for actor_id, role in people
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


def consenters(revision: MemoryRevision) -> list[tuple[int, str]]:
    """Whose consent sharing ``revision`` needs, each once: every source actor (whose words it rests
    on), and its subject when the subject is someone else (what is said about a person is theirs too)."""
    people = [(actor_id, ConsentRole.SOURCE) for actor_id in dict.fromkeys(revision.source_actor_ids)]
    if revision.subject_id is not None and revision.subject_id not in revision.source_actor_ids:
        people.append((revision.subject_id, ConsentRole.SUBJECT))
    return [(actor_id, str(role)) for actor_id, role in people]


def _pending(request_id: int) -> SharingRequest:
    request = SharingRequest.objects.select_for_update().filter(pk=request_id).first()
    if request is None:
        raise NotFound("sharing request not found", code="not_found")
    if request.state != SharingState.PENDING:
        raise Conflict(f"the request is already {request.state}", code="already_decided")
    return request


def _decide(request: SharingRequest, user: AbstractBaseUser, *, approve: bool) -> None:
    request.state = SharingState.APPROVED if approve else SharingState.DENIED
    request.decided_at = timezone.now()
    request.decided_by_user_id = user.pk
    request.save(update_fields=["state", "decided_at", "decided_by_user"])


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
    """Every request that asks for one of the user's consents, newest first, with all its consents."""
    actor_ids = UserActor.objects.filter(user_id=user.pk).values_list("actor_id", flat=True)
    asked = SharingConsent.objects.filter(actor_id__in=actor_ids).values("request_id")
    return list(
        SharingRequest.objects.filter(pk__in=asked)
        .select_related("revision", "conversation")
        .prefetch_related(Prefetch("consents", queryset=SharingConsent.objects.select_related("actor").order_by("pk")))
        .order_by("-created_at")
    )


@transaction.atomic
def sharing_request_decide_as_source(*, request_id: int, user: AbstractBaseUser, approve: bool) -> SharingGrant | None:
    """A person the request asks (a source actor, or the subject), logged in, gives or refuses their
    consent. One refusal denies the request; the last consent given grants it. Returns the grant
    when this answer created it."""
    request = _pending(request_id)
    mine = list(
        request.consents.select_for_update().filter(
            actor_id__in=UserActor.objects.filter(user_id=user.pk).values("actor_id")
        )
    )
    if not mine:
        raise NotFound("sharing request not found", code="not_found")  # not yours looks like missing
    undecided = [consent for consent in mine if consent.state == ConsentState.PENDING]
    if not undecided:
        raise Conflict("you have already answered this request", code="already_decided")
    SharingConsent.objects.filter(pk__in=[consent.pk for consent in undecided]).update(
        state=ConsentState.GIVEN if approve else ConsentState.DENIED, decided_at=timezone.now(), decided_by_user=user
    )
    if approve and request.consents.exclude(state=ConsentState.GIVEN).exists():
        return None  # others still have to answer
    _decide(request, user, approve=approve)
    return _grant(request, granted_by_actor_id=undecided[0].actor_id) if approve else None


@transaction.atomic
def sharing_request_review(*, request_id: int, operator: AbstractBaseUser, approve: bool) -> SharingGrant | None:
    """An operator of the agent's tenant decides a request in the admin."""
    request = _pending(request_id)
    if not _operates(operator, request.agent.tenant_id):
        raise NotFound("sharing request not found", code="not_found")
    _decide(request, operator, approve=approve)
    return _grant(request, granted_by_user_id=operator.pk) if approve else None


@transaction.atomic
def grant_revoke(*, grant_id: int, user: AbstractBaseUser) -> SharingGrant:
    """Revoke a grant: the consenting person or an operator of the tenant may. Idempotent."""
    grant = SharingGrant.objects.select_for_update().select_related("agent").filter(pk=grant_id).first()
    if grant is None:
        raise NotFound("grant not found", code="not_found")
    # Anyone whose consent the grant rests on may withdraw it.
    consented = {grant.granted_by_actor_id} - {None}
    if grant.request_id is not None:
        consented |= set(
            SharingConsent.objects.filter(request_id=grant.request_id, state=ConsentState.GIVEN).values_list(
                "actor_id", flat=True
            )
        )
    mine = UserActor.objects.filter(user_id=user.pk, actor_id__in=consented).exists()
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
