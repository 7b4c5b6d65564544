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
from config.indexer import notify_indexer
from config.rows import fetch_one, fetch_where
from config.text import TITLE_LIMIT, clean_name
from history.audience import DESTINATION_KINDS, Audience, AudienceKind
from history.models import Conversation, EvidenceMethod, Message, MessageDirection, MessageSourceEvidence


# Called inside an ingest batch, whose failure is whole: no savepoint (get_or_create takes its own).
@transaction.atomic(savepoint=False)
def conversation_upsert(
    *,
    agent: RuntimeAgent,
    connector: Connector,
    external_thread_id: str,
    audience: Audience,
    title: str = "",
    project: str = "",
) -> Conversation:
    """Create a conversation or bring its audience, title and project up to date. The title and
    project are names (``config.text.clean_name``): one normalised line each."""
    title, project = clean_name(title, limit=TITLE_LIMIT), clean_name(project, limit=TITLE_LIMIT)
    if connector.agent_id != agent.pk:
        raise NotFound("connector not found", code="connector_not_found")
    if audience.kind not in DESTINATION_KINDS:
        raise Unprocessable(f"a conversation cannot have a {audience.kind} audience", code="invalid_audience")
    conversation = (
        fetch_one(
            Conversation,
            "x.connector_id = %s AND x.external_thread_id = %s",
            [connector.pk, external_thread_id],
            lock=True,
        )
        or Conversation.objects.select_for_update().get_or_create(
            connector=connector,
            external_thread_id=external_thread_id,
            defaults={"agent": agent, "title": title, "project": project, **_audience_columns(audience)},
        )[0]
    )
    # An empty title or project means "unchanged": connectors do not resend them with every message.
    wanted = {"title": title, "project": project, **_audience_columns(audience)}
    changed = {
        name: value
        for name, value in wanted.items()
        if getattr(conversation, name) != value and not (name in ("title", "project") and not value)
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


#: A conversation's message by its connector's id (unique per conversation).
_BY_EXTERNAL_ID = "x.conversation_id = %s AND x.external_id = %s"


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
        existing = fetch_one(Message, _BY_EXTERNAL_ID, [conversation.pk, external_id])
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
            notify_indexer()
    except IntegrityError:
        # A concurrent ingest of the same external id won the race: answer with its row.
        existing = Message.objects.filter(conversation=conversation, external_id=external_id).first()
        if existing is None:
            raise
        return IngestedMessage(message=existing, created=False)
    return IngestedMessage(message=message, created=True)


# Called inside the delivering transaction, which fails whole with it: no savepoint.
@transaction.atomic(savepoint=False)
def reply_record(
    *,
    turn_conversation: Conversation,
    body: str,
    history_message_ids: list[int],
    memory_revision_ids: list[int],
    cited_revision_ids: list[int],
    created_at: datetime,
) -> Message:
    """Append the agent's delivered reply with its provenance; its evidence is the agent's own delivery."""
    message = Message.objects.create(
        agent_id=turn_conversation.agent_id,
        conversation=turn_conversation,
        actor=None,
        direction=MessageDirection.OUTBOUND,
        body=body,
        created_at=created_at,
        audience_kind=turn_conversation.audience_kind,
        audience_namespace=turn_conversation.audience_namespace,
        audience_readers=list(turn_conversation.audience_readers),
        history_message_ids=history_message_ids,
        memory_revision_ids=memory_revision_ids,
        cited_revision_ids=cited_revision_ids,
    )
    MessageSourceEvidence.objects.create(message=message, method=EvidenceMethod.AGENT_REPLY)
    notify_indexer()
    return message


@dataclass(frozen=True)
class IngestItem:
    """One connector message as a runtime relays it. Readers are the connector's external actor ids."""

    connector_type: str
    connector_name: str
    thread_id: str
    audience_kind: str
    reader_external_ids: tuple[str, ...]
    actor_external_id: str
    actor_display_name: str
    body: str
    created_at: datetime
    evidence_method: str
    evidence_detail: dict[str, Any]
    external_id: str | None = None
    thread_title: str = ""
    project: str = ""


@transaction.atomic
def messages_ingest_batch(*, agent: RuntimeAgent, items: list[IngestItem]) -> list[IngestedMessage]:
    """Ingest a validated batch in one transaction: connectors, actors and conversations are created
    on first sight inside the agent's own perspective; audiences are built from the connector's
    namespace, never from free text; a repeated external message id creates nothing new."""
    results: list[IngestedMessage] = []
    connectors: dict[tuple[str, str], Connector] = {}
    actors: dict[tuple[int, str], Actor] = {}

    def connector_for(item: IngestItem) -> Connector:
        key = (item.connector_type, item.connector_name)
        if key not in connectors:
            connectors[key] = (
                fetch_one(Connector, "x.agent_id = %s AND x.type = %s AND x.name = %s", [agent.pk, *key])
                or Connector.objects.get_or_create(agent=agent, type=key[0], name=key[1])[0]
            )
        return connectors[key]

    #: Actors :func:`read_actors` looked for, found or not: one not found is created without a second look.
    looked_up: set[tuple[int, str]] = set()

    def read_actors(connector: Connector, external_ids: list[str]) -> None:
        """Read the connector's known actors among ``external_ids`` in one statement (a members room
        names each of its readers), so :func:`actor_for` finds them without a query each."""
        unread = sorted({e for e in external_ids if (connector.pk, e) not in actors})
        if len(unread) < 2:
            return
        where = "x.connector_id = %s AND x.external_id = ANY(%s::text[])"
        for actor in fetch_where(Actor, where, [connector.pk, unread]):
            actors[(connector.pk, actor.external_id)] = actor
        looked_up.update((connector.pk, external_id) for external_id in unread)

    def actor_for(connector: Connector, external_id: str, display_name: str | None) -> Actor:
        # A display name is a name (config.text.clean_name); one that cleans to nothing is no name.
        display_name = clean_name(display_name or "")
        key = (connector.pk, external_id)
        actor = actors.get(key)
        if actor is None:
            if key not in looked_up:
                actor = fetch_one(Actor, "x.connector_id = %s AND x.external_id = %s", [connector.pk, external_id])
            if actor is None:
                actor = Actor.objects.get_or_create(
                    connector=connector,
                    external_id=external_id,
                    defaults={"tenant_id": agent.tenant_id, "display_name": display_name or external_id},
                )[0]
            actors[key] = actor
        if display_name and actor.display_name != display_name:
            actor.display_name = display_name  # a rename changes rendering, never stored text
            actor.save(update_fields=["display_name"])
        return actor

    for item in items:
        connector = connector_for(item)
        read_actors(connector, [item.actor_external_id, *item.reader_external_ids])
        author = actor_for(connector, item.actor_external_id, item.actor_display_name)
        readers = [actor_for(connector, external_id, None).pk for external_id in item.reader_external_ids]
        audience = Audience(
            item.audience_kind,
            "" if item.audience_kind == AudienceKind.PUBLIC else connector.namespace,
            tuple(readers),
        )
        conversation = conversation_upsert(
            agent=agent,
            connector=connector,
            external_thread_id=item.thread_id,
            audience=audience,
            title=item.thread_title,
            project=item.project,
        )
        results.append(
            message_ingest(
                conversation=conversation,
                actor=author,
                body=item.body,
                created_at=item.created_at,
                evidence_method=item.evidence_method,
                evidence_detail=item.evidence_detail,
                external_id=item.external_id,
            )
        )
    return results
