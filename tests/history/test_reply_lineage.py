"""The lineage rule of spec 003 as the database keeps it: walked once when a reply is inserted,
folded into the reply, and checked against the destination at every read.

Each case shows the reply visible where its whole lineage may go and withheld where it may not, so
a rule that hid everything could not pass.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pgtrigger
import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import Actor, Connector, RuntimeAgent
from history.models import Conversation, EvidenceMethod, Message, MessageDirection, MessageSourceEvidence
from memory.models import DeletedRevision, SharingGrant
from memory.retention import conversation_delete
from memory.retrieval.eligibility import EligibleMessages, perspective_for_conversation
from memory.services import Belief, Provenance, memory_remember
from tests.factories import (
    ActorFactory,
    AgentFactory,
    ConnectorFactory,
    Speaks,
    direct_conversation,
    make_message,
    public_channel,
)

pytestmark = pytest.mark.django_db

#: spec 003's caps: a lineage of more ancestors than this is denied everywhere.
MAX_LINEAGE_NODES = 5_000
MAX_HISTORY_IDS = 500


@dataclass
class Room(Speaks):
    agent: RuntimeAgent
    connector: Connector
    alice: Actor
    bob: Actor
    alice_dm: Conversation
    alice_mobile_dm: Conversation
    general: Conversation

    def reply(
        self, conversation: Conversation, body: str, *, history: Sequence[int] = (), memory: Sequence[int] = ()
    ) -> Message:
        return make_message(
            conversation,
            body=body,
            direction=MessageDirection.OUTBOUND,
            evidence=EvidenceMethod.AGENT_REPLY,
            history_message_ids=list(history),
            memory_revision_ids=list(memory),
        )

    def remember(self, source: Message, body: str) -> int:
        """A memory formed from ``source`` (its audience is the source's): the revision id."""
        written = memory_remember(
            agent=self.agent, belief=Belief(body=body), provenance=Provenance(source_message_id=source.pk)
        )
        return written.revision.pk

    def visible(self, message: Message, destination: Conversation) -> bool:
        """Does the one eligibility predicate admit ``message`` into a turn of ``destination``?"""
        eligible = EligibleMessages(perspective_for_conversation(destination))
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*) FROM {eligible.owned()} WHERE m.id = %(id)s AND {eligible.predicate()}",
                {**eligible.params(), "id": message.pk},
            )
            row = cursor.fetchone()
        return bool(row and row[0])

    def bulk_lines(self, conversation: Conversation, count: int) -> list[int]:
        """``count`` authenticated inbound lines, written in one statement each for messages and evidence."""
        now = timezone.now()
        lines = Message.objects.bulk_create(
            Message(
                agent=self.agent,
                conversation=conversation,
                actor=self.bob,
                direction=MessageDirection.INBOUND,
                body=f"status line {n}",
                created_at=now,
                audience_kind=conversation.audience_kind,
                audience_namespace=conversation.audience_namespace,
                audience_readers=list(conversation.audience_readers),
            )
            for n in range(count)
        )
        MessageSourceEvidence.objects.bulk_create(
            MessageSourceEvidence(message=line, method=EvidenceMethod.CONNECTOR_SIGNED) for line in lines
        )
        return [line.pk for line in lines]


@pytest.fixture
def room() -> Room:
    agent = AgentFactory.create()
    connector = ConnectorFactory.create(agent=agent, type="slack", name="acme")
    alice, bob = (ActorFactory.create(connector=connector, display_name=n) for n in ("Alice", "Bob"))
    return Room(
        agent=agent,
        connector=connector,
        alice=alice,
        bob=bob,
        alice_dm=direct_conversation(connector, alice),
        alice_mobile_dm=direct_conversation(connector, alice),
        general=public_channel(connector, title="#general"),
    )


def test_a_reply_of_a_reply_of_a_dm_is_withheld_from_the_channel_however_deep(room: Room) -> None:
    """Only the first reply names the DM line; each later one names only the reply before it."""
    secret = room.say(room.alice_dm, room.alice, "I am leaving the company in March.")
    first = room.reply(room.alice_dm, "Understood, I will keep that in mind.", history=[secret.pk])
    chain = [first]
    for n in range(5):
        chain.append(room.reply(room.general, f"Follow-up {n} on the planning thread.", history=[chain[-1].pk]))
    innocent = room.reply(room.general, "The planning thread is open to everyone.")

    assert room.visible(innocent, room.general)
    assert not any(room.visible(reply, room.general) for reply in chain[1:])
    # In a conversation only Alice reads, every ancestor may be disclosed: the chain is there.
    assert all(room.visible(reply, room.alice_mobile_dm) for reply in chain)


