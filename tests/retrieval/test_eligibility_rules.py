"""Each eligibility rule, through the recall service: grants, explicit restrictions, local portability,
identity links and unknown provenance."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.utils import timezone

from accounts.models import IdentityLink
from history.models import Conversation
from memory.models import RetrievalEvent, SharingGrant
from memory.services import Belief, Provenance, memory_remember
from tests.factories import ActorFactory, ConnectorFactory, direct_conversation, public_channel
from tests.retrieval.conftest import Workspace, revision_ids


def grant(revision_id: int, agent_id: int, into: Conversation) -> SharingGrant:
    audience = into.audience
    return SharingGrant.objects.create(
        agent_id=agent_id,
        revision_id=revision_id,
        conversation=into,
        granted_by_user=User.objects.create(username=f"op{revision_id}"),
        audience_kind=audience.kind,
        audience_namespace=audience.namespace,
        audience_readers=list(audience.readers),
    )


def test_a_live_grant_discloses_a_private_revision_and_revoking_it_hides_it_again(ws: Workspace) -> None:
    launch = ws.remember("The launch moved to March 3.", said_in=ws.alice_dm, by=ws.alice)
    question = "When is the launch? March?"
    assert launch.pk not in revision_ids(ws.ask(ws.general, ws.bob, question))

    shared = grant(launch.pk, ws.agent.pk, ws.general)
    assert launch.pk in revision_ids(ws.ask(ws.general, ws.bob, question))
    # Only in the conversation it was approved for: the grant's public audience would reach Bob's DM,
    # but the consent was for the channel.
    assert launch.pk not in revision_ids(ws.ask(ws.bob_dm, ws.bob, question))

    shared.revoked_at = timezone.now()
    shared.save(update_fields=["revoked_at"])
    assert launch.pk not in revision_ids(ws.ask(ws.general, ws.bob, question))


def test_a_memory_restricted_to_one_conversation_appears_only_there(ws: Workspace) -> None:
    said = ws.say(ws.general, ws.victor, "For this channel only: standup is at 9:15")
    only_here = memory_remember(
        agent=ws.agent,
        belief=Belief(body="Standup is at 9:15.", restricted_to_conversation_id=ws.general.pk),
        provenance=Provenance(source_message_id=said.pk),
    ).revision
    elsewhere = public_channel(ws.connector, project="atlas")

    assert only_here.pk in revision_ids(ws.ask(ws.general, ws.bob, "When is standup?"))
    assert only_here.pk not in revision_ids(ws.ask(elsewhere, ws.bob, "When is standup?"))


def test_local_beliefs_from_another_project_need_their_subject_named(ws: Workspace) -> None:
    """A local fact learned in project atlas is withheld in project zephyr unless its subject is named."""
    local = ws.remember(
        "Deploys from the blue jump host.",
        said_in=ws.general,
        by=ws.victor,
        about=ws.victor,
        portability="local",
        belief_type="resource",
    )
    zephyr = public_channel(ws.connector, project="zephyr")

    assert local.pk in revision_ids(ws.ask(ws.general, ws.bob, "Which jump host do deploys use?"))
    assert local.pk not in revision_ids(ws.ask(zephyr, ws.bob, "Which jump host do deploys use?"))
    named = ws.ask(zephyr, ws.bob, "Which jump host does Victor deploy from?")
    assert local.pk in revision_ids(named)
    assert "(learned in atlas)" in named.rendered and named.items[0].carried


def test_a_verified_identity_link_lets_a_persons_dm_evidence_follow_them_to_their_other_dm(ws: Workspace) -> None:
    email = ConnectorFactory.create(agent=ws.agent, type="email", name="acme.com")
    alice_mail = ActorFactory.create(connector=email, display_name="Alice", external_id="alice@acme.com")
    alice_mail_dm = direct_conversation(email, alice_mail)
    fact = ws.remember("Prefers invoices as PDF.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice)
    question = "How do I want invoices? PDF?"
    assert fact.pk not in revision_ids(ws.ask(alice_mail_dm, alice_mail, question))

    first, second = sorted([ws.alice, alice_mail], key=lambda a: a.pk)
    link = IdentityLink.objects.create(
        agent=ws.agent, actor_a=first, actor_b=second, proof="confirmed from both accounts", verified_at=timezone.now()
    )
    assert fact.pk in revision_ids(ws.ask(alice_mail_dm, alice_mail, question))
    assert fact.pk not in revision_ids(ws.ask(ws.bob_dm, ws.bob, question))  # only the same person

    link.revoked_at = timezone.now()
    link.save(update_fields=["revoked_at"])
    assert fact.pk not in revision_ids(ws.ask(alice_mail_dm, alice_mail, question))


def test_unknown_provenance_is_withheld_and_counted_never_returned(ws: Workspace) -> None:
    ws.remember("The vault is on the third floor.", said_in=ws.general, by=ws.bob)
    before = ws.ask(ws.general, ws.alice, "Who keeps the vault combination?")
    assert before.withheld_unknown == 0

    unknown = ws.remember(
        "The vault combination is kept by facilities.", said_in=ws.general, by=ws.bob, authenticated=False
    )

    result = ws.ask(ws.general, ws.alice, "Who keeps the vault combination?")

    assert unknown.pk not in revision_ids(result)
    assert result.withheld_unknown == 1
    assert RetrievalEvent.objects.get(trace_id=result.trace_id).withheld_unknown_count == 1
