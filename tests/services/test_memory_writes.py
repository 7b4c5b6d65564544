"""Contracts of the memory write services: remember, amend, forget and the provenance they record."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.utils import timezone

from accounts.models import Actor, Connector, RuntimeAgent
from accounts.services import actor_rename
from config.errors import Conflict, NotFound, Unprocessable
from history.audience import Audience, AudienceKind
from history.models import Conversation, EvidenceMethod, Message, MessageDirection, MessageSourceEvidence
from history.services import message_ingest
from memory.models import EntryStatus, EvidenceKind, MemoryEntry, MemoryEvidence, MemoryOperation, MemoryRevision
from memory.services import Belief, Provenance, entry_forget, memory_remember, revision_amend
from tests.factories import ActorFactory, AgentFactory, ConnectorFactory, Speaks, direct_conversation, public_channel

pytestmark = pytest.mark.django_db


@dataclass
class World(Speaks):
    agent: RuntimeAgent
    connector: Connector
    alice: Actor
    bob: Actor
    alice_dm: Conversation
    bob_dm: Conversation
    general: Conversation


@pytest.fixture
def world() -> World:
    agent = AgentFactory.create()
    connector = ConnectorFactory.create(agent=agent, type="slack", name="acme")
    alice = ActorFactory.create(connector=connector, display_name="Alice")
    bob = ActorFactory.create(connector=connector, display_name="Bob")
    return World(
        agent=agent,
        connector=connector,
        alice=alice,
        bob=bob,
        alice_dm=direct_conversation(connector, alice),
        bob_dm=direct_conversation(connector, bob),
        general=public_channel(connector, project="atlas"),
    )


def remember(world: World, body: str, message: Message, **belief: object) -> MemoryRevision:
    result = memory_remember(
        agent=world.agent,
        belief=Belief(body=body, **belief),  # type: ignore[arg-type]
        provenance=Provenance(source_message_id=message.pk),
    )
    return result.revision


def table_counts() -> tuple[int, int, int, int]:
    return (
        MemoryEntry.objects.count(),
        MemoryRevision.objects.count(),
        MemoryEvidence.objects.count(),
        MemoryOperation.objects.count(),
    )


def test_remember_creates_a_new_entry_and_never_modifies_an_existing_one(world: World) -> None:
    """Two remembers of related facts make two independent revision-1 entries; the first is untouched."""
    said = world.say(world.alice_dm, world.alice, "I moved to Lisbon")
    first = remember(world, "Alice lives in Porto.", said, subject_id=world.alice.pk)
    first_entry_before = MemoryEntry.objects.values().get(pk=first.entry_id)

    second = remember(world, "Alice lives in Lisbon.", said, subject_id=world.alice.pk)

    assert second.entry_id != first.entry_id
    assert (first.number, second.number) == (1, 1)
    assert MemoryEntry.objects.values().get(pk=first.entry_id) == first_entry_before
    assert list(MemoryRevision.objects.filter(entry_id=first.entry_id).values_list("body", flat=True)) == [
        "Alice lives in Porto."
    ]
    assert MemoryOperation.objects.filter(kind="remember").count() == 2


def test_remember_records_authenticated_source_and_its_audience(world: World) -> None:
    """The source actor comes from the authenticated message, and the source audience from its conversation."""
    said = world.say(world.alice_dm, world.alice, "I prefer short answers")
    revision = remember(world, "Prefers short answers.", said, belief_type="preference", subject_id=world.alice.pk)

    assert revision.source_actor_id == world.alice.pk
    assert revision.source_actor_ids == [world.alice.pk]
    assert revision.audience == Audience.members("slack:acme", [world.alice.pk])
    evidence = MemoryEvidence.objects.get(revision=revision)
    assert (evidence.kind, evidence.message_id) == (EvidenceKind.SOURCE_MESSAGE, said.pk)


def test_source_audience_is_the_most_restrictive_of_all_sources(world: World) -> None:
    """A memory formed in a DM from public history plus the DM keeps the DM's audience."""
    public = world.say(world.general, world.bob, "The launch is on Friday")
    private = world.say(world.alice_dm, world.alice, "Keep the launch date between us")
    result = memory_remember(
        agent=world.agent,
        belief=Belief(body="The launch is on Friday."),
        provenance=Provenance(source_message_id=private.pk, inherited_message_ids=[public.pk]),
    )
    assert result.revision.audience == Audience.members("slack:acme", [world.alice.pk])
    assert result.revision.origin_scope == ""  # learned in the DM, which has no project


def test_unauthenticated_source_leaves_the_memory_with_unknown_audience(world: World) -> None:
    """A message without source evidence contributes unknown provenance, which admits no audience."""
    said = world.say(world.general, world.bob, "Deploys happen on Tuesdays", authenticated=False)
    revision = remember(world, "Deploys happen on Tuesdays.", said)
    assert revision.audience_kind == AudienceKind.UNKNOWN