def test_the_fold_is_written_by_the_database_whatever_the_writer_sends(room: Room) -> None:
    secret = room.say(room.alice_dm, room.alice, "My new phone number is 555-0199.")
    forged = make_message(
        room.general,
        body="Got it.",
        direction=MessageDirection.OUTBOUND,
        evidence=EvidenceMethod.AGENT_REPLY,
        history_message_ids=[secret.pk],
        lineage_audiences=[],
        lineage_conversation_ids=[],
    )
    forged.refresh_from_db()

    assert forged.lineage_audiences == [["members", room.connector.namespace, [room.alice.pk]]]
    assert forged.lineage_conversation_ids == [room.alice_dm.pk]
    assert not room.visible(forged, room.general)
    assert room.visible(forged, room.alice_mobile_dm)


@pytest.mark.parametrize(("extra_ancestor", "admitted"), [(False, True), (True, False)])
def test_a_lineage_over_five_thousand_ancestors_is_denied_everywhere(
    room: Room, extra_ancestor: bool, admitted: bool
) -> None:
    """Ten replies of 499 channel lines each are 5,000 ancestors (allowed); one line more overflows."""
    lines = room.bulk_lines(room.general, 10 * (MAX_HISTORY_IDS - 1) + int(extra_ancestor))
    summaries = [
        room.reply(room.general, f"Summary {n}.", history=lines[n * 499 : (n + 1) * 499 if n < 9 else None])
        for n in range(10)
    ]
    digest = room.reply(room.general, "Digest of the week.", history=[s.pk for s in summaries])

    assert all(room.visible(summary, room.general) for summary in summaries)  # each is well under the caps
    assert room.visible(digest, room.general) is admitted
    assert room.visible(digest, room.alice_dm) is admitted


def test_more_history_ids_than_the_cap_on_any_ancestor_denies_the_descendants(room: Room) -> None:
    lines = room.bulk_lines(room.general, MAX_HISTORY_IDS + 1)
    at_cap = room.reply(room.general, "Summary of the backlog.", history=lines[:MAX_HISTORY_IDS])
    over_cap = room.reply(room.general, "Summary of the whole backlog.", history=lines)
    built_on_over = room.reply(room.general, "As summarised above.", history=[over_cap.pk])

    assert room.visible(at_cap, room.general)
    assert not room.visible(over_cap, room.general)
    assert not room.visible(built_on_over, room.general)


def test_deleting_a_conversation_withholds_every_reply_built_on_it(room: Room) -> None:
    """A reply in Alice's other DM, built on her first DM, may be shown there until that DM is deleted."""
    source = room.say(room.alice_dm, room.alice, "Book the flight to Lisbon for the offsite.")
    built_on_it = room.reply(room.alice_mobile_dm, "Booked: Lisbon, for the offsite.", history=[source.pk])
    built_on_that = room.reply(room.alice_mobile_dm, "Your Lisbon booking is confirmed.", history=[built_on_it.pk])
    unrelated = room.reply(room.alice_mobile_dm, "Good morning!")
    assert room.visible(built_on_it, room.alice_mobile_dm) and room.visible(built_on_that, room.alice_mobile_dm)

    conversation_delete(conversation=room.alice_dm)

    assert not room.visible(built_on_it, room.alice_mobile_dm)
    assert not room.visible(built_on_that, room.alice_mobile_dm)
    assert room.visible(unrelated, room.alice_mobile_dm)


def test_the_operators_message_page_shows_a_replys_folded_lineage(room: Room, admin_client: Client) -> None:
    secret = room.say(room.alice_dm, room.alice, "Please keep my surgery date to yourself.")
    built_on_it = room.reply(room.general, "Noted.", history=[secret.pk])

    page = admin_client.get(reverse("admin:history_message_change", args=[built_on_it.pk]))

    assert page.status_code == 200
    text = page.content.decode()
    assert f"sources posted under: members({room.connector.namespace}, [{room.alice.pk}])" in text
    assert f"conversations [{room.alice_dm.pk}]" in text


