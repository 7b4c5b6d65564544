"""The seeded world the randomized privacy tests ask questions of, and the oracle helpers they share.

Two tenants, three agents with a Slack and an email connector each (namespaces repeat across agents
on purpose), public, workspace, private, direct, and external conversations, identity links (one of
them revoked), ~300 memories written through the services with mixed, unknown and "nobody" source
audiences, amendments, forgets, validity windows, conversation restrictions, local portability and
sharing grants, and group memories learned from another member's words (several source actors).
The same seed builds the same world.

The oracle side is plain Python over ORM rows and ``history.audience.audience_allows``, never the
retrieval SQL: a test that reused the SQL to judge the SQL could not fail.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Self

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from accounts.models import Actor, Connector, IdentityLink, RuntimeAgent
from history.audience import Audience, AudienceKind, audience_allows
from history.models import Conversation, EvidenceMethod, Message
from history.services import conversation_upsert, message_ingest
from memory.models import (
    PERSON_BELIEF_TYPES,
    Authority,
    BeliefType,
    EntryStatus,
    Lifecycle,
    MemoryEntry,
    MemoryRevision,
    Portability,
    SharingGrant,
)
from memory.services import Belief, Provenance, entry_forget, memory_remember, revision_amend
from tests.factories import AgentFactory, TenantFactory

MEMORIES = 300

NAMES = ("Priya", "Sam", "Marco", "Dana", "Lena", "Omar", "Yuki", "Sam", "Ines", "Tomas", "Ravi", "Greta")
SLACK_ACTORS = 8
EMAIL_ACTORS = 4
PROJECTS = ("atlas", "borealis", "cyclone")

WORDS = {
    "food": ("sushi", "ramen", "falafel", "tacos", "risotto", "curry", "dumplings", "pierogi"),
    "day": ("monday", "tuesday", "wednesday", "thursday", "friday"),
    "component": ("billing", "ingestion", "dashboard", "gateway", "scheduler", "exporter", "warehouse"),
    "place": ("Lisbon", "Berlin", "Porto", "Madrid", "Oslo", "Krakow"),
    "color": ("red", "green", "silver", "black", "yellow"),
    "vehicle": ("bicycle", "scooter", "hatchback", "campervan", "motorbike"),
    "sport": ("tennis", "chess", "padel", "football", "climbing", "rowing"),
    "month": ("january", "march", "may", "july", "september", "november"),
    "project": ("Atlas", "Borealis", "Cyclone"),
}
TEMPLATES = (
    "{name} prefers {food} for lunch on {day}.",
    "{name} is leading the {project} {component} migration.",
    "The {project} {component} deploys every {day} from the {place} office.",
    "{name} drives a {color} {vehicle} and parks it near the {place} office.",
    "{name} is allergic to {food} and avoids the {place} canteen.",
    "The {component} budget for {project} is capped at {num}k EUR.",
    "{name} plays {sport} with {name2} on {day} evenings.",
    "{name} reports to {name2} on the {project} {component} team.",
    "The {project} launch moved to {month} because of the {component} review.",
    "{name} keeps the {component} runbook in the {place} wiki.",
    "{name} does not like {sport} and never joins the {day} games.",
)
NOISE_WORDS = ("kubernetes", "invoice", "holiday", "coffee", "quarterly", "password", "roadmap", "umbrella")


@dataclass
class AgentWorld:
    agent: RuntimeAgent
    slack: Connector
    email: Connector
    actors: list[Actor]
    conversations: list[Conversation]
    messages: list[Message] = field(default_factory=list)
    revisions: list[MemoryRevision] = field(default_factory=list)
    entries: list[int] = field(default_factory=list)


def sentence(rng: random.Random, names: list[str]) -> str:
    fills = {key: rng.choice(values) for key, values in WORDS.items()}
    return rng.choice(TEMPLATES).format(
        name=rng.choice(names), name2=rng.choice(names), num=rng.randrange(10, 90), **fills
    )


def readers_of(conversation: Conversation, world: AgentWorld) -> list[Actor]:
    if conversation.audience_readers:
        wanted = set(conversation.audience_readers)
        return [a for a in world.actors if a.pk in wanted]
    return [a for a in world.actors if a.connector_id == conversation.connector_id]


def random_requester(rng: random.Random, world: AgentWorld, conversation: Conversation) -> Actor | None:
    """Mostly someone in the room, sometimes anyone the agent knows, sometimes nobody in particular."""
    roll = rng.random()
    if roll < 0.6:
        return rng.choice(readers_of(conversation, world))
    if roll < 0.9:
        return rng.choice(world.actors)
    return None


def build_agent(rng: random.Random, agent: RuntimeAgent) -> AgentWorld:
    """Connectors, people and conversations of one agent. Namespaces repeat across agents on purpose:
    only the agent term keeps one agent's workspace memories out of another's."""
    slack = Connector.objects.create(agent=agent, type="slack", name="acme")
    email = Connector.objects.create(agent=agent, type="email", name="acme.example")
    slack_actors = [
        Actor.objects.create(
            tenant=agent.tenant, connector=slack, external_id=f"U{agent.pk}{i:02d}", display_name=NAMES[i]
        )
        for i in range(SLACK_ACTORS)
    ]
    # The first email people are the first Slack people under another identity (same display name).
    email_actors = [
        Actor.objects.create(
            tenant=agent.tenant,
            connector=email,
            external_id=f"{NAMES[i].lower()}{i}@acme.example",
            display_name=NAMES[i] if i < 3 else NAMES[SLACK_ACTORS + i],
        )
        for i in range(EMAIL_ACTORS)
    ]
    world = AgentWorld(agent=agent, slack=slack, email=email, actors=[*slack_actors, *email_actors], conversations=[])

    def conv(connector: Connector, thread: str, audience: Audience, project: str = "") -> None:
        world.conversations.append(
            conversation_upsert(
                agent=agent, connector=connector, external_thread_id=thread, audience=audience, project=project
            )
        )

    conv(slack, "C-announce", Audience.public(), "atlas")
    conv(slack, "C-general", Audience.workspace(slack.namespace), "atlas")
    conv(slack, "C-borealis", Audience.workspace(slack.namespace), "borealis")
    for i in range(3):
        readers = rng.sample(slack_actors, rng.randint(2, 4))
        conv(slack, f"G-private-{i}", Audience.members(slack.namespace, [a.pk for a in readers]), rng.choice(PROJECTS))
    for actor in slack_actors:
        conv(slack, f"D-{actor.external_id}", Audience.members(slack.namespace, [actor.pk]))
    for actor in email_actors:
        conv(email, f"mail-{actor.external_id}", Audience.members(email.namespace, [actor.pk]))
    conv(email, "mail-thread", Audience.members(email.namespace, [a.pk for a in email_actors[:3]]), "cyclone")
    conv(email, "mail-external", Audience.external(email.namespace, [a.pk for a in email_actors[1:]]), "atlas")

    now = timezone.now()
    links = [
        (slack_actors[0], email_actors[0], None),
        (slack_actors[1], email_actors[1], now),  # revoked: Sam's two identities are separate again
        (slack_actors[2], email_actors[2], None),
        (slack_actors[5], slack_actors[6], now),
    ]
    for a, b, revoked_at in links:
        low, high = sorted((a, b), key=lambda x: x.pk)
        IdentityLink.objects.create(
            agent=agent, actor_a=low, actor_b=high, proof="signed in on both", verified_at=now, revoked_at=revoked_at
        )
    return world


def build_world(rng: random.Random) -> list[AgentWorld]:
    first, second = TenantFactory.create(slug="fuzz-one"), TenantFactory.create(slug="fuzz-two")
    agents = [
        AgentFactory.create(tenant=first, name="a1"),
        AgentFactory.create(tenant=first, name="a2"),
        AgentFactory.create(tenant=second, name="a3"),
    ]
    worlds = [build_agent(rng, agent) for agent in agents]
    operator = get_user_model().objects.create_user(username="fuzz-operator", password="x")
    now = timezone.now()

    for n in range(MEMORIES):
        world = rng.choice(worlds)
        if n == MEMORIES // 2:
            # A workspace channel made private midway: earlier messages keep the audience they had.
            general = world.conversations[1]
            readers = rng.sample([a for a in world.actors if a.connector_id == world.slack.pk], 3)
            world.conversations[1] = conversation_upsert(
                agent=world.agent,
                connector=world.slack,
                external_thread_id=general.external_thread_id,
                audience=Audience.members(world.slack.namespace, [a.pk for a in readers]),
                project=general.project,
            )
        conversation = rng.choice(world.conversations)
        author = rng.choice(readers_of(conversation, world))
        body = sentence(rng, [a.display_name for a in world.actors])
        message = message_ingest(
            conversation=conversation,
            actor=author,
            body=body,
            created_at=now,
            evidence_method=EvidenceMethod.CONNECTOR_SIGNED if rng.random() > 0.1 else None,
        ).message
        inherited_messages = (
            rng.sample(world.messages, min(len(world.messages), rng.randint(1, 2)))
            if world.messages and rng.random() < 0.25
            else []
        )
        inherited_revisions = [rng.choice(world.revisions)] if world.revisions and rng.random() < 0.2 else []
        # In a group, the agent often remembers what another member said (their earlier message in the
        # room, named as a source beside the one being answered), and sometimes words it was shown from
        # another conversation entirely: their authors become source actors, their audiences narrow it.
        also_sources = []
        if len(readers_of(conversation, world)) > 1 and conversation.audience_readers and rng.random() < 0.5:
            said_here = [m for m in world.messages if m.conversation_id == conversation.pk and m.actor_id != author.pk]
            said_elsewhere = [m for m in world.messages if m.conversation_id != conversation.pk]
            pool = said_elsewhere if rng.random() < 0.2 else said_here
            if pool:
                also_sources.append(rng.choice(pool))
        world.messages.append(message)
        portability = rng.choices([Portability.PORTABLE, Portability.CONTEXTUAL, Portability.LOCAL], weights=[6, 2, 2])[
            0
        ]
        valid_from, valid_to = validity(rng, now)
        belief_type = rng.choice(BeliefType.values)
        subject_id = rng.choice([*(a.pk for a in world.actors), None])
        if subject_id is None and belief_type in PERSON_BELIEF_TYPES:
            subject_id = (also_sources[0].actor_id if also_sources else None) or author.pk  # about a person
        belief = Belief(
            body=body,
            belief_type=belief_type,
            subject_id=subject_id,
            portability=portability,
            origin_scope=rng.choice(PROJECTS) if portability == Portability.LOCAL and rng.random() < 0.5 else None,
            confidence=round(rng.uniform(0.3, 1.0), 2),
            authority=rng.choice(Authority.values),
            salience=round(rng.random(), 2),
            always_on=rng.random() < 0.04,
            lifecycle=Lifecycle.PROVISIONAL if rng.random() < 0.15 else Lifecycle.ACTIVE,
            valid_from=valid_from,
            valid_to=valid_to,
            restricted_to_conversation_id=rng.choice(world.conversations).pk if rng.random() < 0.05 else None,
        )
        result = memory_remember(
            agent=world.agent,
            belief=belief,
            provenance=Provenance(
                source_message_id=message.pk,
                also_source_message_ids=[m.pk for m in also_sources],
                inherited_message_ids=[m.pk for m in inherited_messages],
                inherited_revision_ids=[r.pk for r in inherited_revisions],
            ),
        )
        world.revisions.append(result.revision)
        world.entries.append(result.entry.pk)

    for _ in range(45):
        world = rng.choice(worlds)
        entry = MemoryEntry.objects.select_related("current_revision").get(pk=rng.choice(world.entries))
        if entry.status != EntryStatus.LIVE or entry.current_revision is None:
            continue
        conversation = rng.choice(world.conversations)
        message = message_ingest(
            conversation=conversation,
            actor=rng.choice(readers_of(conversation, world)),
            body="a correction",
            created_at=now,
            evidence_method=EvidenceMethod.CONNECTOR_API,
        ).message
        changes: dict[str, object] = {}
        if rng.random() < 0.3:
            changes["portability"] = rng.choice(Portability.values)
        if rng.random() < 0.15:
            changes["restricted_to_conversation_id"] = rng.choice(world.conversations).pk
        amended = revision_amend(
            agent=world.agent,
            entry_id=entry.pk,
            expected_revision_id=entry.current_revision.pk,
            provenance=Provenance(source_message_id=message.pk),
            body=sentence(rng, [a.display_name for a in world.actors]),
            changes=changes,
        )
        world.revisions.append(amended.revision)

    for _ in range(25):
        world = rng.choice(worlds)
        entry_forget(agent=world.agent, entry_id=rng.choice(world.entries))

    for _ in range(45):
        world = rng.choice(worlds)
        revision = rng.choice(world.revisions)  # sometimes no longer current: a grant must not revive it
        # Approved for one conversation, whose audience (often public or workspace-wide) would reach
        # many others: it admits the revision in that conversation only.
        target = rng.choice(world.conversations)
        grant = SharingGrant(
            agent=world.agent,
            revision=revision,
            conversation=target,
            granted_by_actor_id=revision.source_actor_id,
            granted_by_user=None if revision.source_actor_id else operator,
        )
        grant.set_audience(target.audience)
        grant.save()
        if rng.random() < 0.3:
            grant.revoked_at = timezone.now()
            grant.save(update_fields=["revoked_at"])
    return worlds


def validity(rng: random.Random, now: datetime) -> tuple[datetime | None, datetime | None]:
    roll = rng.random()
    if roll < 0.08:
        return now - timedelta(days=30), now - timedelta(days=1)  # held once, no longer
    if roll < 0.16:
        return now + timedelta(days=5), None  # not yet
    if roll < 0.26:
        return now - timedelta(days=2), now + timedelta(days=30)  # holds, with an end in sight
    return None, None


def analyze(tables: Iterable[str]) -> None:
    """Plans for this world's real size, whatever earlier tests left in the planner's estimates."""
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"ANALYZE {table}")


# --------------------------------------------------------------------------------------------------
# The oracle: plain Python over ORM rows.
# --------------------------------------------------------------------------------------------------


@dataclass
class Oracle:
    revisions: dict[int, MemoryRevision]
    entries: dict[int, MemoryEntry]
    grants: dict[int, list[SharingGrant]]
    links: dict[int, list[IdentityLink]]
    actors: dict[int, Actor]

    @classmethod
    def load(cls) -> Self:
        grants: dict[int, list[SharingGrant]] = defaultdict(list)
        for grant in SharingGrant.objects.all():
            grants[grant.revision_id].append(grant)
        links: dict[int, list[IdentityLink]] = defaultdict(list)
        for link in IdentityLink.objects.all():
            links[link.agent_id].append(link)
        return cls(
            revisions=MemoryRevision.objects.in_bulk(),
            entries=MemoryEntry.objects.in_bulk(),
            grants=grants,
            links=links,
            actors=Actor.objects.in_bulk(),
        )

    def linked_readers(self, agent_id: int, destination: Audience) -> set[int]:
        if destination.kind != AudienceKind.MEMBERS or len(destination.readers) != 1:
            return set()
        reader = destination.readers[0]
        linked = set()
        for link in self.links[agent_id]:
            if link.revoked_at is not None:
                continue
            if link.actor_a_id == reader:
                linked.add(link.actor_b_id)
            elif link.actor_b_id == reader:
                linked.add(link.actor_a_id)
        return linked

    def text_path(self, origin: Audience, destination: Audience, linked: set[int]) -> str:
        """How text of ``origin`` may reach ``destination``: by its audience alone, through an identity
        link, or not at all ("")."""
        if audience_allows(origin, destination):
            return "audience"
        if audience_allows(origin, destination, linked):
            return "identity_link"
        return ""

    def revision_path(
        self, revision: MemoryRevision, agent_id: int, destination: Audience, linked: set[int], conversation_id: int
    ) -> str:
        """How a revision may reach ``destination``, the audience of conversation ``conversation_id``:
        its source audience (directly or through an identity link) or an unrevoked grant of this agent
        approved for that very conversation, whose consented audience still admits the destination
        (a grant is consent to one conversation, never to everywhere its audience class reaches); a
        grant never vouches for unknown or "nobody" provenance. "" when nothing admits it."""
        path = self.text_path(revision.audience, destination, linked)
        if path:
            return path
        if revision.audience_kind not in ("unknown", "nobody") and any(
            g.revoked_at is None
            and g.agent_id == agent_id
            and g.conversation_id == conversation_id
            and audience_allows(g.audience, destination, linked)
            for g in self.grants.get(revision.pk, [])
        ):
            return "grant"
        return ""
