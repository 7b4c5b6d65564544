"""The end user's correction path: a typed rejection of one belief they were shown in a turn.

Every item on the turn page carries its revision id, so "this is wrong" names exactly one belief; the
user says *what* is wrong, and each kind is a different write through the ordinary services:

- **Not true** retires the belief (``entry_forget``); every revision and its evidence are kept.
- **Was true, has changed** supersedes it with the correction (``revision_amend``): the correction
  becomes the body, valid from now, created by ``user_correction``, stated by the corrector.
- **True elsewhere, not here** corrects scope and portability; it retires nothing (see
  :func:`rejection_record` for exactly what it changes).
- **Something's wrong** flags the entry for operator review and lowers its utility; it changes no
  revision, because retiring on an ambiguous signal destroys information.

Who may apply the first three (``docs/corrections.md``; the rule is
:func:`memory.selectors.correction_relations`): the belief's subject, its source, and the tenant's
operators. Anyone else who was shown it files a report instead: the undifferentiated rejection
(flagged for review and down-weighted, never retired), recording what they asked for. The rule
lives here, in the service, so every surface that records a rejection gets it.

A correction never inherits the authority of what it replaces: its revision carries the
corrector's own (:data:`CORRECTION_AUTHORITY`), its evidence names the corrector, and a restated
belief's source actor becomes the corrector.

Each rejection is a durable, append-only ``Rejection`` event with the belief's fingerprint
(:mod:`memory.fingerprint`). "Not true" and "has changed" are replayed by every later write: the
services refuse to store that statement about that subject again (``rejected_belief``), and a
reindex cannot revive it because eligibility reads canonical rows, not the index. A report is not
replayed: it decided nothing.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import UserActor
from config.errors import Conflict, Unprocessable
from history.models import Conversation, Message
from memory.fingerprint import revision_fingerprint
from memory.models import (
    Authority,
    CorrectionRelation,
    EntryStatus,
    Lifecycle,
    MemoryEntry,
    MemoryRevision,
    Portability,
    Rejection,
    RejectionKind,
    RevisionOrigin,
)
from memory.selectors import CorrectionTarget, correction_item, correction_relations, source_messages
from memory.services import Correction, Provenance, entry_forget, revision_amend

#: How much "something's wrong" lowers an entry's utility: the weight of one citation.
WRONG_UTILITY_PENALTY = 1.0
MAX_CORRECTION_LENGTH = 2_000

#: The authority and confidence of the statement a correction writes, by who made it. The subject's
#: word about themselves is first-hand (high band); a source restating something about someone else,
#: or an operator, is second-hand (medium band); an operator's statement is affirmed, not user-stated.
CORRECTION_AUTHORITY: dict[str, tuple[str, float]] = {
    CorrectionRelation.SUBJECT: (Authority.USER_STATED, 0.8),
    CorrectionRelation.SOURCE: (Authority.USER_STATED, 0.6),
    CorrectionRelation.OPERATOR: (Authority.AFFIRMED, 0.6),
}


@transaction.atomic
def rejection_record(
    *,
    user: AbstractBaseUser,
    kind: str,
    correction: str = "",
    trace_item_id: int | None = None,
    target: CorrectionTarget | None = None,
) -> Rejection:
    """Record the user's rejection of one belief they were shown and apply it; return the committed event.

    The belief is named either by ``trace_item_id`` (an item of a turn page's recalls) or by a
    ``target`` a selector resolved for this user (a memory the turn wrote, or one on the person's
    "what the agent knows about you" page: :mod:`memory.selectors`, :mod:`memory.known`). The user must
    be able to see an item on a turn page (a conversation they could read, within both ceilings, not
    withheld) or operate its tenant, else ``NotFound``, exactly as for a missing item. The rejection
    applies to the belief as it stands: if the entry was retired or has a newer revision since the
    turn, it raises ``Conflict`` and writes nothing (the page shows what changed instead).

    *True elsewhere, not here* ("here" is the conversation the item was recalled in):

    - a belief **carried** in from another project (and not already ``local``) becomes ``local``:
      it stays at home in its origin project and appears elsewhere only when its subject is named;
    - otherwise (learned in this project, no project, or already local and carried only because its
      subject was named) it is **restricted to the conversation it was learned in**, the narrowest
      "elsewhere" the store can name: it stays true there and appears nowhere else;
    - a belief learned in this very conversation has no elsewhere to keep it in: ``Unprocessable``
      (``nowhere_else``); "was true, has changed" or "something's wrong" say what is meant.

    Corrections keep the belief's source audience (the new revision inherits the old one), so a
    correction is disclosed exactly where the belief it replaces was, never further.

    Only the belief's subject, its source or an operator of its tenant apply *not true*, *has
    changed* and *not here* (:func:`memory.selectors.correction_relations`). From anyone else who can
    see the item, each kind is recorded as a report: the entry is flagged for review and
    down-weighted, no revision changes, and the event keeps the kind asked for and the suggested
    correction for the operator (``kind`` "wrong", ``requested_kind`` what was asked).
    """
    if kind not in RejectionKind.values:
        raise Unprocessable(f"unknown rejection kind {kind!r}", code="invalid_kind")
    correction = correction.strip()
    if kind == RejectionKind.CHANGED and not correction:
        raise Unprocessable("say what is true now", code="correction_required")
    if len(correction) > MAX_CORRECTION_LENGTH:
        raise Unprocessable(f"a correction has at most {MAX_CORRECTION_LENGTH} characters", code="too_long")
    if kind != RejectionKind.CHANGED:
        correction = ""

    if (trace_item_id is None) == (target is None):
        raise TypeError("name the belief by trace_item_id or by target, not both")
    if target is None:
        assert trace_item_id is not None
        target = correction_item(user, trace_item_id)
    revision = target.revision
    # Lock the entry row alone: a join here would lock the agent row too, serialising unrelated writes.
    entry = MemoryEntry.objects.select_for_update().get(pk=revision.entry_id)
    if entry.status == EntryStatus.FORGOTTEN:
        raise Conflict(f"memory {revision.short_id} was already retired", code="memory_forgotten")
    if entry.current_revision_id != revision.pk:
        raise Conflict(
            f"memory {revision.short_id} has changed since this turn",
            code="memory_changed",
            detail={"current_id": f"m:{entry.current_revision_id or 0:08x}"},
        )

    agent = entry.agent
    relation = correction_relations(user, [revision])[revision.pk]
    requested = kind
    if relation == CorrectionRelation.BYSTANDER:
        kind = RejectionKind.WRONG  # filed for review: the undifferentiated rejection, never applied
    resulting: MemoryRevision | None = None
    now = timezone.now()
    if kind == RejectionKind.NOT_TRUE:
        entry_forget(agent=agent, entry_id=entry.pk)
    elif kind == RejectionKind.CHANGED:
        authority, confidence = CORRECTION_AUTHORITY[relation]
        resulting = revision_amend(
            agent=agent,
            entry_id=entry.pk,
            expected_revision_id=revision.pk,
            provenance=_correction_provenance(user, relation, revision, restates=True),
            body=correction,
            changes={
                "authority": authority,
                "confidence": confidence,
                "lifecycle": Lifecycle.ACTIVE,
                "valid_from": now,
                "valid_to": _still_open(revision.valid_to, now),
            },
            created_by=RevisionOrigin.USER_CORRECTION,
        ).revision
    elif kind == RejectionKind.NOT_HERE:
        if target.here is None:
            raise Unprocessable("say where it does not hold from a turn in that conversation", code="no_conversation")
        # The statement and its author stay (only where it applies changes); the evidence names the corrector.
        resulting = revision_amend(
            agent=agent,
            entry_id=entry.pk,
            expected_revision_id=revision.pk,
            provenance=_correction_provenance(user, relation, revision, restates=False),
            changes=_not_here_changes(revision, carried=target.carried, here=target.here),
            created_by=RevisionOrigin.USER_CORRECTION,
        ).revision
    else:
        MemoryEntry.objects.filter(pk=entry.pk).update(
            flagged_for_review=True, utility=F("utility") - WRONG_UTILITY_PENALTY
        )

    return Rejection.objects.create(
        agent=agent,
        user_id=user.pk,
        trace_item=target.trace_item,
        revision=revision,
        kind=kind,
        requested_kind=requested,
        relation=relation,
        correction=correction,
        origin_scope=revision.origin_scope,
        fingerprint=revision_fingerprint(revision),
        resulting_revision=resulting,
    )


def _correction_provenance(
    user: AbstractBaseUser, relation: str, revision: MemoryRevision, *, restates: bool
) -> Provenance:
    """Evidence naming the corrector: their own actor (the subject or the source; for the subject,
    the subject actor itself), or, for an operator, no actor and the operator's login."""
    actor_id = None
    if relation == CorrectionRelation.SUBJECT:
        actor_id = revision.subject_id
    elif relation == CorrectionRelation.SOURCE:
        # The corrector's own actor among the source actors (an identity-linked login: the first).
        mine = set(UserActor.objects.filter(user_id=user.pk).values_list("actor_id", flat=True))
        actor_id = next((a for a in revision.source_actor_ids if a in mine), revision.source_actor_id)
    return Provenance(
        correction=Correction(user=user, actor_id=actor_id, audience=revision.audience, restates=restates)
    )


def _still_open(valid_to: datetime | None, now: datetime) -> datetime | None:
    """A correction valid from now keeps the old end of validity only if that is still ahead."""
    return valid_to if valid_to is not None and valid_to > now else None


def _not_here_changes(revision: MemoryRevision, *, carried: bool, here: Conversation) -> dict[str, object]:
    if carried and revision.portability != Portability.LOCAL:
        return {"portability": Portability.LOCAL}
    message_id = source_messages([revision]).get(revision.pk)
    home = (
        Message.objects.filter(pk=message_id).values_list("conversation_id", flat=True).first()
        if message_id is not None
        else None
    )
    if home is None or home == here.pk:
        raise Unprocessable(
            "this memory was learned in this conversation; there is no elsewhere to keep it",
            code="nowhere_else",
        )
    return {"restricted_to_conversation_id": home}


def rejection_summary(rejection: Rejection) -> str:
    """One sentence naming what committed, for the page that made the rejection."""
    old = f"[{rejection.revision.short_id}]"
    new = f"[{rejection.resulting_revision.short_id}]" if rejection.resulting_revision is not None else ""
    if rejection.kind == RejectionKind.NOT_TRUE:
        return f"Retired {old}: the agent will not recall it again, and will not re-learn it."
    if rejection.kind == RejectionKind.CHANGED:
        return f"Corrected {old}: superseded by {new}, valid from now."
    if rejection.kind == RejectionKind.NOT_HERE:
        assert rejection.resulting_revision is not None
        if rejection.resulting_revision.restricted_to_conversation_id is not None:
            return f"Scoped {old}: now {new}, kept only in the conversation where it was learned."
        origin = rejection.origin_scope or "its own project"
        return f"Scoped {old}: now {new}, local to {origin}; it no longer carries into other projects."
    if rejection.relation == CorrectionRelation.BYSTANDER and rejection.requested_kind != RejectionKind.WRONG:
        return (
            f"Reported {old} for review: only the person it is about, the person who said it or an operator "
            "can change it, so an operator will look at your report. It ranks lower meanwhile; nothing was "
            "changed or retired."
        )
    return f"Flagged {old} for review: it ranks lower until an operator looks at it. Nothing was retired."
