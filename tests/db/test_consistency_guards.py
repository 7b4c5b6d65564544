"""Cross-table rules PostgreSQL enforces with BEFORE triggers: every denormalised perspective column
agrees with its parent, and an entry's current revision is one of its own."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Actor, IdentityLink
from history.audience import Audience
from history.models import Message
from memory.models import MemoryEntry, MemoryRevision
from tests.factories import ActorFactory, AgentFactory, ConnectorFactory, TenantFactory, make_revision, public_channel

pytestmark = pytest.mark.django_db


def refused(action: Callable[[], object]) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        action()


def test_an_actor_belongs_to_its_connectors_tenant() -> None:
    connector = ConnectorFactory.create()
    refused(
        lambda: Actor.objects.create(
            tenant=TenantFactory.create(), connector=connector, external_id="U1", display_name="Mallory"
        )
    )


def test_an_identity_link_joins_only_actors_of_its_own_agent() -> None:
    own = ActorFactory.create()
    foreign = ActorFactory.create(connector=ConnectorFactory.create(agent=AgentFactory.create(tenant=own.tenant)))
    first, second = sorted([own, foreign], key=lambda a: a.pk)
    refused(
        lambda: IdentityLink.objects.create(
            agent=own.connector.agent, actor_a=first, actor_b=second, proof="both signed in", verified_at=timezone.now()
        )
    )


def test_a_message_belongs_to_its_conversations_agent() -> None:
    channel = public_channel(ConnectorFactory.create())
    author = ActorFactory.create(connector=channel.connector)
    refused(
        lambda: Message.objects.create(
            agent=AgentFactory.create(),
            conversation=channel,
            actor=author,
            direction="inbound",
            body="hi",
            created_at=timezone.now(),
            audience_kind=channel.audience_kind,
            audience_namespace=channel.audience_namespace,
        )
    )


def test_a_revision_belongs_to_its_entrys_agent() -> None:
    entry = MemoryEntry.objects.create(agent=AgentFactory.create())
    refused(
        lambda: MemoryRevision.objects.create(
            entry=entry,
            agent=AgentFactory.create(),
            number=1,
            body="x",
            belief_type="project_fact",
            created_by="remember",
            audience_kind="public",
        )
    )


def test_an_entrys_current_revision_is_one_of_its_own() -> None:
    agent = AgentFactory.create()
    mine = make_revision(agent, audience=Audience.public())
    other = make_revision(agent, audience=Audience.public())
    # Another entry's revision that no entry points at: only this rule stands in the way.
    unclaimed = make_revision(
        agent, audience=Audience.public(), entry=MemoryEntry.objects.get(pk=other.entry_id), make_current=False
    )
    entry = MemoryEntry.objects.get(pk=mine.entry_id)
    for foreign in (other, unclaimed):
        entry.current_revision = foreign
        refused(entry.save)
        refused(partial(MemoryEntry.objects.filter(pk=entry.pk).update, current_revision=foreign))
    entry.refresh_from_db()
    assert entry.current_revision_id == mine.pk
    # An update that leaves the pointer alone is not judged again, and passes.
    MemoryEntry.objects.filter(pk=entry.pk).update(utility=1.0)
