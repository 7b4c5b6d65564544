"""Export a person's data as one JSON document (reads only).

A person is an actor and the actors a live identity link verifies as the same person
(:func:`memory.erasure.person_actors`), or, for an end user downloading their own data, the actors their
login is (``UserActor``). The document holds:

- ``messages``: what they wrote;
- ``memories``: every memory about them (``subject``) or resting on their words (``source_actor_ids``), or
  written by their own corrections, with its revision history;
- ``rejections``: their corrections, and ``grants``: the sharing grants they approved.

The operator's export (admin action, ``manage.py export_person``) holds all of it: operators already
see every row of their tenants in the admin. The end user's own export holds only what their view
ceiling allows, with the turn page's rules (:mod:`memory.selectors`): messages of conversations they
could read, and revisions disclosable to a direct conversation with one of their actors (audience or
live grant, decided in SQL); a rejection or grant names a revision by id, never by text. Nothing here
is a recall: it writes no trace and no audit row, and no turn's provenance includes it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q
from django.utils import timezone

from accounts.models import Actor, UserActor
from history.models import Message, MessageDirection
from memory.erasure import Progress, no_progress, person_actors
from memory.models import MemoryEntry, MemoryRevision, Rejection, SharingGrant, short_id
from memory.selectors import readable_conversations, revisions_within_viewer_ceiling, viewer_actors

EXPORT_FORMAT = "engram.person-export/v1"
CHUNK = 500


def person_export_for_operator(actor: Actor, *, progress: Progress = no_progress) -> dict[str, Any]:
    """Everything Engram holds about the person ``actor`` is (an operator's export)."""
    actors = person_actors(actor)
    users = list(UserActor.objects.filter(actor__in=actors).values_list("user_id", flat=True).distinct())
    return _export(actors=actors, user_ids=users, viewer=None, progress=progress)


def person_export_for_viewer(user: AbstractBaseUser, *, progress: Progress = no_progress) -> dict[str, Any]:
    """A logged-in end user's own data, within their view ceiling."""
    return _export(actors=viewer_actors(user), user_ids=[user.pk], viewer=user, progress=progress)


def _export(
    *, actors: list[Actor], user_ids: list[int], viewer: AbstractBaseUser | None, progress: Progress
) -> dict[str, Any]:
    actor_ids = [a.pk for a in actors]
    agents = sorted({a.connector.agent_id for a in Actor.objects.filter(pk__in=actor_ids).select_related("connector")})
    document: dict[str, Any] = {
        "format": EXPORT_FORMAT,
        "generated_at": timezone.now().isoformat(),
        "scope": "operator" if viewer is None else "self",
        "person": [
            {
                "actor_id": a.pk,
                "connector": a.connector.namespace,
                "external_id": a.external_id,
                "display_name": a.display_name,
            }
            for a in Actor.objects.filter(pk__in=actor_ids).select_related("connector").order_by("pk")
        ],
    }

    messages = (
        Message.objects.filter(agent_id__in=agents, actor_id__in=actor_ids, direction=MessageDirection.INBOUND)
        .select_related("conversation")
        .order_by("created_at", "id")
    )
    if viewer is not None:
        messages = messages.filter(conversation__in=readable_conversations(viewer))
    tick = progress("messages", messages.count())
    document["messages"] = []
    for message in messages.iterator(chunk_size=CHUNK):
        document["messages"].append(
            {
                "id": message.pk,
                "conversation_id": message.conversation_id,
                "conversation": str(message.conversation),
                "created_at": message.created_at.isoformat(),
                "body": message.body,
            }
        )
        tick(1)

    about = (
        Q(subject_id__in=actor_ids) | Q(source_actor_ids__overlap=list(actor_ids)) | Q(created_by_user_id__in=user_ids)
    )
    entry_ids = MemoryRevision.objects.filter(agent_id__in=agents).filter(about).values("entry_id")
    revisions = list(
        MemoryRevision.objects.filter(entry_id__in=entry_ids).order_by("entry_id", "number").select_related("entry")
    )
    if viewer is not None:
        by_agent: dict[int, list[int]] = defaultdict(list)
        for revision in revisions:
            by_agent[revision.agent_id].append(revision.pk)
        visible = set().union(*(revisions_within_viewer_ceiling(viewer, a, ids) for a, ids in by_agent.items()))
        revisions = [r for r in revisions if r.pk in visible]
    tick = progress("memory revisions", len(revisions))
    entries: dict[int, dict[str, Any]] = {}
    for revision in revisions:
        entry: MemoryEntry = revision.entry
        item = entries.setdefault(
            entry.pk,
            {
                "entry_id": entry.pk,
                "status": entry.status,
                "current": short_id(entry.current_revision_id) if entry.current_revision_id else None,
                "revisions": [],
            },
        )
        item["revisions"].append(
            {
                "id": revision.short_id,
                "number": revision.number,
                "body": revision.body,
                "about_you": revision.subject_id in actor_ids,
                "from_you": bool(set(revision.source_actor_ids) & set(actor_ids)),
                "belief_type": revision.belief_type,
                "portability": revision.portability,
                "origin_scope": revision.origin_scope,
                "lifecycle": revision.lifecycle,
                "valid_from": revision.valid_from.isoformat(),
                "valid_to": revision.valid_to.isoformat() if revision.valid_to else None,
                "recorded_at": revision.recorded_at.isoformat(),
                "created_by": revision.created_by,
            }
        )
        tick(1)
    document["memories"] = list(entries.values())

    document["rejections"] = [
        {
            "id": r.pk,
            "kind": r.kind,
            "revision": short_id(r.revision_id),
            "correction": r.correction,
            "resulting_revision": short_id(r.resulting_revision_id) if r.resulting_revision_id else None,
            "created_at": r.created_at.isoformat(),
        }
        for r in Rejection.objects.filter(agent_id__in=agents, user_id__in=user_ids).order_by("created_at", "id")
    ]
    document["grants"] = [
        {
            "id": g.pk,
            "revision": short_id(g.revision_id),
            "audience": {"kind": g.audience_kind, "namespace": g.audience_namespace, "readers": g.audience_readers},
            "created_at": g.created_at.isoformat(),
            "revoked_at": g.revoked_at.isoformat() if g.revoked_at else None,
        }
        for g in SharingGrant.objects.filter(agent_id__in=agents)
        .filter(Q(granted_by_actor_id__in=actor_ids) | Q(granted_by_user_id__in=user_ids))
        .order_by("created_at", "id")
    ]
    document["counts"] = {key: len(document[key]) for key in ("messages", "memories", "rejections", "grants")}
    return document