# --- the revisions a reply used: folded audiences, trusted only while none was deleted -----------------


def test_the_fold_keeps_the_audiences_of_every_revision_the_reply_and_its_sources_used(room: Room) -> None:
    private = room.remember(
        room.say(room.alice_dm, room.alice, "I am allergic to penicillin."), "Allergic to penicillin."
    )
    public = room.remember(room.say(room.general, room.bob, "Standup moves to 9:30."), "Standup is at 9:30.")
    first = room.reply(room.alice_dm, "Noted, and standup is at 9:30.", memory=[private, public])
    second = room.reply(room.alice_mobile_dm, "As we said earlier.", history=[first.pk])

    second.refresh_from_db()
    assert sorted(second.lineage_revision_audiences, key=str) == sorted(
        [["members", room.connector.namespace, [room.alice.pk]], ["workspace", room.connector.namespace, []]], key=str
    )
    assert room.visible(second, room.alice_mobile_dm)
    assert not room.visible(second, room.general)


def test_a_reply_built_on_a_memory_that_was_deleted_since_is_withheld(room: Room) -> None:
    """The reply's own sources are intact; only a memory it used is gone (its source conversation was
    deleted on request). The folded audiences still admit the destination, so the tombstone decides."""
    source = room.say(room.alice_dm, room.alice, "My new address is 4 Rua Augusta.")
    address = room.remember(source, "Lives at 4 Rua Augusta.")
    reply = room.reply(room.alice_mobile_dm, "I have your address on file.", memory=[address])
    later = room.reply(room.alice_mobile_dm, "Yes, the one from before.", history=[reply.pk])
    assert room.visible(reply, room.alice_mobile_dm) and room.visible(later, room.alice_mobile_dm)

    conversation_delete(conversation=room.alice_dm)

    assert DeletedRevision.objects.filter(revision_id=address, agent_id=room.agent.pk).exists()
    assert not room.visible(reply, room.alice_mobile_dm)
    assert not room.visible(later, room.alice_mobile_dm)
    # A reply built on them afterwards takes their folded audiences, which still admit the destination;
    # the tombstone withholds it too.
    after = room.reply(room.alice_mobile_dm, "Still that one.", history=[later.pk])
    assert not room.visible(after, room.alice_mobile_dm)


def test_a_revision_its_audience_does_not_admit_is_still_admitted_by_a_live_grant(room: Room) -> None:
    """Where a folded audience falls short, each revision is judged again, with its live grants."""
    private = room.remember(
        room.say(room.alice_dm, room.alice, "I am running the marathon in May."), "Marathon in May."
    )
    reply = room.reply(room.general, "Good luck to everyone running in May!", memory=[private])
    assert not room.visible(reply, room.general)

    grant = SharingGrant.objects.create(
        agent=room.agent,
        revision_id=private,
        conversation=room.general,
        granted_by_actor=room.alice,
        audience_kind="public",
        audience_namespace="",
        audience_readers=[],
    )
    assert room.visible(reply, room.general)

    grant.revoked_at = timezone.now()
    grant.save(update_fields=["revoked_at"])
    assert not room.visible(reply, room.general)


def test_a_reply_built_on_a_granted_memory_is_read_only_where_the_grant_is(room: Room) -> None:
    """A grant admits its revision in the conversation it was approved for, and so does the lineage
    rule for a reply built on it: a public grant into #general does not carry the reply (public text
    itself) into another public channel or Bob's DM, though the grant's audience would reach both."""
    private = room.remember(room.say(room.alice_dm, room.alice, "The offsite is in Porto."), "Offsite in Porto.")
    SharingGrant.objects.create(
        agent=room.agent,
        revision_id=private,
        conversation=room.general,
        granted_by_actor=room.alice,
        audience_kind="public",
        audience_namespace="",
        audience_readers=[],
    )
    reply = room.reply(room.general, "See you all in Porto!", memory=[private])
    echo = room.reply(room.general, "As I said: Porto.", history=[reply.pk])
    announcements = public_channel(room.connector, title="#announcements")
    bob_dm = direct_conversation(room.connector, room.bob)

    assert room.visible(reply, room.general) and room.visible(echo, room.general)
    for elsewhere in (announcements, bob_dm):
        assert not room.visible(reply, elsewhere)
        assert not room.visible(echo, elsewhere)


