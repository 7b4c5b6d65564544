"""A small workspace for retrieval contracts: an agent in slack:acme with a CTO, two engineers and
their DMs, a public channel in project "atlas", and helpers to remember and to ask."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import pytest

from accounts.models import Actor, Connector, RuntimeAgent
from history.models import Conversation
from memory.models import MemoryRevision
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.query import form_query
from memory.retrieval.service import RecallProvider, RecallResult, recall, task_budget
from memory.services import Belief, Provenance, memory_remember
from tests.factories import ActorFactory, AgentFactory, ConnectorFactory, Speaks, direct_conversation, public_channel


@dataclass
class Workspace(Speaks):
    agent: RuntimeAgent
    connector: Connector
    victor: Actor
    alice: Actor
    bob: Actor
    alice_dm: Conversation
    bob_dm: Conversation
    general: Conversation

    def remember(
        self,
        body: str,
        *,
        said_in: Conversation,
        by: Actor,
        about: Actor | None = None,
        authenticated: bool = True,
        **belief: object,
    ) -> MemoryRevision:
        message = self.say(said_in, by, body, authenticated=authenticated)
        return memory_remember(
            agent=self.agent,
            belief=Belief(body=body, subject_id=about.pk if about else None, **belief),  # type: ignore[arg-type]
            provenance=Provenance(source_message_id=message.pk),
        ).revision

    def ask(
        self,
        conversation: Conversation,
        requester: Actor,
        text: str,
        *,
        as_of: datetime | None = None,
        known_at: datetime | None = None,
        max_tokens: int | None = None,
        max_items: int = 12,
        providers: Sequence[RecallProvider] | None = None,
    ) -> RecallResult:
        return recall(
            perspective=perspective_for_conversation(conversation, requester_id=requester.pk),
            query=form_query(
                message=text,
                requester_id=requester.pk,
                known_actors=list(Actor.objects.filter(connector__agent=self.agent)),
                as_of=as_of,
                known_at=known_at,
            ),
            budget=task_budget(max_tokens=max_tokens, max_items=max_items),
            providers=providers,
        )


def revision_ids(result: RecallResult) -> list[int]:
    return [item.revision_id for item in result.items]


@pytest.fixture
def ws(db: None) -> Workspace:
    agent = AgentFactory.create()
    connector = ConnectorFactory.create(agent=agent, type="slack", name="acme")
    victor = ActorFactory.create(connector=connector, display_name="Victor", external_id="U123")
    alice = ActorFactory.create(connector=connector, display_name="Alice", external_id="U200")
    bob = ActorFactory.create(connector=connector, display_name="Bob", external_id="U300")
    return Workspace(
        agent=agent,
        connector=connector,
        victor=victor,
        alice=alice,
        bob=bob,
        alice_dm=direct_conversation(connector, alice),
        bob_dm=direct_conversation(connector, bob),
        general=public_channel(connector, project="atlas"),
    )