def test_memory_formed_from_a_reply_inherits_the_replys_lineage(world: World) -> None:
    """A public reply built on a private memory cannot launder it: a memory formed from that reply stays private."""
    secret_source = world.say(world.alice_dm, world.alice, "My salary is 90k")
    secret = remember(world, "Alice earns 90k.", secret_source, subject_id=world.alice.pk)
    reply = Message.objects.create(
        agent=world.agent,
        conversation=world.general,
        direction=MessageDirection.OUTBOUND,
        body="Noted!",
        created_at=timezone.now(),
        audience_kind=world.general.audience_kind,
        audience_namespace=world.general.audience_namespace,
        audience_readers=[],
        memory_revision_ids=[secret.pk],
    )
    MessageSourceEvidence.objects.create(message=reply, method=EvidenceMethod.AGENT_REPLY)
    asked = world.say(world.general, world.bob, "What did the agent just note?")

    result = memory_remember(
        agent=world.agent,
        belief=Belief(body="The agent noted something."),
        provenance=Provenance(source_message_id=asked.pk, inherited_message_ids=[reply.pk]),
    )

    assert result.revision.audience == Audience.members("slack:acme", [world.alice.pk])


def test_a_stale_amend_fails_and_writes_nothing(world: World) -> None:
    """Amending against a revision that is no longer current raises Conflict and leaves every table as it was."""
    said = world.say(world.alice_dm, world.alice, "I drive a Civic")
    first = remember(world, "Alice drives a Civic.", said, subject_id=world.alice.pk)
    provenance = Provenance(source_message_id=said.pk)
    revision_amend(
        agent=world.agent,
        entry_id=first.entry_id,
        expected_revision_id=first.pk,
        provenance=provenance,
        body="Alice drives a Model 3.",
    )
    before = table_counts()

    with pytest.raises(Conflict) as refused:
        revision_amend(
            agent=world.agent,
            entry_id=first.entry_id,
            expected_revision_id=first.pk,
            provenance=provenance,
            body="Alice drives a bike.",
        )

    assert refused.value.code == "stale_revision"
    assert table_counts() == before
    current = MemoryEntry.objects.select_related("current_revision").get(pk=first.entry_id).current_revision
    assert current is not None and current.body == "Alice drives a Model 3."


def test_amend_writes_the_next_revision_and_keeps_earlier_evidence(world: World) -> None:
    """An amend adds revision 2, points the entry at it, inherits revision 1's evidence, and reports subject changes."""
    said = world.say(world.alice_dm, world.alice, "Bob likes tea")
    first = remember(world, "Likes tea.", said, subject_id=world.alice.pk)

    result = revision_amend(
        agent=world.agent,
        entry_id=first.entry_id,
        expected_revision_id=first.pk,
        provenance=Provenance(source_message_id=said.pk),
        subject_id=world.bob.pk,
    )

    assert result.revision.number == 2
    assert result.subject_changed is True
    assert result.revision.body == "Likes tea."
    assert MemoryEntry.objects.get(pk=first.entry_id).current_revision_id == result.revision.pk
    inherited = MemoryEvidence.objects.get(revision=result.revision, kind=EvidenceKind.INHERITED_REVISION)
    assert inherited.parent_revision_id == first.pk
    assert result.operation.kind == "amend" and result.operation.revision_number == 2


def test_body_only_amend_does_not_change_the_subject(world: World) -> None:
    said = world.say(world.alice_dm, world.alice, "I like tea")
    first = remember(world, "Likes tea.", said, subject_id=world.alice.pk)
    result = revision_amend(
        agent=world.agent,
        entry_id=first.entry_id,
        expected_revision_id=first.pk,
        provenance=Provenance(source_message_id=said.pk),
        body="Likes green tea.",
    )
    assert result.subject_changed is False
    assert result.operation.subject_changed is False


def test_forget_retires_the_entry_and_keeps_every_revision(world: World) -> None:
    """Forget marks the entry forgotten; its revisions and evidence all remain."""
    said = world.say(world.alice_dm, world.alice, "I have a cat")
    first = remember(world, "Alice has a cat.", said)
    second = revision_amend(
        agent=world.agent,
        entry_id=first.entry_id,
        expected_revision_id=first.pk,
        provenance=Provenance(source_message_id=said.pk),
        body="Alice has two cats.",
    ).revision

    result = entry_forget(agent=world.agent, entry_id=first.entry_id)

    assert result.changed is True
    entry = MemoryEntry.objects.get(pk=first.entry_id)
    assert entry.status == EntryStatus.FORGOTTEN
    assert set(MemoryRevision.objects.filter(entry=entry).values_list("pk", flat=True)) == {first.pk, second.pk}
    assert MemoryEvidence.objects.filter(revision__entry=entry).count() == 3


def test_forgetting_twice_changes_nothing_and_records_nothing(world: World) -> None:
    said = world.say(world.alice_dm, world.alice, "I have a dog")
    first = remember(world, "Alice has a dog.", said)
    entry_forget(agent=world.agent, entry_id=first.entry_id)
    operations = MemoryOperation.objects.count()

    again = entry_forget(agent=world.agent, entry_id=first.entry_id)

    assert again.changed is False and again.operation is None
    assert MemoryOperation.objects.count() == operations