def test_an_empty_revision_fold_on_a_reply_that_used_revisions_is_never_trusted(room: Room) -> None:
    """A reply stored without its revision fold would read as using no revision at all, so an empty
    fold beside revision ids sends the read to the per-revision check."""
    private = room.remember(room.say(room.alice_dm, room.alice, "My PIN is not for sharing."), "Keeps a PIN private.")
    reply = room.reply(room.general, "Understood, everyone.", memory=[private])
    assert not room.visible(reply, room.general)
    with pgtrigger.ignore("history.Message:append_only"), connection.cursor() as cursor:
        cursor.execute("UPDATE history_message SET lineage_revision_audiences = '[]' WHERE id = %s", [reply.pk])
    assert not room.visible(reply, room.general)
    assert room.visible(reply, room.alice_dm)  # judged revision by revision: its own audience admits it


def test_a_replys_revision_audiences_are_folded_from_its_source_replies(room: Room) -> None:
    """lineage.sql: the audiences of the revisions a reply's ancestors used come from its source
    replies' folds, joined with those of the revisions it used itself."""
    private = room.remember(room.say(room.alice_dm, room.alice, "I am allergic to penicillin."), "Allergic.")
    public = room.remember(room.say(room.general, room.bob, "Standup moves to 9:30."), "Standup is at 9:30.")
    first = room.reply(room.alice_dm, "Noted.", memory=[private])
    second = room.reply(room.alice_mobile_dm, "And standup is at 9:30.", history=[first.pk], memory=[public])
    # The first reply's fold is what the second one takes: rewritten here on the sanctioned path, it
    # shows in the second reply's fold, so that fold was not read from the revisions.
    marker = ["members", room.connector.namespace, [room.alice.pk, room.bob.pk]]
    with pgtrigger.ignore("history.Message:append_only"), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE history_message SET lineage_revision_audiences = %s WHERE id = %s", [json.dumps([marker]), first.pk]
        )
    third = room.reply(room.alice_mobile_dm, "As we said.", history=[second.pk, first.pk])

    second.refresh_from_db()
    third.refresh_from_db()
    alice_only = ["members", room.connector.namespace, [room.alice.pk]]
    workspace = ["workspace", room.connector.namespace, []]
    assert sorted(second.lineage_revision_audiences, key=str) == sorted([alice_only, workspace], key=str)
    assert sorted(third.lineage_revision_audiences, key=str) == sorted([alice_only, workspace, marker], key=str)


def test_a_source_reply_that_folded_no_audiences_for_its_revisions_is_not_trusted_for_them(room: Room) -> None:
    """A source reply that used revisions but carries an empty revision fold (one stored without it)
    gives nothing to fold from: every revision the new reply's lineage names is read."""
    private = room.remember(room.say(room.alice_dm, room.alice, "My PIN is not for sharing."), "Keeps a PIN private.")
    first = room.reply(room.alice_dm, "Understood.", memory=[private])
    with pgtrigger.ignore("history.Message:append_only"), connection.cursor() as cursor:
        cursor.execute("UPDATE history_message SET lineage_revision_audiences = '[]' WHERE id = %s", [first.pk])

    second = room.reply(room.alice_mobile_dm, "As you said.", history=[first.pk])

    second.refresh_from_db()
    assert second.lineage_revision_audiences == [["members", room.connector.namespace, [room.alice.pk]]]
    assert room.visible(second, room.alice_mobile_dm)
    assert not room.visible(second, room.general)


# --- the fold is built from the sources' own folds (lineage.sql) --------------------------------------


