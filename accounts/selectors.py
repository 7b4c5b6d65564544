"""Reads of an agent's people."""

from __future__ import annotations

from django.db.models import Q, Value
from django.db.models.functions import Lower, StrIndex

from accounts.models import Actor


def actors_named_in(agent_id: int, text: str) -> list[Actor]:
    """The agent's actors whose display name or external id occurs in ``text``, ignoring case.

    These are the only candidates :func:`memory.retrieval.query.named_actor_ids` can find (it keeps
    those named as whole words), so memory recall and history search load them rather than every
    person the agent knows: one substring test per actor in the database instead of one loaded row
    per actor per call.
    """
    lowered = Value(text.lower())
    return list(
        Actor.objects.filter(connector__agent_id=agent_id)
        .annotate(name_at=StrIndex(lowered, Lower("display_name")), external_at=StrIndex(lowered, Lower("external_id")))
        .filter(Q(name_at__gt=0) & ~Q(display_name="") | Q(external_at__gt=0) & ~Q(external_id=""))
        .only("id", "display_name", "external_id")
        .order_by("pk")
    )
