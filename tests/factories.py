"""Factories for the shapes every contract test needs: a tenant with an agent, its connector, people,
and conversations with structured audiences."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import factory
from django.utils import timezone

from accounts.models import Actor, Connector, RuntimeAgent, Tenant
from history.audience import Audience
from history.models import Conversation, EvidenceMethod, Message, MessageDirection, MessageSourceEvidence
from history.services import message_ingest
from memory.models import MemoryEntry, MemoryRevision
from memory.retrieval.history_search.ranking import Signals


class TenantFactory(factory.django.DjangoModelFactory[Tenant]):
    class Meta:
        model = Tenant

    name = factory.Sequence(lambda n: f"Tenant {n}")
    slug = factory.Sequence(lambda n: f"tenant-{n}")


class AgentFactory(factory.django.DjangoModelFactory[RuntimeAgent]):
    class Meta:
        model = RuntimeAgent

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda n: f"agent-{n}")


class ConnectorFactory(factory.django.DjangoModelFactory[Connector]):
    class Meta:
        model = Connector

    agent = factory.SubFactory(AgentFactory)
    type = "slack"
    name = factory.Sequence(lambda n: f"ws{n}")


class ActorFactory(factory.django.DjangoModelFactory[Actor]):
    class Meta:
        model = Actor

    connector = factory.SubFactory(ConnectorFactory)
    tenant = factory.LazyAttribute(lambda o: o.connector.agent.tenant)
    external_id = factory.Sequence(lambda n: f"U{n:05d}")
    display_name = factory.Faker("first_name")


class ConversationFactory(factory.django.DjangoModelFactory[Conversation]):
    """A conversation; pass ``audience=Audience...`` to set its structured audience."""

    class Meta:
        model = Conversation
        exclude = ("audience",)

    connector = factory.SubFactory(ConnectorFactory)
    agent = factory.LazyAttribute(lambda o: o.connector.agent)
    external_thread_id = factory.Sequence(lambda n: f"C{n:05d}")
    title = factory.Sequence(lambda n: f"conversation {n}")
    audience = factory.LazyAttribute(lambda o: Audience.workspace(o.connector.namespace))
    audience_kind = factory.LazyAttribute(lambda o: o.audience.kind)
    audience_namespace = factory.LazyAttribute(lambda o: o.audience.namespace)
    audience_readers = factory.LazyAttribute(lambda o: list(o.audience.readers))


def direct_conversation(connector: Connector, actor: Actor, **kwargs: object) -> Conversation:
    """A DM between the agent and one person: ``members(namespace, [actor])``."""
    conversation = ConversationFactory.create(
        connector=connector, audience=Audience.members(connector.namespace, [actor.pk]), **kwargs
    )
    return conversation


def private_channel(connector: Connector, actors: Sequence[Actor], **kwargs: object) -> Conversation:
    conversation = ConversationFactory.create(
        connector=connector, audience=Audience.members(connector.namespace, [a.pk for a in actors]), **kwargs
    )
    return conversation


def public_channel(connector: Connector, **kwargs: object) -> Conversation:
    """A channel every member of the connector's workspace may read: ``workspace(namespace)``."""
    conversation = ConversationFactory.create(
        connector=connector, audience=Audience.workspace(connector.namespace), **kwargs
    )
    return conversation


# --- Messages and memories built directly with the ORM (no services), for database-level contracts ---


def make_message(
    conversation: Conversation,
    *,
    body: str = "hello",
    actor: Actor | None = None,
    direction: str = "inbound",
    evidence: str | None = "connector_signed",
    **kwargs: Any,
) -> Message:
    """One transcript line posted under the conversation's current audience.

    Inbound messages need an author; one is made on the conversation's connector if none is given.
    ``evidence`` is the ``MessageSourceEvidence`` method, or None for a message of unknown provenance.
    """
    if actor is None and direction == MessageDirection.INBOUND:
        actor = ActorFactory.create(connector=conversation.connector)
    message = Message.objects.create(
        agent=conversation.agent,
        conversation=conversation,
        actor=actor,
        direction=direction,
        body=body,
        created_at=kwargs.pop("created_at", None) or timezone.now(),
        audience_kind=conversation.audience_kind,
        audience_namespace=conversation.audience_namespace,
        audience_readers=list(conversation.audience_readers),
        **kwargs,
    )
    if evidence is not None:
        MessageSourceEvidence.objects.create(message=message, method=evidence)
    return message


def make_revision(
    agent: RuntimeAgent,
    *,
    audience: Audience,
    body: str = "The team ships on Thursdays.",
    entry: MemoryEntry | None = None,
    make_current: bool = True,
    **kwargs: Any,
) -> MemoryRevision:
    """The next revision of ``entry`` (a new live entry if none) with the given source audience.

    ``make_current=False`` leaves the entry's current revision alone (a revision nothing points at).
    """
    if entry is None:
        entry = MemoryEntry.objects.create(agent=agent)
    kwargs.setdefault("belief_type", "project_fact")
    kwargs.setdefault("created_by", "remember")
    revision = MemoryRevision.objects.create(
        entry=entry,
        agent=agent,
        number=entry.revisions.count() + 1,
        body=body,
        audience_kind=audience.kind,
        audience_namespace=audience.namespace,
        audience_readers=list(audience.readers),
        **kwargs,
    )
    if make_current:
        entry.current_revision = revision
        entry.save(update_fields=["current_revision"])
    return revision


class Speaks:
    """For test worlds: ``say`` ingests a message the way a connector does (source evidence unless
    ``authenticated`` is false, which leaves its provenance unknown)."""

    def say(self, conversation: Conversation, actor: Actor, body: str, *, authenticated: bool = True) -> Message:
        return message_ingest(
            conversation=conversation,
            actor=actor,
            body=body,
            created_at=timezone.now(),
            evidence_method=EvidenceMethod.CONNECTOR_SIGNED if authenticated else None,
        ).message


def ranking_signals(now: datetime, **fields: Any) -> Signals:
    """History search's ranking signals with nothing but ``fields`` set: no requester, no named people,
    no loaded window, no neighbours."""
    defaults: dict[str, Any] = {
        "requester_ids": frozenset(),
        "named_ids": frozenset(),
        "spoke_in": frozenset(),
        "window": frozenset(),
        "conversation_id": None,
        "neighbours": {},
    }
    return Signals(now=now, **(defaults | fields))