def full_walk(message: Message) -> tuple[list[list[object]], list[int], list[int]]:
    """What the walk over every ancestor (``engram_lineage_walk``) folds for ``message``'s provenance."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT w.audiences, w.conversation_ids, w.revision_ids FROM engram_lineage_walk(%s, %s, %s) w",
            [message.agent_id, list(message.history_message_ids), list(message.memory_revision_ids)],
        )
        audiences, conversation_ids, revision_ids = cursor.fetchone()
    return sorted(json.loads(audiences), key=str), list(conversation_ids), list(revision_ids)


def test_a_fold_built_from_the_sources_folds_equals_the_walk_over_every_ancestor(room: Room) -> None:
    """Replies citing replies, across a DM, a second DM and a channel, with memories at several depths:
    each stored fold is what a walk over all of its ancestors finds."""
    team_room = public_channel(room.connector, title="#team")
    secret = room.say(room.alice_dm, room.alice, "I am interviewing elsewhere next week.")
    plan = room.say(room.general, room.bob, "The release is on Thursday.")
    private = room.remember(secret, "Interviewing elsewhere.")
    public = room.remember(plan, "Release on Thursday.")
    first = room.reply(room.alice_dm, "Good luck with the interviews.", history=[secret.pk], memory=[private])
    second = room.reply(room.general, "Thursday it is.", history=[plan.pk, first.pk], memory=[public])
    third = room.reply(room.alice_mobile_dm, "Both noted.", history=[first.pk, second.pk, secret.pk])
    fourth = room.reply(team_room, "Summary.", history=[third.pk, plan.pk], memory=[public, private])
    replies = [first, second, third, fourth]

    for reply in replies:
        reply.refresh_from_db()
        folded = (sorted(reply.lineage_audiences, key=str), reply.lineage_conversation_ids, reply.lineage_revision_ids)
        assert folded == full_walk(reply)
    assert fourth.lineage_conversation_ids == sorted([room.alice_dm.pk, room.general.pk, room.alice_mobile_dm.pk])
    assert fourth.lineage_revision_ids == sorted([private, public])
    assert room.visible(third, room.alice_mobile_dm)
    assert not room.visible(fourth, team_room)


def test_a_reply_built_on_a_reply_of_unknown_lineage_is_of_unknown_lineage(room: Room) -> None:
    """The first reply was built on a line that had no source evidence when the reply was stored: its
    fold is unknown, and stays so. Evidence that arrives later does not make a reply built on that
    reply disclosable; one built on the line itself, now authenticated, is."""
    line = room.say(room.general, room.bob, "Lunch is at noon.", authenticated=False)
    first = room.reply(room.general, "Noted: lunch at noon.", history=[line.pk])
    first.refresh_from_db()
    assert first.lineage_audiences == [["unknown", "", []]]

    MessageSourceEvidence.objects.create(message=line, method=EvidenceMethod.CONNECTOR_SIGNED)
    on_the_reply = room.reply(room.general, "As I said, noon.", history=[first.pk])
    on_the_line = room.reply(room.general, "Lunch at noon, confirmed.", history=[line.pk])

    on_the_reply.refresh_from_db()
    assert on_the_reply.lineage_audiences == [["unknown", "", []]]
    assert not room.visible(on_the_reply, room.general)
    assert room.visible(on_the_line, room.general)


def test_a_source_reply_stored_without_its_fold_sends_the_fold_to_the_full_walk(room: Room) -> None:
    """A reply whose fold is empty although it has sources (stored before folds existed) is not taken
    at its word: the reply built on it is folded by walking every ancestor, so it still names the DM
    its source's source came from, and deleting that DM withholds it."""
    secret = room.say(room.alice_dm, room.alice, "My badge number is 4471.")
    first = room.reply(room.alice_mobile_dm, "Got it.", history=[secret.pk])
    with pgtrigger.ignore("history.Message:append_only"), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE history_message SET lineage_audiences = '[]', lineage_conversation_ids = '{}' WHERE id = %s",
            [first.pk],
        )
    second = room.reply(room.alice_mobile_dm, "Your badge is ready.", history=[first.pk])

    second.refresh_from_db()
    assert second.lineage_audiences == [["members", room.connector.namespace, [room.alice.pk]]]
    assert second.lineage_conversation_ids == sorted([room.alice_dm.pk, room.alice_mobile_dm.pk])
    assert room.visible(second, room.alice_mobile_dm)
    assert not room.visible(second, room.general)

    conversation_delete(conversation=room.alice_dm)
    assert not room.visible(second, room.alice_mobile_dm)