def test_amending_a_forgotten_or_unknown_entry_is_refused(world: World) -> None:
    said = world.say(world.alice_dm, world.alice, "I have a dog")
    first = remember(world, "Alice has a dog.", said)
    entry_forget(agent=world.agent, entry_id=first.entry_id)
    provenance = Provenance(source_message_id=said.pk)
    with pytest.raises(Conflict):
        revision_amend(
            agent=world.agent, entry_id=first.entry_id, expected_revision_id=first.pk, provenance=provenance, body="x"
        )
    with pytest.raises(NotFound):
        revision_amend(
            agent=world.agent,
            entry_id=first.entry_id + 999,
            expected_revision_id=first.pk,
            provenance=provenance,
            body="x",
        )


@pytest.mark.parametrize("foreign", ["source_message", "inherited_message", "inherited_revision", "missing"])
def test_a_write_naming_a_foreign_or_missing_parent_writes_nothing(world: World, foreign: str) -> None:
    """Any parent outside the agent's perspective, or absent, refuses the whole write."""
    own = world.say(world.alice_dm, world.alice, "I like jazz")
    other_agent = AgentFactory.create(tenant=world.agent.tenant)
    other_connector = ConnectorFactory.create(agent=other_agent)
    other_actor = ActorFactory.create(connector=other_connector)
    other_message = message_ingest(
        conversation=direct_conversation(other_connector, other_actor),
        actor=other_actor,
        body="secret",
        created_at=timezone.now(),
        evidence_method=EvidenceMethod.CONNECTOR_SIGNED,
    ).message
    other_revision = memory_remember(
        agent=other_agent,
        belief=Belief(body="Other agent's memory."),
        provenance=Provenance(source_message_id=other_message.pk),
    ).revision
    provenance = {
        "source_message": Provenance(source_message_id=other_message.pk),
        "inherited_message": Provenance(source_message_id=own.pk, inherited_message_ids=[other_message.pk]),
        "inherited_revision": Provenance(source_message_id=own.pk, inherited_revision_ids=[other_revision.pk]),
        "missing": Provenance(source_message_id=own.pk, inherited_message_ids=[own.pk + 10_000]),
    }[foreign]
    before = table_counts()

    with pytest.raises(Unprocessable) as refused:
        memory_remember(agent=world.agent, belief=Belief(body="Likes jazz."), provenance=provenance)

    assert refused.value.code == "unknown_parent"
    assert table_counts() == before


def test_a_subject_outside_the_perspective_is_refused(world: World) -> None:
    said = world.say(world.alice_dm, world.alice, "hi")
    stranger = ActorFactory.create()  # another tenant's connector
    before = table_counts()
    with pytest.raises(NotFound):
        remember(world, "Knows a stranger.", said, subject_id=stranger.pk)
    assert table_counts() == before


def test_two_actors_with_one_display_name_stay_distinct(world: World) -> None:
    """Same display name, different stable ids: memories about each keep their own subject."""
    alex_one = ActorFactory.create(connector=world.connector, display_name="Alex")
    alex_two = ActorFactory.create(connector=world.connector, display_name="Alex")
    said = world.say(world.general, world.alice, "the two Alexes")
    about_one = remember(world, "Works on billing.", said, subject_id=alex_one.pk)
    about_two = remember(world, "Works on search.", said, subject_id=alex_two.pk)

    assert alex_one.pk != alex_two.pk
    assert alex_one.label != alex_two.label  # labels carry the stable external id
    assert MemoryRevision.objects.get(pk=about_one.pk).subject_id == alex_one.pk
    assert MemoryRevision.objects.get(pk=about_two.pk).subject_id == alex_two.pk


def test_renaming_an_actor_changes_no_stored_memory_text(world: World) -> None:
    """Bodies never embed names: a rename rewrites nothing stored."""
    said = world.say(world.alice_dm, world.alice, "I prefer tabs")
    revision = remember(world, "Prefers tabs over spaces.", said, subject_id=world.alice.pk)
    stored_before = list(MemoryRevision.objects.values_list("pk", "body", "subject_id"))

    actor_rename(actor=world.alice, display_name="Alicia")

    assert list(MemoryRevision.objects.values_list("pk", "body", "subject_id")) == stored_before
    assert Actor.objects.get(pk=world.alice.pk).label.startswith("Alicia (id ")
    assert "Alice" not in MemoryRevision.objects.get(pk=revision.pk).body


def test_message_ingest_is_idempotent_on_the_connector_message_id(world: World) -> None:
    """Posting the same external message id twice creates one message."""
    first = message_ingest(
        conversation=world.general,
        actor=world.bob,
        body="hello",
        created_at=timezone.now(),
        evidence_method=EvidenceMethod.CONNECTOR_SIGNED,
        external_id="ts-1",
    )
    again = message_ingest(
        conversation=world.general,
        actor=world.bob,
        body="hello",
        created_at=timezone.now(),
        evidence_method=EvidenceMethod.CONNECTOR_SIGNED,
        external_id="ts-1",
    )
    assert first.created and not again.created
    assert again.message.pk == first.message.pk
    assert Message.objects.filter(conversation=world.general).count() == 1
    assert first.message.audience == world.general.audience
