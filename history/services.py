"""Writes for conversations and their transcript.

Messages are append-only. ``message_ingest`` is idempotent on the connector's message id, records
the conversation's audience at the time of posting, and attaches the connector's authentication as
source evidence (without which the message is eligible nowhere).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from accounts.models import Actor, Connector, RuntimeAgent
from config.errors import NotFound, Unprocessable
from history.audience import DESTINATION_KINDS, Audience
from history.models import Conversation, EvidenceMethod, Message, MessageDirection, MessageSourceEvidence


@transaction.atomic
def conversation_upsert(
    *,
    agent: RuntimeAgent,
    connector: Connector,
    external_thread_id: str,
    audience: Audience,
    title: str = "",
    project: str = "",
) -> Conversation:
    """Create a conversation or bring its audience, title and project up to date."""
    if connector.agent_id != agent.pk:
        raise NotFound("connector not found", code="connector_not_found")
    if audience.kind not in DESTINATION_KINDS:
        raise Unprocessable(f"a conversation cannot have a {audience.kind} audience", code="invalid_audience")
    conversation, _ = Conversation.objects.select_for_update().get_or_create(
        connector=connector,
        external_thread_id=external_thread_id,
        defaults={"agent": agent, "title": title, "project": project, **_audience_columns(audience)},
    )
    changed = {
        name: value
        for name, value in {"title": title, "project": project, **_audience_columns(audience)}.items()
        if getattr(conversation, name) != value
    }
    if changed:
        for name, value in changed.items():
            setattr(conversation, name, value)
        conversation.save(update_fields=[*changed, "updated_at"])
    return conversation


def _audience_columns(audience: Audience) -> dict[str, Any]:
    return {
        "audience_kind": audience.kind,
        "audience_namespace": audience.namespace,
        "audience_readers": list(audience.readers),
    }


@dataclass(frozen=True)
class IngestedMessage:
    message: Message
    created: bool


def message_ingest(
    *,
    conversation: Conversation,
    actor: Actor,
    body: str,
    created_at: datetime,
    evidence_method: EvidenceMethod | str | None,
    evidence_detail: dict[str, Any] | None = None,
    external_id: str | None = None,
) -> IngestedMessage:
    """Append an inbound message. A repeated ``external_id`` in the same conversation creates nothing.

    ``evidence_method`` is how the connector authenticated the message; ``None`` records the message
    with unknown provenance, which keeps it out of every audience until evidence is attached.
    """
    if actor.connector_id != conversation.connector_id:
        raise NotFound("actor not found", code="actor_not_found")
    if not body.strip():
        raise Unprocessable("a message needs a body", code="empty_body")
    if external_id is not None:
        existing = Message.objects.filter(conversation=conversation, external_id=external_id).first()
        if existing is not None:
            return IngestedMessage(message=existing, created=False)
    try:
        with transaction.atomic():
            message = Message.objects.create(
                agent_id=conversation.agent_id,
                conversation=conversation,
                actor=actor,
                direction=MessageDirection.INBOUND,
                external_id=external_id,
                body=body,
                created_at=created_at,
                audience_kind=conversation.audience_kind,
                audience_namespace=conversation.audience_namespace,
                audience_readers=list(conversation.audience_readers),
            )
            if evidence_method is not None:
                MessageSourceEvidence.objects.create(
                    message=message, method=evidence_method, detail=evidence_detail or {}
                )
    except IntegrityError:
        # A concurrent ingest of the same external id won the race: answer with its row.
        existing = Message.objects.filter(conversation=conversation, external_id=external_id).first()
        if existing is None:
            raise
        return IngestedMessage(message=existing, created=False)
    return IngestedMessage(message=message, created=True)
